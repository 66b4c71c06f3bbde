"""The online-latency view (issue 19): a pod names its latency histogram in annotations, the agent
reads it and exports its p99 beside the pod's target (agent/collectors/latency_histogram.py)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

from lahar.agent.collectors.latency_histogram import (
    LatencyHistograms,
    LatencySource,
    histogram_buckets,
    parse_source,
    quantile,
)
from lahar.agent.collectors.latency_probe import parse_probe
from lahar.agent.exporter import ReportCollector
from lahar.metrics_catalog import sample_report

URL = "http://127.0.0.1:9479/metrics"
NAMES = {"lahar.dev/latency-metrics": URL, "lahar.dev/latency-histogram": "request_seconds"}


def exposition(observations: list[float], extra_series: list[float] = ()) -> str:  # type: ignore[assignment]
    registry = CollectorRegistry()
    histogram = Histogram(
        "request_seconds", "Requests.", ["path"], buckets=(0.001, 0.005, 0.01, 0.05), registry=registry
    )
    for value in observations:
        histogram.labels("/a").observe(value)
    for value in extra_series:
        histogram.labels("/b").observe(value)
    return generate_latest(registry).decode()


def test_annotations_name_the_histogram_and_bad_ones_are_refused() -> None:
    assert parse_source({}) is None
    assert parse_source(NAMES) == LatencySource(URL, "request_seconds", None)
    assert parse_source({**NAMES, "lahar.dev/latency-target": "20ms"}) == LatencySource(URL, "request_seconds", 0.02)
    with pytest.raises(ValueError, match="given together"):
        parse_source({"lahar.dev/latency-histogram": "request_seconds"})
    with pytest.raises(ValueError, match="expected"):
        parse_source({**NAMES, "lahar.dev/latency-metrics": "tcp://x:1"})
    with pytest.raises(ValueError, match="latency-target"):
        parse_source({**NAMES, "lahar.dev/latency-target": "forever"})
    # A target beside a histogram is the histogram's, not a half-declared probe.
    assert parse_probe({**NAMES, "lahar.dev/latency-target": "20ms"}) is None


def test_buckets_sum_over_the_histograms_series() -> None:
    buckets = histogram_buckets(exposition([0.002, 0.02], [0.0005]), "request_seconds")
    assert buckets == ((0.001, 1.0), (0.005, 2.0), (0.01, 2.0), (0.05, 3.0), (math.inf, 3.0))
    assert histogram_buckets(exposition([0.002]), "other_seconds") is None


def test_quantile_is_prometheus_histogram_quantile_over_the_window() -> None:
    before = ((0.01, 10.0), (0.1, 10.0), (math.inf, 10.0))
    # 100 new observations: 90 under 10 ms, 10 between 10 and 100 ms: p99 = 10 + 90 * (99 - 90) / 10 ms.
    after = ((0.01, 100.0), (0.1, 110.0), (math.inf, 110.0))
    assert quantile(0.99, before, after) == pytest.approx(0.091)
    assert quantile(0.5, before, after) == pytest.approx(0.01 * 50 / 90)
    assert quantile(0.99, before, before) is None  # nothing observed: no p99
    beyond = ((0.01, 100.0), (0.1, 100.0), (math.inf, 200.0))
    assert quantile(0.99, before, beyond) == 0.1  # in +Inf: the highest finite bound, as Prometheus
    assert quantile(0.99, after, before) is None  # went down: the pod restarted


def test_the_agent_reads_the_pods_histogram_and_exports_its_p99_beside_the_target() -> None:
    texts = [exposition([0.0005] * 10), exposition([0.0005] * 10 + [0.03] * 5)]
    now = [0.0]

    def fetch(url: str) -> str:
        assert url == URL
        return texts.pop(0)

    reader = LatencyHistograms(fetch, clock=lambda: now[0], background=False)
    pod = {
        "metadata": {
            "uid": "uid-ls",
            "namespace": "web",
            "name": "api-0",
            "annotations": {**NAMES, "lahar.dev/latency-target": "20ms"},
        }
    }
    reader.watch([pod])
    reader.step()
    now[0] = 5.0
    reader.step()
    (latency,) = reader.latest()
    assert latency.p99_seconds == pytest.approx(0.01 + 0.04 * (0.99 * 5 - 0) / 5)
    registry = CollectorRegistry(auto_describe=False)
    report = sample_report()
    registry.register(ReportCollector(lambda: report, latency=reader.latest))
    text = generate_latest(registry).decode()
    assert 'lahar_pod_latency_target_seconds{namespace="web",node="node-a",pod="api-0"} 0.02' in text
    assert (
        'lahar_pod_latency_p99_seconds{lahar_qos="LS",metric="request_seconds",namespace="web",node="node-a",pod="api-0"}'
        in text
    )
    reader.watch([])  # the pod went away: so does its figure
    assert reader.latest() == []
