"""Volcano's scheduler families (`volcano_*`) from a real cycle's session: the names, labels and
units Volcano's dashboards read (issue 19; scheduler/volcano_metrics.py)."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lahar.scheduler.metrics import SchedulerMetrics
from lahar.scheduler.volcano_metrics import (
    dominant_share,
    dominant_shares,
    exponential_range,
    unix_seconds,
    volcano_cycle,
)
from tests.scheduler.cluster_fixtures import T0, cycle, gang, node, queue

GIB = 1 << 30


def scrape(metrics: SchedulerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def cluster() -> list:  # type: ignore[type-arg]
    """4 cpu; queue a (capability 2 cpu) runs a gang of 2, b (guarantee 1 cpu) asks a gang of 8
    that cannot fit, idle has nothing."""
    return [
        node("n1", cpu="4", memory="32Gi"),
        queue("a", capability={"cpu": "2"}),
        queue("b", guarantee={"cpu": "1"}),
        queue("idle"),
        gang("fits", 2, queue="a"),
        gang("toobig", 8, queue="b"),
    ]


def test_exponential_ranges_are_gos() -> None:
    buckets = exponential_range(1, 5000, 20)
    assert len(buckets) == 20 and buckets[0] == 1 and buckets[-1] == pytest.approx(5000)
    assert buckets[1] / buckets[0] == pytest.approx(buckets[-1] / buckets[-2])


def test_a_cycle_gives_volcanos_queue_job_and_attempt_figures() -> None:
    session = cycle(cluster())
    now = unix_seconds(T0) + 30  # type: ignore[operator]
    figures = volcano_cycle(session, now)
    assert figures.attempts == {"scheduled": 2, "unschedulable": 8}
    assert figures.unschedulable_tasks == {"toobig": 8} and figures.retried_jobs == ("toobig",)
    a, b, idle = (figures.queues[name] for name in ("a", "b", "idle"))
    assert a["allocated"]["cpu"] == 2000 and a["allocated"]["memory"] == 2 * GIB
    assert a["capacity"]["cpu"] == 2000
    assert a["real_capacity"]["cpu"] == 2000  # min(capability 2, 4 - 1 guaranteed to b)
    assert b["real_capacity"]["cpu"] == 4000  # 4 - 1 guaranteed + its own 1
    assert idle["allocated"] == {"cpu": 0, "memory": 0}
    assert b["request"]["cpu"] == 8000
    assert figures.queue_weight == {"a": 1.0, "b": 1.0, "idle": 1.0, "default": 1.0}
    assert figures.namespace_share == {"default": 0.5}  # 2 of 4 cpu is its dominant share
    assert figures.job_share[("default", "fits")] == 0.5 and figures.job_share[("default", "toobig")] == 0
    (done,) = figures.scheduled_jobs
    assert (done.name, done.queue, done.at - done.created) == ("fits", "a", 30)
    assert figures.assumed_task_ages == (30.0, 30.0)


def test_the_families_carry_volcanos_names_labels_and_units() -> None:
    metrics = SchedulerMetrics()
    session = cycle(cluster())
    metrics.observe_session(0.004, 0.001, session)
    found = scrape(metrics)
    assert found[("volcano_queue_allocated_milli_cpu", (("queue_name", "a"),))] == 2000
    assert found[("volcano_queue_allocated_memory_bytes", (("queue_name", "idle"),))] == 0
    assert found[("volcano_queue_capacity_milli_cpu", (("queue_name", "a"),))] == 2000
    assert found[("volcano_unschedule_task_count", (("job_id", "toobig"),))] == 8
    assert found[("volcano_unschedule_job_count", ())] == 1
    assert found[("volcano_schedule_attempts_total", (("result", "scheduled"),))] == 2
    assert found[("volcano_schedule_attempts_total", (("result", "error"),))] == 0  # at 0 from the start
    assert found[("volcano_eviction_transactions_total", (("action", "gangreclaim"),))] == 0
    assert found[("volcano_job_retry_counts_total", (("job_id", "toobig"),))] == 1
    assert found[("volcano_e2e_scheduling_latency_milliseconds_count", ())] == 1
    assert found[("volcano_e2e_scheduling_latency_milliseconds_sum", ())] == pytest.approx(4.0)
    assert found[("volcano_action_scheduling_latency_milliseconds_count", (("action", "allocate"),))] == 1
    opened = [labels for (name, labels) in found if name == "volcano_plugin_scheduling_latency_milliseconds_count"]
    assert (("OnSession", "OnSessionOpen"), ("plugin", "gang")) in opened
    assert (("OnSession", "OnSessionClose"), ("plugin", "proportion")) in opened
    job = (("job_name", "fits"), ("job_namespace", "default"), ("queue", "a"))
    assert found[("volcano_e2e_job_scheduling_start_time", job)] == unix_seconds(T0)
    # The job gone from the next cycle: its per-job series go, as Volcano deletes them.
    metrics.observe_session(0.004, 0.001, cycle([node("n1")]))
    assert ("volcano_e2e_job_scheduling_start_time", job) not in scrape(metrics)


def test_binds_count_errors_and_bound_latency() -> None:
    metrics = SchedulerMetrics()
    session = cycle(cluster())
    bound = [task for batch in session.binds for task in batch.tasks]
    metrics.binds_done(bound, 1, [0.002, 0.003, 0.004], now=unix_seconds(T0) + 5)  # type: ignore[operator]
    found = scrape(metrics)
    assert found[("lahar_scheduler_pods_scheduled_total", ())] == 2
    assert found[("volcano_schedule_attempts_total", (("result", "error"),))] == 1
    assert found[("volcano_task_scheduling_latency_milliseconds_count", (("stage", "Bound"),))] == 2
    assert found[("volcano_task_scheduling_latency_milliseconds_sum", (("stage", "Bound"),))] == 10000
    assert found[("volcano_scheduling_stage_duration_milliseconds_count", (("stage", "Bind"),))] == 3


def test_every_jobs_dominant_share_in_one_pass_is_each_jobs_own() -> None:
    total = np.array([8000, 64, 0, 10])
    columns = np.array([0, 1, 2])  # the quota resources; column 2 has no capacity: not counted
    allocated = np.array([[2000, 8, 5, 10], [0, 32, 0, 0], [0, 0, 0, 0]])
    assert dominant_shares(allocated, total, columns) == [0.25, 0.5, 0.0]
    assert [dominant_share(row, total, columns) for row in allocated] == [0.25, 0.5, 0.0]
    assert dominant_shares(allocated, np.zeros(4, dtype=np.int64), columns) == [0.0, 0.0, 0.0]
    assert dominant_shares(allocated[:0], total, columns) == []
