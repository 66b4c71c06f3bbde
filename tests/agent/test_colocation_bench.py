"""`lahar bench colocation` for real: the third-party servers spoken to on loopback, and short
real cells and load steps on this machine's cgroup v1 that check the figures are there and sane,
not their values (the machine is shared; figures are for the benchmark's own runs), and that
nothing is left behind: no cgroup in any hierarchy (the unified mirror too), no process."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from lahar.bench.colocation import BENCH_PREFIX, CGROUP_ROOT, Segment, cgroup_problem, main
from lahar.bench.colocation.matrix import load_fixed, online_command, protocol
from lahar.endpoints import free_loopback_port

SKIP_REASON = cgroup_problem()
real_cgroups = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


def nothing_left() -> bool:
    """No cgroup of this test process's bench trees in any hierarchy (the unified mirror too), and
    no live process in one."""
    mine = f"{BENCH_PREFIX}{os.getpid()}-"
    cgroups = list(CGROUP_ROOT.glob(f"*/{mine}*"))
    processes = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mine in (entry / "cgroup").read_text() and "Z" not in (entry / "stat").read_text().split()[2]:
                    processes.append(entry.name)
            except OSError:
                continue
    assert not cgroups and not processes, (cgroups, processes)
    return True


@pytest.mark.parametrize("kind", ["redis", "memcached", "nginx"])
def test_the_protocols_against_the_real_servers(kind: str, tmp_path: Path) -> None:
    server = {"redis": "redis-server", "memcached": "memcached", "nginx": "nginx"}[kind]
    if shutil.which(server) is None:
        pytest.skip(f"{server} is not installed (scripts/setup.sh installs it as root)")
    port = free_loopback_port()
    process = subprocess.Popen(
        online_command(kind, port, tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert process.poll() is None, f"{server} exited with {process.returncode}"
                assert time.monotonic() < deadline, f"{server} did not listen"
                time.sleep(0.05)
        start = time.monotonic() + 0.1
        figures = load_fixed(
            port, protocol(kind, port), start, [Segment(0.8, 200), Segment(0.4, 500)], 0.2, time.monotonic() + 30
        )
    finally:
        process.kill()
        process.wait()
    assert figures["sent"] == figures["answered"] == 160 + 200  # every answer framed, none left over
    low, high = figures["segments"]
    assert low["requests"] == 120 and high["requests"] == 200 and low["unanswered"] == high["unanswered"] == 0
    assert 0 < low["p50_ms"] <= low["p99_ms"] < 1000


@real_cgroups
def test_a_short_real_cell_reports_every_figure_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--be", "cpu-requests", "--runs", "1", "--seconds", "1", "--settle", "1", "--without", "cpu_suppress"]
    code = main([*argv, "--json", "--out", str(tmp_path)])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    [cell] = summary["cells"]
    assert cell["cell"] == "builtin-low-cpu-requests" and "cgroups_left" not in cell
    for mode in ("solo", "kubelet", "lahar", "lahar-without-cpu_suppress"):
        figures = cell["modes"][mode]
        assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["p999_ms"], (mode, figures)
    assert cell["modes"]["solo"]["be_cpu_cores"] < 0.05  # BE stopped
    assert cell["modes"]["kubelet"]["be_cpu_cores"] > 0.1
    assert set(cell["verdicts"]) == {
        "never_worse_than_kubelet",
        "holds_solo_where_kubelet_does_not",
        "harvest",
        "agent_cost",
    }
    assert 0 < cell["agent_cpu_cores"] < 1
    # the ablation ran in the same rounds, with the agent's cgroup writes but no interference loop
    assert cell["ratios"]["lahar-without-cpu_suppress_vs_kubelet"] > 0
    assert cell["modes"]["lahar-without-cpu_suppress"]["cap_changes"] == 0
    assert "| lahar-without-cpu_suppress |" in (tmp_path / "matrix.md").read_text()
    assert (tmp_path / "matrix.md").exists() and (tmp_path / f"{cell['cell']}.svg").read_text().startswith("<svg")
    assert (tmp_path / f"{cell['cell']}.csv").read_text().startswith("seconds,online_wait_share")
    assert nothing_left()


@real_cgroups
def test_a_third_party_cell_beside_a_stress_ng_kind_with_the_online_pods_own_psi(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = [tool for tool in ("memcached", "stress-ng") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/setup.sh installs them as root)")
    argv = ["--online", "memcached", "--be", "cache", "--runs", "1", "--seconds", "1", "--settle", "1"]
    assert main([*argv, "--json", "--out", str(tmp_path)]) == 0
    [cell] = json.loads(capsys.readouterr().out)["cells"]
    assert cell["cell"] == "memcached-low-cache" and "resctrl" in cell["not_isolated"]
    assert all(cell["modes"][mode]["p99_ms"] for mode in ("solo", "kubelet", "lahar"))
    assert cell["modes"]["kubelet"]["be_cpu_cores"] > 0.1  # stress-ng ran in the BE pods
    # the online pod's PSI in the unified mirror was read in every mode (the sampler costs each alike)
    assert all(cell["online_wait_share_50ms"][mode]["max"] is not None for mode in ("solo", "kubelet", "lahar"))
    assert nothing_left()


@real_cgroups
def test_a_short_load_step_and_quiet_period(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--reaction", "--be", "cpu", "--step-seconds", "2", "--quiet-seconds", "1", "--settle", "1"]
    assert main([*argv, "--json", "--out", str(tmp_path)]) == 0
    [cell] = json.loads(capsys.readouterr().out)["cells"]
    assert cell["cell"] == "builtin-step-cpu" and "cgroups_left" not in cell
    for mode in ("kubelet", "lahar"):
        figures = cell[mode]
        assert figures["p99_before_ms"] and figures["p99_after_ms"] and figures["baseline"] is not None, figures
        assert (tmp_path / figures["plot"]).read_text().count("load step") == 1
    assert cell["solo"]["wait_after_p90"] is not None  # the wait the higher load brings by itself
    assert cell["quiet"]["cap_changes"] >= 0 and cell["quiet"]["seconds"] == 1
    assert set(cell["verdicts"]) == {"reacts_within_200ms", "quiet_no_cap_changes", "quiet_no_writes"}
    assert isinstance(cell["quiet"]["writes"], dict)
    assert (tmp_path / "reaction.md").read_text().startswith("| cell |")
    assert nothing_left()


def test_the_series_sampler_runs_under_sched_idle(tmp_path: Path) -> None:
    """The bench's 50 ms sampler must not delay the online pod's wake-ups: it puts itself under
    SCHED_IDLE, which the kernel preempts at any normal task's wake-up."""
    from types import SimpleNamespace

    from lahar.bench.colocation.matrix import Series

    bench = SimpleNamespace(online_dir="online", be_dirs=[], cores=2)
    run = SimpleNamespace(tree=SimpleNamespace(tree=SimpleNamespace(root=tmp_path)), bench=bench)
    with Series(run) as series:  # type: ignore[arg-type]
        deadline = time.monotonic() + 5
        while os.sched_getscheduler(series._thread.native_id or 0) != os.SCHED_IDLE:
            assert time.monotonic() < deadline, "the sampler thread never went under SCHED_IDLE"
            time.sleep(0.01)
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # only the sampler thread, not its caller
