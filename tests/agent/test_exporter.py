"""The agent's /metrics and /healthz, scraped over HTTP and parsed as Prometheus text."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from lahar.agent.exporter import MetricsServer, ReportCollector, health_of
from lahar.rpc.report import (
    Accelerators,
    AgentHealth,
    ContainerUsage,
    CpuUsage,
    GpuDevice,
    GpuProcess,
    MemoryUsage,
    NodeReport,
    NpuDevice,
    NumaNode,
    PodUsage,
    Pressure,
)


def sample_report() -> NodeReport:
    return NodeReport(
        node="n1",
        sequence=7,
        timestamp=time.time(),
        cpu=CpuUsage(2, 1.5, 0.75, [0.5, 1.0]),
        memory=MemoryUsage(8 << 30, 3 << 30, 5 << 30, 1 << 30),
        numa=[NumaNode(0, [0, 1], 8 << 30, 3 << 30, 1.5)],
        pressure=[Pressure("cpu", 12.5, 5.0, 1.0, 42.0, 0.0, 0.0, 0.0, 0.0)],
        pods=[
            PodUsage(
                "team",
                "train-0",
                "u1",
                "BE",
                "BestEffort",
                "kubepods/besteffort/podu1",
                0.9,
                256 << 20,
                3,
                0.25,
                1000,
                2000,
                [ContainerUsage("main", 0.9, 200 << 20)],
            )
        ],
        gpu=Accelerators(
            True,
            source="nvml",
            gpus=[
                GpuDevice(
                    0,
                    "GPU-abc",
                    "H100",
                    0.4,
                    10 << 30,
                    80 << 30,
                    300.0,
                    55.0,
                    [GpuProcess(4242, 1 << 30, "team", "train-0")],
                )
            ],
        ),
        npu=Accelerators(
            True, source="dcmi", npus=[NpuDevice(0, 0, "910B", 0.3, 1 << 30, 64 << 30, 90.0, 45.0, "Alarm")]
        ),
        reclaimable={"cpu": 500, "memory": 1 << 30},
        health=AgentHealth("0.1.0", 0.004, {"npu": "boom"}),
    )


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def served() -> tuple[MetricsServer, list[NodeReport | None]]:
    latest: list[NodeReport | None] = [None]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReportCollector(lambda: latest[0], lambda: {"reports_sent": 5, "stream_connected": 1}))
    server = MetricsServer(registry, health_of(lambda: latest[0].timestamp if latest[0] else None, 1.0), "127.0.0.1", 0)
    server.start()
    yield server, latest
    server.stop()


def test_metrics_carry_the_report_in_base_units(served: tuple[MetricsServer, list[NodeReport | None]]) -> None:
    server, latest = served
    assert not [k for k in scrape(server.port) if k[0].startswith("lahar_node")], "nothing before a collection"
    latest[0] = sample_report()
    samples = scrape(server.port)
    node = (("node", "n1"),)
    assert samples[("lahar_node_cpu_usage_cores", node)] == 1.5
    assert samples[("lahar_node_cpu_usage_ratio", node)] == 0.75
    assert samples[("lahar_cpu_usage_ratio", (("cpu", "1"), ("node", "n1")))] == 1.0
    assert samples[("lahar_node_memory_used_bytes", node)] == 3 << 30
    assert samples[("lahar_numa_memory_used_bytes", (("node", "n1"), ("numa", "0")))] == 3 << 30
    assert (
        samples[
            ("lahar_node_pressure_ratio", (("kind", "some"), ("node", "n1"), ("resource", "cpu"), ("window", "10s")))
        ]
        == 0.125
    )
    assert (
        samples[("lahar_node_pressure_stalled_seconds_total", (("kind", "some"), ("node", "n1"), ("resource", "cpu")))]
        == 42.0
    )
    pod = (("lahar_qos", "BE"), ("namespace", "team"), ("node", "n1"), ("pod", "train-0"))
    assert samples[("lahar_pod_cpu_usage_cores", pod)] == 0.9
    assert samples[("lahar_pod_memory_working_set_bytes", pod)] == 256 << 20
    assert samples[("lahar_pod_cpu_throttled_periods_total", pod)] == 3
    assert samples[("lahar_pod_io_write_bytes_total", pod)] == 2000
    gpu = (("gpu", "0"), ("model", "H100"), ("node", "n1"), ("uuid", "GPU-abc"))
    assert samples[("lahar_gpu_utilization_ratio", gpu)] == 0.4
    assert samples[("lahar_gpu_memory_total_bytes", gpu)] == 80 << 30
    assert (
        samples[
            (
                "lahar_gpu_process_memory_bytes",
                (
                    ("gpu", "0"),
                    ("namespace", "team"),
                    ("node", "n1"),
                    ("pid", "4242"),
                    ("pod", "train-0"),
                    ("uuid", "GPU-abc"),
                ),
            )
        ]
        == 1 << 30
    )
    npu = (("chip", "0"), ("model", "910B"), ("node", "n1"), ("npu", "0"))
    assert samples[("lahar_npu_utilization_ratio", npu)] == 0.3
    assert samples[("lahar_npu_healthy", npu)] == 0.0
    assert samples[("lahar_node_reclaimable_cpu_cores", node)] == 0.5
    assert samples[("lahar_agent_collector_failing", (("collector", "npu"), ("node", "n1")))] == 1.0
    assert samples[("lahar_agent_reports_sent_total", node)] == 5
    assert samples[("lahar_accelerator_available", (("kind", "gpu"), ("node", "n1"), ("source", "nvml")))] == 1.0


def test_healthz_follows_collections(served: tuple[MetricsServer, list[NodeReport | None]]) -> None:
    server, latest = served
    url = f"http://127.0.0.1:{server.port}/healthz"
    with pytest.raises(urllib.error.HTTPError) as before:
        urllib.request.urlopen(url, timeout=5)
    assert before.value.code == 503
    latest[0] = sample_report()
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200 and response.read() == b"ok\n"
    latest[0].timestamp -= 60  # a loop that stopped collecting
    with pytest.raises(urllib.error.HTTPError) as stale:
        urllib.request.urlopen(url, timeout=5)
    assert stale.value.code == 503 and b"last collection" in stale.value.read()
