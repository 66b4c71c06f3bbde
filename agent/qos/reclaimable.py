"""Reclaimable capacity: what best-effort pods may borrow on this node (DESIGN.md, "Agent").

Per resource, `capacity × threshold − max(online usage over a window) − reserve`, floored at 0;
CPU in millicores, memory in bytes. Online usage is the node's usage less what BE pods use, so it
covers LC, LS and SYSTEM pods and everything outside pods (the kernel, kubelet, the runtime). A pod
measured in the report but unknown to the API counts as online: reclaimable capacity errs low.
The peak over a window rather than the last sample, so one quiet second does not invite batch
work onto a node whose online load comes back the next. The result goes into every NodeReport
(and so over gRPC to the scheduler) and, optionally, into the Node's `status.allocatable` as
`kubernetes.io/batch-cpu` / `batch-memory` (node_allocatable.py)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lahar.agent.qos.eviction import CPU, MEMORY, QUANTITY_UNIT, check_at_least, check_ratio, config_from_mapping
from lahar.rpc.report import NodeReport
from lahar.api.qos import QoSClass


@dataclass(frozen=True)
class ReclaimableConfig:
    cpu_threshold: float = 0.65  # share of the node's CPU that online plus BE may use together
    memory_threshold: float = 0.65
    window_seconds: float = 300.0  # online usage is the peak over this window (Koordinator's 300 s)
    # A number is in the unit the key names; a string is a Kubernetes quantity ("500m", "1Gi").
    cpu_reserve_millicores: int = field(default=0, metadata={QUANTITY_UNIT: "milli"})
    memory_reserve_bytes: int = field(default=0, metadata={QUANTITY_UNIT: "bytes"})
    patch_node_allocatable: bool = False  # also write kubernetes.io/batch-* into the Node's status

    def __post_init__(self) -> None:
        check_ratio("cpu_threshold", self.cpu_threshold, low_open=False)
        check_ratio("memory_threshold", self.memory_threshold, low_open=False)
        check_at_least("window_seconds", self.window_seconds, 0)
        check_at_least("cpu_reserve_millicores", self.cpu_reserve_millicores, 0)
        check_at_least("memory_reserve_bytes", self.memory_reserve_bytes, 0)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ReclaimableConfig:
        return config_from_mapping(cls, data)


def capacity(report: NodeReport) -> dict[str, int]:
    return {CPU: report.cpu.cores * 1000, MEMORY: report.memory.total_bytes}


def online_usage(report: NodeReport, pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Node usage less BE pods' usage (millicores, bytes), floored at 0. BE is decided by the API
    object; a pod the API does not know stays in the online share."""
    # The report already classed each pod from its API object; re-deriving classes every tick cost
    # a third of the tick. Only pods the API knows may count as BE.
    known = {pod_uid(p) for p in pods}
    best_effort = [usage for usage in report.pods if usage.qos_class == QoSClass.BE and usage.uid in known]
    be_cpu = sum(usage.cpu_usage_cores for usage in best_effort)
    be_memory = sum(usage.memory_working_set_bytes for usage in best_effort)
    return {
        CPU: max(0, round((report.cpu.usage_cores - be_cpu) * 1000)),
        MEMORY: max(0, report.memory.used_bytes - be_memory),
    }


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def reclaimable(
    node_capacity: Mapping[str, int], online_peak: Mapping[str, int], config: ReclaimableConfig
) -> dict[str, int]:
    """`capacity × threshold − online peak − reserve` per resource, floored at 0."""
    thresholds = {CPU: config.cpu_threshold, MEMORY: config.memory_threshold}
    reserves = {CPU: config.cpu_reserve_millicores, MEMORY: config.memory_reserve_bytes}
    return {
        resource: max(
            0, int(node_capacity[resource] * thresholds[resource]) - online_peak[resource] - reserves[resource]
        )
        for resource in (CPU, MEMORY)
    }


class WindowMax:
    """The largest value added in a sliding time window, O(1) amortised: a deque of candidates
    whose values decrease, each dropped once a later sample is as large or it leaves the window."""

    def __init__(self) -> None:
        self._candidates: deque[tuple[float, int]] = deque()

    def add(self, at: float, value: int) -> None:
        while self._candidates and self._candidates[-1][1] <= value:
            self._candidates.pop()
        self._candidates.append((at, value))

    def peak(self, since: float) -> int | None:
        """The largest value added at or after `since`; None when there is none."""
        while self._candidates and self._candidates[0][0] < since:
            self._candidates.popleft()
        return self._candidates[0][1] if self._candidates else None


class ReclaimableTracker:
    """Feeds each report's online usage into a window and answers the reclaimable capacity."""

    def __init__(self, config: ReclaimableConfig) -> None:
        self.config = config
        self._peaks = {CPU: WindowMax(), MEMORY: WindowMax()}

    def reconfigure(self, config: ReclaimableConfig) -> None:
        """A shorter window applies at once; a longer one fills up with the samples to come."""
        self.config = config

    def update(self, report: NodeReport, pods: Sequence[Mapping[str, Any]], now: float) -> dict[str, int]:
        """Reclaimable {"cpu": millicores, "memory": bytes} after this report (taken at `now`,
        any monotonic clock in seconds)."""
        online = online_usage(report, pods)
        since = now - self.config.window_seconds
        peaks = {}
        for resource, window in self._peaks.items():
            window.add(now, online[resource])
            peaks[resource] = window.peak(since) or 0
        return reclaimable(capacity(report), peaks, self.config)
