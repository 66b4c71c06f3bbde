"""The cgroup executor and its knob bindings, against fake v1 and v2 trees: read-compare-write,
re-assertion, dry-run, the pod-hierarchy fence, hierarchical ordering, failures and counting."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from cgroupspy.controllers import BlkIOController

from lahar.agent.cgroups.layout import CgroupDriver, CgroupVersion
from lahar.agent.qos.executor import CgroupExecutor
from lahar.agent.qos.knobs import (
    CpuMax,
    IoLimits,
    V1IoLimits,
    V2IoLimits,
    device_number,
    milli_to_quota_us,
    parse_int,
    shares_to_weight,
)
from lahar.agent.qos.model import Desired
from tests.agent.conftest import QosTree


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def v1_tree(tmp_path: Path) -> QosTree:
    return QosTree(tmp_path / "cgroup", CgroupVersion.V1, CgroupDriver.CGROUPFS)


def quota_file(tree: QosTree) -> str:
    return "cpu.max" if tree.v2 else "cpu.cfs_quota_us"


# --- bindings -------------------------------------------------------------------------------


def test_integer_files_read_unlimited_as_none() -> None:
    assert [parse_int(text) for text in ("max\n", "-1\n", "9223372036854771712\n", "42\n")] == [None, None, None, 42]


def test_unit_conversions_match_kubelet() -> None:
    assert (shares_to_weight(2), shares_to_weight(1024), shares_to_weight(262144)) == (1, 39, 10000)
    assert (milli_to_quota_us(250), milli_to_quota_us(1), CpuMax.of_cores(0.0001).quota_us) == (25000, 1000, 1000)


def test_v1_io_files_have_no_trailing_space(tmp_path: Path) -> None:
    """cgroupspy's write_* names end in a space (its bug): the binding names the real files."""
    assert BlkIOController.__dict__["throttle_write_bps_device"].filename.endswith(b" ")
    for name in ("read_bps", "write_bps", "read_iops", "write_iops"):
        (tmp_path / f"blkio.throttle.{name}_device").write_text("")
    (tmp_path / "blkio.throttle.write_bps_device").write_text("8:0 1048576\n254:0 2097152\n")
    binding = V1IoLimits()
    current = binding.read(tmp_path)
    assert current == {"8:0": IoLimits(write_bps=1048576), "254:0": IoLimits(write_bps=2097152)}
    assert binding.writes(current, {"254:0": IoLimits(read_iops=50)}) == [
        ("blkio.throttle.write_bps_device", "254:0 0"),
        ("blkio.throttle.read_iops_device", "254:0 50"),
    ]


def test_v2_io_max_lines(tmp_path: Path) -> None:
    (tmp_path / "io.max").write_text("8:0 rbps=1048576 wbps=max riops=max wiops=20\n")
    binding = V2IoLimits()
    assert binding.read(tmp_path) == {"8:0": IoLimits(read_bps=1048576, write_iops=20)}
    assert binding.writes({}, {"8:16": IoLimits(write_bps=5)}) == [
        ("io.max", "8:16 rbps=max wbps=5 riops=max wiops=max")
    ]


def test_device_numbers(tmp_path: Path) -> None:
    (tmp_path / "class/block/vda").mkdir(parents=True)
    (tmp_path / "class/block/vda/dev").write_text("254:0\n")
    assert [device_number(name, tmp_path) for name in ("vda", "/dev/vda", "8:16", "sdz")] == [
        "254:0",
        "254:0",
        "8:16",
        None,
    ]


# --- read, compare, write -------------------------------------------------------------------


def test_writes_only_what_differs(qos_tree: QosTree) -> None:
    executor = CgroupExecutor(qos_tree.root)
    be = qos_tree.layout.qos_dir("BestEffort")
    desired = [Desired(be, "cpu.max", CpuMax(50_000)), Desired(be, "cpu.idle", 1)]
    assert executor.apply(desired) == 2
    assert qos_tree.read(be, quota_file(qos_tree)).startswith("50000")
    before = qos_tree.snapshot()
    assert CgroupExecutor(qos_tree.root).apply(desired) == 0  # a fresh executor reads, finds them, writes nothing
    assert qos_tree.snapshot() == before
    assert dict(executor.writes) == {"cpu.max": 1, "cpu.idle": 1}


def test_reasserts_a_value_someone_changed_after_the_interval(v1_tree: QosTree) -> None:
    clock = Clock()
    executor = CgroupExecutor(v1_tree.root, reassert_seconds=10, clock=clock)
    desired = [Desired("kubepods/besteffort", "cpu.max", CpuMax(50_000))]
    executor.apply(desired)
    v1_tree.write("kubepods/besteffort", "cpu.cfs_quota_us", "-1\n")  # kubelet, or a person
    clock.now += 5
    assert executor.apply(desired) == 0  # trusted within the interval: no read
    clock.now += 6
    assert executor.apply(desired) == 1
    assert v1_tree.read("kubepods/besteffort", "cpu.cfs_quota_us") == "50000"


def test_dry_run_logs_and_writes_nothing(qos_tree: QosTree, caplog: pytest.LogCaptureFixture) -> None:
    executor = CgroupExecutor(qos_tree.root, dry_run=True)
    be = qos_tree.layout.qos_dir("BestEffort")
    before = qos_tree.snapshot()
    with caplog.at_level(logging.INFO, "lahar.agent.qos"):
        assert executor.apply([Desired(be, "cpu.max", CpuMax(50_000))]) == 1
        assert executor.apply([Desired(be, "cpu.max", CpuMax(50_000))]) == 0  # said once per re-assertion
    assert qos_tree.snapshot() == before
    assert [r.getMessage() for r in caplog.records if "would write" in r.getMessage()] == [
        f"dry-run: would write {'50000 100000' if qos_tree.v2 else '50000'!r} to "
        f"{qos_tree.directory(be, 'cpu') / quota_file(qos_tree)} (cpu.max, was max/100000us)"
    ]


@pytest.mark.parametrize(
    "cgroup",
    [
        "system.slice",
        "/kubepods/besteffort",
        "kubepods/../system.slice",
        "kubepods-other/besteffort",
        "",
        "kubepods/besteffort/escape",
    ],
)
def test_refuses_paths_outside_the_pod_hierarchy(v1_tree: QosTree, cgroup: str) -> None:
    # A symlink under kubepods that leads out counts as outside too.
    (v1_tree.root / "cpu/kubepods/besteffort/escape").symlink_to(v1_tree.root / "cpu/system.slice")
    executor = CgroupExecutor(v1_tree.root)
    before = v1_tree.snapshot()
    assert executor.apply([Desired(cgroup, "cpu.idle", 1)]) == 0
    assert executor.read(cgroup, "cpu.idle") is None
    assert executor.refused >= 1 and v1_tree.snapshot() == before


def test_v1_cpusets_loosen_top_down_and_tighten_bottom_up(v1_tree: QosTree, caplog: pytest.LogCaptureFixture) -> None:
    pod = v1_tree.add_pod("be-1", "BestEffort", containers={"c1": None})
    chain = ["kubepods/besteffort", pod, f"{pod}/c1"]
    executor = CgroupExecutor(v1_tree.root)

    def move_to(cpus: set[int]) -> list[tuple[str, str]]:
        caplog.clear()
        with caplog.at_level(logging.DEBUG, "lahar.agent.qos"):
            executor.apply([Desired(cgroup, "cpuset.cpus", cpus) for cgroup in chain])
        return [(str(r.args[0]), str(r.args[2])) for r in caplog.records if r.args and r.args[1] == "cpuset.cpus"]

    # Narrowing: children first, so none is ever outside its parent.
    assert move_to({2, 3}) == [(f"{pod}/c1", "2-3"), (pod, "2-3"), ("kubepods/besteffort", "2-3")]
    # Moving elsewhere: the union top-down, then the new set bottom-up.
    assert move_to({0, 1}) == [
        ("kubepods/besteffort", "0-3"),
        (pod, "0-3"),
        (f"{pod}/c1", "0-3"),
        (f"{pod}/c1", "0-1"),
        (pod, "0-1"),
        ("kubepods/besteffort", "0-1"),
    ]


def test_write_only_actions_are_written_each_time(tmp_path: Path) -> None:
    tree = QosTree(tmp_path / "cgroup", CgroupVersion.V2, CgroupDriver.SYSTEMD)
    executor = CgroupExecutor(tree.root)
    be = tree.layout.qos_dir("BestEffort")
    assert executor.apply([Desired(be, "memory.reclaim", 4096)]) == 1
    assert executor.apply([Desired(be, "memory.reclaim", 4096)]) == 1
    assert executor.apply([Desired(be, "memory.reclaim", 0)]) == 0
    assert tree.read(be, "memory.reclaim") == "4096"


def test_knobs_a_version_lacks_are_skipped(v1_tree: QosTree) -> None:
    executor = CgroupExecutor(v1_tree.root)
    assert executor.apply([Desired("kubepods/burstable", "memory.low", 1 << 30)]) == 0
    assert "memory.low" not in executor.supported("kubepods") and "cpu.idle" in executor.supported("kubepods")


def test_a_failure_is_counted_and_logged_once_and_no_rights_make_qos_unavailable(
    v1_tree: QosTree, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    executor = CgroupExecutor(v1_tree.root, reassert_seconds=0, clock=clock)
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any) -> int:
        if flags & os.O_WRONLY:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    desired = [Desired("kubepods/besteffort", "cpu.idle", 1)]
    with caplog.at_level(logging.WARNING, "lahar.agent.qos"):
        for _ in range(3):
            assert executor.apply(desired) == 0
    assert executor.errors["cpu.idle"] == 3
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1
    available, reason = executor.availability()
    assert not available and "Read-only file system" in reason
    monkeypatch.setattr(os, "open", real_open)  # the rights come back (a remount)
    clock.now += 61
    assert executor.availability() == (True, "")  # so the engine tries again
    assert executor.apply(desired) == 1 and executor.denied is None


def test_a_cgroup_that_ended_is_not_an_error(v1_tree: QosTree) -> None:
    executor = CgroupExecutor(v1_tree.root)
    assert executor.apply([Desired("kubepods/besteffort/podgone", "cpu.idle", 1)]) == 0
    assert not executor.errors


def test_a_directory_not_there_yet_costs_a_stat_and_is_written_once_it_appears(
    qos_tree: QosTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubelet makes the BestEffort directory with its first BestEffort pod: until then every tick
    wants its values, and the fence's realpath walks (a few dozen lstats) must not run for it."""
    executor = CgroupExecutor(qos_tree.root)
    later = f"{qos_tree.layout.qos_dir('Burstable')}/podlater"
    desired = [Desired(later, "cpu.idle", 1), Desired(later, "cpu.max", CpuMax(50_000))]
    walks: list[str] = []
    real_realpath = os.path.realpath

    def counted_realpath(path: Any, *args: Any, **kwargs: Any) -> str:
        walks.append(str(path))
        return real_realpath(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", counted_realpath)
    for _ in range(3):
        assert executor.apply(desired) == 0
    assert walks == [] and not executor.errors and executor.refused == 0
    qos_tree.controls(later)  # the directory appears
    assert executor.apply(desired) == 2  # fenced (realpath) and written at the next tick
    assert walks and qos_tree.read(later, quota_file(qos_tree)).startswith("50000")


def test_retain_forgets_what_is_no_longer_wanted(v1_tree: QosTree) -> None:
    executor = CgroupExecutor(v1_tree.root)
    desired = Desired("kubepods/besteffort", "cpu.idle", 1)
    executor.apply([desired])
    v1_tree.write("kubepods/besteffort", "cpu.idle", "0\n")
    executor.retain([])
    assert executor.apply([desired]) == 1  # read afresh, not trusted from before
