"""The runtime's cgroup tree on fake v1 and v2 roots: kubelet's layout (as the agent's KubeLayout
names it) and kubelet's values for requests and limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lahar.agent.cgroups.layout import find_pod_cgroups
from lahar.node.cgroups import (
    CgroupLimits,
    CgroupsUnavailable,
    CgroupTree,
    container_limits,
    limit_files,
    pod_cgroup_limits,
)

UID = "0b7c6f8e-1111-4222-8333-444455556666"
PARENT = "lahar-kubepods"


def v1_root(tmp_path: Path) -> Path:
    root = tmp_path / "v1"
    for controller in ("cpu", "cpuacct", "memory", "cpuset", "blkio"):
        (root / controller).mkdir(parents=True)
    (root / "cpuset" / "cpuset.cpus").write_text("0-3\n")
    (root / "cpuset" / "cpuset.mems").write_text("0\n")
    return root


def v2_root(tmp_path: Path) -> Path:
    root = tmp_path / "v2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def read(path: Path) -> str:
    return path.read_text().strip()


def resources(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    return {"resources": {"requests": requests or {}, "limits": limits or {}}}


def test_kubelet_values_from_requests_and_limits() -> None:
    assert container_limits({}) == CgroupLimits(cpu_shares=2)
    assert container_limits(resources({"cpu": "250m", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"})) == CgroupLimits(
        cpu_shares=256, cpu_quota_us=100_000, memory_limit_bytes=2 << 30
    )
    limited = {"name": "a", **resources({"cpu": "500m"}, {"cpu": "500m", "memory": "1Gi"})}
    unlimited = {"name": "b", **resources({"cpu": "1"})}
    # The pod's quota and memory limit exist only when every container has one.
    assert pod_cgroup_limits({"spec": {"containers": [limited, unlimited]}}) == CgroupLimits(cpu_shares=1536)
    assert pod_cgroup_limits({"spec": {"containers": [limited, limited]}}) == CgroupLimits(
        cpu_shares=1024, cpu_quota_us=100_000, memory_limit_bytes=2 << 30
    )


def test_limit_files_per_version() -> None:
    from lahar.agent.cgroups.layout import CgroupVersion

    limits = CgroupLimits(cpu_shares=1024, cpu_quota_us=50_000, memory_limit_bytes=64 << 20)
    assert limit_files(limits, CgroupVersion.V1) == [
        ("cpu.shares", "1024"),
        ("cpu.cfs_period_us", "100000"),
        ("cpu.cfs_quota_us", "50000"),
        ("memory.limit_in_bytes", str(64 << 20)),
    ]
    assert limit_files(CgroupLimits(), CgroupVersion.V2) == [
        ("cpu.weight", "1"),
        ("cpu.max", "max 100000"),
        ("memory.max", "max"),
    ]


def test_v1_tree_in_every_controller(tmp_path: Path) -> None:
    root = v1_root(tmp_path)
    tree = CgroupTree(root, PARENT)
    tree.setup(node_cpu_millis=4000)

    assert read(root / "cpu" / PARENT / "cpu.shares") == "4096"
    assert read(root / "cpu" / PARENT / "besteffort" / "cpu.shares") == "2"
    assert read(root / "cpuset" / PARENT / "besteffort" / "cpuset.cpus") == "0-3"  # inherited, or no task could join
    pod_path = tree.pod_path(UID, "BestEffort")
    tree.create(pod_path, CgroupLimits())
    tree.create(f"{pod_path}/abc123", CgroupLimits(cpu_shares=2, memory_limit_bytes=1 << 20))

    assert pod_path == f"{PARENT}/besteffort/pod{UID}"
    for controller in ("cpu", "cpuacct", "memory", "cpuset", "blkio"):
        assert (root / controller / pod_path / "abc123").is_dir()
    assert read(root / "memory" / pod_path / "abc123" / "memory.limit_in_bytes") == str(1 << 20)
    assert tree.procs_files(f"{pod_path}/abc123")[0] == root / "cpu" / pod_path / "abc123" / "cgroup.procs"
    # The agent finds the pod where the runtime put it.
    assert find_pod_cgroups(root, PARENT) == {UID: pod_path}

    tree.remove(pod_path)
    assert not any((root / c / pod_path).exists() for c in ("cpu", "memory", "cpuset"))
    tree.teardown()
    assert not any((root / c / PARENT).exists() for c in ("cpu", "cpuacct", "memory", "cpuset", "blkio"))


def test_v2_tree_enables_controllers_and_writes_v2_files(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    tree = CgroupTree(root, PARENT)
    tree.setup(node_cpu_millis=2000)
    pod_path = tree.pod_path(UID, "Guaranteed")
    tree.create(pod_path, CgroupLimits(cpu_shares=512, cpu_quota_us=50_000, memory_limit_bytes=64 << 20))

    assert pod_path == f"{PARENT}/pod{UID}"  # Guaranteed pods sit directly under the parent
    assert read(root / pod_path / "cpu.max") == "50000 100000"
    assert read(root / pod_path / "memory.max") == str(64 << 20)
    assert read(root / pod_path / "cpu.weight") == "20"
    assert read(root / PARENT / "besteffort" / "cpu.weight") == "1"
    for controller in ("cpu", "memory", "io", "cpuset", "pids"):
        assert f"+{controller}" in read(root / "cgroup.subtree_control")
        assert f"+{controller}" in read(root / PARENT / "cgroup.subtree_control")
    assert find_pod_cgroups(root, PARENT) == {UID: pod_path}

    tree.teardown()
    assert not (root / PARENT).exists()


def test_setup_says_why_cgroups_cannot_be_used(tmp_path: Path) -> None:
    with pytest.raises(CgroupsUnavailable, match="cpu, cpuacct, memory are not mounted"):
        CgroupTree(tmp_path / "empty", PARENT).setup(1000)

    root = v1_root(tmp_path)
    (root / "memory" / PARENT).write_text("")  # something in the way: no cgroup can be made there
    with pytest.raises(CgroupsUnavailable, match="cannot create cgroups"):
        CgroupTree(root, PARENT).setup(1000)
    assert not (root / "cpu" / PARENT).exists()  # what it had made is gone again


def test_v1_tree_is_mirrored_into_the_unified_mount_for_per_pod_psi(tmp_path: Path) -> None:
    root = v1_root(tmp_path)
    (root / "unified").mkdir()
    (root / "unified" / "cgroup.procs").write_text("")  # a cgroup2 mount, as the kernel shows it
    tree = CgroupTree(root, PARENT)
    tree.setup(node_cpu_millis=2000)
    pod_path = tree.pod_path(UID, "Burstable")
    tree.create(f"{pod_path}/abc123", CgroupLimits(cpu_shares=512))

    assert (root / "unified" / pod_path / "abc123").is_dir()  # the agent's PSI path for the pod
    assert root / "unified" / pod_path / "abc123" / "cgroup.procs" in tree.procs_files(f"{pod_path}/abc123")
    assert not (root / "unified" / pod_path / "cpu.shares").exists()  # no controller there: nothing written
    tree.teardown()
    assert not (root / "unified" / PARENT).exists()


def test_a_directory_named_unified_that_is_no_cgroup2_mount_is_left_alone(tmp_path: Path) -> None:
    root = v1_root(tmp_path)
    (root / "unified").mkdir()
    tree = CgroupTree(root, PARENT)
    tree.setup(node_cpu_millis=1000)
    assert not (root / "unified" / PARENT).exists()
    tree.teardown()


def test_an_unwritable_unified_mount_costs_the_signal_not_the_runtime(tmp_path: Path) -> None:
    root = v1_root(tmp_path)
    (root / "unified").mkdir()
    (root / "unified" / "cgroup.procs").write_text("")
    (root / "unified" / PARENT).write_text("")  # in the way: the mirror cannot be made
    tree = CgroupTree(root, PARENT)
    tree.setup(node_cpu_millis=1000)
    assert (root / "cpu" / PARENT).is_dir()
    assert all(h.name != "unified" for h in tree.hierarchies)
    tree.teardown()


@pytest.mark.skipif(
    not (Path("/sys/fs/cgroup/unified/cgroup.procs").exists()), reason="no cgroup2 mount at /sys/fs/cgroup/unified"
)
def test_a_real_pod_has_its_own_cpu_pressure_in_the_unified_mount() -> None:
    import os
    import secrets
    import subprocess
    import time

    from lahar.agent.cgroups.layout import v1_write_problem
    from lahar.node.cgroups import CGROUP_ROOT

    problem = v1_write_problem(CGROUP_ROOT, ("cpu", "cpuacct", "memory"))
    if problem is not None:
        pytest.skip(problem)
    parent = f"lahar-test-unified-{os.getpid()}-{secrets.token_hex(3)}"
    tree = CgroupTree(CGROUP_ROOT, parent)
    process = None
    try:
        tree.setup(node_cpu_millis=1000)
        path = f"{tree.pod_path(UID, 'Burstable')}/abc123"
        tree.create(path, CgroupLimits(cpu_shares=512))
        joins = " && ".join(f"echo $$ > {f}" for f in tree.procs_files(path))
        process = subprocess.Popen(["sh", "-c", f"{joins} && exec sleep 30"])
        unified = CGROUP_ROOT / "unified" / path
        deadline = time.monotonic() + 5
        while str(process.pid) not in (unified / "cgroup.procs").read_text().split():
            assert time.monotonic() < deadline, "the container never joined its unified mirror"
        assert (unified / "cpu.pressure").read_text().startswith("some ")
    finally:
        if process is not None:
            process.kill()
            process.wait()
        tree.teardown()
    assert not any((h / parent).exists() for h in tree.hierarchies)
    assert not (CGROUP_ROOT / "unified" / parent).exists()
