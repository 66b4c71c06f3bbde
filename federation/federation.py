"""The federation loop: read the hub (informers) and the members (a snapshot each heartbeat),
`planner.plan`, write. Every write is one the next plan would make again if it failed, so an error
is logged and the loop goes on; the state that matters lives in hub objects (labels, annotations,
status), so a restarted federation carries on where the last one stopped."""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lahar.api.cluster import Cluster
from lahar.api.job import STATUS_STATE, JobPhase
from lahar.api.kinds import CLUSTER, CONFIGMAP, JOB, NAMESPACE, PRIORITY_CLASS, QUEUE, SECRET, Kind
from lahar.api.queue import Queue
from lahar.client.api import KubeApi
from lahar.client.errors import AlreadyExists, Conflict, KubeError, NotFound
from lahar.client.events import EventRecorder, ObjectRef, rfc3339
from lahar.client.informer import Informer
from lahar.federation import copies, names
from lahar.federation.members import MemberProblem, Snapshot, connect, private_ca_dir, renew_lease, take_snapshot
from lahar.federation.members import cluster_status as next_cluster_status
from lahar.federation.placement import MemberView
from lahar.federation.planner import (
    Action,
    CreateCopy,
    DeleteCopy,
    Dispatch,
    Evict,
    HoldChange,
    HubJob,
    SetStatus,
    UpdateCopy,
    hub_job,
    plan,
)
from lahar.federation.policy import Policy

log = logging.getLogger("lahar.federation")

Obj = dict[str, Any]
Connector = Callable[[Cluster, "Mapping[str, Any] | None", Path], KubeApi]


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


@dataclass
class _Member:
    """What the loop keeps about one member between heartbeats."""

    api: KubeApi | None = None
    fingerprint: tuple[Any, ...] = ()  # endpoint, TLS setting, Secret version: a new one reconnects
    snapshot: Snapshot | None = None
    problem: MemberProblem | None = None
    probed_at: float = 0.0
    last_answer: float | None = None
    written_since_snapshot: bool = False  # its copies changed since the snapshot: not listed
    # Events mirrored to the hub: uid -> count told. None until the first snapshot of this run,
    # which only notes what is there (a restarted federation does not tell old news again).
    events_told: dict[str, int] | None = None


class Federation:
    def __init__(
        self,
        hub: KubeApi,
        policy: Policy,
        tick: float = 0.5,
        connector: Connector = connect,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hub = hub
        self.policy = policy
        self.tick = tick
        self.connector = connector
        self.clock = clock
        self.events = EventRecorder(hub, "lahar-federation")
        self._wake = threading.Event()
        self.jobs = Informer(JOB, hub, on_change=lambda _: self._wake.set())
        self.clusters = Informer(CLUSTER, hub, on_change=lambda _: self._wake.set())
        self.queues = Informer(QUEUE, hub)
        self.priority_classes = Informer(PRIORITY_CLASS, hub)
        self._informers = (self.jobs, self.clusters, self.queues, self.priority_classes)
        self._members: dict[str, _Member] = {}
        self._ca_dir = private_ca_dir()
        self._hub_jobs: dict[str, tuple[str, HubJob]] = {}  # uid -> (resourceVersion, view)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="federation-member")
        self.last_cycle_at = 0.0
        self.dispatched = 0  # copies created (what the bench counts)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        for informer in self._informers:
            informer.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="federation", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
        for informer in self._informers:
            informer.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def healthy(self) -> tuple[bool, str]:
        if self._thread is None or not self._thread.is_alive():
            return False, "the federation loop is not running"
        unsynced = [informer.name for informer in self._informers if not informer.has_synced]
        if unsynced:
            return False, f"not synced yet: {', '.join(unsynced)}"
        return True, "ok"

    def _run(self) -> None:
        for informer in self._informers:
            while not informer.wait_for_sync(1.0):
                if self._stop.is_set():
                    return
        first = True
        while not self._stop.is_set():
            try:
                self.run_once(probe_all=first)
                first = False
            except Exception:  # a bug in one cycle must not end the loop; the next starts afresh
                log.exception("federation cycle failed")
            self._wake.wait(self.tick)
            self._wake.clear()

    # --- one cycle -------------------------------------------------------------------------------

    def run_once(self, probe_all: bool = False) -> list[Action]:
        now = self.clock()
        clusters = {c["metadata"]["name"]: c for c in self.clusters.list()}
        for gone in set(self._members) - set(clusters):
            self._forget(gone)
        due = [
            name
            for name in clusters
            if probe_all or now - self._members.setdefault(name, _Member()).probed_at >= self.policy.heartbeat_period
        ]
        for name, _ in zip(due, self._pool.map(lambda n: self._probe(clusters[n], now), due), strict=True):
            self._write_cluster_status(clusters[name])
            self._mirror_events(name)
        views = {name: self._view(Cluster(obj)) for name, obj in clusters.items()}
        listed = {
            name: member.snapshot.copies
            for name, member in self._members.items()
            if member.snapshot is not None and member.problem is None and not member.written_since_snapshot
        }
        hub_queues = {q["metadata"]["name"]: Queue(q) for q in self.queues.list()}
        priorities = {
            pc["metadata"]["name"]: int(pc.get("value") or 0) for pc in self.priority_classes.list() if "metadata" in pc
        }
        jobs = [self._hub_job(obj, priorities) for obj in self.jobs.list()]
        present = {job.uid for job in jobs}
        self._hub_jobs = {uid: cached for uid, cached in self._hub_jobs.items() if uid in present}
        actions = plan(jobs, views, listed, hub_queues, self.policy, now)
        for action in actions:
            try:
                self._execute(action)
            except KubeError as exc:  # the next cycle plans it again
                log.warning("%s: %s (will retry)", type(action).__name__, exc)
        self.last_cycle_at = now
        return actions

    def _hub_job(self, obj: Obj, priorities: Mapping[str, int]) -> HubJob:
        metadata = obj.get("metadata") or {}
        uid, version = metadata.get("uid") or "", metadata.get("resourceVersion") or ""
        cached = self._hub_jobs.get(uid)
        if cached is not None and cached[0] == version:
            return cached[1]
        view = hub_job(obj, priorities)
        self._hub_jobs[uid] = (version, view)
        return view

    # --- members ---------------------------------------------------------------------------------

    def _probe(self, obj: Obj, now: float) -> None:
        cluster = Cluster(obj)
        member = self._members.setdefault(cluster.name, _Member())
        member.probed_at = now
        try:
            api = self._connection(cluster, member)
            snapshot = take_snapshot(cluster.name, api)
            renew_lease(cluster.name, api, snapshot.taken_at, self.policy.member_lease, self.policy.heartbeat_period)
            member.snapshot = snapshot
            member.problem = None
            # The heartbeat the hub counts redispatchAfter from is after the renewal was written:
            # the member times its lease from before that write (fence.py), so it stops its copies
            # before the hub moves them, however long the snapshot and the write took.
            member.last_answer = max(snapshot.taken_at, self.clock())
            member.written_since_snapshot = False
        except MemberProblem as problem:
            if member.problem is None or member.problem.reason != problem.reason:
                log.warning("member cluster %s: %s", cluster.name, problem.message)
            member.problem = problem
        except Exception as exc:  # whatever else a member answers, it is that member's problem alone
            log.exception("member cluster %s: unexpected answer", cluster.name)
            member.problem = MemberProblem("Unreachable", f"unexpected answer: {type(exc).__name__}")

    def _connection(self, cluster: Cluster, member: _Member) -> KubeApi:
        secret = None
        ref = cluster.secret_ref
        if ref is not None:
            try:
                secret = self.hub.get(SECRET, ref[1], ref[0])
            except NotFound:
                raise MemberProblem("SecretNotFound", f"the Secret {ref[0]}/{ref[1]} does not exist") from None
            except KubeError as exc:
                raise MemberProblem("SecretNotFound", f"the Secret {ref[0]}/{ref[1]} cannot be read: {exc}") from None
        version = (secret or {}).get("metadata", {}).get("resourceVersion")
        fingerprint = (cluster.endpoint, cluster.insecure_skip_tls_verify, ref, version)
        if member.api is None or member.fingerprint != fingerprint:
            member.api = self.connector(cluster, secret, self._ca_dir)
            member.fingerprint = fingerprint
        return member.api

    def _view(self, cluster: Cluster) -> MemberView:
        member = self._members.get(cluster.name) or _Member()
        snapshot = member.snapshot
        persisted = _parse_time(cluster.last_heartbeat)
        last = max((t for t in (member.last_answer, persisted) if t is not None), default=None)
        return MemberView(
            name=cluster.name,
            labels=cluster.labels,
            cost=cluster.cost,
            reachable=member.problem is None and snapshot is not None,
            unschedulable=cluster.unschedulable,
            known=snapshot is not None,
            node_allocatable=snapshot.node_allocatable if snapshot else (),
            node_free=snapshot.node_free if snapshot else (),
            queue_capability=snapshot.queue_capability if snapshot else {},
            last_heartbeat=last,
        )

    def _write_cluster_status(self, obj: Obj) -> None:
        member = self._members[obj["metadata"]["name"]]
        answered = member.snapshot if member.problem is None else None
        now = rfc3339(datetime.fromtimestamp(self.clock(), UTC))
        status = next_cluster_status(obj.get("status") or {}, answered, member.problem, now)
        if status == (obj.get("status") or {}):
            return
        try:
            self.hub.update_status(CLUSTER, {**obj, "status": status})
        except (Conflict, NotFound):
            pass  # changed or gone meanwhile: the next heartbeat writes it
        except KubeError as exc:
            log.warning("status of Cluster %s not written: %s", obj["metadata"]["name"], exc)

    def _mirror_events(self, name: str) -> None:
        """Tell each hub Job what its member copy's Events said (reason kept, message prefixed
        with the member's name)."""
        member = self._members[name]
        if member.snapshot is None or member.problem is not None:
            return
        keys = {c.key for c in member.snapshot.copies}
        told = copies.events_to_mirror(name, member.snapshot.events, keys, member.events_told or {})
        first = member.events_told is None
        member.events_told = member.events_told or {}
        for key, event_type, reason, message, uid, count in told:
            member.events_told[uid] = count
            job = self.jobs.get(key[1], key[0])
            if first or job is None or (job["metadata"].get("labels") or {}).get(names.CLUSTER_LABEL) != name:
                continue
            self._record(job, event_type, reason, message)
        present = {(e.get("metadata") or {}).get("uid") for e in member.snapshot.events}
        member.events_told = {uid: n for uid, n in member.events_told.items() if uid in present}  # expired: forgotten

    def _forget(self, name: str) -> None:
        """A Cluster deleted on the hub: delete the copies made there while the connection is still
        at hand, before its Jobs are placed elsewhere this same cycle (two copies must not run).
        A member that does not answer keeps them: the hub no longer knows how to reach it."""
        member = self._members.pop(name)
        if member.api is None:
            return
        try:
            found = member.api.list_all(JOB, label_selector=names.HUB_UID_LABEL)["items"]
        except KubeError as exc:
            log.warning("Cluster %s deleted; its copies are left there (it does not answer: %s)", name, exc)
            return
        for job in found:
            metadata = job["metadata"]
            log.info("Cluster %s deleted: deleting %s/%s there", name, metadata.get("namespace"), metadata["name"])
            try:
                member.api.delete(
                    JOB,
                    metadata["name"],
                    metadata.get("namespace"),
                    uid=metadata["uid"],
                    propagation_policy="Background",
                )
            except (NotFound, Conflict):
                continue
            except KubeError as exc:
                log.warning(
                    "Cluster %s deleted; %s/%s left there: %s", name, metadata.get("namespace"), metadata["name"], exc
                )

    def _member_api(self, name: str) -> KubeApi:
        member = self._members.get(name)
        if member is None or member.api is None:
            raise NotFound(404, "NotFound", f"member cluster {name} is not connected")
        return member.api

    # --- writing ---------------------------------------------------------------------------------

    def _execute(self, action: Action) -> None:
        if isinstance(action, Dispatch):
            self._dispatch(action)
        elif isinstance(action, CreateCopy):
            job = self.jobs.get(action.job[1], action.job[0])
            if job is not None:
                self._create_copy(job, action.member, action.placement)
        elif isinstance(action, DeleteCopy):
            self._delete_copy(action)
        elif isinstance(action, UpdateCopy):
            self._update_copy(action)
        elif isinstance(action, HoldChange):
            self._hold_change(action)
        elif isinstance(action, Evict):
            self._evict(action)
        elif isinstance(action, SetStatus):
            self._set_status(action)

    def _dispatch(self, action: Dispatch) -> None:
        job = self.jobs.get(action.job[1], action.job[0])
        if job is None:
            return
        placed = copy.deepcopy(job)
        metadata = placed["metadata"]
        metadata.setdefault("labels", {})[names.CLUSTER_LABEL] = action.member
        annotations = metadata.setdefault("annotations", {})
        annotations[names.PLACEMENT_ANNOTATION] = str(action.placement)
        annotations.pop(names.DISPATCHED_ANNOTATION, None)
        placed = self.hub.update(JOB, placed)  # the decision is on the hub before the member sees it
        status = {STATUS_STATE: {"phase": JobPhase.PENDING.value, "reason": action.reason, "message": action.message}}
        placed = self.hub.update_status(JOB, {**placed, "status": status})
        self._record(placed, "Normal", action.reason, action.message)
        self._create_copy(placed, action.member, action.placement)

    def _create_copy(self, job: Obj, member_name: str, placement: int) -> None:
        api = self._member_api(member_name)
        member = self._members[member_name]
        namespace = job["metadata"].get("namespace") or "default"
        member.written_since_snapshot = True
        _create_if_missing(api, NAMESPACE, copies.member_namespace(namespace))
        queue_name = (job.get("spec") or {}).get("queue") or "default"
        _create_if_missing(api, QUEUE, copies.member_queue(queue_name, self.queues.get(queue_name)))
        config_maps, secrets = copies.referenced(job)
        for kind, wanted in ((CONFIGMAP, config_maps), (SECRET, secrets)):
            for name in sorted(wanted):
                try:
                    source = self.hub.get(kind, name, namespace)
                except NotFound:
                    continue  # the member's pods report it as they would on the hub
                _create_or_replace(api, kind, copies.member_object(source))
        wanted_copy = copies.member_job(job, placement)
        try:
            api.create(JOB, wanted_copy, namespace)
            self.dispatched += 1
        except AlreadyExists:
            existing = api.get(JOB, job["metadata"]["name"], namespace)
            labels = existing["metadata"].get("labels") or {}
            hub_uid, existing_placement = labels.get(names.HUB_UID_LABEL), copies.copy_placement(existing) or 0
            if hub_uid != job["metadata"]["uid"] or existing_placement != placement:
                # A stale copy (an older placement, or of a hub Job deleted since) is removed and
                # this one made next cycle; a member's own Job of the name is left alone and the
                # hub Job waits; a newer placement means this read of the hub Job is behind.
                if hub_uid and (hub_uid != job["metadata"]["uid"] or existing_placement < placement):
                    api.delete(JOB, existing["metadata"]["name"], namespace, uid=existing["metadata"]["uid"])
                return
        self.hub.patch(
            JOB,
            job["metadata"]["name"],
            {"metadata": {"annotations": {names.DISPATCHED_ANNOTATION: str(placement)}}},
            namespace,
        )

    def _evict(self, action: Evict) -> None:
        """The hub Job back to pending (its placement number kept: the next placement is new, so
        the old copy is stale whatever happens next), then its copy deleted in the member."""
        job = self.jobs.get(action.job[1], action.job[0])
        if job is None:
            return
        pending = copy.deepcopy(job)
        metadata = pending["metadata"]
        metadata.setdefault("labels", {}).pop(names.CLUSTER_LABEL, None)
        metadata.setdefault("annotations", {}).pop(names.DISPATCHED_ANNOTATION, None)
        pending = self.hub.update(JOB, pending)  # Conflict: the next cycle decides again
        status = {STATUS_STATE: {"phase": JobPhase.PENDING.value, "reason": action.reason, "message": action.message}}
        pending = self.hub.update_status(JOB, {**pending, "status": status})
        self._record(pending, "Warning", action.reason, action.message)
        self._delete_copy(DeleteCopy(action.member, action.job, action.uid, action.message))

    def _delete_copy(self, action: DeleteCopy) -> None:
        api = self._member_api(action.member)
        self._members[action.member].written_since_snapshot = True
        log.info("deleting %s/%s in %s: %s", action.job[0], action.job[1], action.member, action.why)
        # NotFound: gone already; Conflict: a newer copy of the same name, nothing of the stale one left.
        with contextlib.suppress(NotFound, Conflict):
            api.delete(JOB, action.job[1], action.job[0], uid=action.uid, propagation_policy="Background")

    def _update_copy(self, action: UpdateCopy) -> None:
        job = self.jobs.get(action.job[1], action.job[0])
        if job is None:
            return
        api = self._member_api(action.member)
        current = api.get(JOB, action.job[1], action.job[0])
        if current["metadata"].get("uid") != action.uid:
            return  # not the copy the plan saw: the next snapshot tells
        self._members[action.member].written_since_snapshot = True
        api.update(JOB, copies.updated_copy(job, current, action.placement))  # Conflict: next cycle
        message = f"spec generation {action.generation} carried to the copy in {action.member}"
        self._record(job, "Normal", names.EVENT_SPEC_CARRIED, message)
        if (job["metadata"].get("annotations") or {}).get(names.HELD_GENERATION_ANNOTATION):
            patch = {"metadata": {"annotations": {names.HELD_GENERATION_ANNOTATION: None}}}
            self.hub.patch(JOB, action.job[1], patch, action.job[0])

    def _hold_change(self, action: HoldChange) -> None:
        job = self.jobs.get(action.job[1], action.job[0])
        if job is None:
            return
        patch = {"metadata": {"annotations": {names.HELD_GENERATION_ANNOTATION: str(action.generation)}}}
        updated = self.hub.patch(JOB, action.job[1], patch, action.job[0])
        self._record(updated, "Warning", names.EVENT_SPEC_HELD, action.message)

    def _set_status(self, action: SetStatus) -> None:
        job = self.jobs.get(action.job[1], action.job[0])
        if job is None:
            return
        updated = self.hub.update_status(JOB, {**job, "status": dict(action.status)})
        if action.event is not None:
            self._record(updated, *action.event)

    def _record(self, job: Obj, event_type: str, reason: str, message: str) -> None:
        metadata = job["metadata"]
        about = ObjectRef(JOB, metadata.get("namespace") or "default", metadata["name"], metadata.get("uid") or "")
        self.events.record(about, event_type, reason, message)


def _create_if_missing(api: KubeApi, kind: Kind, obj: Obj) -> None:
    with contextlib.suppress(AlreadyExists):
        api.create(kind, obj, obj["metadata"].get("namespace"))


def _create_or_replace(api: KubeApi, kind: Kind, obj: Obj) -> None:
    try:
        api.create(kind, obj, obj["metadata"].get("namespace"))
    except AlreadyExists:
        current = api.get(kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))
        if not (current["metadata"].get("labels") or {}).get(names.MANAGED_LABEL):
            return  # the member's own object of that name: never overwritten
        replaced = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        api.update(kind, replaced)
