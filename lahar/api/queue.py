"""Queue (`scheduling.volcano.sh/v1beta1`, cluster-scoped): how the cluster is shared. A view,
Volcano's defaults (weight 1, reclaimable) and validation of weights and resource bounds."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from lahar.api.errors import Field, FieldError, child_dict, json_copy, set_default
from lahar.api.meta import ObjectView, check_name, dns1123_subdomain_problems
from lahar.api.quantity import Quantity
from lahar.api.resources import ResourceList

DEFAULT_QUEUE = "default"
# Volcano's hierarchy root: queues without a parent hang under it.
ROOT_QUEUE = "root"
DEFAULT_WEIGHT = 1


class QueueState(enum.StrEnum):
    OPEN = "Open"
    CLOSING = "Closing"
    CLOSED = "Closed"
    UNKNOWN = "Unknown"


_EMPTY: Mapping[str, Any] = {}


class Queue(ObjectView):
    """A read-only view over a Queue dict."""

    __slots__ = ()

    @property
    def weight(self) -> int:
        return self.spec.get("weight") or DEFAULT_WEIGHT

    @property
    def capability(self) -> ResourceList:
        """The most the queue may use; an absent resource is unbounded."""
        return ResourceList.from_k8s(self.spec.get("capability"), "spec.capability")

    @property
    def guarantee(self) -> ResourceList:
        """Reserved for the queue even when idle (Volcano nests it as `guarantee.resource`)."""
        guarantee = self.spec.get("guarantee") or _EMPTY
        return ResourceList.from_k8s(guarantee.get("resource"), "spec.guarantee.resource")

    @property
    def deserved(self) -> ResourceList:
        return ResourceList.from_k8s(self.spec.get("deserved"), "spec.deserved")

    @property
    def reclaimable(self) -> bool:
        return self.spec.get("reclaimable", True) is not False

    @property
    def priority(self) -> int:
        return self.spec.get("priority") or 0

    @property
    def parent(self) -> str:
        return self.spec.get("parent") or ""

    @property
    def state(self) -> QueueState:
        raw_state = self.status.get("state") or QueueState.OPEN
        return QueueState(raw_state) if raw_state in QueueState._value2member_map_ else QueueState.UNKNOWN

    @property
    def is_open(self) -> bool:
        return self.state is QueueState.OPEN

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"


def defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A defaulted copy: weight 1, reclaimable true, status.state Open. Only an absent weight
    is defaulted: Volcano also rewrites `weight: 0`, Lahar refuses it (weight must be >= 1)."""
    result = json_copy(obj)
    spec = child_dict(result, "spec", create=True)
    if spec is not None:
        set_default(spec, "weight", DEFAULT_WEIGHT)
        set_default(spec, "reclaimable", True)
    status = child_dict(result, "status", create=True)
    if status is not None and not status.get("state"):
        status["state"] = QueueState.OPEN.value
    return result


def _check_within(bounded: Field, bound: dict[str, Quantity], bound_name: str, amounts: dict[str, Quantity]) -> None:
    """Each resource of `amounts` must not exceed `bound`'s (a resource `bound` omits is unbounded)."""
    for name, amount in amounts.items():
        limit = bound.get(name)
        if limit is not None and amount > limit:
            bounded.child(name).report(f"must not be greater than {bound_name}.{name} ({limit})")


def parent_of(obj: Mapping[str, Any]) -> str:
    """A Queue dict's spec.parent, or "" when absent or malformed (validation reports that)."""
    spec = obj.get("spec")
    parent = spec.get("parent") if isinstance(spec, Mapping) else None
    return parent if isinstance(parent, str) else ""


def parent_loop(name: str, parent: str, parents: Mapping[str, str]) -> list[str] | None:
    """The loop that giving queue `name` the parent `parent` closes, as the chain from `name` back
    to itself (`[a, b, a]`), or None when the chain ends at root or at a queue that does not exist.
    `parents` maps the other queues to their parents. A loop among other queues that `name` merely
    hangs under is not this write's doing, and is not reported here. A queue naming itself is left
    to `validate`, whose message says so plainly (as the cluster's admission policy does)."""
    if parent == name:
        return None
    chain = [name]
    current = parent
    while current and current != ROOT_QUEUE:
        if current == name:
            return [*chain, name]
        if current in chain:
            return None
        chain.append(current)
        current = parents.get(current, "")
    return None


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    spec = root.child("spec")
    spec.child("weight").as_int(minimum=1)
    capability = spec.child("capability").as_quantities() or {}
    guarantee = spec.child("guarantee")
    for key, misplaced in guarantee.entries():
        # A common slip: Volcano nests the list one level down, and would silently drop this.
        if key != "resource":
            misplaced.report(f'unknown field "{key}" (resources go under spec.guarantee.resource)')
    guarantee_field = guarantee.child("resource")
    deserved_field = spec.child("deserved")
    _check_within(guarantee_field, capability, "capability", guarantee_field.as_quantities() or {})
    _check_within(deserved_field, capability, "capability", deserved_field.as_quantities() or {})
    spec.child("reclaimable").as_bool()
    spec.child("priority").as_int()
    # Node-group affinity (the scheduler's nodegroup plugin): lists of group names. Unknown keys
    # are left alone, as Volcano's decoder drops them.
    affinity = spec.child("affinity")
    for terms in ("nodeGroupAffinity", "nodeGroupAntiAffinity"):
        for rule in (
            "requiredDuringSchedulingIgnoredDuringExecution",
            "preferredDuringSchedulingIgnoredDuringExecution",
        ):
            affinity.child(terms).child(rule).as_str_list()
    parent = spec.child("parent")
    if (
        check_name(parent, dns1123_subdomain_problems, allow_empty=True)
        and parent.value == root.child("metadata").child("name").value
    ):
        parent.report("a queue cannot be its own parent")
    root.child("status").child("state").as_choice(list(QueueState), "queue state")
    return root.errors
