"""`lahar bench colocation`'s pure pieces: the open-loop schedule, percentiles, the protocols'
answer sizes, the verdicts of the issue's targets, the reaction to a load step, the tables and
the plot, and the refusal of bad arguments. The real runs are in test_colocation_bench.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lahar.bench.colocation import Segment, intended_times, main, percentiles
from lahar.bench.colocation.matrix import (
    Cell,
    Point,
    changes_seen,
    disturbed,
    http_content_length,
    isolation_notes,
    nginx_config,
    pool,
    pooled_table,
    protocol,
    reaction,
    reaction_table,
    series_csv,
    summarise,
    table,
    tails_table,
    without,
)
from lahar.bench.colocation.svg import line_chart


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
    # each round's mean online wait share is kept beside its p99, to tell CPU waits from others
    rounds["lahar"] = [phase(3.0) | {"online_wait_share_mean": 0.02}, phase(30.0) | {"online_wait_share_mean": 0.4}]
    assert summarise(rounds, cpu, [])["modes"]["lahar"]["wait_share_runs"] == [0.02, 0.4]


def test_memory_cells_count_the_be_work_kept_and_say_what_cannot_be_isolated() -> None:
    stream = Cell("redis", "high", "stream")
    phases = {"solo": [phase(0.2)], "kubelet": [phase(2.0, be=1.6)], "lahar": [phase(1.5, be=1.2)]}
    result = summarise(phases, stream, [], "no resctrl in this kernel")
    assert result["modes"]["lahar"]["harvest"] == 0.75 and result["harvest_bar"] == 0.7
    assert "resctrl" in result["not_isolated"]
    assert "MISSED" in table([{**result, "cell": stream.name}])  # held 7.5x solo: said, not hidden
    tails = tails_table([{**result, "cell": stream.name}])
    assert "| redis-high-stream | 0.1 / 0.2 / 0.4 |" in tails and "0.2; 2.0; 1.5" in tails


def test_the_plot_is_an_svg_with_every_series() -> None:
    svg = line_chart(
        "t",
        [0.0, 0.05, 0.1],
        {"online wait share": [0.1, 0.2, 0.1], "BE cap (cores)": [2, 1, 2]},
        markers=[(0.05, "step")],
    )
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "online wait share" in svg
    assert "stroke-dasharray" in svg and ">step<" in svg


def test_the_caches_mix_reads_and_writes_with_known_answer_sizes() -> None:
    for kind in ("redis", "memcached"):
        proto = protocol(kind)
        assert len(proto.requests) == 10 and proto.prime == proto.requests[-1][0]  # 9 GETs, then the SET
        assert proto.requests[0][1] > 1024 and proto.requests[-1][1] < 16
    assert http_content_length(b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 1024") == 1024
    with pytest.raises(ValueError):
        http_content_length(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked")


def test_nginx_config_keeps_to_its_scratch_directory(tmp_path: Path) -> None:
    config = nginx_config(8080, tmp_path).read_text()
    assert "listen 127.0.0.1:8080;" in config and "master_process off;" in config and "daemon off;" in config
    assert (tmp_path / "www" / "lahar-bench.html").stat().st_size == 1024
    assert all(str(tmp_path) in line for line in config.splitlines() if line.strip().startswith(("pid", "error_log")))


def points(shares: list[float], start: float = 100.0) -> list[Point]:
    return [Point(start + i * 0.05, share, share, 2.0, 1.0, 2.0) for i, share in enumerate(shares)]


def test_reaction_to_a_load_step() -> None:
    before = [0.1] * 40  # 2 s at the pre-step level
    # the wait jumps at the step and is back 100 ms later
    result = reaction(points([*before, 0.8, 0.8, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]), step_at=102.0)
    assert result["baseline"] == 0.1 and result["rose"] and result["peak"] == 0.8
    assert result["reaction_ms"] == pytest.approx(100.0) and result["excess_ms"] == 100
    # it never comes back within the phase
    result = reaction(points(before + [0.8] * 20), step_at=102.0)
    assert result["reaction_ms"] is None and result["excess_ms"] == 800  # the last samples cannot be judged
    # it never rose: nothing to react to
    result = reaction(points(before + [0.05] * 20), step_at=102.0)
    assert result["rose"] is False and result["reaction_ms"] == 0.0 and result["excess_ms"] == 0
    assert reaction(points([0.5] * 10), step_at=200.0)["baseline"] is None  # no sample after the step
    # the higher load brings wait by itself (alone it waits 0.3 at p90): only what exceeds that counts
    result = reaction(points([*before, 0.8, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]), step_at=102.0, floor=0.3)
    assert result["baseline"] == 0.3 and result["reaction_ms"] == pytest.approx(50.0)


def test_reaction_table_and_series_csv() -> None:
    side = {"baseline": 0.1, "peak": 0.3, "reaction_ms": 150.0, "excess_ms": 100, "p99_after_ms": 3.0, "cap_changes": 1}
    quiet = {"seconds": 60, "cap_changes": 0, "weight_changes": 1, "writes": {"cpu.shares": 2}, "be_cap_min": 2.0}
    solo = {"wait_after_p90": 0.05, "p99_after_ms": 2.0}
    row = {"cell": "builtin-step-cpu", "solo": solo, "kubelet": side, "lahar": side, "quiet": quiet}
    text = reaction_table([{**row, "verdicts": {"reacts_within_200ms": True, "quiet_no_cap_changes": False}}])
    assert "| builtin-step-cpu | 0.05, 2.0 | 0.1, 0.3, 150.0, 100, 3.0 |" in text
    assert "quiet_no_cap_changes: MISSED" in text and "| 60, 0, 1, 2, 2.0 |" in text
    assert changes_seen([2.0, 2.0, 0.002, 0.002, 2.0]) == 2 and changes_seen([]) == 0
    csv = series_csv(points([0.1, 0.2]))
    assert csv.splitlines()[0].startswith("seconds,online_wait_share") and csv.splitlines()[2].startswith("0.050,")


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good, typo, listed = tmp_path / "good.yaml", tmp_path / "typo.yaml", tmp_path / "list.yaml"
    good.write_text("cpu_suppress: {interval_seconds: 1.0, fast_window_seconds: 1.0}\n")
    typo.write_text("cpu_supress: {}\n")
    listed.write_text("- cpu_suppress\n")
    for argv, message in (
        (["--be", "gpu"], "--be: unknown gpu"),
        (["--online", ""], "--online: unknown empty choice"),
        (["--runs", "0"], "--runs >= 1"),
        (["--without", "cpu_supress"], "unknown key(s) cpu_supress"),
        (["--reaction", "--without", "cpu_suppress"], "--without and --variant measure cells"),
        (["--variant", f"slow={typo}"], "unknown key(s) cpu_supress"),
        (["--variant", f"slow={listed}"], "not a mapping of QoS settings"),
        (["--variant", f"slow={tmp_path / 'absent.yaml'}"], "No such file"),
        (["--variant", str(good)], "expected NAME=QOS_CONFIG"),
        (["--variant", f"without-x={good}"], "expected NAME=QOS_CONFIG"),
        (["--variant", f"a={good}", "--variant", f"a={good}"], "a given twice"),
        (["--reaction", "--variant", f"a={good}"], "--without and --variant measure cells"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_an_ablation_turns_one_strategy_off_and_keeps_the_rest_of_the_config() -> None:
    config = {"cpu_suppress": {"wait_threshold": 0.4}, "memory": {"enabled": False}}
    variants = without(config, ["cpu_suppress", "cpu_priority"])
    assert variants["lahar"] is config
    assert variants["lahar-without-cpu_suppress"] == {
        "cpu_suppress": {"wait_threshold": 0.4, "enabled": False},
        "memory": {"enabled": False},
    }
    assert variants["lahar-without-cpu_priority"] == {**config, "cpu_priority": {"enabled": False}}
    assert config == {"cpu_suppress": {"wait_threshold": 0.4}, "memory": {"enabled": False}}  # not changed
    assert list(without(None, [])) == ["lahar"]
    slow = {"cpu_suppress": {"interval_seconds": 1.0}}
    assert without(config, [], {"slow": slow}) == {"lahar": config, "lahar-slow": slow}


def test_what_the_kernel_cannot_isolate_is_probed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "filesystems").write_text("nodev\tcgroup2\n")
    notes = isolation_notes("stream", tmp_path, root)
    assert notes is not None and "resctrl" in notes and "memory bandwidth" in notes and "perf counters" in notes
    (root / "proc" / "filesystems").write_text("nodev\tresctrl\n")
    (root / "sys/bus/event_source/devices/cpu").mkdir(parents=True)
    assert isolation_notes("cache", tmp_path, root) is None  # both there: nothing to say
    device = os.stat(tmp_path).st_dev
    queue = root / f"sys/dev/block/{os.major(device)}:{os.minor(device)}/queue"
    queue.mkdir(parents=True)
    (queue / "scheduler").write_text("none [mq-deadline] kyber bfq\n")
    assert "mq-deadline, not bfq" in (isolation_notes("io", tmp_path, root) or "")
    (queue / "scheduler").write_text("none mq-deadline kyber [bfq]\n")
    assert isolation_notes("pagecache", tmp_path, root) is None
    assert isolation_notes("cpu", tmp_path, root) is None


def test_a_phase_the_machine_stalled_is_told_apart() -> None:
    good = {"window_seconds": 2.01, "requests": 400, "online_cpu_cores": 0.3}
    assert disturbed(good, 2.0, 200) is None
    assert "instead of 2 s" in (disturbed({**good, "window_seconds": 9.5}, 2.0, 200) or "")
    assert "300 requests" in (disturbed({**good, "requests": 300}, 2.0, 200) or "")
    assert "did not move" in (disturbed({**good, "online_cpu_cores": 0.001}, 2.0, 200) or "")
    rounds = {mode: [phase(3.0)] for mode in ("solo", "kubelet", "lahar")}
    rounds["lahar"] = [{**phase(3.0), "retried": 2, "disturbed": "the online pod's CPU time did not move"}]
    result = summarise(rounds, Cell("redis", "high", "cpu"), [])
    assert result["modes"]["lahar"]["retried"] == 2 and "disturbed after retries, lahar" in table(
        [{**result, "cell": "redis-high-cpu"}]
    )


def matrix_run(cell: Cell, solo: list[float], kubelet: list[float], lahar: list[float]) -> dict[str, object]:
    rounds = {"solo": [phase(v) for v in solo], "kubelet": [phase(v) for v in kubelet]}
    rounds["lahar"] = [phase(v) for v in lahar]
    result = summarise(rounds, cell, [1]) | {"cell": cell.name, "agent_cpu_cores": 0.007}
    return {"benchmark": "colocation-matrix", "cells": [result], "missed": []}


def test_runs_pool_their_rounds_into_one_median(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cell = Cell("redis", "high", "cpu-requests")
    first = matrix_run(cell, [0.3, 0.3, 0.3], [4.0, 4.1, 4.2], [0.2, 2.1, 0.2])
    second = matrix_run(cell, [0.3, 0.31, 0.29], [4.0, 3.9, 6.0], [2.3, 0.21, 2.2])
    pooled = pool([first, second])
    [only] = pooled["cells"]
    assert only["runs"] == 2 and len(only["rounds"]["lahar"]) == 6
    # six rounds each: the median of 0.2, 0.2, 0.21, 2.1, 2.2, 2.3, not either run's median
    assert only["p99_ms"] == {"solo": 0.3, "kubelet": 4.05, "lahar": 1.155}
    assert only["slow_rounds"] == {"solo": 0, "kubelet": 6, "lahar": 3}  # above 2 x the pooled solo median
    assert only["ratios"]["lahar_vs_kubelet"] == 0.285 and only["cap_changes"] == 2
    assert only["verdicts"]["holds_solo_where_kubelet_does_not"] is False
    assert pooled["missed"] == ["redis-high-cpu-requests: holds_solo_where_kubelet_does_not"]
    assert "| redis-high-cpu-requests | 2 | 6 | 0.3 | 4.05 | 1.155 |" in pooled_table(pooled["cells"])

    files = []
    for index, run in enumerate((first, second)):
        files.append(tmp_path / f"run{index}.json")
        files[-1].write_text(json.dumps(run))
    assert main(["--pool", *map(str, files), "--out", str(tmp_path / "pooled")]) == 0
    assert "redis-high-cpu-requests" in capsys.readouterr().out
    assert json.loads((tmp_path / "pooled" / "pooled.json").read_text())["cells"][0]["p99_ms"]["lahar"] == 1.155

    (tmp_path / "other.json").write_text(json.dumps({"benchmark": "colocation-reaction", "cells": []}))
    for bad, message in ((tmp_path / "missing.json", "No such file"), (tmp_path / "other.json", "not a matrix.json")):
        with pytest.raises(SystemExit) as exit_info:
            main(["--pool", str(bad)])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
