"""The reclaim action on small clusters: a starving queue takes back from a queue above its
deserved share, only down to that share, never below the other queue's guarantee, never from a
queue that is not reclaimable and never breaking another gang below minMember."""

from __future__ import annotations

from typing import Any

from lahar.scheduler.actions.preempt import VictimSearch
from lahar.scheduler.framework.session import Session
from tests.scheduler.preempt_builders import (
    a_pod,
    annotate,
    cluster,
    conf,
    gang,
    node,
    queue,
    run,
    running,
    spy,
)

RECLAIM = conf("reclaim", ["priority", "gang"], ["predicates", "proportion"])


def evicted(session: Session) -> list[str]:
    return sorted(eviction.task.name for eviction in session.evictions)


def queue_a_fills_the_cluster(min_member: int = 1, **spec: Any) -> list[dict]:
    """Two 4-CPU nodes, queue a (spec) running a job of eight 1-CPU pods (a gang of
    `min_member`: gang never takes a job below it, so a lone pod is never a victim), queue b empty."""
    objects: list[dict] = [
        node("n1", cpu="4", memory="32Gi"),
        node("n2", cpu="4", memory="32Gi"),
        queue("a", **spec),
        queue("b"),
        gang("a-job", min_member, queue="a", phase="Running"),
    ]
    objects += [running(f"a-{i}", f"n{1 + i % 2}", cpu="1", memory="1Gi", queue="a", group="a-job") for i in range(8)]
    return objects


def waiting_in_b(count: int) -> list[dict]:
    return [a_pod(f"b-{i}", cpu="1", memory="1Gi", queue="b") for i in range(count)]


def test_reclaims_from_a_queue_above_its_deserved_share_down_to_it() -> None:
    # Equal weights over 8 CPUs: b asks for 3 and deserves 3, a deserves the other 5.
    session = run(cluster(*queue_a_fills_the_cluster(), *waiting_in_b(3)), RECLAIM)
    assert len(session.evictions) == 3 and all(name.startswith("a-") for name in evicted(session))
    assert all(eviction.reason == "reclaim" for eviction in session.evictions)
    assert sorted(task.name for task in session.pipelined) == ["b-0", "b-1", "b-2"]
    cpu = session.resources.column["cpu"]
    assert session.queues["a"].allocated[cpu] == session.queues["a"].deserved[cpu] == 5000


def test_a_queue_within_its_deserved_share_is_not_reclaimed_from() -> None:
    # b asks for 5 but deserves 4: reclaim stops once a is down to its 4.
    session = run(cluster(*queue_a_fills_the_cluster(), *waiting_in_b(5)), RECLAIM)
    assert len(session.evictions) == 4
    assert sorted(task.name for task in session.pipelined) == ["b-0", "b-1", "b-2", "b-3"]


def test_never_below_the_guarantee() -> None:
    # a is guaranteed 7 CPUs: one of its pods may go, not two.
    objects = queue_a_fills_the_cluster(guarantee={"resource": {"cpu": "7"}})
    session = run(cluster(*objects, *waiting_in_b(3)), RECLAIM)
    assert len(session.evictions) == 1 and len(session.pipelined) == 1


def test_a_queue_that_is_not_reclaimable_keeps_everything() -> None:
    session = run(cluster(*queue_a_fills_the_cluster(reclaimable=False), *waiting_in_b(2)), RECLAIM)
    assert session.evictions == [] and session.pipelined == []


def test_never_breaks_another_gang_below_min_member() -> None:
    session = run(cluster(*queue_a_fills_the_cluster(min_member=8), *waiting_in_b(2)), RECLAIM)
    assert session.evictions == [] and session.pipelined == []
    # A gang with one spare member gives up that one.
    session = run(cluster(*queue_a_fills_the_cluster(min_member=7), *waiting_in_b(2)), RECLAIM)
    assert len(session.evictions) == 1 and len(session.pipelined) == 1


def test_a_gang_reclaims_all_or_nothing() -> None:
    # b's gang of 4 deserves 4 but a's guarantee of 6 leaves only 2: nothing moves.
    members = [a_pod(f"b-{i}", cpu="1", memory="1Gi", queue="b", group="b-job") for i in range(4)]
    objects = queue_a_fills_the_cluster(guarantee={"resource": {"cpu": "6"}})
    session = run(cluster(*objects, gang("b-job", 4, queue="b"), *members), RECLAIM)
    assert session.evictions == [] and session.pipelined == []


def test_best_effort_reclaims_only_from_best_effort() -> None:
    be = {"lahar.dev/qos-class": "BE"}
    session = run(cluster(*queue_a_fills_the_cluster(), annotate(a_pod("b-be", cpu="1", queue="b"), **be)), RECLAIM)
    assert session.evictions == [] and session.pipelined == []


def test_a_gang_the_nodes_cannot_hold_even_with_every_victim_gone_is_not_tried(monkeypatch: Any) -> None:
    tried = spy(monkeypatch, VictimSearch, "place")  # (task, ...) per task walked for
    # b's gang of three 5-CPU pods: the 4-CPU nodes hold none of them, whatever a gives back.
    members = [a_pod(f"b-{i}", cpu="5", memory="1Gi", queue="b", group="b-job") for i in range(3)]
    session = run(cluster(*queue_a_fills_the_cluster(), gang("b-job", 3, queue="b"), *members), RECLAIM)
    assert session.evictions == [] and session.pipelined == [] and not tried
