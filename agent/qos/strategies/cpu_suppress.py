"""CPU suppress: restrict best-effort (BE) CPU only while online pods measurably wait for a CPU.

BE gets every cycle online pods leave idle. With no interference there is no cap at all: the BE
groups keep kubelet's own CFS settings and nothing is written. The minimal CPU weight that
cpu_priority gives every BE group already makes online tasks win the CPU on this kernel; a CFS
quota on BE costs online latency of its own (throttled BE leaves vCPUs halted, and an online
wake-up on a halted vCPU is slow: docs/qos.md, "What the kernel does"), so it is used only while
it measurably helps.

The signal (collectors/cpu_wait.py) is what online pods suffer: the share of their runnable time
spent waiting for a CPU over the last `window_seconds`, from each online pod's own PSI
(`cpu.pressure` "some") or, without it, its tasks' schedstat run delay. The loop (`control`, run
by the interference loop every `interval_seconds`):

- **cut** (multiplicative back-off) while the wait share over `window_seconds` (1 s) is above the
  upper limit, or over `fast_window_seconds` (200 ms) above `fast_wait_threshold` (blatant
  interference, cut within one short window), and BE uses at least `min_be_cores`: the cap becomes
  `backoff_ratio` × what BE used (or of the cap already in force), never under the floor; at most
  one cut a window of the signal that made it, so the effect of one is seen before the next;
- **grow** (additive) while the share is under the lower limit: `grow_step_ratio` × cores a
  second; a cap that reaches every core is lifted (no quota left);
- **hold** in between (the hysteresis band: a quiet node sees no writes at all).

Where an online pod declares its own latency target (`lahar.dev/latency-probe` and
`lahar.dev/latency-target`, collectors/latency_probe.py), its slack is a second signal: a pod
missing its target (slack < 0) makes a cut as a high wait does, and the cap grows only while every
such pod has at least `slo_grow_slack`. A cut for the target that did not raise the slack a
window later is not repeated.

A cut is judged a whole window later: one that did not lower the wait under 9/10 of what made it
is **reverted** at once (the cap goes back to what it was), since a quota costs online latency of
its own. The limits sit above a **baseline**: the wait online pods show while BE is not running,
or is held at its floor, or that a cut did not lower, is not BE's doing (their own threads
queueing, other tenants, daemons), so it becomes the baseline and the controller stops cutting
what cannot help. Upper limit = max(`wait_threshold`, baseline + `baseline_margin`); lower limit
= max(`wait_threshold` × `hysteresis`, baseline + `baseline_margin` × `hysteresis`). The baseline decays (half-life
`baseline_half_life_seconds`) so it is learned again.

An SRE may also set a utilisation ceiling (`ceiling_ratio`): BE ≤ cores × ceiling − online −
outside-pod usage. It is off by default: a busy node is the goal, not a symptom.

Where a cap goes: a CFS quota (`cpu.cfs_quota_us` / `cpu.max`) on kubelet's BestEffort directory,
which holds every BestEffort pod (one write however many pods; a pod born between two ticks is
under it), and one on each BE-class pod kubelet placed elsewhere (a Burstable pod labelled BE);
the cap is split max-min fairly between these groups by recent usage."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lahar.agent.qos.eviction import check_at_least, check_ratio
from lahar.agent.qos.knobs import DEFAULT_CFS_PERIOD_US, CpuMax, milli_to_quota_us
from lahar.agent.qos.model import BeGroup, Desired, NodeState, Plan, QosPod, Strategy, be_groups, fair_split
from lahar.api.qos import QoSClass

NAME = "cpu_suppress"
# A group's demand: what it used plus room to show it wants more (else a capped group never grows).
DEMAND_HEADROOM_RATIO = 0.25
DEMAND_HEADROOM_CORES = 0.05
BASELINE_WEIGHT = 0.5  # each baseline sample moves the baseline half way: a few windows learn it
# A cut that leaves the wait above this share of what made it did not help: the wait is not BE's.
# (Halving BE beside an online loop on one CPU takes its wait from about 0.7 to 0.5: a cut that
# helps need not help much.)
INEFFECTIVE_CUT_RATIO = 0.9
CUT, GROW, LIFT, HOLD, LEARN, REVERT = "cut", "grow", "lift", "", "baseline", "revert"


@dataclass(frozen=True)
class CpuSuppressConfig:
    enabled: bool = True  # the loop measuring online pods' CPU wait (metrics, alerts), an SRE's ceiling
    # Cutting BE when online pods wait: off by default. In both full runs of the 16-cell CPU
    # interference matrix on this machine (docs/qos.md) a cut never brought online p99 under what
    # the minimal weights alone gave, and where it acted it cost latency (builtin-low-cpu-requests:
    # 3.16 ms capped, 2.67 without; a quota leaves vCPUs halted). Turn it on where weights cannot
    # reach the interference (SMT siblings, BE outside kubepods), and measure.
    interference_cap: bool = False
    # Online pods' CPU wait as a share of their runnable time. Measured here (2 vCPUs, kernel
    # 6.18) beside BE held by weights: over 1 s windows 0.05-0.11 for the built-in service, 0.25-0.34
    # for redis and memcached at 4000 req/s (many wake-ups, each may wait up to a tick); over 200 ms
    # windows up to 0.38 for the built-in one. Beside BE that outweighs online (kubelet's weights
    # for BE pods with requests): 0.54-0.8. A quota costs latency of its own (halted vCPUs), and
    # in the interference matrix no cut ever beat the weights, so the cap is a safety net for
    # when weights fail, with limits clear of everything weights leave:
    wait_threshold: float = 0.5  # over window_seconds
    fast_wait_threshold: float = 0.75  # over fast_window_seconds
    baseline_margin: float = 0.10  # how far above their own baseline online wait may rise
    hysteresis: float = 0.5  # grow only below this share of the limits
    backoff_ratio: float = 0.5  # each cut keeps this share of what BE used
    grow_step_ratio: float = 0.1  # share of the cores the cap grows by per second
    floor_ratio: float = 0.05  # BE always keeps this share of the cores (no starvation to zero)
    min_be_cores: float = 0.05  # BE using less cannot be what online waits for: no cut
    # Online pods runnable less than this in a window give no signal (an idle service's few
    # wake-ups make a noisy ratio).
    min_online_runnable_seconds: float = 0.005
    baseline_half_life_seconds: float = 120.0
    deadband_ratio: float = 0.02  # cap changes smaller than this share of the cores are not written
    interval_seconds: float = 0.05  # the interference loop's sampling period
    window_seconds: float = 1.0  # the steady signal; a cut on it at most once a window
    fast_window_seconds: float = 0.2  # the fast signal; a cut on it at most once a fast window
    cfs_period_us: int = DEFAULT_CFS_PERIOD_US
    ceiling_ratio: float | None = None  # optional utilisation ceiling for online + BE + the rest
    # Pods that declare a latency target: the cap grows only while their slack is at least this
    # (a pod just meeting its target has no room for more BE).
    slo_grow_slack: float = 0.2

    def __post_init__(self) -> None:
        check_ratio("wait_threshold", self.wait_threshold)
        check_ratio("fast_wait_threshold", self.fast_wait_threshold)
        if self.fast_wait_threshold < self.wait_threshold:
            wanted = f"must be >= wait_threshold ({self.wait_threshold})"
            raise ValueError(f"fast_wait_threshold: {wanted}, got {self.fast_wait_threshold}")
        check_ratio("baseline_margin", self.baseline_margin)
        check_ratio("hysteresis", self.hysteresis)
        check_ratio("backoff_ratio", self.backoff_ratio)
        if self.backoff_ratio >= 1:
            raise ValueError(f"backoff_ratio: must be < 1 (a cut must cut), got {self.backoff_ratio}")
        check_ratio("grow_step_ratio", self.grow_step_ratio)
        check_ratio("floor_ratio", self.floor_ratio, low_open=False)
        check_at_least("min_be_cores", self.min_be_cores, 0)
        check_at_least("min_online_runnable_seconds", self.min_online_runnable_seconds, 0)
        check_at_least("baseline_half_life_seconds", self.baseline_half_life_seconds, 1)
        check_ratio("deadband_ratio", self.deadband_ratio, low_open=False)
        check_at_least("interval_seconds", self.interval_seconds, 0.01)
        if self.interval_seconds > 1:
            raise ValueError(
                f"interval_seconds: must be <= 1 (interference must be met fast), got {self.interval_seconds}"
            )
        check_at_least("fast_window_seconds", self.fast_window_seconds, self.interval_seconds)
        check_at_least("window_seconds", self.window_seconds, self.fast_window_seconds)
        if self.window_seconds > 10:
            raise ValueError(f"window_seconds: must be <= 10, got {self.window_seconds}")
        check_at_least("cfs_period_us", self.cfs_period_us, 1000)
        if self.cfs_period_us > 1_000_000:
            raise ValueError(f"cfs_period_us: must be <= 1000000 (the kernel's limit), got {self.cfs_period_us}")
        check_ratio("slo_grow_slack", self.slo_grow_slack, low_open=False)
        if self.ceiling_ratio is not None:
            check_ratio("ceiling_ratio", self.ceiling_ratio)
            if self.floor_ratio > self.ceiling_ratio:
                raise ValueError(
                    f"floor_ratio: must be <= ceiling_ratio ({self.ceiling_ratio}), got {self.floor_ratio}"
                )


# --- the control loop -------------------------------------------------------------------------


@dataclass(frozen=True)
class Signal:
    """What the interference loop measured over its last window."""

    at: float  # monotonic seconds
    wait_share: float | None  # online wait / online runnable time; None: online pods too idle to tell
    be_cores: float  # CPU all BE groups used over the window
    slo_slack: float | None = None  # worst 1 - latency/target of pods that declare one; None: none do
    fast_wait_share: float | None = None  # the same over the fast window


@dataclass(frozen=True)
class ControlState:
    cap: float | None = None  # cores all BE may use together; None: no cap
    baseline: float = 0.0  # online pods' own wait share (not BE's doing)
    last_cut: float = -math.inf
    updated: float | None = None
    demand: float | None = None  # what BE used before the first cut: what it asks for while capped
    cut_share: float | None = None  # the wait share that made the last cut, until its effect is judged
    cap_before_cut: float | None = None  # to go back to when the cut did not help
    cut_fast: bool = False  # the last cut was made on the fast signal: judged on it, a fast window later
    cut_slack: float | None = None  # the latency slack when the last cut was made for it


def limits(config: CpuSuppressConfig, baseline: float) -> tuple[float, float]:
    """(lower, upper) limits of the online wait share: grow below the first, cut above the second."""
    upper = max(config.wait_threshold, baseline + config.baseline_margin)
    lower = max(config.wait_threshold * config.hysteresis, baseline + config.baseline_margin * config.hysteresis)
    return lower, upper


def decayed(baseline: float, seconds: float, half_life: float) -> float:
    return baseline * 0.5 ** (max(seconds, 0.0) / half_life)


def control(state: ControlState, signal: Signal, config: CpuSuppressConfig, cores: int) -> tuple[ControlState, str]:
    """The next state after a window's signal, and what was done (cut, grow, lift, baseline or "")."""
    elapsed = 0.0 if state.updated is None else max(signal.at - state.updated, 0.0)
    baseline = decayed(state.baseline, elapsed, config.baseline_half_life_seconds)
    floor = cores * config.floor_ratio
    share = signal.wait_share
    state = replace(state, baseline=baseline, updated=signal.at)
    if share is None:
        return _grow(state, config, cores, elapsed)
    at_floor = state.cap is not None and state.cap <= floor * 1.05
    if signal.be_cores < config.min_be_cores or at_floor:
        # BE is not running, or is held at its floor: what online waits now is its own.
        learned = baseline + (share - baseline) * BASELINE_WEIGHT
        state = replace(state, baseline=learned)
        lower, upper = limits(config, learned)
        if share < lower:
            return _grow(state, config, cores, elapsed)
        return state, (LEARN if share > upper else HOLD)
    fast = signal.fast_wait_share
    judged_on = fast if state.cut_fast else share
    # A window wholly after the cut, plus a sample: the quota takes hold at the next CFS period.
    judge_after = (config.fast_window_seconds if state.cut_fast else config.window_seconds) + config.interval_seconds
    if state.cut_share is not None and judged_on is not None and signal.at - state.last_cut >= judge_after:
        # A whole window after the last cut: judge it. A cut that did not lower the wait says the
        # wait is not BE's doing (other tenants, online's own threads): it becomes the baseline,
        # and the useless cut is undone at once: a quota costs online latency of its own.
        if judged_on > state.cut_share * INEFFECTIVE_CUT_RATIO:
            undone = state.cap_before_cut
            reverted = replace(
                state,
                cut_share=None,
                baseline=max(state.baseline, share),
                cap=undone,
                demand=state.demand if undone is not None else None,
            )
            return reverted, REVERT
        state = replace(state, cut_share=None)
    lower, upper = limits(config, baseline)
    slack = signal.slo_slack
    missed = slack is not None and slack < 0
    strong = fast is not None and fast > max(config.fast_wait_threshold, baseline + config.baseline_margin)
    if share > upper or strong or missed:
        since = signal.at - state.last_cut
        if state.cut_share is not None or since < (config.fast_window_seconds if strong else config.window_seconds):
            return state, HOLD  # the last cut is not judged yet: its effect is not in the window
        if state.cut_slack is not None and slack is not None and slack <= state.cut_slack and share <= upper:
            return replace(state, cut_slack=None), HOLD  # a cut for the target did not help: not BE's
        held = min(state.cap if state.cap is not None else float(cores), signal.be_cores)
        demand = state.demand if state.demand is not None else signal.be_cores
        cap = max(floor, held * config.backoff_ratio)
        cut = replace(state, cap=cap, last_cut=signal.at, demand=demand, cap_before_cut=state.cap)
        if strong:
            return replace(cut, cut_share=fast, cut_fast=True, cut_slack=None), CUT
        if share > upper:
            return replace(cut, cut_share=share, cut_fast=False, cut_slack=None), CUT
        return replace(cut, cut_share=None, cut_slack=slack), CUT
    if share < lower and (slack is None or slack >= config.slo_grow_slack):
        return _grow(replace(state, cut_slack=None), config, cores, elapsed)
    return state, HOLD


def _grow(state: ControlState, config: CpuSuppressConfig, cores: int, elapsed: float) -> tuple[ControlState, str]:
    if state.cap is None:
        return state, HOLD
    grown = state.cap + config.grow_step_ratio * cores * elapsed
    if grown >= cores:
        return replace(state, cap=None, demand=None), LIFT
    return replace(state, cap=grown), GROW


def worth_writing(written: float | None, cap: float | None, cores: int, config: CpuSuppressConfig) -> bool:
    """Whether a new cap differs enough from the one in the cgroup files to write it."""
    if (written is None) != (cap is None):
        return True
    if written is None or cap is None:
        return False
    return abs(cap - written) >= cores * config.deadband_ratio


# --- the plan ---------------------------------------------------------------------------------


def usage_split(node: NodeState, pods: Sequence[QosPod]) -> tuple[float, float]:
    """(online, outside-pod) cores: LC/LS/SYSTEM pods, and the node's usage outside every pod."""
    online = sum(p.cpu_usage_cores for p in pods if p.qos is not QoSClass.BE)
    system = node.cpu_usage_cores - sum(p.cpu_usage_cores for p in pods)
    return online, max(system, 0.0)


def ceiling(config: CpuSuppressConfig, cores: int, online: float, system: float) -> float | None:
    """The SRE's utilisation ceiling for BE in cores, or None when none is set."""
    if config.ceiling_ratio is None:
        return None
    return max(cores * config.ceiling_ratio - online - system, cores * config.floor_ratio)


def effective_cap(state: ControlState, ceiling_cores: float | None) -> float | None:
    caps = [c for c in (state.cap, ceiling_cores) if c is not None]
    return min(caps) if caps else None


def desired_for(groups: Sequence[BeGroup], cap: float | None, period_us: int) -> tuple[Desired, ...]:
    """The cpu.max of every BE group: kubelet's own without a cap, else the cap split max-min
    fairly by recent usage (plus headroom to show a group wants more)."""
    if cap is None:
        return tuple(relaxed(group) for group in groups)
    demands = [g.cpu_usage_cores * (1 + DEMAND_HEADROOM_RATIO) + DEMAND_HEADROOM_CORES for g in groups]
    return tuple(
        Desired(group.cgroup, "cpu.max", CpuMax.of_cores(share, period_us))
        for group, share in zip(groups, fair_split(cap, demands), strict=True)
    )


def relaxed(group: BeGroup) -> Desired:
    """Kubelet's cpu.max for a group: unlimited for the BestEffort directory, the pod's limit else."""
    limit = group.relaxed_cpu_millicores
    quota = None if limit is None else milli_to_quota_us(limit, DEFAULT_CFS_PERIOD_US)
    return Desired(group.cgroup, "cpu.max", CpuMax(quota, DEFAULT_CFS_PERIOD_US))


def plan(node: NodeState, pods: Sequence[QosPod], config: CpuSuppressConfig, previous: Plan | None) -> Plan:
    """The tick's plan: the loop's cap (kept in the memo) over this tick's BE groups."""
    state = previous.memo.get("control", ControlState()) if previous else ControlState()
    online, system = usage_split(node, pods)
    limit = ceiling(config, node.cores, online, system)
    cap = effective_cap(state, limit)
    groups = be_groups(node, pods)
    figures = {
        "online_cpu_usage_cores": online,
        "system_cpu_usage_cores": system,
        "be_cpu_quota_cores": float(node.cores) if cap is None else cap,
        "online_cpu_wait_baseline_ratio": state.baseline,
        "online_cpu_wait_ratio": previous.figures.get("online_cpu_wait_ratio", 0.0) if previous else 0.0,
    }
    return Plan(
        desired_for(groups, cap, config.cfs_period_us), figures, {"control": state, "cap": cap, "ceiling": limit}
    )


def controlled(
    previous: Plan,
    state: ControlState,
    cap: float | None,
    config: CpuSuppressConfig,
    groups: Sequence[BeGroup],
    signal: Signal,
    cores: int,
    action: str,
) -> Plan:
    """The previous plan after a control step: the new state, and the new cap over the same groups."""
    figures = {
        **previous.figures,
        "be_cpu_quota_cores": float(cores) if cap is None else cap,
        "online_cpu_wait_baseline_ratio": state.baseline,
        "online_cpu_wait_ratio": signal.wait_share or 0.0,
    }
    return Plan(
        desired_for(groups, cap, config.cfs_period_us),
        figures,
        {**previous.memo, "control": state, "cap": cap},
        (action,) if action else (),
    )


def remembered(previous: Plan, state: ControlState, signal: Signal) -> Plan:
    """The previous plan with the loop's new state and signal, its cgroup values unchanged."""
    figures = {**previous.figures, "online_cpu_wait_ratio": signal.wait_share or 0.0}
    figures["online_cpu_wait_baseline_ratio"] = state.baseline
    # Twenty times a second: the Plan made directly (dataclasses.replace costs several times more).
    return Plan(previous.desired, figures, {**previous.memo, "control": state}, previous.actions)


def relax(node: NodeState, pods: Sequence[QosPod], config: CpuSuppressConfig, previous: Plan | None) -> list[Desired]:
    """The BestEffort directory unlimited; a BE pod elsewhere back to kubelet's quota for its limit."""
    return [relaxed(group) for group in be_groups(node, pods)]


STRATEGY = Strategy(NAME, CpuSuppressConfig, plan, relax, (CUT, GROW, LIFT, LEARN, REVERT))
