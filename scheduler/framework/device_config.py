"""Volcano's device configuration (`volcano-vgpu-device-config`, key `device-config.yaml`,
pkg/scheduler/api/devices/config): the vGPU resource names, HAMi's defaults and the MIG
geometries each GPU model may be split into (`nvidia:`), and the Ascend vNPU chips (`vnpus:`).

```yaml
nvidia:
  resourceCountName: volcano.sh/vgpu-number
  resourceMemoryName: volcano.sh/vgpu-memory
  resourceMemoryPercentageName: volcano.sh/vgpu-memory-percentage
  resourceCoreName: volcano.sh/vgpu-cores
  gpuMemoryFactor: 1
  knownMigGeometries:
  - models: ["A100-SXM4-40GB"]
    allowedGeometries:
    - group: group1
      geometries: [{name: 1g.5gb, memory: 5120, count: 7}]
vnpus:               # a list of chips, or {hamiVnpuCore: bool, configs: [chips]}
- {chipName: 310P3, commonWord: Ascend310P, resourceName: huawei.com/Ascend310P, ...}
```

Plain functions of the document, no I/O: the deviceshare plugin hands the text or mapping over
(`deviceshare.DeviceConfig`, or the file `deviceshare.DeviceConfigFile` names, read when the
scheduler configuration is loaded). Unlike Volcano, which reads the whole document with Go's
zero values for what it leaves out (a file without `resourceCountName` names no resource, so no pod
asks for a vGPU), a key left out takes the built-in default, and a missing `vnpus` section the
built-in chip list. A value of the wrong type, a negative number, a MIG instance without memory
or count, or a group named twice for one model is refused with a message naming it
(`DeviceConfigError`); a key Lahar does not know is reported in `warnings` and ignored, as for the
scheduler configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

from lahar.scheduler.framework.plugin import ConfError

T = TypeVar("T")


class DeviceConfigError(ConfError):
    """A device configuration that cannot be used; the message names the offending key."""


@dataclass(frozen=True)
class MigTemplate:
    """One kind of MIG instance of a geometry: `count` instances of `memory` MiB each."""

    name: str
    memory: int
    count: int


@dataclass(frozen=True)
class Geometry:
    """One way of splitting a card (Volcano's group), its instances in the written order."""

    group: str
    instances: tuple[MigTemplate, ...]


@dataclass(frozen=True)
class MigGeometries:
    """The geometries allowed for cards whose type contains one of `models`."""

    models: tuple[str, ...]
    geometries: tuple[Geometry, ...]


@dataclass(frozen=True)
class NvidiaConfig:
    resource_count_name: str = "volcano.sh/vgpu-number"
    resource_memory_name: str = "volcano.sh/vgpu-memory"
    # Volcano's built-in default leaves this name empty (percentages are not read unless the
    # ConfigMap names the resource); Lahar reads Volcano's documented name by default.
    resource_memory_percentage_name: str = "volcano.sh/vgpu-memory-percentage"
    resource_core_name: str = "volcano.sh/vgpu-cores"
    resource_priority_name: str = ""
    overwrite_env: bool = False
    default_memory: int = 0
    default_cores: int = 0
    default_gpu_num: int = 1
    device_split_count: int = 10
    device_memory_scaling: float = 1.0
    device_core_scaling: float = 1.0
    disable_core_limit: bool = False
    known_mig_geometries: tuple[MigGeometries, ...] = ()
    # The unit of `volcano.sh/vgpu-memory`, in MiB: MIG instances (given in MiB) are matched
    # against a request × the factor and count as their memory ÷ the factor.
    gpu_memory_factor: int = 1

    def geometries_for(self, card_type: str) -> tuple[Geometry, ...] | None:
        """The geometries of the first entry naming a model the card's type contains (Volcano's
        extractGeometryFromType); None when none does."""
        for entry in self.known_mig_geometries:
            if any(model in card_type for model in entry.models):
                return entry.geometries
        return None


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


DEFAULT_VNPUS: tuple[VNPUConfig, ...] = (
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


@dataclass(frozen=True)
class DeviceConfig:
    nvidia: NvidiaConfig = NvidiaConfig()
    vnpus: tuple[VNPUConfig, ...] = DEFAULT_VNPUS
    hami_vnpu_core: bool = False
    warnings: tuple[str, ...] = field(default=(), compare=False)


DEFAULT_DEVICE_CONFIG = DeviceConfig()


# -- reading values -------------------------------------------------------------------------------


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DeviceConfigError(f"{where}: must be a mapping, not {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise DeviceConfigError(f"{where}: must be a list, not {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DeviceConfigError(f"{where}: must be a string, not {value!r}")
    return value


def _name(value: Any, where: str) -> str:
    if not _text(value, where):
        raise DeviceConfigError(f"{where}: must not be empty")
    return str(value)


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise DeviceConfigError(f"{where}: must be true or false, not {value!r}")
    return value


def _count(minimum: int) -> Callable[[Any, str], int]:
    def parse(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DeviceConfigError(f"{where}: must be a whole number, not {value!r}")
        if value < minimum:
            raise DeviceConfigError(f"{where}: must be at least {minimum}, not {value}")
        return value

    return parse


def _scale(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise DeviceConfigError(f"{where}: must be a number above 0, not {value!r}")
    return float(value)


def _fields(
    given: Mapping[str, Any],
    where: str,
    readers: Mapping[str, tuple[str, Callable[[Any, str], Any]]],
    warnings: list[str],
) -> dict[str, Any]:
    """The keyword arguments `readers` (YAML key -> (field, reader)) make of `given`; keys not
    read are reported in `warnings`."""
    found: dict[str, Any] = {}
    for key, value in given.items():
        reader = readers.get(key)
        if reader is None:
            warnings.append(f"{where}: unknown key {key!r} ignored")
            continue
        name, read = reader
        found[name] = read(value, f"{where}.{key}")
    return found


def _each(value: Any, where: str, read: Callable[[Any, str], T]) -> tuple[T, ...]:
    return tuple(read(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where)))


def _mig_template(value: Any, where: str) -> MigTemplate:
    entry = _mapping(value, where)
    for key in ("name", "memory", "count"):
        if key not in entry:
            raise DeviceConfigError(f"{where}: a MIG instance needs {key!r}")
    return MigTemplate(
        _name(entry["name"], f"{where}.name"),
        _count(1)(entry["memory"], f"{where}.memory"),
        _count(1)(entry["count"], f"{where}.count"),
    )


def _geometry(value: Any, where: str) -> Geometry:
    entry = _mapping(value, where)
    if "group" not in entry:
        raise DeviceConfigError(f"{where}: a geometry needs a 'group' name")
    return Geometry(
        _name(entry["group"], f"{where}.group"),
        _each(entry.get("geometries", []), f"{where}.geometries", _mig_template),
    )


def _mig_geometries(value: Any, where: str) -> MigGeometries:
    entry = _mapping(value, where)
    models = _each(entry.get("models"), f"{where}.models", _name)
    if not models:
        raise DeviceConfigError(f"{where}.models: must name at least one GPU model")
    geometries = _each(entry.get("allowedGeometries", []), f"{where}.allowedGeometries", _geometry)
    groups = [geometry.group for geometry in geometries]
    twice = sorted({group for group in groups if groups.count(group) > 1})
    if twice:  # a pod's MIG device names its group: two groups of one name cannot be told apart
        raise DeviceConfigError(f"{where}.allowedGeometries: group {twice[0]!r} is named twice")
    return MigGeometries(models, geometries)


NVIDIA_KEYS: dict[str, tuple[str, Callable[[Any, str], Any]]] = {
    "resourceCountName": ("resource_count_name", _name),
    "resourceMemoryName": ("resource_memory_name", _name),
    "resourceMemoryPercentageName": ("resource_memory_percentage_name", _text),
    "resourceCoreName": ("resource_core_name", _name),
    "resourcePriorityName": ("resource_priority_name", _text),
    "overwriteEnv": ("overwrite_env", _flag),
    "defaultMemory": ("default_memory", _count(0)),
    "defaultCores": ("default_cores", _count(0)),
    "defaultGPUNum": ("default_gpu_num", _count(0)),
    "deviceSplitCount": ("device_split_count", _count(0)),
    "deviceMemoryScaling": ("device_memory_scaling", _scale),
    "deviceCoreScaling": ("device_core_scaling", _scale),
    "disableCoreLimit": ("disable_core_limit", _flag),
    "knownMigGeometries": ("known_mig_geometries", lambda v, w: _each(v, w, _mig_geometries)),
    "gpuMemoryFactor": ("gpu_memory_factor", _count(1)),
}
VNPU_TEMPLATE_KEYS: dict[str, tuple[str, Callable[[Any, str], Any]]] = {
    "name": ("name", _name),
    "memory": ("memory", _count(0)),
    "aiCore": ("ai_core", _count(0)),
    "aiCPU": ("ai_cpu", _count(0)),
}


def _vnpu_template(value: Any, where: str, warnings: list[str]) -> VNPUTemplate:
    entry = _mapping(value, where)
    if "name" not in entry or "memory" not in entry:
        raise DeviceConfigError(f"{where}: a vNPU template needs 'name' and 'memory'")
    return VNPUTemplate(**_fields(entry, where, VNPU_TEMPLATE_KEYS, warnings))


def _vnpu(value: Any, where: str, warnings: list[str]) -> VNPUConfig:
    entry = _mapping(value, where)
    readers: dict[str, tuple[str, Callable[[Any, str], Any]]] = {
        "commonWord": ("common_word", _text),
        "chipName": ("chip_name", _text),
        "resourceName": ("resource_name", _text),
        "resourceMemoryName": ("resource_memory_name", _text),
        "memoryAllocatable": ("memory_allocatable", _count(0)),
        "memoryCapacity": ("memory_capacity", _count(0)),
        "aiCore": ("ai_core", _count(0)),
        "aiCPU": ("ai_cpu", _count(0)),
        "templates": ("templates", lambda v, w: _each(v, w, lambda t, tw: _vnpu_template(t, tw, warnings))),
    }
    chip = VNPUConfig(**_fields(entry, where, readers, warnings))
    # The names every pod request and node annotation of the type is spelled with.
    for key, value in (
        ("commonWord", chip.common_word),
        ("resourceName", chip.resource_name),
        ("resourceMemoryName", chip.resource_memory_name),
    ):
        if not value:
            raise DeviceConfigError(f"{where}: an NPU type needs {key!r}")
    return chip


def _distinct(chips: tuple[VNPUConfig, ...], where: str) -> tuple[VNPUConfig, ...]:
    words = [chip.common_word for chip in chips]
    twice = sorted({word for word in words if words.count(word) > 1})
    if twice:  # a node's registration and a pod's assignment name the type by its commonWord
        raise DeviceConfigError(f"{where}: commonWord {twice[0]!r} is named twice")
    return chips


def _vnpus(value: Any, where: str, warnings: list[str]) -> tuple[tuple[VNPUConfig, ...], bool]:
    """The chips and `hamiVnpuCore`: a list of chips (Volcano's first format, hamiVnpuCore off) or
    a mapping `{hamiVnpuCore, configs}`."""
    if isinstance(value, list):
        return _distinct(_each(value, where, lambda v, w: _vnpu(v, w, warnings)), where), False
    entry = _mapping(value, where)
    found = _fields(
        entry,
        where,
        {
            "hamiVnpuCore": ("hami_vnpu_core", _flag),
            "configs": ("configs", lambda v, w: _each(v, w, lambda c, cw: _vnpu(c, cw, warnings))),
        },
        warnings,
    )
    return _distinct(found.get("configs", ()), where), found.get("hami_vnpu_core", False)


def parse_device_config(document: Any, source: str = "device-config.yaml") -> DeviceConfig:
    """A device configuration from its decoded YAML document (None: the defaults)."""
    if document is None:
        return DEFAULT_DEVICE_CONFIG
    top = _mapping(document, source)
    warnings: list[str] = [f"{source}: unknown key {key!r} ignored" for key in top if key not in ("nvidia", "vnpus")]
    nvidia = NvidiaConfig()
    if top.get("nvidia") is not None:
        nvidia = NvidiaConfig(
            **_fields(_mapping(top["nvidia"], f"{source}: nvidia"), f"{source}: nvidia", NVIDIA_KEYS, warnings)
        )
    vnpus, hami_core = DEFAULT_VNPUS, False
    if top.get("vnpus") is not None:
        vnpus, hami_core = _vnpus(top["vnpus"], f"{source}: vnpus", warnings)
    return DeviceConfig(nvidia, vnpus, hami_core, tuple(warnings))


def parse_device_config_text(text: str, source: str = "device-config.yaml") -> DeviceConfig:
    """A device configuration from the text of `device-config.yaml`."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DeviceConfigError(f"{source}: not valid YAML: {exc}") from None
    return parse_device_config(document, source)
