"""The QoS engine, run by the agent on every fresh NodeReport (DESIGN.md, "Agent"):

1. the config in force for this node (reloaded when its file changes; node overrides applied);
2. the node state and pods (node_state.py), then every enabled strategy's plan; a strategy turned
   off, or whose settings changed, first gets its relax values for what the new plan no longer
   covers;
3. one `apply` of all desired values through the executor (nothing when cgroups are not
   writable: QoS is then reported unavailable and the agent carries on);
4. the eviction manager's step, and the reclaimable capacity into `report.reclaimable`.

Between ticks the interference loop (interference.py, every 50 ms) measures what online pods
wait for a CPU and lets the CPU suppress controller cut, hold or grow the BE cap
(strategies/cpu_suppress.py). On `close` the node is left safe:
every strategy's relax values (BE caps lifted to kubelet's own, cpusets whole, `cpu.idle=0`, IO
limits off); online pods are never throttled by anything the agent wrote."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lahar.agent.collectors.host import Host
from lahar.agent.collectors.latency_probe import LatencyProber
from lahar.agent.collectors.pods import cgroup_reader
from lahar.agent.qos import own_threads
from lahar.agent.qos.config import QosConfig, QosConfigFile
from lahar.agent.qos.eviction import CpuStarvation, EvictionManager, EvictionRecord, Evictor
from lahar.agent.qos.executor import CgroupExecutor
from lahar.agent.qos.interference import InterferenceLoop, LoopTargets
from lahar.agent.qos.model import Desired, NodeState, Plan, QosPod, be_groups
from lahar.agent.qos.node_state import NodeStateReader
from lahar.agent.qos.reclaimable import ReclaimableTracker
from lahar.agent.qos.strategies import STRATEGIES, cpu_suppress, io, lc_cores
from lahar.api.qos import QoSClass
from lahar.rpc.report import NodeReport

log = logging.getLogger("lahar.agent.qos")

ACTIVE, DRY_RUN, WAITING, UNAVAILABLE, FAILING = "active", "dry-run", "waiting", "unavailable", "failing"
# (reclaimable, what the Node carries or None to read it) -> what it carries after: node_allocatable.py
AllocatablePatch = Callable[[Mapping[str, int], "Mapping[str, int] | None"], dict[str, int]]
CAP_KNOB = "cpu.max"  # the knob of the BE CPU cap (knobs.py)
ALLOCATABLE_RESYNC_SECONDS = 300.0  # read the Node again now and then: someone may have changed it


@dataclass(frozen=True)
class OnlineWait:
    """An online pod's cumulative CPU wait, as the interference loop last read it."""

    uid: str
    namespace: str
    pod: str
    qos_class: str  # LC, LS
    source: str  # psi (the cgroup's cpu.pressure), schedstat (its tasks' run delay)
    wait_seconds: float


@dataclass(frozen=True)
class QosSnapshot:
    """The engine's state for /metrics and health."""

    available: bool
    status: str  # active, dry-run, waiting (no kubepods cgroup yet), unavailable, failing (ticks raise)
    reason: str
    dry_run: bool
    config_error: str | None
    config_reloads: Mapping[str, int]
    enabled: Mapping[str, bool]  # by strategy
    figures: Mapping[str, float]  # lahar_qos_<name>
    io_limits: tuple[tuple[str, str, int], ...]  # (major:minor, read_bps|write_bps|..., limit) on each BE pod
    writes: Mapping[str, int]  # by knob
    write_errors: Mapping[str, int]
    refused: int  # desired values outside the pod hierarchy
    actions: Mapping[tuple[str, str], int]  # (strategy, action) -> count
    be_throttled_periods: int
    be_throttled_seconds: float
    evictions: Mapping[str, int]  # by reason
    eviction_refusals: Mapping[str, int]
    cap_changes: int = 0  # BE CPU cap writes by the interference controller
    failures: int = 0  # QoS ticks that raised, in a row
    be_groups_read: bool = False  # be_throttled_* were read from the BE groups (where the cap is)
    online_waits: tuple[OnlineWait, ...] = ()  # online pods' CPU wait, the interference signal


@dataclass
class _Tick:
    """What the last tick saw, for the interference loop and the shutdown relax."""

    node: NodeState
    pods: list[QosPod]
    config: QosConfig
    throttled: tuple[int, float] = (0, 0.0)
    figures: dict[str, float] = field(default_factory=dict)
    targets: LoopTargets | None = None  # what the interference loop watches until the next tick


class QosEngine:
    def __init__(
        self,
        host: Host,
        kubepods: str,
        config: QosConfig | QosConfigFile,
        *,
        node_labels: Callable[[], Mapping[str, str]] = dict,
        dry_run: bool = False,
        evictor: Evictor | None = None,
        clock: Callable[[], float] = time.monotonic,
        interference_loop: bool = True,
        patch_allocatable: AllocatablePatch | None = None,
    ) -> None:
        """`evictor` and `patch_allocatable` talk to the API (none standalone); neither acts in dry-run."""
        self.host = host
        self.source = config if isinstance(config, QosConfigFile) else None
        self._static = config if isinstance(config, QosConfig) else None
        self.node_labels = node_labels
        self.dry_run = dry_run
        self.clock = clock
        self.executor = CgroupExecutor(host.cgroup, kubepods, dry_run=dry_run, clock=clock)
        self.state = NodeStateReader(host, self.executor, kubepods)
        self.cpu_reader = cgroup_reader(host.cgroup)  # BE throttling, for metrics
        self._resolved: tuple[QosConfig, frozenset[tuple[str, str]], QosConfig] | None = None
        initial = self.config()
        # In dry-run nothing is evicted either: the manager logs what it would do.
        self.eviction = EvictionManager(initial.eviction, None if dry_run else evictor, clock)
        self.reclaimable = ReclaimableTracker(initial.reclaimable)
        self.loop = InterferenceLoop(self, host, clock) if interference_loop else None
        self.prober = LatencyProber() if interference_loop else None  # online pods' own latency targets
        self.cap_changes = 0  # BE cap writes by the controller: flapping shows here
        self._cap_summary = ChangeSummary("BE CPU cap")  # at most a line a minute about them
        self.failures = 0  # consecutive ticks that raised
        self._failure: str | None = None
        self.actions: Counter[tuple[str, str]] = Counter()
        self.last_evictions: list[EvictionRecord] = []
        self._plans: dict[str, Plan] = {}
        self._sections: dict[str, Any] = {}  # the section each strategy last ran with
        self._tick: _Tick | None = None
        self._available: tuple[bool, str] = (True, "")
        self._lock = threading.RLock()
        self.patch_allocatable = None if dry_run else patch_allocatable
        self._carried: dict[str, int] | None = None  # the batch resources the Node carries
        self._carried_at = -math.inf

    # --- config ----------------------------------------------------------------------------

    def config(self) -> QosConfig:
        """The settings for this node now: the file reloaded if it changed, overrides applied."""
        if self.source is not None:
            self.source.poll()
            base = self.source.config
        else:
            assert self._static is not None
            base = self._static
        labels = frozenset(self.node_labels().items())
        if self._resolved is None or self._resolved[0] is not base or self._resolved[1] != labels:
            self._resolved = (base, labels, base.for_node(dict(labels)))
        return self._resolved[2]

    # --- the tick --------------------------------------------------------------------------

    def step(self, report: NodeReport, pods: Sequence[Mapping[str, Any]], now: float) -> list[EvictionRecord]:
        """One tick on a fresh report; sets `report.reclaimable`; the evictions it made. A tick that
        raises is remembered (status `failing` until one goes through) and the error re-raised."""
        try:
            evictions = self._step(report, pods, now)
        except Exception as exc:
            self.failures += 1
            self._failure = f"{type(exc).__name__}: {exc}"
            raise
        self.failures, self._failure = 0, None
        return evictions

    def _step(self, report: NodeReport, pods: Sequence[Mapping[str, Any]], now: float) -> list[EvictionRecord]:
        config = self.config()
        own_threads.hold(config.agent_cpu_policy)  # the tick's own thread
        self.executor.reassert_seconds = config.reassert_seconds
        self.eviction.reconfigure(config.eviction)
        self.reclaimable.reconfigure(config.reclaimable)
        with self._lock:
            self._available = self.executor.availability()
            node = self.state.node(
                report,
                [d.device for d in config.section(io.NAME).devices],
                config.section(lc_cores.NAME).cpu_manager_state_file,
                now,
            )
            qos_pods = self.state.pods(report, pods, node, now)
            desired = self._desired(node, qos_pods, config)
            if self._available[0]:
                before = dict(self.executor.writes)
                self.executor.apply(desired)
                self._say_written(before)
                self.executor.retain((d.cgroup, d.knob) for d in desired)
                self._available = self.executor.availability()
            self._tick = _Tick(node, qos_pods, config, self._throttled(node, qos_pods), self._figures())
            self._tick.targets = self._loop_targets(self._tick)
            if self.prober is not None:
                self.prober.set_probes({p.uid: p.latency_probe for p in qos_pods if p.online and p.latency_probe})
        self.last_evictions = self.eviction.step(report, pods, now, self._starvation())
        report.reclaimable = self.reclaimable.update(report, pods, now, self._interference())
        if self.patch_allocatable is not None and config.reclaimable.patch_node_allocatable:
            self._publish(report.reclaimable, now)
        if self.loop is not None:
            self.loop.start()
        return self.last_evictions

    def _say_written(self, before: Mapping[str, int]) -> None:
        """One line for what a tick wrote (nothing at steady state; each write is a debug line)."""
        wrote = {knob: count - before.get(knob, 0) for knob, count in self.executor.writes.items()}
        wrote = {knob: count for knob, count in wrote.items() if count}
        if wrote.pop(CAP_KNOB, 0):  # the BE cap, moving with the controller: summed up as its changes are
            cap = self._figures().get("be_cpu_quota_cores")
            summary = self._cap_summary.changed(self.clock(), f"now {_cores(cap)} cores (written by the tick)")
            if summary:
                log.info("%s", summary)
        if wrote:
            listed = ", ".join(f"{knob} x{count}" for knob, count in sorted(wrote.items()))
            log.info(
                "QoS %s %d cgroup value(s): %s", "would write" if self.dry_run else "wrote", sum(wrote.values()), listed
            )

    def _interference(self) -> float:
        """How hard the CPU interference controller holds BE back, 0..1: what BE may borrow shrinks
        with it (reclaimable.py), so the scheduler stops placing BE where online pods suffer."""
        with self._lock:
            plan, tick = self._plans.get(cpu_suppress.NAME), self._tick
            if plan is None or tick is None:
                return 0.0
            state: cpu_suppress.ControlState = plan.memo["control"]
            if state.cap is None or tick.node.cores <= 0:
                return 0.0
            return max(0.0, 1.0 - state.cap / tick.node.cores)

    def _starvation(self) -> CpuStarvation | None:
        """BE's CPU against what it asks for, while the interference controller caps it."""
        with self._lock:
            plan, tick = self._plans.get(cpu_suppress.NAME), self._tick
            if plan is None or tick is None or plan.memo.get("cap") is None:
                return None
            best_effort = [p for p in tick.pods if p.qos is QoSClass.BE]
            requested = sum(p.cpu_request_millicores for p in best_effort) / 1000
            state: cpu_suppress.ControlState = plan.memo["control"]
            return CpuStarvation(
                cap_cores=plan.memo["cap"],
                demand_cores=max(requested, state.demand or 0.0),
                used_cores=sum(p.cpu_usage_cores for p in best_effort),
            )

    def _publish(self, reclaimable: Mapping[str, int], now: float) -> None:
        """The reclaimable capacity into the Node's status as kubernetes.io/batch-*, written only
        when it moved meaningfully from what the Node carries."""
        assert self.patch_allocatable is not None
        if now - self._carried_at >= ALLOCATABLE_RESYNC_SECONDS:
            self._carried, self._carried_at = None, now
        self._carried = self.patch_allocatable(reclaimable, self._carried)

    def _desired(self, node: NodeState, pods: Sequence[QosPod], config: QosConfig) -> list[Desired]:
        """Every enabled strategy's plan; before it, the relax values of settings no longer in force
        (the later plan overrides those it still wants, so only what it dropped is relaxed)."""
        desired: dict[tuple[str, str], Desired] = {}
        for strategy in STRATEGIES:
            section = config.section(strategy.name)
            before = self._sections.get(strategy.name)
            if before is not None and before.enabled and before != section:
                for value in strategy.relax(node, pods, before, self._plans.get(strategy.name)):
                    desired[(value.cgroup, value.knob)] = value
            if section.enabled:
                plan = strategy.plan(node, pods, section, self._plans.get(strategy.name))
                self._plans[strategy.name] = plan
                self.actions.update((strategy.name, action) for action in plan.actions)
                for value in plan.desired:
                    desired[(value.cgroup, value.knob)] = value
            else:
                self._plans.pop(strategy.name, None)
            self._sections[strategy.name] = section
        return list(desired.values())

    def _throttled(self, node: NodeState, pods: Sequence[QosPod]) -> tuple[int, float]:
        """CFS periods and time in which BE groups were throttled (cumulative)."""
        periods, seconds = 0, 0.0
        for group in be_groups(node, pods):
            try:
                stat = self.cpu_reader.cpu(group.cgroup)
            except (OSError, ValueError):
                continue
            periods += stat.throttled_periods
            seconds += stat.throttled_seconds
        self.cpu_reader.files.close_unread()  # an ended pod's files must not pin its cgroup
        return periods, seconds

    def _figures(self) -> dict[str, float]:
        figures: dict[str, float] = {}
        for plan in self._plans.values():
            figures.update(plan.figures)
        return figures

    # --- the interference loop ---------------------------------------------------------------

    def interference_targets(self) -> LoopTargets | None:
        """What the interference loop watches, made once per tick: the loop asks 20 times a second,
        and the tick already checked that QoS can act."""
        tick = self._tick
        return tick.targets if tick is not None else None

    def _loop_targets(self, tick: _Tick) -> LoopTargets | None:
        """What the loop reads until the next tick: online pods' CPU wait, a metric and an alert
        whether or not it may cap BE (`interference_cap`, off by default). At `interval_seconds`
        with the cap off too: sampling at 5 Hz measured worse online p99 (docs/qos.md, Cost)."""
        section = self._sections.get(cpu_suppress.NAME)
        if (
            section is None
            or not section.enabled
            or cpu_suppress.NAME not in self._plans
            or not self._available[0]
            or self.executor.existing_top() is None
        ):
            return None
        # BE's CPU feeds only the cap's control: with the cap off (the default) it is not read, two
        # reads a BE group fewer twenty times a second (a reload that turns the cap on brings them
        # back at the next tick, and the loop's windows start again as when a BE group appears).
        watched_be = be_groups(tick.node, tick.pods) if section.interference_cap else ()
        return LoopTargets(
            tuple(p.cgroup for p in tick.pods if p.online),
            tuple(g.cgroup for g in watched_be if g.pods),  # an empty group uses nothing
            section.interval_seconds,
            section.window_seconds,
            section.min_online_runnable_seconds,
            section.fast_window_seconds,
            tick.config.agent_cpu_policy,
        )

    def interference_step(self, signal: cpu_suppress.Signal) -> str:
        """One control step on a window's signal; writes the BE cap when it moved past the deadband.
        Answers the action taken (cut, grow, lift, baseline or "")."""
        with self._lock:
            plan = self._plans.get(cpu_suppress.NAME)
            section = self._sections.get(cpu_suppress.NAME)
            tick = self._tick
            if plan is None or section is None or tick is None or not self._available[0]:
                return ""
            if not section.interference_cap:  # measuring only (the default): the wait is a metric
                self._plans[cpu_suppress.NAME] = cpu_suppress.remembered(plan, plan.memo["control"], signal)
                return ""
            cores = tick.node.cores
            if self.prober is not None and signal.slo_slack is None:
                signal = replace(signal, slo_slack=self.prober.slack())
            state, action = cpu_suppress.control(plan.memo["control"], signal, section, cores)
            cap = cpu_suppress.effective_cap(state, plan.memo.get("ceiling"))
            written = plan.memo["cap"]
            if not cpu_suppress.worth_writing(written, cap, cores, section):
                cap = written  # within the deadband: keep what the files say, remember the state
            if cap == written and not action:  # the common case, twenty times a second: state only
                self._plans[cpu_suppress.NAME] = cpu_suppress.remembered(plan, state, signal)
                return action
            groups = be_groups(tick.node, tick.pods)
            new = cpu_suppress.controlled(plan, state, cap, section, groups, signal, cores, action)
            if cap != written:
                self.executor.apply(new.desired)
                self.cap_changes += 1
                why = (
                    f"{action or 'ceiling'}: online wait {(signal.wait_share or 0.0) * 100:.0f}% of runnable time, "
                    f"baseline {state.baseline * 100:.0f}%, BE {signal.be_cores:.2f} cores"
                )
                log.debug("BE CPU cap %s -> %s (%s)", _cores(written), _cores(cap), why)
                summary = self._cap_summary.changed(self.clock(), f"now {_cores(cap)} cores ({why})")
                if summary:
                    log.info("%s", summary)
            self._plans[cpu_suppress.NAME] = new
            if action:
                self.actions[(cpu_suppress.NAME, action)] += 1
            tick.figures.update(new.figures)
            return action

    # --- shutdown and reporting ------------------------------------------------------------

    def close(self) -> None:
        """Stop the interference loop and leave the node safe: every enabled strategy's relax values."""
        if self.loop is not None:
            self.loop.stop()
        if self.prober is not None:
            self.prober.stop()
        self.cpu_reader.files.close()
        close_labels = getattr(self.node_labels, "close", None)
        if close_labels is not None:
            close_labels()
        with self._lock:
            tick = self._tick
            if tick is None or not self._available[0]:
                return
            desired = [
                value
                for strategy in STRATEGIES
                if (section := self._sections.get(strategy.name)) is not None and section.enabled
                for value in strategy.relax(tick.node, tick.pods, section, self._plans.get(strategy.name))
            ]
            self.executor.apply(desired)
            self._plans.clear()
            self._sections.clear()
            log.info("QoS relaxed for shutdown: %d cgroup values restored", len(desired))

    @property
    def status(self) -> tuple[str, str]:
        """(status, reason)."""
        available, reason = self._available
        if self._failure is not None:
            return FAILING, f"{self.failures} tick(s) in a row failed, the last with {self._failure}"
        if not available:
            return UNAVAILABLE, reason
        if self.executor.existing_top() is None:
            return WAITING, f"no kubepods cgroup under {self.executor.hierarchy('cpu')} yet"
        return (DRY_RUN if self.dry_run else ACTIVE), ""

    def snapshot(self) -> QosSnapshot:
        with self._lock:
            tick = self._tick
            status, reason = self.status
            io_plan = self._plans.get(io.NAME)
            limits = io_plan.memo.get("limits", {}) if io_plan else {}
            return QosSnapshot(
                available=self._available[0],
                status=status,
                reason=reason,
                dry_run=self.dry_run,
                config_error=self.source.error if self.source else None,
                config_reloads=dict(self.source.reloads) if self.source else {},
                enabled={name: section.enabled for name, section in self._sections.items()},
                figures=dict(tick.figures) if tick else {},
                io_limits=tuple(
                    (device, kind, limit)
                    for device, per_kind in sorted(limits.items())
                    for kind, limit in per_kind._asdict().items()
                ),
                writes=dict(self.executor.writes),
                write_errors=dict(self.executor.errors),
                refused=self.executor.refused,
                actions=dict(self.actions),
                be_throttled_periods=tick.throttled[0] if tick else 0,
                be_throttled_seconds=tick.throttled[1] if tick else 0.0,
                evictions=dict(self.eviction.counts),
                eviction_refusals=dict(self.eviction.refusals),
                cap_changes=self.cap_changes,
                failures=self.failures,
                be_groups_read=tick is not None,
                online_waits=self._online_waits(tick),
            )

    def _online_waits(self, tick: _Tick | None) -> tuple[OnlineWait, ...]:
        """Online pods' CPU wait from the interference loop's latest sample (none without the loop)."""
        sample = self.loop.latest if self.loop is not None else None
        if tick is None or sample is None:
            return ()
        pods = {pod.cgroup: pod for pod in tick.pods if pod.online}
        return tuple(
            OnlineWait(pod.uid, pod.namespace, pod.name, str(pod.qos), str(wait.source), wait.wait_seconds)
            for cgroup, wait in sorted(sample.online.items())
            if (pod := pods.get(cgroup)) is not None
        )


class ChangeSummary:
    """Says a repeated change at most once a period: the first after a quiet period at once, the
    rest summed up with the next line (`N times in the last 60 s`). A flapping cap costs one log
    line a minute, not one a second; its counter counts each change."""

    def __init__(self, what: str, period: float = 60.0) -> None:
        self.what = what
        self.period = period
        self._said_at = -math.inf
        self._unsaid = 0

    def changed(self, now: float, detail: str) -> str | None:
        """The line to log at info for a change now, or None (it is counted for the next)."""
        self._unsaid += 1
        if now - self._said_at < self.period:
            return None
        count, self._unsaid, self._said_at = self._unsaid, 0, now
        if count == 1:
            return f"{self.what} changed: {detail}"
        return f"{self.what} changed {count} times since the last line: {detail}"


def _cores(cap: float | None) -> str:
    return "none" if cap is None else f"{cap:.2f}"
