"""The proportion plugin: deserved shares by water-filling (hand-computed), queue order, overuse,
admission against real capability, and reclaim victims that respect guarantees."""

from __future__ import annotations

import pytest

from lahar.scheduler.framework.session import open_session
from tests.scheduler.cluster_fixtures import conf, cycle, gang, node, placed, pod, podgroup, queue, snapshot

TIERS = (["priority", "gang"], ["predicates", "proportion"])


def _pending(queue_name: str, count: int, cpu: str = "1", memory: str | None = "1Gi") -> list:
    """`count` one-pod gangs in the queue (lone pods would sit in the default queue)."""
    return [gang(f"{queue_name}{i}", 1, cpu=cpu, memory=memory, queue=queue_name) for i in range(count)]


def _deserved(session, name: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return dict(session.queue_figures[name]["deserved"])


def test_weights_share_what_each_queue_asks_for_and_hand_back_what_it_does_not() -> None:
    # 12 cpu, weights 1:2:3, asking 10, 2 and 10 cpu. Round 1 gives 2, 4 and 6: b asked for only
    # 2, and the 2 it leaves go 1:3 to a and c in round 2: 2.5 and 7.5.
    objects = [node(f"n{i}", cpu="4") for i in range(3)]
    objects += [queue("a", weight=1), queue("b", weight=2), queue("c", weight=3)]
    objects += _pending("a", 10, memory=None) + _pending("b", 2, memory=None) + _pending("c", 10, memory=None)
    session = cycle(objects, "enqueue", TIERS)
    assert _deserved(session, "a") == {"cpu": 2500}
    assert _deserved(session, "b") == {"cpu": 2000}
    assert _deserved(session, "c") == {"cpu": 7500}


def test_capability_caps_and_guarantee_floors_the_deserved_share() -> None:
    # 10 cpu and 64Gi. a (capability 2 cpu), b (guarantee 3 cpu), c (weight 2) ask for 4, 1 and 10
    # pods of 1 cpu / 1Gi. Real capability: a min(2, 10-3) = 2, b 10, c 7. Round 1 hands out
    # 2.5 / 2.5 / 5 cpu: a is capped at 2, b asks 1 but is floored at its guarantee of 3, c takes
    # 5: no cpu remains. Memory is capped by what each asks for.
    objects = [
        node("n1", cpu="5"),
        node("n2", cpu="5"),
        queue("a", capability={"cpu": "2"}),
        queue("b", guarantee={"cpu": "3"}),
        queue("c", weight=2),
    ]
    objects += _pending("a", 4) + _pending("b", 1) + _pending("c", 10)
    session = cycle(objects, "allocate", TIERS)
    gib = 1 << 30
    assert _deserved(session, "a") == {"cpu": 2000, "memory": 4 * gib}
    assert _deserved(session, "b") == {"cpu": 3000, "memory": 1 * gib}
    assert _deserved(session, "c") == {"cpu": 5000, "memory": 10 * gib}
    # Allocation stops at each queue's deserved cpu.
    by_queue: dict[str, int] = {}
    for batch in session.binds:
        by_queue[batch.job.queue] = by_queue.get(batch.job.queue, 0) + len(batch.tasks)
    assert by_queue == {"a": 2, "b": 1, "c": 5}
    figures = session.queue_figures["a"]
    assert figures["share"] == 1.0 and figures["overused"] is False  # 2Gi of its 4Gi
    assert dict(figures["allocated"]) == {"cpu": 2000, "memory": 2 * gib}


def test_a_queue_with_spec_deserved_keeps_it_and_the_others_share_the_rest() -> None:
    objects = [node(f"n{i}", cpu="4") for i in range(3)]
    objects += [queue("fixed", deserved={"cpu": "6"}), queue("shared")]
    objects += _pending("fixed", 2, memory=None) + _pending("shared", 10, memory=None)
    session = cycle(objects, "enqueue", TIERS)
    assert _deserved(session, "fixed") == {"cpu": 6000}
    assert _deserved(session, "shared") == {"cpu": 6000}


def test_queues_go_by_priority_then_by_the_smaller_share() -> None:
    objects = [node("n1", cpu="8"), queue("busy", priority=1), queue("idle"), queue("half")]
    objects += [gang("b", 1, cpu="2", memory=None, queue="busy", node_name="n1", phase="Running")]
    objects += [gang("h", 1, cpu="1", memory=None, queue="half", node_name="n1", phase="Running")]
    objects += _pending("busy", 1, memory=None) + _pending("idle", 1, memory=None) + _pending("half", 1, memory=None)
    session = open_session(snapshot(objects), conf("allocate", *TIERS))
    order = sorted((session.queues[name] for name in ("half", "idle", "busy")), key=session.queue_order_key)
    assert [q.name for q in order] == ["busy", "idle", "half"]


def test_closed_queues_allocate_nothing() -> None:
    objects = [node("n1"), queue("shut", state="Closing"), gang("g", 1, queue="shut")]
    session = cycle(objects, "allocate", TIERS)
    assert placed(session) == {}
    assert session.jobs["default/g"].unschedulable_message.endswith("queue shut is Closing")


def test_admission_counts_allocated_and_admitted_min_resources_against_real_capability() -> None:
    objects = [
        node("n1", cpu="8"),
        queue("q", capability={"cpu": "4"}),
        podgroup("first", 1, queue="q", phase="Pending", min_resources={"cpu": "3"}, created="2024-01-01T00:00:01Z"),
        podgroup("second", 1, queue="q", phase="Pending", min_resources={"cpu": "3"}, created="2024-01-01T00:00:02Z"),
        podgroup("free", 1, queue="q", phase="Pending", created="2024-01-01T00:00:03Z"),
    ]
    session = cycle(objects, "enqueue", TIERS)
    phases = {job.name: job.phase for job in session.jobs.values()}
    assert phases == {"first": "Inqueue", "second": "Pending", "free": "Inqueue"}
    assert ("second", "queue resource quota insufficient") in [(e.name, e.message) for e in session.events]


def test_reclaim_takes_only_from_queues_above_deserved_and_never_below_guarantee() -> None:
    # 3 cpu. rich (guarantee 2) runs 2 cpu + 1 cpu; poor asks for 2. Real capability: rich 3,
    # poor 1; round 1 gives 1.5 each: rich is floored at 2, poor capped at 1. rich holds 3 > 2.
    objects = [
        node("n1", cpu="3"),
        queue("rich", guarantee={"cpu": "2"}),
        queue("poor"),
        gang("big", 1, cpu="2", memory=None, queue="rich", node_name="n1", phase="Running"),
        gang("small", 1, cpu="1", memory=None, queue="rich", node_name="n1", phase="Running"),
    ]
    objects += _pending("poor", 2, memory=None)
    session = open_session(snapshot(objects), conf("reclaim", ["proportion"]))
    assert dict(session.resources.to_list(session.queues["rich"].deserved)) == {"cpu": 2000}
    candidates = [next(iter(session.jobs[f"default/{name}"].tasks.values())) for name in ("big", "small")]
    reclaimer = next(iter(session.jobs["default/poor0"].tasks.values()))
    # Taking "big" would leave rich 1 cpu, below its guarantee; "small" leaves it at 2.
    assert [task.name for task in session.reclaimable(reclaimer, candidates)] == ["small-0"]
    assert session.overused(session.queues["rich"])
    assert not session.overused(session.queues["poor"])


def _eager(name: str, size: int, queue_name: str) -> list:
    """A gang whose pods were created with its PodGroup (Spark, Ray), not admitted yet: its
    minResources (20 cpu) are beyond the 8-cpu cluster, so enqueue keeps it Pending."""
    return [podgroup(name, size, queue=queue_name, phase="Pending", min_resources={"cpu": "20"})] + [
        pod(f"{name}-{i}", "1", None, group=name) for i in range(size)
    ]


def test_pods_of_jobs_not_admitted_are_no_demand_so_admitted_gangs_keep_their_share() -> None:
    # 8 cpu; `eager` (weight 3) holds 20 pods of a job not admitted, `admitted` (weight 1) an
    # admitted gang of 4 x 1 cpu. Counting the unadmitted pods, `eager` would ask for 20 and
    # deserve 6, leaving `admitted` 2 cpu: its gang could never be placed (a deadlock when it
    # also holds the admission budget). Only admitted jobs ask: `eager` deserves nothing yet.
    objects = [node("n1", cpu="8"), queue("eager", weight=3), queue("admitted")]
    objects += _eager("spark", 20, "eager") + gang("mpi", 4, memory=None, queue="admitted")
    session = cycle(objects, "enqueue, allocate", TIERS)
    assert session.jobs["default/spark"].phase == "Pending"
    assert _deserved(session, "eager") == {}
    assert _deserved(session, "admitted") == {"cpu": 4000}
    assert sorted(placed(session)) == [f"mpi-{i}" for i in range(4)]


def test_without_enqueue_every_job_is_demand_since_allocate_admits_it() -> None:
    objects = [node("n1", cpu="8"), queue("eager", weight=3), queue("admitted")]
    objects += _eager("spark", 20, "eager") + gang("mpi", 4, memory=None, queue="admitted")
    session = cycle(objects, "allocate", TIERS)
    assert _deserved(session, "eager") == {"cpu": 6000}
    assert _deserved(session, "admitted") == {"cpu": 2000}


def test_admission_names_a_resource_no_node_offers_instead_of_quota() -> None:
    """Volcano's Paddle example asks for ephemeral-storage: on nodes that offer none, the gang
    is refused for what is missing, not for a queue quota no one could raise."""
    objects = [
        node("n1", cpu="8"),
        queue("q"),
        podgroup("paddle", 1, queue="q", phase="Pending", min_resources={"cpu": "1", "ephemeral-storage": "1Gi"}),
    ]
    session = cycle(objects, "enqueue", TIERS)
    [job] = session.jobs.values()
    assert job.phase == "Pending"
    why = "no schedulable node offers ephemeral-storage, which the gang asks for"
    assert job.unschedulable_message.endswith(why)
    assert [(e.type, e.reason) for e in session.events if e.name == "paddle"] == [("Warning", "Unschedulable")]
    assert all(why in e.message for e in session.events)


def _running(queue_name: str, jobs: int, first_node: int) -> list:
    """`jobs` gangs of 4 x 1 cpu in the queue, each running on a node of its own."""
    objects: list = []
    for j in range(jobs):
        objects += gang(
            f"{queue_name}-run{j}", 4, memory=None, queue=queue_name, node_name=f"n{first_node + j}", phase="Running"
        )
    return objects


@pytest.mark.parametrize("with_pods", [True, False], ids=["pods-created-with-the-group", "pods-after-admission"])
def test_admission_turns_go_to_the_queue_furthest_below_its_weight(with_pods: bool) -> None:
    """The queues shape of `lahar bench peers` at the moment a slot opens: 40 cpu full, weights
    1:2:3 holding 24 / 12 / 4 cpu, every queue with five gangs of 4 waiting (more than its
    weight's share), room (48 overcommitted - 40) for two. Nothing admitted asks, so each queue
    deserved what it held (share 1 for all) and the tie by name admitted q1's gangs, over its
    weight, every time: the bench measured q1 at about 60 % of the cluster. Against the demand
    the waiting gangs make, q3 is furthest below its share (4 of 20 cpu) and gets both."""
    objects: list = [node(f"n{i}", cpu="4") for i in range(10)]
    objects += [queue("q1", weight=1), queue("q2", weight=2), queue("q3", weight=3)]
    objects += _running("q1", 6, 0) + _running("q2", 3, 6) + _running("q3", 1, 9)
    for name in ("q1", "q2", "q3"):
        for j in range(5):
            group = f"{name}-wait{j}"
            objects.append(podgroup(group, 4, queue=name, phase="Pending", min_resources={"cpu": "4"}))
            if with_pods:
                objects += [pod(f"{group}-{i}", "1", None, group=group) for i in range(4)]
    session = cycle(objects, "enqueue", (["priority", "gang"], ["overcommit", "predicates", "proportion"]))
    admitted = sorted(job.name for job in session.jobs.values() if "wait" in job.name and job.phase == "Inqueue")
    assert admitted == ["q3-wait0", "q3-wait1"]
