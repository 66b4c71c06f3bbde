"""LS burst: online pods with a CPU limit may bank unused quota and spend it in a burst
(`cpu.cfs_burst_us` on v1, `cpu.max.burst` on v2, kernel 5.14+), so a short spike is not throttled
although the average stays within the limit.

burst = the cgroup's quota × `burst_ratio`, on each online pod's cgroup and each of its containers
that has a limit (the quota is kubelet's: limit × period). The kernel refuses a burst larger than
the quota, hence the ratio's bound of 1. Trade-off: a burst lets a pod exceed its limit for a
moment, which the node's other pods feel as latency; BE pods are suppressed separately and never
get one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lahar.agent.qos.eviction import check_at_least, check_ratio
from lahar.agent.qos.knobs import DEFAULT_CFS_PERIOD_US, milli_to_quota_us
from lahar.agent.qos.model import Desired, NodeState, Plan, QosPod, Strategy
from lahar.api.qos import QoSClass

NAME = "ls_burst"


@dataclass(frozen=True)
class LsBurstConfig:
    enabled: bool = True
    burst_ratio: float = 1.0  # burst = quota × this; the kernel allows at most the quota
    include_lc: bool = True  # LC pods with limits burst too
    cfs_period_us: int = DEFAULT_CFS_PERIOD_US  # kubelet's CFS period (--cpu-cfs-quota-period)

    def __post_init__(self) -> None:
        check_ratio("burst_ratio", self.burst_ratio)
        check_at_least("cfs_period_us", self.cfs_period_us, 1000)


def _limited(pods: Sequence[QosPod], config: LsBurstConfig) -> Iterator[tuple[str, int]]:
    """(cgroup, CPU limit in millicores) of every bursting pod and container."""
    classes = {QoSClass.LS, QoSClass.LC} if config.include_lc else {QoSClass.LS}
    for pod in pods:
        if pod.qos not in classes:
            continue
        if pod.cpu_limit_millicores:
            yield pod.cgroup, pod.cpu_limit_millicores
        for container in pod.containers:
            if container.cpu_limit_millicores:
                yield container.cgroup, container.cpu_limit_millicores


def plan(node: NodeState, pods: Sequence[QosPod], config: LsBurstConfig, previous: Plan | None) -> Plan:
    if not node.has("cpu.burst"):
        return Plan(figures={"burst_cgroups": 0.0})
    desired = tuple(
        Desired(cgroup, "cpu.burst", int(milli_to_quota_us(limit, config.cfs_period_us) * config.burst_ratio))
        for cgroup, limit in _limited(pods, config)
    )
    return Plan(desired, {"burst_cgroups": float(len(desired))})


def relax(node: NodeState, pods: Sequence[QosPod], config: LsBurstConfig, previous: Plan | None) -> list[Desired]:
    if not node.has("cpu.burst"):
        return []
    return [Desired(cgroup, "cpu.burst", 0) for cgroup, _ in _limited(pods, config)]


STRATEGY = Strategy(NAME, LsBurstConfig, plan, relax)
