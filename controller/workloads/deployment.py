"""The Deployment controller: one ReplicaSet per pod template (named and labelled by the
template's hash), rolled from the old sets to the new one within maxSurge / maxUnavailable (or
all at once for Recreate), with a revision number per set so `kubectl rollout undo` can go back,
and a status `kubectl rollout status` reads. `plan` decides from the Deployment and its sets; the
runner performs the plan through the API."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from lahar.api.workloads import RECREATE, scaled
from lahar.controller.workloads.replicaset import owner_reference

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
# Kubernetes' safe alphabet for generated names: no vowels (no words), no look-alike characters.
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: dict[str, Any]) -> str:
    """A stable name-safe hash of a pod template (without its own hash label)."""
    digest = hashlib.sha256(json.dumps(_without_hash(template), sort_keys=True).encode()).digest()
    number = int.from_bytes(digest[:8], "big")
    chars = []
    for _ in range(10):
        number, index = divmod(number, len(_ALPHABET))
        chars.append(_ALPHABET[index])
    return "".join(chars)


def _without_hash(template: dict[str, Any]) -> dict[str, Any]:
    """The template as compared: no hash label, and no null or empty values (`resources: {}`,
    `creationTimestamp: null`), which mean the same as absent ones (kube compares Go structs)."""
    template = _semantic(template)
    labels = (template.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
    return template


def _semantic(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {key: _semantic(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in (None, {}, [])}
    if isinstance(value, list):
        return [_semantic(item) for item in value]
    return value


def revision(replica_set: dict[str, Any]) -> int:
    try:
        return int((replica_set["metadata"].get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def _replicas(replica_set: dict[str, Any]) -> int:
    return int((replica_set.get("spec") or {}).get("replicas", 0))


def _status(replica_set: dict[str, Any] | None, key: str) -> int:
    return int(((replica_set or {}).get("status") or {}).get(key, 0))


@dataclass
class DeploymentPlan:
    create: dict[str, Any] | None = None  # a new ReplicaSet
    scale: dict[str, int] = field(default_factory=dict)  # ReplicaSet name -> replicas
    annotate: dict[str, dict[str, str]] = field(default_factory=dict)  # ReplicaSet name -> annotations
    delete: list[str] = field(default_factory=list)  # old ReplicaSets past revisionHistoryLimit
    revision: str = ""  # the Deployment's revision annotation
    status: dict[str, Any] = field(default_factory=dict)


def new_replica_set(deployment: dict[str, Any], hash_value: str, replicas: int, number: int) -> dict[str, Any]:
    spec = deployment["spec"]
    template = copy.deepcopy(spec["template"])
    template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = hash_value
    selector = copy.deepcopy(spec["selector"])
    selector.setdefault("matchLabels", {})[HASH_LABEL] = hash_value
    meta = deployment["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{hash_value}",
            "namespace": meta["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "annotations": {REVISION: str(number), **_replica_annotations(deployment)},
            "ownerReferences": [owner_reference(deployment)],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": spec.get("minReadySeconds", 0),
            "selector": selector,
            "template": template,
        },
    }


def _replica_annotations(deployment: dict[str, Any]) -> dict[str, str]:
    desired, surge, _ = _bounds(deployment)
    return {DESIRED: str(desired), MAX_REPLICAS: str(desired + surge)}


def _bounds(deployment: dict[str, Any]) -> tuple[int, int, int]:
    """(desired replicas, max surge, max unavailable) as counts."""
    spec = deployment["spec"]
    desired = int(spec.get("replicas", 1))
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == RECREATE:
        return desired, 0, desired
    rolling = strategy.get("rollingUpdate") or {}
    surge = scaled(rolling.get("maxSurge", "25%"), desired, round_up=True)
    unavailable = scaled(rolling.get("maxUnavailable", "25%"), desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # as Kubernetes: a rollout must be able to make progress
    return desired, surge, unavailable


def plan(deployment: dict[str, Any], replica_sets: list[dict[str, Any]]) -> DeploymentPlan:
    """What to do for one Deployment given the ReplicaSets it controls."""
    result = DeploymentPlan()
    spec = deployment["spec"]
    desired, surge, unavailable = _bounds(deployment)
    hash_value = template_hash(spec["template"])
    wanted_template = _without_hash(spec["template"])
    new = next((rs for rs in replica_sets if _without_hash(rs["spec"]["template"]) == wanted_template), None)
    old = sorted((rs for rs in replica_sets if rs is not new), key=revision)
    top = max((revision(rs) for rs in replica_sets), default=0)
    paused = bool(spec.get("paused"))
    if new is None and not paused:
        result.create = new_replica_set(deployment, hash_value, 0, top + 1)
        new_name, new_replicas, new_revision = result.create["metadata"]["name"], 0, top + 1
    elif new is not None:
        new_name, new_replicas, new_revision = new["metadata"]["name"], _replicas(new), revision(new)
        if new_revision < top:  # a rollback to an older template makes that set the newest revision
            new_revision = top + 1
            result.annotate[new_name] = {REVISION: str(new_revision)}
        if (new["metadata"].get("annotations") or {}).get(DESIRED) != str(desired):
            result.annotate.setdefault(new_name, {}).update(_replica_annotations(deployment))
    else:
        new_name, new_replicas, new_revision = "", 0, top
    if not paused:
        _roll(deployment, new, new_name, new_replicas, old, (desired, surge, unavailable), result)
    if result.create is not None and new_name in result.scale:  # created at its first size
        result.create["spec"]["replicas"] = result.scale.pop(new_name)
    result.delete = _history_to_delete(spec, old, result)
    result.revision = str(new_revision) if new_revision else ""
    result.status = _deployment_status(deployment, new, old, result, (desired, surge, unavailable))
    return result


def _roll(
    deployment: dict[str, Any],
    new: dict[str, Any] | None,
    new_name: str,
    new_replicas: int,
    old: list[dict[str, Any]],
    bounds: tuple[int, int, int],
    result: DeploymentPlan,
) -> None:
    desired, surge, unavailable = bounds
    active_old = [rs for rs in old if _replicas(rs) > 0 or _status(rs, "replicas") > 0]
    if (deployment["spec"].get("strategy") or {}).get("type") == RECREATE:
        for rs in active_old:
            if _replicas(rs):
                result.scale[rs["metadata"]["name"]] = 0
        if not any(_status(rs, "replicas") for rs in old) and new_name and new_replicas != desired:
            result.scale[new_name] = desired
        return
    if not active_old:  # nothing to roll from: a plain scale
        if new_name and new_replicas != desired:
            result.scale[new_name] = desired
        return
    # Scale the new set up as far as the surge allows.
    total = new_replicas + sum(_replicas(rs) for rs in old)
    if new_replicas < desired:
        room = desired + surge - total
        if room > 0:
            new_replicas = min(desired, new_replicas + room)
            result.scale[new_name] = new_replicas
    elif new_replicas > desired:
        new_replicas = desired
        result.scale[new_name] = desired
    # Scale old sets down as far as availability allows: first their unavailable pods, then ready ones.
    all_replicas = new_replicas + sum(_replicas(rs) for rs in old)
    # Pods the new set is to have that are not available yet count against the budget too.
    new_unavailable = max(new_replicas - _status(new, "availableReplicas"), 0)
    budget = max(all_replicas - (desired - unavailable) - new_unavailable, 0)
    for rs in old:
        replicas = _replicas(rs)
        unhealthy = max(replicas - _status(rs, "availableReplicas"), 0)
        cut = min(unhealthy, budget)
        if cut:
            replicas -= cut
            budget -= cut
            result.scale[rs["metadata"]["name"]] = replicas
    for rs in old:
        name = rs["metadata"]["name"]
        replicas = result.scale.get(name, _replicas(rs))
        cut = min(replicas, budget)
        if cut:
            budget -= cut
            result.scale[name] = replicas - cut


def _history_to_delete(spec: dict[str, Any], old: list[dict[str, Any]], result: DeploymentPlan) -> list[str]:
    limit = int(spec.get("revisionHistoryLimit", 10))
    idle = [
        rs
        for rs in old
        if result.scale.get(rs["metadata"]["name"], _replicas(rs)) == 0 and _status(rs, "replicas") == 0
    ]
    excess = len(idle) - limit
    return [rs["metadata"]["name"] for rs in idle[: max(excess, 0)]]


def _deployment_status(
    deployment: dict[str, Any],
    new: dict[str, Any] | None,
    old: list[dict[str, Any]],
    result: DeploymentPlan,
    bounds: tuple[int, int, int],
) -> dict[str, Any]:
    desired, _, unavailable = bounds
    sets = [rs for rs in (new, *old) if rs is not None]
    replicas = sum(_status(rs, "replicas") for rs in sets)
    available = sum(_status(rs, "availableReplicas") for rs in sets)
    updated = _status(new, "replicas")
    previous = {c.get("type"): c for c in (deployment.get("status") or {}).get("conditions") or []}
    complete = updated == desired and replicas == desired and available >= desired
    if result.create is not None:
        progressing = ("True", "NewReplicaSetCreated", f'Created new replica set "{result.create["metadata"]["name"]}"')
    elif complete and new is not None:
        progressing = (
            "True",
            "NewReplicaSetAvailable",
            f'ReplicaSet "{new["metadata"]["name"]}" has successfully progressed.',
        )
    else:
        name = new["metadata"]["name"] if new is not None else ""
        progressing = ("True", "ReplicaSetUpdated", f'ReplicaSet "{name}" is progressing.')
    if available >= desired - unavailable:
        availability = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    else:
        availability = ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
    conditions = [
        _condition("Available", availability, previous.get("Available")),
        _condition("Progressing", progressing, previous.get("Progressing")),
    ]
    status: dict[str, Any] = {
        "observedGeneration": deployment["metadata"].get("generation", 1),
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": sum(_status(rs, "readyReplicas") for rs in sets),
        "availableReplicas": available,
        "unavailableReplicas": max(desired - available, 0),
        "conditions": conditions,
    }
    return {key: value for key, value in status.items() if value or key == "conditions"}


def _condition(kind: str, state: tuple[str, str, str], previous: dict[str, Any] | None) -> dict[str, Any]:
    status, reason, message = state
    condition = {"type": kind, "status": status, "reason": reason, "message": message}
    if previous and previous.get("status") == status:
        # The transition time moves only when the status changes; the update time with the reason.
        condition["lastTransitionTime"] = previous.get("lastTransitionTime", "")
        if previous.get("reason") == reason:
            condition["lastUpdateTime"] = previous.get("lastUpdateTime", "")
    return condition
