"""The job controller's loop: informers feed a work queue of job keys; each reconcile reads the
caches, asks the pure lifecycle (controller/lifecycle.py) what should be, and performs the writes
(PodGroup, plugin objects, pods, status) through the API. Restart-safe: everything is derived
from the API's objects, pods have deterministic names, so a restarted controller neither
duplicates nor loses pods."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from lahar.api import kinds
from lahar.api.job import COMMAND_ANNOTATION, Job, JobPhase, TaskSpec, job_phase
from lahar.api.podgroup import PodGroupPhase
from lahar.api.queue import DEFAULT_QUEUE
from lahar.client.api import KubeApi
from lahar.client.errors import AlreadyExists, Conflict, KubeError, NotFound
from lahar.client.events import EventRecorder, ObjectRef
from lahar.client.informer import Informer, by_label
from lahar.controller.cronjobs import CronJobController
from lahar.controller.desired import desired_podgroup, desired_podgroup_spec, podgroup_spec_patch
from lahar.controller.jobflows import JobFlowController
from lahar.controller.lifecycle import (
    QUEUE_HOLD_REASONS,
    Decision,
    crash_loop_message,
    next_state,
    unschedulable_message,
)
from lahar.controller.metrics import JOB_KIND, QUEUE_KIND, ControllerMetrics
from lahar.controller.naming import JOB_NAME_KEY, podgroup_name
from lahar.controller.plugins import apply_on_pod, job_objects
from lahar.controller.plugins.objects import PLUGIN_KINDS, plugin_object_writes
from lahar.controller.queues import (
    QUEUE_COMMAND_ANNOTATION,
    PodGroupCounts,
    count_podgroup,
    current_state,
    queue_command,
    status_from_counts,
)
from lahar.controller.workqueue import Key, WorkQueue, still_there
from lahar.loop_health import LoopHealth

log = logging.getLogger("lahar.controller")

JOB_INDEX = "job"  # pods by "<namespace>/<job name>" (their job-name label)
QUEUE_INDEX = "queue"  # Jobs by the queue they name
CRASH_LOOP_EVENT = "PodCrashLooping"
POD_WRITERS = 8
DEFAULT_WORKERS = 4  # reconciles at once: each spends most of its time waiting on the API
PODGROUP_PENDING_EVENT = "PodGroupPending"  # Volcano's reason for the scheduler's word on the gang


def _queue_of(obj: dict[str, Any]) -> tuple[str, ...]:
    """The queue a Job or PodGroup is in: the one it names, else `default` (PodGroup.queue's rule)."""
    return ((obj.get("spec") or {}).get("queue") or DEFAULT_QUEUE,)


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def _plugin_mutator(pod: dict[str, Any], job: Job, task: TaskSpec, index: int) -> None:
    apply_on_pod(pod, dict(job.raw), task.name, index)


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that makes `old` into `new`: changed keys, nested maps
    patched key by key, and keys `new` drops sent as null at every depth, since a merge patch
    otherwise keeps them (a task's phase that no pod is in any more, restartingPods)."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif before != value or key not in old:
            patch[key] = value
    return patch


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that makes status `old` into `new` (None: nothing to write)."""
    return merge_patch(old, new) or None


class WritesFailed(KubeError):
    """Some pod creations or deletions of one reconcile failed; the others went through. The
    reconcile is retried, and the lifecycle asks for what is still missing."""

    def __init__(self, failures: list[str]) -> None:
        super().__init__(0, "WritesFailed", "; ".join(failures))


class JobController:
    def __init__(
        self,
        api: KubeApi,
        admission_required: bool = True,
        resync_seconds: float = 30.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.api = api
        self.workers = workers
        self.admission_required = admission_required
        self.resync_seconds = resync_seconds
        self.clock = clock
        self.events = EventRecorder(api, "lahar-controller", clock=clock)
        self.queue = WorkQueue()
        enqueue_job = lambda obj, *_: self.queue.add(_key(obj))  # noqa: E731
        self.jobs = Informer(kinds.JOB, api, on_change=enqueue_job)
        # PodGroups by queue and phase for the queues' status, moved by each PodGroup event (first,
        # so the queue reconcile the next handler queues reads the new counts).
        self._podgroup_counts = PodGroupCounts()
        self._podgroup_counts_lock = threading.Lock()
        self.podgroups = Informer(kinds.PODGROUP, api)
        self.podgroups.add_handler(
            lambda obj: self._count_podgroup(obj, obj),
            lambda _old, new: self._count_podgroup(new, new),
            lambda obj: self._count_podgroup(obj, None),
        )
        self.podgroups.add_handler(self._enqueue_owner, self._podgroup_updated, self._enqueue_owner)
        self.pods = Informer(
            kinds.POD,
            api,
            label_selector=JOB_NAME_KEY,
            on_add=self._enqueue_owner,
            on_update=self._pod_updated,
            on_delete=self._enqueue_owner,
        )
        self.queues = Informer(
            kinds.QUEUE, api, on_add=self._queue_changed, on_update=self._queue_changed, on_delete=self._queue_changed
        )
        # Indexes, so a reconcile reads its job's pods and a queue its jobs and PodGroups without
        # filtering every cached object.
        self.pods.add_index(JOB_INDEX, by_label(JOB_NAME_KEY))
        self.jobs.add_index(QUEUE_INDEX, _queue_of)
        self._informers = (self.jobs, self.podgroups, self.pods, self.queues)
        self.metrics = ControllerMetrics(self.jobs.list)
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self._resync_lock = threading.Lock()  # one worker resyncs; the others go on reconciling
        self._last_resync = time.monotonic()
        # The limits each worker's health is judged by; every worker has its own (worker_health),
        # so one wedged worker is not hidden by the others turning.
        self.loop_health = LoopHealth("reconcile loop")
        self.worker_health: list[LoopHealth] = []
        # Volcano's CronJobs make Jobs on a schedule; they run in the same process, beside the Jobs.
        self.cronjobs = CronJobController(api, clock)
        # A job's pod creations and deletions go out together (the API client pools 10 connections).
        self._writers = ThreadPoolExecutor(max_workers=POD_WRITERS, thread_name_prefix="job-controller-writes")
        self.jobflows = JobFlowController(api)  # and JobFlows make them from JobTemplates
        # Job uid -> (generation, active) its plugin objects were last made to match, so pod
        # events do not re-list them each time. Shared by the workers: under its lock.
        self._plugin_objects_synced: dict[str, tuple[int, bool]] = {}
        self._plugin_objects_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, sync_timeout: float = 30.0) -> None:
        for informer in self._informers:
            informer.start()
        for informer in self._informers:
            if not informer.wait_for_sync(sync_timeout):
                log.warning("%s informer not synced after %ss; reconciling as it fills", informer.name, sync_timeout)
        self.start_workers()
        self.cronjobs.start()
        self.jobflows.start()

    def start_workers(self) -> None:
        """The reconcile workers, each with its own health under loop_health's limits."""
        limits = self.loop_health
        self.worker_health = [
            LoopHealth(f"reconcile worker {n}", limits.stall_seconds, limits.failing_seconds, limits.clock)
            for n in range(self.workers)
        ]
        self._workers = [
            threading.Thread(target=self._run, args=(health,), name=f"job-controller-{n}", daemon=True)
            for n, health in enumerate(self.worker_health)
        ]
        for worker in self._workers:
            worker.start()

    def stop(self) -> None:
        self.jobflows.stop()
        self.cronjobs.stop()
        self._stop.set()
        self.queue.close()
        for worker in self._workers:
            worker.join(10)
        for informer in self._informers:
            informer.stop()
        self._writers.shutdown(wait=True)

    def live(self) -> tuple[bool, str]:
        """For /livez: every worker runs and the loop is not stuck (a restart cures that)."""
        if not self._workers or not all(worker.is_alive() for worker in self._workers):
            return False, "the reconcile loop is not running"
        return next((verdict for verdict in (h.live() for h in self.worker_health) if not verdict[0]), (True, "ok"))

    def healthy(self) -> tuple[bool, str]:
        """For /healthz and /readyz: live, every informer has listed once, and reconciles do not
        all keep failing."""
        alive, why = self.live()
        if not alive:
            return alive, why
        unsynced = [informer.name for informer in self._informers if not informer.has_synced]
        if unsynced:
            return False, f"not synced yet: {', '.join(unsynced)}"
        return self.workers_ready()

    def workers_ready(self) -> tuple[bool, str]:
        """Not ready while a worker's every reconcile has failed for longer than the limit."""
        return next((verdict for verdict in (h.ready() for h in self.worker_health) if not verdict[0]), (True, "ok"))

    def _run(self, health: LoopHealth) -> None:
        """One worker: keys off the queue, which never hands a key to two workers at once."""
        while not self._stop.is_set():
            self._maybe_resync()
            health.turned()
            key = self.queue.get()
            if key is None:
                continue
            health.turned(f"{key[0]}/{key[1]}" if key[0] else f"queue {key[1]}")
            try:
                with self.metrics.reconciling(JOB_KIND if key[0] else QUEUE_KIND):
                    self.reconcile(key)
                health.succeeded()
            except KubeError as exc:
                log.warning("reconcile %s/%s: %s; retrying", key[0], key[1], exc)
                health.failed(str(exc))
                self.queue.add(key, after=1.0)
            except Exception as exc:  # a bug in one job must not stop the others
                log.exception("reconcile %s/%s failed", *key)
                health.failed(f"{type(exc).__name__}: {exc}")
                self.queue.add(key, after=5.0)
            finally:
                self.queue.done(key)

    def _maybe_resync(self) -> None:
        """Every resync_seconds, one worker (whichever comes first) queues every job and queue:
        a safety net for missed events."""
        if time.monotonic() - self._last_resync <= self.resync_seconds:
            return
        if not self._resync_lock.acquire(blocking=False):
            return  # another worker is at it
        try:
            if time.monotonic() - self._last_resync <= self.resync_seconds:
                return  # it just did
            jobs = self.jobs.list()
            for obj in (*jobs, *self.queues.list()):
                self.queue.add(_key(obj))
            # Forget the plugin objects of jobs that are gone (their objects went with them).
            alive = {job["metadata"].get("uid") for job in jobs}
            with self._plugin_objects_lock:
                self._plugin_objects_synced = {u: s for u, s in self._plugin_objects_synced.items() if u in alive}
            self._last_resync = time.monotonic()
        finally:
            self._resync_lock.release()

    def _count_podgroup(self, obj: dict[str, Any], now: dict[str, Any] | None) -> None:
        with self._podgroup_counts_lock:
            count_podgroup(self._podgroup_counts, _key(obj), now)

    def queue_counts(self, name: str) -> dict[PodGroupPhase, int]:
        """The PodGroups of queue `name` by phase, as the PodGroup cache has them."""
        with self._podgroup_counts_lock:
            return dict(self._podgroup_counts.by_queue.get(name) or {})

    def _enqueue_owner(self, obj: dict[str, Any], *_: Any) -> None:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == kinds.PODGROUP.kind:  # its queue's counts change too
            self.queue.add(("", (obj.get("spec") or {}).get("queue") or "default"))
        job_name = (meta.get("labels") or {}).get(JOB_NAME_KEY)
        if job_name is None:
            owner = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == "Job"), None)
            job_name = owner.get("name") if owner else None
        if job_name:
            self.queue.add((meta.get("namespace", ""), job_name))

    def _pod_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """A Warning on the pod's Job when the pod starts crash-looping (its phase still says
        Running), so `kubectl describe` of the Job says why its pods do not run."""
        self._enqueue_owner(new)
        message = crash_loop_message(new)
        if message is None or crash_loop_message(old) is not None:
            return
        job = self._owner_job(new)
        if job is not None:
            self._record_event(job, CRASH_LOOP_EVENT, f"pod {new['metadata']['name']}: {message}", "Warning")

    def _podgroup_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Volcano's PodGroupPending Warning on the Job when the scheduler says why the gang
        cannot be admitted or placed (what is missing), once per new reason."""
        self._enqueue_owner(new)
        message = unschedulable_message(new)
        if message is None or message == unschedulable_message(old):
            return
        job = self._owner_job(new)
        if job is not None:
            meta = new["metadata"]
            self._record_event(
                job,
                PODGROUP_PENDING_EVENT,
                f"PodGroup {meta.get('namespace', '')}:{meta['name']} unschedulable, reason: {message}",
                "Warning",
            )

    def _owner_job(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        meta = obj.get("metadata") or {}
        name = (meta.get("labels") or {}).get(JOB_NAME_KEY) or next(
            (r.get("name") for r in meta.get("ownerReferences") or [] if r.get("kind") == "Job"), None
        )
        return self.jobs.get(name, meta.get("namespace", "")) if name else None

    def _queue_changed(self, *objs: dict[str, Any]) -> None:
        """A queue was added, updated or deleted: reconcile it, and the Pending jobs that wait for
        it (or that must now wait) when its existence or state changed. Count updates alone do
        not touch the jobs: they come with every PodGroup phase change."""
        new = objs[-1]
        name = new["metadata"]["name"]
        self.queue.add(("", name))
        if len(objs) == 2 and current_state(objs[0]) == current_state(new):
            return
        for job in self.jobs.by_index(QUEUE_INDEX, name):
            if job_phase(job) == JobPhase.PENDING:
                self.queue.add(_key(job))

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile(self, key: Key) -> Decision | None:
        namespace, name = key
        if not namespace:
            self.reconcile_queue(name)
            return None
        job_obj = self.jobs.get(name, namespace)
        if job_obj is None:
            return None  # deleted: the API's garbage collector removes what it owned
        job = Job.from_dict(job_obj)
        queue = self.queues.get(job.queue)
        queue_state = current_state(queue) if queue is not None else None
        podgroup = self.podgroups.get(podgroup_name(job), job.namespace)
        pods = self.pods.by_index(JOB_INDEX, f"{namespace}/{name}")
        command = (job_obj["metadata"].get("annotations") or {}).get(COMMAND_ANNOTATION)
        decision = next_state(
            job_obj,
            pods,
            podgroup,
            self.clock(),
            command=command,
            admission_required=self.admission_required,
            mutators=[_plugin_mutator],
            queue_state=queue_state,
        )
        makes_podgroup = decision.keeps_podgroup and podgroup is None and decision.reason not in QUEUE_HOLD_REASONS
        if (
            not decision.delete_job
            and (makes_podgroup or decision.pods_to_create)
            and not still_there(self.api, kinds.JOB, job_obj)
        ):
            return None  # deleted, and our cache has not seen it yet: what we made would outlive it
        if not decision.delete_job:
            # Before the pods: their env reads the svc ConfigMap, and the PodGroup names their gang.
            # On finishing, before the status too (Volcano's OnJobDelete comes first).
            self._sync_plugin_objects(job_obj, decision.keeps_podgroup)
            if decision.keeps_podgroup:
                self._sync_podgroup(job, podgroup, decision)
        self._apply(job_obj, decision)
        if not decision.delete_job and not decision.keeps_podgroup:
            self._sync_podgroup(job, podgroup, decision)
        if decision.requeue_after is not None:
            self.queue.add(key, after=max(decision.requeue_after, 0.1))
        return decision

    def reconcile_queue(self, name: str) -> None:
        """Queue state (Open / Closing / Closed on request) and Volcano's PodGroup counts."""
        queue = self.queues.get(name)
        if queue is None:
            return
        current = queue.get("status") or {}
        owned = status_from_counts(queue, self.queue_counts(name))
        status = {**current, **owned}
        if status != current:
            if status.get("state") != current.get("state"):
                log.info("queue %s: %s -> %s", name, current.get("state", "Open"), status["state"])
            # Only the fields the controller owns: the scheduler writes allocated/deserved, and a
            # merge patch of our (possibly older) copy of those would undo its latest write.
            changed = {key: value for key, value in owned.items() if current.get(key) != value}
            self.api.patch(kinds.QUEUE, name, {"status": changed}, subresource="status")
        if queue_command(queue) is not None and status.get("state") != "Closing":
            # Done (Open, or Closed): the request is consumed. Closing keeps it until the queue empties.
            self.api.patch(kinds.QUEUE, name, {"metadata": {"annotations": {QUEUE_COMMAND_ANNOTATION: None}}})

    def _sync_podgroup(self, job: Job, podgroup: dict[str, Any] | None, decision: Decision) -> None:
        """Create, update (scaling, a dependency met) or delete (the job finished) its PodGroup.
        A job held for its queue gets none yet: the scheduler has nothing to admit, and a
        Closing queue is not kept open by work that never started."""
        if not decision.keeps_podgroup:
            if podgroup is not None:
                with contextlib.suppress(NotFound):
                    self.api.delete(kinds.PODGROUP, podgroup_name(job), job.namespace)
                log.info("job %s/%s: %s, its PodGroup released", job.namespace, job.name, decision.phase)
            return
        if podgroup is None:
            if decision.reason in QUEUE_HOLD_REASONS:
                return
            with contextlib.suppress(AlreadyExists):
                self.api.create(kinds.PODGROUP, desired_podgroup(job, decision.runnable_tasks), job.namespace)
                log.info("job %s/%s: created its PodGroup", job.namespace, job.name)
            return
        patch = podgroup_spec_patch(podgroup.get("spec") or {}, desired_podgroup_spec(job, decision.runnable_tasks))
        if patch is not None:
            with contextlib.suppress(NotFound):
                self.api.patch(kinds.PODGROUP, podgroup_name(job), {"spec": patch}, job.namespace)

    def _sync_plugin_objects(self, job_obj: dict[str, Any], active: bool) -> None:
        """The plugins' Services, ConfigMaps, Secrets and NetworkPolicies: created, updated when
        the job changes (replicas: hosts files and ssh config), deleted when it finishes
        (Volcano's OnJobDelete) and made again if it starts over."""
        meta = job_obj["metadata"]
        uid, state = meta.get("uid", ""), (meta.get("generation", 0), active)
        with self._plugin_objects_lock:
            synced = self._plugin_objects_synced.get(uid)
        if not (job_obj.get("spec") or {}).get("plugins") or synced == state:
            return
        namespace, selector = meta.get("namespace", ""), f"{JOB_NAME_KEY}={meta['name']}"
        # kube-apiserver's list items carry no kind (the embedded server's do): stamp it, the
        # plugins find their objects (the ssh key's Secret) by kind and name.
        existing = [
            {**o, "kind": kind.kind, "apiVersion": kind.api_version}
            for kind in PLUGIN_KINDS.values()
            for o in self.api.list(kind, namespace, label_selector=selector)["items"]
        ]
        wanted = job_objects(job_obj, existing) if active else []
        for write in plugin_object_writes(existing, wanted):
            kind = PLUGIN_KINDS[write.kind]
            with contextlib.suppress(NotFound, AlreadyExists):
                if write.verb == "create":
                    self.api.create(kind, write.body, namespace)
                elif write.verb == "patch":
                    self.api.patch(kind, write.name, write.body, namespace)
                else:
                    self.api.delete(kind, write.name, namespace)
        with self._plugin_objects_lock:
            self._plugin_objects_synced[uid] = state

    def _apply(self, job_obj: dict[str, Any], decision: Decision) -> None:
        """Status first, then pods: a restart that is recorded (Restarting, retryCount, the pods
        to delete) before its deletions can be finished by the next reconcile if one fails,
        and is never read, or counted, twice. The status write carries the resourceVersion the
        decision was made on (as Volcano's UpdateStatus), so a decision taken on a cache that
        lags behind our own last write is refused (Conflict) instead of applied twice."""
        meta = job_obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if decision.delete_job:
            log.info(
                "job %s/%s: finished %ss ago, deleting (ttlSecondsAfterFinished)",
                namespace,
                name,
                (job_obj.get("spec") or {}).get("ttlSecondsAfterFinished"),
            )
            with contextlib.suppress(NotFound):
                self.api.delete(kinds.JOB, name, namespace)
            return
        old_status = job_obj.get("status") or {}
        patch = status_patch(old_status, decision.status)
        if patch is not None:
            try:
                self.api.patch(
                    kinds.JOB,
                    name,
                    {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": patch},
                    namespace,
                    subresource="status",
                )
            except Conflict:  # our view is stale: decide again on the fresh one, write nothing now
                self.queue.add((namespace, name), after=0.2)
                return
            if decision.action:
                self.metrics.action_taken(decision.action)
            self._announce(job_obj, old_status.get("state") or {}, decision)
        if decision.command_consumed:  # after the status: this write changes the resourceVersion
            self.api.patch(kinds.JOB, name, {"metadata": {"annotations": {COMMAND_ANNOTATION: None}}}, namespace)
        failures = [
            f"delete pod {d.name}: {exc}"
            for d, exc in self._each(decision.pods_to_delete, lambda d: self.api.delete(kinds.POD, d.name, namespace))
        ]
        # Deterministic names: a pod a previous run of this controller made is already there.
        failures += [
            f"create pod {p['metadata']['name']}: {exc}"
            for p, exc in self._each(decision.pods_to_create, lambda p: self.api.create(kinds.POD, p, namespace))
        ]
        if failures:
            self._record_event(job_obj, "FailedPodWrites", "; ".join(failures), "Warning")
            raise WritesFailed(failures)

    def _each(self, items: list[Any], write: Callable[[Any], Any]) -> list[tuple[Any, KubeError]]:
        """Apply `write` to every item, concurrently (as Volcano creates a job's pods), carrying on
        past failures; the failures, with their errors. NotFound (already deleted) and
        AlreadyExists (already created) are what was wanted."""

        def attempt(item: Any) -> KubeError | None:
            try:
                write(item)
            except (NotFound, AlreadyExists):
                return None
            except KubeError as exc:
                return exc
            return None

        results = list(self._writers.map(attempt, items)) if len(items) > 1 else [attempt(i) for i in items]
        return [(item, error) for item, error in zip(items, results, strict=True) if error is not None]

    def _announce(self, job_obj: dict[str, Any], old_state: dict[str, Any], decision: Decision) -> None:
        """Log and record an Event for a new phase, or a new reason in the same phase."""
        meta = job_obj["metadata"]
        old_phase = old_state.get("phase")
        if old_phase == decision.phase and old_state.get("reason", "") == decision.reason:
            return
        log.info(
            "job %s/%s: %s -> %s (%s)",
            meta.get("namespace", ""),
            meta["name"],
            old_phase or "-",
            decision.phase,
            decision.message or decision.reason,
        )
        held = decision.reason in QUEUE_HOLD_REASONS
        # The Event's reason is the new phase, or what changed within it (e.g. QueueNotOpen).
        reason = decision.reason if held or old_phase == decision.phase else str(decision.phase)
        warning = held or decision.phase == JobPhase.FAILED
        self._record_event(job_obj, reason, decision.message or decision.reason, "Warning" if warning else "Normal")

    def _record_event(self, job_obj: dict[str, Any], reason: str, message: str, event_type: str = "Normal") -> None:
        meta = job_obj["metadata"]
        about = ObjectRef(kinds.JOB, meta.get("namespace", ""), meta["name"], meta.get("uid", ""))
        self.events.record(about, event_type, reason, message or reason)
