"""The StatefulSet controller (`apps/v1`): pods with stable names `<set>-0` .. `<set>-(N-1)`,
each with its hostname and the set's serviceName as subdomain. With the OrderedReady policy (the
default) pod i is made only once pods 0..i-1 are Running and Ready, and a scale down removes the
highest ordinal first, one at a time, only while the others are Ready; with Parallel every
missing pod is made and every extra one removed at once. A finished or deleted pod is replaced
under the same name. `plan` decides from the set and its pods; the runner performs it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from lahar.controller.workloads.replicaset import controlled_by, is_active, is_ready, pod_from_template

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
PARALLEL = "Parallel"


@dataclass
class StatefulSetPlan:
    create: list[int] = field(default_factory=list)  # ordinals
    delete: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)


def ordinal(set_name: str, pod: dict[str, Any]) -> int | None:
    """The pod's ordinal when its name is `<set>-<n>`, else None (not one of the set's)."""
    found = re.fullmatch(rf"{re.escape(set_name)}-(0|[1-9][0-9]*)", pod["metadata"].get("name", ""))
    return int(found.group(1)) if found else None


def stateful_pod(stateful_set: dict[str, Any], index: int) -> dict[str, Any]:
    """Pod `index` of the set: its stable name, hostname, subdomain and ordinal labels."""
    pod = pod_from_template(stateful_set)
    name = f"{stateful_set['metadata']['name']}-{index}"
    del pod["metadata"]["generateName"]
    pod["metadata"]["name"] = name
    pod["metadata"]["labels"].update({POD_NAME_LABEL: name, POD_INDEX_LABEL: str(index)})
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
    ready = sum(1 for p in live.values() if is_ready(p))
    result.status = {
        "observedGeneration": meta.get("generation", 1),
        "replicas": len(live),
        "readyReplicas": ready,
        "currentReplicas": len(live),
        "updatedReplicas": len(live),
        "availableReplicas": ready,
    }
    return result
