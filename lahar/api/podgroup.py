"""PodGroup (`scheduling.volcano.sh/v1beta1`): a gang, the unit the scheduler admits and places
all-or-nothing. Spark, Kubeflow and Ray create these for Volcano; Lahar's controller creates one
per Job. Pods join a group by annotation."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from lahar.api.errors import DUPLICATE, TOO_LONG, Field, FieldError, child_dict, json_copy, set_default
from lahar.api.meta import ObjectView, check_name, dns1123_subdomain_problems, qualified_name_problems
from lahar.api.node import validate_conditions
from lahar.api.queue import DEFAULT_QUEUE
from lahar.api.resources import ResourceList
from lahar.api.selectors import validate_label_selector

# The annotation a pod names its PodGroup with (Volcano's KubeGroupNameAnnotationKey).
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
DEFAULT_MIN_MEMBER = 1


class PodGroupPhase(enum.StrEnum):
    PENDING = "Pending"
    INQUEUE = "Inqueue"
    RUNNING = "Running"
    UNKNOWN = "Unknown"
    COMPLETED = "Completed"


class PodGroupConditionType(enum.StrEnum):
    UNSCHEDULABLE = "Unschedulable"
    SCHEDULED = "Scheduled"


STATUS_COUNTERS = ("running", "succeeded", "failed")
# spec.networkTopology.mode (Volcano's NetworkTopologyMode); "hard" when not given.
NETWORK_TOPOLOGY_MODES = ("hard", "soft")

_EMPTY: Mapping[str, Any] = {}


class PodGroup(ObjectView):
    """A read-only view over a PodGroup dict."""

    __slots__ = ("_min_resources",)

    def __init__(self, obj: Mapping[str, Any]) -> None:
        super().__init__(obj)
        self._min_resources: ResourceList | None = None

    @property
    def min_member(self) -> int:
        min_member = self.spec.get("minMember")
        return DEFAULT_MIN_MEMBER if min_member is None else min_member

    @property
    def min_task_member(self) -> Mapping[str, int]:
        return self.spec.get("minTaskMember") or _EMPTY

    @property
    def min_resources(self) -> ResourceList:
        if self._min_resources is None:
            self._min_resources = ResourceList.from_k8s(self.spec.get("minResources"), "spec.minResources")
        return self._min_resources

    @property
    def queue(self) -> str:
        return self.spec.get("queue") or DEFAULT_QUEUE

    @property
    def priority_class_name(self) -> str:
        return self.spec.get("priorityClassName") or ""

    @property
    def phase(self) -> PodGroupPhase:
        raw_phase = self.status.get("phase") or PodGroupPhase.PENDING
        return PodGroupPhase(raw_phase) if raw_phase in PodGroupPhase._value2member_map_ else PodGroupPhase.UNKNOWN

    @property
    def conditions(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self.status.get("conditions") or ())

    def condition(self, condition_type: str) -> Mapping[str, Any] | None:
        return next((c for c in self.conditions if c.get("type") == condition_type), None)

    @property
    def running(self) -> int:
        return self.status.get("running") or 0

    @property
    def succeeded(self) -> int:
        return self.status.get("succeeded") or 0

    @property
    def failed(self) -> int:
        return self.status.get("failed") or 0

    def __repr__(self) -> str:
        return f"PodGroup({self.key!r})"


def defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A defaulted copy: minMember 1, queue "default", status.phase Pending."""
    result = json_copy(obj)
    spec = child_dict(result, "spec", create=True)
    if spec is not None:
        set_default(spec, "minMember", DEFAULT_MIN_MEMBER)
        if not spec.get("queue"):
            spec["queue"] = DEFAULT_QUEUE
    status = child_dict(result, "status", create=True)
    if status is not None and not status.get("phase"):
        status["phase"] = PodGroupPhase.PENDING.value
    return result


def validate_network_topology(topology: Field) -> None:
    """`networkTopology` (a PodGroup's, or a Volcano Job's that the controller copies to its
    PodGroup): `mode` hard or soft, `highestTierAllowed` a tier (0 or more) or `highestTierName`
    a HyperNode's `spec.tierName`. A malformed one is refused here rather than ignored by the
    scheduler."""
    if not topology.present or topology.as_mapping() is None:
        return
    topology.child("mode").as_choice(NETWORK_TOPOLOGY_MODES, "mode")
    topology.child("highestTierAllowed").as_int(minimum=0)
    topology.child("highestTierName").as_str()


def validate_sub_group_policy(policies: Field) -> None:
    """`subGroupPolicy` (Volcano's partition policy, read by the scheduler's sub-jobs): a list of
    policies, each with a name (253 characters at most; unique, since minSubGroups is counted per
    name), `subGroupSize` at least 1, `minSubGroups` at least 0, `matchLabelKeys` label keys,
    `labelSelector` a label selector and `networkTopology` as the PodGroup's."""
    if not policies.present or policies.as_list() is None:
        return
    seen: set[str] = set()
    for policy in policies.elements():
        if policy.as_mapping() is None:
            continue
        name = policy.child("name")
        text = name.as_str()
        if text is not None:
            if len(text) > 253:
                name.report("must be no more than 253 characters", TOO_LONG)
            if text in seen:
                name.report(f'duplicate policy name "{text}": minSubGroups is counted per name', DUPLICATE)
            seen.add(text)
        size = policy.child("subGroupSize")
        if size.present:
            size.as_int(minimum=1)
        policy.child("minSubGroups").as_int(minimum=0)
        for key in policy.child("matchLabelKeys").elements():
            check_name(key, qualified_name_problems)
        validate_label_selector(policy.child("labelSelector"))
        validate_network_topology(policy.child("networkTopology"))


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    spec = root.child("spec")
    validate_network_topology(spec.child("networkTopology"))
    validate_sub_group_policy(spec.child("subGroupPolicy"))
    spec.child("minMember").as_int(minimum=0)
    for task, count in spec.child("minTaskMember").entries():
        if not task:
            count.report("task name must not be empty")
        count.as_int(minimum=0)
    spec.child("minResources").as_quantities()
    for key in ("queue", "priorityClassName"):
        check_name(spec.child(key), dns1123_subdomain_problems, allow_empty=True)
    status = root.child("status")
    status.child("phase").as_choice(list(PodGroupPhase), "phase")
    validate_conditions(status.child("conditions"))
    for counter in STATUS_COUNTERS:
        status.child(counter).as_int(minimum=0)
    return root.errors
