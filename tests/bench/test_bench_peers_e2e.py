"""`lahar bench peers` end to end at a tiny scale: Lahar and kube-scheduler on the real control
plane, Lahar on the embedded server, the table, JSON and plot written; a peer that cannot be built
is reported with the reason while the others run; Ctrl-C leaves no process behind. Volcano joins
where VOLCANO_SRC names a clone (scripts/build-volcano.sh)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lahar.bench import peers
from lahar.node.simulated import reclaimable

# About 40 s on an idle 2-core machine (two control plane starts and stops, three runs); much
# more when other test runs share the cores.
pytestmark = pytest.mark.timeout(360)


def test_tiny_basic_run_binds_everything_on_both_backends(
    k8s_binaries: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    volcano = os.environ.get("VOLCANO_SRC")
    if not volcano:
        monkeypatch.delenv("VOLCANO_SRC", raising=False)
    out = tmp_path / "out"
    argv = ["--scale", "0.005", "--shapes", "basic", "--runs", "1", "--out", str(out)]
    argv += ["--peers", "lahar,volcano,kube-scheduler" if volcano else "lahar,kube-scheduler,volcano"]
    assert peers.main(argv) == 0
    document = json.loads((out / "peers.json").read_text())
    real, embedded = document["results"]["basic / real"], document["results"]["basic / embedded"]
    for entry in (real["lahar"], real["kube-scheduler"], embedded["lahar"]):
        assert entry["summary"]["outcomes"] == ["all bound"], entry
        assert entry["summary"]["bound"] == [50]
        assert entry["summary"]["over_capacity"]["median"] == 0
        run = entry["runs"][0]
        assert run["pods_per_second"] > 0 and run["scheduler_cpu_s"] > 0 and run["apiserver_cpu_s"] > 0
        assert run["peak_rss_mib"] > 10
        assert run["curve"][-1][1] == 50
    if not volcano:
        assert "VOLCANO_SRC is not set" in real["volcano"]["why"]
    assert "does not serve" in embedded["kube-scheduler"]["why"]
    table = capsys.readouterr().out
    assert "| basic / real | lahar |" in table and "| basic / real | kube-scheduler |" in table
    assert (out / "peers.svg").read_text().startswith("<svg")


def test_lahar_places_batch_pods_on_what_the_agents_report_reclaimable(k8s_binaries: Path, tmp_path: Path) -> None:
    """oversubscription on kube-apiserver, 5 nodes: each node's simulated agent streams its usage
    to Lahar's report endpoint; Lahar places the batch pods on what the reports lend (6 of 500m
    in the 3,420m a node reports reclaimable), 4 a node past what requests allow, none past what
    was lent. 22 s here with the two cores shared (load average 4)."""
    out = tmp_path / "out"
    argv = ["--scale", "0.005", "--shapes", "oversubscription", "--peers", "lahar", "--backends", "real"]
    assert peers.main([*argv, "--runs", "1", "--out", str(out)]) == 0
    entry = json.loads((out / "peers.json").read_text())["results"]["oversubscription / real"]["lahar"]
    assert entry.get("runs"), entry.get("why")
    [run] = entry["runs"]
    nodes = 5
    lent = reclaimable(4000, 32 << 30, 4000 * 0.02 + 3000 * peers.ONLINE_USAGE, 0, peers.OVERSUBSCRIPTION_USAGE)
    per_node = lent["cpu"] // 500  # the batch pods' request
    assert per_node == 6 and run["outcome"].startswith("settled")
    assert run["bound"] == nodes * per_node and run["pods"] == nodes * peers.BATCH_PER_NODE
    assert run["beyond_requests"] == nodes * (per_node - 2)  # 2 a node fit in the 1,000m requests leave
    assert run["over_reclaim"] == run["over_usage"] == run["over_capacity"] == 0


def test_ctrl_c_leaves_nothing_running(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # The queues shape: its jobs arrive for 60 s whatever the scale, so the signal lands mid-run
    argv = [sys.executable, "-m", "lahar", "bench", "peers", "--scale", "0.01", "--shapes", "queues"]
    argv += ["--peers", "lahar", "--backends", "embedded", "--runs", "1", "--out", str(out)]
    # SIGINT back to its default in the child: a test run started in the background of a shell
    # without job control (`make test &`) inherits SIGINT ignored, and Python then keeps ignoring it
    bench = subprocess.Popen(
        argv,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert bench.stderr is not None
    children: list[psutil.Process] = []
    try:
        for line in bench.stderr:
            if "starting lahar" in line:
                break
        deadline = time.monotonic() + 60
        while len(children) < 2 and time.monotonic() < deadline:  # the scheduler starts right after
            children = psutil.Process(bench.pid).children(recursive=True)
            time.sleep(0.1)
        assert len(children) >= 2, "the API server and the scheduler run"
        bench.send_signal(signal.SIGINT)
        assert bench.wait(120) == 130
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
