"""The scheduler's Prometheus metrics, on a registry of its own (base units: seconds, cores, bytes;
prefix `lahar_scheduler_`). Served by lahar.metrics_server.MetricsServer.

Instruments the loop updates:
- `lahar_scheduler_e2e_scheduling_duration_seconds`: one cycle (snapshot, session, hand-off to the
  binder and the status writer, which work on while the next cycle runs);
- `lahar_scheduler_action_duration_seconds{action}`: each action within a cycle;
- `lahar_scheduler_pods_scheduled_total`, `lahar_scheduler_bind_errors_total`,
  `lahar_scheduler_gang_rollbacks_total`: binds that landed, failed, and gangs undone;
- `lahar_scheduler_evictions_total{reason}`: victims evicted (preempt, reclaim);
- `lahar_scheduler_conf_reload_failures_total`, `lahar_scheduler_cycle_failures_total`;
- `lahar_scheduler_conf_warnings`: what the configuration in force asks for that Lahar leaves out;
- `lahar_scheduler_outside_calls_total{plugin,call,result}`: calls plugins made to services outside
  the scheduler (the extender's HTTP verbs), `result` ok or failed (unreachable, timed out, a bad
  answer).

Figures of the latest cycle, replaced whole each cycle (a deleted queue's series go away; a
queue with no work keeps its cpu and memory series, at 0):
- `lahar_scheduler_pending_pods`, `lahar_scheduler_unschedulable_gangs`;
- `lahar_scheduler_queue_allocated{queue,resource}`, `lahar_scheduler_queue_deserved{queue,resource}`,
  `lahar_scheduler_queue_share{queue}` (deserved and share when the proportion plugin ran).

Agent reports, read at scrape time. With thousands of nodes a per-node age series would be
thousands of series for one number each, so ages are a distribution instead:
- `lahar_scheduler_node_report_age_seconds` (a gauge histogram over the cluster's nodes: how many
  nodes' latest report is at most `le` seconds old; nodes without a report are not in it);
- `lahar_scheduler_node_reports{state}`: nodes with a fresh, stale or missing report;
- `lahar_scheduler_reports_total{result}`: reports received, by result (accepted or why refused).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lahar.api.resources import ResourceUnit, resource_unit
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import TaskInfo
from lahar.scheduler.node_reports import NodeReportStore
from lahar.scheduler.volcano_metrics import VolcanoMetrics, unix_seconds, volcano_cycle

# From 100 µs: an action on a small cluster takes a fraction of a millisecond, and buckets that
# start above most observations say nothing about them.
CYCLE_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
# Every queue has these, at 0 when it holds nothing: a queue with no work keeps its series.
QUEUE_RESOURCES = ("cpu", "memory")
AGE_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
EVICTION_REASONS = ("preempt", "reclaim")
FRESH, STALE, MISSING = "fresh", "stale", "missing"


def in_base_units(resource: str, amount: float) -> float:
    """An amount of the scheduler's integer units in Prometheus' base units (millicores -> cores)."""
    return amount / 1000 if resource_unit(resource) is ResourceUnit.MILLI else float(amount)


@dataclass(frozen=True)
class QueueFigures:
    allocated: Mapping[str, int]  # resource -> amount in the scheduler's units (no zeros)
    deserved: Mapping[str, int] | None = None  # None: no plugin computed one this cycle
    share: float | None = None


@dataclass(frozen=True)
class CycleFigures:
    """What one cycle left: for the gauges here and for the queue status the writer keeps."""

    pending_pods: int = 0
    unschedulable_gangs: int = 0
    queues: Mapping[str, QueueFigures] = field(default_factory=dict)


class CycleCollector(Collector):
    """The latest cycle's figures as gauges."""

    def __init__(self) -> None:
        self.figures = CycleFigures()

    def describe(self) -> list[Metric]:
        return list(self._families(CycleFigures()))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.figures)

    @staticmethod
    def _families(figures: CycleFigures) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "lahar_scheduler_pending_pods",
            "Pods of ours still pending after the latest cycle.",
            value=figures.pending_pods,
        )
        yield GaugeMetricFamily(
            "lahar_scheduler_unschedulable_gangs",
            "Gangs (jobs) that did not fit in the latest cycle.",
            value=figures.unschedulable_gangs,
        )
        allocated = GaugeMetricFamily(
            "lahar_scheduler_queue_allocated",
            "Resources held by each queue's pods (cpu in cores, memory in bytes).",
            labels=["queue", "resource"],
        )
        deserved = GaugeMetricFamily(
            "lahar_scheduler_queue_deserved",
            "Each queue's fair share (proportion plugin).",
            labels=["queue", "resource"],
        )
        share = GaugeMetricFamily(
            "lahar_scheduler_queue_share",
            "Each queue's allocated / deserved on its dominant resource (1 = its share).",
            labels=["queue"],
        )
        for name, queue in sorted(figures.queues.items()):
            for resource in sorted({*QUEUE_RESOURCES, *queue.allocated}):
                allocated.add_metric([name, resource], in_base_units(resource, queue.allocated.get(resource, 0)))
            if queue.deserved is not None:
                for resource in sorted({*QUEUE_RESOURCES, *queue.deserved}):
                    deserved.add_metric([name, resource], in_base_units(resource, queue.deserved.get(resource, 0)))
            if queue.share is not None and math.isfinite(queue.share):
                share.add_metric([name], queue.share)
            elif not any(queue.allocated.values()):
                share.add_metric([name], 0.0)  # holds nothing: no share of anything
        yield from (allocated, deserved, share)


class NodeReportCollector(Collector):
    """Report ages over the cluster's nodes, read at scrape time."""

    def __init__(self, store: NodeReportStore, nodes: Callable[[], Iterable[str]], staleness: float) -> None:
        self.store = store
        self.nodes = nodes
        self.staleness = staleness

    def describe(self) -> list[Metric]:
        return []  # no samples without reading the store; the registry is made with auto_describe off

    def collect(self) -> Iterator[Metric]:
        ages = [self.store.age(name) for name in self.nodes()]
        present = sorted(age for age in ages if age is not None)
        buckets = [(str(le), sum(1 for age in present if age <= le)) for le in AGE_BUCKETS]
        buckets.append(("+Inf", len(present)))
        yield GaugeHistogramMetricFamily(
            "lahar_scheduler_node_report_age_seconds",
            "Nodes by the age of their latest agent report.",
            buckets=buckets,
            gsum_value=sum(present),
        )
        states = GaugeMetricFamily(
            "lahar_scheduler_node_reports",
            "Nodes whose latest report is fresh, stale (older than the staleness limit) or missing.",
            labels=["state"],
        )
        stale = sum(1 for age in present if age > self.staleness)
        states.add_metric([FRESH], len(present) - stale)
        states.add_metric([STALE], stale)
        states.add_metric([MISSING], len(ages) - len(present))
        yield states
        results = CounterMetricFamily(
            "lahar_scheduler_reports", "Agent reports received, by result.", labels=["result"]
        )
        for result, count in sorted(self.store.counts().items()):
            results.add_metric([result], count)
        yield results


class SchedulerMetrics:
    """The registry and the instruments the loop, the binder and the status writer update."""

    def __init__(
        self, reports: NodeReportStore | None = None, nodes: Callable[[], Iterable[str]] = list, staleness: float = 30.0
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.cycle_duration = Histogram(
            "lahar_scheduler_e2e_scheduling_duration_seconds",
            "One scheduling cycle: snapshot, session, hand-off.",
            buckets=CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.action_duration = Histogram(
            "lahar_scheduler_action_duration_seconds",
            "One action within a cycle.",
            ["action"],
            buckets=CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.pods_scheduled = Counter("lahar_scheduler_pods_scheduled", "Pods bound to a node.", registry=self.registry)
        self.bind_errors = Counter(
            "lahar_scheduler_bind_errors", "Binds the API refused or that could not be sent.", registry=self.registry
        )
        self.gang_rollbacks = Counter(
            "lahar_scheduler_gang_rollbacks",
            "Gangs whose bound members were deleted because another member's bind failed.",
            registry=self.registry,
        )
        self.evictions = Counter(
            "lahar_scheduler_evictions", "Pods evicted to make room.", ["reason"], registry=self.registry
        )
        self.conf_reload_failures = Counter(
            "lahar_scheduler_conf_reload_failures",
            "Configuration files refused (the last good one stayed).",
            registry=self.registry,
        )
        self.conf_warnings = Gauge(
            "lahar_scheduler_conf_warnings",
            "What the configuration in force asks for that Lahar does not have (unknown plugins, arguments, keys).",
            registry=self.registry,
        )
        self.cycle_failures = Counter(
            "lahar_scheduler_cycle_failures", "Cycles that raised (retried with backoff).", registry=self.registry
        )
        self.outside_calls = Counter(
            "lahar_scheduler_outside_calls",
            "Calls plugins made to services outside the scheduler (the extender's verbs), by result.",
            ["plugin", "call", "result"],
            registry=self.registry,
        )
        for reason in EVICTION_REASONS:  # present from the start, at 0, so rate() sees the first one
            self.evictions.labels(reason)
        self.cycle = CycleCollector()
        self.registry.register(self.cycle)
        if reports is not None:
            self.registry.register(NodeReportCollector(reports, nodes, staleness))
        self.volcano = VolcanoMetrics(self.registry)  # Volcano's names, for its users' dashboards

    def observe_cycle(self, seconds: float, action_seconds: Mapping[str, float], figures: CycleFigures) -> None:
        self.cycle_duration.observe(seconds)
        for action, spent in action_seconds.items():
            self.action_duration.labels(action).observe(spent)
        self.cycle.figures = figures

    def observe_session(self, seconds: float, snapshot_seconds: float, session: Session) -> None:
        """Volcano's families from the cycle's session (scheduler/volcano_metrics.py), and the
        plugins' calls outside the scheduler."""
        for (plugin, call), count in session.outside_calls.items():
            failed = session.outside_failures[(plugin, call)]
            if count > failed:
                self.outside_calls.labels(plugin, call, "ok").inc(count - failed)
            if failed:
                self.outside_calls.labels(plugin, call, "failed").inc(failed)
        self.volcano.observe_cycle(
            seconds,
            snapshot_seconds + session.open_seconds,
            session.action_seconds,
            session.plugin_seconds,
            volcano_cycle(session, session.now),
            {(job.namespace, job.name) for job in session.jobs.values()},
        )

    def binds_done(
        self, bound: list[TaskInfo], failed: int, bind_seconds: list[float], now: float | None = None
    ) -> None:
        """A batch's binds finished: `bound` landed, `failed` did not; each call took `bind_seconds`."""
        self.pods_scheduled.inc(len(bound))
        self.bind_errors.inc(failed)
        at = time.time() if now is None else now
        ages = [at - created for task in bound if (created := unix_seconds(task.creation)) is not None]
        self.volcano.bound(ages, bind_seconds)
        if failed:
            self.volcano.bind_failed(failed)
