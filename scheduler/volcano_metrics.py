"""Volcano's scheduler metrics (`volcano_*`), under Volcano's names, labels, units and buckets, so
the dashboards and alerts Volcano users have work on Lahar (docs/metrics.md, "Volcano").

Volcano (pkg/scheduler/metrics) updates them from inside its actions and plugins; Lahar derives
them from the session a cycle leaves (`volcano_cycle`, a plain function of it) and from the
binder's outcomes. Where Lahar's model differs the value is the nearest true one, and docs/metrics.md
says how it is made:

- durations in milliseconds, with Volcano's exponential bucket ranges;
- queue figures from the session's queues and the proportion plugin's figures, CPU in millicores,
  memory in bytes, other resources (`*_scalar_resources{resource}`) in thousandths as Volcano's
  `ScalarResources` hold them; every queue has its cpu and memory series, at 0 when idle;
- `volcano_schedule_attempts_total{result}`: per cycle, `scheduled` for each task placed,
  `unschedulable` for each task of a job left unschedulable, `error` for each bind that failed;
- `volcano_job_retry_counts{job_id}`: as Volcano's gang plugin, one per cycle a job stays
  gang-unschedulable;
- `volcano_eviction_transactions_total{action}`: one per preemptor (or reclaimer) job whose
  victims a cycle evicted, under the action's name (`gangpreempt` and `gangreclaim` under
  theirs, when configured);
- `volcano_namespace_weight` is 1 (Lahar has no namespace weights), so the weighted share is the
  share.

Not exported: the `volcano_vgpu_device_*` families (Volcano's vGPU device plugin; Lahar gives
whole GPUs) and `volcano_goroutines` (a Go runtime figure)."""

from __future__ import annotations

import math
from collections import Counter as Tally
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lahar.api.resources import ResourceUnit, resource_unit
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import CPU, MEMORY, TaskStatus

ON_SESSION_OPEN, ON_SESSION_CLOSE = "OnSessionOpen", "OnSessionClose"
SCHEDULED, UNSCHEDULABLE, ERROR = "scheduled", "unschedulable", "error"
ATTEMPT_RESULTS = (SCHEDULED, UNSCHEDULABLE, ERROR)
EVICTION_ACTIONS = ("preempt", "reclaim", "gangpreempt", "gangreclaim")
STAGE_ASSUMED, STAGE_BOUND, STAGE_BIND = "Assumed", "Bound", "Bind"
WAITING = (TaskStatus.PENDING, TaskStatus.PIPELINED)
QUEUE_FIGURES = ("allocated", "request", "deserved", "capacity", "real_capacity", "inqueue")


def exponential_range(minimum: float, maximum: float, count: int) -> tuple[float, ...]:
    """Go's prometheus.ExponentialBucketsRange: `count` buckets from `minimum` to `maximum`."""
    factor = math.pow(maximum / minimum, 1.0 / (count - 1))
    return tuple(minimum * factor**index for index in range(count))


def unix_seconds(rfc3339: str) -> float | None:
    """A Kubernetes timestamp as unix seconds; None when absent or unreadable."""
    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() if rfc3339 else None
    except ValueError:
        return None


# --- one cycle's figures, a plain function of the session -------------------------------------------


@dataclass(frozen=True)
class JobScheduled:
    """A job whose last waiting task was placed this cycle (Volcano: the job is fully assumed)."""

    namespace: str
    name: str
    queue: str
    created: float  # unix seconds
    at: float


@dataclass
class VolcanoCycle:
    queues: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # queue -> figure -> resource
    queue_share: dict[str, float] = field(default_factory=dict)
    queue_weight: dict[str, float] = field(default_factory=dict)
    queue_overused: dict[str, float] = field(default_factory=dict)
    job_share: dict[tuple[str, str], float] = field(default_factory=dict)  # (namespace, name)
    namespace_share: dict[str, float] = field(default_factory=dict)
    unschedulable_tasks: dict[str, int] = field(default_factory=dict)  # job name -> tasks
    attempts: Tally[str] = field(default_factory=Tally)
    retried_jobs: tuple[str, ...] = ()
    eviction_transactions: Tally[str] = field(default_factory=Tally)
    preemption_victims: int = 0
    scheduled_jobs: tuple[JobScheduled, ...] = ()
    assumed_task_ages: tuple[float, ...] = ()  # seconds from each placed task's creation


def volcano_units(session: Session, vector: np.ndarray) -> dict[str, float]:
    """A resource vector as Volcano's metrics count it: cpu in millicores, memory in bytes, other
    resources in thousandths (its ScalarResources); pod slots left out."""
    names = session.resources.names
    found: dict[str, float] = {}
    for column in session.resources.quota_columns:
        name, amount = names[column], float(vector[column])
        if name in (CPU, MEMORY) or resource_unit(name) is ResourceUnit.MILLI:
            found[name] = amount
        else:
            found[name] = amount * 1000.0
    return found


def dominant_share(allocated: np.ndarray, total: np.ndarray, columns: np.ndarray) -> float:
    """The largest allocated / total over the quota resources (DRF's share), 0 with no capacity."""
    return dominant_shares(allocated[np.newaxis], total, columns)[0]


def dominant_shares(allocated: np.ndarray, total: np.ndarray, columns: np.ndarray) -> list[float]:
    """`dominant_share` of each row of `allocated` (one job's allocation a row), in one pass."""
    counted = columns[total[columns] > 0]
    if not len(counted) or not len(allocated):
        return [0.0] * len(allocated)
    shares: list[float] = (allocated[:, counted] / total[counted]).max(axis=1).tolist()
    return shares


def volcano_cycle(session: Session, now: float) -> VolcanoCycle:
    cycle = VolcanoCycle()
    resources, total = session.resources, session.total
    columns = resources.quota_columns
    computed = session.queue_figures
    guarantees = np.zeros(len(resources), np.int64)
    for queue in session.queues.values():
        guarantees = guarantees + queue.guarantee
    zeros = np.zeros(len(resources), np.int64)

    def filled(vector: np.ndarray) -> np.ndarray:  # a figure no plugin computed this cycle is empty
        return vector if len(vector) == len(resources) else zeros

    for name, queue in session.queues.items():
        entry = computed.get(name, {})
        vectors = {
            "allocated": filled(queue.allocated),
            "request": filled(queue.request),
            "deserved": filled(queue.deserved),
            "inqueue": zeros,
        }
        for key in ("allocated", "request", "deserved", "inqueue"):
            listed = entry.get(key)
            if listed is not None:
                vectors[key] = resources.vector(listed)
        bounded = queue.capability >= 0
        vectors["capacity"] = np.where(bounded, queue.capability, 0)
        # proportion's realCapability: what is left after every queue's guarantee, plus its own,
        # within its capability.
        real = np.maximum(total - guarantees, 0) + queue.guarantee
        vectors["real_capacity"] = np.where(bounded, np.minimum(real, queue.capability), real)
        cycle.queues[name] = {key: volcano_units(session, vector) for key, vector in vectors.items()}
        share = entry.get("share")
        cycle.queue_share[name] = float(share) if share is not None and math.isfinite(share) else 0.0
        cycle.queue_weight[name] = float(queue.weight)
        cycle.queue_overused[name] = float(bool(entry.get("overused", False)))
    jobs = list(session.jobs.values())
    # Every job's share at once (a wave's cycles each count hundreds of jobs).
    allocated = np.stack([job.allocated for job in jobs]) if jobs else np.zeros((0, len(resources)), dtype=np.int64)
    by_namespace: dict[str, np.ndarray] = {}
    for job, share, row in zip(jobs, dominant_shares(allocated, total, columns), allocated, strict=True):
        cycle.job_share[(job.namespace, job.name)] = share
        by_namespace[job.namespace] = by_namespace.get(job.namespace, 0) + row
        if job.unschedulable_message:
            waiting = job.count(WAITING)
            cycle.unschedulable_tasks[job.name] = waiting
            cycle.attempts[UNSCHEDULABLE] += waiting
    cycle.namespace_share = {ns: dominant_share(v, total, columns) for ns, v in by_namespace.items()}
    cycle.retried_jobs = tuple(sorted(name for name in cycle.unschedulable_tasks))
    placed = [task for batch in session.binds for task in batch.tasks]
    cycle.attempts[SCHEDULED] += len(placed)
    cycle.assumed_task_ages = tuple(
        max(now - created, 0.0) for task in placed if (created := unix_seconds(task.creation)) is not None
    )
    done = {batch.job.key: batch.job for batch in session.binds}
    cycle.scheduled_jobs = tuple(
        JobScheduled(job.namespace, job.name, job.queue, created, now)
        for job in done.values()
        if job.count(WAITING) == 0 and (created := unix_seconds(job.creation)) is not None
    )
    transactions = {(e.reason, e.preemptor.job if e.preemptor else e.task.uid) for e in session.evictions}
    cycle.eviction_transactions = Tally(reason for reason, _ in transactions)
    cycle.preemption_victims = sum(1 for eviction in session.evictions if eviction.reason == "preempt")
    return cycle


# --- the families -----------------------------------------------------------------------------------


class VolcanoCycleCollector(Collector):
    """The latest cycle's per-queue, per-job and per-namespace gauges, replaced whole each cycle."""

    def __init__(self) -> None:
        self.cycle = VolcanoCycle()

    def describe(self) -> list[Metric]:
        return list(self._families(VolcanoCycle()))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.cycle)

    @staticmethod
    def _families(cycle: VolcanoCycle) -> Iterator[Metric]:
        helps = {
            "allocated": "Allocated {what} for one queue",
            "request": "Request {what} for one queue",
            "deserved": "Deserved {what} for one queue",
            "capacity": "Capacity {what} for one queue",
            "real_capacity": "Real capacity {what} for one queue",
            "inqueue": "Inqueue {what} for admitted but not yet running jobs in one queue",
        }
        for figure in QUEUE_FIGURES:
            cpu = GaugeMetricFamily(
                f"volcano_queue_{figure}_milli_cpu",
                helps[figure].format(what="CPU (millicores)"),
                labels=["queue_name"],
            )
            memory = GaugeMetricFamily(
                f"volcano_queue_{figure}_memory_bytes", helps[figure].format(what="memory"), labels=["queue_name"]
            )
            scalar = GaugeMetricFamily(
                f"volcano_queue_{figure}_scalar_resources",
                helps[figure].format(what="scalar resources (thousandths)"),
                labels=["queue_name", "resource"],
            )
            for queue, figures in sorted(cycle.queues.items()):
                amounts = figures[figure]
                cpu.add_metric([queue], amounts.get(CPU, 0.0))
                memory.add_metric([queue], amounts.get(MEMORY, 0.0))
                for resource, amount in sorted(amounts.items()):
                    if resource not in (CPU, MEMORY):
                        scalar.add_metric([queue, resource], amount)
            yield from (cpu, memory, scalar)
        for name, help_text, values in (
            ("volcano_queue_share", "Share for one queue", cycle.queue_share),
            ("volcano_queue_weight", "Weight for one queue", cycle.queue_weight),
            ("volcano_queue_overused", "If one queue is overused", cycle.queue_overused),
        ):
            family = GaugeMetricFamily(name, help_text, labels=["queue_name"])
            for queue, value in sorted(values.items()):
                family.add_metric([queue], value)
            yield family
        job_share = GaugeMetricFamily("volcano_job_share", "Share for one job", labels=["job_ns", "job_id"])
        for (namespace, name), share in sorted(cycle.job_share.items()):
            job_share.add_metric([namespace, name], share)
        yield job_share
        for name, help_text in (
            ("volcano_namespace_share", "Share for one namespace"),
            ("volcano_namespace_weight", "Weight for one namespace (1: Lahar has no namespace weights)"),
            ("volcano_namespace_weighted_share", "Weighted share for one namespace"),
        ):
            family = GaugeMetricFamily(name, help_text, labels=["namespace_name"])
            for namespace, share in sorted(cycle.namespace_share.items()):
                family.add_metric([namespace], 1.0 if name == "volcano_namespace_weight" else share)
            yield family
        tasks = GaugeMetricFamily(
            "volcano_unschedule_task_count", "Number of tasks could not be scheduled", labels=["job_id"]
        )
        for job, count in sorted(cycle.unschedulable_tasks.items()):
            tasks.add_metric([job], count)
        yield tasks
        yield GaugeMetricFamily(
            "volcano_unschedule_job_count",
            "Number of jobs could not be scheduled",
            value=len(cycle.unschedulable_tasks),
        )
        yield GaugeMetricFamily(
            "volcano_pod_preemption_victims", "Number of selected preemption victims", value=cycle.preemption_victims
        )


JOB_LABELS = ["job_name", "queue", "job_namespace"]


class VolcanoMetrics:
    """Volcano's families on the scheduler's registry; `observe_cycle` after each cycle, the
    binder's outcomes through `bound` and `bind_failed`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def histogram(name: str, help_text: str, buckets: tuple[float, ...], labels: tuple[str, ...] = ()) -> Histogram:
            return Histogram(name, help_text, list(labels), buckets=buckets, registry=registry)

        self.e2e = histogram(
            "volcano_e2e_scheduling_latency_milliseconds",
            "Duration of a single scheduling session execution in milliseconds.",
            exponential_range(1, 5000, 20),
        )
        self.open_session = histogram(
            "volcano_open_session_duration_milliseconds",
            "Duration of opening a scheduling session in milliseconds, including cache snapshot.",
            exponential_range(1, 5000, 20),
        )
        self.e2e_job = histogram(
            "volcano_e2e_job_scheduling_latency_milliseconds",
            "End-to-end job scheduling latency in milliseconds (job creation to last task assumed).",
            exponential_range(100, 120000, 30),
        )
        self.plugin = histogram(
            "volcano_plugin_scheduling_latency_milliseconds",
            "Plugin scheduling latency in milliseconds",
            exponential_range(0.1, 100, 15),
            ("plugin", "OnSession"),
        )
        self.action = histogram(
            "volcano_action_scheduling_latency_milliseconds",
            "Action scheduling latency in milliseconds",
            exponential_range(1, 2000, 20),
            ("action",),
        )
        self.task = histogram(
            "volcano_task_scheduling_latency_milliseconds",
            "Task scheduling latency from creation to various stages in milliseconds",
            exponential_range(50, 60000, 30),
            ("stage",),
        )
        self.stage = histogram(
            "volcano_scheduling_stage_duration_milliseconds",
            "Duration of per-task scheduling stages in milliseconds (Lahar: Bind)",
            exponential_range(0.1, 500, 20),
            ("stage",),
        )
        self.job_duration = Gauge(
            "volcano_e2e_job_scheduling_duration",
            "Per-job duration from job creation to last task assumed in scheduler cache, in milliseconds",
            JOB_LABELS,
            registry=registry,
        )
        self.job_start = Gauge(
            "volcano_e2e_job_scheduling_start_time", "E2E job scheduling start time", JOB_LABELS, registry=registry
        )
        self.job_last = Gauge(
            "volcano_e2e_job_scheduling_last_time", "E2E job scheduling last time", JOB_LABELS, registry=registry
        )
        self.attempts = Counter(
            "volcano_schedule_attempts",
            "Number of attempts to schedule pods, by the result.",
            ["result"],
            registry=registry,
        )
        self.preemption_attempts = Counter(
            "volcano_total_preemption_attempts", "Total preemption attempts in the cluster till now", registry=registry
        )
        self.eviction_transactions = Counter(
            "volcano_eviction_transactions",
            "Total number of committed eviction transactions, by action",
            ["action"],
            registry=registry,
        )
        self.job_retries = Counter(
            "volcano_job_retry_counts", "Number of retry counts for one job", ["job_id"], registry=registry
        )
        self.cycle = VolcanoCycleCollector()
        registry.register(self.cycle)
        for result in ATTEMPT_RESULTS:  # at 0 from the start, so rate() sees the first
            self.attempts.labels(result)
        for action in EVICTION_ACTIONS:
            self.eviction_transactions.labels(action)
        self._jobs: set[tuple[str, str, str]] = set()

    def observe_cycle(
        self,
        seconds: float,
        open_seconds: float,
        action_seconds: Mapping[str, float],
        plugin_seconds: Mapping[tuple[str, str], float],
        cycle: VolcanoCycle,
        live_jobs: set[tuple[str, str]],
    ) -> None:
        """A cycle's figures; `live_jobs` (namespace, name): per-job series of other jobs go away."""
        self.e2e.observe(seconds * 1000)
        self.open_session.observe(open_seconds * 1000)
        for action, spent in action_seconds.items():
            self.action.labels(action).observe(spent * 1000)
        for (plugin, when), spent in plugin_seconds.items():
            self.plugin.labels(plugin, when).observe(spent * 1000)
        for age in cycle.assumed_task_ages:
            self.task.labels(STAGE_ASSUMED).observe(age * 1000)
        for result, count in cycle.attempts.items():
            self.attempts.labels(result).inc(count)
        for action, count in cycle.eviction_transactions.items():
            self.eviction_transactions.labels(action).inc(count)
        if cycle.eviction_transactions.get("preempt"):
            self.preemption_attempts.inc(cycle.eviction_transactions["preempt"])
        for job in cycle.retried_jobs:
            self.job_retries.labels(job).inc()
        for done in cycle.scheduled_jobs:
            labels = (done.name, done.queue, done.namespace)
            took = max(done.at - done.created, 0.0) * 1000
            self.e2e_job.observe(took)
            self.job_duration.labels(*labels).set(took)
            self.job_start.labels(*labels).set(math.floor(done.created))
            self.job_last.labels(*labels).set(math.floor(done.at))
            self._jobs.add(labels)
        for labels in [labels for labels in self._jobs if (labels[2], labels[0]) not in live_jobs]:
            for gauge in (self.job_duration, self.job_start, self.job_last):
                gauge.remove(*labels)
            self._jobs.discard(labels)
        self.cycle.cycle = cycle

    def bound(self, ages: list[float], bind_seconds: list[float]) -> None:
        """Tasks bound: their age since creation, and each bind call's time."""
        for age in ages:
            self.task.labels(STAGE_BOUND).observe(age * 1000)
        for spent in bind_seconds:
            self.stage.labels(STAGE_BIND).observe(spent * 1000)

    def bind_failed(self, count: int) -> None:
        self.attempts.labels(ERROR).inc(count)
