"""`lahar bench colocation`: its pure pieces (schedule, percentiles, the protocols' answer sizes,
the verdicts, the plot), the third-party servers spoken to for real on loopback, and one short
real cell on this machine's cgroup v1 that checks the figures are there and sane, not their values
(the machine is shared; figures are for the benchmark's own runs)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from lahar.bench.colocation import BENCH_PREFIX, CGROUP_ROOT, Segment, cgroup_problem, intended_times, main, percentiles
from lahar.bench.colocation_matrix import Cell, load_fixed, protocol, summarise, table
from lahar.bench.svg import line_chart
from lahar.endpoints import free_loopback_port

SKIP_REASON = cgroup_problem()


def test_open_loop_schedule() -> None:
    times = intended_times(10.0, [Segment(1.0, 4), Segment(0.5, 10)])
    assert times[:4] == [10.0, 10.25, 10.5, 10.75]
    assert times[4:] == pytest.approx([11.0 + i / 10 for i in range(5)])


def test_percentiles_nearest_rank() -> None:
    latencies = [i / 1000 for i in range(1, 1001)]  # 1..1000 ms
    assert percentiles(latencies) == {"p50_ms": 500.0, "p99_ms": 990.0, "p999_ms": 999.0}
    assert percentiles([]) == {"p50_ms": None, "p99_ms": None, "p999_ms": None}


def phase(p99: float, be: float = 1.0, harvest: float = 0.95) -> dict[str, float]:
    return {
        "p50_ms": p99 / 2,
        "p99_ms": p99,
        "p999_ms": p99 * 2,
        "online_cpu_cores": 0.2,
        "be_cpu_cores": be,
        "other_cpu_cores": 0.0,
        "be_harvest_ratio_net_of_other": harvest,
    }


def test_verdicts_follow_the_issues_targets() -> None:
    cpu = Cell("builtin", "low", "cpu-requests")
    # kubelet lets p99 reach 9x solo; Lahar holds 1.05x solo and harvests 0.95
    result = summarise({"solo": [phase(3.0)], "kubelet": [phase(27.0)], "lahar": [phase(3.15)]}, cpu, [0])
    assert result["ratios"] == {"kubelet_vs_solo": 9.0, "lahar_vs_solo": 1.05, "lahar_vs_kubelet": 0.117}
    assert result["verdicts"] == {
        "never_worse_than_kubelet": True,
        "holds_solo_where_kubelet_does_not": True,
        "harvest": True,
    }
    # kubelet below 1.10x solo: only "never worse" applies; 1.06x kubelet misses it
    result = summarise({"solo": [phase(3.0)], "kubelet": [phase(3.0)], "lahar": [phase(3.18, harvest=0.8)]}, cpu, [2])
    assert result["verdicts"] == {
        "never_worse_than_kubelet": False,
        "holds_solo_where_kubelet_does_not": None,
        "harvest": False,
    }
    assert result["cap_changes"] == 2
    # the median of the rounds
    rounds = {mode: [phase(3.0), phase(4.0), phase(30.0)] for mode in ("solo", "kubelet", "lahar")}
    assert summarise(rounds, cpu, [])["modes"]["lahar"]["p99_ms"] == 4.0


def test_memory_cells_count_the_be_work_kept_and_say_what_cannot_be_isolated() -> None:
    stream = Cell("redis", "high", "stream")
    result = summarise(
        {"solo": [phase(0.2)], "kubelet": [phase(2.0, be=1.6)], "lahar": [phase(1.5, be=1.2)]}, stream, []
    )
    assert result["modes"]["lahar"]["harvest"] == 0.75 and result["harvest_bar"] == 0.7
    assert "resctrl" in result["not_isolated"]
    assert "MISSED" in table([{**result, "cell": stream.name}])  # held 7.5x solo: said, not hidden


def test_the_plot_is_an_svg_with_every_series() -> None:
    svg = line_chart("t", [0.0, 0.05, 0.1], {"online wait share": [0.1, 0.2, 0.1], "BE cap (cores)": [2, 1, 2]})
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "online wait share" in svg


@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_the_protocols_against_the_real_servers(kind: str, tmp_path: Path) -> None:
    server = {"redis": "redis-server", "memcached": "memcached"}[kind]
    if shutil.which(server) is None:
        pytest.skip(f"{server} is not installed (scripts/setup.sh installs it as root)")
    port = free_loopback_port()
    argv = (
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
        if kind == "redis"
        else [server, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-t", "1", "-u", "root"]
    )
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"{server} did not listen"
                time.sleep(0.05)
        figures = load_fixed(port, protocol(kind), time.monotonic() + 0.1, 200, 1.0, 0.2, time.monotonic() + 30)
    finally:
        process.kill()
        process.wait()
    assert figures["requests"] > 100 and figures["unanswered"] == 0
    assert 0 < figures["p50_ms"] <= figures["p99_ms"] < 1000


@pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
def test_a_short_real_cell_reports_every_figure_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["--be", "cpu-requests", "--runs", "1", "--seconds", "1", "--settle", "1", "--json", "--out", str(tmp_path)]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    [cell] = summary["cells"]
    assert cell["cell"] == "builtin-low-cpu-requests" and "cgroups_left" not in cell
    for mode in ("solo", "kubelet", "lahar"):
        figures = cell["modes"][mode]
        assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["p999_ms"], (mode, figures)
    assert cell["modes"]["solo"]["be_cpu_cores"] < 0.05  # BE stopped
    assert cell["modes"]["kubelet"]["be_cpu_cores"] > 0.1
    assert set(cell["verdicts"]) == {"never_worse_than_kubelet", "holds_solo_where_kubelet_does_not", "harvest"}
    assert (tmp_path / "matrix.md").exists() and (tmp_path / f"{cell['cell']}.svg").read_text().startswith("<svg")
    assert not list(Path(CGROUP_ROOT, "cpu").glob(f"{BENCH_PREFIX}{os.getpid()}-*"))  # nothing left behind


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["--be", "gpu"], "--be: unknown gpu"),
        (["--online", ""], "--online: unknown empty choice"),
        (["--runs", "0"], "--runs >= 1"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
