"""The StatefulSet controller (`apps/v1`): pods with stable names `<set>-0` .. `<set>-(N-1)`,
each with its hostname and the set's serviceName as subdomain. With the OrderedReady policy (the
default) pod i is made only once pods 0..i-1 are Running and Ready, and a scale down removes the
highest ordinal first, one at a time, only while the others are Ready; with Parallel every
missing pod is made and every extra one removed at once. A finished or deleted pod is replaced
under the same name.

Template updates: each pod carries its revision (`controller-revision-hash`: `<set>-<template
hash>`). With the RollingUpdate strategy (the default) the pods of an older revision at or above
`rollingUpdate.partition` are replaced one at a time from the highest ordinal down, each only
while every pod is Running and Ready; with OnDelete a pod takes the new template only when
someone deletes it. status.updateRevision names the template's revision, status.currentRevision
the one the set ran before, until a rolling update has updated and readied every pod.
`plan` decides from the set and its pods; the runner performs it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from lahar.controller.workloads.deployment import template_hash
from lahar.controller.workloads.replicaset import controlled_by, is_active, is_ready, pod_from_template

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
PARALLEL = "Parallel"
REVISION_LABEL = "controller-revision-hash"
ON_DELETE = "OnDelete"


@dataclass
class StatefulSetPlan:
    create: list[int] = field(default_factory=list)  # ordinals
    delete: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)


def ordinal(set_name: str, pod: dict[str, Any]) -> int | None:
    """The pod's ordinal when its name is `<set>-<n>`, else None (not one of the set's)."""
    found = re.fullmatch(rf"{re.escape(set_name)}-(0|[1-9][0-9]*)", pod["metadata"].get("name", ""))
    return int(found.group(1)) if found else None


def update_revision(stateful_set: dict[str, Any]) -> str:
    """The revision of the set's current template, as kube names its ControllerRevision."""
    template = (stateful_set.get("spec") or {}).get("template") or {}
    return f"{stateful_set['metadata']['name']}-{template_hash(template)}"


def pod_revision(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(REVISION_LABEL)


def stateful_pod(stateful_set: dict[str, Any], index: int) -> dict[str, Any]:
    """Pod `index` of the set: its stable name, hostname, subdomain, ordinal and revision labels."""
    pod = pod_from_template(stateful_set)
    name = f"{stateful_set['metadata']['name']}-{index}"
    del pod["metadata"]["generateName"]
    pod["metadata"]["name"] = name
    pod["metadata"]["labels"].update(
        {POD_NAME_LABEL: name, POD_INDEX_LABEL: str(index), REVISION_LABEL: update_revision(stateful_set)}
    )
    pod["spec"] = {**pod["spec"], "hostname": name}
    service = (stateful_set.get("spec") or {}).get("serviceName")
    if service:
        pod["spec"]["subdomain"] = service
    return pod


def _healthy(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and is_ready(pod)


def plan(stateful_set: dict[str, Any], pods: list[dict[str, Any]]) -> StatefulSetPlan:
    """What to do for one StatefulSet given the pods it controls."""
    spec, meta = stateful_set.get("spec") or {}, stateful_set["metadata"]
    wanted = int(spec.get("replicas", 1))
    parallel = spec.get("podManagementPolicy") == PARALLEL
    by_ordinal: dict[int, dict[str, Any]] = {}
    for pod in pods:
        index = ordinal(meta["name"], pod)
        if index is not None and controlled_by(pod, meta["uid"]):
            by_ordinal[index] = pod
    live = {i: p for i, p in by_ordinal.items() if is_active(p)}
    result = StatefulSetPlan()
    # A finished pod is deleted so its name is free to be made again.
    result.delete = [
        p for i, p in sorted(by_ordinal.items()) if i not in live and not p["metadata"].get("deletionTimestamp")
    ]
    missing = [i for i in range(wanted) if i not in by_ordinal]
    extra = sorted((i for i in live if i >= wanted), reverse=True)
    if parallel:
        result.create = missing
        result.delete += [live[i] for i in extra]
    else:
        for index in missing:
            if all(i in live and _healthy(live[i]) for i in range(index)):
                result.create = [index]
            break
        lower_healthy = all(_healthy(p) for i, p in live.items() if i < wanted)
        if extra and lower_healthy and not result.create:
            result.delete.append(live[extra[0]])
    revision = update_revision(stateful_set)
    outdated = _to_update(stateful_set, live, wanted, revision)
    settled = not result.create and not result.delete and len(live) == wanted
    no_terminating = not any(p["metadata"].get("deletionTimestamp") for p in by_ordinal.values())
    if outdated and settled and no_terminating and all(_healthy(p) for p in live.values()):
        result.delete.append(live[outdated[0]])
    result.status = _status(stateful_set, live, revision)
    return result


def _to_update(stateful_set: dict[str, Any], live: dict[int, dict[str, Any]], wanted: int, revision: str) -> list[int]:
    """Ordinals a rolling update replaces, highest first: older revisions at or above the partition."""
    strategy = (stateful_set.get("spec") or {}).get("updateStrategy") or {}
    if strategy.get("type") == ON_DELETE:
        return []
    partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
    return sorted((i for i, p in live.items() if partition <= i < wanted and pod_revision(p) != revision), reverse=True)


def _status(stateful_set: dict[str, Any], live: dict[int, dict[str, Any]], revision: str) -> dict[str, Any]:
    spec, meta = stateful_set.get("spec") or {}, stateful_set["metadata"]
    previous = stateful_set.get("status") or {}
    ready = sum(1 for p in live.values() if is_ready(p))
    updated = sum(1 for p in live.values() if pod_revision(p) == revision)
    current = previous.get("currentRevision") or revision
    rolling = ((spec.get("updateStrategy") or {}).get("type") or "RollingUpdate") != ON_DELETE
    if rolling and updated == len(live) == ready:  # kube's completeRollingUpdate
        current = revision
    return {
        "observedGeneration": meta.get("generation", 1),
        "replicas": len(live),
        "readyReplicas": ready,
        "currentReplicas": sum(1 for p in live.values() if pod_revision(p) == current),
        "updatedReplicas": updated,
        "availableReplicas": ready,
        "currentRevision": current,
        "updateRevision": revision,
        "collisionCount": 0,
    }
