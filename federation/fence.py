"""The member-side fence, as pure functions: the Lease the federation renews in each member at every
heartbeat that reaches it, how the member judges that lease on its own clock, and which of the
member's federated Jobs to stop once it ran out.

A member cut off from the hub cannot be told that its Jobs were placed elsewhere. So the member
stops them itself: `lahar federation member` (member.py) reads the Lease every FENCE_PERIOD, and
once it has seen no renewal for `leaseDurationSeconds`, aborts every unfinished copy the federation
made there (the member's controller kills the pods, as for `lahar job suspend`) and marks it
fenced. The hub places a lost member's Jobs elsewhere only `redispatchAfter` after its last
heartbeat, which the policy keeps longer than the lease plus a heartbeat and FENCE_PERIOD
(policy.py): by then the old copies have stopped, so two copies of one Job never run at once.

**No clock is compared across machines.** `renewTime` is written by the hub's clock; the member
does not compare it with its own. A renewal is any change of `renewTime`, and the member times the
lease on its own monotonic clock from `since`, a moment it knows came *before* the renewal was
written: the start of its last read that still showed the previous value. So the member's expiry
is never later than the true one (renewal + lease), whatever the skew between hub and member; it
may be early by one read period plus a read's latency. Only the clocks' rates matter (drift of a
few parts per million: milliseconds over a lease).

**A fence that starts** (a new or restarted `lahar federation member`) has seen no renewal: the
lease it reads may be fresh or long stale, and it cannot tell. It gives the hub `startup_grace`
(two of the hub's renewal periods, which the hub writes on the Lease, and two fence periods, at
most the lease) to renew it, and stops the copies if no renewal comes in that time. Safety: the
hub moves Jobs at the earliest `redispatchAfter - heartbeatPeriod` after the last renewal W (the
crashed-federation case), and redispatchAfter ≥ lease + heartbeatPeriod + FENCE_PERIOD; a fence
started at t0 stops the copies by t0 + grace + FENCE_PERIOD, so before the hub moves them whenever
t0 ≤ W + lease − grace. A fence that was down when the hub lost the member is safe if it was back
within `lease − grace` of the last renewal (24 s of the default 30 s lease); one down longer was
no fence while it mattered, under any rule. Waiting a whole lease instead (grace = lease) would be
safe only for a fence back at the very moment of the last renewal."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lahar.api.job import ABORT_JOB, COMMAND_ANNOTATION, FINISHED_PHASES, JobPhase, job_phase
from lahar.api.lease import micro_time
from lahar.federation import names
from lahar.federation.policy import FENCE_PERIOD

# Which job controller runs in the member, and so how a copy is stopped: Lahar's acts on the
# `lahar.dev/command: AbortJob` annotation; Volcano's on a bus.volcano.sh Command (abort_command).
LAHAR, VOLCANO = "lahar", "volcano"
CONTROLLERS = (LAHAR, VOLCANO)

# A copy in these phases runs nothing (or is being stopped): nothing to fence.
_STOPPED = FINISHED_PHASES | {JobPhase.ABORTING, JobPhase.ABORTED, JobPhase.TERMINATING}


def lease_object(member: str, renew_at: float, seconds: int, renew_period: float) -> dict[str, Any]:
    """The Lease the federation writes in `member`: renewed at `renew_at` (the hub's clock: for
    people; the member only sees that it changed), for `seconds`, again every `renew_period`."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": names.LEASE_NAME,
            "namespace": names.LEASE_NAMESPACE,
            "labels": {names.MANAGED_LABEL: "true"},
            "annotations": {names.RENEW_PERIOD_ANNOTATION: f"{renew_period:g}"},
        },
        "spec": {
            "holderIdentity": f"lahar-federation/{member}",
            "leaseDurationSeconds": seconds,
            "renewTime": micro_time(renew_at),
        },
    }


@dataclass(frozen=True)
class LeaseView:
    """What the member's fence knows of the hub's lease after a read, on its own monotonic clock."""

    read_at: float  # when the latest read started
    renewal: str | None  # the renewTime it showed (a renewal is any change of it); None: no lease
    seconds: float  # the lease's duration; 0 when it cannot be read (run out: the safe side)
    since: float  # the renewal shown was written after this moment

    @property
    def expires_at(self) -> float:
        return self.since + self.seconds

    @property
    def expired(self) -> bool:
        return self.renewal is not None and self.read_at >= self.expires_at


def _duration(lease: Mapping[str, Any]) -> float:
    seconds = (lease.get("spec") or {}).get("leaseDurationSeconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
        return 0.0
    return float(seconds)


def startup_grace(lease: Mapping[str, Any], seconds: float) -> float:
    """How long a fence that has seen no renewal yet waits for one: two of the hub's renewal
    periods and two fence periods, at most the lease (half of it when the hub wrote no period)."""
    written = ((lease.get("metadata") or {}).get("annotations") or {}).get(names.RENEW_PERIOD_ANNOTATION)
    try:
        period = float(written) if written is not None else None
    except ValueError:
        period = None
    if period is None or not period > 0:
        return seconds / 2
    return min(seconds, 2 * period + 2 * FENCE_PERIOD)


def observe(previous: LeaseView | None, lease: Mapping[str, Any] | None, read_at: float) -> LeaseView:
    """The fence's view after reading `lease` (None: there is none) in a read that started at
    `read_at`, given its view after the read before (None: this fence's first read)."""
    if lease is None:
        return LeaseView(read_at, None, 0.0, read_at)
    renewal = (lease.get("spec") or {}).get("renewTime")
    seconds = _duration(lease) if isinstance(renewal, str) and renewal else 0.0
    renewal = str(renewal)
    if previous is None:  # a renewal of unknown age: it has startup_grace left to be renewed
        since = read_at - seconds + startup_grace(lease, seconds)
    elif previous.renewal != renewal:  # renewed (or made) after the previous read started
        since = previous.read_at
    else:
        since = previous.since
    return LeaseView(read_at, renewal, seconds, since)


def to_fence(view: LeaseView | None, jobs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The member's Jobs to stop now: with the lease run out, every copy the federation made (it
    carries its hub Job's uid) that still runs, is not being deleted, was not fenced already, and
    whose hub Job does not say `on-member-loss: Wait` (the hub never moves those: they may go on)."""
    if view is None or not view.expired:
        return []
    chosen = []
    for job in jobs:
        metadata = job.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        if not (metadata.get("labels") or {}).get(names.HUB_UID_LABEL) or metadata.get("deletionTimestamp"):
            continue
        if names.FENCED_ANNOTATION in annotations or annotations.get(names.ON_MEMBER_LOSS_ANNOTATION) == names.WAIT:
            continue
        if job_phase(job) in _STOPPED:
            continue
        chosen.append(job)
    return chosen


def fence_reason(view: LeaseView) -> str:
    """Why the copies were stopped, in the member's own terms (no hub time in it)."""
    if view.seconds == 0:
        return "the hub's lease here cannot be read"
    return f"no renewal of the hub's {view.seconds:g} s lease seen for {view.read_at - view.since:.1f} s"


def fence_patch(wall_now: float, reason: str, controller: str = LAHAR) -> dict[str, Any]:
    """What the fence writes on a copy: when (the member's clock) and why, for the hub (which then
    places the Job again) and for whoever looks; with Lahar's controller, the abort command too
    (one patch: the copy is never marked without being stopped). With Volcano's, the Command
    (abort_command) is made first and this written after it, for the same reason."""
    annotations = {names.FENCED_ANNOTATION: f"{micro_time(wall_now)}: {reason}"}
    if controller == LAHAR:
        annotations[COMMAND_ANNOTATION] = ABORT_JOB
    return {"metadata": {"annotations": annotations}}


def abort_command(job: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """The `bus.volcano.sh/v1alpha1` Command that makes Volcano's job controller abort `job`, as
    `vcctl job suspend` makes it: in the Job's namespace, owned by the Job (deleted with it), its
    `target` the Job (Volcano's controller takes only Commands whose target is a batch.volcano.sh
    Job, executes each once and deletes it; the Job goes Aborting, its pods are killed, then
    Aborted, as with Lahar's AbortJob)."""
    metadata = job["metadata"]
    owner = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {
            "generateName": f"{metadata['name']}-{ABORT_JOB.lower()}-",
            "namespace": metadata.get("namespace") or "default",
            "ownerReferences": [owner],
            "labels": {names.MANAGED_LABEL: "true"},
        },
        "target": owner,
        "action": ABORT_JOB,
        "reason": names.EVENT_FENCED,
        "message": reason,
    }
