"""Eviction: the last resort when cgroup QoS is not enough (DESIGN.md, "Agent").

By need, never because the node is busy (a busy node is what co-location is for):
- memory: when the node's memory use stays past its watermark for N consecutive samples (the
  memory strategy's caps came first), best-effort pods are evicted until the projected use is back
  under the watermark minus a small release margin;
- CPU: when the CPU interference controller has held BE below `cpu_satisfaction_ratio` of what it
  asks for (its requests, or what it used before the first cut) for `cpu_starvation_seconds` while
  BE used its whole cap, i.e. the node cannot give the batch work the CPU it was placed for, pods
  are evicted until the shortfall is covered, so they run elsewhere.
Victims: lowest priority first, then the largest user of the short resource. Evictions go through
the `policy/v1` Eviction API with the pod's UID as precondition, so a PodDisruptionBudget is
honoured (its 429 moves on to the next victim) and a pod recreated under the same name is left
alone. A cool-down separates eviction rounds; each eviction records an Event on the pod and counts
in `counts` (`lahar_evictions_total{reason}`). LC, LS and SYSTEM pods are never candidates.

Pure decisions, thin I/O: `choose_victims` is a plain function of (report, pods, config); the
manager adds the N-sample hysteresis, the cool-down and the pods already on their way out, and
`Evictor` is the only piece that talks to the API."""

from __future__ import annotations

import logging
import math
import time
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from lahar.api import kinds
from lahar.api.qos import QoSClass, qos_class
from lahar.api.quantity import QuantityError, parse_quantity
from lahar.client.errors import ApiUnavailable, Conflict, KubeError, NotFound, TooManyRequests
from lahar.client.events import EventRecorder, ObjectRef
from lahar.rpc.report import NodeReport

if typing.TYPE_CHECKING:
    from lahar.client.api import KubeApi

log = logging.getLogger("lahar.agent.eviction")

MEMORY, CPU = "memory", "cpu"
# Memory first: running out of it kills (the OOM killer picks online pods too); CPU only slows.
RESOURCES = (MEMORY, CPU)
REASONS = {MEMORY: "memory_pressure", CPU: "cpu_starvation"}  # lahar_evictions_total{reason}
EVENT_REASON = "Evicted"
COMPONENT = "lahar-agent"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"  # a static pod: the API cannot evict it
FINISHED_PHASES = ("Succeeded", "Failed")

# EvictionRecord.outcome
EVICTED = "evicted"  # the API accepted the eviction
REFUSED = "refused"  # a PodDisruptionBudget said no for now (429): the next victim is tried
GONE = "gone"  # the pod was already deleted or replaced (404, or 409 on the UID precondition)
FAILED = "failed"  # any other refusal: the next victim is tried
UNAVAILABLE = "unavailable"  # the API did not answer: the round stops, the next sample retries
DRY_RUN = "dry-run"  # no evictor (standalone): logged, nothing sent
RELEASING = frozenset({EVICTED, GONE})  # outcomes after which the pod's usage is on its way out


# --- configuration --------------------------------------------------------------------------

C = TypeVar("C")
QUANTITY_UNIT = "quantity_unit"  # field metadata: "milli" or "bytes" lets YAML say "500m" / "1Gi"


def config_from_mapping(cls: type[C], data: Mapping[str, Any]) -> C:
    """A frozen config dataclass from a YAML mapping whose keys are its field names. Unknown keys
    and values of the wrong type are refused with a ValueError naming the key; ranges are the
    dataclass' own `__post_init__` business. Shared by the QoS configs so they read alike."""
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a mapping of settings, got {type(data).__name__}: {data!r}")
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(str(key) for key in data if key not in known)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
    hints = typing.get_type_hints(cls)
    values = {
        name: _coerce(name, hints[name], known[name].metadata.get(QUANTITY_UNIT), value) for name, value in data.items()
    }
    return cls(**values)


def _coerce(name: str, hint: Any, quantity_unit: str | None, value: Any) -> Any:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ValueError(f"{name}: a value is required, got null")
    wanted = next(option for option in options if option is not type(None))
    if quantity_unit is not None and isinstance(value, str):
        try:
            quantity = parse_quantity(value)
        except QuantityError as exc:
            raise ValueError(f"{name}: {exc}") from exc
        return quantity.milli_value() if quantity_unit == "milli" else quantity.value()
    if wanted is bool:
        if isinstance(value, bool):
            return value
    elif wanted is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif wanted is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    else:
        raise TypeError(f"{name}: no reader for settings of type {wanted}")
    raise ValueError(f"{name}: expected {wanted.__name__}, got {type(value).__name__} {value!r}")


def check_ratio(name: str, value: float, low_open: bool = True) -> None:
    """A share of capacity: in (0, 1] (or [0, 1] when low_open is False)."""
    if not (0 < value <= 1 if low_open else 0 <= value <= 1):
        raise ValueError(f"{name}: must be in {'(0' if low_open else '[0'}, 1], got {value}")


def check_at_least(name: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class EvictionConfig:
    enabled: bool = True
    memory_eviction: bool = True
    # node memory used / total; above the memory strategy's cap threshold (0.80) so that BE pods
    # are squeezed first and evicted only when capping is not enough (Koordinator defaults to 0.70)
    memory_threshold: float = 0.85
    cpu_eviction: bool = True
    # BE held under this share of what it asks for (requests, or its usage before the first cut) ...
    cpu_satisfaction_ratio: float = 0.5
    # ... for this long (a minute: interference bursts pass; a node that stays busy does not)
    cpu_starvation_seconds: float = 60.0
    release_margin: float = 0.02  # evict until use <= threshold - margin, so one round is enough
    samples: int = 3  # consecutive samples past a watermark before acting: a spike is not pressure
    cooldown_seconds: float = 10.0  # between rounds: the evicted pods need time to let go
    grace_period_seconds: int | None = None  # None: each pod's own terminationGracePeriodSeconds
    # An evicted pod still on the node counts as released this long; past it (the eviction was
    # lost, the pod is stuck) it may be chosen again.
    release_timeout_seconds: float = 120.0

    def __post_init__(self) -> None:
        check_ratio("memory_threshold", self.memory_threshold)
        check_ratio("cpu_satisfaction_ratio", self.cpu_satisfaction_ratio)
        check_at_least("cpu_starvation_seconds", self.cpu_starvation_seconds, 0)
        check_ratio("release_margin", self.release_margin, low_open=False)
        if self.memory_threshold <= self.release_margin:
            raise ValueError(
                f"memory_threshold: must be above release_margin ({self.release_margin}), got {self.memory_threshold}"
            )
        check_at_least("samples", self.samples, 1)
        check_at_least("cooldown_seconds", self.cooldown_seconds, 0)
        check_at_least("release_timeout_seconds", self.release_timeout_seconds, 0)
        if self.grace_period_seconds is not None:
            check_at_least("grace_period_seconds", self.grace_period_seconds, 0)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> EvictionConfig:
        return config_from_mapping(cls, data)

    def watches(self, resource: str) -> bool:
        return self.memory_eviction if resource == MEMORY else self.cpu_eviction


# --- pure decisions -------------------------------------------------------------------------


@dataclass(frozen=True)
class Victim:
    """A BE pod that may be evicted, with what evicting it would release."""

    uid: str
    namespace: str
    name: str
    priority: int
    cpu_cores: float
    memory_bytes: int

    def usage(self, resource: str) -> float:
        return float(self.memory_bytes) if resource == MEMORY else self.cpu_cores


def node_use(report: NodeReport, resource: str) -> tuple[float, float]:
    """(used, capacity) of a resource, in bytes or cores."""
    if resource == MEMORY:
        return float(report.memory.used_bytes), float(report.memory.total_bytes)
    return report.cpu.usage_cores, float(report.cpu.cores)


@dataclass(frozen=True)
class CpuStarvation:
    """What the CPU interference controller says of BE this tick (strategies/cpu_suppress.py)."""

    cap_cores: float  # the cap BE is held to
    demand_cores: float  # what BE asks for: its CPU requests, or its usage before the first cut
    used_cores: float  # what BE used

    @property
    def satisfaction(self) -> float:
        return self.cap_cores / self.demand_cores if self.demand_cores > 0 else 1.0

    def starved(self, config: EvictionConfig) -> bool:
        """Held under the satisfaction ratio while using (nearly) all it may: it wants more."""
        return self.satisfaction < config.cpu_satisfaction_ratio and self.used_cores >= 0.9 * self.cap_cores

    @property
    def shortfall_cores(self) -> float:
        return max(self.demand_cores - self.cap_cores, 0.0)


def over_watermark(report: NodeReport, config: EvictionConfig) -> set[str]:
    """{"memory"} when memory is watched and its use in this sample is past its watermark."""
    used, capacity = node_use(report, MEMORY)
    return {MEMORY} if config.watches(MEMORY) and capacity > 0 and used > config.memory_threshold * capacity else set()


def release_targets(
    report: NodeReport, config: EvictionConfig, resources: Collection[str], starvation: CpuStarvation | None = None
) -> dict[str, float]:
    """How much of each short resource to release: memory back to its watermark − margin, CPU the
    BE shortfall (at least something, so one pod goes)."""
    targets = {}
    if MEMORY in resources:
        used, capacity = node_use(report, MEMORY)
        need = used - (config.memory_threshold - config.release_margin) * capacity
        if need > 0:
            targets[MEMORY] = need
    if CPU in resources and starvation is not None:
        targets[CPU] = max(starvation.shortfall_cores, 1e-3)
    return targets


def _evictable(pod: Mapping[str, Any]) -> bool:
    """A BE pod the API can evict: never LC/LS/SYSTEM, never a static pod's mirror, not finished."""
    metadata = pod.get("metadata") or {}
    return (
        qos_class(pod) is QoSClass.BE
        and MIRROR_POD_ANNOTATION not in (metadata.get("annotations") or {})
        and (pod.get("status") or {}).get("phase") not in FINISHED_PHASES
    )


def _priority(pod: Mapping[str, Any]) -> int:
    priority = (pod.get("spec") or {}).get("priority")
    return priority if isinstance(priority, int) and not isinstance(priority, bool) else 0


def candidates(
    report: NodeReport, pods: Sequence[Mapping[str, Any]], pending: Collection[str] = ()
) -> tuple[list[Victim], list[Victim]]:
    """(BE pods that may be chosen, BE pods already on their way out). Only pods both measured in
    the report and known to the API count: a cgroup with no API object cannot be evicted, and an
    API pod with no cgroup releases nothing. Pods being deleted or evicted earlier (`pending`
    uids) are on their way out: their usage is as good as released."""
    by_uid = {(p.get("metadata") or {}).get("uid"): p for p in pods}
    choosable: list[Victim] = []
    leaving: list[Victim] = []
    for usage in report.pods:
        pod = by_uid.get(usage.uid)
        if pod is None or not _evictable(pod):
            continue
        metadata = pod.get("metadata") or {}
        victim = Victim(
            usage.uid,
            metadata.get("namespace", ""),
            metadata.get("name", ""),
            _priority(pod),
            usage.cpu_usage_cores,
            usage.memory_working_set_bytes,
        )
        (leaving if usage.uid in pending or metadata.get("deletionTimestamp") else choosable).append(victim)
    return choosable, leaving


def rank(victims: Sequence[Victim], resources: Collection[str]) -> list[Victim]:
    """Lowest priority first, then the largest user of the first pressured resource (memory
    before CPU), then of the other; the name breaks ties so the order is stable."""
    order = [r for r in RESOURCES if r in resources] + [r for r in RESOURCES if r not in resources]
    return sorted(victims, key=lambda v: (v.priority, *(-v.usage(r) for r in order), v.namespace, v.name))


@dataclass
class ReleasePlan:
    """What is left to release per resource while a round walks its ranked victims."""

    needs: dict[str, float] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return all(need <= 0 for need in self.needs.values())

    def helps(self, victim: Victim) -> bool:
        """Evicting a pod that uses none of what is short would release nothing."""
        return any(need > 0 and victim.usage(resource) > 0 for resource, need in self.needs.items())

    def release(self, victim: Victim) -> None:
        for resource in self.needs:
            self.needs[resource] -= victim.usage(resource)

    def walk(self, ranked: Sequence[Victim]) -> Iterator[Victim]:
        """The victims to try in order, until the needs are met; the caller `release`s each one
        whose eviction went through, so a refused one makes room for the next."""
        for victim in ranked:
            if self.done:
                return
            if self.helps(victim):
                yield victim


def plan_round(
    report: NodeReport,
    pods: Sequence[Mapping[str, Any]],
    config: EvictionConfig,
    resources: Collection[str],
    pending: Collection[str] = (),
    starvation: CpuStarvation | None = None,
) -> tuple[ReleasePlan, list[Victim]]:
    """The needs of one round (less what pods already leaving will give back) and its ranked victims."""
    choosable, leaving = candidates(report, pods, pending)
    plan = ReleasePlan(release_targets(report, config, resources, starvation))
    for victim in leaving:
        plan.release(victim)
    return plan, rank(choosable, resources)


def choose_victims(
    report: NodeReport,
    pods: Sequence[Mapping[str, Any]],
    config: EvictionConfig,
    resources: Collection[str] | None = None,
    pending: Collection[str] = (),
    starvation: CpuStarvation | None = None,
) -> list[Victim]:
    """The BE pods one round evicts if every eviction goes through. `resources`: the short ones
    (default: memory past its watermark in this report, ignoring the N-sample rule, and CPU when
    `starvation` says BE is starved)."""
    if resources is None:
        resources = over_watermark(report, config) | ({CPU} if starvation and starvation.starved(config) else set())
    plan, ranked = plan_round(report, pods, config, resources, pending, starvation)
    chosen = []
    for victim in plan.walk(ranked):
        chosen.append(victim)
        plan.release(victim)
    return chosen


def describe_pressure(
    report: NodeReport, config: EvictionConfig, resource: str, starvation: CpuStarvation | None = None
) -> str:
    if resource == CPU and starvation is not None:
        return (
            f"best-effort pods were held to {starvation.cap_cores:.2f} of the {starvation.demand_cores:.2f} CPU they "
            f"ask for (under {config.cpu_satisfaction_ratio:.0%}) for {config.cpu_starvation_seconds:g} s to protect "
            "online pods"
        )
    used, capacity = node_use(report, resource)
    return (
        f"node {resource} use {used / capacity:.0%} stayed above the {config.memory_threshold:.0%} "
        f"watermark for {config.samples} samples"
    )


# --- the API edge ---------------------------------------------------------------------------


class Evictor:
    """Evictions and their Events through the API, on behalf of this node's agent."""

    def __init__(self, api: KubeApi, node: str) -> None:
        self.api = api
        self.node = node
        self.events = EventRecorder(api, COMPONENT, host=node)

    def evict(self, victim: Victim, grace_period_seconds: int | None = None) -> None:
        """policy/v1 Eviction with the UID as precondition; raises the API's KubeError
        (TooManyRequests for a PodDisruptionBudget refusal)."""
        self.api.evict(victim.namespace, victim.name, uid=victim.uid, grace_period_seconds=grace_period_seconds)

    def record_event(self, victim: Victim, message: str) -> None:
        """A Warning Event on the pod, as kubelet's own evictions leave (never raises: the eviction
        itself went through)."""
        self.events.record(
            ObjectRef(kinds.POD, victim.namespace, victim.name, victim.uid), "Warning", EVENT_REASON, message
        )


# --- the manager ----------------------------------------------------------------------------


@dataclass(frozen=True)
class EvictionRecord:
    uid: str
    namespace: str
    name: str
    reason: str  # memory_pressure, cpu_pressure
    outcome: str  # evicted, refused, gone, failed, unavailable, dry-run
    message: str
    at: float  # the manager's clock


class EvictionManager:
    """One `step` per sample: counts how long each watermark has been held and, past N samples
    and outside the cool-down, evicts a round of BE pods."""

    def __init__(
        self, config: EvictionConfig, evictor: Evictor | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """`evictor` None: decide and log only (standalone, no API). `clock` must run on the
        timebase of step's `now`: the cool-down counts from the end of a round's API calls."""
        self.config = config
        self.evictor = evictor
        self.clock = clock
        self.counts: dict[str, int] = {}  # evictions by reason, for lahar_evictions_total{reason}
        self.refusals: dict[str, int] = {}  # PDB refusals by reason
        self._held = {resource: 0 for resource in RESOURCES}  # consecutive samples past the watermark
        self._starved_since: float | None = None  # when BE's CPU starvation began
        self._cooldown_until = -math.inf
        self._pending: dict[str, float] = {}  # uid -> when evicted, while the pod may still be there

    def reconfigure(self, config: EvictionConfig) -> None:
        """A new config from the next step on; the samples already counted and a running cool-down
        stay (a reload must not re-arm or skip an eviction)."""
        self.config = config

    def step(
        self,
        report: NodeReport,
        pods: Sequence[Mapping[str, Any]],
        now: float,
        starvation: CpuStarvation | None = None,
    ) -> list[EvictionRecord]:
        """One sample. `starvation`: the CPU controller's view of BE this tick (None: not capped)."""
        pressured = over_watermark(report, self.config)
        self._held[MEMORY] = self._held[MEMORY] + 1 if MEMORY in pressured else 0
        starved = self.config.watches(CPU) and starvation is not None and starvation.starved(self.config)
        if not starved:
            self._starved_since = None
        elif self._starved_since is None:
            self._starved_since = now
        self._forget_released(report, pods, now)
        held = {r for r in pressured if self._held[r] >= self.config.samples}
        if self._starved_since is not None and now - self._starved_since >= self.config.cpu_starvation_seconds:
            held.add(CPU)
        if not self.config.enabled or not held or now < self._cooldown_until:
            return []
        plan, ranked = plan_round(report, pods, self.config, held, self._pending, starvation)
        resource = next(r for r in RESOURCES if r in held)
        reason, why = REASONS[resource], describe_pressure(report, self.config, resource, starvation)
        records: list[EvictionRecord] = []
        for victim in plan.walk(ranked):
            record = self._evict(victim, reason, why)
            records.append(record)
            if record.outcome == UNAVAILABLE:
                break
            if record.outcome in RELEASING or record.outcome == DRY_RUN:
                plan.release(victim)  # as good as gone: the next victims only cover the rest
            if record.outcome in RELEASING:
                self._pending[victim.uid] = now
        if any(r.outcome in (EVICTED, DRY_RUN) for r in records):
            self._cooldown_until = self.clock() + self.config.cooldown_seconds
            if CPU in held:
                self._starved_since = None  # the next round only after another full starvation period
        return records

    def _evict(self, victim: Victim, reason: str, why: str) -> EvictionRecord:
        message = (
            f"{why}; {COMPONENT} evicts this best-effort pod to release "
            f"{victim.memory_bytes / (1 << 20):.0f} MiB of memory and {victim.cpu_cores:.2f} CPU"
        )
        outcome, detail = self._call(victim, message)
        if outcome == EVICTED:
            self.counts[reason] = self.counts.get(reason, 0) + 1
            log.warning("evicted %s/%s (%s): %s", victim.namespace, victim.name, reason, message)
        elif outcome == REFUSED:
            self.refusals[reason] = self.refusals.get(reason, 0) + 1
            log.info("eviction of %s/%s refused, trying the next pod: %s", victim.namespace, victim.name, detail)
        elif outcome == DRY_RUN:
            log.warning("would evict %s/%s (%s, no API): %s", victim.namespace, victim.name, reason, message)
        else:
            log.warning("eviction of %s/%s: %s: %s", victim.namespace, victim.name, outcome, detail)
        return EvictionRecord(victim.uid, victim.namespace, victim.name, reason, outcome, detail, self.clock())

    def _call(self, victim: Victim, message: str) -> tuple[str, str]:
        """(outcome, message) of one eviction request, and its Event when it went through."""
        if self.evictor is None:
            return DRY_RUN, message
        try:
            self.evictor.evict(victim, self.config.grace_period_seconds)
        except TooManyRequests as exc:
            return REFUSED, exc.message
        except (NotFound, Conflict) as exc:
            return GONE, exc.message
        except ApiUnavailable as exc:
            return UNAVAILABLE, exc.message
        except KubeError as exc:
            return FAILED, str(exc)
        self.evictor.record_event(victim, message)
        return EVICTED, message

    def _forget_released(self, report: NodeReport, pods: Sequence[Mapping[str, Any]], now: float) -> None:
        """Evicted pods stop being pending once gone from the node and the API, or after the
        release timeout."""
        present = {usage.uid for usage in report.pods} | {(p.get("metadata") or {}).get("uid") for p in pods}
        self._pending = {
            uid: at
            for uid, at in self._pending.items()
            if uid in present and now - at < self.config.release_timeout_seconds
        }
