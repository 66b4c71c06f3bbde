"""Reclaimable capacity: what best-effort pods may borrow on this node (docs/oversubscription.md).

CPU follows what online pods actually leave idle:

    cpu = (cores − online pods' recent peak − transient mean − margin − reserve) × (1 − held interference)

Each report's CPU is split by what it is:
- *BE*: pods whose report class is BE, also while terminating (a BE pod in its grace period is
  BE, not online), and the usage a BE pod that left since the last report still had in this
  interval (it died mid-interval: its CPU is in the node's total but it is no longer a pod).
- *Online pods* (LC, LS, SYSTEM pods that are not terminating): their *recent peak* is the
  largest usage of the last `cpu_window_seconds` held in full, then fading with a half-life of
  `cpu_peak_half_life_seconds`: an online burst predicts the next one for a while, not for five
  minutes.
- *Transient*: everything outside pods (the kernel, kubelet, the runtime; under `lahar up` the
  control plane itself and its start-up) and online pods being deleted. Counted at its mean over
  the short window only, then forgotten: these processes outweigh BE pods (the smallest CPU
  weight) and take their CPU back the moment they want it, so what BE can count on is what they
  leave on average; a start-up burst or a leaving pod says nothing about what online pods will
  want next.

*Interference* (0..1 from the CPU interference controller: how much online pods' CPU wait
exceeds its baseline) shrinks what is lent at once and is *held*, growing back linearly over
`interference_recovery_seconds` once it clears, so the scheduler stops placing BE where online
pods suffer and does not refill the node the moment a cap lifts.

Memory stays conservative — `capacity × memory_threshold − online peak over window_seconds −
reserve` — because memory lent cannot be taken back quickly: reclaiming it means reclaiming a BE
pod's pages or evicting the pod. CPU in millicores, memory in bytes. The result goes into every
NodeReport (and so over gRPC to the scheduler) and, optionally, into the Node's
`status.allocatable` as `kubernetes.io/batch-cpu` / `batch-memory` (node_allocatable.py)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lahar.agent.qos.eviction import CPU, MEMORY, QUANTITY_UNIT, check_ratio, config_from_mapping
from lahar.api.qos import QoSClass
from lahar.rpc.report import NodeReport

# Upper bounds past which a value is a mistake, not a tuning (a unit slip, seconds for ms).
MAX_SECONDS = 3600.0
MAX_MEMORY_WINDOW_SECONDS = 86400.0
MAX_CPU_RESERVE_MILLICORES = 1024 * 1000  # more cores than any node has
MAX_MEMORY_RESERVE_BYTES = 64 << 40


def check_between(name: str, value: float, low: float, high: float, why: str = "") -> None:
    """A finite number in [low, high]; the error names the key (config.py adds the section)."""
    if not (math.isfinite(value) and low <= value <= high):
        reason = f" ({why})" if why else ""
        raise ValueError(f"{name}: must be in [{low:g}, {high:g}]{reason}, got {value}")


@dataclass(frozen=True)
class ReclaimableConfig:
    # Share of the cores never lent: online growth between two reports (1 s) before the scheduler
    # hears of it. Small, since BE runs at the smallest CPU weight and gives way at once.
    cpu_margin_ratio: float = 0.05
    # Online pods' usage is held at its largest over this window: a few reports, so one quiet
    # sample between busy ones does not invite BE; transient usage counts by its mean over it.
    cpu_window_seconds: float = 5.0
    # Past the window an online pods' peak fades by half this often: bursts recur for a while.
    cpu_peak_half_life_seconds: float = 10.0
    # Held interference grows back from full to none over this long: longer than the
    # controller's cut-and-judge cycle (about 1 s) and the scheduler's report staleness (10 s).
    interference_recovery_seconds: float = 30.0
    memory_threshold: float = 0.65  # share of the node's memory online plus BE may use together
    window_seconds: float = 300.0  # memory's online peak is over this window (Koordinator's 300 s)
    # A number is in the unit the key names; a string is a Kubernetes quantity ("500m", "1Gi").
    cpu_reserve_millicores: int = field(default=0, metadata={QUANTITY_UNIT: "milli"})
    memory_reserve_bytes: int = field(default=0, metadata={QUANTITY_UNIT: "bytes"})
    patch_node_allocatable: bool = False  # also write kubernetes.io/batch-* into the Node's status

    def __post_init__(self) -> None:
        check_between("cpu_margin_ratio", self.cpu_margin_ratio, 0.0, 0.5, "at most half the node kept idle")
        check_between("cpu_window_seconds", self.cpu_window_seconds, 0.0, 600.0)
        check_between("cpu_peak_half_life_seconds", self.cpu_peak_half_life_seconds, 0.1, MAX_SECONDS)
        check_between("interference_recovery_seconds", self.interference_recovery_seconds, 0.0, MAX_SECONDS)
        check_ratio("memory_threshold", self.memory_threshold, low_open=False)
        check_between("window_seconds", self.window_seconds, 0.0, MAX_MEMORY_WINDOW_SECONDS)
        check_between("cpu_reserve_millicores", self.cpu_reserve_millicores, 0, MAX_CPU_RESERVE_MILLICORES)
        check_between("memory_reserve_bytes", self.memory_reserve_bytes, 0, MAX_MEMORY_RESERVE_BYTES)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ReclaimableConfig:
        return config_from_mapping(cls, data)


def capacity(report: NodeReport) -> dict[str, int]:
    return {CPU: report.cpu.cores * 1000, MEMORY: report.memory.total_bytes}


@dataclass(frozen=True)
class CpuSplit:
    """One report's CPU by what it is, in millicores."""

    online: int  # LC, LS and SYSTEM pods not being deleted
    transient: int  # outside pods, and online pods being deleted
    best_effort: int


def split_cpu(report: NodeReport, terminating: frozenset[str] = frozenset(), departed_be: float = 0.0) -> CpuSplit:
    """The report's CPU by kind. `terminating`: uids of pods being deleted; `departed_be`: cores a
    BE pod that left since the previous report used then (an upper bound of what it still used in
    this interval: it can only be in the usage outside pods)."""
    online = transient = be = 0.0
    for usage in report.pods:
        if usage.qos_class == QoSClass.BE:
            be += usage.cpu_usage_cores
        elif usage.uid in terminating:
            transient += usage.cpu_usage_cores
        else:
            online += usage.cpu_usage_cores
    outside = max(0.0, report.cpu.usage_cores - online - transient - be)
    departed = min(outside, max(departed_be, 0.0))
    return CpuSplit(round(online * 1000), round((transient + outside - departed) * 1000), round((be + departed) * 1000))


def online_usage(report: NodeReport) -> dict[str, int]:
    """Node usage less BE pods' usage (millicores, bytes), floored at 0. The report classed each
    pod from its API object."""
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
    """CPU: capacity − peak − margin − reserve, shrunk by (held) interference; memory: capacity ×
    threshold − peak − reserve. Floored at 0. `online_peak[cpu]` is everything not BE."""
    cores = node_capacity[CPU]
    idle_cpu = cores - online_peak[CPU] - round(cores * config.cpu_margin_ratio) - config.cpu_reserve_millicores
    memory = int(node_capacity[MEMORY] * config.memory_threshold) - online_peak[MEMORY] - config.memory_reserve_bytes
    shrink = 1.0 - min(max(interference, 0.0), 1.0)
    return {CPU: max(0, round(max(idle_cpu, 0) * shrink)), MEMORY: max(0, memory)}


class WindowMax:
    """The largest value added in a sliding time window, O(1) amortised: a deque of candidates
    whose values decrease, each dropped once a later sample is as large or it leaves the window."""

    def __init__(self) -> None:
        self._candidates: deque[tuple[float, int]] = deque()

    def add(self, at: float, value: int) -> None:
        while self._candidates and self._candidates[-1][1] <= value:
            self._candidates.pop()
        self._candidates.append((at, value))

    def expire(self, since: float) -> list[tuple[float, int]]:
        """Drop the candidates added before `since`; the dropped ones, oldest first."""
        gone = []
        while self._candidates and self._candidates[0][0] < since:
            gone.append(self._candidates.popleft())
        return gone

    def peak(self, since: float) -> int | None:
        """The largest value added at or after `since`; None when there is none."""
        self.expire(since)
        return self._candidates[0][1] if self._candidates else None


class WindowMean:
    """The mean of the values added in a sliding time window (each sample weighs alike: reports
    come at a steady interval)."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()
        self._sum = 0

    def add(self, at: float, value: int) -> None:
        self._samples.append((at, value))
        self._sum += value

    def mean(self, since: float) -> int | None:
        """The mean of the values added at or after `since`; None when there is none."""
        while self._samples and self._samples[0][0] < since:
            self._sum -= self._samples.popleft()[1]
        return round(self._sum / len(self._samples)) if self._samples else None


class RecentPeak:
    """Every sample held in full for `window` seconds, then halved every `half_life`: the peak
    at t is the largest u(s) × 0.5^(max(0, t − s − window) / half_life). Exact and O(1)
    amortised: samples leaving the window fold into one decaying value (they all fade alike)."""

    def __init__(self) -> None:
        self._window = WindowMax()
        self._faded = 0.0  # the decaying part's value at `_faded_at`
        self._faded_at = 0.0

    def _fade(self, at: float, half_life: float) -> float:
        return self._faded * 0.5 ** (max(at - self._faded_at, 0.0) / half_life)

    def add(self, at: float, value: int, window: float, half_life: float) -> int:
        """Add a sample taken at `at`; the peak then."""
        self._window.add(at, value)
        for sampled, old in self._window.expire(at - window):
            left = sampled + window  # when the sample left the window and began to fade
            self._faded, self._faded_at = max(self._fade(left, half_life), float(old)), left
        held = self._window.peak(at - window) or 0
        return max(held, round(self._fade(at, half_life)))


class HeldInterference:
    """Interference shrinks what is lent at once and grows back linearly: from 1 to 0 over
    `recovery` seconds (additive growth after a multiplicative cut, as the controller does)."""

    def __init__(self) -> None:
        self._held = 0.0
        self._at: float | None = None

    def update(self, at: float, severity: float, recovery: float) -> float:
        severity = min(max(severity, 0.0), 1.0) if math.isfinite(severity) else 1.0  # unknown: assume the worst
        if self._at is not None:
            elapsed = max(at - self._at, 0.0)
            self._held = 0.0 if recovery <= 0 else max(0.0, self._held - elapsed / recovery)
        self._held, self._at = max(self._held, severity), at
        return self._held


@dataclass(frozen=True)
class Breakdown:
    """What the last update saw, for metrics and debugging (millicores)."""

    online_peak: int
    transient_mean: int
    best_effort: int
    interference_held: float


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def terminating_uids(pods: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The uids of the API's pods that carry a deletionTimestamp (in their grace period)."""
    return frozenset(_uid(pod) for pod in pods if (pod.get("metadata") or {}).get("deletionTimestamp"))


class ReclaimableTracker:
    """Feeds each report into the online pods' recent peak, the transient window, memory's window
    and the held interference, and answers the reclaimable capacity."""

    def __init__(self, config: ReclaimableConfig) -> None:
        self.config = config
        self._online = RecentPeak()
        self._transient = WindowMean()
        self._memory = WindowMax()
        self._interference = HeldInterference()
        self._be_last: dict[str, float] = {}  # BE pods of the previous report: uid -> cores
        self.last: Breakdown | None = None

    def reconfigure(self, config: ReclaimableConfig) -> None:
        """A shorter window applies at once; a longer one fills up with the samples to come."""
        self.config = config

    def update(
        self,
        report: NodeReport,
        pods: Sequence[Mapping[str, Any]],
        now: float,
        interference: float = 0.0,
        terminating: frozenset[str] | None = None,
    ) -> dict[str, int]:
        """Reclaimable {"cpu": millicores, "memory": bytes} after this report (taken at `now`, any
        monotonic clock in seconds). `pods`: the API's pods on this node (their deletionTimestamp
        says which are leaving). `interference`: 0 when online pods suffer no measured CPU
        interference, up to 1 (severe: their excess CPU wait over its baseline, as a severity).
        `terminating`: uids of pods being deleted, when the caller knows better than `pods`."""
        config = self.config
        leaving = terminating_uids(pods) if terminating is None else terminating
        present = {usage.uid for usage in report.pods}
        departed_be = sum(cores for uid, cores in self._be_last.items() if uid not in present)
        self._be_last = {u.uid: u.cpu_usage_cores for u in report.pods if u.qos_class == QoSClass.BE}
        split = split_cpu(report, leaving, departed_be)

        window = config.cpu_window_seconds
        online_peak = self._online.add(now, split.online, window, config.cpu_peak_half_life_seconds)
        self._transient.add(now, split.transient)
        transient = self._transient.mean(now - window) or 0
        self._memory.add(now, online_usage(report)[MEMORY])
        memory_peak = self._memory.peak(now - config.window_seconds) or 0
        held = self._interference.update(now, interference, config.interference_recovery_seconds)
        self.last = Breakdown(online_peak, transient, split.best_effort, held)
        return reclaimable(capacity(report), {CPU: online_peak + transient, MEMORY: memory_peak}, config, held)
