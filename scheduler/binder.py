"""Binds and evictions: a session's decisions made real through the API, concurrently, while the
next cycle runs (Volcano's asynchronous binder, A.8).

Binds:
- every task of every batch is bound on a thread pool through `pods/binding`, with the pod's UID
  in the Binding so a pod re-created under the same name is never bound by mistake. KubeApi
  reads the answer raw, which is what `_preload_content=False` does for the official client (its
  generated method raises on the Status a successful bind returns, issues 547/825);
- the annotations the session wants on a pod (a GPU choice, `lahar.dev/gpu-index` or Volcano's
  `volcano.sh/gpu-index`, a vGPU assignment) are patched onto it before its bind, so the device
  plugin sees them by the time kubelet starts the pod;
- a bind answered Conflict or AlreadyExists because the pod is already bound to the node we
  chose (a previous run of the scheduler bound it) counts as bound;
- when a batch is done: all bound -> confirmed in the cache. Some failed -> the failed tasks are
  forgotten in the cache (pending again, placed by a later cycle), and if the gang's bound
  members no longer reach minMember on their own, they are **deleted** (UID precondition) so
  that no partial gang runs: Kubernetes has no unbind. A Job's controller re-creates deleted
  pods; bare pods of a PodGroup (Spark, Ray, ...) are gone, as with any deleted pod.

Evictions run on a pool of their own, so that a gang's binds never wait behind another gang's
evictions (a wave of preemptors queues hundreds). A victim that a PodDisruptionBudget may cover
(`Eviction.guarded`, from the session's budgets) goes through the policy/v1 Eviction API, which
checks the budget; any other is deleted directly, as kube-scheduler and Volcano delete their
victims: the Eviction API would find no budget and delete it too, after a read of the pod, a list
of the namespace's budgets and a status write of its own (on the bench's real API server under a
preemption wave: 1.3-1.7 s per eviction against 0.1-0.4 s per bind, docs/performance.md). Both
carry the victim's UID as precondition and a Warning Event on the victim. A refusal (a
PodDisruptionBudget: 429; a UID that no longer matches: Conflict) is forgotten in the cache, so
the victim counts as running again and a later cycle may choose differently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from lahar.api import kinds
from lahar.client.errors import AlreadyExists, Conflict, KubeError, NotFound
from lahar.client.events import EventRecorder, ObjectRef
from lahar.scheduler.framework.session import Eviction
from lahar.scheduler.metrics import SchedulerMetrics
from lahar.scheduler.model import BindBatch, TaskInfo
from lahar.scheduler.status import COMPONENT, job_ref

log = logging.getLogger("lahar.scheduler.binder")

EVICTION_EVENT_REASONS = {"preempt": "Preempted", "reclaim": "Reclaimed"}


class Assumptions(Protocol):
    """What the binder tells the cache (scheduler.cache.Cache)."""

    def confirm(self, uid: str) -> None: ...

    def forget(self, uid: str) -> None: ...


@dataclass
class BatchOutcome:
    """How one batch ended (for tests and logs)."""

    job: str
    bound: list[str] = field(default_factory=list)  # pod keys
    failed: dict[str, str] = field(default_factory=dict)  # pod key -> why
    rolled_back: list[str] = field(default_factory=list)  # pod keys deleted to undo a partial gang


def needs_rollback(others_ready: int, bound: int, failed: int, min_member: int) -> bool:
    """Whether a batch with failures must be undone: only when the gang's members placed outside
    this batch plus the ones this batch bound fall short of minMember."""
    return failed > 0 and bound > 0 and others_ready + bound < min_member


class _Batch:
    """A batch in flight: the last bind to finish completes it."""

    def __init__(self, batch: BindBatch, others_ready: int) -> None:
        self.batch = batch
        self.others_ready = others_ready
        self.remaining = len(batch.tasks)
        self.bound: list[TaskInfo] = []
        self.failed: list[tuple[TaskInfo, str]] = []
        self.bind_seconds: list[float] = []  # each bind call's time, for the metrics
        self.lock = threading.Lock()
        self.done: Future[BatchOutcome] = Future()

    def finish(self, task: TaskInfo, error: str | None) -> bool:
        """Record one task's result; True for the call that completed the batch."""
        with self.lock:
            if error is None:
                self.bound.append(task)
            else:
                self.failed.append((task, error))
            self.remaining -= 1
            return self.remaining == 0


class Binder:
    """Binds batches and evicts victims on a thread pool; `submit` and `evict` return at once."""

    def __init__(
        self,
        api: Any,
        cache: Assumptions,
        metrics: SchedulerMetrics | None = None,
        events: EventRecorder | None = None,
        workers: int = 32,
        evict_workers: int = 32,
    ) -> None:
        self.api = api
        self.cache = cache
        self.metrics = metrics
        self.events = events or EventRecorder(api, COMPONENT)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lahar-bind")
        self._evict_pool = ThreadPoolExecutor(max_workers=evict_workers, thread_name_prefix="lahar-evict")
        self._inflight: set[Future[Any]] = set()
        self._lock = threading.Lock()

    # -- binds -----------------------------------------------------------------------------------

    def submit(
        self, batches: Sequence[BindBatch], annotations: Mapping[str, Mapping[str, str]] | None = None
    ) -> list[Future[BatchOutcome]]:
        """Bind every batch (tasks already assumed in the cache). `annotations` maps a task's uid
        to the annotations to write on its pod first."""
        futures = []
        for batch in batches:
            if not batch.tasks:
                continue
            # Counted now: the session's job may still change, the decision was made with this.
            others_ready = max(batch.job.ready_count - len(batch.tasks), 0)
            state = _Batch(batch, others_ready)
            self._track(state.done)
            for task in batch.tasks:
                wanted = (annotations or {}).get(task.uid)
                self._track(self._pool.submit(self._bind_task, state, task, wanted))
            futures.append(state.done)
        return futures

    def _bind_task(self, state: _Batch, task: TaskInfo, annotations: Mapping[str, str] | None) -> None:
        started = time.perf_counter()
        error = bind_error(self.api, task, annotations)
        state.bind_seconds.append(time.perf_counter() - started)
        # The batch completes before the event is written: a gang's outcome need not wait for
        # the API to store its last pod's event.
        if state.finish(task, error):
            self._complete(state)
        if error is None:  # as kube-scheduler says it, on the pod (`kubectl describe pod`)
            self.events.record(
                ObjectRef(kinds.POD, task.namespace, task.name, task.uid),
                "Normal",
                "Scheduled",
                f"Successfully assigned {task.namespace}/{task.name} to {task.node}",
            )

    def _complete(self, state: _Batch) -> None:
        batch = state.batch
        outcome = BatchOutcome(batch.job.key, [t.key for t in state.bound], {t.key: why for t, why in state.failed})
        try:
            if self.metrics is not None:
                self.metrics.binds_done(state.bound, len(state.failed), state.bind_seconds)
            for task, why in state.failed:
                log.warning("bind of %s to %s failed: %s", task.key, task.node, why)
                self.cache.forget(task.uid)
            if needs_rollback(state.others_ready, len(state.bound), len(state.failed), batch.job.min_member):
                outcome.rolled_back = self._roll_back(state)
            for task in state.bound:
                self.cache.confirm(task.uid)
        except Exception as exc:  # never leave a waiter hanging
            log.exception("completing the binds of %s failed", batch.job.key)
            state.done.set_exception(exc)
            return
        state.done.set_result(outcome)

    def _roll_back(self, state: _Batch) -> list[str]:
        """Delete the bound members of a gang that cannot run whole (see the module docstring)."""
        job = state.batch.job
        failed = ", ".join(f"{task.name}: {why}" for task, why in state.failed[:3])
        message = (
            f"{len(state.failed)} of {len(state.batch.tasks)} binds failed ({failed}); deleting the "
            f"{len(state.bound)} bound pods so no partial gang runs (minMember {job.min_member})"
        )
        log.warning("gang %s rolled back: %s", job.key, message)
        if self.metrics is not None:
            self.metrics.gang_rollbacks.inc()
        self.events.record(job_ref(job), "Warning", "GangRolledBack", message)
        deleted = []
        for task in state.bound:
            try:
                self.api.delete(kinds.POD, task.name, task.namespace, uid=task.uid)
                deleted.append(task.key)
            except NotFound:
                deleted.append(task.key)
            except KubeError as exc:
                log.error("rollback of gang %s: pod %s not deleted: %s", job.key, task.key, exc)
        return deleted

    # -- evictions -------------------------------------------------------------------------------

    def evict(self, evictions: Sequence[Eviction]) -> list[Future[bool]]:
        """Evict the victims (already assumed Releasing in the cache); each future answers whether
        the eviction went through."""
        return [self._track(self._evict_pool.submit(self._evict_one, eviction)) for eviction in evictions]

    def _evict_one(self, eviction: Eviction) -> bool:
        task = eviction.task
        try:
            if eviction.guarded:
                self.api.evict(task.namespace, task.name, uid=task.uid)
            else:
                self.api.delete(kinds.POD, task.name, task.namespace, uid=task.uid)
        except NotFound:
            return True  # already gone: its room is free
        except KubeError as exc:  # a disruption budget (429), a UID mismatch, an unreachable API
            log.info("eviction of %s (%s) refused: %s", task.key, eviction.reason, exc)
            self.cache.forget(task.uid)
            return False
        if self.metrics is not None:
            self.metrics.evictions.labels(eviction.reason).inc()
        preemptor = f" to make room for {eviction.preemptor.key}" if eviction.preemptor is not None else ""
        self.events.record(
            ObjectRef(kinds.POD, task.namespace, task.name, task.uid),
            "Warning",
            EVICTION_EVENT_REASONS.get(eviction.reason, "Evicted"),
            f"evicted by the lahar scheduler ({eviction.reason}){preemptor}",
        )
        return True

    # -- lifecycle -------------------------------------------------------------------------------

    def _track(self, future: Future[Any]) -> Future[Any]:
        with self._lock:
            self._inflight.add(future)
        future.add_done_callback(self._untrack)
        return future

    def _untrack(self, future: Future[Any]) -> None:
        with self._lock:
            self._inflight.discard(future)

    def busy(self) -> int:
        with self._lock:
            return len(self._inflight)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every bind and eviction sent so far has finished; False on timeout."""
        with self._lock:
            pending = list(self._inflight)
        _, not_done = wait(pending, timeout)
        return not not_done

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._evict_pool.shutdown(wait=True)


def bind_error(api: Any, task: TaskInfo, annotations: Mapping[str, str] | None = None) -> str | None:
    """Bind one task to its node; None when the pod is bound there, else why not."""
    try:
        if annotations:
            api.patch(kinds.POD, task.name, {"metadata": {"annotations": dict(annotations)}}, task.namespace)
        api.bind(task.namespace, task.name, task.node, uid=task.uid)
        return None
    except (Conflict, AlreadyExists) as exc:
        return None if already_bound_here(api, task) else exc.message
    except KubeError as exc:
        return exc.message or str(exc)


def already_bound_here(api: Any, task: TaskInfo) -> bool:
    """Whether the pod (this very pod: same UID) is already bound to the node we chose."""
    try:
        pod = api.get(kinds.POD, task.name, task.namespace)
    except KubeError:
        return False
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return metadata.get("uid") == task.uid and spec.get("nodeName") == task.node
