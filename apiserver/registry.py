"""Object lifecycle rules of the embedded API server: create, update, patch, delete, the status,
binding and eviction subresources, garbage collection of dependents. HTTP-free: every method
takes and returns dicts and raises ApiError, so the rules read (and test) without a socket."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lahar.api import admission, hypernode, kinds, queue
from lahar.api.errors import ValidationError
from lahar.api.kinds import Kind
from lahar.apiserver import errors, fieldmanager
from lahar.apiserver.disruption import eviction_refusal
from lahar.apiserver.errors import ApiError
from lahar.apiserver.fieldmanager import Manager
from lahar.apiserver.patch import MalformedPatchError, PatchError, UnsupportedPatchError, apply_patch, decode_apply
from lahar.apiserver.store import Entry, Store, resource_key
from lahar.apiserver.views import VIEWS, ViewStore

# Kinds whose server-side strategy keeps the status given at create (as kube-apiserver does for them).
KINDS_BY_RESOURCE = {resource_key(k): k for k in kinds.ALL_KINDS}
KINDS_BY_VERSION_KIND = {(k.api_version, k.kind): k for k in kinds.ALL_KINDS}
PROPAGATION_POLICIES = ("Background", "Foreground", "Orphan")
# Kinds whose strategy keeps metadata.generation (kube-apiserver's: workloads, pods, PDBs, and
# every custom resource); ConfigMaps, Secrets, Namespaces, Nodes, Events, Leases... have none.
GENERATION_KINDS = {
    kinds.POD,
    kinds.PDB,
    kinds.DEPLOYMENT,
    kinds.REPLICA_SET,
    kinds.BATCH_JOB,
    kinds.BATCH_CRONJOB,
    kinds.STATEFUL_SET,
    kinds.DAEMON_SET,
    kinds.JOB,
    kinds.PODGROUP,
    kinds.QUEUE,
}
FOREGROUND_FINALIZER = "foregroundDeletion"
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}
PROTECTED_NAMESPACES = {"default", "kube-system", "kube-public"}
DEFAULT_GRACE_SECONDS = 30
# Kinds that strategic merge patch serves (built-in kinds); custom resources answer 415, as in k8s.
STRATEGIC_KINDS = {
    k for k in kinds.ALL_KINDS if k.group in ("", "apps", "batch", "policy", "scheduling.k8s.io", "coordination.k8s.io")
}


def now_rfc3339(at: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if at is None else at, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(obj))


def _with_new_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    """A stored object to change the metadata of: its own top level and metadata, every other
    part shared with the stored one (which nobody changes), instead of a deep copy of it all."""
    return {**obj, "metadata": dict(obj["metadata"])}


def _without(obj: dict[str, Any], *fields: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in fields}


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    """Everything a generation counts: all but metadata and status."""
    return _without(obj, "metadata", "status", "apiVersion", "kind")


@dataclass(frozen=True)
class KindBehaviour:
    """What the server does for one kind beyond storing it (the strategy kube-apiserver keeps per
    resource). A kind without an entry is stored as sent, less its status."""

    keeps_status_on_create: bool = False
    on_create: Callable[[dict[str, Any]], None] | None = None  # fills server-set fields, may refuse
    check_update: Callable[[dict[str, Any], dict[str, Any]], None] | None = None  # (old, new); refuses
    undeletable: Mapping[str, str] = field(default_factory=dict)  # name -> why it may not be deleted
    grace_seconds: Callable[[dict[str, Any], dict[str, Any]], int] | None = None  # (obj, delete options)
    after_remove: Callable[[str], None] | None = None  # the removed object's name


PLAIN = KindBehaviour()


def _namespace_active(namespace: dict[str, Any]) -> None:
    namespace["status"] = {"phase": "Active"}


class Registry:
    def __init__(self, store: Store, call_at: Callable[[float, Callable[[], None]], None] | None = None) -> None:
        self.store = ViewStore(store)  # events.k8s.io/v1 Events read and written as the core/v1 ones they are
        # Runs a function at a wall-clock time: the end of a pod's grace period.
        self.call_at = call_at or (lambda *_: None)
        self.behaviours: dict[Kind, KindBehaviour] = {
            kinds.NODE: KindBehaviour(keeps_status_on_create=True),
            kinds.NAMESPACE: KindBehaviour(
                on_create=_namespace_active,
                undeletable=dict.fromkeys(PROTECTED_NAMESPACES, "this namespace may not be deleted"),
                after_remove=self._empty_namespace,
            ),
            kinds.POD: KindBehaviour(
                on_create=self._resolve_priority, check_update=self._check_pod_update, grace_seconds=self._pod_grace
            ),
            kinds.QUEUE: KindBehaviour(
                on_create=lambda obj: self._refuse_queue_loop(obj["metadata"]["name"], obj),
                check_update=lambda old, new: self._refuse_queue_loop(old["metadata"]["name"], new),
                undeletable={"default": "the default queue may not be deleted"},
            ),
            kinds.HYPERNODE: KindBehaviour(
                on_create=lambda obj: self._refuse_hypernode_loop(obj["metadata"]["name"], obj),
                check_update=lambda old, new: self._refuse_hypernode_loop(old["metadata"]["name"], new),
            ),
        }

    def behaviour(self, kind: Kind) -> KindBehaviour:
        return self.behaviours.get(kind, PLAIN)

    # -- bootstrap -------------------------------------------------------------------------------

    def ensure_defaults(self) -> None:
        """Objects that always exist: the standard namespaces and Volcano's default queue."""
        for name in ("default", "kube-system", "kube-public"):
            if self.store.get(kinds.NAMESPACE, "", name) is None:
                self.create(kinds.NAMESPACE, None, {"metadata": {"name": name}})
        for name, value in SYSTEM_PRIORITY_CLASSES.items():
            if self.store.get(kinds.PRIORITY_CLASS, "", name) is None:
                self.create(
                    kinds.PRIORITY_CLASS,
                    None,
                    {"metadata": {"name": name}, "value": value, "description": "built in, as in Kubernetes"},
                )
        if self.store.get(kinds.QUEUE, "", "default") is None:
            self.create(
                kinds.QUEUE, None, {"metadata": {"name": "default"}, "spec": {"weight": 1, "reclaimable": True}}
            )
        for entry in self.store.entries(kinds.POD):
            deadline = entry.obj["metadata"].get("deletionTimestamp")
            if deadline:
                self._remove_at(entry.obj["metadata"], _parse_time(deadline))

    # -- helpers ---------------------------------------------------------------------------------

    def require(self, kind: Kind, namespace: str, name: str) -> Entry:
        entry = self.store.get(kind, namespace if kind.namespaced else "", name)
        if entry is None:
            raise errors.not_found(kind, name)
        return entry

    def _require_namespace(self, kind: Kind, namespace: str) -> None:
        if kind.namespaced and self.store.get(kinds.NAMESPACE, "", namespace) is None:
            raise errors.not_found(kinds.NAMESPACE, namespace)
        if kind.namespaced:
            ns = self.store.get(kinds.NAMESPACE, "", namespace)
            if ns is not None and ns.obj["metadata"].get("deletionTimestamp"):
                raise errors.forbidden(
                    f"unable to create new content in namespace {namespace} because it is being terminated"
                )

    def _admit(self, kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        obj = admission.apply_defaults(kind, obj)
        try:
            admission.validate(kind, obj, old)
        except ValidationError as exc:
            raise errors.invalid(
                kind, obj.get("metadata", {}).get("name", ""), [(e.field, e.message, e.reason) for e in exc.errors]
            ) from exc
        return obj

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = str(self.store.next_revision())
        return obj

    def _check_identity(self, kind: Kind, obj: Any, namespace: str | None) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise errors.bad_request("the request body must be a JSON object")
        api_version, kind_name = obj.get("apiVersion"), obj.get("kind")
        if api_version is not None and api_version != kind.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({kind.api_version})"
            )
        if kind_name is not None and kind_name != kind.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind_name}) does not match the expected kind ({kind.kind})"
            )
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if kind.namespaced:
            given = meta.get("namespace")
            if given and namespace and given != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = given or namespace or "default"
        else:
            meta.pop("namespace", None)
        # apiVersion and kind lead, as kube-apiserver writes them.
        return {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")},
        }

    # -- create ----------------------------------------------------------------------------------

    def create(
        self, kind: Kind, namespace: str | None, body: Any, dry_run: bool = False, manager: Manager | None = None
    ) -> dict[str, Any]:
        """Create an object; with a manager its managedFields record the write (an Update that owns
        every field set), without one (the server's own objects, an apply) they stay as given."""
        obj = self._check_identity(kind, _copy(body) if isinstance(body, dict) else body, namespace)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise errors.invalid(
                kind, "", [("metadata.name", "name or generateName is required", "FieldValueRequired")]
            )
        ns = meta.get("namespace", "")
        self._require_namespace(kind, ns)
        if self.store.get(kind, ns, meta["name"]) is not None:
            raise errors.already_exists(kind, meta["name"])
        for server_field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(server_field, None)
        behaviour = self.behaviour(kind)
        if kind.has_status and not behaviour.keeps_status_on_create:
            obj.pop("status", None)
        if behaviour.on_create is not None:
            behaviour.on_create(obj)
        # The body's managedFields, which a manager's write replaces: neither defaulted nor copied.
        sent_managed = obj["metadata"].pop("managedFields", None) if manager is not None else None
        obj = self._admit(kind, obj, None)
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if kind in GENERATION_KINDS:
            meta["generation"] = 1
        if manager is not None:
            _set_managed_fields(obj, fieldmanager.record_update(kind, None, obj, sent_managed, manager))
        if dry_run:
            meta["resourceVersion"] = ""
            return obj
        return self.store.put(kind, self._stamp(obj)).obj

    def _resolve_priority(self, pod: dict[str, Any]) -> None:
        """The Priority admission plugin: a pod's priority comes from its PriorityClass (or the
        global default class), never from the pod itself."""
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return  # validation reports it
        name = pod["metadata"]["name"]
        class_name = spec.get("priorityClassName")
        priority_class: dict[str, Any] | None
        if class_name:
            entry = self.store.get(kinds.PRIORITY_CLASS, "", str(class_name))
            if entry is None:
                raise errors.forbidden(f'pods "{name}" is forbidden: no PriorityClass with name {class_name} was found')
            priority_class = entry.obj
        else:
            priority_class = next(
                (e.obj for e in self.store.entries(kinds.PRIORITY_CLASS) if e.obj.get("globalDefault")), None
            )
        value = int(priority_class.get("value", 0)) if priority_class else 0
        if spec.get("priority") is not None and spec["priority"] != value:
            raise errors.forbidden(
                f'pods "{name}" is forbidden: the integer value of priority ({spec["priority"]}) '
                f"must not be provided in pod spec; priority admission controller computed "
                f"{value} from the given PriorityClass name"
            )
        spec["priority"] = value
        if priority_class:
            spec["priorityClassName"] = priority_class["metadata"]["name"]
            spec.setdefault("preemptionPolicy", priority_class.get("preemptionPolicy", "PreemptLowerPriority"))

    def _refuse_queue_loop(self, name: str, obj: dict[str, Any]) -> None:
        """Loops in the queue tree span several Queues, so no one object's validation sees them:
        refuse the write that would close one."""
        parents = {e.obj["metadata"]["name"]: queue.parent_of(e.obj) for e in self.store.entries(kinds.QUEUE)}
        loop = queue.parent_loop(name, queue.parent_of(obj), parents)
        if loop:
            raise errors.invalid(
                kinds.QUEUE,
                name,
                [("spec.parent", f"the queue tree would loop: {' -> '.join(map(str, loop))}", "FieldValueInvalid")],
            )

    def _refuse_hypernode_loop(self, name: str, obj: dict[str, Any]) -> None:
        """As for queues: refuse the HyperNode write that would close a loop of members."""
        members_of = {
            e.obj["metadata"]["name"]: hypernode.member_hypernodes(e.obj) for e in self.store.entries(kinds.HYPERNODE)
        }
        loop = hypernode.member_loop(name, hypernode.member_hypernodes(obj), members_of)
        if loop:
            raise errors.invalid(
                kinds.HYPERNODE,
                name,
                [
                    (
                        "spec.members",
                        f"the HyperNode tree would loop: {' -> '.join(map(str, loop))}",
                        "FieldValueInvalid",
                    )
                ],
            )

    # -- update ----------------------------------------------------------------------------------

    def update(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        body: Any,
        subresource: str = "",
        dry_run: bool = False,
        manager: Manager | None = None,
    ) -> dict[str, Any]:
        obj = self._check_identity(kind, _copy(body) if isinstance(body, dict) else body, namespace)
        current = self.require(kind, namespace or "", name)
        return self._replace(kind, current, obj, subresource, dry_run, manager)

    def _replace(
        self,
        kind: Kind,
        current: Entry,
        obj: dict[str, Any],
        subresource: str,
        dry_run: bool,
        manager: Manager | None = None,
        managed_fields: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Write obj over current. managedFields: those an apply computed, else those an Update by
        manager leaves, else (the server's own writes) the current ones."""
        old = current.obj
        sent_managed = fieldmanager.sent_managed_fields(obj)  # before obj's metadata is changed below
        old_meta, meta = old["metadata"], obj["metadata"]
        name = old_meta["name"]
        if meta.get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        given_rv = meta.get("resourceVersion")
        if given_rv and given_rv != old_meta["resourceVersion"]:
            raise errors.stale(kind, name)
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise errors.conflict(
                kind,
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {old_meta['uid']}",
            )
        if subresource == "status":
            # The status endpoint changes status alone.
            new = {**old, "metadata": dict(old_meta), "status": obj.get("status") or {}}
        else:
            new = obj
            if kind.has_status:  # and the main endpoint everything but status
                new.pop("status", None)
                if "status" in old:
                    new["status"] = old["status"]
            check_update = self.behaviour(kind).check_update
            if check_update is not None:
                check_update(old, new)
        new_meta = new["metadata"] = dict(new["metadata"])
        for server_field in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
        ):
            if server_field in old_meta:
                new_meta[server_field] = old_meta[server_field]
            else:
                new_meta.pop(server_field, None)
        new_meta.pop("generation", None)
        new_meta.pop("managedFields", None)  # set below, whoever writes: neither defaulted nor copied
        new = self._admit(kind, new, old)
        if managed_fields is None and manager is not None:
            managed_fields = fieldmanager.record_update(kind, old, new, sent_managed, manager)
        _set_managed_fields(new, managed_fields if managed_fields is not None else old_meta.get("managedFields"))
        # generation counts changes of the (defaulted) spec; a write that changes nothing is no write.
        if kind in GENERATION_KINDS:
            new["metadata"]["generation"] = old_meta.get("generation", 1) + (_spec_part(new) != _spec_part(old))
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if dry_run or new == old:
            return old if new == old else new
        return self.store.put(kind, self._stamp(new)).obj

    @staticmethod
    def _check_pod_update(old: dict[str, Any], new: dict[str, Any]) -> None:
        old_node = (old.get("spec") or {}).get("nodeName")
        new_node = (new.get("spec") or {}).get("nodeName")
        if old_node != new_node:
            raise errors.invalid(
                kinds.POD,
                old["metadata"]["name"],
                [
                    (
                        "spec.nodeName",
                        "pod updates may not change spec.nodeName; bind a pod through the binding subresource",
                        "FieldValueForbidden",
                    )
                ],
            )

    # -- patch -----------------------------------------------------------------------------------

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        body: bytes,
        content_type: str,
        subresource: str = "",
        dry_run: bool = False,
        manager: Manager | None = None,
    ) -> dict[str, Any]:
        current = self.require(kind, namespace or "", name)
        try:
            patched = apply_patch(current.obj, body, content_type, kind.kind, kind in STRATEGIC_KINDS)
        except UnsupportedPatchError as exc:
            raise ApiError(415, "UnsupportedMediaType", str(exc)) from exc
        except MalformedPatchError as exc:
            raise errors.bad_request(str(exc)) from exc
        except PatchError as exc:
            raise ApiError(422, "Invalid", str(exc)) from exc
        patched = self._check_identity(kind, patched, namespace)
        return self._replace(kind, current, patched, subresource, dry_run, manager)

    def apply(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        body: bytes,
        manager: Manager,
        subresource: str = "",
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply (application/apply-patch+yaml): (the object, whether it was created).
        An object that does not exist is created from the configuration."""
        try:
            config = decode_apply(body)
        except MalformedPatchError as exc:
            raise errors.bad_request(str(exc)) from exc
        if not isinstance(config, dict):
            raise errors.bad_request("the applied configuration must be an object")
        for field_name in ("apiVersion", "kind"):
            if not config.get(field_name):
                raise errors.bad_request(f"{field_name} must be set in an applied configuration")
        config = self._check_identity(kind, config, namespace)
        given = config["metadata"].get("name")
        if given is not None and given != name:
            raise errors.bad_request(f"the name of the object ({given}) does not match the name on the URL ({name})")
        config["metadata"]["name"] = name
        current = self.store.get(kind, config["metadata"].get("namespace", "") if kind.namespaced else "", name)
        if current is None and subresource:
            raise errors.not_found(kind, name)
        try:
            merged, managed_fields = fieldmanager.apply(kind, current.obj if current else None, config, manager)
        except fieldmanager.ConflictError as exc:
            raise ApiError(409, "Conflict", str(exc), {"causes": exc.causes}) from exc
        except fieldmanager.FieldManagerError as exc:
            raise errors.bad_request(str(exc)) from exc
        if current is None:
            _set_managed_fields(merged, managed_fields)
            return self.create(kind, namespace, merged, dry_run), True
        merged = self._check_identity(kind, merged, namespace)
        return self._replace(kind, current, merged, subresource, dry_run, None, managed_fields), False

    # -- delete ----------------------------------------------------------------------------------

    def delete(
        self, kind: Kind, namespace: str | None, name: str, options: dict[str, Any] | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        options = options or {}
        current = self.require(kind, namespace or "", name)
        meta = current.obj["metadata"]
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
            raise errors.conflict(
                kind,
                name,
                f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object meta: {meta['uid']}",
            )
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta["resourceVersion"]:
            raise errors.conflict(
                kind, name, "Precondition failed: the resourceVersion in the precondition does not match the object"
            )
        behaviour = self.behaviour(kind)
        if name in behaviour.undeletable:
            resource = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
            raise errors.forbidden(f'{resource} "{name}" is forbidden: {behaviour.undeletable[name]}')
        if dry_run:
            return current.obj
        policy = options.get("propagationPolicy") or "Background"
        if policy not in PROPAGATION_POLICIES:
            raise errors.bad_request(
                f"propagationPolicy must be one of {', '.join(PROPAGATION_POLICIES)}, not {policy!r}"
            )
        if policy == "Foreground" and self.store.dependents(meta["uid"]):
            return self._delete_foreground(kind, current)
        if behaviour.grace_seconds is not None:
            grace = behaviour.grace_seconds(current.obj, options)
            if grace > 0:
                return self._mark_terminating(current, grace)
        if policy == "Orphan":
            self._orphan_dependents(meta["uid"])
        return self._remove(kind, current, policy != "Orphan")

    def _delete_foreground(self, kind: Kind, current: Entry) -> dict[str, Any]:
        """Foreground deletion: the owner stays, marked (deletionTimestamp, the foregroundDeletion
        finalizer), until its dependents are gone; each dependent is deleted in the foreground too.
        The last dependent's removal removes the owner (_release_foreground_owners)."""
        obj = _with_new_metadata(current.obj)
        meta = obj["metadata"]
        meta.setdefault("deletionTimestamp", now_rfc3339())
        meta["deletionGracePeriodSeconds"] = 0
        meta["finalizers"] = [*(meta.get("finalizers") or []), FOREGROUND_FINALIZER]
        marked = self.store.put(kind, self._stamp(obj)).obj
        for resource, namespace, name in self.store.dependents(meta["uid"]):
            dependent = self.store.get(KINDS_BY_RESOURCE[resource], namespace, name)
            if dependent is not None and not dependent.obj["metadata"].get("deletionTimestamp"):
                self.delete(KINDS_BY_RESOURCE[resource], namespace, name, {"propagationPolicy": "Foreground"})
        self._release_foreground_owner(kind, meta["namespace"] if kind.namespaced else "", meta["name"])
        return marked

    def _release_foreground_owner(self, kind: Kind, namespace: str, name: str) -> None:
        entry = self.store.get(kind, namespace, name)
        if entry is None or FOREGROUND_FINALIZER not in (entry.obj["metadata"].get("finalizers") or []):
            return
        if not self.store.dependents(entry.obj["metadata"]["uid"]):
            self._remove(kind, entry, cascade=False)

    def _orphan_dependents(self, owner_uid: str) -> None:
        """Orphan deletion: dependents stay, without the ownerReference to the deleted owner."""
        for resource, namespace, name in self.store.dependents(owner_uid):
            dependent_kind = KINDS_BY_RESOURCE[resource]
            entry = self.store.get(dependent_kind, namespace, name)
            if entry is None:
                continue
            obj = _with_new_metadata(entry.obj)
            refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)
            self.store.put(dependent_kind, self._stamp(obj))

    @staticmethod
    def _pod_grace(pod: dict[str, Any], options: dict[str, Any]) -> int:
        """Pods on a node get their grace period; unbound or finished pods go at once, as kubelet would."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        existing = pod["metadata"].get("deletionGracePeriodSeconds")
        if existing is not None:
            grace = min(int(grace), int(existing))
        return max(int(grace), 0)

    def _mark_terminating(self, current: Entry, grace: int) -> dict[str, Any]:
        obj = _with_new_metadata(current.obj)
        meta = obj["metadata"]
        deadline = time.time() + grace
        meta["deletionTimestamp"] = now_rfc3339(deadline)
        meta["deletionGracePeriodSeconds"] = grace
        entry = self.store.put(kinds.POD, self._stamp(obj))
        self._remove_at(meta, deadline)
        return entry.obj

    def _remove_at(self, meta: dict[str, Any], deadline: float) -> None:
        """The end of a pod's grace period: what kubelet's final delete does on a real node."""
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]

        def remove() -> None:
            entry = self.store.get(kinds.POD, namespace, name)
            # Not a pod recreated under the same name since, nor one already gone.
            if entry is not None and entry.obj["metadata"]["uid"] == uid:
                self._remove(kinds.POD, entry, cascade=True)

        self.call_at(deadline, remove)

    def _remove(self, kind: Kind, current: Entry, cascade: bool) -> dict[str, Any]:
        meta = current.obj["metadata"]
        removed = self.store.remove(kind, meta.get("namespace", ""), meta["name"])
        after_remove = self.behaviour(kind).after_remove
        if after_remove is not None:
            after_remove(meta["name"])
        if cascade:
            self._collect_dependents(meta["uid"])
        # An owner deleted in the foreground goes when its last dependent does.
        for ref in meta.get("ownerReferences") or []:
            owner_kind = KINDS_BY_VERSION_KIND.get((ref.get("apiVersion", ""), ref.get("kind", "")))
            if owner_kind is not None:
                namespace = meta.get("namespace", "") if owner_kind.namespaced else ""
                self._release_foreground_owner(owner_kind, namespace, ref.get("name", ""))
        return removed.obj

    def _empty_namespace(self, namespace: str) -> None:
        for kind in kinds.ALL_KINDS:
            if kind.namespaced and kind not in VIEWS:  # a view's objects go with the kind stored
                for entry in list(self.store.entries(kind, namespace)):
                    self._remove(kind, entry, cascade=True)

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background garbage collection: delete objects whose ownerReferences name the deleted owner."""
        for resource, namespace, name in self.store.dependents(owner_uid):
            kind = KINDS_BY_RESOURCE[resource]
            if self.store.get(kind, namespace, name) is not None:  # an earlier cascade may have taken it
                self.delete(kind, namespace, name)

    # -- pod subresources ------------------------------------------------------------------------

    def bind(self, namespace: str, name: str, binding: Any) -> None:
        if not isinstance(binding, dict):
            raise errors.bad_request("the request body must be a Binding object")
        target = binding.get("target") or {}
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise errors.invalid(kinds.POD, name, [("target.name", "Required value", "FieldValueRequired")])
        current = self.require(kinds.POD, namespace, name)
        pod = current.obj
        binding_uid = (binding.get("metadata") or {}).get("uid")
        if binding_uid and binding_uid != pod["metadata"]["uid"]:
            raise errors.conflict(kinds.POD, name, "the UID in the binding does not match the pod")
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.conflict(kinds.POD, name, "pod is being deleted, cannot be assigned to a host")
        assigned = (pod.get("spec") or {}).get("nodeName")
        if assigned:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                f'already assigned to node "{assigned}"',
                {"name": name, "kind": "pods/binding"},
            )
        obj = _with_new_metadata(pod)
        obj["spec"] = {**(pod.get("spec") or {}), "nodeName": node}
        status = obj["status"] = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
        status["conditions"] = conditions
        self.store.put(kinds.POD, self._stamp(obj))

    def evict(self, namespace: str, name: str, eviction: Any) -> None:
        if not isinstance(eviction, dict):
            raise errors.bad_request("the request body must be an Eviction object")
        current = self.require(kinds.POD, namespace, name)
        options = eviction.get("deleteOptions") or {}
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and uid != current.obj["metadata"]["uid"]:
            raise errors.conflict(
                kinds.POD,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object "
                f"meta: {current.obj['metadata']['uid']}",
            )
        pdbs = [e.obj for e in self.store.entries(kinds.PDB, namespace)]
        if pdbs and not current.obj["metadata"].get("deletionTimestamp"):
            pods = [e.obj for e in self.store.entries(kinds.POD, namespace)]
            refusal = eviction_refusal(current.obj, pdbs, pods)
            if refusal is not None:
                code, message = refusal
                raise ApiError(
                    code,
                    "TooManyRequests" if code == 429 else "InternalError",
                    message,
                    {"causes": [{"reason": "DisruptionBudget", "message": message}]},
                )
        self.delete(kinds.POD, namespace, name, options)


def _set_managed_fields(obj: dict[str, Any], managed_fields: Any) -> None:
    """managedFields last in metadata, as kube-apiserver writes them; none when empty."""
    meta = obj["metadata"]
    meta.pop("managedFields", None)
    if managed_fields:
        meta["managedFields"] = managed_fields


def _parse_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
