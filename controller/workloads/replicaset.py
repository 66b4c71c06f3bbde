"""The ReplicaSet controller: keep `spec.replicas` pods made from the template, owned by the set,
and report how many exist, are ready and are available. `plan` decides (a plain function of the
set and its pods); the runner (controller/workloads/runner.py) performs it through the API."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from lahar.api.selectors import SelectorError, label_selector_from_dict

# Pods least worth keeping go first: unscheduled, then not ready, then the newest.
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controlled_by(obj: dict[str, Any], owner_uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid and ref.get("controller") for ref in refs)


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_active(pod: dict[str, Any]) -> bool:
    """Counts toward the replicas: not finished and not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def pod_from_template(replica_set: dict[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy((replica_set.get("spec") or {}).get("template") or {})
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{replica_set['metadata']['name']}-",
            "namespace": replica_set["metadata"]["namespace"],
            "labels": dict(meta.get("labels") or {}),
            **({"annotations": dict(meta["annotations"])} if meta.get("annotations") else {}),
            "ownerReferences": [owner_reference(replica_set)],
        },
        "spec": template.get("spec") or {},
    }


@dataclass
class ReplicaSetPlan:
    create: int = 0
    delete: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)


def _deletion_order(pod: dict[str, Any]) -> tuple[int, int, int, str]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return (
        1 if spec.get("nodeName") else 0,
        _PHASE_RANK.get(status.get("phase", "Pending"), 0),
        1 if is_ready(pod) else 0,
        # Newest first: a reversed creation time sorts before an older one.
        "".join(chr(0x10FFFF - ord(c)) for c in pod["metadata"].get("creationTimestamp", "")),
    )


def plan(replica_set: dict[str, Any], pods: list[dict[str, Any]]) -> ReplicaSetPlan:
    """What to do for one ReplicaSet given the pods it controls."""
    spec = replica_set.get("spec") or {}
    wanted = int(spec.get("replicas", 1))
    try:
        selector = label_selector_from_dict(spec.get("selector"))
    except SelectorError:
        return ReplicaSetPlan()  # admission refuses these; an old stored one is left alone
    mine = [p for p in pods if controlled_by(p, replica_set["metadata"]["uid"])]
    active = [p for p in mine if is_active(p)]
    result = ReplicaSetPlan()
    if len(active) < wanted:
        result.create = wanted - len(active)
    elif len(active) > wanted:
        result.delete = sorted(active, key=_deletion_order)[: len(active) - wanted]
    ready = sum(1 for p in active if is_ready(p))
    labelled = sum(1 for p in active if selector.matches(p["metadata"].get("labels")))
    result.status = {
        "replicas": len(active),
        "fullyLabeledReplicas": labelled,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": replica_set["metadata"].get("generation", 1),
    }
    return result
