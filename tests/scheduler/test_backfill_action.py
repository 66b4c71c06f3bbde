"""The backfill action: tasks that ask for nothing go to any node that passes the predicates."""

from __future__ import annotations

from tests.scheduler.cluster_fixtures import cycle, gang, node, placed, pod, podgroup

TIERS = (["priority", "gang"], ["predicates", "nodeorder"])


def test_best_effort_pods_fill_nodes_whose_cpu_is_taken() -> None:
    objects = [
        node("full", cpu="1"),
        pod("busy", cpu="1", node_name="full", phase="Running"),
        pod("be", cpu=None, memory=None),
    ]
    session = cycle(objects, "allocate, backfill", TIERS)
    assert placed(session) == {"be": "full"}


def test_best_effort_pods_still_pass_the_other_predicates() -> None:
    objects = [
        node("a", labels={"zone": "a"}),
        node("b", labels={"zone": "b"}),
        pod("be", cpu=None, memory=None, node_selector={"zone": "b"}),
    ]
    assert placed(cycle(objects, "backfill", TIERS)) == {"be": "b"}


def test_a_best_effort_pod_with_no_room_gets_a_failed_scheduling_event() -> None:
    objects = [
        node("n1", pods=1),
        pod("busy", cpu="1", node_name="n1", phase="Running"),
        pod("be", cpu=None, memory=None),
    ]
    session = cycle(objects, "allocate, backfill", TIERS)
    assert placed(session) == {}
    message = "0/1 nodes are available: 1 Too many pods."
    assert [(e.kind, e.name, e.reason, e.message) for e in session.events] == [
        ("Pod", "be", "FailedScheduling", message)
    ]
    assert session.jobs["default/be"].unschedulable_message == f"1/1 tasks in gang unschedulable: {message}"


def test_a_gang_whose_other_tasks_did_not_fit_keeps_its_best_effort_tasks_back() -> None:
    objects = [
        node("n1", cpu="1"),
        podgroup("g", 3),
        pod("g-0", cpu="1", group="g"),
        pod("g-1", cpu="1", group="g"),
        pod("g-be", cpu=None, memory=None, group="g"),
    ]
    assert placed(cycle(objects, "allocate, backfill", TIERS)) == {}


def test_pending_podgroups_are_not_backfilled() -> None:
    objects = [node("n1"), gang("g", 1, cpu=None, memory=None)]
    objects[1][0]["status"]["phase"] = "Pending"
    assert placed(cycle(objects, "backfill", TIERS)) == {}
