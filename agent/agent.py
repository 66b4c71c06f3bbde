"""The agent's loop: every interval, run the collectors, assemble a NodeReport, publish it to
`/metrics` and to the scheduler's report stream. A failing collector is recorded in the report's
health and the rest carry on; an unreachable API or scheduler never stops the loop."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import lahar
from lahar.agent.collectors.cpu import CpuCollector
from lahar.agent.collectors.gpu import GpuCollector
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.latency_histogram import LatencyHistograms
from lahar.agent.collectors.memory import MemoryCollector
from lahar.agent.collectors.npu import NpuCollector
from lahar.agent.collectors.numa import NumaCollector
from lahar.agent.collectors.pods import PodCollector
from lahar.agent.collectors.pressure import PressureCollector
from lahar.agent.usage_totals import ClassTotals
from lahar.rpc.report import Accelerators, AgentHealth, CpuUsage, MemoryUsage, NodeReport

if TYPE_CHECKING:
    from lahar.agent.qos.config import QosConfig
    from lahar.agent.qos.engine import QosEngine, QosSnapshot
    from lahar.client.api import KubeApi

log = logging.getLogger("lahar.agent")
T = TypeVar("T")
QOS_HEALTH_KEY = "qos"  # health.errors entry while QoS cannot act (no cgroup rights, a failed tick)
QOS_CONFIG_HEALTH_KEY = "qos-config"  # while the config file on disk is refused
# What a report's health can name as failing (lahar_agent_collector_failing{collector}, 0 when not).
COLLECTORS = (
    "cpu",
    "pods-source",
    "memory",
    "numa",
    "pressure",
    "pods",
    "gpu",
    "npu",
    QOS_HEALTH_KEY,
    QOS_CONFIG_HEALTH_KEY,
)


@dataclass(frozen=True)
class AgentSettings:
    node: str
    interval: float = 1.0
    root: Path = Path("/")
    cgroup_root: Path | None = None
    kubepods: str = "kubepods"  # the kubelet's cgroup parent (or the embedded runtime's)
    nvml_library: str | None = None
    dcmi_library: str = "libdcmi.so"
    npu_smi: str = "npu-smi"
    qos: QosConfig | None = None  # the QoS engine's settings; None (and no qos_config_path): QoS off
    qos_config_path: Path | None = None  # a YAML file, reloaded when it changes; wins over `qos`
    dry_run: bool = False  # QoS logs the cgroup writes and evictions it would make, and makes none

    @property
    def qos_enabled(self) -> bool:
        return self.qos is not None or self.qos_config_path is not None


class Agent:
    def __init__(
        self, settings: AgentSettings, pods: Callable[[], list[dict[str, Any]]] = list, api: KubeApi | None = None
    ) -> None:
        """`pods` returns the Pod objects bound to this node (an informer's cache; none standalone);
        `api`, when there is one, lets QoS evict pods and read this node's labels."""
        self.settings = settings
        self.pods = pods
        host = Host(settings.root, settings.cgroup_root)
        host.check()  # a /proc or /sys that is a symlink out of the root: refused (OutsideRootError)
        self.qos = qos_engine(settings, host, api) if settings.qos_enabled else None
        self.cpu = CpuCollector(host)
        self.memory = MemoryCollector(host)
        self.numa = NumaCollector(host)
        self.pressure = PressureCollector(host)
        self.pod_usage = PodCollector(host, kubepods=settings.kubepods)
        self.gpu = GpuCollector(host, library_path=settings.nvml_library)
        self.npu = NpuCollector(host, library_path=settings.dcmi_library, npu_smi=settings.npu_smi)
        self.sequence = 0
        self.latest: NodeReport | None = None
        self.totals = ClassTotals()  # per-class CPU counters, for /metrics
        self.latency = LatencyHistograms()  # online pods' own p99, from the histograms they name
        self.listeners: list[Callable[[NodeReport], None]] = []
        self._stop = threading.Event()

    def collect(self) -> NodeReport:
        """One full report; each collector's failure is caught and named in the report's health."""
        started = time.perf_counter()
        now = time.time()
        errors: dict[str, str] = {}

        def guarded(name: str, run: Callable[[], T], fallback: T) -> T:
            try:
                return run()
            except Exception as exc:  # one broken collector must not take the others down
                log.warning("collector %s failed: %s", name, exc)
                errors[name] = f"{type(exc).__name__}: {exc}"
                return fallback

        cpu = guarded("cpu", self.cpu.collect, CpuUsage(0, 0.0, 0.0))
        pods: list[dict[str, Any]] = guarded("pods-source", self.pods, [])
        self.latency.watch(pods)
        pods_by_uid = {
            meta.get("uid", ""): (meta.get("namespace", ""), meta.get("name", ""))
            for meta in (p.get("metadata") or {} for p in pods)
        }
        self.sequence += 1
        report = NodeReport(
            node=self.settings.node,
            sequence=self.sequence,
            timestamp=now,
            cpu=cpu,
            memory=guarded("memory", self.memory.collect, MemoryUsage(0, 0, 0, 0)),
            numa=guarded("numa", lambda: self.numa.collect(cpu.per_core_ratio), []),
            pressure=guarded("pressure", self.pressure.collect, []),
            pods=guarded("pods", lambda: self.pod_usage.collect(pods, now), []),
            gpu=guarded("gpu", lambda: self.gpu.collect(pods_by_uid), Accelerators(False, "collector failed")),
            npu=guarded("npu", self.npu.collect, Accelerators(False, "collector failed")),
        )
        snapshot = self._enforce(self.qos, report, pods, errors) if self.qos is not None else None
        self.totals.update(report, snapshot)
        report.health = AgentHealth(lahar.__version__, time.perf_counter() - started, errors)
        self.latest = report
        for listener in self.listeners:
            try:
                listener(report)
            except Exception:  # a consumer's bug must not stop collection
                log.exception("report listener failed")
        return report

    @staticmethod
    def _enforce(qos: QosEngine, report: NodeReport, pods: list[dict[str, Any]], errors: dict[str, str]) -> QosSnapshot:
        """QoS on the fresh report (it fills `report.reclaimable`); a failure or missing cgroup
        rights are named in the report's health, and collection goes on. The engine's snapshot after."""
        try:
            qos.step(report, pods, time.monotonic())
        except Exception as exc:  # a QoS bug must not stop the reports
            log.exception("QoS tick failed")
            errors[QOS_HEALTH_KEY] = f"{type(exc).__name__}: {exc}"
        snapshot = qos.snapshot()
        if not snapshot.available:
            errors[QOS_HEALTH_KEY] = f"unavailable: {snapshot.reason}"
        if snapshot.config_error:
            errors[QOS_CONFIG_HEALTH_KEY] = f"refused, the last good config stays: {snapshot.config_error}"
        return snapshot

    def run(self) -> None:
        """Collect every interval until stop(); a slow cycle is followed at once by the next."""
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.collect()
            next_at += self.settings.interval
            delay = next_at - time.monotonic()
            if delay < 0:
                next_at = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Stop, and leave the node safe: QoS relaxes every BE limit it set."""
        self.stop()
        self.latency.stop()
        if self.qos is not None:
            try:
                self.qos.close()
            except Exception:  # still close the rest
                log.exception("relaxing QoS on shutdown failed")
        self.gpu.close()


def qos_engine(settings: AgentSettings, host: Host, api: KubeApi | None) -> QosEngine:
    """The QoS engine for these settings: the config file (or the given config); with an API, this
    node's labels for its overrides, an evictor and the Node's batch resources to write."""
    from lahar.agent.qos.config import NodeLabels, QosConfig, QosConfigFile
    from lahar.agent.qos.engine import QosEngine
    from lahar.agent.qos.eviction import Evictor
    from lahar.agent.qos.node_allocatable import patch_batch_allocatable

    config: QosConfig | QosConfigFile
    if settings.qos_config_path is not None:
        config = QosConfigFile(settings.qos_config_path)  # a bad file stops the start: no last good one
    else:
        config = settings.qos or QosConfig()
    if api is None:
        return QosEngine(host, settings.kubepods, config, dry_run=settings.dry_run)
    return QosEngine(
        host,
        settings.kubepods,
        config,
        node_labels=NodeLabels(api, settings.node),
        dry_run=settings.dry_run,
        evictor=Evictor(api, settings.node),
        patch_allocatable=functools.partial(patch_batch_allocatable, api, settings.node),
    )
