"""IO limits: each best-effort pod may read and write each configured block device at most so
fast (bytes and operations per second), so batch IO cannot starve online pods' disks.

v2: `io.max` on each BE pod's cgroup (hierarchical: its containers are covered), and optionally
a low `io.weight` on the BE groups (needs an IO controller that honours weights, e.g. BFQ or
iocost). v1: `blkio.throttle.{read,write}_{bps,iops}_device` on each BE pod's cgroup *and each of
its containers*: v1 throttling is not hierarchical (a parent's limit does not bind the processes
in its children, measured on this machine's 6.x kernel), so the limit must sit where the processes
are. Trade-off: on v1 a pod whose several containers all do IO may reach the limit once per
container. Throttling covers direct IO and reads; buffered writes are flushed by the kernel's
writeback, which v1 does not charge to the pod. A device named in the config that the node lacks
is skipped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lahar.agent.cgroups.layout import CgroupVersion
from lahar.agent.qos.eviction import QUANTITY_UNIT, check_at_least
from lahar.agent.qos.knobs import NO_IO_LIMITS, IoLimits
from lahar.agent.qos.model import Desired, NodeState, Plan, QosPod, Strategy, be_groups
from lahar.api.qos import QoSClass

NAME = "io"
DEFAULT_IO_WEIGHT = 100


@dataclass(frozen=True)
class DeviceLimit:
    device: str = ""  # vda, /dev/nvme0n1 or 259:0 (required: IoConfig checks)
    read_bps: int = field(default=0, metadata={QUANTITY_UNIT: "bytes"})  # 0: no limit
    write_bps: int = field(default=0, metadata={QUANTITY_UNIT: "bytes"})
    read_iops: int = 0
    write_iops: int = 0

    def __post_init__(self) -> None:
        for name in ("read_bps", "write_bps", "read_iops", "write_iops"):
            check_at_least(name, getattr(self, name), 0)

    @property
    def limits(self) -> IoLimits:
        return IoLimits(self.read_bps, self.write_bps, self.read_iops, self.write_iops)


@dataclass(frozen=True)
class IoConfig:
    enabled: bool = True
    be_weight: int = 0  # v2 io.weight of BE groups, 1-10000; 0: leave kubelet's
    devices: tuple[DeviceLimit, ...] = ()

    def __post_init__(self) -> None:
        if self.be_weight and not 1 <= self.be_weight <= 10_000:
            raise ValueError(f"be_weight: must be 0 (leave it) or 1-10000, got {self.be_weight}")
        for index, device in enumerate(self.devices):
            if not device.device:
                raise ValueError(f"devices[{index}].device: a block device name or major:minor is required")


def _targets(node: NodeState, pods: Sequence[QosPod]) -> list[str]:
    best_effort = [p for p in pods if p.qos is QoSClass.BE]
    if node.version is CgroupVersion.V2:
        return [p.cgroup for p in best_effort]
    return [cgroup for p in best_effort for cgroup in (p.cgroup, *(c.cgroup for c in p.containers))]


def _limits(node: NodeState, config: IoConfig, previous: Plan | None) -> dict[str, IoLimits]:
    """major:minor -> limits; a device limited before but no longer configured goes back to none."""
    limits = dict.fromkeys(previous.memo.get("devices", ()) if previous else (), NO_IO_LIMITS)
    for entry in config.devices:
        number = node.devices.get(entry.device)
        if number is not None:
            limits[number] = entry.limits
    return limits


def plan(node: NodeState, pods: Sequence[QosPod], config: IoConfig, previous: Plan | None) -> Plan:
    limits = _limits(node, config, previous)
    targets = _targets(node, pods)
    desired = [Desired(target, "io.limits", limits) for target in targets if limits and node.has("io.limits")]
    if config.be_weight and node.has("io.weight"):
        desired += [Desired(g.cgroup, "io.weight", config.be_weight) for g in be_groups(node, pods)]
    configured = {device: value for device, value in limits.items() if value != NO_IO_LIMITS}
    return Plan(
        tuple(desired),
        {"be_io_limited_cgroups": float(len(targets) if configured else 0)},
        {"devices": sorted(configured), "limits": configured},
    )


def relax(node: NodeState, pods: Sequence[QosPod], config: IoConfig, previous: Plan | None) -> list[Desired]:
    devices = previous.memo.get("devices", ()) if previous else ()
    desired = [
        Desired(target, "io.limits", dict.fromkeys(devices, NO_IO_LIMITS))
        for target in _targets(node, pods)
        if devices and node.has("io.limits")
    ]
    if config.be_weight and node.has("io.weight"):
        desired += [Desired(g.cgroup, "io.weight", DEFAULT_IO_WEIGHT) for g in be_groups(node, pods)]
    return desired


STRATEGY = Strategy(NAME, IoConfig, plan, relax)
