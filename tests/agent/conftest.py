"""Agent test fixtures: the fake accelerator libraries, compiled from tests/agent/fakes once per
session, so the real nvidia-ml-py and ctypes code runs against them on a machine without a GPU
or NPU."""

from __future__ import annotations

import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

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
