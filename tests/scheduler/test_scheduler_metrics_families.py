"""The scheduler's histograms resolve sub-millisecond actions, and queues keep their series (issue 19)."""

from __future__ import annotations

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lahar.scheduler.metrics import CYCLE_BUCKETS, CycleFigures, QueueFigures, SchedulerMetrics


def samples(metrics: SchedulerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_action_latency_buckets_start_at_100_microseconds() -> None:
    assert CYCLE_BUCKETS[0] == 0.0001 and list(CYCLE_BUCKETS) == sorted(CYCLE_BUCKETS)
    metrics = SchedulerMetrics()
    metrics.observe_cycle(0.0004, {"allocate": 0.00015}, CycleFigures())
    found = samples(metrics)
    bucket = "lahar_scheduler_action_duration_seconds_bucket"
    assert found[(bucket, (("action", "allocate"), ("le", "0.0001")))] == 0
    assert found[(bucket, (("action", "allocate"), ("le", "0.00025")))] == 1
    assert found[("lahar_scheduler_e2e_scheduling_duration_seconds_bucket", (("le", "0.0005"),))] == 1


def test_a_queue_with_no_work_keeps_its_series_at_zero() -> None:
    metrics = SchedulerMetrics()
    busy = QueueFigures({"cpu": 2000, "memory": 1 << 30}, {"cpu": 4000, "memory": 2 << 30}, 0.5)
    metrics.observe_cycle(0.01, {}, CycleFigures(queues={"busy": busy, "idle": QueueFigures({}, None, None)}))
    found = samples(metrics)
    for resource in ("cpu", "memory"):
        assert found[("lahar_scheduler_queue_allocated", (("queue", "idle"), ("resource", resource)))] == 0
    assert found[("lahar_scheduler_queue_share", (("queue", "idle"),))] == 0
    assert found[("lahar_scheduler_queue_allocated", (("queue", "busy"), ("resource", "cpu")))] == 2.0
    assert found[("lahar_scheduler_queue_share", (("queue", "busy"),))] == 0.5
    # An idle queue the proportion plugin gave a share to keeps its deserved series, 0 included.
    idle = QueueFigures({}, {"cpu": 1000}, 0.0)
    metrics.observe_cycle(0.01, {}, CycleFigures(queues={"idle": idle}))
    found = samples(metrics)
    assert found[("lahar_scheduler_queue_deserved", (("queue", "idle"), ("resource", "memory")))] == 0
    assert ("lahar_scheduler_queue_allocated", (("queue", "busy"), ("resource", "cpu"))) not in found  # deleted
