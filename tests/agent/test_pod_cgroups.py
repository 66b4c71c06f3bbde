"""Pod cgroup discovery and per-pod usage against fake cgroup trees with the kernel's file formats,
for cgroup v1 and v2 under the cgroupfs and systemd drivers."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from lahar.agent.cgroups.layout import (
    CgroupDriver,
    CgroupVersion,
    KubeLayout,
    container_cgroups,
    detect_version,
    find_pod_cgroups,
    pod_cgroup_dir,
    pod_hierarchy,
    scan_pod_cgroups,
    v1_controller_dirs,
)
from lahar.agent.cgroups.synthetic import FakeCgroups, Usage
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.pods import OpenFiles, PodCollector
from lahar.rpc.report import PodUsage

MiB = 1 << 20
UID_A = "0f5c3a1e-7b2d-4c8e-9a61-2d3e4f5a6b7c"
UID_B = "11111111-2222-3333-4444-555555555555"
UID_C = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
CID_1 = "3f2a" + "0" * 60
CID_2 = "9c1b" + "1" * 60
SANDBOX = "5e5e" + "2" * 60


COMBINATIONS = [(v, d) for v in CgroupVersion for d in CgroupDriver]


@pytest.fixture(params=COMBINATIONS, ids=[f"v{v.value}-{d.value}" for v, d in COMBINATIONS])
def fake(request: pytest.FixtureRequest, tmp_path: Path) -> FakeCgroups:
    version, driver = request.param
    return FakeCgroups(tmp_path / "cgroup", version, driver)


def collector_for(fake: FakeCgroups) -> PodCollector:
    return PodCollector(Host(fake.root.parent, cgroup_root=fake.root), kubepods=fake.layout.kubepods)


def by_uid(usages: list[PodUsage]) -> dict[str, PodUsage]:
    return {usage.uid: usage for usage in usages}


def api_pod(
    uid: str,
    name: str,
    *,
    namespace: str = "default",
    qos: str | None = "Burstable",
    labels: Mapping[str, str] | None = None,
    containers: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running"}
    if qos is not None:
        status["qosClass"] = qos
    if containers:
        status["containerStatuses"] = [
            {"name": n, "containerID": f"containerd://{cid}"} for cid, n in containers.items()
        ]
    return {
        "metadata": {
            "uid": uid,
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": dict(spec or {"containers": [{"name": "main"}]}),
        "status": status,
    }


# --- layout -------------------------------------------------------------------------------------


def test_detect_version(tmp_path: Path) -> None:
    assert (
        detect_version(FakeCgroups(tmp_path / "v1", CgroupVersion.V1, CgroupDriver.CGROUPFS).root) is CgroupVersion.V1
    )
    assert (
        detect_version(FakeCgroups(tmp_path / "v2", CgroupVersion.V2, CgroupDriver.CGROUPFS).root) is CgroupVersion.V2
    )


def test_hybrid_host_with_empty_unified_mount_is_v1(tmp_path: Path) -> None:
    fake = FakeCgroups(tmp_path / "cgroup", CgroupVersion.V1, CgroupDriver.CGROUPFS)
    (fake.root / "unified").mkdir()
    (fake.root / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    assert detect_version(fake.root) is CgroupVersion.V1
    assert pod_hierarchy(fake.root) == fake.root / "cpuacct"


def test_v1_controller_dirs_split_co_mounted_names(tmp_path: Path) -> None:
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "memory").mkdir()
    (tmp_path / "cpu").symlink_to("cpu,cpuacct")
    dirs = v1_controller_dirs(tmp_path)
    assert dirs["cpuacct"] == tmp_path / "cpu,cpuacct"
    assert dirs["cpu"].resolve() == (tmp_path / "cpu,cpuacct").resolve()
    assert dirs["memory"] == tmp_path / "memory"


@pytest.mark.parametrize(
    ("driver", "kube_qos", "expected"),
    [
        (CgroupDriver.CGROUPFS, "Guaranteed", f"kubepods/pod{UID_A}"),
        (CgroupDriver.CGROUPFS, "Burstable", f"kubepods/burstable/pod{UID_A}"),
        (CgroupDriver.CGROUPFS, "BestEffort", f"kubepods/besteffort/pod{UID_A}"),
        (CgroupDriver.SYSTEMD, "Guaranteed", "kubepods.slice/kubepods-pod0f5c3a1e_7b2d_4c8e_9a61_2d3e4f5a6b7c.slice"),
        (
            CgroupDriver.SYSTEMD,
            "Burstable",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f5c3a1e_7b2d_4c8e_9a61_2d3e4f5a6b7c.slice",
        ),
        (
            CgroupDriver.SYSTEMD,
            "BestEffort",
            "kubepods.slice/kubepods-besteffort.slice/"
            "kubepods-besteffort-pod0f5c3a1e_7b2d_4c8e_9a61_2d3e4f5a6b7c.slice",
        ),
    ],
)
def test_pod_cgroup_dir_matches_kubelet(driver: CgroupDriver, kube_qos: str, expected: str) -> None:
    assert pod_cgroup_dir(KubeLayout(driver), UID_A, kube_qos) == expected


def test_pod_cgroup_dir_under_a_nested_kubepods_root() -> None:
    assert (
        pod_cgroup_dir(KubeLayout(CgroupDriver.CGROUPFS, "lahar/kubepods"), UID_B, "BestEffort")
        == f"lahar/kubepods/besteffort/pod{UID_B}"
    )
    assert (
        pod_cgroup_dir(KubeLayout(CgroupDriver.SYSTEMD, "lahar/kubepods"), UID_B, "Burstable")
        == "lahar/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        "11111111_2222_3333_4444_555555555555.slice"
    )


def test_find_pod_cgroups_at_every_qos_level(fake: FakeCgroups) -> None:
    paths = {
        uid: fake.add_pod(uid, qos, Usage())
        for uid, qos in ((UID_A, "Guaranteed"), (UID_B, "Burstable"), (UID_C, "BestEffort"))
    }
    assert find_pod_cgroups(fake.root) == paths
    found = {pod.uid: (pod.kube_qos_class, pod.driver) for pod in scan_pod_cgroups(pod_hierarchy(fake.root))}
    assert found == {
        UID_A: ("Guaranteed", fake.layout.driver),
        UID_B: ("Burstable", fake.layout.driver),
        UID_C: ("BestEffort", fake.layout.driver),
    }


def test_find_pod_cgroups_ignores_what_is_not_a_pod(fake: FakeCgroups) -> None:
    fake.add_pod(UID_A, "Guaranteed", Usage())
    # The QoS-level dirs themselves, a stray dir and the kubepods root's own files.
    fake.write(fake.layout.qos_dir("Burstable"), Usage())
    fake.write(f"{fake.layout.top}/system-stray", Usage())
    assert find_pod_cgroups(fake.root) == {UID_A: pod_cgroup_dir(fake.layout, UID_A, "Guaranteed")}


def test_find_pod_cgroups_without_kubepods_is_empty(fake: FakeCgroups) -> None:
    assert find_pod_cgroups(fake.root) == {}
    assert find_pod_cgroups(fake.root / "missing") == {}


def test_find_pod_cgroups_under_a_configured_root_only(tmp_path: Path) -> None:
    fake = FakeCgroups(tmp_path, CgroupVersion.V1, CgroupDriver.CGROUPFS, kubepods="lahar/kubepods")
    ours = fake.add_pod(UID_A, "BestEffort", Usage())
    FakeCgroups(tmp_path, CgroupVersion.V1, CgroupDriver.CGROUPFS).add_pod(UID_B, "BestEffort", Usage())
    assert find_pod_cgroups(tmp_path, kubepods="lahar/kubepods") == {UID_A: ours}
    assert find_pod_cgroups(tmp_path) == {UID_B: f"kubepods/besteffort/pod{UID_B}"}


def test_container_cgroups(fake: FakeCgroups) -> None:
    path = fake.add_pod(UID_A, "Burstable", Usage(), {CID_1: Usage(), CID_2: Usage()})
    assert container_cgroups(pod_hierarchy(fake.root), path) == {
        CID_1: f"{path}/{fake.container_dir(CID_1)}",
        CID_2: f"{path}/{fake.container_dir(CID_2)}",
    }
    assert container_cgroups(pod_hierarchy(fake.root), "kubepods/burstable/podgone") == {}


def test_systemd_container_scopes_of_every_runtime_but_not_conmon(tmp_path: Path) -> None:
    fake = FakeCgroups(tmp_path, CgroupVersion.V2, CgroupDriver.SYSTEMD)
    path = fake.add_pod(UID_A, "BestEffort", Usage())
    for name in (f"docker-{CID_1}.scope", f"crio-{CID_2}.scope", f"crio-conmon-{CID_2}.scope", "init.scope"):
        fake.write(f"{path}/{name}", Usage())
    assert container_cgroups(tmp_path, path) == {
        CID_1: f"{path}/docker-{CID_1}.scope",
        CID_2: f"{path}/crio-{CID_2}.scope",
    }


# --- usage --------------------------------------------------------------------------------------


def test_cpu_cores_over_the_interval_between_collects(fake: FakeCgroups) -> None:
    path = fake.add_pod(UID_A, "Burstable", Usage(cpu_seconds=100.0), {CID_1: Usage(cpu_seconds=60.0)})
    collector = collector_for(fake)
    first = by_uid(collector.collect([], now=1000.0))[UID_A]
    assert first.cpu_usage_cores == 0.0  # nothing to compare with yet
    assert first.containers[0].cpu_usage_cores == 0.0

    fake.write(path, Usage(cpu_seconds=102.5))
    fake.write(f"{path}/{fake.container_dir(CID_1)}", Usage(cpu_seconds=61.0))
    second = by_uid(collector.collect([], now=1002.0))[UID_A]
    assert second.cpu_usage_cores == pytest.approx(1.25)
    assert second.containers[0].cpu_usage_cores == pytest.approx(0.5)

    fake.write(path, Usage(cpu_seconds=102.75))
    assert by_uid(collector.collect([], now=1002.5))[UID_A].cpu_usage_cores == pytest.approx(0.5)


def test_cpu_counter_going_back_or_a_clock_standing_still_reads_zero(fake: FakeCgroups) -> None:
    path = fake.add_pod(UID_A, "Burstable", Usage(cpu_seconds=50.0))
    collector = collector_for(fake)
    collector.collect([], now=10.0)
    fake.write(path, Usage(cpu_seconds=5.0))  # a new cgroup at the same path
    assert by_uid(collector.collect([], now=11.0))[UID_A].cpu_usage_cores == 0.0
    fake.write(path, Usage(cpu_seconds=9.0))
    assert by_uid(collector.collect([], now=11.0))[UID_A].cpu_usage_cores == 0.0


def test_memory_working_set_is_usage_less_inactive_file(fake: FakeCgroups) -> None:
    fake.add_pod(
        UID_A,
        "Burstable",
        Usage(memory_bytes=500 * MiB, inactive_file_bytes=120 * MiB),
        {CID_1: Usage(memory_bytes=300 * MiB, inactive_file_bytes=20 * MiB)},
    )
    fake.add_pod(UID_B, "BestEffort", Usage(memory_bytes=10 * MiB, inactive_file_bytes=12 * MiB))
    usages = by_uid(collector_for(fake).collect([], now=1.0))
    assert usages[UID_A].memory_working_set_bytes == 380 * MiB
    assert usages[UID_A].containers[0].memory_working_set_bytes == 280 * MiB
    assert usages[UID_B].memory_working_set_bytes == 0  # floored, as kubelet does


def test_throttling(fake: FakeCgroups) -> None:
    fake.add_pod(
        UID_A,
        "Guaranteed",
        Usage(throttled_periods=42, throttled_seconds=3.25),
        {CID_1: Usage(throttled_periods=7, throttled_seconds=0.5)},
    )
    usage = by_uid(collector_for(fake).collect([], now=1.0))[UID_A]
    assert usage.cpu_throttled_periods_total == 42
    assert usage.cpu_throttled_seconds_total == pytest.approx(3.25)
    assert (usage.containers[0].cpu_throttled_periods_total, usage.containers[0].cpu_throttled_seconds_total) == (
        7,
        pytest.approx(0.5),
    )


def test_io_totals_summed_over_devices(fake: FakeCgroups) -> None:
    fake.add_pod(UID_A, "BestEffort", Usage(io_read_bytes=[4096, 1 * MiB, 7], io_write_bytes=[8192, 0, 3 * MiB]))
    usage = by_uid(collector_for(fake).collect([], now=1.0))[UID_A]
    assert usage.io_read_bytes_total == 4096 + MiB + 7
    assert usage.io_write_bytes_total == 8192 + 3 * MiB


def test_v1_io_falls_back_to_the_cfq_counters_then_to_zero(tmp_path: Path) -> None:
    fake = FakeCgroups(tmp_path, CgroupVersion.V1, CgroupDriver.CGROUPFS)
    path = fake.add_pod(UID_A, "BestEffort", Usage())
    blkio = tmp_path / "blkio" / path
    for name in ("blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_service_bytes"):
        (blkio / name).unlink()
    (blkio / "blkio.io_service_bytes_recursive").write_text(
        "8:0 Read 100\n8:0 Write 200\n8:0 Sync 300\n8:0 Async 0\n8:0 Total 300\nTotal 300\n"
    )
    usage = by_uid(collector_for(fake).collect([], now=1.0))[UID_A]
    assert (usage.io_read_bytes_total, usage.io_write_bytes_total) == (100, 200)
    shutil.rmtree(tmp_path / "blkio")  # a host without the blkio controller
    usage = by_uid(collector_for(fake).collect([], now=2.0))[UID_A]
    assert (usage.io_read_bytes_total, usage.io_write_bytes_total) == (0, 0)


def test_v1_co_mounted_cpu_and_cpuacct(tmp_path: Path) -> None:
    fake = FakeCgroups(tmp_path, CgroupVersion.V1, CgroupDriver.SYSTEMD)
    path = fake.add_pod(UID_A, "Burstable", Usage(cpu_seconds=1.0, throttled_periods=3))
    # Merge cpu/ and cpuacct/ into one `cpu,cpuacct` mount with the usual symlinks.
    shutil.copytree(tmp_path / "cpu", tmp_path / "cpu,cpuacct", dirs_exist_ok=True)
    shutil.copytree(tmp_path / "cpuacct", tmp_path / "cpu,cpuacct", dirs_exist_ok=True)
    for name in ("cpu", "cpuacct"):
        shutil.rmtree(tmp_path / name)
        (tmp_path / name).symlink_to("cpu,cpuacct")
    collector = collector_for(fake)
    collector.collect([], now=0.0)
    (tmp_path / "cpu,cpuacct" / path / "cpuacct.usage").write_text("3000000000\n")
    usage = by_uid(collector.collect([], now=4.0))[UID_A]
    assert usage.cpu_usage_cores == pytest.approx(0.5)
    assert usage.cpu_throttled_periods_total == 3


# --- pods: standalone, from the API, vanishing --------------------------------------------------


def test_standalone_reports_every_pod_cgroup_by_uid(fake: FakeCgroups) -> None:
    paths = {
        UID_A: fake.add_pod(UID_A, "Guaranteed", Usage(), {CID_1: Usage()}),
        UID_B: fake.add_pod(UID_B, "Burstable", Usage()),
        UID_C: fake.add_pod(UID_C, "BestEffort", Usage()),
    }
    usages = by_uid(collector_for(fake).collect([], now=1.0))
    assert set(usages) == {UID_A, UID_B, UID_C}
    assert [
        (u.name, u.namespace, u.kube_qos_class, u.qos_class, u.cgroup)
        for u in (usages[UID_A], usages[UID_B], usages[UID_C])
    ] == [
        (UID_A, "", "Guaranteed", "LS", paths[UID_A]),
        (UID_B, "", "Burstable", "LS", paths[UID_B]),
        (UID_C, "", "BestEffort", "BE", paths[UID_C]),
    ]
    assert [c.name for c in usages[UID_A].containers] == [CID_1]  # no names without the API


def test_api_pods_named_classed_and_only_those(fake: FakeCgroups) -> None:
    fake.add_pod(UID_A, "Burstable", Usage(memory_bytes=MiB), {CID_1: Usage(memory_bytes=MiB), SANDBOX: Usage()})
    fake.add_pod(UID_B, "BestEffort", Usage())  # on the node, not in the API's list
    pods = [
        api_pod(
            UID_A, "web-0", namespace="shop", labels={"koordinator.sh/qosClass": "LSR"}, containers={CID_1: "nginx"}
        ),
        api_pod(UID_C, "pending-0"),
    ]  # in the list, no cgroup yet
    usages = collector_for(fake).collect(pods, now=1.0)
    assert [(u.uid, u.namespace, u.name, u.qos_class, u.kube_qos_class) for u in usages] == [
        (UID_A, "shop", "web-0", "LC", "Burstable")
    ]
    # The sandbox has no status: left out, as kubelet does.
    assert [c.name for c in usages[0].containers] == ["nginx"]


def test_kube_qos_class_computed_when_status_lacks_it(fake: FakeCgroups) -> None:
    fake.add_pod(UID_A, "BestEffort", Usage())
    pod = api_pod(UID_A, "batch-0", qos=None, spec={"containers": [{"name": "main", "resources": {}}]})
    [usage] = collector_for(fake).collect([pod], now=1.0)
    assert (usage.kube_qos_class, usage.qos_class) == ("BestEffort", "BE")


def test_static_pod_found_by_its_mirror_annotation(fake: FakeCgroups) -> None:
    config_hash = "6d4a6a9c5e3b2f1a0b9c8d7e6f5a4b3c"
    fake.add_pod(config_hash, "Burstable", Usage(memory_bytes=2 * MiB))
    pod = api_pod(
        UID_A,
        "etcd-node1",
        namespace="kube-system",
        annotations={"kubernetes.io/config.mirror": config_hash},
        spec={"priorityClassName": "system-node-critical", "containers": [{"name": "etcd"}]},
    )
    [usage] = collector_for(fake).collect([pod], now=1.0)
    assert (usage.uid, usage.name, usage.qos_class, usage.memory_working_set_bytes) == (
        UID_A,
        "etcd-node1",
        "SYSTEM",
        2 * MiB,
    )


def test_pod_vanishing_between_cycles(fake: FakeCgroups) -> None:
    gone = fake.add_pod(UID_A, "Burstable", Usage(cpu_seconds=10.0), {CID_1: Usage()})
    fake.add_pod(UID_B, "BestEffort", Usage(cpu_seconds=1.0))
    collector = collector_for(fake)
    assert set(by_uid(collector.collect([], now=1.0))) == {UID_A, UID_B}
    fake.remove(gone)
    assert set(by_uid(collector.collect([], now=2.0))) == {UID_B}
    # Its CPU history was forgotten: a pod back at the same path starts from scratch.
    fake.add_pod(UID_A, "Burstable", Usage(cpu_seconds=30.0))
    assert by_uid(collector.collect([], now=3.0))[UID_A].cpu_usage_cores == 0.0


def test_pod_vanishing_while_being_read_is_skipped(tmp_path: Path) -> None:
    fake = FakeCgroups(tmp_path, CgroupVersion.V1, CgroupDriver.CGROUPFS)
    half_gone = fake.add_pod(UID_A, "Burstable", Usage())
    fake.add_pod(UID_B, "Burstable", Usage(memory_bytes=MiB))
    fake.remove(half_gone, controllers=("memory",))  # found under cpuacct, already gone from memory
    assert set(by_uid(collector_for(fake).collect([], now=1.0))) == {UID_B}


def test_empty_file_of_a_dying_cgroup_is_skipped(fake: FakeCgroups) -> None:
    path = fake.add_pod(UID_A, "Burstable", Usage())
    fake.add_pod(UID_B, "Burstable", Usage())
    hierarchy = fake.root if fake.version is CgroupVersion.V2 else fake.root / "memory"
    current = "memory.current" if fake.version is CgroupVersion.V2 else "memory.usage_in_bytes"
    (hierarchy / path / current).write_text("")
    assert set(by_uid(collector_for(fake).collect([], now=1.0))) == {UID_B}


def test_container_vanishing_leaves_the_pod(fake: FakeCgroups) -> None:
    path = fake.add_pod(UID_A, "Burstable", Usage(memory_bytes=MiB), {CID_1: Usage(), CID_2: Usage()})
    collector = collector_for(fake)
    assert len(by_uid(collector.collect([], now=1.0))[UID_A].containers) == 2
    fake.remove(f"{path}/{fake.container_dir(CID_2)}")
    usage = by_uid(collector.collect([], now=2.0))[UID_A]
    assert [c.name for c in usage.containers] == [CID_1]
    assert usage.memory_working_set_bytes == MiB


def test_missing_cgroup_root_reports_nothing(tmp_path: Path) -> None:
    collector = PodCollector(Host(tmp_path, cgroup_root=tmp_path / "nothing-here"))
    assert collector.collect([], now=1.0) == []
    assert collector.collect([api_pod(UID_A, "a")], now=2.0) == []


# --- files kept open between cycles -------------------------------------------------------------


def test_open_files_reread_fresh_content_and_close_what_a_cycle_left_unread(tmp_path: Path) -> None:
    first, second = tmp_path / "cpuacct.usage", tmp_path / "memory.current"
    first.write_text("1\n")
    second.write_text("2\n")
    files = OpenFiles(max_open=10)
    assert (files.read(str(first)), files.read(str(second))) == (b"1\n", b"2\n")
    first.write_text("1000\n")  # the kernel regenerates a cgroup file on every read from 0
    files.close_unread()
    assert files.read(str(first)) == b"1000\n"
    assert len(files) == 2
    files.close_unread()  # `second` was not read in this cycle: its cgroup is gone
    assert len(files) == 1
    files.close()
    assert len(files) == 0


def test_open_files_reopen_when_a_kept_descriptor_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cpu.stat"
    path.write_text("usage_usec 1\n")
    files = OpenFiles(max_open=10)
    files.read(str(path))
    real_pread = os.pread
    failed: list[int] = []

    def pread_failing_once(fd: int, size: int, offset: int) -> bytes:
        if not failed:  # as a removed cgroup's file answers: ENODEV
            failed.append(fd)
            raise OSError(errno.ENODEV, "No such device")
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread_failing_once)
    path.write_text("usage_usec 2\n")
    assert files.read(str(path)) == b"usage_usec 2\n"  # re-created at the same path: opened again
    assert len(files) == 1
    path.unlink()
    failed.clear()
    with pytest.raises(FileNotFoundError):
        files.read(str(path))
    assert len(files) == 0


def test_open_files_beyond_the_cap_are_read_and_closed(tmp_path: Path) -> None:
    paths = [tmp_path / f"f{n}" for n in range(3)]
    for n, path in enumerate(paths):
        path.write_text(f"{n}\n")
    files = OpenFiles(max_open=1)
    assert [files.read(str(p)) for p in paths] == [b"0\n", b"1\n", b"2\n"]
    assert len(files) == 1
    assert files.read_optional(str(tmp_path / "missing")) is None


def test_collector_keeps_one_descriptor_per_file_read_and_closes_them(fake: FakeCgroups) -> None:
    path = fake.add_pod(UID_A, "Burstable", Usage(), {CID_1: Usage()})
    collector = collector_for(fake)
    collector.collect([], now=1.0)
    kept = len(collector.reader.files)
    # v1: pod 5 (cpuacct, cpu.stat, memory x2, blkio), container 4; v2: pod 4, container 3.
    assert kept == (9 if fake.version is CgroupVersion.V1 else 7)
    collector.collect([], now=2.0)
    assert len(collector.reader.files) == kept
    fake.remove(path)
    collector.collect([], now=3.0)
    assert len(collector.reader.files) == 0
    fake.add_pod(UID_B, "Burstable", Usage())
    collector.collect([], now=4.0)
    collector.close()
    assert len(collector.reader.files) == 0
