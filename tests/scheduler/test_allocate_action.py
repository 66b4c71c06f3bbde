"""The allocate action: order of queues, jobs and tasks, admission, tasks left to backfill, and
what it says about jobs it could not place."""

from __future__ import annotations

import pytest

from lahar.scheduler.framework.session import Session
from tests.scheduler.cluster_fixtures import cycle, gang, node, placed, pod, podgroup, queue

BASIC = (["priority", "gang"], ["drf", "predicates", "proportion"])


def test_the_higher_priority_pod_gets_the_last_room() -> None:
    session = cycle(
        [node("n1", cpu="1"), pod("a-low", cpu="1", priority=1), pod("z-high", cpu="1", priority=5)], "allocate", BASIC
    )
    assert placed(session) == {"z-high": "n1"}


def test_within_a_gang_higher_priority_tasks_are_placed_first() -> None:
    objects = [
        node("n1", cpu="2"),
        podgroup("g", 1),
        pod("g-a", cpu="1", group="g", priority=1),
        pod("g-b", cpu="2", group="g", priority=9),
    ]
    assert placed(cycle(objects, "allocate", BASIC)) == {"g-b": "n1"}


def test_the_job_with_the_smaller_dominant_share_goes_first() -> None:
    # "a" already runs 2 cpu; "b" runs nothing, so b's pod takes the one free cpu.
    objects = [
        node("n1", cpu="3"),
        podgroup("a", 1),
        pod("a-run", cpu="2", group="a", node_name="n1", phase="Running"),
        pod("a-more", cpu="1", group="a"),
        podgroup("b", 1),
        pod("b-0", cpu="1", group="b"),
    ]
    assert placed(cycle(objects, "allocate", BASIC)) == {"b-0": "n1"}


def test_ready_jobs_take_turns_as_their_shares_grow() -> None:
    # Two elastic jobs (minMember 1) of three pods each, room for four: two each.
    objects = [node("n1", cpu="4"), gang("a", 3, cpu="1", min_member=1), gang("b", 3, cpu="1", min_member=1)]
    session = cycle(objects, "allocate", BASIC)
    assert sorted(placed(session)) == ["a-0", "a-1", "b-0", "b-1"]
    # Once ready, a job places one task per turn, each bound on its own.
    assert [len(batch.tasks) for batch in session.binds] == [1, 1, 1, 1]


def test_queues_take_turns_by_share() -> None:
    objects = [node("n1", cpu="4"), queue("x"), queue("y")]
    objects += [gang(f"x{i}", 1, cpu="1", queue="x") for i in range(4)]
    objects += [gang(f"y{i}", 1, cpu="1", queue="y") for i in range(4)]
    session = cycle(objects, "allocate", BASIC)
    by_queue = [session.jobs[batch.job.key].queue for batch in session.binds]
    assert sorted(by_queue) == ["x", "x", "y", "y"]


def test_pending_podgroups_wait_for_enqueue_when_it_is_configured_and_are_promoted_otherwise() -> None:
    objects = [node("n1"), podgroup("g", 1, phase="Pending"), pod("g-0", group="g")]
    waiting = cycle(objects, "allocate, backfill", BASIC)
    assert placed(waiting) == {"g-0": "n1"}
    assert waiting.jobs["default/g"].phase == "Inqueue"
    admitted = cycle(objects, "enqueue, allocate", BASIC)
    assert placed(admitted) == {"g-0": "n1"}
    skipped = cycle(
        [node("n1"), podgroup("g", 1, phase="Pending"), pod("g-0", group="g"), queue("default", state="Closed")],
        "enqueue, allocate",
        BASIC,
    )
    assert placed(skipped) == {}
    assert skipped.jobs["default/g"].phase == "Pending"


def test_tasks_that_ask_for_nothing_are_left_to_backfill() -> None:
    objects = [node("n1"), pod("be", cpu=None, memory=None), pod("ls", cpu="1")]
    assert placed(cycle(objects, "allocate", BASIC)) == {"ls": "n1"}
    assert placed(cycle(objects, "allocate, backfill", BASIC)) == {"ls": "n1", "be": "n1"}


def test_a_gang_counts_its_best_effort_tasks_as_ready_while_backfill_places_them() -> None:
    objects = [
        node("n1", cpu="1"),
        podgroup("g", 2),
        pod("g-0", cpu="1", group="g"),
        pod("g-be", cpu=None, memory=None, group="g"),
    ]
    assert placed(cycle(objects, "allocate, backfill", BASIC)) == {"g-0": "n1", "g-be": "n1"}


def test_a_gang_larger_than_the_cluster_is_refused_before_any_placement() -> None:
    objects = [node(f"n{i}", cpu="4") for i in range(3)] + [gang("big", 20, cpu="1")]
    session = cycle(objects, "allocate", BASIC)
    assert placed(session) == {}
    assert not session.nodes.used.any()
    assert session.jobs["default/big"].unschedulable_message == (
        "8/20 tasks in gang unschedulable: 0/3 nodes are available: 3 Insufficient cpu."
    )


def test_a_gang_short_of_its_minimum_by_a_pinned_task_is_refused_before_placing() -> None:
    objects = [
        node("n1", cpu="64", memory="64Gi"),
        podgroup("g", 51),
        pod("g-pinned", cpu="1", group="g", priority=9, node_selector={"zone": "nowhere"}),
    ]
    objects += [pod(f"g-{i}", cpu="1", group="g") for i in range(50)]
    session = cycle(objects, "allocate", BASIC)
    assert placed(session) == {}
    assert session.jobs["default/g"].unschedulable_message == (
        "1/51 tasks in gang unschedulable: 0/1 nodes are available: "
        "1 node(s) didn't match Pod's node affinity/selector."
    )


def test_a_gang_stops_as_soon_as_the_tasks_left_cannot_make_it_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each class fits on its own, but "big" fills n1 and "small" then fits nowhere: the gang
    # gives up there instead of placing its 50 other tasks.
    zone_a = {"zone": "a"}
    objects = [
        node("n1", cpu="2", labels=zone_a),
        node("n2", cpu="64", memory="64Gi"),
        podgroup("g", 52),
        pod("g-big", cpu="2", group="g", priority=9, node_selector=zone_a),
        pod("g-small", cpu="1", group="g", priority=5, node_selector=zone_a),
    ]
    objects += [pod(f"g-{i}", cpu="1", group="g") for i in range(50)]
    asked: list[str] = []
    best_node = Session.best_node
    monkeypatch.setattr(Session, "best_node", lambda self, task: asked.append(task.name) or best_node(self, task))
    session = cycle(objects, "allocate", BASIC)
    assert placed(session) == {}
    assert asked == ["g-big", "g-small"]
    assert session.jobs["default/g"].unschedulable_message == (
        "51/52 tasks in gang unschedulable: 0/2 nodes are available: 1 Insufficient cpu, "
        "1 node(s) didn't match Pod's node affinity/selector."
    )


def test_an_overused_queue_sits_out_and_its_jobs_say_so() -> None:
    # The queue deserves 1 cpu (its capability) and holds it: overused on every resource it has.
    objects = [
        node("n1", cpu="8"),
        queue("small", capability={"cpu": "1"}),
        gang("run", 1, cpu="1", memory=None, queue="small", node_name="n1", phase="Running"),
        gang("more", 1, cpu="1", memory=None, queue="small"),
    ]
    session = cycle(objects, "allocate", BASIC)
    assert placed(session) == {}
    assert session.jobs["default/more"].unschedulable_message == (
        "1/1 tasks in gang unschedulable: queue small is overused"
    )


def test_a_task_over_its_queue_share_is_refused_by_the_queue() -> None:
    objects = [node("n1", cpu="8"), queue("small", capability={"cpu": "2"}), gang("g", 3, cpu="1", queue="small")]
    session = cycle(objects, "allocate", BASIC)
    assert placed(session) == {}
    assert session.jobs["default/g"].unschedulable_message == (
        "1/3 tasks in gang unschedulable: 1 task(s) would exceed queue small's deserved share"
    )


def test_a_job_in_a_queue_that_does_not_exist_waits_and_says_so() -> None:
    session = cycle([node("n1"), gang("g", 2, queue="ghost")], "allocate", BASIC)
    assert placed(session) == {}
    assert session.jobs["default/g"].unschedulable_message == (
        "2/2 tasks in gang unschedulable: queue ghost does not exist"
    )
