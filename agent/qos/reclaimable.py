"""Reclaimable capacity: what best-effort pods may borrow on this node (docs/oversubscription.md).

CPU follows what online pods actually leave idle:

    cpu = (cores − decaying peak of online usage − margin − reserve) × (1 − interference)

- *Online usage* is the node's usage less what BE pods use, so it covers LC, LS and SYSTEM pods
  and everything outside pods (the kernel, kubelet, the runtime). A pod is BE by the class its
  report carries, also once the API has forgotten it (a BE pod in its termination grace period is
  still BE, not online).
- The *decaying peak* is the largest online usage seen, halved every `cpu_peak_half_life_seconds`
  (10 s): a burst lowers reclaimable at once and for about as long as it lasted plus a few
  half-lives, not for a fixed five minutes; a node's start-up burst is gone within a minute.
- The *margin* (`cpu_margin_ratio` of the cores, 5%) is headroom for online load to grow between
  two reports before the scheduler hears of it; BE pods placed into it are held back by CPU
  weight the moment online wants the CPU, so it can be small.
- *Interference* (0..1, from the CPU interference controller: how hard it holds BE back) shrinks
  what is lent while online pods measurably suffer, and lets it grow back as that clears.

Memory stays conservative — `capacity × memory_threshold − online peak over window_seconds −
reserve` — because memory lent cannot be taken back quickly: reclaiming it means evicting the pod
that holds it. CPU in millicores, memory in bytes. The result goes into every NodeReport (and so
over gRPC to the scheduler) and, optionally, into the Node's `status.allocatable` as
`kubernetes.io/batch-cpu` / `batch-memory` (node_allocatable.py)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lahar.agent.qos.eviction import CPU, MEMORY, QUANTITY_UNIT, check_at_least, check_ratio, config_from_mapping
from lahar.api.qos import QoSClass
from lahar.rpc.report import NodeReport


@dataclass(frozen=True)
class ReclaimableConfig:
    cpu_margin_ratio: float = 0.05  # share of the cores never lent: online growth between two reports
    cpu_peak_half_life_seconds: float = 10.0  # an online burst's peak fades by half this often
    memory_threshold: float = 0.65  # share of the node's memory online plus BE may use together
    window_seconds: float = 300.0  # memory's online peak is over this window (Koordinator's 300 s)
    # A number is in the unit the key names; a string is a Kubernetes quantity ("500m", "1Gi").
    cpu_reserve_millicores: int = field(default=0, metadata={QUANTITY_UNIT: "milli"})
    memory_reserve_bytes: int = field(default=0, metadata={QUANTITY_UNIT: "bytes"})
    patch_node_allocatable: bool = False  # also write kubernetes.io/batch-* into the Node's status

    def __post_init__(self) -> None:
        check_ratio("cpu_margin_ratio", self.cpu_margin_ratio, low_open=False)
        if self.cpu_margin_ratio > 0.5:
            raise ValueError(f"cpu_margin_ratio: must be <= 0.5 (half the node kept idle), got {self.cpu_margin_ratio}")
        check_at_least("cpu_peak_half_life_seconds", self.cpu_peak_half_life_seconds, 0.1)
        if self.cpu_peak_half_life_seconds > 3600:
            raise ValueError(f"cpu_peak_half_life_seconds: must be <= 3600, got {self.cpu_peak_half_life_seconds}")
        check_ratio("memory_threshold", self.memory_threshold, low_open=False)
        check_at_least("window_seconds", self.window_seconds, 0)
        check_at_least("cpu_reserve_millicores", self.cpu_reserve_millicores, 0)
        check_at_least("memory_reserve_bytes", self.memory_reserve_bytes, 0)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ReclaimableConfig:
        return config_from_mapping(cls, data)


def capacity(report: NodeReport) -> dict[str, int]:
    return {CPU: report.cpu.cores * 1000, MEMORY: report.memory.total_bytes}


def online_usage(report: NodeReport) -> dict[str, int]:
    """Node usage less BE pods' usage (millicores, bytes), floored at 0. The report classed each
    pod (from its API object, or from its cgroup directory once the API no longer has it)."""
    best_effort = [usage for usage in report.pods if usage.qos_class == QoSClass.BE]
    be_cpu = sum(usage.cpu_usage_cores for usage in best_effort)
    be_memory = sum(usage.memory_working_set_bytes for usage in best_effort)
    return {
        CPU: max(0, round((report.cpu.usage_cores - be_cpu) * 1000)),
        MEMORY: max(0, report.memory.used_bytes - be_memory),
    }


def reclaimable(
    node_capacity: Mapping[str, int],
    online_peak: Mapping[str, int],
    config: ReclaimableConfig,
    interference: float = 0.0,
) -> dict[str, int]:
    """CPU: capacity − peak − margin − reserve, shrunk by interference; memory: capacity ×
    threshold − peak − reserve. Floored at 0."""
    cores = node_capacity[CPU]
    idle_cpu = cores - online_peak[CPU] - round(cores * config.cpu_margin_ratio) - config.cpu_reserve_millicores
    memory = int(node_capacity[MEMORY] * config.memory_threshold) - online_peak[MEMORY] - config.memory_reserve_bytes
    return {CPU: max(0, round(max(idle_cpu, 0) * (1.0 - min(max(interference, 0.0), 1.0)))), MEMORY: max(0, memory)}


class DecayingPeak:
    """The largest value seen, halved every `half_life` seconds since it was seen."""

    def __init__(self) -> None:
        self._value = 0.0
        self._at: float | None = None

    def add(self, at: float, value: float, half_life: float) -> int:
        """Add a sample; the peak now."""
        if self._at is not None:
            self._value *= 0.5 ** (max(at - self._at, 0.0) / half_life)
        self._value, self._at = max(self._value, float(value)), at
        return round(self._value)


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
    """Feeds each report's online usage into the CPU's decaying peak and memory's window, and
    answers the reclaimable capacity."""

    def __init__(self, config: ReclaimableConfig) -> None:
        self.config = config
        self._cpu = DecayingPeak()
        self._memory = WindowMax()

    def reconfigure(self, config: ReclaimableConfig) -> None:
        """A shorter window applies at once; a longer one fills up with the samples to come."""
        self.config = config

    def update(
        self, report: NodeReport, pods: Sequence[Mapping[str, Any]], now: float, interference: float = 0.0
    ) -> dict[str, int]:
        """Reclaimable {"cpu": millicores, "memory": bytes} after this report (taken at `now`, any
        monotonic clock in seconds); `interference` 0..1 from the CPU controller. `pods` (the API's)
        are not needed any more: the report carries each pod's class."""
        online = online_usage(report)
        cpu_peak = self._cpu.add(now, online[CPU], self.config.cpu_peak_half_life_seconds)
        self._memory.add(now, online[MEMORY])
        memory_peak = self._memory.peak(now - self.config.window_seconds) or 0
        return reclaimable(capacity(report), {CPU: cpu_peak, MEMORY: memory_peak}, self.config, interference)
