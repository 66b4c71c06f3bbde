"""Numatopology (`nodeinfo.volcano.sh/v1alpha1`, cluster-scoped, named after its node): what
Volcano's resource-exporter reports about a node's CPUs and the kubelet's CPU and Topology Manager
policies. The scheduler's numa-aware plugin reads it for nodes whose Lahar agent reports no NUMA
topology, so a Volcano cluster running the exporter keeps working unchanged.

```yaml
spec:
  policies: {CPUManagerPolicy: static, TopologyManagerPolicy: single-numa-node}
  resReserved: {cpu: "1"}                 # the kubelet's reserved CPUs (rounded up to whole CPUs)
  numares: {cpu: {allocatable: "0-3,6", capacity: 8}}   # CPUs the kubelet can still pin
  cpuDetail: {"0": {numa: 0, socket: 0, core: 0}, ...}  # every CPU: its NUMA node, socket, core
  podAllocations: [{uid: ..., name: ..., namespace: ...}]  # pods the kubelet has pinned already
```

`numa_info` reads one into `NodeNumaInfo`; a malformed object (a CPU set that is not a list of
CPU IDs and ranges, an unknown policy name, an allocatable CPU missing from `cpuDetail`) raises
`ValidationError` naming every bad field, and `validate` returns the same errors."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lahar.api.errors import Field, FieldError, ValidationError

CPU_MANAGER_POLICY = "CPUManagerPolicy"
TOPOLOGY_MANAGER_POLICY = "TopologyManagerPolicy"
# The kubelet's Topology Manager policies (Volcano's batch.NumaPolicy values).
NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE = "none", "best-effort", "restricted", "single-numa-node"
TOPOLOGY_POLICIES = (NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE)
CPU_MANAGER_POLICIES = ("none", "static")


@dataclass(frozen=True, slots=True)
class CpuInfo:
    numa: int
    socket: int
    core: int  # unique within its socket only (the exporter's form)


@dataclass(frozen=True, slots=True)
class PodAllocation:
    uid: str
    name: str
    namespace: str


@dataclass(frozen=True)
class NodeNumaInfo:
    node: str
    cpu_manager_policy: str  # "" when not reported
    topology_policy: str  # "" when not reported
    cpus: Mapping[int, CpuInfo]  # every CPU of the node
    allocatable: frozenset[int]  # CPUs the kubelet can still pin
    reserved_cpus: int  # whole CPUs the kubelet keeps for itself
    pinned: tuple[PodAllocation, ...]  # pods the kubelet has pinned (their CPUs are not allocatable)

    def has_pinned(self, uid: str, namespace: str, name: str) -> bool:
        """Whether the kubelet reports the pod pinned (by UID, or by namespace and name: the
        exporter uses either, depending on its source)."""
        return any(p.uid == uid or (p.name == name and p.namespace == namespace) for p in self.pinned)


def parse_cpuset(text: str) -> frozenset[int]:
    """A Linux CPU list ("0-3,6,8-9"; "" is empty), as cpuset.Parse reads it."""
    cpus: set[int] = set()
    for part in text.split(",") if text.strip() else ():
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list (IDs and ranges such as 0-3,6)")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"{text!r} is not a CPU list: range {part.strip()} runs backwards")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def _cpu_detail(spec: Field) -> dict[int, CpuInfo]:
    detail = spec.child("cpuDetail")
    cpus: dict[int, CpuInfo] = {}
    if not detail.present or detail.as_mapping() is None:
        return cpus
    for key, entry in detail.entries():
        if not key.isdigit():
            entry.report(f"{key!r} is not a CPU ID")
            continue
        if entry.as_mapping() is None:
            continue
        numa, socket, core = (
            entry.child(name).as_int(minimum=0) if entry.child(name).present else 0
            for name in ("numa", "socket", "core")
        )
        if numa is not None and socket is not None and core is not None:
            cpus[int(key)] = CpuInfo(numa, socket, core)
    return cpus


def _read(obj: Mapping[str, Any]) -> tuple[NodeNumaInfo, list[FieldError]]:
    root = Field(obj)
    name = root.child("metadata").child("name").value
    spec = root.child("spec")
    policies = spec.child("policies")
    cpu_policy = topology_policy = ""
    if policies.present and policies.as_mapping() is not None:
        for key, entry in policies.entries():
            if key == CPU_MANAGER_POLICY:
                cpu_policy = entry.as_choice(CPU_MANAGER_POLICIES, "CPU Manager policy") or ""
            elif key == TOPOLOGY_MANAGER_POLICY:
                topology_policy = entry.as_choice(TOPOLOGY_POLICIES, "Topology Manager policy") or ""
            else:
                entry.not_supported(key, (CPU_MANAGER_POLICY, TOPOLOGY_MANAGER_POLICY), "policy name")
    cpus = _cpu_detail(spec)
    allocatable: frozenset[int] = frozenset()
    cpu = spec.child("numares").child("cpu")
    if cpu.present and cpu.as_mapping() is not None and cpu.child("allocatable").present:
        text = cpu.child("allocatable").as_str()
        try:
            allocatable = parse_cpuset(text) if text is not None else frozenset()
        except ValueError as error:
            cpu.child("allocatable").report(str(error))
        unknown = sorted(allocatable - cpus.keys())
        if unknown:
            cpu.child("allocatable").report(f"CPUs {unknown} are not in spec.cpuDetail")
            allocatable = allocatable & cpus.keys()
    reserved = 0
    reserved_cpu = spec.child("resReserved").child("cpu")
    if reserved_cpu.present:
        quantity = reserved_cpu.as_quantity()
        if quantity is not None:
            reserved = math.ceil(quantity.milli_value() / 1000)  # fractional CPUs cannot be pinned
    pinned = []
    allocations = spec.child("podAllocations")
    if allocations.present and allocations.as_list() is not None:
        for entry in allocations.elements():
            if entry.as_mapping() is not None:
                uid, pod, namespace = (entry.child(key).as_str() or "" for key in ("uid", "name", "namespace"))
                pinned.append(PodAllocation(uid, pod, namespace))
    info = NodeNumaInfo(str(name or ""), cpu_policy, topology_policy, cpus, allocatable, reserved, tuple(pinned))
    return info, root.errors


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    return _read(obj)[1]


def numa_info(obj: Mapping[str, Any]) -> NodeNumaInfo:
    """The node's NUMA information, or ValidationError naming every malformed field."""
    info, errors = _read(obj)
    if errors:
        raise ValidationError(errors)
    return info
