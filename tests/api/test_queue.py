"""Queue: defaults, weight and resource-bound validation, the view."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lahar.api import queue
from lahar.api.queue import DEFAULT_QUEUE, Queue, QueueState

GI = 2**30


def research_queue() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "research"},
        "spec": {
            "weight": 4,
            "capability": {"cpu": "64", "memory": "256Gi"},
            "guarantee": {"resource": {"cpu": "8", "memory": "32Gi"}},
            "deserved": {"cpu": "32", "nvidia.com/gpu": "4"},
            "priority": 10,
            "parent": "root",
        },
    }


def errors(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in queue.validate(obj)]


def test_default_queue_name() -> None:
    assert DEFAULT_QUEUE == "default"


def test_valid_queue() -> None:
    assert errors(research_queue()) == []
    assert errors(queue.defaults(research_queue())) == []


def test_defaults() -> None:
    manifest = {"metadata": {"name": "q"}}
    before = copy.deepcopy(manifest)
    defaulted = queue.defaults(manifest)
    assert manifest == before
    assert defaulted["spec"] == {"weight": 1, "reclaimable": True}
    assert defaulted["status"] == {"state": "Open"}


def test_defaults_keep_given_values() -> None:
    manifest = research_queue()
    manifest["spec"]["reclaimable"] = False
    manifest["status"] = {"state": "Closing"}
    defaulted = queue.defaults(manifest)
    assert (defaulted["spec"]["weight"], defaulted["spec"]["reclaimable"]) == (4, False)
    assert defaulted["status"]["state"] == "Closing"


CASES = [
    ({"weight": 0}, "spec.weight", "must be greater than or equal to 1"),
    ({"weight": "heavy"}, "spec.weight", 'expected an integer, got string "heavy"'),
    (
        {"guarantee": {"resource": {"cpu": "65"}}},
        "spec.guarantee.resource.cpu",
        "must not be greater than capability.cpu (64)",
    ),
    ({"deserved": {"memory": "300Gi"}}, "spec.deserved.memory", "must not be greater than capability.memory (256Gi)"),
    ({"capability": {"cpu": "sixty-four"}}, "spec.capability.cpu", 'invalid quantity "sixty-four": missing number'),
    (
        {"guarantee": {"cpu": "1"}},
        "spec.guarantee.cpu",
        'unknown field "cpu" (resources go under spec.guarantee.resource)',
    ),
    ({"deserved": {"cpu": "-2"}}, "spec.deserved.cpu", 'invalid quantity "-2": must be greater than or equal to 0'),
    ({"reclaimable": "yes"}, "spec.reclaimable", 'expected a boolean, got string "yes"'),
    ({"parent": "research"}, "spec.parent", "a queue cannot be its own parent"),
]


@pytest.mark.parametrize(("spec", "field", "message"), CASES, ids=[f"{c[1]}:{c[2][:20]}" for c in CASES])
def test_invalid_queue(spec: dict[str, Any], field: str, message: str) -> None:
    manifest = research_queue()
    manifest["spec"].update(spec)
    assert (field, message) in errors(manifest)


def test_resources_missing_from_capability_are_unbounded() -> None:
    manifest = research_queue()
    manifest["spec"]["guarantee"]["resource"]["nvidia.com/gpu"] = "8"
    assert errors(manifest) == []


def test_invalid_state() -> None:
    manifest = research_queue()
    manifest["status"] = {"state": "Paused"}
    assert errors(manifest) == [
        ("status.state", 'unsupported queue state "Paused" (supported: "Open", "Closing", "Closed", "Unknown")'),
    ]


def test_view() -> None:
    view = Queue(research_queue())
    assert (view.name, view.weight, view.priority, view.parent) == ("research", 4, 10, "root")
    assert dict(view.capability) == {"cpu": 64000, "memory": 256 * GI}
    assert dict(view.guarantee) == {"cpu": 8000, "memory": 32 * GI}
    assert dict(view.deserved) == {"cpu": 32000, "nvidia.com/gpu": 4}
    assert view.reclaimable and view.state is QueueState.OPEN and view.is_open


def test_view_of_a_closed_queue() -> None:
    view = Queue({"metadata": {"name": "old"}, "spec": {"reclaimable": False}, "status": {"state": "Closed"}})
    assert view.weight == 1 and not view.reclaimable and not view.is_open
    assert view.state is QueueState.CLOSED
    assert Queue({"status": {"state": "Broken"}}).state is QueueState.UNKNOWN


def test_node_group_affinity_must_list_group_names() -> None:
    obj = research_queue()
    rule = "requiredDuringSchedulingIgnoredDuringExecution"
    obj["spec"]["affinity"] = {"nodeGroupAffinity": {rule: ["g1", "g2"]}, "nodeGroupAntiAffinity": {rule: []}}
    assert errors(obj) == []
    obj["spec"]["affinity"]["nodeGroupAntiAffinity"][rule] = "g3"
    obj["spec"]["affinity"]["nodeGroupAffinity"][rule] = ["g1", 2]
    assert [field for field, _ in errors(obj)] == [
        f"spec.affinity.nodeGroupAffinity.{rule}[1]",
        f"spec.affinity.nodeGroupAntiAffinity.{rule}",
    ]
    obj["spec"]["affinity"] = ["g1"]
    assert [field for field, _ in errors(obj)] == ["spec.affinity"]
