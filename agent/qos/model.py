"""What QoS strategies decide from and what they decide: plain values, no I/O.

A strategy is a pure function (node state, pods, its config, its previous plan) -> Plan; the plan's
`desired` cgroup values go to the one executor, which writes what differs (DESIGN.md, "Style":
strategies compute, the executor writes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from lahar.agent.cgroups.layout import CgroupVersion, KubeLayout
from lahar.agent.collectors.latency_probe import LatencyProbe
from lahar.agent.qos.cpu_manager import CpuManagerState
from lahar.agent.qos.knobs import milli_to_shares
from lahar.api.qos import BEST_EFFORT, QoSClass

ONLINE = frozenset({QoSClass.LC, QoSClass.LS})


class Desired(NamedTuple):
    """One value a strategy wants in one cgroup: `knob` is a logical name (knobs.KNOBS)."""

    cgroup: str  # relative to the hierarchy, e.g. kubepods/besteffort
    knob: str
    value: Any


@dataclass(frozen=True)
class QosContainer:
    id: str
    name: str  # "" for a container the API does not name (the sandbox)
    cgroup: str
    cpu_limit_millicores: int | None = None
    exclusive_cpus: frozenset[int] = frozenset()  # cores it holds alone (static CPU manager, pinning)


@dataclass(frozen=True)
class QosPod:
    uid: str
    namespace: str
    name: str
    qos: QoSClass
    kube_qos: str  # Guaranteed, Burstable, BestEffort: where kubelet put its cgroup
    cgroup: str
    cpu_usage_cores: float = 0.0
    memory_working_set_bytes: int = 0
    cpu_request_millicores: int = 0
    cpu_limit_millicores: int | None = None  # None: unbounded (a container without a limit)
    memory_request_bytes: int = 0
    memory_limit_bytes: int | None = None
    containers: tuple[QosContainer, ...] = ()
    latency_probe: LatencyProbe | None = None  # its own latency target (lahar.dev/latency-probe)

    @property
    def online(self) -> bool:
        return self.qos in ONLINE

    @property
    def exclusive_cpus(self) -> frozenset[int]:
        return frozenset().union(*(c.exclusive_cpus for c in self.containers))


@dataclass(frozen=True)
class NodeState:
    version: CgroupVersion
    layout: KubeLayout
    cpus: frozenset[int]  # the CPUs pods may run on
    cpu_usage_cores: float
    memory_total_bytes: int
    memory_used_bytes: int
    supported: frozenset[str] = frozenset()  # knobs this kernel offers under kubepods
    devices: Mapping[str, str] = field(default_factory=dict)  # configured device -> "major:minor"
    cpu_manager: CpuManagerState | None = None
    # The scheduler's preemption model (/sys/kernel/debug/sched/preempt: none, voluntary, full,
    # lazy); "" when the kernel does not say (no debugfs, or not readable).
    preempt_mode: str = ""

    @property
    def cores(self) -> int:
        return len(self.cpus)

    @property
    def be_dir(self) -> str:
        """kubelet's BestEffort QoS directory: every BestEffort pod lives under it."""
        return self.layout.qos_dir(BEST_EFFORT)

    def has(self, knob: str) -> bool:
        return knob in self.supported


@dataclass(frozen=True)
class Plan:
    desired: tuple[Desired, ...] = ()
    figures: Mapping[str, float] = field(default_factory=dict)  # for metrics: lahar_qos_<name>
    memo: Mapping[str, Any] = field(default_factory=dict)  # the strategy's state for its next plan
    actions: tuple[str, ...] = ()  # decisions worth counting: shrink, grow, cap, relax, ...


@dataclass(frozen=True)
class Strategy:
    """One QoS strategy: its config section (a frozen dataclass with `enabled`), the plan while
    enabled (given its previous plan), and the values that undo it (on shutdown, or when a reload
    turns it off or changes it), given the last plan made."""

    name: str
    config_type: type
    plan: Callable[[NodeState, Sequence[QosPod], Any, Plan | None], Plan]
    relax: Callable[[NodeState, Sequence[QosPod], Any, Plan | None], list[Desired]]
    actions: tuple[str, ...] = ()  # every action its plans (or control) can name: counted from 0


# --- best-effort groups ---------------------------------------------------------------------


@dataclass(frozen=True)
class BeGroup:
    """A cgroup that holds best-effort work and takes BE limits as a whole: kubelet's BestEffort
    directory (all BestEffort pods, and any born before the next tick), or one BE-class pod that
    kubelet placed elsewhere because it has requests (`lahar.dev/qos-class: BE` on a Burstable pod)."""

    cgroup: str
    pods: tuple[QosPod, ...]
    shared: bool  # kubelet's BestEffort directory
    cpu_usage_cores: float
    memory_working_set_bytes: int
    relaxed_cpu_millicores: int | None  # the CPU limit kubelet gave it; None: unlimited
    relaxed_memory_bytes: int | None
    relaxed_shares: int  # kubelet's cpu.shares for it


def be_groups(node: NodeState, pods: Sequence[QosPod]) -> list[BeGroup]:
    """The BestEffort directory first (always, so new BE pods are born under its limits), then
    each BE pod that lives outside it, with the limits kubelet gave it to return to."""
    inside = node.be_dir + "/"
    shared = [p for p in pods if p.qos is QoSClass.BE and p.cgroup.startswith(inside)]
    groups = [
        BeGroup(
            node.be_dir,
            tuple(shared),
            True,
            sum(p.cpu_usage_cores for p in shared),
            sum(p.memory_working_set_bytes for p in shared),
            None,
            None,
            2,
        )
    ]
    for pod in pods:
        if pod.qos is QoSClass.BE and not pod.cgroup.startswith(inside):
            groups.append(
                BeGroup(
                    pod.cgroup,
                    (pod,),
                    False,
                    pod.cpu_usage_cores,
                    pod.memory_working_set_bytes,
                    pod.cpu_limit_millicores,
                    pod.memory_limit_bytes,
                    milli_to_shares(pod.cpu_request_millicores),
                )
            )
    return groups


def fair_split(total: float, demands: Sequence[float]) -> list[float]:
    """Max-min fair shares of `total`: whoever wants less than an equal share gets what it wants,
    the rest is split evenly among the others; what nobody wants is spread evenly on top, so
    the shares always add up to `total`."""
    shares = [0.0] * len(demands)
    if not demands:
        return shares
    remaining = max(total, 0.0)
    waiting = sorted(range(len(demands)), key=lambda i: demands[i])
    while waiting:
        equal = remaining / len(waiting)
        smallest = waiting[0]
        if demands[smallest] > equal:
            for index in waiting:
                shares[index] = equal
            return shares
        shares[smallest] = max(demands[smallest], 0.0)
        remaining -= shares[smallest]
        waiting.pop(0)
    spare = remaining / len(demands)
    return [share + spare for share in shares]
