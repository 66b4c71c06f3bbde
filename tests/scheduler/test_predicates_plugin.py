"""The predicates plugin, each way: resources and pod slots, nodeSelector, required node affinity,
taints and tolerations, unschedulable nodes, and kube-scheduler's wording of the reasons."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lahar.scheduler.framework.session import Session, open_session
from tests.scheduler.cluster_fixtures import Obj, conf, node, pod, snapshot, task_named

NODES = [
    node("a1", labels={"zone": "a", "gpus": "2"}),
    node("a2", labels={"zone": "a", "gpus": "8"}),
    node("b1", labels={"zone": "b"}),
    node("c1", labels={"zone": "c", "gpus": "x"}),
]


def _session(objects: list[Obj], **arguments: Any) -> Session:
    plugin = {"name": "predicates", "arguments": arguments} if arguments else "predicates"
    return open_session(snapshot(objects), conf("allocate", [plugin]))


def _fitting(objects: list[Obj], pod_name: str, **arguments: Any) -> list[str]:
    session = _session(objects, **arguments)
    return [session.nodes.names[row] for row in session.predicate(task_named(session, pod_name)).nonzero()[0]]


def _explain(objects: list[Obj], pod_name: str) -> dict[str, int]:
    session = _session(objects)
    return dict(session.explain(task_named(session, pod_name)))


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def _expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def test_node_selector_keeps_to_matching_nodes_and_names_the_mismatch() -> None:
    objects = [*NODES, pod("p", node_selector={"zone": "a"}), pod("q", node_selector={"zone": "z"})]
    assert _fitting(objects, "p") == ["a1", "a2"]
    assert _fitting(objects, "q") == []
    assert _explain(objects, "q") == {"node(s) didn't match Pod's node affinity/selector": 4}


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        (_expression("zone", "In", "a", "c"), ["a1", "a2", "c1"]),
        (_expression("zone", "NotIn", "a"), ["b1", "c1"]),
        (_expression("gpus", "Exists"), ["a1", "a2", "c1"]),
        (_expression("gpus", "DoesNotExist"), ["b1"]),
        (_expression("gpus", "Gt", "4"), ["a2"]),  # "x" is no integer: neither Gt nor Lt
        (_expression("gpus", "Lt", "4"), ["a1"]),
        (_expression("gpus", "Gt", "four"), []),
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b1", "c1"]}]}, ["b1", "c1"]),
        ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["b1"]}]}, ["a1", "a2", "c1"]),
        (
            {
                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a2", "b1"]}],
            },
            ["a2"],
        ),
        ({}, []),  # an empty term matches nothing
    ],
)
def test_required_node_affinity_operators(term: dict[str, Any], expected: list[str]) -> None:
    assert _fitting([*NODES, pod("p", affinity=_required(term))], "p") == expected


def test_required_node_affinity_terms_are_ored_and_and_with_the_selector() -> None:
    affinity = _required(_expression("zone", "In", "b"), _expression("gpus", "Gt", "4"))
    assert _fitting([*NODES, pod("p", affinity=affinity)], "p") == ["a2", "b1"]
    assert _fitting([*NODES, pod("p", affinity=affinity, node_selector={"zone": "a"})], "p") == ["a2"]


def test_affinity_checks_can_be_switched_off() -> None:
    objects = [*NODES, pod("p", node_selector={"zone": "z"})]
    assert _fitting(objects, "p", **{"predicate.NodeAffinityEnable": False}) == ["a1", "a2", "b1", "c1"]


TAINTED = [
    node("gpu", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    node("drain", taints=[{"key": "drain", "effect": "NoExecute"}]),
    node("soft", taints=[{"key": "spare", "value": "yes", "effect": "PreferNoSchedule"}]),
]


def test_untolerated_no_schedule_and_no_execute_taints_keep_pods_off() -> None:
    objects = [*TAINTED, pod("p")]
    assert _fitting(objects, "p") == ["soft"]
    assert _explain(objects, "p") == {
        "node(s) had untolerated taint {dedicated: gpu}": 1,
        "node(s) had untolerated taint {drain: }": 1,
    }


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, ["gpu", "soft"]),
        ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, ["soft"]),
        ({"key": "dedicated", "operator": "Exists"}, ["gpu", "soft"]),
        ({"key": "drain", "operator": "Exists", "effect": "NoExecute"}, ["drain", "soft"]),
        ({"operator": "Exists"}, ["gpu", "drain", "soft"]),
    ],
)
def test_tolerations_let_pods_on(toleration: dict[str, Any], expected: list[str]) -> None:
    assert _fitting([*TAINTED, pod("p", tolerations=[toleration])], "p") == expected


def test_taint_checks_can_be_switched_off() -> None:
    assert _fitting([*TAINTED, pod("p")], "p", **{"predicate.TaintTolerationEnable": False}) == ["gpu", "drain", "soft"]


def test_resources_and_pod_slots_must_fit_and_each_short_resource_is_named() -> None:
    objects = [
        node("small", cpu="1", memory="1Gi"),
        node("full", pods=1),
        node("roomy"),
        pod("running", cpu="100m", memory="100Mi", node_name="full", phase="Running"),
        pod("p", cpu="2", memory="2Gi"),
    ]
    assert _fitting(objects, "p") == ["roomy"]
    objects[-1] = pod("p", cpu="8", memory="2Gi")
    assert _explain(objects, "p") == {"Insufficient cpu": 3, "Insufficient memory": 1, "Too many pods": 1}


def test_extended_resources_fit_like_cpu() -> None:
    objects = [node("plain"), node("gpu", **{"nvidia.com/gpu": "1"}), pod("p", **{"nvidia.com/gpu": "1"})]
    assert _fitting(objects, "p") == ["gpu"]
    assert _explain(objects, "p") == {"Insufficient nvidia.com/gpu": 1}


def test_unschedulable_and_not_ready_nodes_take_nothing() -> None:
    objects = [node("cordoned", unschedulable=True), node("down", ready=False), node("up"), pod("p")]
    assert _fitting(objects, "p") == ["up"]
    objects.pop(2)
    assert _explain(objects, "p") == {"node(s) not ready or unschedulable": 2}


def test_the_fit_rule_counts_copies_and_lends_be_capacity_to_best_effort_tasks_only() -> None:
    objects = [
        node("n1", cpu="4", memory="8Gi", pods=3),
        node("n2", cpu="2", memory="8Gi"),
        pod("ls-running", cpu="3", memory="1Gi", node_name="n1", phase="Running"),
        pod("ls", cpu="1", memory="1Gi"),
        pod("be", cpu="1", memory="1Gi", annotations={"lahar.dev/qos-class": "BE"}),
    ]
    session = _session(objects)
    nodes = session.nodes
    ls, be = task_named(session, "ls"), task_named(session, "be")
    assert nodes.copies(ls).tolist() == [1, 2]  # n1: 1 cpu left; n2: 2 cpu
    # Agents lend 2 cpu / 4Gi of reclaimable capacity on each node to BE tasks.
    lent = np.array([[2000, 4 << 30], [2000, 4 << 30]])
    assert nodes.copies(be, be_capacity=lent).tolist() == [2, 2]  # n1: 2 pod slots left
    assert nodes.fits(be, be_capacity=lent).tolist() == [True, True]
    assert nodes.copies(ls, be_capacity=lent).tolist() == [1, 2]  # online tasks borrow nothing
    assert dict(nodes.shortfall(ls, nodes.free(ls) - 2 * ls.request)) == {"Insufficient cpu": 2, "Too many pods": 1}
