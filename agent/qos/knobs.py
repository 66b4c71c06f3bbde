"""Cgroup knobs by logical name, mapped per cgroup version (DESIGN.md, "QoS engine"):

    | knob              | v1                                            | v2                          |
    |-------------------|-----------------------------------------------|-----------------------------|
    | cpu.idle          | cpu.idle                                      | cpu.idle                    |
    | cpu.weight        | cpu.shares                                    | cpu.weight (from shares)    |
    | cpu.max           | cpu.cfs_period_us + cpu.cfs_quota_us          | cpu.max                     |
    | cpu.burst         | cpu.cfs_burst_us                              | cpu.max.burst               |
    | cpuset.cpus       | cpuset.cpus (a child within its parent)       | cpuset.cpus                 |
    | memory.cap        | memory.limit_in_bytes                         | memory.high                 |
    | memory.soft_limit | memory.soft_limit_in_bytes                    | -                           |
    | memory.reclaim    | -                                             | memory.reclaim (write-only) |
    | memory.min / .low | -                                             | memory.min / memory.low     |
    | io.limits         | blkio.throttle.{read,write}_{bps,iops}_device | io.max                      |
    | io.weight         | -                                             | io.weight                   |

Strategies speak in logical values (CPU weight in kubelet's shares, a quota as `CpuMax`, IO limits
as {"major:minor": IoLimits} with 0 for none, None for "unlimited"); a binding turns them into the
file's own value (`native`), reads the file back in the same form and says which writes would
bring it there. cgroupspy parses and formats the v1 files it knows (its integer, cpuset and device
throttle codecs); its `blkio.throttle.write_*` names carry a trailing space, so the file names
here are always Lahar's own."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from cgroupspy.contenttypes import DeviceThrottle
from cgroupspy.interfaces import CommaDashSetFile, IntegerFile

from lahar.agent.cgroups.layout import CgroupVersion

# v1 reports "no limit" as the largest page-aligned long (9223372036854771712); anything this
# large is unlimited, whatever the page size.
UNLIMITED_FLOOR = 1 << 62
DEFAULT_CFS_PERIOD_US = 100_000
KERNEL_MIN_QUOTA_US = 1_000  # the kernel refuses a CFS quota under 1 ms
MIN_SHARES, MAX_SHARES = 2, 262_144
MIN_WEIGHT, MAX_WEIGHT = 1, 10_000

_V1_INT = IntegerFile("v1-integer")  # cgroupspy's codec: "-1" <-> None
_V1_CPUSET = CommaDashSetFile("cpuset.cpus")


class Write(NamedTuple):
    """One write(2) to one file of a cgroup directory."""

    filename: str
    content: str


@dataclass(frozen=True)
class CpuMax:
    """A CFS bandwidth limit: `quota_us` of CPU time per `period_us`; None: unlimited."""

    quota_us: int | None
    period_us: int = DEFAULT_CFS_PERIOD_US

    @property
    def cores(self) -> float | None:
        return None if self.quota_us is None else self.quota_us / self.period_us

    def __str__(self) -> str:
        return f"{'max' if self.quota_us is None else self.quota_us}/{self.period_us}us"

    @classmethod
    def of_cores(cls, cores: float | None, period_us: int = DEFAULT_CFS_PERIOD_US) -> CpuMax:
        if cores is None:
            return cls(None, period_us)
        return cls(max(KERNEL_MIN_QUOTA_US, round(cores * period_us)), period_us)


def shares_to_weight(shares: int) -> int:
    """cgroup v2 weight of a v1 share count: runc's and kubelet's conversion (2 -> 1, 1024 -> 39)."""
    shares = min(max(shares, MIN_SHARES), MAX_SHARES)
    return 1 + ((shares - MIN_SHARES) * (MAX_WEIGHT - 1)) // (MAX_SHARES - MIN_SHARES)


def milli_to_shares(millicores: int) -> int:
    """kubelet's MilliCPUToShares: 1024 per core, at least 2."""
    return min(max(millicores * 1024 // 1000, MIN_SHARES), MAX_SHARES)


def milli_to_quota_us(millicores: int, period_us: int = DEFAULT_CFS_PERIOD_US) -> int:
    """kubelet's MilliCPUToQuota: the quota of a CPU limit, at least the kernel's 1 ms."""
    return max(millicores * period_us // 1000, KERNEL_MIN_QUOTA_US)


def _read(directory: Path, filename: str) -> str:
    # O_NOFOLLOW: a cgroup file is never a symlink; one that is may lead anywhere (ELOOP instead).
    fd = os.open(directory / filename, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    with open(fd, encoding="ascii") as file:
        return file.read()


class Binding(ABC):
    """How one logical knob lives in the files of one cgroup version."""

    controller = ""  # the v1 hierarchy the files are in; "" on v2
    action = False  # write-only (memory.reclaim): written whenever wanted, never read back
    hierarchical = False  # a child's value must stay within its parent's (v1 cpuset.cpus)

    @property
    @abstractmethod
    def filename(self) -> str:
        """The file whose presence says the kernel offers the knob."""

    def native(self, value: Any) -> Any:
        """The logical value in the file's terms (what read() returns)."""
        return value

    @abstractmethod
    def read(self, directory: Path) -> Any:
        """The file's current value; OSError when the cgroup or file is gone."""

    @abstractmethod
    def writes(self, current: Any, desired: Any) -> list[Write]:
        """The writes that take the file from `current` to `desired` (native values); none when
        they already agree."""

    def loosened(self, current: Any, desired: Any) -> Any:
        """For a hierarchical knob: a value that holds both (set on the way down first)."""
        return desired


class IntBinding(Binding):
    """One integer file; None is the file's "no limit" (`-1` on v1, `max` on v2)."""

    def __init__(self, filename: str, controller: str = "", unlimited: str = "-1") -> None:
        self._filename = filename
        self.controller = controller
        self.unlimited = unlimited

    @property
    def filename(self) -> str:
        return self._filename

    def read(self, directory: Path) -> int | None:
        return parse_int(_read(directory, self._filename))

    def writes(self, current: int | None, desired: int | None) -> list[Write]:
        if current == desired:
            return []
        return [Write(self._filename, self.unlimited if desired is None else str(desired))]


def parse_int(text: str) -> int | None:
    """An integer cgroup file: `max`, `-1` and v1's huge page-aligned maximum read as None."""
    text = text.strip()
    if text == "max":
        return None
    value = _V1_INT.sanitize_get(text)
    return None if value is None or value >= UNLIMITED_FLOOR else value


class ActionBinding(IntBinding):
    """A write-only trigger such as `memory.reclaim`: nothing to compare, the write is the act."""

    action = True

    def read(self, directory: Path) -> None:
        return None

    def writes(self, current: Any, desired: int | None) -> list[Write]:
        return [] if not desired else [Write(self.filename, str(desired))]


class WeightFromShares(IntBinding):
    """v2 `cpu.weight` set from a v1 share count, so strategies speak one unit."""

    def native(self, value: int | None) -> int | None:
        return None if value is None else shares_to_weight(value)


class V1CpuMax(Binding):
    controller = "cpu"
    filename = "cpu.cfs_quota_us"

    def native(self, value: CpuMax) -> CpuMax:
        return value

    def read(self, directory: Path) -> CpuMax:
        period = parse_int(_read(directory, "cpu.cfs_period_us")) or DEFAULT_CFS_PERIOD_US
        return CpuMax(parse_int(_read(directory, "cpu.cfs_quota_us")), period)

    def writes(self, current: CpuMax, desired: CpuMax) -> list[Write]:
        writes = []
        if current.period_us != desired.period_us:  # the period first: the quota is read against it
            writes.append(Write("cpu.cfs_period_us", str(desired.period_us)))
        if current.quota_us != desired.quota_us or writes:
            quota = -1 if desired.quota_us is None else desired.quota_us
            writes.append(Write("cpu.cfs_quota_us", str(quota)))
        return writes


class V2CpuMax(Binding):
    filename = "cpu.max"

    def read(self, directory: Path) -> CpuMax:
        quota, _, period = _read(directory, "cpu.max").strip().partition(" ")
        return CpuMax(parse_int(quota), int(period or DEFAULT_CFS_PERIOD_US))

    def writes(self, current: CpuMax, desired: CpuMax) -> list[Write]:
        if current == desired:
            return []
        quota = "max" if desired.quota_us is None else str(desired.quota_us)
        return [Write("cpu.max", f"{quota} {desired.period_us}")]


class CpusetBinding(Binding):
    """`cpuset.cpus` as a frozenset of CPU numbers (cgroupspy parses and formats the list)."""

    def __init__(self, controller: str = "", hierarchical: bool = False) -> None:
        self.controller = controller
        self.hierarchical = hierarchical

    filename = "cpuset.cpus"

    def native(self, value: Any) -> frozenset[int]:
        return frozenset(value)

    def read(self, directory: Path) -> frozenset[int]:
        return frozenset(_V1_CPUSET.sanitize_get(_read(directory, "cpuset.cpus")))

    def writes(self, current: frozenset[int], desired: frozenset[int]) -> list[Write]:
        if current == desired or not desired:  # an empty cpuset would strand the cgroup's tasks
            return []
        return [Write("cpuset.cpus", _V1_CPUSET.sanitize_set(set(desired)))]

    def loosened(self, current: frozenset[int], desired: frozenset[int]) -> frozenset[int]:
        return current | desired


class IoLimits(NamedTuple):
    """One device's limits; 0: none."""

    read_bps: int = 0
    write_bps: int = 0
    read_iops: int = 0
    write_iops: int = 0


NO_IO_LIMITS = IoLimits()
# IoLimits field -> (v1 blkio.throttle file, v2 io.max key)
IO_FILES = {
    "read_bps": ("blkio.throttle.read_bps_device", "rbps"),
    "write_bps": ("blkio.throttle.write_bps_device", "wbps"),
    "read_iops": ("blkio.throttle.read_iops_device", "riops"),
    "write_iops": ("blkio.throttle.write_iops_device", "wiops"),
}


class V1IoLimits(Binding):
    """The four `blkio.throttle.*_device` files, one `major:minor limit` line per limited device
    in each; writing `major:minor 0` removes a device's line. Only the devices in the desired
    value are compared and written."""

    controller = "blkio"
    filename = "blkio.throttle.read_bps_device"

    def native(self, value: Mapping[str, IoLimits]) -> dict[str, IoLimits]:
        return dict(value)

    def read(self, directory: Path) -> dict[str, IoLimits]:
        found: dict[str, dict[str, int]] = {}
        for field, (filename, _) in IO_FILES.items():
            for line in _read(directory, filename).splitlines():
                if line.strip():
                    throttle = DeviceThrottle.from_string(line)
                    found.setdefault(f"{throttle.major}:{throttle.minor}", {})[field] = int(throttle.limit)
        return {device: IoLimits(**fields) for device, fields in found.items()}

    def writes(self, current: Mapping[str, IoLimits], desired: Mapping[str, IoLimits]) -> list[Write]:
        writes = []
        for device, limits in sorted(desired.items()):
            now = current.get(device, NO_IO_LIMITS)
            major, _, minor = device.partition(":")
            for field, (filename, _) in IO_FILES.items():
                if getattr(now, field) != getattr(limits, field):
                    writes.append(Write(filename, str(DeviceThrottle(getattr(limits, field), major, minor))))
        return writes


class V2IoLimits(Binding):
    """`io.max`, whose lines read `8:0 rbps=1048576 wbps=max riops=max wiops=max`; one write per
    device sets all four."""

    filename = "io.max"

    def native(self, value: Mapping[str, IoLimits]) -> dict[str, IoLimits]:
        return dict(value)

    def read(self, directory: Path) -> dict[str, IoLimits]:
        keys = {key: field for field, (_, key) in IO_FILES.items()}
        limits = {}
        for line in _read(directory, "io.max").splitlines():
            device, *pairs = line.split()
            fields = {
                keys[key]: 0 if value == "max" else int(value)
                for key, _, value in (pair.partition("=") for pair in pairs)
                if key in keys
            }
            limits[device] = IoLimits(**fields)
        return limits

    def writes(self, current: Mapping[str, IoLimits], desired: Mapping[str, IoLimits]) -> list[Write]:
        return [
            Write(
                "io.max",
                f"{device} "
                + " ".join(f"{key}={getattr(limits, field) or 'max'}" for field, (_, key) in IO_FILES.items()),
            )
            for device, limits in sorted(desired.items())
            if current.get(device, NO_IO_LIMITS) != limits
        ]


class V2IoWeight(Binding):
    """`io.weight`'s default line (`default 100`), the cgroup's weight on every device."""

    filename = "io.weight"

    def read(self, directory: Path) -> int:
        for line in _read(directory, "io.weight").splitlines():
            key, _, value = line.partition(" ")
            if key == "default":
                return int(value)
        return 100

    def writes(self, current: int, desired: int) -> list[Write]:
        return [] if current == desired else [Write("io.weight", f"default {desired}")]


KNOBS: dict[str, dict[CgroupVersion, Binding]] = {
    "cpu.idle": {CgroupVersion.V1: IntBinding("cpu.idle", "cpu"), CgroupVersion.V2: IntBinding("cpu.idle")},
    "cpu.weight": {CgroupVersion.V1: IntBinding("cpu.shares", "cpu"), CgroupVersion.V2: WeightFromShares("cpu.weight")},
    "cpu.max": {CgroupVersion.V1: V1CpuMax(), CgroupVersion.V2: V2CpuMax()},
    "cpu.burst": {
        CgroupVersion.V1: IntBinding("cpu.cfs_burst_us", "cpu"),
        CgroupVersion.V2: IntBinding("cpu.max.burst"),
    },
    "cpuset.cpus": {CgroupVersion.V1: CpusetBinding("cpuset", hierarchical=True), CgroupVersion.V2: CpusetBinding()},
    "memory.cap": {
        CgroupVersion.V1: IntBinding("memory.limit_in_bytes", "memory"),
        CgroupVersion.V2: IntBinding("memory.high", unlimited="max"),
    },
    "memory.soft_limit": {CgroupVersion.V1: IntBinding("memory.soft_limit_in_bytes", "memory")},
    "memory.reclaim": {CgroupVersion.V2: ActionBinding("memory.reclaim")},
    "memory.min": {CgroupVersion.V2: IntBinding("memory.min", unlimited="max")},
    "memory.low": {CgroupVersion.V2: IntBinding("memory.low", unlimited="max")},
    "io.limits": {CgroupVersion.V1: V1IoLimits(), CgroupVersion.V2: V2IoLimits()},
    "io.weight": {CgroupVersion.V2: V2IoWeight()},
}


def binding(knob: str, version: CgroupVersion) -> Binding | None:
    """The knob's binding on a cgroup version; None where that version has no such knob."""
    try:
        return KNOBS[knob].get(version)
    except KeyError:
        raise ValueError(f"unknown cgroup knob {knob!r} (known: {', '.join(KNOBS)})") from None


def device_number(name: str, sys_root: Path) -> str | None:
    """ "major:minor" of a block device given as `vda`, `/dev/vda` or already `254:0`; None when
    the device does not exist."""
    if ":" in name:
        return name
    try:
        return (sys_root / "class" / "block" / os.path.basename(name) / "dev").read_text().strip()
    except OSError:
        return None
