"""The QoS engine, run by the agent on every fresh NodeReport (DESIGN.md, "Agent"):

1. the config in force for this node (reloaded when its file changes; node overrides applied);
2. the node state and pods (node_state.py), then every enabled strategy's plan; a strategy turned
   off, or whose settings changed, first gets its relax values for what the new plan no longer
   covers;
3. one `apply` of all desired values through the executor (nothing when cgroups are not
   writable: QoS is then reported unavailable and the agent carries on);
4. the eviction manager's step, and the reclaimable capacity into `report.reclaimable`.

Between ticks the pressure fast path may tighten the BE CPU cap. On `close` the node is left safe:
every strategy's relax values (BE caps lifted to kubelet's own, cpusets whole, `cpu.idle=0`, IO
limits off); online pods are never throttled by anything the agent wrote."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lahar.agent.collectors.host import Host
from lahar.agent.collectors.pods import cgroup_reader
from lahar.agent.qos.config import QosConfig, QosConfigFile
from lahar.agent.qos.eviction import EvictionManager, EvictionRecord, Evictor
from lahar.agent.qos.executor import CgroupExecutor
from lahar.agent.qos.fast_path import FastTargets, PressureFastPath
from lahar.agent.qos.model import Desired, NodeState, Plan, QosPod, be_groups
from lahar.agent.qos.node_state import NodeStateReader
from lahar.agent.qos.reclaimable import ReclaimableTracker
from lahar.agent.qos.strategies import STRATEGIES, cpu_suppress, io, lc_cores
from lahar.agent.report import NodeReport

log = logging.getLogger("lahar.agent.qos")

ACTIVE, DRY_RUN, WAITING, UNAVAILABLE = "active", "dry-run", "waiting", "unavailable"
# (reclaimable, what the Node carries or None to read it) -> what it carries after: node_allocatable.py
AllocatablePatch = Callable[[Mapping[str, int], "Mapping[str, int] | None"], dict[str, int]]
ALLOCATABLE_RESYNC_SECONDS = 300.0  # read the Node again now and then: someone may have changed it


@dataclass(frozen=True)
class QosSnapshot:
    """The engine's state for /metrics and health."""

    available: bool
    status: str  # active, dry-run, waiting (no kubepods cgroup yet), unavailable
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


@dataclass
class _Tick:
    """What the last tick saw, for the fast path and the shutdown relax."""

    node: NodeState
    pods: list[QosPod]
    config: QosConfig
    throttled: tuple[int, float] = (0, 0.0)
    figures: dict[str, float] = field(default_factory=dict)


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
        fast_path: bool = True,
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
        self.fast_path = PressureFastPath(self, host, clock) if fast_path else None
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
        """One tick on a fresh report; sets `report.reclaimable`; the evictions it made."""
        config = self.config()
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
                self.executor.apply(desired)
                self.executor.retain((d.cgroup, d.knob) for d in desired)
                self._available = self.executor.availability()
            self._tick = _Tick(node, qos_pods, config, self._throttled(node, qos_pods), self._figures())
        self.last_evictions = self.eviction.step(report, pods, now)
        report.reclaimable = self.reclaimable.update(report, pods, now)
        if self.patch_allocatable is not None and config.reclaimable.patch_node_allocatable:
            self._publish(report.reclaimable, now)
        if self.fast_path is not None:
            self.fast_path.start()
        return self.last_evictions

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

    # --- the fast path ---------------------------------------------------------------------

    def fast_targets(self) -> FastTargets | None:
        with self._lock:
            tick = self._tick
            section = self._sections.get(cpu_suppress.NAME)
            if (
                tick is None
                or section is None
                or not section.enabled
                or not section.fast_path
                or cpu_suppress.NAME not in self._plans
                or not self._available[0]
                or self.executor.existing_top() is None
            ):
                return None
            groups = tuple(g.cgroup for g in be_groups(tick.node, tick.pods))
            return FastTargets(tick.node.layout.top, groups, section.fast_interval_seconds, section.fast_window_seconds)

    def fast_tighten(self, online_cores: float, stall_ratio: float) -> bool:
        """Tighten the BE cap now if the fast readings call for it; True when it did."""
        with self._lock:
            plan = self._plans.get(cpu_suppress.NAME)
            section = self._sections.get(cpu_suppress.NAME)
            if plan is None or section is None or self._tick is None or not self._available[0]:
                return False
            system = plan.figures.get("system_cpu_usage_cores", 0.0)
            cap = cpu_suppress.fast_cap(section, self._tick.node.cores, online_cores, system, stall_ratio, plan)
            if cap is None:
                return False
            tight = cpu_suppress.tightened(plan, cap)
            self.executor.apply(tight.desired)
            self._plans[cpu_suppress.NAME] = tight
            self.actions.update((cpu_suppress.NAME, action) for action in tight.actions)
            self._tick.figures.update(tight.figures)
            log.info(
                "fast path: BE CPU cap %.2f -> %.2f cores (online %.2f, pressure %.0f%%)",
                plan.memo["cap"],
                cap,
                online_cores,
                stall_ratio * 100,
            )
            return True

    # --- shutdown and reporting ------------------------------------------------------------

    def close(self) -> None:
        """Stop the fast path and leave the node safe: every enabled strategy's relax values."""
        if self.fast_path is not None:
            self.fast_path.stop()
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
            )
