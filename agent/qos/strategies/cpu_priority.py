"""BE CPU priority: best-effort groups get the smallest CPU weight, so online work wins the CPU
whenever it wants it and BE runs on every cycle left idle.

Mechanisms (`mechanism`):
- `weight`: `cpu.shares=2` (v1) / `cpu.weight=1` (v2) on kubelet's BestEffort directory and on every
  BE-class pod outside it. Kubelet gives BestEffort pods this weight already; a BE pod that carries
  CPU requests (a Burstable pod labelled BE, as Volcano batch pods are) gets 1024 shares per core
  it requests from kubelet, which outweighs a small online pod and lets it wait (measured here: online
  p99 3-27x solo). With the minimal weight the online p99 stays at solo's (docs/qos.md).
- `idle`: `cpu.idle=1` (kernel 5.15+). The kernel treats a CPU that runs only idle-policy tasks as
  idle when it places a waking task, so an online wake-up is sent to a CPU running BE; where the
  kernel does not preempt at once (preemption model none/voluntary/lazy, this machine's), it waits
  there for the next tick: up to 4 ms at HZ=250 (traced: online wake-up p99 1.6-3 ms vs 0.04 ms
  with weights). While idle, the kernel also refuses cpu.shares writes (kubelet logs EINVAL).
- `auto` (default): `idle` only where the kernel says it preempts at once (`full` in
  /sys/kernel/debug/sched/preempt), `weight` otherwise, including when that file cannot be read.

Relax (shutdown, or a reload that turns this off): `cpu.idle=0` first, then kubelet's own shares
(2 for the BestEffort directory, from requests for a pod) — leaving idle resets the weight to
1024, so the order matters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lahar.agent.qos.knobs import MIN_SHARES
from lahar.agent.qos.model import Desired, NodeState, Plan, QosPod, Strategy, be_groups

NAME = "cpu_priority"
MECHANISMS = ("auto", "weight", "idle")


@dataclass(frozen=True)
class CpuPriorityConfig:
    enabled: bool = True
    mechanism: str = "auto"

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism: must be one of {', '.join(MECHANISMS)}, got {self.mechanism!r}")


def use_idle(node: NodeState, config: CpuPriorityConfig) -> bool:
    """Whether BE groups go idle-policy on this node (see the module's note on `auto`)."""
    if not node.has("cpu.idle"):
        return False
    if config.mechanism == "auto":
        return node.preempt_mode == "full"
    return config.mechanism == "idle"


def plan(node: NodeState, pods: Sequence[QosPod], config: CpuPriorityConfig, previous: Plan | None) -> Plan:
    idle = use_idle(node, config)
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
    """Back to kubelet's own values: not idle, then kubelet's shares."""
    desired: list[Desired] = []
    for group in be_groups(node, pods):
        if node.has("cpu.idle"):
            desired.append(Desired(group.cgroup, "cpu.idle", 0))
        desired.append(Desired(group.cgroup, "cpu.weight", group.relaxed_shares))
    return desired


STRATEGY = Strategy(NAME, CpuPriorityConfig, plan, relax)
