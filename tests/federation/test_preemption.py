"""Preemption and reclaim across members (federation/planner.py): a Job that fits no member now
gets one by evicting whole running federated Jobs there, by Volcano's rules: preempt takes
strictly lower-priority Jobs of the same queue; reclaim, for a queue within its fleet-wide
guarantee, takes Jobs of other reclaimable queues that stay at their own guarantee."""

from __future__ import annotations

import dataclasses

from lahar.api.queue import Queue
from lahar.api.resources import ResourceList
from lahar.federation import names
from lahar.federation.planner import Dispatch, Evict, HubJob, MemberCopy, SetStatus, plan
from lahar.federation.policy import Policy
from tests.federation.fleet import member, member_copy, resources, running_status, vcjob, view

POLICY = Policy(heartbeat_period=1.0, unreachable_after=5.0, redispatch_after=30.0)
NOW = 1000.0
PRIORITIES = {"low": 0, "mid": 10, "high": 100}


def hub_queue(name: str, guarantee: str = "", reclaimable: bool = True) -> Queue:
    spec: dict[str, object] = {"weight": 1, "reclaimable": reclaimable}
    if guarantee:
        spec["guarantee"] = {"resource": {"cpu": guarantee}}
    return Queue({"metadata": {"name": name}, "spec": spec})


def running(
    name: str,
    where: str = "a",
    *,
    priority: str = "low",
    queue: str = "q",
    created: str = "2026-01-01T00:00:00Z",
    annotations: dict[str, str] | None = None,
) -> tuple[HubJob, MemberCopy]:
    """A two-pod Job of 2 CPUs a pod, running on `where` with one pod on each of its two nodes."""
    obj = vcjob(
        name,
        replicas=2,
        cpu="2",
        queue=queue,
        cluster=where,
        placement=1,
        dispatched=1,
        status=running_status(2),
        priority_class=priority,
        created=created,
        annotations=annotations,
    )
    its_copy = member_copy(obj, where, 1, running_status(2))
    return view(obj, PRIORITIES), dataclasses.replace(its_copy, on_nodes=(resources(2), resources(2)))


def pending(name: str, *, priority: str = "high", queue: str = "q", replicas: int = 2, cpu: str = "2") -> HubJob:
    return view(vcjob(name, replicas=replicas, cpu=cpu, queue=queue, priority_class=priority), PRIORITIES)


def full(name: str) -> dict[str, object]:
    """Two nodes of 4 CPUs, both taken by two running Jobs."""
    return {name: member(name, nodes=2, cpu=4, used=[resources(4, 2), resources(4, 2)])}


def test_a_higher_priority_job_evicts_the_lowest_jobs_of_its_queue_until_it_fits() -> None:
    older, low = running("older", created="2026-01-01T00:00:00Z")
    newer, newer_copy = running("newer", created="2026-01-01T00:00:05Z")
    actions = plan([older, newer, pending("urgent")], full("a"), {"a": [low, newer_copy]}, {}, POLICY, NOW)
    evictions = [a for a in actions if isinstance(a, Evict)]
    # One Job frees room enough: the newest of the lowest priority goes, the other stays.
    assert evictions == [
        Evict(
            ("default", "newer"),
            "a",
            "member-uid-newer",
            names.REASON_PREEMPTED,
            "evicted from member cluster a for default/urgent",
        )
    ]
    [dispatch] = [a for a in actions if isinstance(a, Dispatch)]
    assert (dispatch.job, dispatch.member, dispatch.placement) == (("default", "urgent"), "a", 1)


def test_lower_priorities_go_first_and_no_job_is_evicted_twice_in_one_plan() -> None:
    low, low_copy = running("low", priority="low")
    mid, mid_copy = running("mid", priority="mid")
    first, second = pending("urgent-1"), pending("urgent-2")
    actions = plan([low, mid, first, second], full("a"), {"a": [low_copy, mid_copy]}, {}, POLICY, NOW)
    assert [(a.job[1], a.reason) for a in actions if isinstance(a, Evict)] == [
        ("low", names.REASON_PREEMPTED),
        ("mid", names.REASON_PREEMPTED),
    ]
    assert [a.job[1] for a in actions if isinstance(a, Dispatch)] == ["urgent-1", "urgent-2"]


def test_equal_priority_other_queues_and_opted_out_jobs_are_not_preempted() -> None:
    same, same_copy = running("same", priority="high")
    other, other_copy = running("other", queue="elsewhere")
    actions = plan([same, other, pending("urgent")], full("a"), {"a": [same_copy, other_copy]}, {}, POLICY, NOW)
    assert not [a for a in actions if isinstance(a, Evict | Dispatch)]
    [waits] = [a for a in actions if isinstance(a, SetStatus)]
    assert waits.status["state"]["reason"] == names.REASON_WAITING
    kept = {"volcano.sh/preemptable": "false"}
    first, first_copy = running("kept-1", annotations=kept)
    second, second_copy = running("kept-2", annotations=kept)
    actions = plan([first, second, pending("urgent")], full("a"), {"a": [first_copy, second_copy]}, {}, POLICY, NOW)
    assert not [a for a in actions if isinstance(a, Evict)]


def test_a_gang_that_could_never_fit_evicts_nothing() -> None:
    low, low_copy = running("low")
    mid, mid_copy = running("mid", priority="mid")
    huge = pending("huge", replicas=3, cpu="4")  # three 4-CPU pods; the member has two 4-CPU nodes
    actions = plan([low, mid, huge], full("a"), {"a": [low_copy, mid_copy]}, {}, POLICY, NOW)
    assert not [a for a in actions if isinstance(a, Evict)]
    [refused] = [a for a in actions if isinstance(a, SetStatus)]
    assert refused.status["state"]["reason"] == names.REASON_NEVER_FITS


def test_the_member_needing_fewest_evictions_is_chosen() -> None:
    # a: two small Jobs on it; b: one Job taking both nodes whole. The gang needs 4 CPUs on each node.
    members = {**full("a"), **full("b")}
    a1, a1_copy = running("a1", "a")
    a2, a2_copy = running("a2", "a")
    wide, wide_copy = running("wide", "b")
    wide_copy = dataclasses.replace(wide_copy, on_nodes=(resources(4, 2), resources(4, 2)))
    urgent = pending("urgent", cpu="4")
    copies = {"a": [a1_copy, a2_copy], "b": [wide_copy]}
    actions = plan([a1, a2, wide, urgent], members, copies, {}, POLICY, NOW)
    assert [(a.job[1], a.member) for a in actions if isinstance(a, Evict)] == [("wide", "b")]
    assert [a.member for a in actions if isinstance(a, Dispatch)] == ["b"]


def test_a_queue_within_its_guarantee_reclaims_from_a_queue_above_its_own() -> None:
    first, first_copy = running("team-a-1", queue="team-a")
    second, second_copy = running("team-a-2", queue="team-a", created="2026-01-01T00:00:05Z")
    queues = {"team-a": hub_queue("team-a", guarantee="4"), "team-b": hub_queue("team-b", guarantee="4")}
    job = pending("team-b-1", queue="team-b", priority="low")  # no priority needed to reclaim
    actions = plan([first, second, job], full("a"), {"a": [first_copy, second_copy]}, queues, POLICY, NOW)
    assert [(a.job[1], a.reason) for a in actions if isinstance(a, Evict)] == [("team-a-2", names.REASON_RECLAIMED)]
    assert [a.job[1] for a in actions if isinstance(a, Dispatch)] == ["team-b-1"]


def test_reclaim_keeps_to_the_rules() -> None:
    first, first_copy = running("team-a-1", queue="team-a")
    second, second_copy = running("team-a-2", queue="team-a")
    copies = {"a": [first_copy, second_copy]}
    job = pending("team-b-1", queue="team-b", priority="low")

    def evicted(queues: dict[str, Queue], policy: Policy = POLICY) -> list[str]:
        actions = plan([first, second, job], full("a"), copies, queues, policy, NOW)
        return [a.job[1] for a in actions if isinstance(a, Evict)]

    guaranteed_b = hub_queue("team-b", guarantee="4")
    assert evicted({"team-b": guaranteed_b}) == ["team-a-2"]  # team-a has no hub Queue: reclaimable
    # team-a not reclaimable; team-a guaranteed all it uses; team-b without a guarantee, or past it.
    assert evicted({"team-b": guaranteed_b, "team-a": hub_queue("team-a", reclaimable=False)}) == []
    assert evicted({"team-b": guaranteed_b, "team-a": hub_queue("team-a", guarantee="8")}) == []
    assert evicted({"team-b": hub_queue("team-b")}) == []
    assert evicted({"team-b": hub_queue("team-b", guarantee="3")}) == []
    # The actions the policy names: without reclaim, nothing is taken from another queue.
    assert evicted({"team-b": guaranteed_b}, dataclasses.replace(POLICY, actions=("dispatch", "preempt"))) == []


def test_a_member_queue_s_own_capability_holds_as_in_placement() -> None:
    low, low_copy = running("low")
    mid, mid_copy = running("mid", priority="mid")

    def evicted(bound: dict[str, object]) -> list[str]:
        members = {"a": dataclasses.replace(full("a")["a"], queue_capability=bound)}
        actions = plan([low, mid, pending("urgent")], members, {"a": [low_copy, mid_copy]}, {}, POLICY, NOW)
        return [a.job[1] for a in actions if isinstance(a, Evict)]

    assert evicted({"q": ResourceList()}) == ["low"]  # the queues the federation makes bound nothing
    assert evicted({"q": resources(8, 4)}) == ["low"]  # 8 - 4 freed + 4 asked: within
    assert evicted({"q": resources(6, 4)}) == ["low", "mid"]  # 8 CPUs at once are too many there
    assert evicted({"q": resources(3, 4)}) == []  # the Job alone is more than the queue may hold there


def test_a_job_at_its_queue_s_fleet_quota_preempts_within_the_queue() -> None:
    # Queue q may use 8 CPUs fleet-wide and uses them; the urgent Job takes the room of the lowest.
    low, low_copy = running("low")
    mid, mid_copy = running("mid", priority="mid")
    capped = {"q": Queue({"metadata": {"name": "q"}, "spec": {"weight": 1, "capability": {"cpu": "8"}}})}
    members = {**full("a"), "b": member("b", nodes=2, cpu=4)}  # room on b, but not within the quota
    actions = plan([low, mid, pending("urgent")], members, {"a": [low_copy, mid_copy], "b": []}, capped, POLICY, NOW)
    assert [a.job[1] for a in actions if isinstance(a, Evict)] == ["low"]
    assert [(a.job[1], a.member) for a in actions if isinstance(a, Dispatch)] == [("urgent", "a")]


def placed_not_started(name: str, where: str = "a", *, priority: str = "low") -> tuple[HubJob, MemberCopy]:
    """A two-pod Job of 2 CPUs a pod, placed on `where`: its copy there, no pod bound yet."""
    obj = vcjob(name, replicas=2, cpu="2", queue="q", cluster=where, placement=1, dispatched=1, priority_class=priority)
    obj["status"] = {"state": {"phase": "Pending"}}
    return view(obj, PRIORITIES), member_copy(obj, where, 1, {"state": {"phase": "Pending"}})


def test_a_job_placed_but_not_started_is_preempted_for_the_room_held_for_it() -> None:
    # Member a: one node's 4 CPUs taken by a running Job, the other's held for a placed Job whose
    # pods are not bound yet (the snapshot does not show them: the planner holds their room).
    started, started_copy = running("started", created="2026-01-01T00:00:00Z")
    started_copy = dataclasses.replace(started_copy, on_nodes=(resources(4, 2), ResourceList()))
    waiting, waiting_copy = placed_not_started("waiting")
    members = {"a": member("a", nodes=2, cpu=4, used=[resources(4, 2)])}
    urgent = pending("urgent")
    actions = plan([started, waiting, urgent], members, {"a": [started_copy, waiting_copy]}, {}, POLICY, NOW)
    # The newest of the lowest priority goes: the one not started, and it alone is enough.
    assert [(a.job[1], a.uid, a.reason) for a in actions if isinstance(a, Evict)] == [
        ("waiting", "member-uid-waiting", names.REASON_PREEMPTED)
    ]
    assert [(a.job[1], a.member) for a in actions if isinstance(a, Dispatch)] == [("urgent", "a")]


def test_a_placed_job_whose_copy_is_not_made_yet_is_not_evicted() -> None:
    # Placed on the hub, its copy not created in the member yet: its room is held, but there is no
    # copy to delete; the urgent Job waits (the next cycle sees the copy).
    obj = vcjob("waiting", replicas=2, cpu="2", queue="q", cluster="a", placement=1, priority_class="low")
    actions = plan([view(obj, PRIORITIES), pending("urgent")], {"a": member("a", cpu=2)}, {"a": []}, {}, POLICY, NOW)
    assert [type(a).__name__ for a in actions] == ["CreateCopy", "SetStatus"]
    assert actions[1].status["state"]["reason"] == names.REASON_WAITING  # type: ignore[attr-defined]


def test_a_job_moved_off_a_lost_member_preempts_elsewhere_never_there() -> None:
    # Member lost went silent past redispatchAfter with a high-priority Job on it; member b is full
    # with low-priority Jobs of the same queue.
    moved = vcjob(
        "moved", replicas=2, cpu="2", queue="q", cluster="lost", placement=1, dispatched=1, priority_class="high"
    )
    moved["status"] = running_status(2)
    low, low_copy = running("low", "b")
    other, other_copy = running("other", "b", created="2026-01-01T00:00:05Z")
    members = {
        "lost": member("lost", reachable=False, last_heartbeat=NOW - POLICY.redispatch_after),
        **full("b"),
    }
    actions = plan([view(moved, PRIORITIES), low, other], members, {"b": [low_copy, other_copy]}, {}, POLICY, NOW)
    assert [(a.job[1], a.member, a.reason) for a in actions if isinstance(a, Evict)] == [
        ("other", "b", names.REASON_PREEMPTED)
    ]
    [dispatch] = [a for a in actions if isinstance(a, Dispatch)]
    assert (dispatch.job[1], dispatch.member, dispatch.placement, dispatch.reason) == (
        "moved",
        "b",
        2,
        names.REASON_REDISPATCHED,
    )
    # Its lost member is never chosen, even with room there and victims to take.
    members["lost"] = member("lost", reachable=True, last_heartbeat=NOW - POLICY.redispatch_after)
    actions = plan([view(moved, PRIORITIES), low, other], members, {"b": [low_copy, other_copy]}, {}, POLICY, NOW)
    assert [a.member for a in actions if isinstance(a, Dispatch)] == ["b"]
