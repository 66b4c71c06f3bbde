"""Node (`v1`): a cheap view for the scheduler, Kubernetes' one defaulting rule (allocatable
defaults to capacity) and validation of taints and resource quantities."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lahar.api.errors import DUPLICATE, Field, FieldError, child_dict, json_copy, set_default
from lahar.api.meta import MetaAccessors, ObjectMeta, check_name, label_value_problems, qualified_name_problems
from lahar.api.quantity import canonicalize_resource_list
from lahar.api.resources import ResourceList

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
CONDITION_STATUSES = ("True", "False", "Unknown")
READY = "Ready"

_EMPTY: Mapping[str, Any] = {}


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""
    time_added: str | None = None

    @classmethod
    def from_dict(cls, taint: Mapping[str, Any]) -> Taint:
        return cls(taint.get("key", ""), taint.get("effect", ""), taint.get("value") or "", taint.get("timeAdded"))

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"key": self.key, "effect": self.effect}
        if self.value:
            result["value"] = self.value
        if self.time_added:
            result["timeAdded"] = self.time_added
        return result


class Node(MetaAccessors):
    """A read-only view over a Node dict; resource lists and taints are parsed on first use."""

    __slots__ = ("_allocatable", "_capacity", "_spec", "_status", "_taints", "meta", "raw")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.raw = obj
        self.meta = ObjectMeta.of(obj)
        self._spec: Mapping[str, Any] = obj.get("spec") or _EMPTY
        self._status: Mapping[str, Any] = obj.get("status") or _EMPTY
        self._capacity: ResourceList | None = None
        self._allocatable: ResourceList | None = None
        self._taints: tuple[Taint, ...] | None = None

    @property
    def unschedulable(self) -> bool:
        return bool(self._spec.get("unschedulable"))

    @property
    def taints(self) -> tuple[Taint, ...]:
        if self._taints is None:
            self._taints = tuple(Taint.from_dict(t) for t in self._spec.get("taints") or ())
        return self._taints

    @property
    def capacity(self) -> ResourceList:
        if self._capacity is None:
            self._capacity = ResourceList.from_k8s(self._status.get("capacity"), "status.capacity")
        return self._capacity

    @property
    def allocatable(self) -> ResourceList:
        """What pods may request; Kubernetes defaults it to the capacity."""
        if self._allocatable is None:
            allocatable = self._status.get("allocatable")
            self._allocatable = (
                self.capacity if allocatable is None else ResourceList.from_k8s(allocatable, "status.allocatable")
            )
        return self._allocatable

    @property
    def conditions(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self._status.get("conditions") or ())

    def condition(self, condition_type: str) -> Mapping[str, Any] | None:
        return next((c for c in self.conditions if c.get("type") == condition_type), None)

    @property
    def ready(self) -> bool:
        ready = self.condition(READY)
        return ready is not None and ready.get("status") == "True"

    def __repr__(self) -> str:
        return f"Node({self.name!r})"


def defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A defaulted copy: quantities in canonical form; `status.allocatable` copies
    `status.capacity` when absent."""
    result = json_copy(obj)
    status = child_dict(result, "status")
    for key in ("capacity", "allocatable"):  # stored in canonical form, as kube-apiserver does
        canonicalize_resource_list(child_dict(status, key))
    capacity = child_dict(status, "capacity")
    if capacity is not None:
        set_default(result["status"], "allocatable", dict(capacity))
    return result


def validate_taints(taints: Field) -> None:
    seen: set[tuple[str, str]] = set()
    for taint in taints.elements():
        key = taint.child("key")
        if key.require_str():
            check_name(key, qualified_name_problems)
        check_name(taint.child("value"), label_value_problems)
        effect = taint.child("effect")
        if effect.require_str():
            effect.as_choice(TAINT_EFFECTS, "taint effect")
        taint.child("timeAdded").as_str()
        if isinstance(key.value, str) and isinstance(effect.value, str):
            if (key.value, effect.value) in seen:
                taint.report(
                    f'taints must be unique by key and effect: "{key.value}:{effect.value}" is repeated', DUPLICATE
                )
            seen.add((key.value, effect.value))


def validate_conditions(conditions: Field) -> None:
    for condition in conditions.elements():
        condition.child("type").require_str()
        condition.child("status").as_choice(CONDITION_STATUSES, "condition status")


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    spec = root.child("spec")
    spec.child("unschedulable").as_bool()
    spec.child("podCIDR").as_str()
    spec.child("providerID").as_str()
    validate_taints(spec.child("taints"))
    status = root.child("status")
    status.child("capacity").as_quantities()
    status.child("allocatable").as_quantities()
    validate_conditions(status.child("conditions"))
    return root.errors
