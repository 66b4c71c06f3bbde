"""Volcano's nodegroup plugin tests as conformance cases (issue 17; docs/scheduler-conformance.md
tallies them): `TestNodeGroup` (scores and predicate per node), `TestNodeGroupResourceLimits` and
`TestNodeGroupResourceLimitAllocationEvent`, then Lahar's own checks (bad input, a whole cycle).
Inputs and expectations are Volcano's, carried over as facts: Volcano's predicate status codes
are Success (True here) or UnschedulableAndUnresolvable (False)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lahar.scheduler.framework.plugin import ConfError
from lahar.scheduler.framework.session import Session
from lahar.scheduler.plugins.nodegroup import (
    GROUP_LABEL,
    LIMIT_EXCEEDED,
    NO_AFFINITY,
    NO_LABEL,
    RESOURCE_LIMITS,
    UNSATISFIED,
    GroupAffinity,
    NodeGroupError,
    read_affinity,
)
from tests.scheduler.preempt_builders import cluster, conf, opened, run
from tests.scheduler.volcano_cases import Obj, binds, quantities, vc_node, vc_pod, vc_podgroup, vc_queue

R = quantities
PLUGIN = "nodegroup"


def ng_queue(
    name: str,
    required: list[str] | None = None,
    preferred: list[str] | None = None,
    anti_required: list[str] | None = None,
    anti_preferred: list[str] | None = None,
    *,
    parent: str = "",
    limits: str | None = None,
) -> Obj:
    """util.MakeQueue(name).Affinity(...).Parent(parent).Annotations(limits); no lists: Affinity(nil)."""
    queue = vc_queue(name)
    if any(terms is not None for terms in (required, preferred, anti_required, anti_preferred)):
        near = {
            "requiredDuringSchedulingIgnoredDuringExecution": required or [],
            "preferredDuringSchedulingIgnoredDuringExecution": preferred or [],
        }
        far = {
            "requiredDuringSchedulingIgnoredDuringExecution": anti_required or [],
            "preferredDuringSchedulingIgnoredDuringExecution": anti_preferred or [],
        }
        queue["spec"]["affinity"] = {"nodeGroupAffinity": near, "nodeGroupAntiAffinity": far}
    if parent:
        queue["spec"]["parent"] = parent
    if limits is not None:
        queue["metadata"]["annotations"] = {RESOURCE_LIMITS: limits}
    return queue


def grouped(name: str, cpu: str, memory: str, group: str | None, pods: int = 110) -> Obj:
    return vc_node(name, cpu, memory, pods, {GROUP_LABEL: group} if group else {})


def session_of(objects: list[Obj], arguments: dict[str, Any] | None = None, hierarchy: bool = False) -> Session:
    entry = {"name": PLUGIN, "arguments": arguments or {}, "enableHierarchy": hierarchy}
    return opened(cluster(*objects), conf("allocate", [entry]))


def task_named(session: Session, name: str) -> Any:
    return next(t for job in session.jobs.values() for t in job.tasks.values() if t.name == name)


def per_node(session: Session, values: np.ndarray) -> dict[str, Any]:
    return {name: value.item() for name, value in zip(session.nodes.names, values, strict=True)}


# -- nodegroup_test.go: TestNodeGroup ---------------------------------------------------------------------

NODES = [
    grouped("n1", "2", "4Gi", "group1"),
    grouped("n2", "4", "16Gi", "group2"),
    grouped("n3", "4", "16Gi", "group3"),
    grouped("n4", "4", "16Gi", "group4"),
    grouped("n5", "4", "16Gi", None),
]
ROOT = ng_queue("root", ["group1", "group3"], ["group3"], ["group2", "group4"], ["group4"])
Q1 = ng_queue("q1", ["group1", "group3"], ["group3"], ["group2", "group4"], ["group4"], parent="root")
Q2 = ng_queue("q2", ["group1"], ["group3"], ["group2"], ["group4"], parent="root")
Q3 = ng_queue("q3", None, ["group1", "group3"])
NO_AFFINITY_ROOT = ng_queue("root-no-affinity")
NO_AFFINITY_Q = ng_queue("q-no-affinity", parent="root")
Q1_CHILD = ng_queue("q1-child", parent="q1")
NO_AFFINITY_CHILD = ng_queue("q-no-affinity-child", parent="q-no-affinity")
OK, NO = True, False

NODE_GROUP = [
    # (name, pod, its PodGroup's queue, queues, arguments, enableHierarchy, scores n1..n5, fits n1..n5)
    (
        "soft constraints is subset of hard constraints",
        "p1",
        "q1",
        [Q1],
        {},
        False,
        [100, 0, 150, -1, 0],
        [OK, NO, OK, OK, NO],
    ),
    (
        "soft constraints is not subset of hard constraints",
        "p2",
        "q2",
        [Q2],
        {},
        False,
        [100, 0, 50, -1, 0],
        [OK, NO, OK, OK, NO],
    ),
    (
        "affinity is not set for the queue, pods still cannot be scheduled to nodes with the nodegroup label "
        "when strict=false",
        "p5",
        "root-no-affinity",
        [NO_AFFINITY_ROOT],
        {"strict": False},
        False,
        [0, 0, 0, 0, 0],
        [NO, NO, NO, NO, OK],
    ),
    (
        "affinity inherits from parent queue",
        "p3",
        "q1-child",
        [ROOT, Q1, Q1_CHILD],
        {},
        True,
        [100, 0, 150, -1, 0],
        [OK, NO, OK, OK, NO],
    ),
    (
        "affinity inherits from ancestor queue if parent queue has no affinity",
        "p4",
        "q-no-affinity-child",
        [ROOT, NO_AFFINITY_Q, NO_AFFINITY_CHILD],
        {},
        True,
        [100, 0, 150, -1, 0],
        [OK, NO, OK, OK, NO],
    ),
    # The Go row gives only q-no-affinity, while pg4 names q-no-affinity-child: the job's queue is missing.
    (
        "queue without affinity",
        "p4",
        "q-no-affinity-child",
        [NO_AFFINITY_Q],
        {},
        False,
        [0, 0, 0, 0, 0],
        [NO, NO, NO, NO, NO],
    ),
    (
        "preferred nodegroup priority ordering",
        "p6",
        "q3",
        [Q3],
        {"enablePreferredOrder": True},
        False,
        [50, 0, 25, 0, 0],
        [OK, NO, OK, NO, NO],
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "queue", "queues", "arguments", "hierarchy", "scores", "fits"),
    NODE_GROUP,
    ids=[c[0] for c in NODE_GROUP],
)
def test_volcano_nodegroup_case(
    name: str,
    pod: str,
    queue: str,
    queues: list[Obj],
    arguments: dict[str, Any],
    hierarchy: bool,
    scores: list[float],
    fits: list[bool],
) -> None:
    group = f"pg-{pod}"
    objects = [
        *NODES,
        *queues,
        vc_podgroup(group, "c1", queue, 0, None, "Inqueue"),
        vc_pod("c1", pod, "", "Pending", R("2", "4Gi"), group),
    ]
    session = session_of(objects, arguments, hierarchy)
    task = task_named(session, pod)
    assert per_node(session, session.score(task)) == dict(zip(session.nodes.names, map(float, scores), strict=True))
    assert per_node(session, session.predicate(task)) == dict(zip(session.nodes.names, fits, strict=True))


# -- nodegroup_test.go: TestNodeGroupResourceLimits -------------------------------------------------------

LIMIT_NODES = [grouped("n1", "16", "64Gi", "group1", pods=32), grouped("n2", "16", "64Gi", "group2", pods=32)]
PENDING = vc_pod("limit", "pending", "", "Pending", R("2", "4Gi"), "pg-pending")
USED = vc_pod("limit", "used", "n1", "Running", R("2", "4Gi"), "pg-used")

RESOURCE_LIMIT_CASES = [
    # (name, the queue's limits annotation, the queue's other running pod or None, fits n1, n2)
    ("no annotation keeps existing behavior", None, None, [OK, OK]),
    ("under nodegroup limit permits preferred nodegroup", '{"group1":{"cpu":"3","memory":"8Gi"}}', None, [OK, OK]),
    ("omitted resource dimension is unlimited", '{"group1":{"cpu":"3"}}', None, [OK, OK]),
    ("specified resource dimension is enforced", '{"group1":{"cpu":"1"}}', None, [NO, OK]),
    (
        "over nodegroup limit rejects preferred nodegroup and permits fallback",
        '{"group1":{"cpu":"3","memory":"8Gi"}}',
        USED,
        [NO, OK],
    ),
    ("invalid annotation rejects queue tasks", '{"group1":{"cpu":', None, [NO, NO]),
]


def limited_queue(limits: str | None) -> Obj:
    return ng_queue("q-limit", ["group1", "group2"], ["group1"], limits=limits)


@pytest.mark.parametrize(
    ("name", "limits", "used", "fits"), RESOURCE_LIMIT_CASES, ids=[c[0] for c in RESOURCE_LIMIT_CASES]
)
def test_volcano_nodegroup_resource_limits_case(
    name: str, limits: str | None, used: Obj | None, fits: list[bool]
) -> None:
    objects = [
        *LIMIT_NODES,
        limited_queue(limits),
        vc_podgroup("pg-pending", "limit", "q-limit", 0, None, "Inqueue"),
        PENDING,
    ]
    if used is not None:
        objects += [vc_podgroup("pg-used", "limit", "q-limit", 0, None, "Running"), used]
    session = session_of(objects)
    assert per_node(session, session.predicate(task_named(session, "pending"))) == {"n1": fits[0], "n2": fits[1]}
    invalid = [e for e in session.events if e.reason == "InvalidNodeGroupResourceLimits"]
    assert [(e.kind, e.name) for e in invalid] == ([("Queue", "q-limit")] if limits == '{"group1":{"cpu":' else [])


# -- nodegroup_test.go: TestNodeGroupResourceLimitAllocationEvent -----------------------------------------


def event_limit_objects() -> list[Obj]:
    return [
        grouped("n1", "16", "64Gi", "group1", pods=32),
        ng_queue("q-event-limit", ["group1"], limits='{"group1":{"cpu":"3","memory":"8Gi"}}'),
        vc_podgroup("pg-1", "limit", "q-event-limit", 0, None, "Inqueue"),
        vc_podgroup("pg-2", "limit", "q-event-limit", 0, None, "Inqueue"),
        vc_pod("limit", "pending-1", "", "Pending", R("2", "4Gi"), "pg-1"),
        vc_pod("limit", "pending-2", "", "Pending", R("2", "4Gi"), "pg-2"),
    ]


def test_volcano_nodegroup_allocation_event_updates_usage() -> None:
    session = session_of(event_limit_objects())
    first, second = task_named(session, "pending-1"), task_named(session, "pending-2")
    assert bool(session.predicate(first)[0])
    statement = session.statement()
    statement.allocate(first, 0)
    assert not bool(session.predicate(second)[0])
    assert session.explain(second)[LIMIT_EXCEEDED] == 1  # worded as Volcano's fit error
    statement.discard()  # the undone placement gives the group's room back
    assert bool(session.predicate(second)[0])


# -- Lahar's own checks ------------------------------------------------------------------------------------


def test_a_whole_cycle_keeps_the_queue_within_its_group_limit() -> None:
    # One 3-CPU limit on group1: of two 2-CPU pods only one binds there.
    session = run(
        cluster(*event_limit_objects()), conf("enqueue, allocate", [PLUGIN, "gang"], ["predicates", "proportion"])
    )
    assert len(binds(session)) == 1 and set(binds(session).values()) == {"n1"}


def explained(queue: Obj, queue_name: str) -> dict[str, int]:
    objects = [*NODES, queue, vc_podgroup("pg", "c1", queue_name, 0, None, "Inqueue")]
    session = session_of([*objects, vc_pod("c1", "p", "", "Pending", R("1", "1Gi"), "pg")])
    return dict(session.plugins[PLUGIN].explain(task_named(session, "p"), session.nodes))  # type: ignore[attr-defined]


def test_explain_words_each_refusal_as_volcano() -> None:
    assert explained(Q2, "q2") == {UNSATISFIED: 1, NO_LABEL: 1}  # n2: anti-affinity; n5: no label
    assert explained(NO_AFFINITY_ROOT, "root-no-affinity") == {NO_AFFINITY: 4, NO_LABEL: 1}


@pytest.mark.parametrize(
    ("affinity", "message"),
    [
        ("group1", "spec.affinity: must be a map"),
        ({"nodeGroupAffinity": ["group1"]}, "nodeGroupAffinity: must be a map"),
        ({"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "group1"}}, "must be a list"),
    ],
)
def test_a_malformed_affinity_is_reported_and_its_queue_takes_no_node(affinity: Any, message: str) -> None:
    with pytest.raises(NodeGroupError, match=message):
        read_affinity({"affinity": affinity})
    queue = ng_queue("bad")
    queue["spec"]["affinity"] = affinity
    session = session_of(
        [
            *NODES,
            queue,
            vc_podgroup("pg", "c1", "bad", 0, None, "Inqueue"),
            vc_pod("c1", "p", "", "Pending", R("1", "1Gi"), "pg"),
        ]
    )
    assert not session.predicate(task_named(session, "p")).any()
    assert [(e.kind, e.name, e.reason) for e in session.events] == [("Queue", "bad", "InvalidNodeGroupAffinity")]


@pytest.mark.parametrize("limits", ['["group1"]', '{"group1":{"cpu":"lots"}}', '{"group1":"3"}'])
def test_malformed_limits_refuse_the_queue(limits: str) -> None:
    objects = [
        *LIMIT_NODES,
        limited_queue(limits),
        vc_podgroup("pg-pending", "limit", "q-limit", 0, None, "Inqueue"),
        PENDING,
    ]
    session = session_of(objects)
    assert not session.predicate(task_named(session, "pending")).any()
    assert [e.reason for e in session.events] == ["InvalidNodeGroupResourceLimits"]


@pytest.mark.parametrize("arguments", [{"strict": "no"}, {"enablePreferredOrder": 1}])
def test_bad_arguments_refuse_the_configuration(arguments: dict[str, Any]) -> None:
    with pytest.raises(ConfError, match=next(iter(arguments))):
        conf("allocate", [{"name": PLUGIN, "arguments": arguments}])


def test_preferred_order_scores_by_place() -> None:
    affinity = GroupAffinity(required=frozenset({"a"}), preferred=("a", "b", "c", "d"), anti_preferred=frozenset({"d"}))
    assert [affinity.score(g, True) for g in "abcde"] == [150.0, 37.5, 25.0, -1.0, 0.0]
    assert [affinity.score(g, False) for g in "abcde"] == [150.0, 50.0, 50.0, -1.0, 0.0]


def test_unknown_affinity_keys_are_ignored_as_volcanos_decoder_does() -> None:
    near = {"required": ["group1"], "preferredDuringSchedulingIgnoredDuringExecution": ["group3"]}
    assert read_affinity({"affinity": {"nodeGroupAffinity": near, "nodeGroupAfinity": {}}}) == GroupAffinity(
        preferred=("group3",)
    )
