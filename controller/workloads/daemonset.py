"""The DaemonSet controller (`apps/v1`): one pod per eligible node, local or simulated. A node is
eligible when its labels match the template's nodeSelector and every NoSchedule/NoExecute taint
is tolerated (the template's tolerations plus those Kubernetes gives every daemon pod: not-ready,
unreachable, unschedulable and the pressure taints). Each pod names its node by a required
`matchFields metadata.name` node affinity, as Kubernetes' controller does, so the Lahar scheduler
places it like any other pod. Pods on nodes no longer eligible (or gone), and a node's extra
pods, are deleted. `plan` decides from the set, the nodes and the pods; the runner performs it."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from lahar.api.node import Taint
from lahar.api.pod import Toleration
from lahar.controller.workloads.replicaset import controlled_by, is_active, is_ready, pod_from_template

# Tolerations Kubernetes adds to every DaemonSet pod (pkg/controller/daemon/util).
DAEMON_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)


@dataclass
class DaemonSetPlan:
    create: list[str] = field(default_factory=list)  # node names
    delete: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)


def _template_spec(daemon_set: dict[str, Any]) -> dict[str, Any]:
    return ((daemon_set.get("spec") or {}).get("template") or {}).get("spec") or {}


def _tolerations(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    given = [t for t in pod_spec.get("tolerations") or [] if isinstance(t, dict)]
    return given + [t for t in DAEMON_TOLERATIONS if t not in given]


def eligible(daemon_set: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether the set runs a pod on this node."""
    pod_spec = _template_spec(daemon_set)
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = [Toleration.from_dict(t) for t in _tolerations(pod_spec)]
    for raw in (node.get("spec") or {}).get("taints") or []:
        taint = Taint.from_dict(raw)
        if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in tolerations):
            return False
    return True


def target_node(pod: dict[str, Any]) -> str | None:
    """The node a daemon pod is for: where it is bound, else the node its affinity names."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for requirement in term.get("matchFields") or []:
            if requirement.get("key") == "metadata.name" and requirement.get("operator") == "In":
                values = requirement.get("values") or []
                if len(values) == 1:
                    return str(values[0])
    return None


def daemon_pod(daemon_set: dict[str, Any], node_name: str) -> dict[str, Any]:
    """The set's pod for one node: pinned there by node affinity, with the daemon tolerations."""
    pod = pod_from_template(daemon_set)
    spec = copy.deepcopy(pod["spec"])
    spec["tolerations"] = _tolerations(spec)
    affinity = spec.setdefault("affinity", {})
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
    affinity.setdefault("nodeAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [term]
    }
    pod["spec"] = spec
    return pod


def plan(daemon_set: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> DaemonSetPlan:
    """What to do for one DaemonSet given the nodes and the pods it controls."""
    meta = daemon_set["metadata"]
    wanted = sorted(n["metadata"]["name"] for n in nodes if eligible(daemon_set, n))
    live = [p for p in pods if controlled_by(p, meta["uid"]) and is_active(p)]
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in live:
        by_node.setdefault(target_node(pod) or "", []).append(pod)
    result = DaemonSetPlan()
    for node_name, on_node in sorted(by_node.items()):
        if node_name not in wanted:
            result.delete += on_node  # misscheduled, or the node is gone
        else:  # keep the oldest; a second pod on a node is one too many
            on_node = sorted(on_node, key=lambda p: p["metadata"].get("creationTimestamp", ""))
            result.delete += on_node[1:]
    result.create = [name for name in wanted if name not in by_node]
    kept = [by_node[name][0] for name in wanted if name in by_node]
    scheduled = [p for p in kept if (p.get("spec") or {}).get("nodeName")]
    ready = sum(1 for p in kept if is_ready(p))
    misscheduled = sum(len(pods_) for name, pods_ in by_node.items() if name not in wanted)
    result.status = {
        "observedGeneration": meta.get("generation", 1),
        "desiredNumberScheduled": len(wanted),
        "currentNumberScheduled": len(scheduled),
        "updatedNumberScheduled": len(scheduled),
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "numberAvailable": ready,
        "numberUnavailable": len(wanted) - ready,
    }
    return result
