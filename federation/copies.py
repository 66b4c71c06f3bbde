"""What the federation writes into a member, built from hub objects: the Job's copy (fenced with
its hub Job's uid and placement number), the ConfigMaps and Secrets its pods reference, its
namespace and its queue. Pure: the loop does the writing."""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

from lahar.federation import names

# Server-set metadata that must not travel to another API server.
_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")


def _travelling_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    kept = {key: copy.deepcopy(value) for key, value in metadata.items() if key not in _SERVER_FIELDS}
    kept.pop("ownerReferences", None)  # owners live on the hub
    kept.pop("deletionTimestamp", None)
    kept.pop("deletionGracePeriodSeconds", None)
    kept.pop("finalizers", None)
    return kept


def member_job(hub_job: Mapping[str, Any], placement: int) -> dict[str, Any]:
    """The Job to create in the member: the hub Job's spec, its labels and annotations less the
    federation's own (but its on-member-loss, for the member's fence), and the fence (hub uid
    label, placement, hub generation and resourceVersion)."""
    metadata = hub_job.get("metadata") or {}
    travelling = _travelling_metadata(metadata)
    labels = {k: v for k, v in (travelling.get("labels") or {}).items() if not k.startswith(names.PREFIX + "/")}
    annotations = {
        k: v for k, v in (travelling.get("annotations") or {}).items() if not k.startswith(names.PREFIX + "/")
    }
    labels[names.HUB_UID_LABEL] = metadata.get("uid") or ""
    on_loss = (metadata.get("annotations") or {}).get(names.ON_MEMBER_LOSS_ANNOTATION)
    if on_loss:  # the member's fence leaves a Job the hub will never move running
        annotations[names.ON_MEMBER_LOSS_ANNOTATION] = on_loss
    annotations[names.PLACEMENT_ANNOTATION] = str(placement)
    annotations[names.HUB_GENERATION_ANNOTATION] = str(metadata.get("generation") or 0)
    annotations[names.HUB_RESOURCE_VERSION_ANNOTATION] = str(metadata.get("resourceVersion") or "")
    travelling.update(labels=labels, annotations=annotations)
    return {
        "apiVersion": hub_job.get("apiVersion") or "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": travelling,
        "spec": copy.deepcopy(hub_job.get("spec") or {}),
    }


def _pod_specs(job: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for task in (job.get("spec") or {}).get("tasks") or ():
        if isinstance(task, Mapping):
            spec = (task.get("template") or {}).get("spec")
            if isinstance(spec, Mapping):
                yield spec


def referenced(job: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """(ConfigMap names, Secret names) the Job's pod templates reference: volumes (projected
    sources too), envFrom, env valueFrom and imagePullSecrets. Optional references count too:
    the copy then behaves as on the hub's namespace."""
    config_maps: set[str] = set()
    secrets: set[str] = set()
    for spec in _pod_specs(job):
        for volume in spec.get("volumes") or ():
            sources = [volume, *((volume.get("projected") or {}).get("sources") or ())]
            for source in sources:
                if (source.get("configMap") or {}).get("name"):
                    config_maps.add(source["configMap"]["name"])
                secret = source.get("secret") or {}
                secret_name = secret.get("secretName") or secret.get("name")
                if secret_name:
                    secrets.add(secret_name)
        for pull in spec.get("imagePullSecrets") or ():
            if pull.get("name"):
                secrets.add(pull["name"])
        for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
            for source in container.get("envFrom") or ():
                if (source.get("configMapRef") or {}).get("name"):
                    config_maps.add(source["configMapRef"]["name"])
                if (source.get("secretRef") or {}).get("name"):
                    secrets.add(source["secretRef"]["name"])
            for env in container.get("env") or ():
                value_from = env.get("valueFrom") or {}
                if (value_from.get("configMapKeyRef") or {}).get("name"):
                    config_maps.add(value_from["configMapKeyRef"]["name"])
                if (value_from.get("secretKeyRef") or {}).get("name"):
                    secrets.add(value_from["secretKeyRef"]["name"])
    return config_maps, secrets


def member_object(hub_object: Mapping[str, Any]) -> dict[str, Any]:
    """A ConfigMap or Secret as it is copied to a member: data and type, labelled as managed."""
    metadata = _travelling_metadata(hub_object.get("metadata") or {})
    metadata.setdefault("labels", {})[names.MANAGED_LABEL] = "true"
    copied = {key: copy.deepcopy(value) for key, value in hub_object.items() if key not in ("metadata", "status")}
    return {**copied, "metadata": metadata}


def member_namespace(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {names.MANAGED_LABEL: "true"}},
    }


def member_queue(name: str, hub_queue: Mapping[str, Any] | None) -> dict[str, Any]:
    """The queue a copy names, made in a member that lacks it: the hub Queue's weight and
    priority, no capability (the fleet-wide one is the federation's to hold)."""
    spec = (hub_queue or {}).get("spec") or {}
    kept = {key: spec[key] for key in ("weight", "priority", "reclaimable") if key in spec}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name, "labels": {names.MANAGED_LABEL: "true"}},
        "spec": kept,
    }


def _int_annotation(member_copy: Mapping[str, Any], key: str) -> int | None:
    text = ((member_copy.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def copy_placement(member_copy: Mapping[str, Any]) -> int | None:
    return _int_annotation(member_copy, names.PLACEMENT_ANNOTATION)


def copy_hub_generation(member_copy: Mapping[str, Any]) -> int:
    """The hub Job's generation the copy's spec was made from (0 when unknown: brought up to date)."""
    return _int_annotation(member_copy, names.HUB_GENERATION_ANNOTATION) or 0


def updated_copy(hub_job: Mapping[str, Any], current: Mapping[str, Any], placement: int) -> dict[str, Any]:
    """The copy with the hub Job's current spec, labels and annotations (the fence's with its new
    generation), written over the member's object: its resourceVersion (the update is
    preconditioned on it) and status are kept."""
    wanted = member_job(hub_job, placement)
    current_metadata = current.get("metadata") or {}
    kept = {key: current_metadata[key] for key in ("uid", "resourceVersion") if key in current_metadata}
    result = {**wanted, "metadata": {**wanted["metadata"], **kept}}
    if "status" in current:
        result["status"] = copy.deepcopy(current["status"])
    return result


def events_to_mirror(
    member: str, events: Iterable[Mapping[str, Any]], copy_keys: Collection[tuple[str, str]], seen: Mapping[str, int]
) -> list[tuple[tuple[str, str], str, str, str, str, int]]:
    """The member's Events about its copies that the hub Jobs have not been told of yet:
    (job key, type, reason, message naming the member, event uid, count). `seen` maps an Event's
    uid to the count already mirrored, so a repeated Event is told again once its count grows."""
    told = []
    for event in events:
        about = event.get("involvedObject") or {}
        key = (about.get("namespace") or "default", about.get("name") or "")
        if about.get("kind") != "Job" or not str(about.get("apiVersion", "")).startswith("batch.volcano.sh/"):
            continue
        uid = (event.get("metadata") or {}).get("uid") or ""
        count = event.get("count") or 1
        if key in copy_keys and uid and seen.get(uid, 0) < count:
            message = f"[{member}] {event.get('message') or ''}".rstrip()
            told.append((key, event.get("type") or "Normal", event.get("reason") or "", message, uid, count))
    return told
