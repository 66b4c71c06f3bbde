"""The member-side fence (federation/fence.py) as plain functions: which copies a member stops once
the hub's lease has run out, and that a policy that loads always lets the member stop them before
the hub places them elsewhere (planner.py), whatever the skew between the hub's and the member's
clocks and when the fence (re)started; and what the hub does with a copy the member stopped."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lahar.api.job import ABORT_JOB, COMMAND_ANNOTATION
from lahar.api.lease import micro_time, parse_micro_time
from lahar.federation import names
from lahar.federation.copies import member_job
from lahar.federation.fence import (
    VOLCANO,
    LeaseView,
    abort_command,
    fence_patch,
    fence_reason,
    lease_object,
    observe,
    startup_grace,
    to_fence,
)
from lahar.federation.planner import DeleteCopy, Dispatch, Evict, plan
from lahar.federation.policy import FENCE_PERIOD, Policy, parse_policy
from tests.federation.fleet import member, member_copy, running_status, vcjob, view

RENEWED = 1_000_000.0  # the hub's clock
READ = 500.0  # the member's monotonic clock: unrelated to the hub's


def renewed(seconds: int = 30, read_before: float = READ - 0.5, read_at: float = READ) -> LeaseView:
    """The fence's view once it saw a renewal: a read at `read_before` showed the lease before it,
    the one at `read_at` the renewed lease."""
    first = observe(None, lease_object("m1", RENEWED - 2, seconds, 2.0), read_before)
    return observe(first, lease_object("m1", RENEWED, seconds, 2.0), read_at)


def copy_in_member(name: str, phase: str = "Running", **annotations: str) -> dict[str, Any]:
    """A copy as the member holds it: the hub Job's copy, with the member's status."""
    made = member_job(vcjob(name, cluster="m1", placement=1), 1)
    made["metadata"].update(uid=f"member-{name}", namespace="default")
    made["metadata"]["annotations"].update(annotations)
    made["status"] = {"state": {"phase": phase}}
    return made


def later(view: LeaseView, read_at: float) -> LeaseView:
    """The view after one more read that showed the same lease."""
    return dataclasses.replace(view, read_at=read_at)


def test_nothing_is_stopped_while_the_lease_holds() -> None:
    view = renewed(30)
    # Timed from the read before the one that showed the renewal: never later than the renewal.
    assert view.since == READ - 0.5 and view.expires_at == READ + 29.5
    jobs = [copy_in_member("a")]
    assert to_fence(later(view, READ + 29.4), jobs) == []
    assert [j["metadata"]["name"] for j in to_fence(later(view, READ + 29.5), jobs)] == ["a"]


def test_each_renewal_is_timed_from_the_read_before_it_and_other_writes_do_not_renew() -> None:
    lease = lease_object("m1", RENEWED, 30, 2.0)
    view = observe(renewed(30), lease, READ + 1)  # unchanged: the same since
    assert view.since == READ - 0.5
    relabelled = {**lease, "metadata": {**lease["metadata"], "resourceVersion": "99", "labels": {"x": "y"}}}
    assert observe(view, relabelled, READ + 2).since == READ - 0.5  # not a renewal: renewTime is the same
    again = observe(observe(view, relabelled, READ + 2), lease_object("m1", RENEWED + 2, 30, 2.0), READ + 3)
    assert again.since == READ + 2 and not to_fence(later(again, READ + 31.9), [copy_in_member("a")])


def test_once_it_ran_out_every_running_copy_is_stopped_and_nothing_else() -> None:
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
    stopped = to_fence(later(renewed(30), READ + 31), jobs)
    assert [j["metadata"]["name"] for j in stopped] == ["running", "pending"]


def test_without_a_lease_nothing_is_stopped_and_an_unreadable_one_has_run_out() -> None:
    jobs = [copy_in_member("a")]
    assert to_fence(None, jobs) == [] and to_fence(observe(None, None, READ), jobs) == []
    for spec in (
        {"renewTime": micro_time(RENEWED)},
        {"leaseDurationSeconds": 30},
        {"renewTime": "x", "leaseDurationSeconds": 0},
    ):
        for previous in (None, renewed(30)):  # at once, even for a fence that just started
            view = observe(previous, {"spec": spec}, READ + 1)
            assert view.expired and len(to_fence(view, jobs)) == 1
            assert fence_reason(view) == "the hub's lease here cannot be read"


def test_a_lease_made_after_a_read_that_found_none_is_timed_from_that_read() -> None:
    none = observe(None, None, READ)
    view = observe(none, lease_object("m1", RENEWED, 30, 2.0), READ + 1)
    assert view.since == READ and not view.expired and later(view, READ + 30).expired


def test_the_lease_is_what_the_hub_wrote() -> None:
    lease = lease_object("m1", RENEWED + 0.25, 12, 0.5)
    assert lease["metadata"] == {
        "name": names.LEASE_NAME,
        "namespace": names.LEASE_NAMESPACE,
        "labels": {names.MANAGED_LABEL: "true"},
        "annotations": {names.RENEW_PERIOD_ANNOTATION: "0.5"},
    }
    assert lease["spec"] == {
        "holderIdentity": "lahar-federation/m1",
        "leaseDurationSeconds": 12,
        "renewTime": micro_time(RENEWED + 0.25),
    }


def test_a_fence_that_starts_waits_two_renewals_for_one_then_stops() -> None:
    lease = lease_object("m1", RENEWED, 30, 2.0)
    assert startup_grace(lease, 30) == 2 * 2.0 + 2 * FENCE_PERIOD
    first = observe(None, lease, READ)
    assert first.expires_at == READ + 6 and not first.expired
    assert later(first, READ + 6).expired  # no renewal came: the lease may be long stale
    renewal_seen = observe(first, lease_object("m1", RENEWED + 2, 30, 2.0), READ + 2)
    assert renewal_seen.expires_at == READ + 30  # from then on, a whole lease
    # The grace is never longer than the lease; a hub that wrote no period: half of it.
    assert startup_grace(lease_object("m1", RENEWED, 4, 2.0), 4) == 4
    for bad in (None, "soon", "0", "-1"):
        unsaid = lease_object("m1", RENEWED, 30, 2.0)
        unsaid["metadata"]["annotations"] = {} if bad is None else {names.RENEW_PERIOD_ANNOTATION: bad}
        assert startup_grace(unsaid, 30) == 15


def test_the_fence_aborts_the_copy_and_says_why() -> None:
    view = later(renewed(30), READ + 31)
    assert fence_reason(view) == "no renewal of the hub's 30 s lease seen for 31.5 s"
    annotations = fence_patch(RENEWED + 31, fence_reason(view))["metadata"]["annotations"]
    assert annotations[COMMAND_ANNOTATION] == ABORT_JOB  # the member's controller removes the pods
    assert annotations[names.FENCED_ANNOTATION] == f"{micro_time(RENEWED + 31)}: {fence_reason(view)}"


def test_in_a_member_running_volcano_the_copy_is_stopped_by_a_bus_command() -> None:
    job = copy_in_member("trainer")
    reason = fence_reason(later(renewed(30), READ + 31))
    # The fenced mark alone on the copy (Volcano's controller ignores lahar.dev/command) ...
    assert fence_patch(RENEWED + 31, reason, VOLCANO) == {
        "metadata": {"annotations": {names.FENCED_ANNOTATION: f"{micro_time(RENEWED + 31)}: {reason}"}}
    }
    # ... and the Command `vcctl job suspend` makes, aimed at this copy (its uid) and owned by it.
    command = abort_command(job, reason)
    target = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "trainer",
        "uid": "member-trainer",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert (command["apiVersion"], command["kind"], command["action"]) == (
        "bus.volcano.sh/v1alpha1",
        "Command",
        ABORT_JOB,
    )
    assert command["target"] == target and command["metadata"]["ownerReferences"] == [target]
    assert command["metadata"]["generateName"] == "trainer-abortjob-" and command["metadata"]["namespace"] == "default"
    assert (command["reason"], command["message"]) == (names.EVENT_FENCED, reason)


# --- the fence against the hub's plan, in real time, with skewed clocks -------------------------

POLICIES = [
    "",  # the defaults: heartbeat 2 s, lease 30 s, re-dispatch after 60 s
    "heartbeatPeriod: 0.5s\nunreachableAfter: 3s\nredispatchAfter: 10s\n",  # lahar up's e2e test
    "heartbeatPeriod: 1s\nredispatchAfter: 20s\nmemberLease: 17s\n",  # the tightest margin allowed
]
SKEWS = [-3600.0, -40.0, 0.0, 40.0, 3600.0]  # the hub's clock minus the member's, in seconds
STEP = 0.05


def wall_clock_rule(lease: dict[str, Any], member_wall: float) -> bool:
    """The rule fence.py had before: the hub's renewTime + the lease against the member's wall clock."""
    spec = lease["spec"]
    return parse_micro_time(spec["renewTime"]) + spec["leaseDurationSeconds"] <= member_wall


def run_cut_off(
    policy: Policy, skew: float, fence_from: float = 0.0, rule: str = "observe"
) -> tuple[float, float, float]:
    """Real time from 0: the hub (its clock = real + skew) renews the member's lease every
    heartbeat until the member is cut off at 40 s; the member's fence (its wall clock = real, its
    monotonic clock = real + 7, started at `fence_from`) reads every FENCE_PERIOD. The real times
    when the fence stopped the copy, when the hub's plan moved the Job, and of the last renewal."""
    hub_clock = lambda real: real + skew  # noqa: E731
    cut = 40.0
    job = view(vcjob("j", cluster="m1", placement=1, dispatched=1, status=running_status(2)))
    lease: dict[str, Any] | None = None
    last_renewal = next_renewal = next_read = 0.0
    next_read = fence_from + 0.37  # the fence's reads are out of phase with the hub's renewals
    seen: LeaseView | None = None
    stopped_at = moved_at = None
    real = 0.0
    while moved_at is None:
        if real < cut and real >= next_renewal:
            lease = lease_object("m1", hub_clock(real), policy.member_lease, policy.heartbeat_period)
            last_renewal, next_renewal = real, real + policy.heartbeat_period
        if real >= next_read and stopped_at is None:
            assert lease is not None
            next_read += FENCE_PERIOD
            if rule == "observe":
                seen = observe(seen, lease, real + 7)
                if to_fence(seen, [copy_in_member("j")]):
                    stopped_at = real
            elif wall_clock_rule(lease, real):
                stopped_at = real
        members = {"m1": member("m1", last_heartbeat=hub_clock(last_renewal), reachable=real < cut), "m2": member("m2")}
        if any(isinstance(a, Dispatch) for a in plan([job], members, {"m2": []}, {}, policy, hub_clock(real))):
            moved_at = real
        real = round(real + STEP, 2)
    return (stopped_at if stopped_at is not None else float("inf")), moved_at, last_renewal


@pytest.mark.parametrize("skew", SKEWS)
@pytest.mark.parametrize("text", POLICIES)
def test_any_policy_stops_the_copy_before_the_hub_moves_it_whatever_the_clocks(text: str, skew: float) -> None:
    """The copy is stopped before the hub dispatches the Job elsewhere, with a heartbeat to spare
    (a federation that crashed before recording the last one), and not before the lease, less one
    fence period, has passed since the last renewal: neither late nor early, for any skew."""
    policy = parse_policy(text)
    stopped_at, moved_at, last_renewal = run_cut_off(policy, skew)
    assert moved_at - stopped_at >= policy.heartbeat_period
    assert stopped_at >= last_renewal + policy.member_lease - FENCE_PERIOD - STEP


@pytest.mark.parametrize("text", POLICIES)
def test_the_wall_clock_rule_this_replaced_fails_under_skew(text: str) -> None:
    """What the simulation above catches: judged by the hub's renewTime against the member's wall
    clock, a member whose clock is behind the hub's stops its copy after the hub moved the Job (two
    copies), one ahead stops it while the hub still renews the lease."""
    policy = parse_policy(text)
    stopped, moved, _ = run_cut_off(policy, 3600.0, rule="wall clock")
    assert stopped > moved
    stopped, moved, last_renewal = run_cut_off(policy, -3600.0, rule="wall clock")
    assert stopped < last_renewal


@pytest.mark.parametrize("skew", [-3600.0, 0.0, 3600.0])
@pytest.mark.parametrize("text", POLICIES)
def test_a_fence_started_after_the_hub_went_silent_stops_the_copy_in_time(text: str, skew: float) -> None:
    """A fence (re)started after the last renewal has seen none: it waits startup_grace, so a
    fence back within lease - grace of the last renewal still stops the copy before the hub moves
    it. (A fence down longer was no fence while it mattered, whatever its rule.)"""
    policy = parse_policy(text)
    grace = startup_grace(lease_object("m1", 0, policy.member_lease, policy.heartbeat_period), policy.member_lease)
    for back_after in (0.0, (policy.member_lease - grace) / 2, policy.member_lease - grace):
        stopped_at, moved_at, _ = run_cut_off(policy, skew, fence_from=40.0 + back_after)
        assert stopped_at < moved_at, back_after


@pytest.mark.parametrize("text", POLICIES)
def test_a_fence_started_while_the_hub_renews_stops_nothing(text: str) -> None:
    policy = parse_policy(text)
    seen: LeaseView | None = None
    real, renewed_at = 13.0, 0.0  # started mid-way between two renewals, or anywhere
    lease = lease_object("m1", RENEWED, policy.member_lease, policy.heartbeat_period)
    while real < 13.0 + 3 * policy.member_lease:
        if real - renewed_at >= policy.heartbeat_period:
            lease, renewed_at = lease_object("m1", RENEWED + real, policy.member_lease, policy.heartbeat_period), real
        seen = observe(seen, lease, real)
        assert not seen.expired, real
        real += FENCE_PERIOD


def test_the_copy_carries_on_member_loss_for_the_fence() -> None:
    hub = vcjob("j", annotations={names.ON_MEMBER_LOSS_ANNOTATION: names.WAIT})
    assert member_job(hub, 1)["metadata"]["annotations"][names.ON_MEMBER_LOSS_ANNOTATION] == names.WAIT
    assert names.ON_MEMBER_LOSS_ANNOTATION not in member_job(vcjob("k"), 1)["metadata"]["annotations"]


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
