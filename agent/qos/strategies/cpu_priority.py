"""BE CPU priority: best-effort groups yield the CPU to online work the moment it wants it.

`cpu.idle=1` (kernel 5.15+, v1 and v2) makes a group SCHED_IDLE-like: it runs only on CPU time
nobody else wants and is preempted at once on wakeup, which weights alone do not give. Without it,
the minimal weight (`cpu.shares=2` / `cpu.weight=1`). Set on kubelet's BestEffort directory and on
BE pods outside it; online pods are never touched.

Trade-off: while `cpu.idle=1`, the kernel refuses `cpu.shares` writes to that group (EINVAL), and
kubelet writes `cpu.shares=2` to its BestEffort directory when it syncs QoS cgroups; kubelet logs
the refusal and carries on (a kubelet restart re-creates the QoS cgroups and may fail while the
agent runs, Koordinator issue 2732). `use_idle: false` trades the stronger preemption for
compatibility; relaxing on shutdown sets `cpu.idle=0`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lahar.agent.qos.knobs import MIN_SHARES
from lahar.agent.qos.model import Desired, NodeState, Plan, QosPod, Strategy, be_groups

NAME = "cpu_priority"


@dataclass(frozen=True)
class CpuPriorityConfig:
    enabled: bool = True
    use_idle: bool = True  # cpu.idle=1 where the kernel has it; False: minimal shares/weight only


def plan(node: NodeState, pods: Sequence[QosPod], config: CpuPriorityConfig, previous: Plan | None) -> Plan:
    idle = config.use_idle and node.has("cpu.idle")
    desired: list[Desired] = []
    for group in be_groups(node, pods):
        if idle:
            desired.append(Desired(group.cgroup, "cpu.idle", 1))
            continue
        if node.has("cpu.idle"):  # the kernel refuses a weight while the group is idle
            desired.append(Desired(group.cgroup, "cpu.idle", 0))
        desired.append(Desired(group.cgroup, "cpu.weight", MIN_SHARES))
    return Plan(tuple(desired), figures={"be_cpu_idle": float(idle)})


def relax(node: NodeState, pods: Sequence[QosPod], config: CpuPriorityConfig, previous: Plan | None) -> list[Desired]:
    """Back to kubelet's own values: not idle and, where the plan set a weight, kubelet's shares
    (2 for BestEffort, from requests otherwise)."""
    weighted = previous is not None and any(d.knob == "cpu.weight" for d in previous.desired)
    desired: list[Desired] = []
    for group in be_groups(node, pods):
        if node.has("cpu.idle"):
            desired.append(Desired(group.cgroup, "cpu.idle", 0))
        if weighted:
            desired.append(Desired(group.cgroup, "cpu.weight", group.relaxed_shares))
    return desired


STRATEGY = Strategy(NAME, CpuPriorityConfig, plan, relax)
