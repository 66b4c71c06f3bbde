"""The controller's Prometheus metrics, on a registry of its own (base units, prefix
`lahar_controller_`):

- `lahar_controller_jobs{phase}`: Jobs by `status.state.phase`, counted from the informer cache
  at scrape time (every phase is present, 0 included, so dashboards need no `or vector(0)`);
- `lahar_controller_reconcile_duration_seconds{kind}`: wall time of one reconcile of a `job` or a
  `queue`;
- `lahar_controller_reconcile_errors_total{kind}`: reconciles that raised and were retried;
- `lahar_controller_policy_actions_total{action}`: actions the controller took on a job because a
  policy (or a user's command) asked for them, e.g. RestartJob after PodEvicted; a restart that
  maxRetry refuses (the job fails instead) counts under the action that was asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lahar.api.job import ACTIONS, JobPhase, job_phase

JOB_KIND, QUEUE_KIND = "job", "queue"
RECONCILE_KINDS = (JOB_KIND, QUEUE_KIND)
# A reconcile is a few cached reads and zero to a few API writes: milliseconds to seconds.
RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def jobs_by_phase(jobs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many jobs are in each phase (a job the controller has not written yet is Pending)."""
    counts = dict.fromkeys((phase.value for phase in JobPhase), 0)
    for job in jobs:
        counts[job_phase(job).value] += 1
    return counts


class JobPhaseCollector(Collector):
    """`lahar_controller_jobs{phase}` from the jobs the controller sees now."""

    def __init__(self, jobs: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self.jobs = jobs

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily("lahar_controller_jobs", "Jobs by phase (status.state.phase).", labels=["phase"])

    def describe(self) -> list[Metric]:
        return [self._family()]  # without samples: describing must not read the cache

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for phase, count in jobs_by_phase(self.jobs()).items():
            family.add_metric([phase], count)
        yield family


class ControllerMetrics:
    """The controller's registry and the instruments the reconcile loop updates."""

    def __init__(self, jobs: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(JobPhaseCollector(jobs))
        self.reconcile_duration = Histogram(
            "lahar_controller_reconcile_duration_seconds",
            "Wall time of one reconcile.",
            ["kind"],
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.reconcile_errors = Counter(
            "lahar_controller_reconcile_errors",
            "Reconciles that failed and were retried.",
            ["kind"],
            registry=self.registry,
        )
        self.policy_actions = Counter(
            "lahar_controller_policy_actions",
            "Actions a policy or a command made the controller take on a job (a restart refused by maxRetry, "
            "which fails the job, included).",
            ["action"],
            registry=self.registry,
        )
        # Every series exists from the start, at 0, so rate() sees the first increment.
        for kind in RECONCILE_KINDS:
            self.reconcile_duration.labels(kind)
            self.reconcile_errors.labels(kind)
        for action in ACTIONS:
            self.policy_actions.labels(action)

    @contextmanager
    def reconciling(self, kind: str) -> Iterator[None]:
        """Time the block as one reconcile of `kind`; an exception also counts as an error."""
        started = time.perf_counter()
        try:
            yield
        except Exception:
            self.reconcile_errors.labels(kind).inc()
            raise
        finally:
            self.reconcile_duration.labels(kind).observe(time.perf_counter() - started)

    def action_taken(self, action: str) -> None:
        self.policy_actions.labels(action).inc()
