"""The member-side fence (federation/fence.py) as plain functions: which copies a member stops once
the hub's lease has run out, and that a policy that loads always lets the member stop them before
the hub places them elsewhere (planner.py); and what the hub does with a copy the member stopped."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lahar.api.job import ABORT_JOB, COMMAND_ANNOTATION
from lahar.api.lease import micro_time
from lahar.federation import names
from lahar.federation.copies import member_job
from lahar.federation.fence import fence_patch, lease_expiry, lease_object, to_fence
from lahar.federation.planner import DeleteCopy, Dispatch, Evict, plan
from lahar.federation.policy import FENCE_PERIOD, parse_policy
from tests.federation.fleet import member, member_copy, running_status, vcjob, view

RENEWED = 1_000_000.0


def copy_in_member(name: str, phase: str = "Running", **annotations: str) -> dict[str, Any]:
    """A copy as the member holds it: the hub Job's copy, with the member's status."""
    made = member_job(vcjob(name, cluster="m1", placement=1), 1)
    made["metadata"].update(uid=f"member-{name}", namespace="default")
    made["metadata"]["annotations"].update(annotations)
    made["status"] = {"state": {"phase": phase}}
    return made


def test_nothing_is_stopped_while_the_lease_holds() -> None:
    lease = lease_object("m1", RENEWED, 30)
    jobs = [copy_in_member("a")]
    assert to_fence(lease, jobs, RENEWED + 29.9) == []
    assert [j["metadata"]["name"] for j in to_fence(lease, jobs, RENEWED + 30)] == ["a"]


def test_once_it_ran_out_every_running_copy_is_stopped_and_nothing_else() -> None:
    lease = lease_object("m1", RENEWED, 30)
    deleting = copy_in_member("deleting")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    own = copy_in_member("own")  # the member's own Job: not the federation's
    del own["metadata"]["labels"][names.HUB_UID_LABEL]
    jobs = [
        copy_in_member("running"),
        copy_in_member("pending", phase="Pending"),
        copy_in_member("done", phase="Completed"),
        copy_in_member("failed", phase="Failed"),
        copy_in_member("aborted", phase="Aborted"),
        copy_in_member("waits", **{names.ON_MEMBER_LOSS_ANNOTATION: names.WAIT}),  # the hub never moves it
        copy_in_member("fenced", **{names.FENCED_ANNOTATION: "earlier"}),
        deleting,
        own,
    ]
    stopped = to_fence(lease, jobs, RENEWED + 31)
    assert [j["metadata"]["name"] for j in stopped] == ["running", "pending"]


def test_without_a_lease_nothing_is_stopped_and_an_unreadable_one_has_run_out() -> None:
    jobs = [copy_in_member("a")]
    assert lease_expiry(None) is None and to_fence(None, jobs, RENEWED) == []
    for spec in ({"renewTime": "yesterday", "leaseDurationSeconds": 30}, {"renewTime": micro_time(RENEWED)}):
        assert lease_expiry({"spec": spec}) == float("-inf")
        assert len(to_fence({"spec": spec}, jobs, RENEWED)) == 1


def test_the_lease_is_what_the_hub_wrote() -> None:
    lease = lease_object("m1", RENEWED + 0.25, 12)
    assert lease["metadata"] == {
        "name": names.LEASE_NAME,
        "namespace": names.LEASE_NAMESPACE,
        "labels": {names.MANAGED_LABEL: "true"},
    }
    assert lease["spec"]["holderIdentity"] == "lahar-federation/m1" and lease["spec"]["leaseDurationSeconds"] == 12
    assert lease_expiry(lease) == pytest.approx(RENEWED + 12.25)


def test_the_fence_aborts_the_copy_and_says_why() -> None:
    annotations = fence_patch(RENEWED + 31, RENEWED + 30)["metadata"]["annotations"]
    assert annotations[COMMAND_ANNOTATION] == ABORT_JOB  # the member's controller removes the pods
    assert annotations[names.FENCED_ANNOTATION] == (
        f"{micro_time(RENEWED + 31)}: the hub's lease ran out at {micro_time(RENEWED + 30)}"
    )


def test_the_copy_carries_on_member_loss_for_the_fence() -> None:
    hub = vcjob("j", annotations={names.ON_MEMBER_LOSS_ANNOTATION: names.WAIT})
    assert member_job(hub, 1)["metadata"]["annotations"][names.ON_MEMBER_LOSS_ANNOTATION] == names.WAIT
    assert names.ON_MEMBER_LOSS_ANNOTATION not in member_job(vcjob("k"), 1)["metadata"]["annotations"]


@pytest.mark.parametrize(
    "text",
    [
        "",  # the defaults: heartbeat 2 s, lease 30 s, re-dispatch after 60 s
        "heartbeatPeriod: 0.5s\nunreachableAfter: 3s\nredispatchAfter: 10s\n",  # lahar up's e2e test
        "heartbeatPeriod: 1s\nredispatchAfter: 20s\nmemberLease: 17s\n",  # the tightest margin allowed
    ],
)
def test_any_policy_that_loads_stops_the_copy_before_the_hub_moves_it(text: str) -> None:
    """The last heartbeat that reached the member renewed its lease at RENEWED; the member then
    goes silent. Each second, the member's fence (looking FENCE_PERIOD late at worst) and the
    hub's plan are asked: the copy is stopped before the hub dispatches the Job elsewhere."""
    policy = parse_policy(text)
    lease = lease_object("m1", RENEWED, policy.member_lease)
    job = view(vcjob("j", cluster="m1", placement=1, dispatched=1, status=running_status(2)))
    members = {"m1": member("m1", last_heartbeat=RENEWED, reachable=False), "m2": member("m2")}
    stopped_at = moved_at = None
    now = RENEWED
    while moved_at is None:
        if stopped_at is None and to_fence(lease, [copy_in_member("j")], now - FENCE_PERIOD):
            stopped_at = now
        if any(isinstance(a, Dispatch) for a in plan([job], members, {"m2": []}, {}, policy, now)):
            moved_at = now
        now += 0.1
    assert stopped_at is not None and stopped_at < moved_at
    # with a heartbeat to spare: a federation that crashed before recording the last one
    assert moved_at - stopped_at >= policy.heartbeat_period


def test_a_copy_the_member_stopped_goes_back_to_pending_and_is_removed() -> None:
    job = view(vcjob("j", cluster="m1", placement=1, dispatched=1, status=running_status(2)))
    stopped = dataclasses.replace(member_copy(vcjob("j"), "m1", 1, {"state": {"phase": "Aborted"}}), fenced=True)
    members = {"m1": member("m1"), "m2": member("m2", nodes=1)}
    actions = plan([job], members, {"m1": [stopped], "m2": []}, {}, parse_policy(""), 1000.0)
    # As an evicted Job: pending on the hub (placed again next cycle, with the next placement
    # number), the stopped copy deleted; its Aborted is not the hub Job's.
    why = "the copy in m1 was stopped when the hub's lease there ran out"
    assert actions == [Evict(("default", "j"), "m1", "member-uid-j", names.REASON_FENCED, why)]
    pending = view(vcjob("j", status={"state": {"phase": "Pending"}}))
    pending = dataclasses.replace(pending, placement=1)
    [dispatch] = [a for a in plan([pending], members, {"m1": [], "m2": []}, {}, parse_policy(""), 1000.0)]
    assert isinstance(dispatch, Dispatch) and dispatch.placement == 2


def test_a_finished_job_s_stopped_copy_is_only_removed() -> None:
    done = {"state": {"phase": "Completed"}}
    job = view(vcjob("j", cluster="m1", placement=1, dispatched=1, status=done))
    stopped = dataclasses.replace(member_copy(vcjob("j"), "m1", 1, done), fenced=True)
    actions = plan([job], {"m1": member("m1")}, {"m1": [stopped]}, {}, parse_policy(""), 1000.0)
    assert [type(a) for a in actions] == [DeleteCopy]
