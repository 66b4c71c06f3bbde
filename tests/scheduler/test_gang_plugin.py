"""The gang plugin with the allocate action: all-or-nothing by minMember and minTaskMember, lone
pods as gangs of one, Unschedulable messages and events, victims that keep gangs whole."""

from __future__ import annotations

from lahar.scheduler.framework.session import open_session
from tests.scheduler.cluster_fixtures import conf, cycle, gang, node, placed, pod, podgroup, snapshot

GANG_ONLY = (["priority", "gang"], ["predicates"])


def test_a_gang_that_fits_binds_every_task_in_one_batch() -> None:
    session = cycle([node("n1", cpu="2"), node("n2", cpu="2"), gang("g", 3, cpu="1")])
    assert sorted(placed(session)) == ["g-0", "g-1", "g-2"]
    assert [batch.job.name for batch in session.binds] == ["g"]
    assert session.jobs["default/g"].unschedulable_message == ""
    assert not session.events


def test_a_gang_that_does_not_fit_binds_nothing_and_says_how_many_tasks_and_why() -> None:
    # Each node holds one 1500m pod: two of three fit, so the gang is one task short.
    objects = [node("n1", cpu="2"), node("n2", cpu="2"), gang("g", 3, cpu="1500m")]
    session = cycle(objects)
    assert placed(session) == {}
    message = "1/3 tasks in gang unschedulable: 0/2 nodes are available: 2 Insufficient cpu."
    assert session.jobs["default/g"].unschedulable_message == message
    assert [(e.kind, e.name, e.type, e.reason, e.message) for e in session.events] == [
        ("PodGroup", "g", "Warning", "Unschedulable", message)
    ]
    # Refused before placing anything: the nodes hold what they held.
    assert not session.nodes.used.any()


def test_a_gang_refused_while_placing_is_rolled_back_with_the_reasons_at_the_failure() -> None:
    # binpack alone fills n1 (the only node the ps task may use) with the two workers first.
    objects = [
        node("n1", cpu="2", labels={"role": "ps"}),
        node("n2", cpu="3"),
        podgroup("g", 3),
        pod("g-ps", cpu="2", group="g", task="ps", node_selector={"role": "ps"}),
        pod("g-w0", cpu="1", group="g", task="worker", priority=10),
        pod("g-w1", cpu="1", group="g", task="worker", priority=10),
    ]
    session = cycle(objects, "allocate", (["priority", "gang"], ["predicates", "binpack"]))
    assert placed(session) == {}
    assert session.jobs["default/g"].unschedulable_message == (
        "1/3 tasks in gang unschedulable: 0/2 nodes are available: 1 Insufficient cpu, "
        "1 node(s) didn't match Pod's node affinity/selector."
    )
    assert not session.nodes.used.any()


def test_min_member_below_the_task_count_binds_what_fits_once_the_minimum_does() -> None:
    # minMember 2 of 4: three fit, and all three bind.
    session = cycle([node("n1", cpu="3"), gang("g", 4, cpu="1", min_member=2)])
    assert len(placed(session)) == 3
    assert session.jobs["default/g"].unschedulable_message == ""


def test_min_task_member_holds_back_a_gang_whose_task_minimum_cannot_be_met() -> None:
    objects = [
        node("n1", cpu="8"),
        podgroup("g", 3, min_task_member={"ps": 1, "worker": 2}),
        pod("g-ps", cpu="1", group="g", task="ps", node_selector={"role": "ps"}),
        *[pod(f"g-w{i}", cpu="1", group="g", task="worker") for i in range(3)],
    ]
    session = cycle(objects)
    # Three workers fit and make minMember, but the ps task's minimum is not met.
    assert placed(session) == {}
    assert "tasks in gang unschedulable" in session.jobs["default/g"].unschedulable_message


def test_min_task_member_is_ignored_when_min_member_is_below_their_sum_as_in_volcano() -> None:
    objects = [
        node("n1", cpu="8"),
        podgroup("g", 1, min_task_member={"ps": 1, "worker": 2}),
        pod("g-ps", cpu="1", group="g", task="ps", node_selector={"role": "ps"}),
        *[pod(f"g-w{i}", cpu="1", group="g", task="worker") for i in range(2)],
    ]
    assert sorted(placed(cycle(objects))) == ["g-w0", "g-w1"]


def test_a_gang_with_fewer_pods_than_min_member_is_not_valid() -> None:
    session = cycle([node("n1"), podgroup("g", 3), pod("g-0", group="g"), pod("g-1", group="g")])
    assert placed(session) == {}
    assert session.jobs["default/g"].unschedulable_message == (
        "Not enough valid tasks for gang-scheduling, valid: 2, min: 3"
    )


def test_lone_pods_are_gangs_of_one_each_placed_or_refused_on_its_own() -> None:
    session = cycle([node("n1", cpu="2"), pod("a", cpu="1"), pod("b", cpu="1"), pod("c", cpu="1")])
    assert sorted(placed(session)) == ["a", "b"]
    message = "1/1 tasks in gang unschedulable: 0/1 nodes are available: 1 Insufficient cpu."
    assert session.jobs["default/c"].unschedulable_message == message
    assert [(e.kind, e.name, e.reason, e.message) for e in session.events] == [
        ("Pod", "c", "FailedScheduling", message)
    ]


def test_a_pending_podgroup_without_pods_is_reported_not_ready() -> None:
    session = cycle([node("n1"), podgroup("g", 2, phase="Pending", min_resources={"cpu": "100"})])
    assert session.jobs["default/g"].unschedulable_message == (
        "2/0 tasks in gang unschedulable: pod group is not ready, 2 minAvailable"
    )


def test_gangs_that_are_not_ready_go_first() -> None:
    snap = snapshot(
        [
            node("n1"),
            gang("ready", 1, node_name="n1", phase="Running"),
            pod("ready-1", group="ready"),
            gang("waiting", 1),
        ]
    )
    session = open_session(snap, conf("allocate", ["gang"]))
    ready, waiting = session.jobs["default/ready"], session.jobs["default/waiting"]
    assert session.job_order_key(waiting) < session.job_order_key(ready)
    assert session.job_ready(ready) and not session.job_ready(waiting)


def test_victims_never_take_a_gang_below_min_member() -> None:
    running = gang("g", 3, min_member=2, node_name="n1", phase="Running")
    snap = snapshot([node("n1", cpu="8"), running, pod("hi", priority=100)])
    session = open_session(snap, conf("allocate", ["gang"]))
    candidates = sorted(session.jobs["default/g"].tasks.values(), key=lambda task: task.name)
    preemptor = session.jobs["default/hi"].tasks["uid-default-hi"]
    assert [task.name for task in session.preemptable(preemptor, candidates)] == ["g-0"]
    assert [task.name for task in session.reclaimable(preemptor, candidates)] == ["g-0"]


def test_an_elastic_gang_with_a_task_that_has_no_pods_yet_is_valid_as_in_volcano() -> None:
    """Volcano's example task-start-dependency/job.yaml: minAvailable 1, and the tasks that
    depend on the first have no pods until it runs. Their minTaskMember must not invalidate
    the gang (Volcano's CheckTaskValid skips per-task minimums below their sum)."""
    objects = [
        node("n1", cpu="8"),
        podgroup("g", 1, min_task_member={"first": 1, "second": 5, "third": 5}),
        pod("g-first-0", cpu="1", group="g", task="first"),
    ]
    assert sorted(placed(cycle(objects))) == ["g-first-0"]
