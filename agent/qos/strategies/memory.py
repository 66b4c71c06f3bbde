"""Memory: best-effort pods stop growing, and give back page cache, once the node's memory passes
its threshold; online pods' requests are protected from reclaim (v2).

- BE cap (`memory.limit_in_bytes` on v1, `memory.high` on v2) on the BestEffort directory and on BE
  pods outside it. While node used / total ≥ `threshold`, each group is capped at its working set
  + `headroom_bytes` and never raised: its page cache is reclaimed and it cannot grow, so further
  growth costs the BE group itself (reclaim, then on v1 its own OOM) and not online pods. Not below
  the working set: v1 refuses such a limit (EBUSY) and v2 would stall BE in reclaim; the eviction
  manager handles BE working sets that must go. Once usage falls `release_ratio` below the
  threshold the caps are lifted (back to kubelet's limits); in between they hold, so the caps do
  not flap around the threshold.
- v2 `memory.reclaim`: while over the threshold, up to `reclaim_step_bytes` per tick are reclaimed
  from BE groups (split by working set), proactively and without lowering the cap further.
- v1 `memory.soft_limit_in_bytes` = 0 on BE groups: under global memory pressure the kernel
  reclaims from groups over their soft limit first, so BE pages go before anyone else's.
- v2 online protection: `memory.low` (or `memory.min` with `protect_with_min`) = the memory
  requests of each LC/LS pod, and their sum on the QoS directory and kubepods above them (a child's
  protection is bounded by its parents'). `min` is a hard guarantee that can push the OOM killer
  onto others; `low` yields when nothing else is left."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from lahar.agent.cgroups.layout import CgroupVersion
from lahar.agent.qos.eviction import QUANTITY_UNIT, check_at_least, check_ratio
from lahar.agent.qos.model import BeGroup, Desired, NodeState, Plan, QosPod, Strategy, be_groups
from lahar.api.qos import BURSTABLE

NAME = "memory"
CAP, RELEASE, RECLAIM = "cap", "release", "reclaim"  # its actions (lahar_qos_actions_total)
MiB = 1 << 20
PAGE = 4096


@dataclass(frozen=True)
class MemoryConfig:
    enabled: bool = True
    threshold: float = 0.80  # node memory used / total past which BE groups are capped
    release_ratio: float = 0.05  # caps lift once usage is this far below the threshold
    headroom_bytes: int = field(default=32 * MiB, metadata={QUANTITY_UNIT: "bytes"})
    be_soft_limit: bool = True  # v1: BE soft limit 0, reclaimed first under global pressure
    reclaim_step_bytes: int = field(default=64 * MiB, metadata={QUANTITY_UNIT: "bytes"})  # v2, per tick
    protect_online: bool = True  # v2: online pods' requests as memory.low
    protect_with_min: bool = False  # v2: memory.min (hard) instead of memory.low

    def __post_init__(self) -> None:
        check_ratio("threshold", self.threshold)
        check_ratio("release_ratio", self.release_ratio, low_open=False)
        if self.release_ratio >= self.threshold:
            raise ValueError(f"release_ratio: must be below threshold ({self.threshold}), got {self.release_ratio}")
        check_at_least("headroom_bytes", self.headroom_bytes, 0)
        check_at_least("reclaim_step_bytes", self.reclaim_step_bytes, 0)


def _cap(group: BeGroup, cap: int | None) -> int | None:
    """A cap never above the limit kubelet gave the group."""
    if cap is None:
        return group.relaxed_memory_bytes
    return cap if group.relaxed_memory_bytes is None else min(cap, group.relaxed_memory_bytes)


def plan(node: NodeState, pods: Sequence[QosPod], config: MemoryConfig, previous: Plan | None) -> Plan:
    total, used = node.memory_total_bytes, node.memory_used_bytes
    over = used - total * config.threshold
    released = used < total * (config.threshold - config.release_ratio)
    held: dict[str, int] = dict(previous.memo.get("caps", {})) if previous else {}
    groups = be_groups(node, pods)
    caps: dict[str, int] = {}
    for group in groups:
        if over > 0:
            cap = group.memory_working_set_bytes + config.headroom_bytes
            caps[group.cgroup] = min(cap, held[group.cgroup]) if group.cgroup in held else cap
        elif not released and group.cgroup in held:
            caps[group.cgroup] = held[group.cgroup]
    desired = [Desired(g.cgroup, "memory.cap", _cap(g, caps.get(g.cgroup))) for g in groups]
    actions = []
    if any(caps.get(cgroup, math.inf) < held.get(cgroup, math.inf) for cgroup in caps):
        actions.append(CAP)
    if held and not caps:
        actions.append(RELEASE)
    if node.version is CgroupVersion.V1 and config.be_soft_limit:
        desired += [Desired(g.cgroup, "memory.soft_limit", 0) for g in groups]
    if over > 0 and node.has("memory.reclaim"):
        reclaims = _reclaims(groups, min(over, config.reclaim_step_bytes))
        desired += reclaims
        actions += [RECLAIM] if reclaims else []
    protection = _protection(node, pods, config) if config.protect_online else []
    desired += protection
    figures = {
        "be_memory_cap_bytes": float(sum(caps.values())) if caps else math.inf,
        "be_memory_capped_groups": float(len(caps)),
        "online_memory_protected_bytes": float(sum(d.value for d in protection if d.cgroup == node.layout.top)),
    }
    return Plan(tuple(desired), figures, {"caps": caps}, tuple(actions))


def _reclaims(groups: Sequence[BeGroup], amount: float) -> list[Desired]:
    """`amount` bytes to reclaim, split between BE groups by working set, in whole pages."""
    total = sum(g.memory_working_set_bytes for g in groups)
    desired = []
    for group in groups:
        share = int(amount * group.memory_working_set_bytes / total) // PAGE * PAGE if total else 0
        if share:
            desired.append(Desired(group.cgroup, "memory.reclaim", share))
    return desired


def _protection(node: NodeState, pods: Sequence[QosPod], config: MemoryConfig) -> list[Desired]:
    """memory.low/min = requests on each online pod, and the sums on the directories above it."""
    knob = "memory.min" if config.protect_with_min else "memory.low"
    if not node.has(knob):
        return []
    online = [p for p in pods if p.online and not p.cgroup.startswith(node.be_dir + "/")]
    burstable = node.layout.qos_dir(BURSTABLE)
    in_burstable = sum(p.memory_request_bytes for p in online if p.cgroup.startswith(burstable + "/"))
    return [
        Desired(node.layout.top, knob, sum(p.memory_request_bytes for p in online)),
        Desired(burstable, knob, in_burstable),
        *(Desired(p.cgroup, knob, p.memory_request_bytes) for p in online),
    ]


def relax(node: NodeState, pods: Sequence[QosPod], config: MemoryConfig, previous: Plan | None) -> list[Desired]:
    """Caps back to kubelet's limits, soft limits off, protections back to none."""
    groups = be_groups(node, pods)
    desired = [Desired(g.cgroup, "memory.cap", _cap(g, None)) for g in groups]
    if node.version is CgroupVersion.V1:
        desired += [Desired(g.cgroup, "memory.soft_limit", None) for g in groups]
    desired += [Desired(d.cgroup, d.knob, 0) for d in _protection(node, pods, config)]
    return desired


STRATEGY = Strategy(NAME, MemoryConfig, plan, relax, (CAP, RELEASE, RECLAIM))
