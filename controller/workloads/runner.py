"""Runs the workload controllers (Deployment, ReplicaSet, StatefulSet, DaemonSet, batch/v1 Job
and CronJob) for single-machine mode: informers on those kinds, Nodes and Pods feed one work queue; each
reconcile asks a kind's `plan` what should be and writes it through the API. On a real cluster
kube-controller-manager does this, so `lahar controller` runs them only with `--workloads` (which `lahar up` passes)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import AlreadyExists, KubeError, NotFound
from lahar.client.events import EventRecorder, ObjectRef
from lahar.client.informer import Informer, by_owner
from lahar.controller.controller import WorkQueue
from lahar.controller.naming import JOB_NAME_KEY
from lahar.controller.workloads import cronjob, daemonset, deployment, job, replicaset, statefulset
from lahar.controller.workqueue import still_there

log = logging.getLogger("lahar.controller.workloads")

OWNER_INDEX = "owner"
UID_INDEX = "uid"
DEPLOYMENT_TAG, REPLICA_SET_TAG, JOB_TAG, CRONJOB_TAG = "deployment", "replicaset", "job", "cronjob"
STATEFUL_SET_TAG, DAEMON_SET_TAG, NAMESPACE_TAG = "statefulset", "daemonset", "namespace"
DEFAULT_SERVICE_ACCOUNT = "default"


def _uid(obj: dict[str, Any]) -> tuple[str, ...]:
    return (obj["metadata"]["uid"],)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class WorkloadControllers:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.events = EventRecorder(api, "lahar-workloads")
        self.queue = WorkQueue()
        self.deployments = self._tagged(kinds.DEPLOYMENT, DEPLOYMENT_TAG)
        self.replica_sets = Informer(kinds.REPLICA_SET, api, on_change=self._replica_set_changed)
        self.jobs = Informer(kinds.BATCH_JOB, api, on_change=self._job_changed)
        self.cronjobs = self._tagged(kinds.BATCH_CRONJOB, CRONJOB_TAG)
        self.stateful_sets = self._tagged(kinds.STATEFUL_SET, STATEFUL_SET_TAG)
        self.daemon_sets = self._tagged(kinds.DAEMON_SET, DAEMON_SET_TAG)
        # Any node added, changed or removed may change where every DaemonSet runs.
        self.nodes = Informer(kinds.NODE, api, on_change=self._node_changed)
        # Kubernetes' ServiceAccount controller: every namespace gets a `default` ServiceAccount.
        self.namespaces = self._tagged(kinds.NAMESPACE, NAMESPACE_TAG)
        self.service_accounts = Informer(
            kinds.SERVICE_ACCOUNT,
            api,
            on_delete=lambda obj, *_: self.queue.add((f"{NAMESPACE_TAG}/", obj["metadata"]["namespace"])),
        )
        # Only pods a workload may own: a Volcano Job's pods (the job controller's, labelled with
        # their job) are left out, so their every change is not decoded a second time in this
        # process (half of the controller's CPU in a 10,000-pod bench went to decoding pod events).
        self.pods = Informer(kinds.POD, api, label_selector=f"!{JOB_NAME_KEY}", on_change=self._pod_changed)
        # What start() queues once the caches are synced: each object under its kind's tag.
        self._tagged_informers = (
            (self.deployments, DEPLOYMENT_TAG),
            (self.replica_sets, REPLICA_SET_TAG),
            (self.jobs, JOB_TAG),
            (self.cronjobs, CRONJOB_TAG),
            (self.stateful_sets, STATEFUL_SET_TAG),
            (self.daemon_sets, DAEMON_SET_TAG),
            (self.namespaces, NAMESPACE_TAG),
        )
        for informer in (self.replica_sets, self.jobs, self.pods):
            informer.add_index(OWNER_INDEX, by_owner)
        for informer in (
            self.deployments,
            self.replica_sets,
            self.jobs,
            self.cronjobs,
            self.stateful_sets,
            self.daemon_sets,
        ):
            informer.add_index(UID_INDEX, _uid)
        self._informers = (
            self.deployments,
            self.replica_sets,
            self.jobs,
            self.cronjobs,
            self.stateful_sets,
            self.daemon_sets,
            self.nodes,
            self.namespaces,
            self.service_accounts,
            self.pods,
        )
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, sync_timeout: float = 30.0) -> None:
        for informer in self._informers:
            informer.start()
        for informer in self._informers:
            informer.wait_for_sync(sync_timeout)
        for informer, tag in self._tagged_informers:
            for obj in informer.list():
                self._enqueue(tag, obj)
        self._worker = threading.Thread(target=self._run, name="workload-controllers", daemon=True)
        self._worker.start()

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        if self._worker is not None:
            self._worker.join(10)
        for informer in self._informers:
            informer.stop()

    # -- events --------------------------------------------------------------------------------------

    def _tagged(self, kind: kinds.Kind, tag: str) -> Informer:
        """An informer that queues each added or changed object under `tag` (deletes need nothing:
        the garbage collector removes what the object owned)."""
        return Informer(
            kind,
            self.api,
            on_add=lambda obj, *_: self._enqueue(tag, obj),
            on_update=lambda old, new: self._enqueue(tag, new),
        )

    def _enqueue(self, tag: str, obj: dict[str, Any], after: float = 0.0) -> None:
        meta = obj.get("metadata") or {}
        self.queue.add((f"{tag}/{meta.get('namespace', '')}", meta.get("name", "")), after)

    def _enqueue_owner(self, obj: dict[str, Any], informer: Informer, tag: str) -> None:
        for uid in by_owner(obj):
            for owner in informer.by_index(UID_INDEX, uid):
                self._enqueue(tag, owner)

    def _replica_set_changed(self, obj: dict[str, Any], *_: Any) -> None:
        self._enqueue(REPLICA_SET_TAG, obj)
        self._enqueue_owner(obj, self.deployments, DEPLOYMENT_TAG)

    def _job_changed(self, obj: dict[str, Any], *_: Any) -> None:
        if not obj["metadata"].get("deletionTimestamp"):
            self._enqueue(JOB_TAG, obj)
        self._enqueue_owner(obj, self.cronjobs, CRONJOB_TAG)

    def _pod_changed(self, obj: dict[str, Any], *_: Any) -> None:
        self._enqueue_owner(obj, self.replica_sets, REPLICA_SET_TAG)
        self._enqueue_owner(obj, self.jobs, JOB_TAG)
        self._enqueue_owner(obj, self.stateful_sets, STATEFUL_SET_TAG)
        self._enqueue_owner(obj, self.daemon_sets, DAEMON_SET_TAG)

    def _node_changed(self, obj: dict[str, Any], *_: Any) -> None:
        for daemon in self.daemon_sets.list():
            self._enqueue(DAEMON_SET_TAG, daemon)

    def _run(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get()
            if key is None:
                continue
            (tag, namespace), name = key[0].split("/", 1), key[1]
            try:
                if tag == DEPLOYMENT_TAG:
                    self._sync_deployment(namespace, name)
                elif tag == JOB_TAG:
                    self._sync_job(namespace, name)
                elif tag == CRONJOB_TAG:
                    self._sync_cronjob(namespace, name)
                elif tag == STATEFUL_SET_TAG:
                    self._sync_stateful_set(namespace, name)
                elif tag == DAEMON_SET_TAG:
                    self._sync_daemon_set(namespace, name)
                elif tag == NAMESPACE_TAG:
                    self._sync_namespace(name)
                else:
                    self._sync_replica_set(namespace, name)
            except (KubeError, OSError) as exc:  # a conflict or a lost connection: try again shortly
                log.info("%s %s/%s: %s; retrying", tag, namespace, name, exc)
                self.queue.add(key, 1.0)
            except Exception:
                log.exception("%s %s/%s failed", tag, namespace, name)
                self.queue.add(key, 5.0)
            finally:
                self.queue.done(key)

    def _still_there(self, kind: kinds.Kind, obj: dict[str, Any]) -> bool:
        return still_there(self.api, kind, obj)

    def _create_and_delete_pods(
        self,
        ref: ObjectRef,
        owner: dict[str, Any],
        create: int,
        pod_for: Callable[[dict[str, Any]], dict[str, Any]],
        delete: Iterable[dict[str, Any]],
    ) -> bool:
        """Create `create` pods from the owner and delete the decided ones, each with its event;
        False (nothing done) when pods are to be created for an owner the API no longer has (the
        cache can lag a deletion, and pods made then would be orphans)."""
        if create and not self._still_there(ref.kind, owner):
            return False
        for _ in range(create):
            pod = self.api.create(kinds.POD, pod_for(owner), ref.namespace)
            self.events.record(ref, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
        for pod in delete:
            pod_name = pod["metadata"]["name"]
            try:
                self.api.delete(kinds.POD, pod_name, ref.namespace, uid=pod["metadata"]["uid"])
            except NotFound:
                continue
            self.events.record(ref, "Normal", "SuccessfulDelete", f"Deleted pod: {pod_name}")
        return True

    # -- ReplicaSets ---------------------------------------------------------------------------------

    def _sync_replica_set(self, namespace: str, name: str) -> None:
        rs = self.replica_sets.get(name, namespace)
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return
        pods = self.pods.by_index(OWNER_INDEX, rs["metadata"]["uid"])
        decided = replicaset.plan(rs, pods)
        ref = ObjectRef(kinds.REPLICA_SET, namespace, name, rs["metadata"]["uid"])
        if not self._create_and_delete_pods(ref, rs, decided.create, replicaset.pod_from_template, decided.delete):
            return
        if {**(rs.get("status") or {})} != decided.status:
            self.api.update_status(kinds.REPLICA_SET, {**rs, "status": decided.status})

    # -- Deployments ---------------------------------------------------------------------------------

    def _sync_deployment(self, namespace: str, name: str) -> None:
        obj = self.deployments.get(name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        owned = [
            rs for rs in self.replica_sets.by_index(OWNER_INDEX, obj["metadata"]["uid"]) if rs["metadata"].get("uid")
        ]
        decided = deployment.plan(obj, owned)
        ref = ObjectRef(kinds.DEPLOYMENT, namespace, name, obj["metadata"]["uid"])
        if decided.create is not None and self._still_there(kinds.DEPLOYMENT, obj):
            try:
                created = self.api.create(kinds.REPLICA_SET, decided.create, namespace)
            except AlreadyExists:
                created = None  # made by an earlier pass the cache has not seen yet
            if created is not None:
                replicas = created["spec"]["replicas"]
                self.events.record(
                    ref,
                    "Normal",
                    "ScalingReplicaSet",
                    f"Scaled up replica set {created['metadata']['name']} from 0 to {replicas}",
                )
        for rs_name, rs_annotations in decided.annotate.items():
            self.api.patch(kinds.REPLICA_SET, rs_name, {"metadata": {"annotations": rs_annotations}}, namespace)
        current = {rs["metadata"]["name"]: rs for rs in owned}
        for rs_name, replicas in decided.scale.items():
            before = int((current.get(rs_name, {}).get("spec") or {}).get("replicas", 0))
            self.api.patch(kinds.REPLICA_SET, rs_name, {"spec": {"replicas": replicas}}, namespace)
            direction = "up" if replicas > before else "down"
            self.events.record(
                ref,
                "Normal",
                "ScalingReplicaSet",
                f"Scaled {direction} replica set {rs_name} from {before} to {replicas}",
            )
        for rs_name in decided.delete:
            with contextlib.suppress(NotFound):
                self.api.delete(kinds.REPLICA_SET, rs_name, namespace)
        if decided.revision and (obj["metadata"].get("annotations") or {}).get(deployment.REVISION) != decided.revision:
            patch = {"metadata": {"annotations": {deployment.REVISION: decided.revision}}}
            obj = self.api.patch(kinds.DEPLOYMENT, name, patch, namespace)
        status = decided.status
        for condition in status.get("conditions", []):
            condition["lastUpdateTime"] = condition.get("lastUpdateTime") or _now()
            condition["lastTransitionTime"] = condition.get("lastTransitionTime") or _now()
        if (obj.get("status") or {}) != status:
            self.api.update_status(kinds.DEPLOYMENT, {**obj, "status": status})

    # -- Jobs ----------------------------------------------------------------------------------------

    def _sync_job(self, namespace: str, name: str) -> None:
        obj = self.jobs.get(name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        pods = self.pods.by_index(OWNER_INDEX, obj["metadata"]["uid"])
        decided = job.plan(obj, pods, datetime.now(UTC))
        ref = ObjectRef(kinds.BATCH_JOB, namespace, name, obj["metadata"]["uid"])
        if not self._create_and_delete_pods(ref, obj, decided.create, job.job_pod, decided.delete):
            return
        if (obj.get("status") or {}) != decided.status:
            self.api.update_status(kinds.BATCH_JOB, {**obj, "status": decided.status})
        for event_type, reason, message in decided.events:
            self.events.record(ref, event_type, reason, message)
        if decided.requeue_after is not None:
            self._enqueue(JOB_TAG, obj, decided.requeue_after + 0.5)

    # -- CronJobs ------------------------------------------------------------------------------------

    def _sync_cronjob(self, namespace: str, name: str) -> None:
        obj = self.cronjobs.get(name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        owned = self.jobs.by_index(OWNER_INDEX, obj["metadata"]["uid"])
        decided = cronjob.plan(obj, owned, datetime.now(UTC))
        for victim in decided.delete:
            with contextlib.suppress(NotFound):
                self.api.delete(kinds.BATCH_JOB, victim, namespace)
        if decided.create is not None and self._still_there(kinds.BATCH_CRONJOB, obj):
            with contextlib.suppress(AlreadyExists):  # made by an earlier pass the cache has not seen
                self.api.create(kinds.BATCH_JOB, decided.create, namespace)
        current = obj.get("status") or {}
        if decided.status != {key: value for key, value in current.items() if key in decided.status}:
            with contextlib.suppress(NotFound):
                self.api.patch(kinds.BATCH_CRONJOB, name, {"status": decided.status}, namespace, subresource="status")
        ref = ObjectRef(kinds.BATCH_CRONJOB, namespace, name, obj["metadata"]["uid"])
        for event_type, reason, message in decided.events:
            self.events.record(ref, event_type, reason, message)
        if decided.requeue_after is not None:
            self._enqueue(CRONJOB_TAG, obj, decided.requeue_after)

    # -- StatefulSets --------------------------------------------------------------------------------

    def _sync_stateful_set(self, namespace: str, name: str) -> None:
        obj = self.stateful_sets.get(name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        pods = self.pods.by_index(OWNER_INDEX, obj["metadata"]["uid"])
        decided = statefulset.plan(obj, pods)
        ref = ObjectRef(kinds.STATEFUL_SET, namespace, name, obj["metadata"]["uid"])
        if decided.create and not self._still_there(kinds.STATEFUL_SET, obj):
            return
        for index in decided.create:
            try:
                pod = self.api.create(kinds.POD, statefulset.stateful_pod(obj, index), namespace)
            except AlreadyExists:
                continue  # the old pod of that name is still going; its deletion brings us back
            message = f"create Pod {pod['metadata']['name']} in StatefulSet {name} successful"
            self.events.record(ref, "Normal", "SuccessfulCreate", message)
        for pod in decided.delete:
            pod_name = pod["metadata"]["name"]
            try:
                self.api.delete(kinds.POD, pod_name, namespace, uid=pod["metadata"]["uid"])
            except NotFound:
                continue
            self.events.record(
                ref, "Normal", "SuccessfulDelete", f"delete Pod {pod_name} in StatefulSet {name} successful"
            )
        if (obj.get("status") or {}) != decided.status:
            self.api.update_status(kinds.STATEFUL_SET, {**obj, "status": decided.status})

    # -- DaemonSets ----------------------------------------------------------------------------------

    def _sync_daemon_set(self, namespace: str, name: str) -> None:
        obj = self.daemon_sets.get(name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        pods = self.pods.by_index(OWNER_INDEX, obj["metadata"]["uid"])
        decided = daemonset.plan(obj, self.nodes.list(), pods)
        ref = ObjectRef(kinds.DAEMON_SET, namespace, name, obj["metadata"]["uid"])
        if decided.create and not self._still_there(kinds.DAEMON_SET, obj):
            return
        for node_name in decided.create:
            pod = self.api.create(kinds.POD, daemonset.daemon_pod(obj, node_name), namespace)
            self.events.record(ref, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
        for pod in decided.delete:
            pod_name = pod["metadata"]["name"]
            try:
                self.api.delete(kinds.POD, pod_name, namespace, uid=pod["metadata"]["uid"])
            except NotFound:
                continue
            self.events.record(ref, "Normal", "SuccessfulDelete", f"Deleted pod: {pod_name}")
        if (obj.get("status") or {}) != decided.status:
            self.api.update_status(kinds.DAEMON_SET, {**obj, "status": decided.status})

    # -- Namespaces ----------------------------------------------------------------------------------

    def _sync_namespace(self, name: str) -> None:
        """Make the namespace's `default` ServiceAccount when it lacks one (and is not going away)."""
        obj = self.namespaces.get(name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        if (obj.get("status") or {}).get("phase") == "Terminating":
            return
        if self.service_accounts.get(DEFAULT_SERVICE_ACCOUNT, name) is not None:
            return
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": name},
        }
        with contextlib.suppress(AlreadyExists):
            self.api.create(kinds.SERVICE_ACCOUNT, account, name)
