"""The federation's decisions (federation/planner.py): given the hub's Jobs and Queues and what the
members look like, the actions `plan` returns. Pure: every fleet and history is built here."""

from __future__ import annotations

from lahar.api.queue import Queue
from lahar.federation import names
from lahar.federation.planner import (
    CreateCopy,
    DeleteCopy,
    Dispatch,
    HoldChange,
    SetStatus,
    UpdateCopy,
    fleet_capability,
    plan,
)
from lahar.federation.policy import Policy
from tests.federation.fleet import member, member_copy, resources, running_status, vcjob, view

POLICY = Policy(heartbeat_period=1.0, unreachable_after=5.0, redispatch_after=30.0)
NOW = 1000.0


def hub_queue(
    name: str, weight: int = 1, capability: dict[str, str] | None = None, guarantee: dict[str, str] | None = None
) -> Queue:
    spec: dict[str, object] = {"weight": weight}
    if capability:
        spec["capability"] = capability
    if guarantee:
        spec["guarantee"] = {"resource": guarantee}
    return Queue({"metadata": {"name": name}, "spec": spec})


def of(kind: type, actions: list) -> list:
    return [a for a in actions if isinstance(a, kind)]


def test_a_gang_that_fits_only_one_member_goes_there() -> None:
    members = {
        "small": member("small", nodes=4, cpu=2),  # 8 CPUs in all, but 2 per node
        "wide": member("wide", nodes=2, cpu=8),
    }
    job = view(vcjob("train", replicas=2, cpu="6"))  # 6-CPU pods: only wide's nodes hold one
    actions = plan([job], members, {"small": [], "wide": []}, {}, POLICY, NOW)
    assert actions == [
        Dispatch(("default", "train"), "wide", 1, names.REASON_DISPATCHED, "placed on member cluster wide")
    ]


def test_a_gang_is_never_split_across_members() -> None:
    members = {"a": member("a", nodes=1, cpu=4), "b": member("b", nodes=1, cpu=4)}
    job = view(vcjob("big", replicas=3, cpu="2"))  # 6 CPUs: fits the fleet's 8, no member's 4
    (action,) = plan([job], members, {"a": [], "b": []}, {}, POLICY, NOW)
    assert isinstance(action, SetStatus)
    assert action.status["state"]["reason"] == names.REASON_NEVER_FITS
    assert "whole gang" in action.status["state"]["message"]
    assert action.event is not None and action.event[0] == "Warning"


def test_a_job_waits_when_the_members_are_full_now_but_could_hold_it() -> None:
    members = {"a": member("a", nodes=1, cpu=4, used=[resources(3)])}
    (action,) = plan([view(vcjob("j", replicas=1, cpu="2"))], members, {"a": []}, {}, POLICY, NOW)
    assert isinstance(action, SetStatus) and action.status["state"]["reason"] == names.REASON_WAITING
    assert action.event is None  # a wait is not a warning


def test_cluster_affinity_picks_by_labels() -> None:
    members = {
        "eu": member("eu", labels={"region": "eu"}),
        "us": member("us", labels={"region": "us"}, cost=0.1),  # cheaper, but not where the job may go
    }
    job = view(vcjob("j", annotations={names.CLUSTER_SELECTOR_ANNOTATION: "region in (eu)"}))
    (action,) = plan([job], members, {"eu": [], "us": []}, {}, POLICY, NOW)
    assert isinstance(action, Dispatch) and action.member == "eu"
    bad = view(vcjob("k", annotations={names.CLUSTER_SELECTOR_ANNOTATION: "region in (eu"}))
    (refused,) = plan([bad], members, {"eu": [], "us": []}, {}, POLICY, NOW)
    assert isinstance(refused, SetStatus) and refused.status["state"]["reason"] == names.REASON_NEVER_FITS
    assert names.CLUSTER_SELECTOR_ANNOTATION in refused.status["state"]["message"]


def test_gpu_jobs_go_where_the_gpus_are() -> None:
    members = {"cpu": member("cpu", cpu=16), "gpu": member("gpu", cpu=4, gpu=8, cost=9)}
    (action,) = plan([view(vcjob("t", gpu=2))], members, {"cpu": [], "gpu": []}, {}, POLICY, NOW)
    assert isinstance(action, Dispatch) and action.member == "gpu"


def test_the_cheaper_member_wins_when_room_is_equal() -> None:
    members = {"dear": member("dear", cost=3.0), "cheap": member("cheap", cost=1.0)}
    (action,) = plan([view(vcjob("j"))], members, {"dear": [], "cheap": []}, {}, POLICY, NOW)
    assert isinstance(action, Dispatch) and action.member == "cheap"


def test_jobs_in_one_plan_never_count_on_the_same_room() -> None:
    members = {"a": member("a", nodes=1, cpu=4), "b": member("b", nodes=1, cpu=4)}
    jobs = [view(vcjob(f"j{i}", replicas=1, cpu="3", created=f"2026-01-01T00:00:0{i}Z")) for i in range(3)]
    actions = plan(jobs, members, {"a": [], "b": []}, {}, POLICY, NOW)
    placed = {a.job[1]: a.member for a in of(Dispatch, actions)}
    assert sorted(placed.values()) == ["a", "b"] and set(placed) == {"j0", "j1"}
    (waiting,) = of(SetStatus, actions)
    assert waiting.job == ("default", "j2") and waiting.status["state"]["reason"] == names.REASON_WAITING


def test_a_placed_job_not_yet_started_keeps_its_room() -> None:
    members = {"a": member("a", nodes=1, cpu=4)}
    placed = view(vcjob("first", replicas=1, cpu="3", cluster="a", placement=1, dispatched=1))
    copy = member_copy(placed.raw, "a", 1, {"state": {"phase": "Pending"}})  # its pod is not bound yet
    actions = plan([placed, view(vcjob("second", replicas=1, cpu="3"))], members, {"a": [copy]}, {}, POLICY, NOW)
    assert not of(Dispatch, actions)


def test_the_global_quota_holds_across_members() -> None:
    members = {"a": member("a", nodes=1, cpu=8), "b": member("b", nodes=1, cpu=8)}
    queues = {"team": hub_queue("team", capability={"cpu": "6"})}
    running = view(vcjob("r", replicas=2, cpu="2", queue="team", cluster="a", placement=1, dispatched=1))
    copy = member_copy(running.raw, "a", 1, running_status(2))
    new = view(vcjob("n", replicas=2, cpu="2", queue="team"))  # 4 + 4 > 6, though b is empty
    small = view(vcjob("s", replicas=1, cpu="2", queue="team", created="2026-01-02T00:00:00Z"))  # 4 + 2 = 6
    actions = plan([running, new, small], members, {"a": [copy], "b": []}, queues, POLICY, NOW)
    assert [a.job[1] for a in of(Dispatch, actions)] == ["s"]
    (held,) = [a for a in of(SetStatus, actions) if a.job[1] == "n"]
    assert held.status["state"]["reason"] == names.REASON_QUOTA


def test_without_a_hub_queue_the_quota_is_the_members_capabilities_summed() -> None:
    members = {
        "a": member("a", queue_capability={"team": resources(2, 100)}),
        "b": member("b", queue_capability={"team": resources(3, 100)}),
    }
    assert fleet_capability("team", {}, members.values()) == resources(5, 200)
    members["c"] = member("c")  # no bound on team there: unbounded fleet-wide
    assert fleet_capability("team", {}, members.values()) == resources(0, 0)


def test_a_member_queue_capability_keeps_jobs_off_that_member() -> None:
    members = {
        "a": member("a", cost=0.1, queue_capability={"team": resources(1)}),
        "b": member("b", cost=5.0),
    }
    (action,) = plan([view(vcjob("j", replicas=2, queue="team"))], members, {"a": [], "b": []}, {}, POLICY, NOW)
    assert isinstance(action, Dispatch) and action.member == "b"


def test_higher_priority_dispatches_first_and_queues_take_turns() -> None:
    members = {"a": member("a", nodes=1, cpu=3)}
    jobs = [
        view(vcjob("a1", replicas=1, queue="qa", created="2026-01-01T00:00:01Z")),
        view(vcjob("a2", replicas=1, queue="qa", created="2026-01-01T00:00:02Z")),
        view(vcjob("b1", replicas=1, queue="qb", created="2026-01-01T00:00:03Z")),
        view(
            vcjob("urgent", replicas=1, queue="qa", created="2026-01-01T00:00:09Z", priority_class="high"),
            {"high": 100},
        ),
    ]
    actions = plan(jobs, members, {"a": []}, {}, POLICY, NOW)
    # Room for three: the urgent one, then qb's first (qa already used its turn), then qa's oldest.
    assert [a.job[1] for a in of(Dispatch, actions)] == ["urgent", "b1", "a1"]


def test_a_dispatched_job_mirrors_its_member_copy() -> None:
    job = view(vcjob("j", cluster="a", placement=1, dispatched=1, status={"state": {"phase": "Pending"}}))
    copy = member_copy(job.raw, "a", 1, running_status(2))
    actions = plan([job], {"a": member("a")}, {"a": [copy]}, {}, POLICY, NOW)
    assert actions == [SetStatus(("default", "j"), running_status(2))]
    same = view(vcjob("j", cluster="a", placement=1, dispatched=1, status=running_status(2)))
    assert plan([same], {"a": member("a")}, {"a": [copy]}, {}, POLICY, NOW) == []


def test_a_placement_whose_copy_was_never_confirmed_is_created_again() -> None:
    # The federation stopped between writing the placement and creating the copy.
    job = view(vcjob("j", cluster="a", placement=1))
    assert plan([job], {"a": member("a")}, {"a": []}, {}, POLICY, NOW) == [CreateCopy(("default", "j"), "a", 1)]


def test_a_copy_deleted_in_the_member_terminates_the_hub_job() -> None:
    job = view(vcjob("j", cluster="a", placement=1, dispatched=1, status=running_status(2)))
    (action,) = plan([job], {"a": member("a")}, {"a": []}, {}, POLICY, NOW)
    assert isinstance(action, SetStatus)
    assert action.status["state"] == {"phase": "Terminated", "reason": names.REASON_DELETED_IN_MEMBER, "message": ""}


def test_deleting_on_the_hub_deletes_in_the_member() -> None:
    gone = vcjob("j")
    copy = member_copy(gone, "a", 1)
    assert plan([], {"a": member("a")}, {"a": [copy]}, {}, POLICY, NOW) == [
        DeleteCopy("a", ("default", "j"), copy.uid, "its hub job is gone")
    ]


def test_a_silent_member_marks_its_jobs_then_they_move_and_the_stale_copy_goes() -> None:
    job = view(vcjob("j", cluster="a", placement=1, dispatched=1, status=running_status(2)))
    members = {"a": member("a", reachable=False, last_heartbeat=NOW - 2), "b": member("b")}
    # A blip (under unreachableAfter): nothing happens.
    assert plan([job], members, {"b": []}, {}, POLICY, NOW) == []
    # Silent for longer: marked, not moved.
    members["a"] = member("a", reachable=False, last_heartbeat=NOW - 10)
    (mark,) = plan([job], members, {"b": []}, {}, POLICY, NOW)
    assert isinstance(mark, SetStatus) and mark.status["state"]["reason"] == names.REASON_UNREACHABLE
    assert mark.status["state"]["phase"] == "Running" and mark.status["running"] == 2
    # Past redispatchAfter: placed on b with the next placement number.
    members["a"] = member("a", reachable=False, last_heartbeat=NOW - 31)
    (move,) = plan([job], members, {"b": []}, {}, POLICY, NOW)
    assert move == Dispatch(("default", "j"), "b", 2, names.REASON_REDISPATCHED, "member cluster a lost; placed on b")
    # a answers again, with the old copy: it is deleted (placement 1 is not the hub's 2).
    moved = view(vcjob("j", cluster="b", placement=2, dispatched=2))
    stale = member_copy(moved.raw, "a", 1, running_status(2))
    fresh = member_copy(moved.raw, "b", 2, running_status(2))
    members["a"] = member("a")
    actions = plan([moved], members, {"a": [stale], "b": [fresh]}, {}, POLICY, NOW)
    assert of(DeleteCopy, actions) == [DeleteCopy("a", ("default", "j"), stale.uid, "stale: placement 2 is on b")]
    assert not of(Dispatch, actions) and not of(CreateCopy, actions)


def test_a_job_that_waits_on_member_loss_is_only_marked() -> None:
    job = view(
        vcjob("j", cluster="a", placement=1, dispatched=1, annotations={names.ON_MEMBER_LOSS_ANNOTATION: "Wait"})
    )
    members = {"a": member("a", reachable=False, last_heartbeat=NOW - 100), "b": member("b")}
    (action,) = plan([job], members, {"b": []}, {}, POLICY, NOW)
    assert isinstance(action, SetStatus) and action.status["state"]["reason"] == names.REASON_UNREACHABLE


def test_finished_jobs_stay_where_they_ran() -> None:
    done = view(vcjob("j", cluster="a", placement=1, dispatched=1, status={"state": {"phase": "Completed"}}))
    members = {"a": member("a", reachable=False, last_heartbeat=NOW - 100), "b": member("b")}
    assert plan([done], members, {"b": []}, {}, POLICY, NOW) == []


def test_nothing_is_concluded_about_a_member_not_listed_this_time() -> None:
    job = view(vcjob("j", cluster="a", placement=1, dispatched=1, status=running_status(2)))
    assert plan([job], {"a": member("a")}, {}, {}, POLICY, NOW) == []


def test_a_copy_newer_than_the_hub_read_is_left_alone() -> None:
    # The hub Job as read predates the federation's own placement write; the copy is already there.
    lagging = view(vcjob("j"))
    copy = member_copy(lagging.raw, "a", 1)
    assert plan([lagging], {"a": member("a")}, {"a": [copy]}, {}, POLICY, NOW) == []


def test_a_queue_guarantee_keeps_fleet_room_for_its_queue() -> None:
    # 16 CPUs over two members; team-b is guaranteed 8 of them, fleet-wide, though idle.
    members = {"a": member("a", nodes=1, cpu=8), "b": member("b", nodes=1, cpu=8)}
    queues = {"team-a": hub_queue("team-a"), "team-b": hub_queue("team-b", guarantee={"cpu": "8"})}
    first = view(vcjob("a1", replicas=2, cpu="3", queue="team-a"))  # 6 of the 16: 10 left, 8 held
    second = view(vcjob("a2", replicas=1, cpu="4", queue="team-a", created="2026-01-02T00:00:00Z"))  # 6 left < 8
    actions = plan([first, second], members, {"a": [], "b": []}, queues, POLICY, NOW)
    assert [a.job[1] for a in of(Dispatch, actions)] == ["a1"]
    (held,) = of(SetStatus, actions)
    assert held.job[1] == "a2" and held.status["state"]["reason"] == names.REASON_GUARANTEE
    assert "team-b" in held.status["state"]["message"]
    # team-b's own Jobs take the guaranteed room; once it uses its guarantee, nothing is held for it.
    b_job = view(vcjob("b1", replicas=2, cpu="4", queue="team-b"))
    assert [a.job[1] for a in of(Dispatch, plan([b_job], members, {"a": [], "b": []}, queues, POLICY, NOW))] == ["b1"]
    placed = view(vcjob("b1", replicas=2, cpu="4", queue="team-b", cluster="b", placement=1, dispatched=1))
    members["b"] = member("b", nodes=1, cpu=8, used=[resources(8, 2)])
    copy = member_copy(placed.raw, "b", 1, running_status(2))
    actions = plan([placed, second], members, {"a": [], "b": [copy]}, queues, POLICY, NOW)
    assert [a.job[1] for a in of(Dispatch, actions)] == ["a2"]


def test_a_spec_change_after_dispatch_is_carried_to_the_copy() -> None:
    before = vcjob("j", replicas=2, cluster="a", placement=1, dispatched=1, status=running_status(2))
    scaled = view(
        vcjob("j", replicas=3, cluster="a", placement=1, dispatched=1, status=running_status(2), generation=2)
    )
    copy = member_copy(scaled.raw, "a", 1, running_status(2), made_from=before)
    actions = plan([scaled], {"a": member("a")}, {"a": [copy]}, {}, POLICY, NOW)
    assert actions == [UpdateCopy("a", ("default", "j"), copy.uid, 1, 2)]
    # Carried: the copy says generation 2, nothing more to do.
    assert (
        plan([scaled], {"a": member("a")}, {"a": [member_copy(scaled.raw, "a", 1, running_status(2))]}, {}, POLICY, NOW)
        == []
    )


def test_a_growing_change_past_the_fleet_quota_is_held_and_told_once() -> None:
    queues = {"team": hub_queue("team", capability={"cpu": "4"})}
    before = vcjob("j", replicas=2, cpu="2", queue="team", cluster="a", placement=1, dispatched=1)
    grown = vcjob("j", replicas=3, cpu="2", queue="team", cluster="a", placement=1, dispatched=1, generation=2)
    copy = member_copy(grown, "a", 1, made_from=before)
    (hold,) = plan([view(grown)], {"a": member("a")}, {"a": [copy]}, queues, POLICY, NOW)
    assert isinstance(hold, HoldChange) and hold.generation == 2 and "queue team" in hold.message
    told = vcjob(
        "j",
        replicas=3,
        cpu="2",
        queue="team",
        cluster="a",
        placement=1,
        dispatched=1,
        generation=2,
        annotations={names.HELD_GENERATION_ANNOTATION: "2"},
    )
    assert plan([view(told)], {"a": member("a")}, {"a": [copy]}, queues, POLICY, NOW) == []
    # A change that asks less always goes, quota or not.
    shrunk = vcjob("j", replicas=1, cpu="2", queue="team", cluster="a", placement=1, dispatched=1, generation=3)
    actions = plan(
        [view(shrunk)], {"a": member("a")}, {"a": [member_copy(shrunk, "a", 1, made_from=grown)]}, queues, POLICY, NOW
    )
    assert of(UpdateCopy, actions) and not of(HoldChange, actions)


def test_a_finished_job_s_spec_change_is_not_carried() -> None:
    done = {"state": {"phase": "Completed"}}
    before = vcjob("j", cluster="a", placement=1, dispatched=1, status=done)
    edited = view(vcjob("j", cluster="a", placement=1, dispatched=1, status=done, generation=2))
    assert (
        plan(
            [edited],
            {"a": member("a")},
            {"a": [member_copy(edited.raw, "a", 1, done, made_from=before)]},
            {},
            POLICY,
            NOW,
        )
        == []
    )


def test_the_jobs_of_a_deleted_cluster_are_placed_elsewhere_at_once() -> None:
    # Its Cluster is gone from the hub (the loop deleted its copies there first, when it could).
    job = view(vcjob("j", cluster="gone", placement=1, dispatched=1, status=running_status(2)))
    (move,) = plan([job], {"b": member("b")}, {"b": []}, {}, POLICY, NOW)
    assert move == Dispatch(
        ("default", "j"), "b", 2, names.REASON_REDISPATCHED, "member cluster gone lost; placed on b"
    )
