"""Volcano's device configuration (`volcano-vgpu-device-config`, key `device-config.yaml`,
pkg/scheduler/api/devices/config): so far the Ascend vNPU chips (`vnpus:`) as value types and
Volcano's built-in chip list; the ascend module decides with them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VNPUTemplate:
    name: str
    memory: int
    ai_core: int = 0
    ai_cpu: int = 0


@dataclass(frozen=True)
class VNPUConfig:
    common_word: str = ""
    chip_name: str = ""
    resource_name: str = ""
    resource_memory_name: str = ""
    memory_allocatable: int = 0
    memory_capacity: int = 0
    ai_core: int = 0
    ai_cpu: int = 0
    templates: tuple[VNPUTemplate, ...] = ()


DEFAULT_VNPUS = (
    VNPUConfig(
        common_word="Ascend310P",
        chip_name="310P3",
        resource_name="huawei.com/Ascend310P",
        resource_memory_name="huawei.com/Ascend310P-memory",
        memory_allocatable=21527,
        memory_capacity=24576,
        ai_core=8,
        ai_cpu=7,
        templates=(
            VNPUTemplate("vir01", 3072, 1, 1),
            VNPUTemplate("vir02", 6144, 2, 2),
            VNPUTemplate("vir04", 12288, 4, 4),
        ),
    ),
)
