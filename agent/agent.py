"""The agent's loop: every interval, run the collectors, assemble a NodeReport, publish it to
`/metrics` and to the scheduler's report stream. A failing collector is recorded in the report's
health and the rest carry on; an unreachable API or scheduler never stops the loop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import lahar
from lahar.agent.collectors.cpu import CpuCollector
from lahar.agent.collectors.gpu import GpuCollector
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.memory import MemoryCollector
from lahar.agent.collectors.npu import NpuCollector
from lahar.agent.collectors.numa import NumaCollector
from lahar.agent.collectors.pods import PodCollector
from lahar.agent.collectors.pressure import PressureCollector
from lahar.agent.report import Accelerators, AgentHealth, CpuUsage, MemoryUsage, NodeReport

log = logging.getLogger("lahar.agent")
T = TypeVar("T")


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


class Agent:
    def __init__(self, settings: AgentSettings, pods: Callable[[], list[dict[str, Any]]] = list) -> None:
        """`pods` returns the Pod objects bound to this node (an informer's cache; none standalone)."""
        self.settings = settings
        self.pods = pods
        host = Host(settings.root, settings.cgroup_root)
        self.cpu = CpuCollector(host)
        self.memory = MemoryCollector(host)
        self.numa = NumaCollector(host)
        self.pressure = PressureCollector(host)
        self.pod_usage = PodCollector(host, kubepods=settings.kubepods)
        self.gpu = GpuCollector(host, library_path=settings.nvml_library)
        self.npu = NpuCollector(host, library_path=settings.dcmi_library, npu_smi=settings.npu_smi)
        self.sequence = 0
        self.latest: NodeReport | None = None
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
        pods = guarded("pods-source", self.pods, [])
        pods_by_uid = {meta.get("uid", ""): (meta.get("namespace", ""), meta.get("name", ""))
                       for meta in (p.get("metadata") or {} for p in pods)}
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
        report.health = AgentHealth(lahar.__version__, time.perf_counter() - started, errors)
        self.latest = report
        for listener in self.listeners:
            try:
                listener(report)
            except Exception:  # a consumer's bug must not stop collection
                log.exception("report listener failed")
        return report

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
        self.stop()
        self.gpu.close()
