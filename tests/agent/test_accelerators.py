"""GPU and NPU collectors against fake libnvidia-ml.so.1 / libdcmi.so / npu-smi built from
tests/agent/fakes: the real nvidia-ml-py and ctypes code paths run, nothing in pynvml is patched.
Absent hardware or libraries must give `available=False` with a reason, never an exception."""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from lahar.agent.collectors.files import ABSENT_RECHECK_SECONDS
from lahar.agent.collectors.gpu import GpuCollector, pod_uid_from_cgroup
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.npu import NpuCollector, parse_npu_smi_info
from lahar.rpc.report import GpuProcess, NpuDevice

GIB = 1 << 30
MIB = 1 << 20

TRAIN_UID = "1b2c3d4e-5f60-4a1b-8c2d-3e4f5a6b7c8d"  # cgroupfs driver, cgroup v1
INFER_UID = "9f8e7d6c-5b4a-4c3d-9e2f-1a0b9c8d7e6f"  # systemd driver, cgroup v2
PODS_BY_UID = {TRAIN_UID: ("ml", "train-0"), INFER_UID: ("serving", "infer-7f9c")}

TRAIN_PID, INFER_PID, DAEMON_PID, EXITED_PID = 4242, 5151, 6161, 7171

NVML_CONFIG = f"""\
gpu0.name=NVIDIA A100-SXM4-80GB
gpu0.uuid=GPU-6f0d7a5e-1c2b-4d3e-8f9a-0b1c2d3e4f50
gpu0.util=37
gpu0.mem_total={80 * GIB}
gpu0.mem_used={10 * GIB}
gpu0.mem_reserved={512 * MIB}
gpu0.power_mw=215500
gpu0.temp=61
gpu0.compute={TRAIN_PID}:{2 * GIB},{INFER_PID}:{GIB}
gpu0.graphics={TRAIN_PID}:{2 * GIB}
gpu1.name=NVIDIA A100-PCIE-40GB
gpu1.uuid=GPU-6f0d7a5e-1c2b-4d3e-8f9a-0b1c2d3e4f51
gpu1.util=92
gpu1.mem_total={40 * GIB}
gpu1.mem_used={28 * GIB}
gpu1.power_mw=301250
gpu1.temp=74
gpu1.compute={DAEMON_PID}:{512 * MIB},{EXITED_PID}:{256 * MIB}
"""


# ---- fixtures ----


@pytest.fixture
def host(tmp_path: Path) -> Host:
    """A fake root whose /proc/<pid>/cgroup files place the GPU processes in pods."""
    root = tmp_path / "root"
    container = "0123456789abcdef" * 4
    cgroups = {
        TRAIN_PID: "".join(
            f"{line}:/kubepods/burstable/pod{TRAIN_UID}/{container}\n"
            for line in ("12:memory", "11:cpu,cpuacct", "3:pids", "1:name=systemd")
        ),
        INFER_PID: (
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
            f"{INFER_UID.replace('-', '_')}.slice/cri-containerd-{container}.scope\n"
        ),
        DAEMON_PID: "0::/system.slice/nvidia-persistenced.service\n",
    }  # EXITED_PID has no /proc entry: it ended between NVML's answer and the read
    for pid, text in cgroups.items():
        (root / "proc" / str(pid)).mkdir(parents=True)
        (root / "proc" / str(pid) / "cgroup").write_text(text)
    return Host(root=root)


@pytest.fixture
def nvml_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Writes the fake NVML's configuration; it is read at every nvmlInit."""
    path = tmp_path / "fake-nvml.conf"
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(path))
    return lambda text: path.write_text(text) and None


@pytest.fixture
def dcmi_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Writes the fake DCMI's configuration; it is read at every dcmi_init."""
    path = tmp_path / "fake-dcmi.conf"
    monkeypatch.setenv("FAKE_DCMI_CONFIG", str(path))
    return lambda text: path.write_text(text) and None


@pytest.fixture
def gpu_collectors() -> Iterator[list[GpuCollector]]:
    """Collectors registered here are closed after the test, so NVML (process-wide) is left as
    found for the next test."""
    collectors: list[GpuCollector] = []
    yield collectors
    for collector in collectors:
        collector.close()


@pytest.fixture
def fake_gpus(
    accelerator_fakes: Any, host: Host, nvml_config: Callable[[str], None], gpu_collectors: list[GpuCollector]
) -> Callable[[str], GpuCollector]:
    """A GpuCollector on the fake NVML, configured with the given text."""

    def make(config: str) -> GpuCollector:
        nvml_config(config)
        collector = GpuCollector(host, library_path=str(accelerator_fakes.nvml_library))
        gpu_collectors.append(collector)
        return collector

    return make


@pytest.fixture
def path_with_npu_smi(accelerator_fakes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepended: the script itself needs `cat` from the usual PATH.
    monkeypatch.setenv("PATH", f"{accelerator_fakes.npu_smi_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")


@pytest.fixture
def path_without_npu_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


# ---- GPUs through NVML ----


def test_nvml_reports_both_gpus_with_configured_values(fake_gpus: Callable[[str], GpuCollector]) -> None:
    report = fake_gpus(NVML_CONFIG).collect(PODS_BY_UID)

    assert report.available and report.source == "nvml" and report.reason == ""
    first, second = report.gpus
    assert (first.index, first.uuid, first.model) == (
        0,
        "GPU-6f0d7a5e-1c2b-4d3e-8f9a-0b1c2d3e4f50",
        "NVIDIA A100-SXM4-80GB",
    )
    assert first.utilization_ratio == pytest.approx(0.37)
    # nvmlMemory_v2: driver-reserved memory is not counted as used.
    assert (first.memory_used_bytes, first.memory_total_bytes) == (10 * GIB, 80 * GIB)
    assert first.power_watts == pytest.approx(215.5)
    assert first.temperature_celsius == 61.0
    assert (second.index, second.model) == (1, "NVIDIA A100-PCIE-40GB")
    assert second.utilization_ratio == pytest.approx(0.92)
    assert (second.memory_used_bytes, second.memory_total_bytes) == (28 * GIB, 40 * GIB)
    assert second.power_watts == pytest.approx(301.25)
    assert second.temperature_celsius == 74.0


def test_nvml_processes_are_attributed_to_their_pods(fake_gpus: Callable[[str], GpuCollector]) -> None:
    report = fake_gpus(NVML_CONFIG).collect(PODS_BY_UID)

    first, second = report.gpus
    # TRAIN_PID is listed as compute and graphics: one process, not two.
    assert first.processes == [
        GpuProcess(pid=TRAIN_PID, memory_bytes=2 * GIB, namespace="ml", pod="train-0"),  # cgroupfs
        GpuProcess(pid=INFER_PID, memory_bytes=GIB, namespace="serving", pod="infer-7f9c"),  # systemd
    ]
    assert second.processes == [
        GpuProcess(pid=DAEMON_PID, memory_bytes=512 * MIB),  # a system service: no pod
        GpuProcess(pid=EXITED_PID, memory_bytes=256 * MIB),  # gone from /proc: no pod
    ]


def test_nvml_process_of_an_unknown_pod_stays_unattributed(fake_gpus: Callable[[str], GpuCollector]) -> None:
    report = fake_gpus(NVML_CONFIG).collect({TRAIN_UID: ("ml", "train-0")})

    assert report.gpus[0].processes[1] == GpuProcess(pid=INFER_PID, memory_bytes=GIB)


def test_nvml_falls_back_to_v2_process_calls_on_older_drivers(fake_gpus: Callable[[str], GpuCollector]) -> None:
    report = fake_gpus(NVML_CONFIG + "processes_v3_missing=1\n").collect(PODS_BY_UID)

    assert [process.pid for process in report.gpus[0].processes] == [TRAIN_PID, INFER_PID]
    assert report.gpus[0].processes[0].pod == "train-0"


def test_nvml_not_supported_fields_read_as_zero(fake_gpus: Callable[[str], GpuCollector]) -> None:
    config = NVML_CONFIG + "gpu1.not_supported=util,memory,power,temp,processes\n"
    report = fake_gpus(config).collect(PODS_BY_UID)

    assert report.available
    first, second = report.gpus
    assert (second.utilization_ratio, second.memory_used_bytes, second.memory_total_bytes) == (0.0, 0, 0)
    assert (second.power_watts, second.temperature_celsius, second.processes) == (0.0, 0.0, [])
    assert second.uuid == "GPU-6f0d7a5e-1c2b-4d3e-8f9a-0b1c2d3e4f51"  # the rest of the device still reads
    assert first.power_watts == pytest.approx(215.5)  # and the other GPU is untouched


def test_nvml_initialises_again_after_an_nvml_error(
    fake_gpus: Callable[[str], GpuCollector], nvml_config: Callable[[str], None]
) -> None:
    collector = fake_gpus(NVML_CONFIG)
    assert collector.collect(PODS_BY_UID).gpus[0].utilization_ratio == pytest.approx(0.37)

    # Someone else in the process shuts NVML down: every call now answers UNINITIALIZED.
    pynvml.nvmlShutdown()
    nvml_config(NVML_CONFIG.replace("gpu0.util=37", "gpu0.util=55"))
    report = collector.collect(PODS_BY_UID)

    assert report.available
    assert report.gpus[0].utilization_ratio == pytest.approx(0.55)  # read after a fresh nvmlInit


def test_nvml_init_failure_is_reported(fake_gpus: Callable[[str], GpuCollector]) -> None:
    report = fake_gpus(NVML_CONFIG + "init_rc=9\n").collect(PODS_BY_UID)

    assert not report.available
    assert "Driver Not Loaded" in report.reason
    assert report.gpus == []


def test_nvml_absent_is_probed_again_only_after_a_while(
    accelerator_fakes: Any, host: Host, nvml_config: Callable[[str], None], gpu_collectors: list[GpuCollector]
) -> None:
    """A node without a working driver answers the same every tick: the probe (a failed dlopen
    search, or nvmlInit) runs again after ABSENT_RECHECK_SECONDS, and a driver that came is seen then."""
    now = [100.0]
    nvml_config(NVML_CONFIG + "init_rc=9\n")  # the library is there, its driver is not loaded
    collector = GpuCollector(host, library_path=str(accelerator_fakes.nvml_library), clock=lambda: now[0])
    gpu_collectors.append(collector)
    absent = collector.collect(PODS_BY_UID)
    assert not absent.available and "Driver Not Loaded" in absent.reason
    nvml_config(NVML_CONFIG)  # the driver is loaded
    now[0] += ABSENT_RECHECK_SECONDS - 1
    assert collector.collect(PODS_BY_UID) is absent  # not probed again yet
    now[0] += 1
    report = collector.collect(PODS_BY_UID)
    assert report.available and len(report.gpus) == 2


def test_nvml_library_absent_at_the_given_path(host: Host, tmp_path: Path, gpu_collectors: list[GpuCollector]) -> None:
    missing = tmp_path / "no-driver" / "libnvidia-ml.so.1"
    collector = GpuCollector(host, library_path=str(missing))
    gpu_collectors.append(collector)

    report = collector.collect(PODS_BY_UID)

    assert not report.available
    assert "NVML library" in report.reason and str(missing) in report.reason
    assert report.gpus == []
    assert not collector.collect().available  # and again, still without raising


def test_default_nvml_lookup_finds_no_library_here(host: Host, gpu_collectors: list[GpuCollector]) -> None:
    """Also proves the fake does not leak: earlier tests bound it and must have given it back."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        pytest.skip("this machine has a real NVIDIA driver")
    except OSError:
        pass
    collector = GpuCollector(host)
    gpu_collectors.append(collector)

    report = collector.collect()

    assert not report.available
    assert "libnvidia-ml.so.1 not found" in report.reason


@pytest.mark.parametrize(
    "text, uid",
    [
        pytest.param(f"4:memory:/kubepods/burstable/pod{TRAIN_UID}/abc\n", TRAIN_UID, id="cgroupfs-burstable"),
        pytest.param(f"4:memory:/kubepods/pod{TRAIN_UID}/abc\n", TRAIN_UID, id="cgroupfs-guaranteed"),
        pytest.param(f"4:memory:/kubepods/besteffort/pod{TRAIN_UID}\n", TRAIN_UID, id="cgroupfs-pod-level"),
        pytest.param(
            f"0::/kubepods.slice/kubepods-pod{INFER_UID.replace('-', '_')}.slice/cri-containerd-1.scope\n",
            INFER_UID,
            id="systemd-guaranteed",
        ),
        pytest.param(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
            "pod0123456789abcdef0123456789abcdef.slice/crio-9.scope\n",
            "0123456789abcdef0123456789abcdef",
            id="systemd-static-pod",
        ),
        pytest.param("0::/user.slice/user-0.slice/session-1.scope\n", None, id="no-pod"),
        pytest.param("", None, id="empty"),
    ],
)
def test_pod_uid_from_cgroup(text: str, uid: str | None) -> None:
    assert pod_uid_from_cgroup(text) == uid


# ---- NPUs through DCMI, then npu-smi ----


def test_dcmi_reports_the_npu_with_configured_values(
    accelerator_fakes: Any, host: Host, dcmi_config: Callable[[str], None]
) -> None:
    dcmi_config(
        "card_id=2\nchip_name=910B3\naicore=64\nhbm_total_mb=65536\nhbm_used_mb=3404\n"
        "power_tenths=1689\ntemp=45\nhealth=2\n"
    )
    collector = NpuCollector(host, library_path=str(accelerator_fakes.dcmi_library), npu_smi="absent-npu-smi")

    report = collector.collect()

    assert (report.available, report.source) == (True, "dcmi")
    assert report.npus == [
        NpuDevice(
            id=2,
            chip=0,
            model="910B3",
            aicore_utilization_ratio=0.64,
            hbm_used_bytes=3404 * MIB,
            hbm_total_bytes=65536 * MIB,
            power_watts=168.9,
            temperature_celsius=45.0,
            health="Alarm",
        )
    ]
    assert not report.npus[0].healthy


def test_dcmi_not_supported_calls_read_as_zero(
    accelerator_fakes: Any, host: Host, dcmi_config: Callable[[str], None]
) -> None:
    dcmi_config("aicore=20\nhbm_used_mb=100\npower_tenths=900\ntemp=40\nnot_supported=power,hbm\n")
    collector = NpuCollector(host, library_path=str(accelerator_fakes.dcmi_library), npu_smi="absent-npu-smi")

    report = collector.collect()

    assert report.available
    npu = report.npus[0]
    assert (npu.power_watts, npu.hbm_used_bytes, npu.hbm_total_bytes) == (0.0, 0, 0)
    assert (npu.aicore_utilization_ratio, npu.temperature_celsius, npu.health) == (0.2, 40.0, "OK")


def test_dcmi_found_by_bare_name_in_the_host_driver_folder(
    accelerator_fakes: Any, tmp_path: Path, dcmi_config: Callable[[str], None]
) -> None:
    driver = tmp_path / "host" / "usr/local/Ascend/driver/lib64/driver"
    driver.mkdir(parents=True)
    shutil.copyfile(accelerator_fakes.dcmi_library, driver / "libdcmi.so")
    dcmi_config("aicore=5\n")

    report = NpuCollector(Host(root=tmp_path / "host"), npu_smi="absent-npu-smi").collect()

    assert (report.available, report.source) == (True, "dcmi")
    assert report.npus[0].aicore_utilization_ratio == pytest.approx(0.05)


def test_dcmi_init_failure_falls_back_to_npu_smi(
    accelerator_fakes: Any, host: Host, dcmi_config: Callable[[str], None], path_with_npu_smi: None
) -> None:
    dcmi_config("init_rc=-8005\n")
    collector = NpuCollector(host, library_path=str(accelerator_fakes.dcmi_library))

    report = collector.collect()

    assert (report.available, report.source) == (True, "npu-smi")
    assert [(npu.id, npu.chip) for npu in report.npus] == [(0, 0), (1, 0)]


def test_npu_smi_table_is_parsed_when_dcmi_is_absent(host: Host, tmp_path: Path, path_with_npu_smi: None) -> None:
    collector = NpuCollector(host, library_path=str(tmp_path / "no-driver" / "libdcmi.so"))

    report = collector.collect()

    assert (report.available, report.source) == (True, "npu-smi")
    assert report.npus == [
        NpuDevice(
            id=0,
            chip=0,
            model="910B3",
            aicore_utilization_ratio=0.12,
            hbm_used_bytes=3404 * MIB,
            hbm_total_bytes=65536 * MIB,
            power_watts=97.3,
            temperature_celsius=41.0,
            health="OK",
        ),
        NpuDevice(
            id=1,
            chip=0,
            model="910B3",
            aicore_utilization_ratio=0.87,
            hbm_used_bytes=51200 * MIB,
            hbm_total_bytes=65536 * MIB,
            power_watts=180.6,
            temperature_celsius=47.0,
            health="Warning",
        ),
    ]


def test_neither_dcmi_nor_npu_smi_means_no_npu(tmp_path: Path, path_without_npu_smi: None) -> None:
    try:
        ctypes.CDLL("libdcmi.so")
        pytest.skip("this machine has a real Ascend driver")
    except OSError:
        pass
    report = NpuCollector(Host(root=tmp_path)).collect()

    assert not report.available
    assert report.reason == "no Ascend NPU: libdcmi.so not found and npu-smi not installed"
    assert report.npus == []


def test_no_npu_is_probed_again_only_after_a_while(
    accelerator_fakes: Any, host: Host, tmp_path: Path, path_without_npu_smi: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither DCMI nor npu-smi: the same answer until ABSENT_RECHECK_SECONDS passed (no dlopen
    search, no PATH walk every tick), then npu-smi installed meanwhile is found."""
    now = [100.0]
    collector = NpuCollector(host, library_path=str(tmp_path / "no-driver" / "libdcmi.so"), clock=lambda: now[0])
    absent = collector.collect()
    assert not absent.available and "npu-smi not installed" in absent.reason
    monkeypatch.setenv("PATH", f"{accelerator_fakes.npu_smi_dir}:{os.environ['PATH']}:/usr/bin:/bin")
    now[0] += ABSENT_RECHECK_SECONDS - 1
    assert collector.collect() is absent
    now[0] += 1
    report = collector.collect()
    assert (report.available, report.source) == (True, "npu-smi")


def test_failing_npu_smi_is_reported_not_raised(host: Host, tmp_path: Path) -> None:
    broken = tmp_path / "npu-smi"
    broken.write_text(
        "#!/bin/sh\necho 'dcmi model initialized failed, because the device is used. ret is -8020' >&2\nexit 255\n"
    )
    broken.chmod(0o755)
    collector = NpuCollector(host, library_path=str(tmp_path / "libdcmi.so"), npu_smi=str(broken))

    report = collector.collect()

    assert not report.available
    assert "exited with 255" in report.reason and "-8020" in report.reason


def test_npu_smi_inference_card_without_hbm_column() -> None:
    text = """\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 23.0.0                                   Version: 23.0.0                                       |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 6       310P3                 | Critical        | NA           50                0     / 0             |
| 0       0                     | 0000:84:00.0    | 3            1839 / 21525                            |
| 1       1                     | 0000:85:00.0    | 0            577  / 21525                            |
+===============================+=================+======================================================+
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Chip                  | Process id      | Process name             | Process memory(MB)        |
+===============================+=================+======================================================+
| No running processes found in NPU 6                                                                    |
+===============================+=================+======================================================+
"""
    assert parse_npu_smi_info(text) == [
        NpuDevice(
            id=6,
            chip=0,
            model="310P3",
            aicore_utilization_ratio=0.03,
            hbm_used_bytes=1839 * MIB,
            hbm_total_bytes=21525 * MIB,
            power_watts=0.0,
            temperature_celsius=50.0,
            health="Critical",
        ),
        NpuDevice(
            id=6,
            chip=1,
            model="310P3",
            aicore_utilization_ratio=0.0,
            hbm_used_bytes=577 * MIB,
            hbm_total_bytes=21525 * MIB,
            power_watts=0.0,
            temperature_celsius=50.0,
            health="Critical",
        ),
    ]


# ---- through the agent, onto /metrics ----


def test_fake_gpus_and_npu_reach_the_report_and_metrics(
    accelerator_fakes: Any, host: Host, nvml_config: Callable[[str], None], dcmi_config: Callable[[str], None]
) -> None:
    """The whole path: the agent's loop runs the real NVML and DCMI code against the fakes, names
    each GPU process's pod from the API's pod list, and /metrics serves the values over HTTP."""
    import urllib.request

    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    from lahar.agent.agent import Agent, AgentSettings
    from lahar.agent.exporter import MetricsServer, ReportCollector, health_of

    nvml_config(NVML_CONFIG)
    dcmi_config(
        "card_id=2\nchip_name=910B3\naicore=64\nhbm_total_mb=65536\nhbm_used_mb=3404\n"
        "power_tenths=1689\ntemp=45\nhealth=0\n"
    )
    api_pods = [
        {"metadata": {"uid": uid, "namespace": namespace, "name": name}}
        for uid, (namespace, name) in PODS_BY_UID.items()
    ]
    agent = Agent(
        AgentSettings(
            node="gpu-node",
            root=host.root,
            nvml_library=str(accelerator_fakes.nvml_library),
            dcmi_library=str(accelerator_fakes.dcmi_library),
            npu_smi="absent-npu-smi",
        ),
        pods=lambda: api_pods,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReportCollector(lambda: agent.latest))
    server = MetricsServer(registry, health_of(lambda: None, 1.0), "127.0.0.1", 0)
    server.start()
    try:
        report = agent.collect()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.stop()
        agent.close()

    assert [g.model for g in report.gpu.gpus] == ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB"]
    attributed = {(p.namespace, p.pod) for g in report.gpu.gpus for p in g.processes if p.pod}
    assert attributed == {("ml", "train-0"), ("serving", "infer-7f9c")}
    assert report.npu.available and report.npu.npus[0].model == "910B3"
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    first_gpu = (
        ("gpu", "0"),
        ("model", "NVIDIA A100-SXM4-80GB"),
        ("node", "gpu-node"),
        ("uuid", "GPU-6f0d7a5e-1c2b-4d3e-8f9a-0b1c2d3e4f50"),
    )
    assert samples[("lahar_gpu_utilization_ratio", first_gpu)] == pytest.approx(0.37)
    assert samples[("lahar_gpu_memory_total_bytes", first_gpu)] == 80 * GIB
    pods_on_gpus = {
        (dict(labels)["namespace"], dict(labels)["pod"])
        for (name, labels) in samples
        if name == "lahar_gpu_process_memory_bytes"
    }
    assert {("ml", "train-0"), ("serving", "infer-7f9c")} <= pods_on_gpus
    npu = (("chip", "0"), ("model", "910B3"), ("node", "gpu-node"), ("npu", "2"))
    assert samples[("lahar_npu_utilization_ratio", npu)] == pytest.approx(0.64)
    assert samples[("lahar_npu_healthy", npu)] == 1.0
