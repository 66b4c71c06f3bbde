"""PodDisruptionBudget arithmetic for the Eviction API: a plain function of the pod, the budgets and
the pods they cover, so the 429 decision is testable without a server."""

from __future__ import annotations

import math
from typing import Any

from lahar.api.selectors import label_selector_from_dict


def is_healthy(pod: dict[str, Any]) -> bool:
    """Running, not being deleted, and Ready when the pod reports readiness at all."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def _scaled(value: Any, total: int, round_up: bool) -> int:
    """An IntOrString budget value: an int, or a percentage of the expected pod count."""
    if isinstance(value, str) and value.endswith("%"):
        fraction = int(value[:-1]) * total / 100
        return math.ceil(fraction) if round_up else math.floor(fraction)
    return int(value)


def desired_healthy(pdb: dict[str, Any], expected: int) -> int:
    spec = pdb.get("spec") or {}
    if spec.get("minAvailable") is not None:
        return _scaled(spec["minAvailable"], expected, round_up=True)
    if spec.get("maxUnavailable") is not None:
        return max(expected - _scaled(spec["maxUnavailable"], expected, round_up=True), 0)
    return 0


def covering_budgets(pod: dict[str, Any], pdbs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    labels = pod.get("metadata", {}).get("labels") or {}
    found = []
    for pdb in pdbs:
        selector = (pdb.get("spec") or {}).get("selector")
        if selector is not None and label_selector_from_dict(selector).matches(labels):
            found.append(pdb)
    return found


def covered_pods(pdb: dict[str, Any], namespace_pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    selector = label_selector_from_dict((pdb.get("spec") or {}).get("selector") or {})
    return [p for p in namespace_pods if selector.matches(p.get("metadata", {}).get("labels") or {})]


def disruptions_allowed(pdb: dict[str, Any], namespace_pods: list[dict[str, Any]]) -> int:
    """How many healthy pods the budget lets go now (the disruption controller's status field)."""
    covered = covered_pods(pdb, namespace_pods)
    return sum(1 for p in covered if is_healthy(p)) - desired_healthy(pdb, len(covered))


def eviction_refusal(
    pod: dict[str, Any], pdbs: list[dict[str, Any]], namespace_pods: list[dict[str, Any]]
) -> tuple[int, str] | None:
    """None when the pod may be evicted, else (HTTP code, message) as kube-apiserver answers."""
    budgets = covering_budgets(pod, pdbs)
    if not budgets:
        return None
    if len(budgets) > 1:
        return 500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    if not is_healthy(pod):
        return None  # evicting a pod that is already unhealthy costs the budget nothing
    budget = budgets[0]
    if disruptions_allowed(budget, namespace_pods) <= 0:
        name = budget["metadata"]["name"]
        return 429, (
            f"Cannot evict pod as it would violate the pod's disruption budget. "
            f"The disruption budget {name} needs {desired_healthy(budget, len(covered_pods(budget, namespace_pods)))} "
            "healthy pods and has fewer to spare."
        )
    return None
