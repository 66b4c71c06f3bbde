"""The agent stays inside its configured root (issue 15): a /proc, /sys or cgroup mount that is a
symlink out of it is refused at start, a pod cgroup that is a symlink out of the cgroup root is
not read, and a cgroup file that is a symlink is neither read nor written by QoS."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from lahar.agent.cgroups.layout import CgroupDriver, CgroupVersion, pod_cgroup_dir
from lahar.agent.cgroups.synthetic import FakeCgroups, Usage
from lahar.agent.collectors.host import Host, OutsideRootError, inside
from lahar.agent.collectors.pods import PodCollector
from lahar.agent.qos import knobs
from lahar.agent.qos.executor import CgroupExecutor
from lahar.agent.qos.model import Desired
from tests.agent.conftest import QosTree

UID = "0f6f8a1c-0000-4000-8000-000000000001"


def test_inside_follows_symlinks(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "stays").symlink_to(root / "a")
    assert inside(root, root / "a") and inside(root, root / "stays")
    assert not inside(root, root / "escape") and not inside(root, root / "escape" / "x")
    assert inside("/", "/anything")


@pytest.mark.parametrize("link", ["proc", "sys"])
def test_a_root_whose_proc_or_sys_leads_out_is_refused(tmp_path: Path, link: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "real").mkdir()
    (root / link).symlink_to(tmp_path / "real")
    with pytest.raises(OutsideRootError) as caught:
        Host(root).check()
    assert caught.value.errno == errno.EXDEV
    assert link in str(caught.value)


def test_a_root_with_its_own_trees_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "sys" / "fs" / "cgroup").mkdir(parents=True)
    Host(tmp_path).check()
    Host(Path("/")).check()


def test_a_pod_cgroup_symlinked_out_of_the_cgroup_root_is_not_read(tmp_path: Path) -> None:
    fake = FakeCgroups(tmp_path / "cgroup", CgroupVersion.V2, CgroupDriver.CGROUPFS)
    elsewhere = FakeCgroups(tmp_path / "elsewhere", CgroupVersion.V2, CgroupDriver.CGROUPFS)
    secret = elsewhere.add_pod(UID, "Burstable", Usage(cpu_seconds=5.0, memory_bytes=123))
    pod_dir = fake.root / pod_cgroup_dir(fake.layout, UID, "Burstable")
    pod_dir.parent.mkdir(parents=True, exist_ok=True)
    pod_dir.symlink_to(elsewhere.root / secret)
    collector = PodCollector(Host(tmp_path, cgroup_root=fake.root), kubepods=fake.layout.kubepods)
    reported = [usage for usage in collector.collect([], now=1.0) if usage.uid == UID]
    assert all(usage.memory_working_set_bytes == 0 for usage in reported), reported


def test_a_symlinked_cgroup_file_is_neither_read_nor_written(tmp_path: Path) -> None:
    """A v2 tree whose BestEffort cpu.weight is a link to a file elsewhere: QoS must not write
    through it (it counts a failure instead). Both versions share the read and write path."""
    qos_tree = QosTree(tmp_path / "cgroup", CgroupVersion.V2, CgroupDriver.SYSTEMD)
    be = qos_tree.layout.qos_dir("BestEffort")
    weight = qos_tree.root / be / "cpu.weight"
    target = tmp_path / "not-a-cgroup-file"
    target.write_text("100\n")
    weight.unlink()
    weight.symlink_to(target)
    with pytest.raises(OSError) as caught:
        knobs._read(qos_tree.root / be, "cpu.weight")
    assert caught.value.errno == errno.ELOOP
    executor = CgroupExecutor(qos_tree.root)
    assert executor.apply([Desired(be, "cpu.weight", 1)]) == 0
    assert target.read_text() == "100\n"
    assert executor.errors["cpu.weight"] >= 1
