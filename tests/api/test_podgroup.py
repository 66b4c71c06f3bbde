"""PodGroup: defaults, validation and the view the scheduler reads."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lahar.api import podgroup
from lahar.api.podgroup import GROUP_NAME_ANNOTATION, PodGroup, PodGroupConditionType, PodGroupPhase

GI = 2**30


def spark_podgroup() -> dict[str, Any]:
    """The shape Spark's Volcano feature step creates."""
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "spark-pi-pg", "namespace": "spark"},
        "spec": {
            "minMember": 3,
            "minTaskMember": {"driver": 1, "executor": 2},
            "minResources": {"cpu": "3", "memory": "6Gi"},
            "queue": "analytics",
            "priorityClassName": "batch-low",
        },
    }


def errors(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in podgroup.validate(obj)]


def test_group_name_annotation() -> None:
    assert GROUP_NAME_ANNOTATION == "scheduling.k8s.io/group-name"


def test_spark_podgroup_is_valid() -> None:
    assert errors(spark_podgroup()) == []
    assert errors(podgroup.defaults(spark_podgroup())) == []


def test_sub_group_policy_is_valid() -> None:
    """Volcano's partition policy as its job controller writes it, and one with every field."""
    manifest = spark_podgroup()
    manifest["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 2}
    manifest["spec"]["subGroupPolicy"] = [
        {"name": "executor", "subGroupSize": 2, "minSubGroups": 1, "matchLabelKeys": ["volcano.sh/partition-id"]},
        {
            "name": "workers",
            "matchLabelKeys": ["volcano.sh/task-spec", "rack"],
            "labelSelector": {"matchLabels": {"role": "worker"}},
            "networkTopology": {"mode": "soft", "highestTierName": "spine"},
        },
    ]
    assert errors(manifest) == []


def test_defaults() -> None:
    manifest = {"metadata": {"name": "pg", "namespace": "default"}}
    before = copy.deepcopy(manifest)
    defaulted = podgroup.defaults(manifest)
    assert manifest == before
    assert defaulted["spec"] == {"minMember": 1, "queue": "default"}
    assert defaulted["status"] == {"phase": "Pending"}


def test_defaults_keep_given_values() -> None:
    manifest = spark_podgroup()
    manifest["spec"]["minMember"] = 0
    manifest["status"] = {"phase": "Running"}
    defaulted = podgroup.defaults(manifest)
    assert (defaulted["spec"]["minMember"], defaulted["spec"]["queue"]) == (0, "analytics")
    assert defaulted["status"]["phase"] == "Running"


CASES = [
    ({"minMember": -1}, "spec.minMember", "must be greater than or equal to 0"),
    (
        {"networkTopology": {"mode": "medium"}},
        "spec.networkTopology.mode",
        'unsupported mode "medium" (supported: "hard", "soft")',
    ),
    (
        {"networkTopology": {"mode": "hard", "highestTierAllowed": -1}},
        "spec.networkTopology.highestTierAllowed",
        "must be greater than or equal to 0",
    ),
    (
        {"networkTopology": {"mode": "soft", "highestTierName": 3}},
        "spec.networkTopology.highestTierName",
        "expected a string, got integer 3",
    ),
    ({"subGroupPolicy": {"name": "w"}}, "spec.subGroupPolicy", "expected an array, got object"),
    (
        {"subGroupPolicy": [{"name": "w", "subGroupSize": 0}]},
        "spec.subGroupPolicy[0].subGroupSize",
        "must be greater than or equal to 1",
    ),
    (
        {"subGroupPolicy": [{"name": "w", "minSubGroups": -1}]},
        "spec.subGroupPolicy[0].minSubGroups",
        "must be greater than or equal to 0",
    ),
    (
        {"subGroupPolicy": [{"name": "w", "matchLabelKeys": ["bad key"]}]},
        "spec.subGroupPolicy[0].matchLabelKeys[0]",
        "invalid value \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must"
        " start and end with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')",
    ),
    (
        {"subGroupPolicy": [{"name": "w", "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]},
        "spec.subGroupPolicy[0].labelSelector",
        "invalid label selector: 'Near' is not a valid label selector operator (key 'a'); expected one of In,"
        " NotIn, Exists, DoesNotExist",
    ),
    (
        {"subGroupPolicy": [{"name": "w", "networkTopology": {"mode": "tight"}}]},
        "spec.subGroupPolicy[0].networkTopology.mode",
        'unsupported mode "tight" (supported: "hard", "soft")',
    ),
    (
        {"subGroupPolicy": [{"name": "w"}, {"name": "w"}]},
        "spec.subGroupPolicy[1].name",
        'duplicate policy name "w": minSubGroups is counted per name',
    ),
    ({"minMember": "3"}, "spec.minMember", 'expected an integer, got string "3"'),
    ({"minTaskMember": {"executor": -2}}, "spec.minTaskMember.executor", "must be greater than or equal to 0"),
    ({"minTaskMember": ["executor"]}, "spec.minTaskMember", "expected an object, got array"),
    ({"minResources": {"memory": "6 Gi"}}, "spec.minResources.memory", 'invalid quantity "6 Gi": contains whitespace'),
    (
        {"minResources": {"cpu": "-1"}},
        "spec.minResources.cpu",
        'invalid quantity "-1": must be greater than or equal to 0',
    ),
    (
        {"minResources": {"nvidia.com/gpu": "x"}},
        "spec.minResources[nvidia.com/gpu]",
        'invalid quantity "x": missing number',
    ),
    (
        {"queue": "Analytics"},
        "spec.queue",
        'invalid value "Analytics": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')",
    ),
]


@pytest.mark.parametrize(("spec", "field", "message"), CASES, ids=[c[1] for c in CASES])
def test_invalid_podgroup(spec: dict[str, Any], field: str, message: str) -> None:
    manifest = spark_podgroup()
    manifest["spec"].update(spec)
    assert errors(manifest) == [(field, message)]


def test_invalid_status() -> None:
    manifest = spark_podgroup()
    manifest["status"] = {
        "phase": "Sleeping",
        "running": -1,
        "conditions": [{"type": "Unschedulable", "status": "Maybe"}],
    }
    assert errors(manifest) == [
        (
            "status.phase",
            'unsupported phase "Sleeping" (supported: "Pending", "Inqueue", "Running", "Unknown", "Completed")',
        ),
        ("status.conditions[0].status", 'unsupported condition status "Maybe" (supported: "True", "False", "Unknown")'),
        ("status.running", "must be greater than or equal to 0"),
    ]


def test_view() -> None:
    manifest = spark_podgroup()
    manifest["status"] = {
        "phase": "Inqueue",
        "running": 1,
        "succeeded": 2,
        "conditions": [{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources"}],
    }
    view = PodGroup(manifest)
    assert (view.name, view.namespace, view.key) == ("spark-pi-pg", "spark", "spark/spark-pi-pg")
    assert view.min_member == 3 and view.min_task_member == {"driver": 1, "executor": 2}
    assert dict(view.min_resources) == {"cpu": 3000, "memory": 6 * GI}
    assert (view.queue, view.priority_class_name) == ("analytics", "batch-low")
    assert view.phase is PodGroupPhase.INQUEUE
    assert (view.running, view.succeeded, view.failed) == (1, 2, 0)
    unschedulable = view.condition(PodGroupConditionType.UNSCHEDULABLE)
    assert unschedulable is not None and unschedulable["reason"] == "NotEnoughResources"
    assert view.condition(PodGroupConditionType.SCHEDULED) is None


def test_view_of_a_bare_podgroup_uses_defaults() -> None:
    view = PodGroup({"metadata": {"name": "pg"}, "spec": {"minMember": 0}, "status": {"phase": "Weird"}})
    assert view.min_member == 0  # an explicit 0 is not "unset"
    assert view.queue == "default" and view.phase is PodGroupPhase.UNKNOWN
    assert PodGroup({}).min_member == 1 and PodGroup({}).phase is PodGroupPhase.PENDING
