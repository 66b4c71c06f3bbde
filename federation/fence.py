"""The member-side fence, as pure functions: the Lease the federation renews in each member at every
heartbeat that reaches it, and which of the member's federated Jobs to stop once that lease ran out.

A member cut off from the hub cannot be told that its Jobs were placed elsewhere. So the member
stops them itself: `lahar federation member` (member.py) reads the Lease, and once `renewTime +
leaseDurationSeconds` is past, aborts every unfinished copy the federation made there (the member's
controller kills the pods, as for `lahar job suspend`) and marks it fenced. The hub places a lost
member's Jobs elsewhere only `redispatchAfter` after the last heartbeat, which the policy keeps
longer than the lease plus a margin (policy.py): by then the old copies have stopped, so two copies
of one Job never run at once. A copy the hub finds fenced later is placed again (planner.py).

The lease's times are the hub's clock, compared with the member's: clock skew between them must
fit in the margin (on one machine there is none)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lahar.api.job import ABORT_JOB, COMMAND_ANNOTATION, FINISHED_PHASES, JobPhase, job_phase
from lahar.api.lease import micro_time, parse_micro_time
from lahar.federation import names

# A copy in these phases runs nothing (or is being stopped): nothing to fence.
_STOPPED = FINISHED_PHASES | {JobPhase.ABORTING, JobPhase.ABORTED, JobPhase.TERMINATING}


def lease_object(member: str, renew_at: float, seconds: int) -> dict[str, Any]:
    """The Lease the federation writes in `member`: renewed at `renew_at` (the hub's clock), for
    `seconds`."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": names.LEASE_NAME,
            "namespace": names.LEASE_NAMESPACE,
            "labels": {names.MANAGED_LABEL: "true"},
        },
        "spec": {
            "holderIdentity": f"lahar-federation/{member}",
            "leaseDurationSeconds": seconds,
            "renewTime": micro_time(renew_at),
        },
    }


def lease_expiry(lease: Mapping[str, Any] | None) -> float | None:
    """When the lease runs out (seconds since the epoch); None without a lease (the member is
    under no hub: nothing to fence). A lease whose time or duration cannot be read has run out:
    the safe side is to stop."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    try:
        renewed = parse_micro_time(str(spec.get("renewTime")))
        seconds = spec.get("leaseDurationSeconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
            raise ValueError(seconds)
    except ValueError:
        return float("-inf")
    return renewed + seconds


def to_fence(lease: Mapping[str, Any] | None, jobs: Iterable[Mapping[str, Any]], now: float) -> list[Mapping[str, Any]]:
    """The member's Jobs to stop now: with the lease run out, every copy the federation made (it
    carries its hub Job's uid) that still runs, is not being deleted, was not fenced already, and
    whose hub Job does not say `on-member-loss: Wait` (the hub never moves those: they may go on)."""
    expiry = lease_expiry(lease)
    if expiry is None or now < expiry:
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


def fence_patch(now: float, expiry: float) -> dict[str, Any]:
    """What the fence writes on a copy: the abort command for the member's controller, and when
    and why, for the hub (which then places the Job again) and for whoever looks."""
    why = f"{micro_time(now)}: the hub's lease ran out at {micro_time(expiry)}"
    return {"metadata": {"annotations": {COMMAND_ANNOTATION: ABORT_JOB, names.FENCED_ANNOTATION: why}}}
