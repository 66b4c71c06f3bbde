"""The capacity plugin: queues get their spec's deserved share within their real capability, with
hierarchical queues (every level bounds allocation and admission, only leaves run jobs, a bad
tree refuses its own subtree and is reported), and reclaim from queues above their deserved share."""

from __future__ import annotations

from typing import Any

from lahar.scheduler.framework.session import Session
from tests.scheduler import cluster_fixtures as fx

Obj = dict[str, Any]
TIERS = (["priority", "gang"], ["predicates", "capacity"])


def child(name: str, parent: str, **spec: Any) -> Obj:
    obj = fx.queue(name, **spec)
    obj["spec"]["parent"] = parent
    return obj


def lone(name: str, queue: str, cpu: str = "1") -> list[Obj]:
    group = fx.podgroup(name, 1, queue=queue)
    return [group, fx.pod(f"{name}-0", cpu, group=name)]


def cycle(objects: list[Any], actions: str = "allocate") -> Session:
    return fx.cycle(objects, actions, TIERS)


def test_every_level_of_the_tree_bounds_allocation() -> None:
    objects: list[Any] = [
        fx.node("n1", cpu="16"),
        fx.queue("org", capability={"cpu": "3"}),
        child("team-a", "org"),
        child("team-b", "org"),
    ]
    objects += [lone(f"a{i}", "team-a") for i in range(3)] + [lone(f"b{i}", "team-b") for i in range(3)]
    placed = fx.placed(cycle(objects))
    assert len(placed) == 3  # the parent's 3 CPUs, whichever children use them


def test_a_job_in_a_queue_with_children_is_not_run() -> None:
    objects = [
        fx.node("n1"),
        fx.queue("org"),
        child("team", "org"),
        *lone("in-parent", "org"),
        *lone("in-leaf", "team"),
    ]
    assert fx.placed(cycle(objects)) == {"in-leaf-0": "n1"}


def test_a_bad_subtree_is_refused_and_reported_and_the_rest_scheduled() -> None:
    objects = [
        fx.node("n1", cpu="16"),
        fx.queue("small", capability={"cpu": "2"}),
        child("big", "small", capability={"cpu": "8"}),  # more than its parent has
        fx.queue("fine"),
        *lone("x", "big"),
        *lone("y", "fine"),
    ]
    session = cycle(objects)
    assert fx.placed(session) == {"y-0": "n1"}
    reported = [e for e in session.events if e.reason == "InvalidQueueHierarchy"]
    assert len(reported) == 1 and reported[0].name == "small" and "capability" in reported[0].message


def test_a_looping_parent_chain_is_reported_and_cut() -> None:
    objects = [fx.node("n1"), child("a", "b"), child("b", "a"), fx.queue("c"), *lone("x", "a"), *lone("y", "c")]
    session = cycle(objects)
    assert fx.placed(session) == {"y-0": "n1"}
    assert {e.name for e in session.events if e.reason == "InvalidParent"} == {"a", "b"}


def test_admission_counts_every_level() -> None:
    group = fx.podgroup("wide", 1, queue="team", phase="Pending", min_resources={"cpu": "4"})
    objects = [fx.node("n1", cpu="16"), fx.queue("org", capability={"cpu": "3"}), child("team", "org"), group]
    assert cycle(objects, "enqueue").jobs["default/wide"].phase.value == "Pending"
    group = fx.podgroup("narrow", 1, queue="team", phase="Pending", min_resources={"cpu": "2"})
    objects[-1] = group
    assert cycle(objects, "enqueue").jobs["default/narrow"].phase.value == "Inqueue"


def test_queue_order_by_share_of_deserved_and_reclaim_from_the_queue_above_it() -> None:
    # "over" holds 4 CPUs and deserves 1; "under" deserves 3 and holds nothing: it reclaims.
    objects: list[Any] = [
        fx.node("n1", cpu="4"),
        fx.queue("over", deserved={"cpu": "1"}),
        fx.queue("under", deserved={"cpu": "3"}),
    ]
    objects += [fx.podgroup(f"o{i}", 1, queue="over", phase="Running") for i in range(4)]
    objects += [fx.pod(f"o{i}-0", group=f"o{i}", node_name="n1", phase="Running") for i in range(4)]
    objects += lone("u", "under")
    session = cycle(objects, "reclaim")
    assert len(session.evictions) == 1 and session.evictions[0].task.name.startswith("o")
    assert [task.name for task in session.pipelined] == ["u-0"]
    order = sorted((session.queues[n] for n in ("over", "under")), key=session.queue_order_key)
    assert [queue.name for queue in order] == ["under", "over"]  # 1/3 of its share against 3 times its own


def test_a_deep_tree_counts_each_pod_once_at_every_level() -> None:
    # org (4 CPUs) > dept > team: two running 1-CPU pods in team leave org 2 CPUs, not 0.
    objects: list[Any] = [
        fx.node("n1", cpu="16"),
        fx.queue("org", capability={"cpu": "4"}),
        child("dept", "org"),
        child("team", "dept"),
    ]
    for i in range(2):
        objects += [fx.podgroup(f"r{i}", 1, queue="team", phase="Running")]
        objects += [fx.pod(f"r{i}-0", group=f"r{i}", node_name="n1", phase="Running")]
    objects += [item for i in range(3) for item in lone(f"p{i}", "team")]
    assert len(fx.placed(cycle(objects))) == 2
