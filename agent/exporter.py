"""The agent's Prometheus endpoint: one custom collector, on its own registry, that turns the latest
NodeReport into `lahar_*` samples (base units; labels that join with kube-state-metrics), and
the health rule `/healthz` reports (the HTTP server itself is lahar.metrics_server's)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lahar.agent.agent import COLLECTORS
from lahar.agent.collectors.latency_histogram import PodLatency
from lahar.agent.qos.config import RELOAD_RESULTS
from lahar.agent.qos.eviction import REASONS as EVICTION_REASONS
from lahar.agent.qos.knobs import KNOBS
from lahar.agent.qos.strategies import STRATEGIES
from lahar.agent.usage_totals import (
    CLASSES,
    CPU_SECONDS,
    THROTTLED_PERIODS,
    THROTTLED_SECONDS,
    WAIT_SECONDS,
)
from lahar.endpoints import AGENT_METRICS_PORT
from lahar.metrics_server import Health, MetricsServer
from lahar.rpc.report import ContainerUsage, NodeReport, PodUsage

if TYPE_CHECKING:
    from lahar.agent.qos.engine import QosSnapshot

# MetricsServer lives in lahar.metrics_server (the controller serves its registry with it too);
# it is re-exported here for the agent's callers.
__all__ = ["DEFAULT_METRICS_PORT", "MetricsServer", "ReportCollector", "health_of"]

DEFAULT_METRICS_PORT = AGENT_METRICS_PORT
# Lahar's QoS class (LC, LS, BE, SYSTEM) on pod and class series. Not `qos_class`: kube-state-metrics
# has a label of that name holding Kubernetes' QoS class (Guaranteed, Burstable, BestEffort).
QOS_LABEL = "lahar_qos"
ONLINE_CLASSES = ("LC", "LS")  # the classes whose CPU wait the interference loop reads
MiB = 1 << 20
# node_exporter's pressure families: (resource, kind) -> name (`waiting` is "some", `stalled` "full").
NODE_EXPORTER_PRESSURE = {
    ("cpu", "some"): "node_pressure_cpu_waiting_seconds",
    ("memory", "some"): "node_pressure_memory_waiting_seconds",
    ("memory", "full"): "node_pressure_memory_stalled_seconds",
    ("io", "some"): "node_pressure_io_waiting_seconds",
    ("io", "full"): "node_pressure_io_stalled_seconds",
}
QOS_FAILURES_UNHEALTHY = 3  # QoS ticks failed in a row before /healthz says unhealthy
PRESSURE_WINDOWS = (("10s", "avg10"), ("60s", "avg60"), ("300s", "avg300"))
# The QoS strategies' figures, exported as lahar_qos_<name> gauges.
QOS_FIGURES = {
    "be_cpu_idle": "1 when best-effort groups run with cpu.idle=1, 0 when on the minimal CPU weight.",
    "be_cpu_quota_cores": (
        "CPU all best-effort pods together may use now (the suppress cap; all cores: no cap), in cores."
    ),
    "online_cpu_wait_ratio": (
        "Share of their runnable time online pods waited for a CPU, last window: the interference signal."
    ),
    "online_cpu_wait_baseline_ratio": (
        "Online pods' own CPU wait share, learned while best-effort pods were idle or at their floor."
    ),
    "online_cpu_usage_cores": "CPU used by LC, LS and SYSTEM pods, as CPU suppress counts it, in cores.",
    "system_cpu_usage_cores": "CPU used outside every pod (kubelet, runtime, kernel), in cores.",
    "lc_exclusive_cpus": "CPUs latency-critical pods hold alone, kept free of best-effort pods.",
    "be_cpuset_cpus": "CPUs best-effort pods may run on.",
    "burst_cgroups": "Online pod and container cgroups given a CFS burst.",
    "be_memory_cap_bytes": "Memory cap on best-effort groups while node memory is past its threshold (+Inf: uncapped).",
    "be_memory_capped_groups": "Best-effort groups under a memory cap.",
    "online_memory_protected_bytes": "Memory of online pods protected from reclaim (memory.low/min, v2).",
    "be_io_limited_cgroups": "Best-effort cgroups under per-device IO limits.",
}
IO_UNITS = {
    "read_bps": ("bytes_per_second", "read"),
    "write_bps": ("bytes_per_second", "write"),
    "read_iops": ("iops", "read"),
    "write_iops": ("iops", "write"),
}


class _Family:
    """A metric family whose samples all carry the node label first."""

    def __init__(self, metric: GaugeMetricFamily | CounterMetricFamily, node: str) -> None:
        self.metric = metric
        self.node = node

    def add(self, value: float, *labels: str) -> None:
        self.metric.add_metric([self.node, *labels], value)


class ReportCollector(Collector):
    """Samples of the latest report; nothing before the first collection."""

    def __init__(
        self,
        latest: Callable[[], NodeReport | None],
        agent_counters: Callable[[], dict[str, float]] | None = None,
        qos: Callable[[], QosSnapshot] | None = None,
        totals: Callable[[], dict[tuple[str, str], float]] | None = None,
        latency: Callable[[], list[PodLatency]] | None = None,
    ) -> None:
        """`qos`: the QoS engine's snapshot, when the agent runs one; `totals`: the per-class CPU
        counters (agent/usage_totals.py), updated once per report."""
        self.latest = latest
        self.agent_counters = agent_counters or dict
        self.qos = qos
        self.totals = totals
        self.latency = latency

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

        qos = self.qos() if self.qos is not None else None
        self._node(report, gauge, counter)
        self._pods(report, gauge, counter)
        self._classes(self.totals() if self.totals is not None else {}, counter)
        if self.latency is not None:
            self._latency(report, self.latency(), gauge)
        self._accelerators(report, gauge)
        self._agent(report, gauge, counter)
        if qos is not None:
            self._online_waits(qos, counter)
            self._qos(qos, gauge, counter)
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
        stalled = gauge(
            "lahar_node_pressure_ratio",
            "Share of wall time tasks stalled on a resource (PSI), 0-1.",
            "resource",
            "kind",
            "window",
        )
        stalled_total = counter(
            "lahar_node_pressure_stalled_seconds", "Time tasks stalled on a resource (PSI).", "resource", "kind"
        )
        for pressure in report.pressure:
            for kind in ("some", "full"):
                for window, field in PRESSURE_WINDOWS:
                    stalled.add(getattr(pressure, f"{kind}_{field}") / 100.0, pressure.resource, kind, window)
                stalled_total.add(getattr(pressure, f"{kind}_total_seconds"), pressure.resource, kind)
        # The same under node_exporter's names, for dashboards built on it.
        exporter_names = {
            name: counter(name, f"Total time {resource} PSI '{kind}' counted, in seconds (node_exporter's name).")
            for (resource, kind), name in NODE_EXPORTER_PRESSURE.items()
        }
        for pressure in report.pressure:
            for kind in ("some", "full"):
                name = NODE_EXPORTER_PRESSURE.get((pressure.resource, kind))
                if name is not None:
                    exporter_names[name].add(getattr(pressure, f"{kind}_total_seconds"))
        gauge("node_memory_MemTotal_bytes", "node_exporter's name: MemTotal of /proc/meminfo, in bytes.").add(
            memory.total_bytes
        )
        gauge("node_memory_MemAvailable_bytes", "node_exporter's name: MemAvailable of /proc/meminfo, in bytes.").add(
            memory.available_bytes
        )
        reclaimable = report.reclaimable
        if "cpu" in reclaimable:
            gauge("lahar_node_reclaimable_cpu_cores", "CPU best-effort pods may borrow, in cores.").add(
                reclaimable["cpu"] / 1000.0
            )
        if "memory" in reclaimable:
            gauge("lahar_node_reclaimable_memory_bytes", "Memory best-effort pods may borrow.").add(
                reclaimable["memory"]
            )

    @staticmethod
    def _pods(report: NodeReport, gauge: Any, counter: Any) -> None:
        pod_labels = ("namespace", "pod", QOS_LABEL)
        cpu = gauge("lahar_pod_cpu_usage_cores", "CPU a pod used over the last interval, in cores.", *pod_labels)
        cpu_seconds = counter("lahar_pod_cpu_usage_seconds", "CPU time a pod used (its cgroup's).", *pod_labels)
        memory = gauge(
            "lahar_pod_memory_working_set_bytes",
            "A pod's memory working set (usage minus inactive file pages).",
            *pod_labels,
        )
        throttled = counter(
            "lahar_pod_cpu_throttled_periods",
            "CFS periods in which a pod's own cgroup was throttled (a BE cap on the parent: lahar_class_*).",
            *pod_labels,
        )
        throttled_time = counter(
            "lahar_pod_cpu_throttled_seconds",
            "Time a pod's own cgroup was throttled (a BE cap on the parent shows in lahar_class_*).",
            *pod_labels,
        )
        read = counter("lahar_pod_io_read_bytes", "Bytes a pod read from block devices.", *pod_labels)
        written = counter("lahar_pod_io_write_bytes", "Bytes a pod wrote to block devices.", *pod_labels)
        container_cpu = gauge(
            "lahar_container_cpu_usage_cores",
            "CPU a container used over the last interval.",
            "namespace",
            "pod",
            "container",
        )
        container_memory = gauge(
            "lahar_container_memory_working_set_bytes",
            "A container's memory working set.",
            "namespace",
            "pod",
            "container",
        )
        container_seconds = counter(
            "lahar_container_cpu_usage_seconds", "CPU time a container used.", "namespace", "pod", "container"
        )
        # cAdvisor's names (container="" is the pod's own cgroup, as cAdvisor has it), so dashboards
        # built on the kubelet's metrics work on these too.
        cadvisor = ("namespace", "pod", "container")
        cadvisor_cpu = counter(
            "container_cpu_usage_seconds", "cAdvisor's name: cumulative CPU time, seconds.", *cadvisor
        )
        cadvisor_memory = gauge(
            "container_memory_working_set_bytes", "cAdvisor's name: memory working set, bytes.", *cadvisor
        )
        cadvisor_periods = counter(
            "container_cpu_cfs_throttled_periods", "cAdvisor's name: throttled CFS periods.", *cadvisor
        )
        cadvisor_throttled = counter(
            "container_cpu_cfs_throttled_seconds", "cAdvisor's name: time throttled, seconds.", *cadvisor
        )
        for pod in report.pods:
            labels = (pod.namespace, pod.name, pod.qos_class)
            cpu.add(pod.cpu_usage_cores, *labels)
            cpu_seconds.add(pod.cpu_usage_seconds_total, *labels)
            cgroups: list[tuple[PodUsage | ContainerUsage, str]] = [(pod, ""), *((c, c.name) for c in pod.containers)]
            for usage, container_name in cgroups:
                where = (pod.namespace, pod.name, container_name)
                cadvisor_cpu.add(usage.cpu_usage_seconds_total, *where)
                cadvisor_memory.add(usage.memory_working_set_bytes, *where)
                cadvisor_periods.add(usage.cpu_throttled_periods_total, *where)
                cadvisor_throttled.add(usage.cpu_throttled_seconds_total, *where)
            memory.add(pod.memory_working_set_bytes, *labels)
            throttled.add(pod.cpu_throttled_periods_total, *labels)
            throttled_time.add(pod.cpu_throttled_seconds_total, *labels)
            read.add(pod.io_read_bytes_total, *labels)
            written.add(pod.io_write_bytes_total, *labels)
            for container in pod.containers:
                container_cpu.add(container.cpu_usage_cores, pod.namespace, pod.name, container.name)
                container_memory.add(container.memory_working_set_bytes, pod.namespace, pod.name, container.name)
                container_seconds.add(container.cpu_usage_seconds_total, pod.namespace, pod.name, container.name)

    @staticmethod
    def _classes(totals: dict[tuple[str, str], float], counter: Any) -> None:
        """Per-class counters: every class from the start, at 0 until it counts."""
        families = {
            CPU_SECONDS: counter("lahar_class_cpu_usage_seconds", "CPU time the pods of a QoS class used.", QOS_LABEL),
            THROTTLED_SECONDS: counter(
                "lahar_class_cpu_throttled_seconds",
                "Time a class was throttled where the cap is: BE at the parent groups the QoS engine caps, "
                "the others at their pods' cgroups.",
                QOS_LABEL,
            ),
            THROTTLED_PERIODS: counter(
                "lahar_class_cpu_throttled_periods",
                "CFS periods in which a class was throttled, counted where the cap is (as the seconds).",
                QOS_LABEL,
            ),
            WAIT_SECONDS: counter(
                "lahar_class_cpu_wait_seconds",
                "Time online pods of a class waited for a CPU (PSI cpu some, or schedstat run delay): "
                "the interference signal. While the CPU interference controller runs.",
                QOS_LABEL,
            ),
        }
        for figure, family in families.items():
            for qos_class in ONLINE_CLASSES if figure == WAIT_SECONDS else CLASSES:
                family.add(totals.get((figure, qos_class), 0.0), qos_class)

    @staticmethod
    def _latency(report: NodeReport, latencies: list[PodLatency], gauge: Any) -> None:
        """Online pods' own p99 (the histograms their annotations name), beside their targets."""
        classes = {(pod.namespace, pod.name): pod.qos_class for pod in report.pods}
        p99 = gauge(
            "lahar_pod_latency_p99_seconds",
            "p99 of the latency histogram a pod names (lahar.dev/latency-histogram), over the last minute.",
            "namespace",
            "pod",
            QOS_LABEL,
            "metric",
        )
        target = gauge(
            "lahar_pod_latency_target_seconds", "A pod's latency target (lahar.dev/latency-target).", "namespace", "pod"
        )
        for latency in latencies:
            if latency.p99_seconds is not None:
                qos_class = classes.get((latency.namespace, latency.pod), "")
                p99.add(latency.p99_seconds, latency.namespace, latency.pod, qos_class, latency.metric)
            if latency.target_seconds is not None:
                target.add(latency.target_seconds, latency.namespace, latency.pod)

    @staticmethod
    def _online_waits(qos: QosSnapshot, counter: Any) -> None:
        waits = counter(
            "lahar_pod_cpu_wait_seconds",
            "Time an online pod's runnable tasks waited for a CPU: its cgroup's PSI (cpu.pressure some) where "
            "the kernel has it, else its tasks' schedstat run delay (source).",
            "namespace",
            "pod",
            QOS_LABEL,
            "source",
        )
        for wait in qos.online_waits:
            waits.add(wait.wait_seconds, wait.namespace, wait.pod, wait.qos_class, wait.source)

    @staticmethod
    def _accelerators(report: NodeReport, gauge: Any) -> None:
        available = gauge(
            "lahar_accelerator_available", "1 when the node's GPUs or NPUs can be read, else 0.", "kind", "source"
        )
        available.add(float(report.gpu.available), "gpu", report.gpu.source)
        available.add(float(report.npu.available), "npu", report.npu.source)
        gpu_labels = ("gpu", "uuid", "model")
        utilization = gauge("lahar_gpu_utilization_ratio", "Share of time a GPU was busy, 0-1.", *gpu_labels)
        used = gauge("lahar_gpu_memory_used_bytes", "GPU memory in use.", *gpu_labels)
        total = gauge("lahar_gpu_memory_total_bytes", "GPU memory.", *gpu_labels)
        power = gauge("lahar_gpu_power_watts", "GPU power draw.", *gpu_labels)
        temperature = gauge("lahar_gpu_temperature_celsius", "GPU temperature.", *gpu_labels)
        process_memory = gauge(
            "lahar_gpu_process_memory_bytes",
            "GPU memory held by a process, with its pod.",
            "gpu",
            "uuid",
            "pid",
            "namespace",
            "pod",
        )
        # NVIDIA DCGM exporter's names, labels and units (percent, MiB), for dashboards built on it.
        dcgm_labels = ("gpu", "UUID", "device", "modelName", "Hostname")
        dcgm = {
            name: gauge(name, f"DCGM exporter's name: {text}.", *dcgm_labels)
            for name, text in (
                ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)"),
                ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)"),
                ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)"),
                ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)"),
                ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)"),
            )
        }
        for device in report.gpu.gpus:
            labels = (str(device.index), device.uuid, device.model)
            utilization.add(device.utilization_ratio, *labels)
            used.add(device.memory_used_bytes, *labels)
            total.add(device.memory_total_bytes, *labels)
            power.add(device.power_watts, *labels)
            temperature.add(device.temperature_celsius, *labels)
            where = (str(device.index), device.uuid, f"nvidia{device.index}", device.model, report.node)
            dcgm["DCGM_FI_DEV_GPU_UTIL"].add(device.utilization_ratio * 100.0, *where)
            dcgm["DCGM_FI_DEV_FB_USED"].add(device.memory_used_bytes / MiB, *where)
            dcgm["DCGM_FI_DEV_FB_FREE"].add((device.memory_total_bytes - device.memory_used_bytes) / MiB, *where)
            dcgm["DCGM_FI_DEV_POWER_USAGE"].add(device.power_watts, *where)
            dcgm["DCGM_FI_DEV_GPU_TEMP"].add(device.temperature_celsius, *where)
            for process in device.processes:
                process_memory.add(
                    process.memory_bytes,
                    str(device.index),
                    device.uuid,
                    str(process.pid),
                    process.namespace,
                    process.pod,
                )
        npu_labels = ("npu", "chip", "model")
        npu_utilization = gauge(
            "lahar_npu_utilization_ratio", "Share of time an NPU's AI cores were busy, 0-1.", *npu_labels
        )
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
            report.health.collect_seconds
        )
        gauge("lahar_agent_last_report_timestamp_seconds", "When the agent's last report was taken.").add(
            report.timestamp
        )
        failing = gauge("lahar_agent_collector_failing", "1 when a collector's last run failed, else 0.", "collector")
        for collector in sorted({*COLLECTORS, *report.health.errors}):
            failing.add(float(collector in report.health.errors), collector)
        counters = self.agent_counters()
        for name, documentation in (
            ("reports_sent", "Reports the agent streamed to the scheduler."),
            ("stream_reconnects", "Times the agent reconnected its report stream."),
        ):
            if name in counters:
                counter(f"lahar_agent_{name}", documentation).add(counters[name])
        if "stream_connected" in counters:
            gauge("lahar_agent_stream_connected", "1 while the report stream to the scheduler is up.").add(
                counters["stream_connected"]
            )

    @staticmethod
    def _qos(qos: QosSnapshot, gauge: Any, counter: Any) -> None:
        gauge("lahar_qos_available", "1 when the QoS engine can write cgroups, 0 when it cannot (no rights).").add(
            float(qos.available)
        )
        gauge("lahar_qos_dry_run", "1 when QoS only logs the writes and evictions it would make.").add(
            float(qos.dry_run)
        )
        gauge(
            "lahar_qos_config_valid",
            "0 while the QoS config file on disk is refused (the last good one stays), else 1.",
        ).add(float(qos.config_error is None))
        reloads = counter("lahar_qos_config_reloads", "QoS config file reloads, by result (ok, refused).", "result")
        for result in sorted({*RELOAD_RESULTS, *qos.config_reloads}):
            reloads.add(qos.config_reloads.get(result, 0), result)
        enabled = gauge("lahar_qos_strategy_enabled", "1 when a QoS strategy is on for this node.", "strategy")
        for strategy, on in sorted(qos.enabled.items()):
            enabled.add(float(on), strategy)
        for name, value in sorted(qos.figures.items()):
            gauge(f"lahar_qos_{name}", QOS_FIGURES.get(name, f"QoS figure {name}.")).add(value)
        limits = {
            unit: gauge(
                f"lahar_qos_be_io_limit_{unit}",
                f"Per-device IO limit of each best-effort pod, in {unit.replace('_', ' ')} (0: none).",
                "device",
                "direction",
            )
            for unit in ("bytes_per_second", "iops")
        }
        for device, kind, limit in qos.io_limits:
            unit, direction = IO_UNITS[kind]
            limits[unit].add(limit, device, direction)
        writes = counter(
            "lahar_qos_cgroup_writes",
            "Cgroup file writes by the QoS engine (in dry-run: the writes it would have made), by logical knob.",
            "knob",
        )
        errors = counter("lahar_qos_cgroup_write_errors", "Cgroup reads or writes the kernel refused, by knob.", "knob")
        for knob in sorted({*KNOBS, *qos.writes, *qos.write_errors}):
            writes.add(qos.writes.get(knob, 0), knob)
            errors.add(qos.write_errors.get(knob, 0), knob)
        counter(
            "lahar_qos_cgroup_writes_refused", "Writes refused because the path was outside the pod hierarchy."
        ).add(qos.refused)
        counter(
            "lahar_qos_be_cpu_cap_changes",
            "Times the CPU interference controller wrote a new best-effort CPU cap: a steady climb is flapping.",
        ).add(qos.cap_changes)
        actions = counter(
            "lahar_qos_actions",
            "QoS decisions taken, by strategy and action (cut, grow, lift, baseline, cap, release, reclaim, update).",
            "strategy",
            "action",
        )
        known = {(strategy.name, action) for strategy in STRATEGIES for action in strategy.actions}
        for strategy, action in sorted(known | set(qos.actions)):
            actions.add(qos.actions.get((strategy, action), 0), strategy, action)
        evictions = counter("lahar_evictions", "Best-effort pods evicted by the agent, by reason.", "reason")
        refusals = counter("lahar_eviction_refusals", "Evictions a PodDisruptionBudget refused, by reason.", "reason")
        for reason in sorted({*EVICTION_REASONS.values(), *qos.evictions, *qos.eviction_refusals}):
            evictions.add(qos.evictions.get(reason, 0), reason)
            refusals.add(qos.eviction_refusals.get(reason, 0), reason)


def health_of(
    last_report_at: Callable[[], float | None], interval: float, qos: Callable[[], QosSnapshot] | None = None
) -> Health:
    """Healthy while collections keep coming: the last one at most three intervals old, and while
    QoS ticks do not keep failing (a QoS engine that raises tick after tick protects nobody: a
    restart re-reads pods and cgroups). QoS being unable to act for want of cgroup rights does not
    make the agent unhealthy (restarting would not help); it is said."""

    def healthy() -> tuple[bool, str]:
        last = last_report_at()
        if last is None:
            return False, "no collection yet"
        age = time.time() - last
        if age > max(3 * interval, 5.0):
            return False, f"last collection {age:.1f}s ago"
        if qos is not None:
            snapshot = qos()
            said = f"qos {snapshot.status}" + (f": {snapshot.reason}" if snapshot.reason else "")
            if snapshot.failures >= QOS_FAILURES_UNHEALTHY:
                return False, said
            return True, f"ok; {said}"
        return True, "ok"

    return healthy
