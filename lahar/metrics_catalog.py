"""Every metric family Lahar exports, read from the code's own collectors (DESIGN.md, "Metrics").

Each program exports on its own registry, and most of the agent's families exist only under some
conditions (a GPU or NPU present, QoS running, an eviction made, a collector failing). So the
catalogue builds each program's real registry (`ReportCollector`, `SchedulerMetrics`,
`ControllerMetrics`) over sample data in which every condition holds: a NodeReport with every
list filled (two NUMA nodes, PSI for cpu/memory/io, pods of every QoS class, a GPU with a process,
an NPU), a QoS snapshot whose figures come from running every real QoS strategy on a sample node,
evictions and refusals of every reason, a scheduler with queues, agent reports and a cycle behind
it, and a controller with jobs. It then lists what the registries expose: name, type, help and
label names of every family, and the series names Prometheus stores for it.

`docs/metrics.md` is `render_markdown()` (scripts/gen-metrics-doc.py writes it; a test fails when
it is stale), and the Grafana dashboard's queries are checked against `series_names()`."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

COMPONENTS = ("agent", "scheduler", "controller")
SAMPLE_NODE = "node-a"
GiB, MiB = 1 << 30, 1 << 20

# The label of a histogram's buckets, not one of the family's own.
BUCKET_LABEL = "le"
# What Prometheus stores for each family type, besides the family's own name for gauges.
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count"),
}
# Base units by name suffix (DESIGN.md: seconds, bytes, cores, ratios 0-1), longest first.
UNITS = (
    ("_timestamp_seconds", "unix seconds"),
    ("_milliseconds", "milliseconds"),
    ("_milli_cpu", "millicores"),
    ("_bytes_per_second", "bytes/s"),
    ("_iops", "operations/s"),
    ("_seconds", "seconds"),
    ("_bytes", "bytes"),
    ("_cores", "cores"),
    ("_cpus", "CPUs"),
    ("_ratio", "ratio 0-1"),
    ("_watts", "watts"),
    ("_celsius", "degrees Celsius"),
)


# Families exported under another project's name, so dashboards and alerts built on it work on
# Lahar too: name prefix -> the project.
COMPATIBLE = {
    "volcano_": "Volcano scheduler",
    "DCGM_FI_": "NVIDIA DCGM exporter",
    "container_": "cAdvisor (kubelet)",
    "node_": "node_exporter",
}
# Units of families named by another project's conventions (not base units: its own).
UNIT_OVERRIDES = {
    "DCGM_FI_DEV_GPU_UTIL": "percent",
    "DCGM_FI_DEV_FB_USED": "MiB",
    "DCGM_FI_DEV_FB_FREE": "MiB",
    "DCGM_FI_DEV_POWER_USAGE": "watts",
    "DCGM_FI_DEV_GPU_TEMP": "degrees Celsius",
    "volcano_e2e_job_scheduling_duration": "milliseconds",
    "volcano_e2e_job_scheduling_start_time": "unix seconds",
    "volcano_e2e_job_scheduling_last_time": "unix seconds",
}
# Lahar's own families -> the family another project exports for the same quantity (in its units).
MATCHES = {
    "lahar_node_memory_total_bytes": "node_exporter `node_memory_MemTotal_bytes`",
    "lahar_node_memory_available_bytes": "node_exporter `node_memory_MemAvailable_bytes`",
    "lahar_node_pressure_stalled_seconds": (
        "node_exporter `node_pressure_{cpu,memory,io}_waiting_seconds_total` (some), `..._stalled_...` (full)"
    ),
    "lahar_node_cpu_usage_cores": 'node_exporter `sum(rate(node_cpu_seconds_total{mode!="idle"}[1m]))`',
    "lahar_pod_cpu_usage_seconds": 'cAdvisor `container_cpu_usage_seconds_total{container=""}`',
    "lahar_pod_cpu_usage_cores": 'cAdvisor `rate(container_cpu_usage_seconds_total{container=""}[1m])`',
    "lahar_pod_memory_working_set_bytes": 'cAdvisor `container_memory_working_set_bytes{container=""}`',
    "lahar_pod_cpu_throttled_periods": 'cAdvisor `container_cpu_cfs_throttled_periods_total{container=""}`',
    "lahar_pod_cpu_throttled_seconds": 'cAdvisor `container_cpu_cfs_throttled_seconds_total{container=""}`',
    "lahar_container_cpu_usage_seconds": "cAdvisor `container_cpu_usage_seconds_total`",
    "lahar_container_cpu_usage_cores": "cAdvisor `rate(container_cpu_usage_seconds_total[1m])`",
    "lahar_container_memory_working_set_bytes": "cAdvisor `container_memory_working_set_bytes`",
    "lahar_gpu_utilization_ratio": "DCGM `DCGM_FI_DEV_GPU_UTIL` (percent)",
    "lahar_gpu_memory_used_bytes": "DCGM `DCGM_FI_DEV_FB_USED` (MiB)",
    "lahar_gpu_memory_total_bytes": "DCGM `DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE` (MiB)",
    "lahar_gpu_power_watts": "DCGM `DCGM_FI_DEV_POWER_USAGE`",
    "lahar_gpu_temperature_celsius": "DCGM `DCGM_FI_DEV_GPU_TEMP`",
    "lahar_scheduler_e2e_scheduling_duration_seconds": "Volcano `volcano_e2e_scheduling_latency_milliseconds`",
    "lahar_scheduler_action_duration_seconds": "Volcano `volcano_action_scheduling_latency_milliseconds`",
    "lahar_scheduler_pods_scheduled": 'Volcano `volcano_schedule_attempts_total{result="scheduled"}`',
    "lahar_scheduler_unschedulable_gangs": "Volcano `volcano_unschedule_job_count`",
    "lahar_scheduler_evictions": "Volcano `volcano_eviction_transactions_total` (per transaction, not per pod)",
    "lahar_scheduler_queue_allocated": "Volcano `volcano_queue_allocated_{milli_cpu,memory_bytes,scalar_resources}`",
    "lahar_scheduler_queue_deserved": "Volcano `volcano_queue_deserved_{milli_cpu,memory_bytes,scalar_resources}`",
    "lahar_scheduler_queue_share": "Volcano `volcano_queue_share`",
}


def matches(family: str) -> str:
    """The name another project exports this family under, or says it is that project's name."""
    for prefix, project in COMPATIBLE.items():
        if family.startswith(prefix):
            return f"{project} (this name)"
    return MATCHES.get(family, "")


@dataclass(frozen=True)
class MetricInfo:
    """One metric family as a program exports it."""

    component: str
    family: str  # the name the code registers (a counter's without `_total`)
    type: str  # gauge, counter, histogram, gaugehistogram, ...
    help: str
    labels: tuple[str, ...]  # every label its samples carry (a histogram's `le` left out)
    series: tuple[str, ...]  # the names Prometheus stores: counter `_total`, histogram `_bucket`, ...

    @property
    def name(self) -> str:
        """The name to query: a counter's `_total` series, any other family's own name."""
        return f"{self.family}_total" if self.type == "counter" else self.family

    @property
    def unit(self) -> str:
        if self.family in UNIT_OVERRIDES:
            return UNIT_OVERRIDES[self.family]
        base = self.family
        for suffix, unit in UNITS:
            if base.endswith(suffix):
                return unit
        return ""


# --- sample data: the agent ---------------------------------------------------------------------


def sample_report(node: str = SAMPLE_NODE, timestamp: float = 1_700_000_000.0) -> Any:
    """A NodeReport in which every list and mapping is filled: every agent family has samples."""
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

    pods = [
        PodUsage(
            "web",
            "frontend-0",
            "uid-lc",
            "LC",
            "Guaranteed",
            "kubepods/poduid-lc",
            1.0,
            2 * GiB,
            0,
            0.0,
            1 * MiB,
            2 * MiB,
            [ContainerUsage("nginx", 1.0, 2 * GiB, cpu_usage_seconds_total=3500.0)],
            cpu_usage_seconds_total=3600.0,
        ),
        PodUsage(
            "web",
            "api-0",
            "uid-ls",
            "LS",
            "Burstable",
            "kubepods/burstable/poduid-ls",
            1.5,
            3 * GiB,
            12,
            0.4,
            4 * MiB,
            8 * MiB,
            [ContainerUsage("api", 1.5, 3 * GiB, 12, 0.4, 5000.0)],
            cpu_usage_seconds_total=5400.0,
        ),
        PodUsage(
            "batch",
            "train-0",
            "uid-be",
            "BE",
            "BestEffort",
            "kubepods/besteffort/poduid-be",
            2.5,
            6 * GiB,
            300,
            12.5,
            64 * MiB,
            128 * MiB,
            [ContainerUsage("trainer", 2.5, 6 * GiB, 300, 12.5, 9000.0)],
            cpu_usage_seconds_total=9000.0,
        ),
        PodUsage(
            "kube-system",
            "node-exporter-x",
            "uid-sys",
            "SYSTEM",
            "Burstable",
            "kubepods/burstable/poduid-sys",
            0.1,
            64 * MiB,
            containers=[ContainerUsage("exporter", 0.1, 64 * MiB, cpu_usage_seconds_total=300.0)],
            cpu_usage_seconds_total=360.0,
        ),
    ]
    return NodeReport(
        node=node,
        sequence=42,
        timestamp=timestamp,
        cpu=CpuUsage(8, 5.6, 0.7, [0.9, 0.8, 0.7, 0.6, 0.7, 0.6, 0.7, 0.6]),
        memory=MemoryUsage(32 * GiB, 14 * GiB, 18 * GiB, 4 * GiB),
        numa=[NumaNode(0, [0, 1, 2, 3], 16 * GiB, 8 * GiB, 3.0), NumaNode(1, [4, 5, 6, 7], 16 * GiB, 6 * GiB, 2.6)],
        pressure=[
            Pressure("cpu", 12.0, 8.0, 5.0, 120.0),
            Pressure("memory", 1.0, 0.5, 0.2, 3.0, 0.5, 0.2, 0.1, 1.0),
            Pressure("io", 2.0, 1.0, 0.5, 9.0, 1.0, 0.5, 0.2, 4.0),
        ],
        pods=pods,
        gpu=Accelerators(
            True,
            source="nvml",
            gpus=[
                GpuDevice(
                    0,
                    "GPU-8d3f",
                    "NVIDIA H100 80GB HBM3",
                    0.65,
                    40 * GiB,
                    80 * GiB,
                    310.0,
                    61.0,
                    [GpuProcess(4242, 38 * GiB, "batch", "train-0")],
                )
            ],
        ),
        npu=Accelerators(
            True, source="dcmi", npus=[NpuDevice(0, 0, "Ascend910B", 0.4, 20 * GiB, 64 * GiB, 180.0, 52.0, "OK")]
        ),
        reclaimable={"cpu": 1500, "memory": 6 * GiB},
        health=AgentHealth("0.0.0", 0.004, {"npu": "npu-smi timed out"}),
    )


def sample_agent_counters() -> dict[str, float]:
    """The report stream's counters, as `lahar agent` hands them to the collector."""
    return {"reports_sent": 120.0, "stream_reconnects": 1.0, "stream_connected": 1.0}


SAMPLE_QOS_CONFIG: Mapping[str, Any] = {
    "io": {
        "be_weight": 50,
        "devices": [{"device": "vda", "read_bps": "100Mi", "write_bps": "50Mi", "read_iops": 2000, "write_iops": 1000}],
    },
}


def _sample_node_state(version: Any) -> Any:
    """A node past its memory threshold, with every knob and the configured disk."""
    from lahar.agent.cgroups.layout import CgroupDriver, KubeLayout
    from lahar.agent.qos.knobs import KNOBS
    from lahar.agent.qos.model import NodeState

    return NodeState(
        version,
        KubeLayout(CgroupDriver.CGROUPFS),
        frozenset(range(8)),
        5.6,
        32 * GiB,
        30 * GiB,
        frozenset(KNOBS),
        {"vda": "254:0"},
    )


def _sample_qos_pods(node: Any) -> list[Any]:
    """A BestEffort pod, a Burstable pod labelled BE, an LS pod with a limit, an LC pod on its own core."""
    from lahar.agent.qos.model import QosContainer, QosPod
    from lahar.api.qos import BEST_EFFORT, BURSTABLE, GUARANTEED, QoSClass

    pods = []
    for uid, qos, kube_qos, usage, working_set, extra in (
        ("uid-be", QoSClass.BE, BEST_EFFORT, 2.5, 6 * GiB, {}),
        (
            "uid-beb",
            QoSClass.BE,
            BURSTABLE,
            0.3,
            1 * GiB,
            {"cpu_request_millicores": 500, "cpu_limit_millicores": 1000, "memory_limit_bytes": 2 * GiB},
        ),
        (
            "uid-ls",
            QoSClass.LS,
            BURSTABLE,
            1.5,
            3 * GiB,
            {"cpu_limit_millicores": 2000, "memory_request_bytes": 2 * GiB},
        ),
        (
            "uid-lc",
            QoSClass.LC,
            GUARANTEED,
            1.0,
            2 * GiB,
            {"cpu_request_millicores": 1000, "cpu_limit_millicores": 1000, "memory_request_bytes": 2 * GiB},
        ),
    ):
        path = node.layout.pod_dir(uid, kube_qos)
        pinned = frozenset({7}) if qos is QoSClass.LC else frozenset()
        container = QosContainer(f"c-{uid}", "main", f"{path}/c-{uid}", extra.get("cpu_limit_millicores"), pinned)
        pods.append(
            # extra: QosPod's optional figures by keyword (ints here; mypy reads them as the next positional)
            QosPod(
                uid,
                "default",
                uid,
                qos,
                kube_qos,
                path,
                usage,
                working_set,
                **cast("dict[str, Any]", extra),
                containers=(container,),
            )
        )
    return pods


def sample_qos_snapshot() -> Any:
    """A QosSnapshot whose figures, actions and IO limits come from running every QoS strategy
    (on cgroup v1 and v2) on a sample node, and whose counters have every key they can have."""
    from lahar.agent.cgroups.layout import CgroupVersion
    from lahar.agent.qos.config import QosConfig
    from lahar.agent.qos.engine import ACTIVE, OnlineWait, QosSnapshot
    from lahar.agent.qos.eviction import REASONS
    from lahar.agent.qos.knobs import KNOBS
    from lahar.agent.qos.strategies import STRATEGIES, io

    config = QosConfig.from_mapping(SAMPLE_QOS_CONFIG)
    figures: dict[str, float] = {}
    actions: dict[tuple[str, str], int] = {}
    io_limits: dict[str, Any] = {}
    for version in (CgroupVersion.V1, CgroupVersion.V2):
        node = _sample_node_state(version)
        pods = _sample_qos_pods(node)
        for strategy in STRATEGIES:
            plan = strategy.plan(node, pods, config.section(strategy.name), None)
            figures.update(plan.figures)
            for action in plan.actions:
                actions[(strategy.name, action)] = actions.get((strategy.name, action), 0) + 1
            if strategy.name == io.NAME:
                io_limits.update(plan.memo.get("limits", {}))
    reasons = sorted(REASONS.values())
    return QosSnapshot(
        available=True,
        status=ACTIVE,
        reason="",
        dry_run=False,
        config_error=None,
        config_reloads={"ok": 2, "refused": 1},
        enabled={strategy.name: True for strategy in STRATEGIES},
        figures=figures,
        io_limits=tuple(
            (device, kind, limit)
            for device, limits in sorted(io_limits.items())
            for kind, limit in limits._asdict().items()
        ),
        writes=dict.fromkeys(KNOBS, 3),
        write_errors={"cpu.max": 1},
        refused=1,
        actions=actions,
        be_throttled_periods=300,
        be_throttled_seconds=12.5,
        evictions=dict.fromkeys(reasons, 1),
        eviction_refusals=dict.fromkeys(reasons, 1),
        cap_changes=3,
        be_groups_read=True,
        online_waits=(
            OnlineWait("uid-lc", "web", "frontend-0", "LC", "psi", 4.5),
            OnlineWait("uid-ls", "web", "api-0", "LS", "schedstat", 30.0),
        ),
    )


def agent_registry() -> CollectorRegistry:
    from lahar.agent.collectors.latency_histogram import PodLatency
    from lahar.agent.exporter import ReportCollector
    from lahar.agent.usage_totals import totals_of

    report, snapshot = sample_report(), sample_qos_snapshot()
    totals = totals_of([(report, snapshot)])
    registry = CollectorRegistry(auto_describe=False)
    latencies = [PodLatency("web", "api-0", "http_request_duration_seconds", 0.012, 0.02)]
    registry.register(
        ReportCollector(
            lambda: report,
            sample_agent_counters,
            qos=lambda: snapshot,
            totals=lambda: totals,
            latency=lambda: latencies,
        )
    )
    return registry


# --- sample data: the scheduler and the controller ----------------------------------------------


def scheduler_registry() -> CollectorRegistry:
    """The scheduler's registry after a cycle: queues with shares, agent reports fresh, stale and
    missing, one of everything counted."""
    from lahar.scheduler.metrics import EVICTION_REASONS, CycleFigures, QueueFigures, SchedulerMetrics
    from lahar.scheduler.node_reports import NodeReportStore

    now = [1000.0]
    store = NodeReportStore(clock=lambda: now[0])
    store.submit(sample_report("node-a"), received_at=999.0)
    store.submit(sample_report("node-b"), received_at=900.0)
    store.refuse("invalid")
    metrics = SchedulerMetrics(store, lambda: ["node-a", "node-b", "node-c"], staleness=30.0)
    metrics.observe_cycle(
        0.012,
        {"enqueue": 0.001, "allocate": 0.008, "backfill": 0.001, "preempt": 0.001, "reclaim": 0.001},
        CycleFigures(
            pending_pods=7,
            unschedulable_gangs=1,
            queues={
                "default": QueueFigures(
                    {"cpu": 4000, "memory": 8 * GiB, "nvidia.com/gpu": 1},
                    {"cpu": 6000, "memory": 12 * GiB, "nvidia.com/gpu": 2},
                    0.67,
                ),
                "research": QueueFigures({"cpu": 2000, "memory": 4 * GiB}, {"cpu": 2000, "memory": 4 * GiB}, 1.0),
            },
        ),
    )
    for counter in (
        metrics.pods_scheduled,
        metrics.bind_errors,
        metrics.gang_rollbacks,
        metrics.conf_reload_failures,
        metrics.cycle_failures,
    ):
        counter.inc()
    for reason in EVICTION_REASONS:
        metrics.evictions.labels(reason).inc()
    for result in ("ok", "failed"):
        metrics.outside_calls.labels("extender", "predicate", result).inc()
    metrics.volcano.observe_cycle(0.012, 0.002, {"allocate": 0.008}, {("gang", "OnSessionOpen"): 0.0002}, *_volcano())
    metrics.binds_done([], 1, [0.003])
    metrics.volcano.bound([2.5], [0.003])
    return metrics.registry


def _volcano() -> tuple[Any, set[tuple[str, str]]]:
    """A cycle's Volcano figures with every per-queue, per-job and per-namespace mapping filled."""
    from collections import Counter as Tally

    from lahar.scheduler.volcano_metrics import QUEUE_FIGURES, JobScheduled, VolcanoCycle

    amounts = {"cpu": 4000.0, "memory": float(8 * GiB), "nvidia.com/gpu": 1000.0}
    cycle = VolcanoCycle(
        queues={"default": dict.fromkeys(QUEUE_FIGURES, amounts)},
        queue_share={"default": 0.67},
        queue_weight={"default": 1.0},
        queue_overused={"default": 0.0},
        job_share={("batch", "train"): 0.25},
        namespace_share={"batch": 0.25},
        unschedulable_tasks={"train": 2},
        attempts=Tally({"scheduled": 3, "unschedulable": 2}),
        retried_jobs=("train",),
        eviction_transactions=Tally({"preempt": 1}),
        preemption_victims=1,
        scheduled_jobs=(JobScheduled("batch", "train", "default", 1_699_999_990.0, 1_700_000_000.0),),
        assumed_task_ages=(10.0,),
    )
    return cycle, {("batch", "train")}


def sample_jobs() -> list[dict[str, Any]]:
    from lahar.api.job import JobPhase

    return [
        {"metadata": {"namespace": "batch", "name": f"job-{index}"}, "status": {"state": {"phase": phase.value}}}
        for index, phase in enumerate(JobPhase)
    ]


def controller_registry() -> CollectorRegistry:
    from lahar.api.job import ACTIONS
    from lahar.controller.metrics import RECONCILE_KINDS, ControllerMetrics

    jobs = sample_jobs()
    metrics = ControllerMetrics(lambda: jobs)
    for kind in RECONCILE_KINDS:
        with metrics.reconciling(kind):
            pass
    for action in ACTIONS:
        metrics.action_taken(action)
    return metrics.registry


REGISTRIES: Mapping[str, Callable[[], CollectorRegistry | Collector]] = {
    "agent": agent_registry,
    "scheduler": scheduler_registry,
    "controller": controller_registry,
}


# --- the catalogue ------------------------------------------------------------------------------


def families(component: str, registry: CollectorRegistry | Collector) -> list[MetricInfo]:
    """Every family a registry yields, in its order, with the labels and series its samples show."""
    found: list[MetricInfo] = []
    for metric in registry.collect():
        labels: dict[str, None] = {}
        series: dict[str, None] = {}
        for sample in metric.samples:
            series[sample.name] = None
            for label in sample.labels:
                if not (label == BUCKET_LABEL and metric.type in ("histogram", "gaugehistogram")):
                    labels[label] = None
        found.append(
            MetricInfo(component, metric.name, metric.type, metric.documentation, tuple(labels), tuple(series))
        )
    return found


def catalog() -> dict[str, list[MetricInfo]]:
    """Component -> its metric families, from freshly built sample registries."""
    return {component: families(component, REGISTRIES[component]()) for component in COMPONENTS}


def all_families(entries: Mapping[str, list[MetricInfo]] | None = None) -> list[MetricInfo]:
    return [info for infos in (entries or catalog()).values() for info in infos]


def series_names(entries: Mapping[str, list[MetricInfo]] | None = None) -> dict[str, MetricInfo]:
    """Every series name Prometheus can hold for Lahar -> its family."""
    return {name: info for info in all_families(entries) for name in info.series}


# --- docs/metrics.md ----------------------------------------------------------------------------

TITLES = {
    "agent": (
        "Agent",
        "`lahar agent`, one per node; port 9316. Every series carries `node`. Pod series carry "
        "the workload pod's `namespace` and `pod`, so they join with kube-state-metrics (the "
        "agent's ServiceMonitor keeps them with `honorLabels`), and Lahar's QoS class as `lahar_qos` "
        "(LC, LS, BE, SYSTEM; not `qos_class`, which kube-state-metrics uses for Kubernetes' class). "
        "GPU and NPU families appear only on nodes whose NVML or DCMI can be read; `lahar_qos_*`, "
        "`lahar_eviction*` and `lahar_*_cpu_wait_*` only while QoS runs (not with `--no-qos`). Every "
        "counter exists from the first report, each label value it can have at 0, so `rate()` and "
        "`increase()` see the first event.",
    ),
    "scheduler": (
        "Scheduler",
        "`lahar scheduler`; port 9317. Queue figures are replaced whole every cycle: a deleted queue's "
        "series go away, a queue with no work keeps its series at 0.",
    ),
    "controller": ("Controller", "`lahar controller`; port 9318."),
}
HEADER = """# Metrics reference

<!-- Generated by scripts/gen-metrics-doc.py from the code's metric definitions
     (lahar/metrics_catalog.py); tests/observability/test_metrics_catalog.py fails when it is stale.
     Do not edit by hand. -->

Every Lahar program serves Prometheus metrics on `/metrics` from a registry of its own, prefix
`lahar_`, in base units (seconds, bytes, cores, ratios 0-1). A counter is listed by the name you
query (`..._total`); a histogram's series are `_bucket` (with `le`), `_sum` and `_count`; the
scheduler's report ages are a gauge histogram (`_bucket`, `_gsum`, `_gcount`). Counters and
histograms the code updates also expose `_created` timestamps.

The Grafana dashboard in `deploy/grafana/lahar-dashboard.json` is built on these metrics (a test
checks that every query uses a metric listed here); [qos-tuning.md](qos-tuning.md) explains how to
read the QoS ones while tuning the agent; [alerts.md](alerts.md) is the runbook of the alerts in
`deploy/monitoring/prometheus-rules.yaml`. [dashboard.png](dashboard.png) is the dashboard drawn
from a `lahar up --demo` run (`scripts/render-dashboard.py`; `tests/observability/test_dashboard_demo.py`
requires data from every panel on such a run).

## Other projects' names

So that dashboards and alerts built for other tools work unchanged, some families are exported
twice: under Lahar's name (base units) and under the other project's name, labels and units. The
**Matches** column says which: "(this name)" on the other project's family, its name on Lahar's.

- **Volcano** (`volcano_*`, the scheduler): every family Volcano's scheduler exports
  (pkg/scheduler/metrics), same names, labels, units (milliseconds, millicores) and bucket ranges,
  derived from each cycle's session (`scheduler/volcano_metrics.py` says how each is made where
  Lahar's model differs). Stages Lahar has: `volcano_task_scheduling_latency_milliseconds` for
  `Assumed` (placed in a cycle) and `Bound`, `volcano_scheduling_stage_duration_milliseconds` for
  `Bind` (Lahar's predicates and scores run over all nodes at once, not per task, so there is no
  per-task `Predicate` or `Scoring` time, nor `Watched` or `PreBound`). Not exported:
  `volcano_vgpu_device_*` (Volcano's vGPU device plugin; Lahar hands out whole GPUs) and
  `volcano_goroutines` (a Go runtime figure).
- **NVIDIA DCGM exporter** (`DCGM_FI_DEV_*`, the agent): utilization in percent, framebuffer
  memory in MiB, power in watts, temperature in °C, labels `gpu`, `UUID`, `device`, `modelName`,
  `Hostname`.
- **cAdvisor** (`container_*`, the agent): CPU time, working set and CFS throttling per container,
  `container=""` for the pod's own cgroup as the kubelet has it. In a cluster the kubelet exports
  the same names: tell them apart by `job`.
- **node_exporter** (`node_pressure_*`, `node_memory_*`, the agent): PSI totals and memory.
"""


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("|", "\\|")).strip()


def _type_cell(info: MetricInfo) -> str:
    if info.type in ("histogram", "gaugehistogram"):
        kind = "histogram" if info.type == "histogram" else "gauge histogram"
        return f"{kind} ({', '.join(f'`{s}`' for s in SERIES_SUFFIXES[info.type])})"
    return info.type


def render_markdown(entries: Mapping[str, list[MetricInfo]] | None = None) -> str:
    entries = entries or catalog()
    lines = [HEADER]
    for component in COMPONENTS:
        title, intro = TITLES[component]
        lines += [
            f"## {title}",
            "",
            intro,
            "",
            "| Metric | Type | Unit | Labels | Matches | Description |",
            "|---|---|---|---|---|---|",
        ]
        for info in entries[component]:
            labels = ", ".join(f"`{label}`" for label in info.labels) or "—"
            lines.append(
                f"| `{info.name}` | {_type_cell(info)} | {info.unit or '—'} | {labels} | "
                f"{_cell(matches(info.family)) or '—'} | {_cell(info.help)} |"
            )
        lines.append("")
    return "\n".join(lines)


def names_in(infos: Iterable[MetricInfo]) -> set[str]:
    return {info.family for info in infos} | {name for info in infos for name in info.series}
