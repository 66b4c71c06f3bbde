"""Agent test fixtures: the fake accelerator libraries, compiled from tests/agent/fakes once per
session, so the real nvidia-ml-py and ctypes code runs against them on a machine without a GPU
or NPU; and fake cgroup trees (v1 and v2, both drivers) carrying the control files the QoS engine
reads and writes."""

from __future__ import annotations

import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FAKES = Path(__file__).parent / "fakes"


@dataclass(frozen=True)
class AcceleratorFakes:
    nvml_library: Path  # a libnvidia-ml.so.1
    dcmi_library: Path  # a libdcmi.so
    npu_smi_dir: Path  # a folder holding an executable `npu-smi`, to put on PATH


def _compile_shared_library(gcc: str, source: Path, output: Path) -> None:
    # No -soname: glibc would otherwise answer a later dlopen("libnvidia-ml.so.1") anywhere in
    # this process with the fake, just because it is loaded.
    command = [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-o", str(output), str(source)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"compiling {source.name} failed:\n{result.stderr}")


@pytest.fixture(scope="session")
def accelerator_fakes(tmp_path_factory: pytest.TempPathFactory) -> AcceleratorFakes:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("gcc not installed: cannot build the fake NVML and DCMI libraries")
    build = tmp_path_factory.mktemp("accelerator-fakes")
    nvml = build / "nvml" / "libnvidia-ml.so.1"
    dcmi = build / "dcmi" / "libdcmi.so"
    npu_smi_dir = build / "bin"
    for folder in (nvml.parent, dcmi.parent, npu_smi_dir):
        folder.mkdir()
    _compile_shared_library(gcc, FAKES / "fake_nvml.c", nvml)
    _compile_shared_library(gcc, FAKES / "fake_dcmi.c", dcmi)
    npu_smi = npu_smi_dir / "npu-smi"
    shutil.copyfile(FAKES / "npu-smi", npu_smi)
    npu_smi.chmod(npu_smi.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return AcceleratorFakes(nvml, dcmi, npu_smi_dir)


# --- QoS: fake cgroup trees with the control files the QoS engine writes ---------------------

V1_CONTROLS: dict[str, dict[str, str]] = {
    "cpu": {
        "cpu.idle": "0\n",
        "cpu.shares": "1024\n",
        "cpu.cfs_quota_us": "-1\n",
        "cpu.cfs_period_us": "100000\n",
        "cpu.cfs_burst_us": "0\n",
    },
    "cpuset": {"cpuset.cpus": "0-3\n", "cpuset.mems": "0\n"},
    "memory": {"memory.limit_in_bytes": "9223372036854771712\n", "memory.soft_limit_in_bytes": "9223372036854771712\n"},
    "blkio": {f"blkio.throttle.{name}_device": "" for name in ("read_bps", "write_bps", "read_iops", "write_iops")},
}
V2_CONTROLS: dict[str, str] = {
    "cpu.idle": "0\n",
    "cpu.weight": "100\n",
    "cpu.max": "max 100000\n",
    "cpu.max.burst": "0\n",
    "cpuset.cpus": "\n",
    "cpuset.cpus.effective": "0-3\n",
    "memory.high": "max\n",
    "memory.low": "0\n",
    "memory.min": "0\n",
    "memory.reclaim": "",
    "io.max": "",
    "io.weight": "default 100\n",
}


class QosTree:
    """A FakeCgroups tree (one version, one driver) whose kubepods, QoS directories, pods and
    containers carry the QoS control files with the kernel's defaults, beside a `system.slice`
    cgroup the engine must never touch."""

    def __init__(self, root: Path, version: Any, driver: Any, kubepods: str = "kubepods") -> None:
        from lahar.agent.cgroups.layout import CgroupVersion
        from lahar.agent.cgroups.synthetic import FakeCgroups, Usage
        from lahar.api.qos import K8S_QOS_CLASSES

        self.fake = FakeCgroups(root, version, driver, kubepods)
        self.version = version
        self.v2 = version is CgroupVersion.V2
        if not self.v2:
            (root / "cpuset").mkdir(exist_ok=True)
        self.fake.write(self.layout.top, Usage())
        self.controls(self.layout.top)
        for kube_qos in K8S_QOS_CLASSES:
            self.fake.write(self.layout.qos_dir(kube_qos), Usage())
            self.controls(self.layout.qos_dir(kube_qos))
        self.fake.write("system.slice", Usage())
        self.controls("system.slice")

    @property
    def root(self) -> Path:
        return self.fake.root

    @property
    def layout(self) -> Any:
        return self.fake.layout

    def directory(self, cgroup: str, controller: str) -> Path:
        return self.root / cgroup if self.v2 else self.root / controller / cgroup

    def controls(self, cgroup: str) -> None:
        if self.v2:
            targets = [(self.root / cgroup, V2_CONTROLS)]
        else:
            targets = [(self.root / controller / cgroup, files) for controller, files in V1_CONTROLS.items()]
        for directory, files in targets:
            directory.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                (directory / name).write_text(content)

    def add_pod(self, uid: str, kube_qos: str, usage: Any = None, containers: Any = None) -> str:
        from lahar.agent.cgroups.synthetic import Usage

        containers = {cid: container_usage or Usage() for cid, container_usage in (containers or {}).items()}
        path = self.fake.add_pod(uid, kube_qos, usage or Usage(), containers)
        self.controls(path)
        for container_id in containers:
            self.controls(f"{path}/{self.fake.container_dir(container_id)}")
        return path

    def read(self, cgroup: str, filename: str) -> str:
        controller = (
            ""
            if self.v2
            else {"cpu": "cpu", "cpuset": "cpuset", "memory": "memory", "blkio": "blkio"}[filename.split(".")[0]]
        )
        return (self.directory(cgroup, controller) / filename).read_text().strip()

    def write(self, cgroup: str, filename: str, content: str) -> None:
        controller = "" if self.v2 else filename.split(".")[0]
        (self.directory(cgroup, controller) / filename).write_text(content)

    def snapshot(self) -> dict[str, tuple[int, bytes]]:
        """Every file of the tree: (mtime, content), to see what changed."""
        return {
            str(path.relative_to(self.root)): (path.stat().st_mtime_ns, path.read_bytes())
            for path in sorted(self.root.rglob("*"))
            if path.is_file()
        }


def qos_tree_params() -> list[Any]:
    from lahar.agent.cgroups.layout import CgroupDriver, CgroupVersion

    return [
        pytest.param((version, driver), id=f"v{version.value}-{driver.value}")
        for version in CgroupVersion
        for driver in CgroupDriver
    ]


@pytest.fixture(params=qos_tree_params())
def qos_tree(request: pytest.FixtureRequest, tmp_path: Path) -> QosTree:
    version, driver = request.param
    return QosTree(tmp_path / "cgroup", version, driver)
