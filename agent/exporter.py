"""The agent's Prometheus endpoint: one custom collector, on its own registry, that turns the latest
NodeReport into `lahar_*` samples (base units; labels that join with kube-state-metrics), plus
`/healthz`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lahar.agent.report import NodeReport

DEFAULT_METRICS_PORT = 9316
PRESSURE_WINDOWS = (("10s", "avg10"), ("60s", "avg60"), ("300s", "avg300"))


class _Family:
    """A metric family whose samples all carry the node label first."""

    def __init__(self, metric: GaugeMetricFamily | CounterMetricFamily, node: str) -> None:
        self.metric = metric
        self.node = node

    def add(self, value: float, *labels: str) -> None:
        self.metric.add_metric([self.node, *labels], value)


class ReportCollector(Collector):
    """Samples of the latest report; nothing before the first collection."""

    def __init__(self, latest: Callable[[], NodeReport | None],
                 agent_counters: Callable[[], dict[str, float]] | None = None) -> None:
        self.latest = latest
        self.agent_counters = agent_counters or dict

    def describe(self) -> list[Metric]:
        return []  # samples depend on the report; describing them would run a collection at registration

    def collect(self) -> Iterator[Metric]:
        report = self.latest()
        if report is None:
            return
        families: list[_Family] = []

        def gauge(name: str, documentation: str, *labels: str) -> _Family:
            family = _Family(GaugeMetricFamily(name, documentation, labels=["node", *labels]), report.node)
            families.append(family)
            return family

        def counter(name: str, documentation: str, *labels: str) -> _Family:
            family = _Family(CounterMetricFamily(name, documentation, labels=["node", *labels]), report.node)
            families.append(family)
            return family

        self._node(report, gauge, counter)
        self._pods(report, gauge, counter)
        self._accelerators(report, gauge)
        self._agent(report, gauge, counter)
        for family in families:
            yield family.metric

    @staticmethod
    def _node(report: NodeReport, gauge: Any, counter: Any) -> None:
        cpu, memory = report.cpu, report.memory
        gauge("lahar_node_cpu_cores", "Logical CPUs of the node.").add(cpu.cores)
        gauge("lahar_node_cpu_usage_cores", "CPU the node used over the last interval, in cores.").add(cpu.usage_cores)
        gauge("lahar_node_cpu_usage_ratio", "CPU the node used over the last interval, 0-1.").add(cpu.usage_ratio)
        per_core = gauge("lahar_cpu_usage_ratio", "Usage of one logical CPU over the last interval, 0-1.", "cpu")
        for index, ratio in enumerate(cpu.per_core_ratio):
            per_core.add(ratio, str(index))
        gauge("lahar_node_memory_total_bytes", "Memory of the node.").add(memory.total_bytes)
        gauge("lahar_node_memory_used_bytes", "Memory in use: total minus available.").add(memory.used_bytes)
        gauge("lahar_node_memory_available_bytes", "Memory available without swapping.").add(memory.available_bytes)
        gauge("lahar_node_memory_page_cache_bytes", "Memory holding the page cache.").add(memory.page_cache_bytes)
        numa_cpu = gauge("lahar_numa_cpu_usage_cores", "CPU used on a NUMA node, in cores.", "numa")
        numa_total = gauge("lahar_numa_memory_total_bytes", "Memory of a NUMA node.", "numa")
        numa_used = gauge("lahar_numa_memory_used_bytes", "Memory in use on a NUMA node.", "numa")
        for numa in report.numa:
            numa_cpu.add(numa.cpu_usage_cores, str(numa.id))
            numa_total.add(numa.memory_total_bytes, str(numa.id))
            numa_used.add(numa.memory_used_bytes, str(numa.id))
        stalled = gauge("lahar_node_pressure_ratio", "Share of wall time tasks stalled on a resource (PSI), 0-1.",
                        "resource", "kind", "window")
        stalled_total = counter("lahar_node_pressure_stalled_seconds", "Time tasks stalled on a resource (PSI).",
                                "resource", "kind")
        for pressure in report.pressure:
            for kind in ("some", "full"):
                for window, field in PRESSURE_WINDOWS:
                    stalled.add(getattr(pressure, f"{kind}_{field}") / 100.0, pressure.resource, kind, window)
                stalled_total.add(getattr(pressure, f"{kind}_total_seconds"), pressure.resource, kind)
        reclaimable = report.reclaimable
        if "cpu" in reclaimable:
            gauge("lahar_node_reclaimable_cpu_cores", "CPU best-effort pods may borrow, in cores.").add(
                reclaimable["cpu"] / 1000.0)
        if "memory" in reclaimable:
            gauge("lahar_node_reclaimable_memory_bytes", "Memory best-effort pods may borrow.").add(
                reclaimable["memory"])

    @staticmethod
    def _pods(report: NodeReport, gauge: Any, counter: Any) -> None:
        pod_labels = ("namespace", "pod", "qos_class")
        cpu = gauge("lahar_pod_cpu_usage_cores", "CPU a pod used over the last interval, in cores.", *pod_labels)
        memory = gauge("lahar_pod_memory_working_set_bytes", "A pod's memory working set (usage minus inactive "
                                                             "file pages).", *pod_labels)
        throttled = counter("lahar_pod_cpu_throttled_periods", "CFS periods in which a pod was throttled.",
                            *pod_labels)
        throttled_time = counter("lahar_pod_cpu_throttled_seconds", "Time a pod was throttled.", *pod_labels)
        read = counter("lahar_pod_io_read_bytes", "Bytes a pod read from block devices.", *pod_labels)
        written = counter("lahar_pod_io_write_bytes", "Bytes a pod wrote to block devices.", *pod_labels)
        container_cpu = gauge("lahar_container_cpu_usage_cores", "CPU a container used over the last interval.",
                              "namespace", "pod", "container")
        container_memory = gauge("lahar_container_memory_working_set_bytes", "A container's memory working set.",
                                 "namespace", "pod", "container")
        for pod in report.pods:
            labels = (pod.namespace, pod.name, pod.qos_class)
            cpu.add(pod.cpu_usage_cores, *labels)
            memory.add(pod.memory_working_set_bytes, *labels)
            throttled.add(pod.cpu_throttled_periods_total, *labels)
            throttled_time.add(pod.cpu_throttled_seconds_total, *labels)
            read.add(pod.io_read_bytes_total, *labels)
            written.add(pod.io_write_bytes_total, *labels)
            for container in pod.containers:
                container_cpu.add(container.cpu_usage_cores, pod.namespace, pod.name, container.name)
                container_memory.add(container.memory_working_set_bytes, pod.namespace, pod.name, container.name)

    @staticmethod
    def _accelerators(report: NodeReport, gauge: Any) -> None:
        available = gauge("lahar_accelerator_available", "1 when the node's GPUs or NPUs can be read, else 0.",
                          "kind", "source")
        available.add(float(report.gpu.available), "gpu", report.gpu.source)
        available.add(float(report.npu.available), "npu", report.npu.source)
        gpu_labels = ("gpu", "uuid", "model")
        utilization = gauge("lahar_gpu_utilization_ratio", "Share of time a GPU was busy, 0-1.", *gpu_labels)
        used = gauge("lahar_gpu_memory_used_bytes", "GPU memory in use.", *gpu_labels)
        total = gauge("lahar_gpu_memory_total_bytes", "GPU memory.", *gpu_labels)
        power = gauge("lahar_gpu_power_watts", "GPU power draw.", *gpu_labels)
        temperature = gauge("lahar_gpu_temperature_celsius", "GPU temperature.", *gpu_labels)
        process_memory = gauge("lahar_gpu_process_memory_bytes", "GPU memory held by a process, with its pod.",
                               "gpu", "uuid", "pid", "namespace", "pod")
        for device in report.gpu.gpus:
            labels = (str(device.index), device.uuid, device.model)
            utilization.add(device.utilization_ratio, *labels)
            used.add(device.memory_used_bytes, *labels)
            total.add(device.memory_total_bytes, *labels)
            power.add(device.power_watts, *labels)
            temperature.add(device.temperature_celsius, *labels)
            for process in device.processes:
                process_memory.add(process.memory_bytes, str(device.index), device.uuid, str(process.pid),
                                   process.namespace, process.pod)
        npu_labels = ("npu", "chip", "model")
        npu_utilization = gauge("lahar_npu_utilization_ratio", "Share of time an NPU's AI cores were busy, 0-1.",
                                *npu_labels)
        hbm_used = gauge("lahar_npu_hbm_used_bytes", "NPU high-bandwidth memory in use.", *npu_labels)
        hbm_total = gauge("lahar_npu_hbm_total_bytes", "NPU high-bandwidth memory.", *npu_labels)
        npu_power = gauge("lahar_npu_power_watts", "NPU power draw.", *npu_labels)
        npu_temperature = gauge("lahar_npu_temperature_celsius", "NPU temperature.", *npu_labels)
        healthy = gauge("lahar_npu_healthy", "1 when the NPU reports itself healthy, else 0.", *npu_labels)
        for npu in report.npu.npus:
            labels = (str(npu.id), str(npu.chip), npu.model)
            npu_utilization.add(npu.aicore_utilization_ratio, *labels)
            hbm_used.add(npu.hbm_used_bytes, *labels)
            hbm_total.add(npu.hbm_total_bytes, *labels)
            npu_power.add(npu.power_watts, *labels)
            npu_temperature.add(npu.temperature_celsius, *labels)
            healthy.add(float(npu.healthy), *labels)

    def _agent(self, report: NodeReport, gauge: Any, counter: Any) -> None:
        gauge("lahar_agent_collect_duration_seconds", "Wall time of the agent's last collection.").add(
            report.health.collect_seconds)
        gauge("lahar_agent_last_report_timestamp_seconds", "When the agent's last report was taken.").add(
            report.timestamp)
        failing = gauge("lahar_agent_collector_failing", "1 when a collector's last run failed.", "collector")
        for collector in report.health.errors:
            failing.add(1.0, collector)
        counters = self.agent_counters()
        for name, documentation in (("reports_sent", "Reports the agent streamed to the scheduler."),
                                    ("stream_reconnects", "Times the agent reconnected its report stream.")):
            if name in counters:
                counter(f"lahar_agent_{name}", documentation).add(counters[name])
        if "stream_connected" in counters:
            gauge("lahar_agent_stream_connected", "1 while the report stream to the scheduler is up.").add(
                counters["stream_connected"])


class MetricsServer:
    """`/metrics` and `/healthz` on a port of their own, served from a daemon thread."""

    def __init__(self, registry: CollectorRegistry, healthy: Callable[[], tuple[bool, str]],
                 address: str = "0.0.0.0", port: int = DEFAULT_METRICS_PORT) -> None:
        self.registry = registry
        self.healthy = healthy
        handler = self._handler()
        self.httpd = ThreadingHTTPServer((address, port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(server.registry), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz", "/livez"):
                    ok, reason = server.healthy()
                    self._send(200 if ok else 503, (reason + "\n").encode(), "text/plain; charset=utf-8")
                else:
                    self._send(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - scrapes are not news
                return

        return Handler


def health_of(last_report_at: Callable[[], float | None], interval: float) -> Callable[[], tuple[bool, str]]:
    """Healthy while collections keep coming: the last one at most three intervals old."""

    def healthy() -> tuple[bool, str]:
        last = last_report_at()
        if last is None:
            return False, "no collection yet"
        age = time.time() - last
        if age > max(3 * interval, 5.0):
            return False, f"last collection {age:.1f}s ago"
        return True, "ok"

    return healthy
