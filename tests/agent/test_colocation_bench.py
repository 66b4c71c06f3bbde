"""`lahar bench colocation`: its pure pieces (schedule, percentiles, reaction), and one short real
run on this machine's cgroup v1 that checks the JSON keys and sane values, not the figures (the
machine is shared; figures are for the benchmark's own runs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lahar.bench.colocation import (
    CGROUP_ROOT,
    CapWatcher,
    Segment,
    cgroup_problem,
    intended_times,
    main,
    percentiles,
    reaction,
)

SKIP_REASON = cgroup_problem()


def test_open_loop_schedule() -> None:
    times = intended_times(10.0, [Segment(1.0, 4), Segment(0.5, 10)])
    assert times[:4] == [10.0, 10.25, 10.5, 10.75]
    assert times[4:] == pytest.approx([11.0 + i / 10 for i in range(5)])


def test_percentiles_nearest_rank() -> None:
    latencies = [i / 1000 for i in range(1, 1001)]  # 1..1000 ms
    assert percentiles(latencies) == {"p50_ms": 500.0, "p99_ms": 990.0, "p999_ms": 999.0}
    assert percentiles([]) == {"p50_ms": None, "p99_ms": None, "p999_ms": None}


def test_reaction_is_when_the_cap_settles_below_half_the_expected_drop() -> None:
    watcher = CapWatcher(lambda: 0.0)
    watcher.changes = [(0.0, math.inf), (1.0, 1.2), (5.1, 1.1), (5.4, 0.85), (5.5, 0.6)]
    found = reaction(watcher, step_at=5.0, expected_drop=0.6)
    assert found["cap_before_cores"] == 1.2 and found["cap_after_cores"] == 0.6
    assert found["reaction_seconds"] == pytest.approx(0.4)  # 0.85 <= 1.2 - 0.3
    assert reaction(watcher, step_at=0.5, expected_drop=0.6)["reaction_seconds"] is None  # no cap before
    watcher.changes = [(1.0, 1.2), (5.1, 0.8), (5.2, 1.2), (5.6, 0.85)]  # a dip the next tick undid
    assert reaction(watcher, step_at=5.0, expected_drop=0.6)["reaction_seconds"] == pytest.approx(0.6)
    watcher.changes = [(1.0, 0.1)]  # at the floor already
    assert "did not settle" in reaction(watcher, step_at=5.0, expected_drop=0.6)["why"]


@pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
def test_short_run_reports_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seconds", "1", "--settle", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in (
        "online_p99_solo",
        "online_p99_colocated_noqos",
        "online_p99_colocated_qos",
        "p99_ratio_noqos",
        "p99_ratio_qos",
        "be_harvest_ratio",
        "be_harvest_ratio_noqos",
        "step_reaction_seconds",
        "step_reaction_seconds_psi",
        "phases",
    ):
        assert key in result, key
    assert "agent_errors" not in result and "cgroups_left" not in result
    for name in ("solo", "colocated_noqos", "colocated_qos"):
        phase = result["phases"][name]
        assert 0 < phase["p50_ms"] <= phase["p99_ms"] <= phase["p999_ms"], (name, phase)
        assert phase["requests"] > 100 and phase["unanswered"] == 0, (name, phase)
        assert 0 < phase["online_cpu_cores"] < result["cores"], (name, phase)
    assert result["phases"]["solo"]["be_cpu_cores"] < 0.05  # no BE pods yet
    assert result["phases"]["colocated_noqos"]["be_cpu_cores"] > 0.1
    assert 0 < result["be_harvest_ratio"] <= 1.2
    assert result["p99_ratio_qos"] > 0 and result["p99_ratio_noqos"] > 0
    for step in ("step", "step_psi"):
        assert result["phases"][step]["cap_before_cores"] is not None, result["phases"][step]
    # nothing left behind
    assert not list(Path(CGROUP_ROOT, "cpu").glob(result["kubepods"]))
