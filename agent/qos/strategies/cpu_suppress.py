"""CPU suppress, the heart of co-location: all best-effort pods together may use at most

    budget = node_cores × threshold − online usage − max(system usage, reserve)

floored at `floor_ratio × node_cores`, where online usage is what LC, LS and SYSTEM pods used over
the last interval and system usage is what the node used outside pods (kubelet, the runtime, the
kernel). The cap shrinks at once and grows by at most `grow_step_ratio × cores` per tick, so a
quiet second does not hand back everything before online load returns; changes smaller than the
deadband are not written.

Where the cap goes: a CFS quota (`cpu.cfs_quota_us` / `cpu.max`) on kubelet's BestEffort QoS
directory, which holds every BestEffort pod. The kernel then enforces the sum exactly, with one
write per change however many pods there are, a BE pod created between two ticks is born under the
cap, and the BE pods share the budget among themselves by their own weights, with no
redistribution by the agent as their usage moves. Only a BE-class pod outside that directory (a
Burstable pod labelled BE) gets a quota of its own: the budget is split max-min fairly between the
directory and such pods by recent usage (plus headroom to grow).

The pressure fast path (`fast_cap`, run every ~100 ms by fast_path.py) recomputes the budget from
the online usage of the last few hundred milliseconds and tightens the cap before the next tick
when online load steps up; when CPU pressure (PSI "some") passes `pressure_stall_ratio` while
online pods are busy it also cuts the tick's cap by `pressure_cut_ratio`. It only ever tightens;
growth is the tick's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lahar.agent.qos.eviction import check_at_least, check_ratio
from lahar.agent.qos.knobs import DEFAULT_CFS_PERIOD_US, CpuMax, milli_to_quota_us
from lahar.agent.qos.model import Desired, NodeState, Plan, QosPod, Strategy, be_groups, fair_split
from lahar.api.qos import QoSClass

NAME = "cpu_suppress"
# A group's demand: what it used plus room to show it wants more (else a capped group never grows).
DEMAND_HEADROOM_RATIO = 0.25
DEMAND_HEADROOM_CORES = 0.05


@dataclass(frozen=True)
class CpuSuppressConfig:
    enabled: bool = True
    threshold: float = 0.65  # share of the node's cores online + BE may use together
    floor_ratio: float = 0.05  # BE always keeps this share of the cores (no starvation to zero)
    reserve_cores: float = 0.0  # usage outside pods counts as at least this much
    grow_step_ratio: float = 0.1  # the cap grows by at most this share of the cores per tick
    deadband_ratio: float = 0.01  # changes smaller than this share of the cores are not written
    cfs_period_us: int = DEFAULT_CFS_PERIOD_US
    fast_path: bool = True  # the pressure fast path between ticks
    fast_interval_seconds: float = 0.05
    fast_window_seconds: float = 0.2  # online usage for the fast path is averaged over this
    pressure_stall_ratio: float = 0.2  # PSI cpu "some" share of wall time that counts as pressure
    pressure_cut_ratio: float = 0.25  # under pressure the fast path cuts the tick's cap by this share
    # Pressure counts only while online pods use at least this share of the cores: node-wide PSI
    # cannot tell whose tasks stalled, and BE waiting on BE is no reason to cut BE.
    pressure_min_online_ratio: float = 0.05

    def __post_init__(self) -> None:
        check_ratio("threshold", self.threshold)
        check_ratio("floor_ratio", self.floor_ratio, low_open=False)
        check_at_least("reserve_cores", self.reserve_cores, 0)
        check_ratio("grow_step_ratio", self.grow_step_ratio)
        check_ratio("deadband_ratio", self.deadband_ratio, low_open=False)
        check_at_least("cfs_period_us", self.cfs_period_us, 1000)
        if self.cfs_period_us > 1_000_000:
            raise ValueError(f"cfs_period_us: must be <= 1000000 (the kernel's limit), got {self.cfs_period_us}")
        check_at_least("fast_interval_seconds", self.fast_interval_seconds, 0.01)
        check_at_least("fast_window_seconds", self.fast_window_seconds, self.fast_interval_seconds)
        check_ratio("pressure_stall_ratio", self.pressure_stall_ratio)
        check_ratio("pressure_cut_ratio", self.pressure_cut_ratio, low_open=False)
        check_ratio("pressure_min_online_ratio", self.pressure_min_online_ratio, low_open=False)
        if self.floor_ratio > self.threshold:
            raise ValueError(f"floor_ratio: must be <= threshold ({self.threshold}), got {self.floor_ratio}")


def usage_split(node: NodeState, pods: Sequence[QosPod]) -> tuple[float, float]:
    """(online, system) cores: LC/LS/SYSTEM pods, and the node's usage outside every pod."""
    online = sum(p.cpu_usage_cores for p in pods if p.qos is not QoSClass.BE)
    system = node.cpu_usage_cores - sum(p.cpu_usage_cores for p in pods)
    return online, max(system, 0.0)


def budget(config: CpuSuppressConfig, cores: int, online: float, system: float) -> float:
    """What all BE pods together may use, in cores."""
    room = cores * config.threshold - online - max(system, config.reserve_cores)
    return min(max(room, cores * config.floor_ratio), float(cores))


def next_cap(previous: float | None, target: float, cores: int, config: CpuSuppressConfig) -> tuple[float, str]:
    """(the cap to hold, the action): shrink at once, grow by a bounded step, ignore jitter."""
    if previous is None:
        return target, "set"
    if abs(target - previous) < cores * config.deadband_ratio:
        return previous, ""
    if target < previous:
        return target, "shrink"
    return min(target, previous + cores * config.grow_step_ratio), "grow"


def plan(node: NodeState, pods: Sequence[QosPod], config: CpuSuppressConfig, previous: Plan | None) -> Plan:
    online, system = usage_split(node, pods)
    target = budget(config, node.cores, online, system)
    cap, action = next_cap(previous.memo.get("cap") if previous else None, target, node.cores, config)
    groups = be_groups(node, pods)
    demands = [g.cpu_usage_cores * (1 + DEMAND_HEADROOM_RATIO) + DEMAND_HEADROOM_CORES for g in groups]
    shares = dict(zip((g.cgroup for g in groups), fair_split(cap, demands)))
    figures = {"be_cpu_budget_cores": target, "online_cpu_usage_cores": online, "system_cpu_usage_cores": system}
    return _capped(shares, cap, config.cfs_period_us, figures, (action,) if action else (), tick_cap=cap)


def _capped(
    shares: dict[str, float],
    cap: float,
    period_us: int,
    figures: dict[str, float],
    actions: tuple[str, ...],
    tick_cap: float,
) -> Plan:
    desired = tuple(Desired(cgroup, "cpu.max", CpuMax.of_cores(share, period_us)) for cgroup, share in shares.items())
    return Plan(
        desired,
        {**figures, "be_cpu_quota_cores": cap},
        {"cap": cap, "tick_cap": tick_cap, "shares": shares, "period_us": period_us},
        actions,
    )


def fast_cap(
    config: CpuSuppressConfig, cores: int, online: float, system: float, stall_ratio: float, previous: Plan
) -> float | None:
    """The fast path's verdict: a tighter cap to apply now, or None. `online`/`system` are the
    last few hundred milliseconds' usage; the pressure cut is taken from the tick's cap, so
    repeated samples under pressure do not compound it before the next tick."""
    target = budget(config, cores, online, system)
    if stall_ratio >= config.pressure_stall_ratio and online >= cores * config.pressure_min_online_ratio:
        cut = previous.memo["tick_cap"] * (1 - config.pressure_cut_ratio)
        target = min(target, max(cut, cores * config.floor_ratio))
    if previous.memo["cap"] - target >= cores * config.deadband_ratio:
        return target
    return None


def tightened(previous: Plan, cap: float) -> Plan:
    """The previous plan with every group's share scaled down to a new total cap."""
    scale = cap / previous.memo["cap"] if previous.memo["cap"] > 0 else 0.0
    shares = {cgroup: share * scale for cgroup, share in previous.memo["shares"].items()}
    return _capped(
        shares,
        cap,
        previous.memo["period_us"],
        dict(previous.figures),
        ("fast_shrink",),
        tick_cap=previous.memo["tick_cap"],
    )


def relax(node: NodeState, pods: Sequence[QosPod], config: CpuSuppressConfig, previous: Plan | None) -> list[Desired]:
    """The BestEffort directory unlimited; a BE pod elsewhere back to kubelet's quota for its limit."""
    desired = []
    for group in be_groups(node, pods):
        limit = group.relaxed_cpu_millicores
        quota = None if limit is None else milli_to_quota_us(limit, DEFAULT_CFS_PERIOD_US)
        desired.append(Desired(group.cgroup, "cpu.max", CpuMax(quota, DEFAULT_CFS_PERIOD_US)))
    return desired


STRATEGY = Strategy(NAME, CpuSuppressConfig, plan, relax)
