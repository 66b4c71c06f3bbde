"""Real-kernel test on this machine's cgroup v1: a busy process in a kubelet-style pod cgroup,
measured by PodCollector. Everything lives under a unique `kubepods-test-<random>` root, passed as
the collector's kubepods root, and is removed afterwards even when the test fails."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lahar.agent.cgroups.layout import v1_controller_dirs, v1_write_problem
from lahar.agent.collectors.cpu_wait import parse_some_total
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.pods import OpenFiles, PodCollector, keyed_int
from lahar.rpc.report import PodUsage
from tests.support import agrees_within, process_cpu_seconds

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "memory")
ALLOCATED_BYTES = 32 << 20
# Runs busy on one core after it was moved into the container cgroup (the first line of stdin) and
# touched memory there, so the memory is charged to the container.
BUSY_CHILD = f"""
import sys
sys.stdin.readline()
block = bytes(range(256)) * ({ALLOCATED_BYTES} // 256)
print("ready", flush=True)
while True:
    pass
"""


SKIP_REASON = v1_write_problem(CGROUP_ROOT, CONTROLLERS)
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


@dataclass(frozen=True)
class KernelPod:
    kubepods: str
    uid: str
    container_id: str
    container_dirs: tuple[Path, ...]  # the container cgroup under each controller mount


def _mounts() -> list[Path]:
    """The controller mounts, once each (cpu and cpuacct may be one co-mounted hierarchy)."""
    controllers = v1_controller_dirs(CGROUP_ROOT)
    unique: dict[Path, Path] = {}
    for name in CONTROLLERS:
        unique.setdefault(controllers[name].resolve(), controllers[name])
    return list(unique.values())


def _rmdir(path: Path, timeout: float = 5.0) -> None:
    """rmdir a cgroup; the kernel may report it busy for a moment after its last task exits."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture
def kernel_pod() -> Iterator[KernelPod]:
    kubepods = f"kubepods-test-{secrets.token_hex(4)}"
    uid = str(uuid.uuid4())
    container_id = secrets.token_hex(32)
    levels = [
        kubepods,
        f"{kubepods}/burstable",
        f"{kubepods}/burstable/pod{uid}",
        f"{kubepods}/burstable/pod{uid}/{container_id}",
    ]
    created: list[Path] = []
    try:
        for mount in _mounts():
            for level in levels:
                (mount / level).mkdir()
                created.append(mount / level)
        # Others may load this 2-core machine meanwhile: a top weight keeps our loop on its core.
        (v1_controller_dirs(CGROUP_ROOT)["cpu"] / kubepods / "cpu.shares").write_text("262144")
        yield KernelPod(kubepods, uid, container_id, tuple(mount / levels[-1] for mount in _mounts()))
    finally:
        errors = []
        for path in reversed(created):  # bottom-up: a cgroup with children cannot go
            try:
                _rmdir(path)
            except OSError as exc:
                errors.append(f"{path}: {exc}")
        assert not errors, f"cgroups left behind: {errors}"


@pytest.fixture
def busy_child(kernel_pod: KernelPod) -> Iterator[subprocess.Popen[str]]:
    """A busy loop inside the pod's container cgroup; killed before the cgroups are removed."""
    child = subprocess.Popen(
        [sys.executable, "-c", BUSY_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        for container_dir in kernel_pod.container_dirs:
            (container_dir / "cgroup.procs").write_text(str(child.pid))
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "ready"
        yield child
    finally:
        child.kill()
        child.wait()


def test_busy_process_measures_one_core(kernel_pod: KernelPod, busy_child: subprocess.Popen[str]) -> None:
    collector = PodCollector(Host(cgroup_root=CGROUP_ROOT), kubepods=kernel_pod.kubepods)
    pod = {
        "metadata": {"uid": kernel_pod.uid, "name": "busy-0", "namespace": "test"},
        "spec": {"containers": [{"name": "busy", "resources": {"requests": {"cpu": "100m"}}}]},
        "status": {
            "qosClass": "Burstable",
            "containerStatuses": [{"name": "busy", "containerID": f"containerd://{kernel_pod.container_id}"}],
        },
    }

    usage: PodUsage | None = None

    def measure(window: float) -> tuple[float, float]:
        # What the pod's cgroup counted against what the kernel says the child (its one process)
        # used in the same window: a loaded machine slows both alike.
        nonlocal usage
        before, started = process_cpu_seconds(busy_child.pid), time.monotonic()
        collector.collect([pod], now=started)
        time.sleep(window)
        ended = time.monotonic()
        [usage] = collector.collect([pod], now=ended)
        child_cores = (process_cpu_seconds(busy_child.pid) - before) / (ended - started)
        return min(usage.cpu_usage_cores, usage.containers[0].cpu_usage_cores), child_cores

    try:
        agrees_within(measure, rel=0.1)
    finally:
        collector.close()  # kept-open files would pin the cgroups after their removal
    assert usage is not None

    assert (usage.uid, usage.name, usage.kube_qos_class, usage.qos_class) == (
        kernel_pod.uid,
        "busy-0",
        "Burstable",
        "LS",
    )
    assert usage.cgroup == f"{kernel_pod.kubepods}/burstable/pod{kernel_pod.uid}"
    [container] = usage.containers
    assert container.name == "busy"
    assert container.cpu_usage_cores == pytest.approx(usage.cpu_usage_cores, rel=0.05)
    # Anonymous memory touched inside the cgroup: no page cache to subtract.
    assert usage.memory_working_set_bytes >= ALLOCATED_BYTES
    assert container.memory_working_set_bytes >= ALLOCATED_BYTES
    assert (usage.io_read_bytes_total, usage.io_write_bytes_total) == (0, 0)  # no blkio cgroup made


def test_kept_open_file_of_a_removed_cgroup_fails_and_is_closed() -> None:
    """The kernel answers ENODEV on a descriptor of a removed cgroup: OpenFiles must drop it
    (it would pin the dead cgroup) and report the file gone."""
    cgroup = v1_controller_dirs(CGROUP_ROOT)["cpuacct"] / f"kubepods-test-{secrets.token_hex(4)}"
    cgroup.mkdir()
    files = OpenFiles(max_open=10)
    try:
        assert int(files.read(str(cgroup / "cpuacct.usage"))) == 0
        _rmdir(cgroup)
        with pytest.raises(OSError):
            files.read(str(cgroup / "cpuacct.usage"))
        assert len(files) == 0
    finally:
        files.close()
        _rmdir(cgroup)


def test_kept_open_files_see_the_counters_move_and_a_recreated_cgroup_is_read_afresh() -> None:
    """The interference loop re-reads cpuacct.usage (v1) and the pod's cpu.pressure and cpu.stat in
    the cgroup2 mirror with pread at offset 0 on descriptors kept open: the kernel must generate
    each file again on every such read (measured here, not assumed). A removed cgroup's descriptor
    is dropped, and a new cgroup made at the same path (a new pod) is opened afresh."""
    name = f"kubepods-test-{secrets.token_hex(4)}"
    v1 = v1_controller_dirs(CGROUP_ROOT)["cpuacct"] / name
    unified = CGROUP_ROOT / "unified" / name
    mirror = (CGROUP_ROOT / "unified" / "cgroup.procs").exists()
    files = OpenFiles(max_open=10)
    usage, pressure, stat = str(v1 / "cpuacct.usage"), str(unified / "cpu.pressure"), str(unified / "cpu.stat")

    def counters() -> tuple[int, ...]:
        values = (int(files.read(usage)),)
        if mirror:
            values += (
                int(parse_some_total(files.read(pressure)) * 1_000_000),
                keyed_int(files.read(stat), b"usage_usec"),
            )
        return values

    def busy_inside(seconds: float) -> None:
        """One more busy process than CPUs, all in the cgroup: some of them wait, so PSI moves too."""
        joins = f"echo $$ > {v1}/cgroup.procs" + (f" && echo $$ > {unified}/cgroup.procs" if mirror else "")
        busy = f"{joins} && exec timeout {seconds} sh -c 'while :; do :; done'"
        spinners = [subprocess.Popen(["sh", "-c", busy]) for _ in range((os.cpu_count() or 1) + 1)]
        for spinner in spinners:
            assert spinner.wait(30) in (0, 124)  # timeout's own status when it stopped the loop

    v1.mkdir()
    if mirror:
        unified.mkdir()
    try:
        first = counters()
        assert first == (0,) * len(first)
        open_before = len(files)
        busy_inside(0.3)
        moved = counters()
        assert len(files) == open_before  # the same descriptors, read again
        assert all(value > 0 for value in moved), moved  # CPU time, and (mirror) waits and usage_usec
        busy_inside(0.1)
        again = counters()
        assert all(after > before for after, before in zip(again, moved, strict=True)), (moved, again)
        _rmdir(v1)
        with pytest.raises(OSError):
            files.read(usage)
        assert len(files) == open_before - 1  # dropped: it would pin the removed cgroup
        v1.mkdir()  # a new pod's cgroup at the same path
        assert int(files.read(usage)) == 0  # opened afresh, not the old cgroup's counter
        assert len(files) == open_before
        files.close_unread()  # the end of a cycle in which all were read: all stay open
        assert int(files.read(usage)) == 0 and len(files) == open_before
        files.close_unread()  # the mirror's files were not read in this one: closed
        assert len(files) == 1
    finally:
        files.close()
        _rmdir(v1)
        _rmdir(unified)


def test_agent_once_json_agrees_with_the_kernel(kernel_pod: KernelPod, busy_child: subprocess.Popen[str]) -> None:
    """`lahar agent --once -o json` (what an SRE runs) against this machine: CPUs, memory, NUMA nodes
    and a busy pod's CPU, each compared with what the kernel says."""
    before, started = process_cpu_seconds(busy_child.pid), time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lahar",
            "agent",
            "--once",
            "-o",
            "json",
            "--node",
            "here",
            "--kubepods",
            kernel_pod.kubepods,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    child_cores = (process_cpu_seconds(busy_child.pid) - before) / (time.monotonic() - started)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["node"] == "here" and report["health"]["errors"] == {}
    assert report["cpu"]["cores"] == os.cpu_count()
    mem_total_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:")
    )
    assert report["memory"]["total_bytes"] == mem_total_kib * 1024
    node_dirs = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    assert len(report["numa"]) == max(len(node_dirs), 1)
    [pod] = [p for p in report["pods"] if p["uid"] == kernel_pod.uid]
    # The agent's window lies inside the run: what the child got over the whole run, within one
    # run (a loaded machine gives it less than a core), and the node saw at least the pod.
    assert pod["cpu_usage_cores"] == pytest.approx(child_cores, rel=0.5)
    assert report["cpu"]["usage_cores"] >= 0.9 * pod["cpu_usage_cores"]
    assert report["gpu"]["available"] is False and report["gpu"]["reason"]
