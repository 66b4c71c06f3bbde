"""QoS classes: Kubernetes' (Guaranteed, Burstable, BestEffort) and Lahar's (LC, LS, BE, SYSTEM),
the latter read from the keys Lahar, Volcano and Koordinator users already write (DESIGN.md,
"QoS classes"). Pure functions of the pod dict: the agent and the scheduler call them on every
pod, and tests need nothing but a dict."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from lahar.api.errors import Field
from lahar.api.quantity import Quantity, QuantityError, parse_quantity

# --- Kubernetes QoS -----------------------------------------------------------------------------

GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"
K8S_QOS_CLASSES = (GUARANTEED, BURSTABLE, BEST_EFFORT)
# The only resources Kubernetes' QoS class looks at.
K8S_QOS_RESOURCES = ("cpu", "memory")
CONTAINER_LISTS = ("containers", "initContainers")

_EMPTY: Mapping[str, Any] = {}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for list_name in CONTAINER_LISTS:
        containers = spec.get(list_name)
        if isinstance(containers, list):
            yield from (c for c in containers if isinstance(c, Mapping))


def _positive_qos_quantities(resources: Mapping[str, Any]) -> dict[str, Quantity]:
    """cpu and memory entries above zero; unparsable ones are validation's business."""
    found: dict[str, Quantity] = {}
    for name in K8S_QOS_RESOURCES:
        if name not in resources:
            continue
        try:
            quantity = parse_quantity(resources[name])
        except QuantityError:
            continue
        if quantity > 0:
            found[name] = quantity
    return found


def k8s_qos_class(spec: Mapping[str, Any]) -> str:
    """Kubernetes' GetPodQOS over a pod spec. A resource with a limit but no request requests its
    limit (Kubernetes' pod defaulting), so raw and defaulted specs give the same class."""
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    guaranteed = True
    for container in _containers(spec):
        resources = _mapping(container.get("resources"))
        raw_requests = _mapping(resources.get("requests"))
        container_limits = _positive_qos_quantities(_mapping(resources.get("limits")))
        container_requests = _positive_qos_quantities(raw_requests)
        for name, limit in container_limits.items():
            if name not in raw_requests:
                container_requests[name] = limit
        for totals, amounts in ((requests, container_requests), (limits, container_limits)):
            for name, quantity in amounts.items():
                totals[name] = totals.get(name, Quantity.zero()) + quantity
        guaranteed = guaranteed and all(name in container_limits for name in K8S_QOS_RESOURCES)
    if not requests and not limits:
        return BEST_EFFORT
    if guaranteed and requests == limits:
        return GUARANTEED
    return BURSTABLE


# --- Lahar QoS ----------------------------------------------------------------------------------


class QoSClass(enum.StrEnum):
    LC = "LC"  # latency-critical: online, may hold exclusive cores, never throttled
    LS = "LS"  # latency-sensitive: online on shared cores
    BE = "BE"  # best-effort: offline, borrows idle capacity, reclaimed and evicted first
    SYSTEM = "SYSTEM"  # node daemons: left alone


QOS_CLASS_KEY = "lahar.dev/qos-class"
VOLCANO_QOS_KEY = "volcano.sh/qos-level"
KOORDINATOR_QOS_KEY = "koordinator.sh/qosClass"

VOLCANO_LEVELS: Mapping[str, QoSClass] = {
    "LC": QoSClass.LC,
    "HLS": QoSClass.LC,
    "LS": QoSClass.LS,
    "BE": QoSClass.BE,
}
KOORDINATOR_CLASSES: Mapping[str, QoSClass] = {
    "LSE": QoSClass.LC,
    "LSR": QoSClass.LC,
    "LS": QoSClass.LS,
    "BE": QoSClass.BE,
    "SYSTEM": QoSClass.SYSTEM,
}
CRITICAL_PRIORITY_CLASSES = frozenset({"system-node-critical", "system-cluster-critical"})
# Kubernetes' SystemCriticalPriority: pods at or above it are critical whatever their class name.
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
BATCH_RESOURCES = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")

Rule = Callable[[Mapping[str, Any]], "QoSClass | None"]


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(pod.get("metadata")).get("labels"))


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(pod.get("metadata")).get("annotations"))


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(pod.get("spec"))


def from_lahar_key(pod: Mapping[str, Any]) -> QoSClass | None:
    """`lahar.dev/qos-class`, the label first, then the annotation."""
    for source in (_labels(pod), _annotations(pod)):
        value = source.get(QOS_CLASS_KEY)
        if isinstance(value, str) and value in QoSClass._value2member_map_:
            return QoSClass(value)
    return None


def from_volcano_annotation(pod: Mapping[str, Any]) -> QoSClass | None:
    return VOLCANO_LEVELS.get(_annotations(pod).get(VOLCANO_QOS_KEY))  # type: ignore[arg-type]


def from_koordinator_label(pod: Mapping[str, Any]) -> QoSClass | None:
    return KOORDINATOR_CLASSES.get(_labels(pod).get(KOORDINATOR_QOS_KEY))  # type: ignore[arg-type]


def from_critical_priority(pod: Mapping[str, Any]) -> QoSClass | None:
    """kube-system critical pods: the system-* priority classes (only kube-system may use them
    by default) or a priority at Kubernetes' system-critical level."""
    spec = _spec(pod)
    priority = spec.get("priority")
    if spec.get("priorityClassName") in CRITICAL_PRIORITY_CLASSES or (
        isinstance(priority, int) and priority >= SYSTEM_CRITICAL_PRIORITY
    ):
        return QoSClass.SYSTEM
    return None


def _requests_batch_resources(spec: Mapping[str, Any]) -> bool:
    for container in _containers(spec):
        resources = _mapping(container.get("resources"))
        for kind in ("requests", "limits"):
            if any(name in _mapping(resources.get(kind)) for name in BATCH_RESOURCES):
                return True
    return False


def from_resources(pod: Mapping[str, Any]) -> QoSClass | None:
    """Kubernetes BestEffort pods and pods asking for oversold batch resources are offline."""
    spec = _spec(pod)
    k8s_class = _mapping(pod.get("status")).get("qosClass") or k8s_qos_class(spec)
    if k8s_class == BEST_EFFORT or _requests_batch_resources(spec):
        return QoSClass.BE
    return None


# First match wins, in the order of DESIGN.md's table.
RULES: tuple[Rule, ...] = (
    from_lahar_key,
    from_volcano_annotation,
    from_koordinator_label,
    from_critical_priority,
    from_resources,
)


def qos_class(pod: Mapping[str, Any]) -> QoSClass:
    """Lahar's QoS class of a pod dict; LS when no rule matches (Guaranteed and Burstable pods)."""
    for rule in RULES:
        found = rule(pod)
        if found is not None:
            return found
    return QoSClass.LS


def validate_qos_keys(metadata: Field) -> None:
    """Refuse a `lahar.dev/qos-class` Lahar would not understand, rather than silently ignore it."""
    allowed = [c.value for c in QoSClass]
    for source in ("labels", "annotations"):
        value = metadata.child(source).child(QOS_CLASS_KEY)
        value.as_choice(allowed, "QoS class")
        if value.value == "":
            value.not_supported("", allowed, "QoS class")
