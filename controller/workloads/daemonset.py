"""The DaemonSet controller (`apps/v1`): one pod per eligible node, local or simulated. A node is
eligible when its labels match the template's nodeSelector and every NoSchedule/NoExecute taint
is tolerated (the template's tolerations plus those Kubernetes gives every daemon pod: not-ready,
unreachable, unschedulable and the pressure taints). Each pod names its node by a required
`matchFields metadata.name` node affinity, as Kubernetes' controller does, so the Lahar scheduler
places it like any other pod. Pods on nodes no longer eligible (or gone), and a node's extra
pods, are deleted.

Template updates: each pod carries its template's hash (`controller-revision-hash`) and the
set's generation (`pod-template-generation`). With the RollingUpdate strategy (the default) pods
of an older template are replaced node by node: unavailable ones at once, available ones while
at most `maxUnavailable` nodes lack an available pod; with `maxSurge` the new pod starts beside
the old one, which goes once the new one is Ready. With OnDelete a pod takes the new template
only when someone deletes it. `plan` decides from the set, the nodes and the pods; the runner
performs it."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from lahar.api.node import Taint
from lahar.api.pod import Toleration
from lahar.controller.workloads.deployment import template_hash
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


REVISION_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"
ON_DELETE = "OnDelete"


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
    pod["metadata"]["labels"].update(
        {REVISION_LABEL: revision(daemon_set), GENERATION_LABEL: str(daemon_set["metadata"].get("generation", 1))}
    )
    return pod


def revision(daemon_set: dict[str, Any]) -> str:
    return template_hash((daemon_set.get("spec") or {}).get("template") or {})


def _updated(pod: dict[str, Any], wanted_revision: str) -> bool:
    return (pod["metadata"].get("labels") or {}).get(REVISION_LABEL) == wanted_revision


def scaled(value: Any, total: int, default: int) -> int:
    """An int-or-percent budget against `total`, a percentage rounded up, as kube scales them."""
    if value is None:
        return default
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * total // 100)
    return int(value)


def plan(daemon_set: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> DaemonSetPlan:
    """What to do for one DaemonSet given the nodes and the pods it controls."""
    meta = daemon_set["metadata"]
    wanted = sorted(n["metadata"]["name"] for n in nodes if eligible(daemon_set, n))
    live = [p for p in pods if controlled_by(p, meta["uid"]) and is_active(p)]
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in live:
        by_node.setdefault(target_node(pod) or "", []).append(pod)
    result = DaemonSetPlan()
    wanted_revision = revision(daemon_set)
    kept: dict[str, dict[str, Any]] = {}  # node -> the pod that stays (the newest template's, else the oldest)
    for node_name, on_node in sorted(by_node.items()):
        if node_name not in wanted:
            result.delete += on_node  # misscheduled, or the node is gone
            continue
        by_age = sorted(on_node, key=lambda p: p["metadata"].get("creationTimestamp", ""))
        updated = [p for p in by_age if _updated(p, wanted_revision)]
        old = [p for p in by_age if not _updated(p, wanted_revision)]
        if updated and old and not is_ready(updated[0]):  # a surge: the old pod serves until the new one is Ready
            kept[node_name] = old[0]
            result.delete += updated[1:] + old[1:]
        else:  # one pod per node, the newest template's if there is one
            keep = updated[0] if updated else old[0]
            kept[node_name] = keep
            result.delete += [p for p in by_age if p is not keep]
    result.create = [name for name in wanted if name not in by_node]
    _roll(daemon_set, wanted, by_node, kept, wanted_revision, result)
    scheduled = [p for p in kept.values() if _bound(p)]
    ready = sum(1 for p in kept.values() if is_ready(p))
    misscheduled = sum(len(pods_) for name, pods_ in by_node.items() if name not in wanted)
    result.status = {
        "observedGeneration": meta.get("generation", 1),
        "desiredNumberScheduled": len(wanted),
        "currentNumberScheduled": len(scheduled),
        "updatedNumberScheduled": sum(
            1 for name in wanted if any(_updated(p, wanted_revision) and _bound(p) for p in by_node.get(name, []))
        ),
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "numberAvailable": ready,
        "numberUnavailable": len(wanted) - ready,
    }
    return result


def _bound(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _surging(on_node: list[dict[str, Any]], wanted_revision: str) -> bool:
    """A node where a new pod has started beside an old one and is not Ready yet."""
    return len(on_node) > 1 and any(_updated(p, wanted_revision) and not is_ready(p) for p in on_node)


def _roll(
    daemon_set: dict[str, Any],
    wanted: list[str],
    by_node: dict[str, list[dict[str, Any]]],
    kept: dict[str, dict[str, Any]],
    wanted_revision: str,
    result: DaemonSetPlan,
) -> None:
    """Replace pods of an older template within the strategy's budgets."""
    strategy = (daemon_set.get("spec") or {}).get("updateStrategy") or {}
    if strategy.get("type") == ON_DELETE:
        return
    rolling = strategy.get("rollingUpdate") or {}
    surge = scaled(rolling.get("maxSurge"), len(wanted), 0)
    unavailable_budget = scaled(rolling.get("maxUnavailable"), len(wanted), 1) if not surge else 0
    old = [name for name in wanted if name in kept and not _updated(kept[name], wanted_revision)]
    if surge:
        surging = sum(1 for name in wanted if _surging(by_node.get(name, []), wanted_revision))
        for name in old:
            if len(by_node[name]) == 1 and surging < surge:
                result.create.append(name)  # the new pod first; the old one goes when it is Ready
                surging += 1
        return
    unavailable = sum(1 for name in wanted if name not in kept or not is_ready(kept[name]))
    for name in old:
        if not is_ready(kept[name]):  # already unavailable: replacing it costs nothing
            result.delete.append(kept[name])
        elif unavailable < unavailable_budget:
            result.delete.append(kept[name])
            unavailable += 1
