"""What a cycle decided, written back: PodGroup status, Queue status and Events.

Pure functions compute what a status should be from the session (`podgroup_status_patch`,
`queue_status_patch`, `summarize`); `StatusWriter` compares and writes, and `EventRecorder`
records Events. Nothing is written unless it changed, so a quiet cluster costs no API calls.

PodGroup status (the scheduler owns it; Volcano's `jobStatus` at session close):
- phase: Running once the gang's scheduled tasks (Allocated, Binding, Bound, Running) plus the
  Succeeded ones reach minMember; Completed when all of those have succeeded; Unknown when some
  run but the gang was unschedulable this cycle; otherwise Inqueue if admitted (the `enqueue`
  action's decision, or as written before), else Pending. Running is reached at bind time, not
  when kubelet starts the pods, as in Volcano (`status.running` counts what kubelet runs).
- `running`, `succeeded`, `failed`: pods in those phases.
- conditions: `Unschedulable` (True, reason NotEnoughResources, the gang's message) when the gang
  did not fit; `Scheduled` (True) once it is Running or Completed, which turns Unschedulable
  False. `lastTransitionTime` moves only when a condition's status flips.

Queue status: the controller owns `state` and the PodGroup counts (controller/queues.py); the
scheduler writes only `allocated` (what the queue's pods hold) and `deserved` (when the
proportion plugin computed it), with merge patches on the status subresource.

Events come from the session (plugins record them: the gang plugin says why a gang did not
fit, every cycle while it lasts) and are rate-limited: one is recorded when its object, reason or
message differs from what the previous cycle said, so an unschedulable gang's Warning appears
once per change of its message, and again if it comes back after a cycle without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import Any

import numpy as np

from lahar.api import kinds
from lahar.api.kinds import Kind
from lahar.api.podgroup import PodGroupConditionType, PodGroupPhase
from lahar.api.quantity import QuantityError
from lahar.api.resources import ResourceList
from lahar.client.errors import KubeError, NotFound
from lahar.client.events import EventRecorder, ObjectRef, rfc3339, utc_now
from lahar.scheduler.framework.session import Session, SessionEvent
from lahar.scheduler.metrics import CycleFigures, QueueFigures
from lahar.scheduler.model import CHARGED, JobInfo, TaskStatus

log = logging.getLogger("lahar.scheduler.status")

Obj = dict[str, Any]
COMPONENT = "lahar-scheduler"
UNSCHEDULABLE_REASON = "NotEnoughResources"
SCHEDULED_REASON = "GangScheduled"
TRUE, FALSE = "True", "False"
# Volcano's AllocatedStatus: placed and holding resources (Pipelined waits for victims; not yet).
SCHEDULED = (TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING)
WAITING = (TaskStatus.PENDING, TaskStatus.PIPELINED)
STATUS_COUNTS = {"running": TaskStatus.RUNNING, "succeeded": TaskStatus.SUCCEEDED, "failed": TaskStatus.FAILED}
EVENT_KINDS = {
    kind.kind: kind
    for kind in (kinds.POD, kinds.PODGROUP, kinds.QUEUE, kinds.NODE, kinds.RESOURCE_QUOTA, kinds.NUMATOPOLOGY)
}


# -- PodGroup status (pure) --------------------------------------------------------------------------


def podgroup_phase(job: JobInfo) -> PodGroupPhase:
    running = job.count([TaskStatus.RUNNING])
    if job.unschedulable_message and running:
        return PodGroupPhase.UNKNOWN
    scheduled = job.count(SCHEDULED)
    placed = scheduled + job.count([TaskStatus.SUCCEEDED])
    if placed and placed >= job.min_member:
        return PodGroupPhase.RUNNING if scheduled else PodGroupPhase.COMPLETED
    return PodGroupPhase.INQUEUE if job.phase is PodGroupPhase.INQUEUE else PodGroupPhase.PENDING


def set_condition(conditions: list[Obj], condition_type: str, status: str, reason: str, message: str, now: str) -> None:
    """Set a condition in place; its lastTransitionTime moves only when its status flips."""
    for condition in conditions:
        if condition.get("type") == condition_type:
            if condition.get("status") != status:
                condition["lastTransitionTime"] = now
            condition.update(status=status, reason=reason, message=message)
            return
    conditions.append(
        {"type": condition_type, "status": status, "lastTransitionTime": now, "reason": reason, "message": message}
    )


def _lower(conditions: list[Obj], condition_type: str, reason: str, now: str) -> None:
    """Turn a True condition False (one that is absent stays absent)."""
    if any(c.get("type") == condition_type and c.get("status") == TRUE for c in conditions):
        set_condition(conditions, condition_type, FALSE, reason, "", now)


def podgroup_conditions(
    job: JobInfo, phase: PodGroupPhase, current: Iterable[Mapping[str, Any]], now: str
) -> list[Obj]:
    conditions = [dict(condition) for condition in current]
    if job.unschedulable_message:
        set_condition(
            conditions, PodGroupConditionType.UNSCHEDULABLE, TRUE, UNSCHEDULABLE_REASON, job.unschedulable_message, now
        )
        _lower(conditions, PodGroupConditionType.SCHEDULED, UNSCHEDULABLE_REASON, now)
    elif phase in (PodGroupPhase.RUNNING, PodGroupPhase.COMPLETED):
        set_condition(
            conditions,
            PodGroupConditionType.SCHEDULED,
            TRUE,
            SCHEDULED_REASON,
            f"at least {job.min_member} tasks of the gang are scheduled",
            now,
        )
        _lower(conditions, PodGroupConditionType.UNSCHEDULABLE, SCHEDULED_REASON, now)
    return conditions


def podgroup_status_patch(job: JobInfo, now: str) -> Obj | None:
    """The status fields of the job's PodGroup that differ from what it holds, or None."""
    if job.podgroup is None:
        return None
    current = job.podgroup.status
    phase = podgroup_phase(job)
    desired: Obj = {"phase": phase.value}
    desired.update({field: job.count([status]) for field, status in STATUS_COUNTS.items()})
    desired["conditions"] = podgroup_conditions(job, phase, current.get("conditions") or (), now)
    patch = {field: value for field, value in desired.items() if current.get(field, _absent(field)) != value}
    return patch or None


def _absent(field: str) -> Any:
    """How a field the API object lacks compares: counts as 0, conditions as none."""
    return [] if field == "conditions" else 0 if field in STATUS_COUNTS else None


# -- Queue status and the cycle's figures (pure) ---------------------------------------------------


def queue_status_patch(current: Mapping[str, Any], figures: QueueFigures) -> Obj | None:
    """Merge-patch fields for the queue's `allocated` (and `deserved` when known), or None. A
    resource that went to zero is removed (null in a merge patch)."""
    patch: Obj = {}
    for field, amounts in (("allocated", figures.allocated), ("deserved", figures.deserved)):
        if amounts is None:
            continue
        wanted = ResourceList(amounts).without_zeros()
        written = current.get(field) or {}
        try:
            unchanged = ResourceList.from_k8s(written) == wanted
        except (QuantityError, TypeError, AttributeError):
            unchanged = False
        if not unchanged:
            text = wanted.to_k8s()
            patch[field] = {**{name: None for name in written if name not in text}, **text}
    return patch or None


def _entry(entry: Any, key: str) -> Any:
    return entry.get(key) if isinstance(entry, Mapping) else getattr(entry, key, None)


def summarize(session: Session) -> CycleFigures:
    """Pending pods, unschedulable gangs and each queue's allocated / deserved / share after the
    cycle. Allocated is summed from the tasks themselves, whatever plugins are on (those holding
    resources and not being evicted, as the proportion plugin charges them); deserved and share
    come from the proportion plugin's `session.queue_figures` when it ran."""
    resources = session.resources
    held: dict[str, np.ndarray] = {name: np.zeros(len(resources), dtype=np.int64) for name in session.queues}
    pending = unschedulable = 0
    for job in session.jobs.values():
        pending += job.count(WAITING)
        unschedulable += bool(job.unschedulable_message)
        charged = job.requested(CHARGED)
        if job.queue in held:
            held[job.queue] += charged
        else:
            held[job.queue] = charged
    computed: Mapping[str, Any] = session.queue_figures
    figures: dict[str, QueueFigures] = {}
    for name, allocated in held.items():
        entry = computed.get(name)
        deserved_vector = _entry(entry, "deserved") if entry is not None else None
        deserved = None if deserved_vector is None else _as_list(resources.names, deserved_vector)
        share = _entry(entry, "share") if entry is not None else None
        if share is None and deserved is not None:
            share = _share(resources.to_list(allocated), deserved)
        figures[name] = QueueFigures(resources.to_list(allocated), deserved, None if share is None else float(share))
    return CycleFigures(pending, unschedulable, figures)


def _as_list(names: tuple[str, ...], amounts: Any) -> ResourceList:
    if isinstance(amounts, Mapping):
        return ResourceList(amounts).without_zeros()
    return ResourceList.from_vector(names, np.asarray(amounts, dtype=np.int64)).without_zeros()


def _share(allocated: Mapping[str, int], deserved: Mapping[str, int]) -> float:
    """Volcano's share: the largest allocated / deserved over the resources with a deserved amount."""
    ratios = [allocated.get(name, 0) / amount for name, amount in deserved.items() if amount > 0]
    return max(ratios, default=0.0)


# -- Events -----------------------------------------------------------------------------------------

EventKey = tuple[str, str, str, str]  # kind, namespace, name, reason


def news(
    said: Mapping[EventKey, str], events: Iterable[SessionEvent]
) -> tuple[list[SessionEvent], dict[EventKey, str]]:
    """Which of a cycle's events to record: those not said in the previous cycle with the same
    message (plugins say "unschedulable" every cycle while it lasts). Returns them and what this
    cycle said, the memory for the next one: an event that stops and comes back is news again."""
    now: dict[EventKey, str] = {}
    fresh = []
    for event in events:
        key = (event.kind, event.namespace, event.name, event.reason)
        if key in now:
            continue
        now[key] = event.message
        if said.get(key) != event.message:
            fresh.append(event)
    return fresh, now


def job_ref(job: JobInfo) -> ObjectRef:
    """Where a job's Events go: its PodGroup, or the pod of a gang of one."""
    if job.podgroup is not None:
        return ObjectRef(kinds.PODGROUP, job.namespace, job.name, job.podgroup.uid)
    task = next(iter(job.tasks.values()), None)
    return ObjectRef(kinds.POD, job.namespace, job.name, task.uid if task is not None else "")


# -- the writer -------------------------------------------------------------------------------------


class StatusWriter:
    """Writes a cycle's PodGroup and Queue statuses and Events on a thread pool, without waiting:
    a slow API slows the writes, not the scheduling. An object whose previous write is still in
    flight is skipped (the next cycle compares again). `on_written(kind, obj)` gets every object a
    status patch returned, so the cache holds what was written before its watch event arrives
    (no stale compare, no rewrite)."""

    def __init__(
        self,
        api: Any,
        events: EventRecorder | None = None,
        on_written: Callable[[Kind, Obj], None] | None = None,
        clock: Callable[[], datetime] = utc_now,
        workers: int = 8,
    ) -> None:
        self.api = api
        self.events = events or EventRecorder(api, COMPONENT, clock=clock)
        self.on_written = on_written
        self.clock = clock
        self._said: dict[EventKey, str] = {}
        self.failures = 0  # status writes the API refused: a later cycle must compare again
        self._inflight: dict[tuple[str, str], Future[None]] = {}  # (kind, key) -> its status write
        # (kind, key) -> the resourceVersion the last successful write was computed against, and its
        # patch: a cycle whose snapshot predates the write coming back computes it again.
        self._done: dict[tuple[str, str], tuple[str, Obj]] = {}
        self._events: set[Future[None]] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lahar-status")

    def close(self) -> None:
        """Stop: writes not started yet are dropped (the next scheduler compares again)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._lock:
            pending = [*self._inflight.values(), *self._events]
        return not wait(pending, timeout).not_done

    def write(self, session: Session, figures: CycleFigures, nodeshard: tuple[str, str, Obj] | None = None) -> int:
        """Send what changed; returns how many writes were sent. `nodeshard`: a sharded
        scheduler's NodeShard status to write (`Cache.nodeshard_status`: name, version, patch)."""
        now = rfc3339(self.clock())
        sent = 0
        patched: set[tuple[str, str]] = set()
        for job in session.jobs.values():
            patch = podgroup_status_patch(job, now)
            if patch is not None and job.podgroup is not None:
                sent += self._status(
                    kinds.PODGROUP, job.name, job.namespace, patch, job.podgroup.meta.resource_version, patched
                )
        for name, queue_figures in figures.queues.items():
            queue = session.queues.get(name)
            if queue is None or queue.queue is None:
                continue  # the implicit default queue: no API object to write
            patch = queue_status_patch(queue.queue.status, queue_figures)
            if patch is not None:
                sent += self._status(kinds.QUEUE, name, None, patch, queue.queue.meta.resource_version, patched)
        if nodeshard is not None:
            name, version, patch = nodeshard
            sent += self._status(kinds.NODESHARD, name, None, patch, version, patched)
        with self._lock:  # a write that came back before this cycle's snapshot is no longer needed
            self._done = {key: done for key, done in self._done.items() if key in patched}
        fresh, self._said = news(self._said, session.events)
        for event in fresh:
            about = ObjectRef(EVENT_KINDS.get(event.kind, kinds.POD), event.namespace, event.name)
            future = self._pool.submit(self.events.record, about, event.type, event.reason, event.message)
            with self._lock:
                self._events.add(future)
            future.add_done_callback(self._event_done)
            sent += 1
        return sent

    def _status(
        self, kind: Kind, name: str, namespace: str | None, patch: Obj, version: str, patched: set[tuple[str, str]]
    ) -> int:
        """Send a status patch computed against `version` of the object, unless one is in flight
        for it or the same patch against the same version was written already; adds the object's
        key to `patched`."""
        key = (kind.kind, f"{namespace}/{name}" if namespace else name)
        patched.add(key)
        with self._lock:
            if key in self._inflight or (version and self._done.get(key) == (version, patch)):
                return 0
            self._inflight[key] = future = self._pool.submit(
                self._patch_status, kind, name, namespace, patch, key, version
            )
        future.add_done_callback(lambda _: self._status_done(key))
        return 1

    def _status_done(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._inflight.pop(key, None)

    def _event_done(self, future: Future[None]) -> None:
        with self._lock:
            self._events.discard(future)

    def _patch_status(
        self, kind: Kind, name: str, namespace: str | None, patch: Obj, key: tuple[str, str], version: str
    ) -> None:
        try:
            written = self.api.patch(kind, name, {"status": patch}, namespace, subresource="status")
        except NotFound:
            return  # deleted meanwhile: nothing to report on
        except KubeError as exc:
            log.warning(
                "%s %s status not written (tried again next cycle): %s",
                kind.kind,
                f"{namespace}/{name}" if namespace else name,
                exc,
            )
            self.failures += 1
            return
        with self._lock:
            self._done[key] = (version, patch)
        if self.on_written is not None:
            self.on_written(kind, written)
