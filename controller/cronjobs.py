"""Volcano's CronJob controller (batch.volcano.sh CronJob → Volcano Jobs), as Kubernetes'
CronJob controller behaves:

- the schedule is read in `spec.timeZone` (UTC when unset); the most recent scheduled time not
  yet run, after `status.lastScheduleTime` (or the CronJob's creation), is due. Missed times
  are not made up: only the latest runs (Kubernetes' rule). With `startingDeadlineSeconds`, a
  time older than that is skipped, and more than 100 missed times earn a TooManyMissedTimes
  Warning;
- the Job is `<cronjob>-<scheduled minutes since the epoch>`, from `spec.jobTemplate`, owned by
  the CronJob (deleting the CronJob deletes its Jobs), so one scheduled time makes one Job even
  across restarts;
- concurrencyPolicy: Allow runs it beside active Jobs, Forbid skips the time while one is
  active, Replace deletes the active ones first;
- `suspend: true` makes no new Jobs; finished Jobs past successfulJobsHistoryLimit (Completed)
  or failedJobsHistoryLimit (Failed, Terminated, Aborted) are deleted, oldest first;
- status: `active` (references to unfinished Jobs), `lastScheduleTime`, `lastSuccessfulTime`.

`cron_step` is the pure decision; `CronJobController` watches CronJobs and Jobs and performs it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from lahar.api import kinds
from lahar.api.cron import CronError, EverySchedule, parse_schedule
from lahar.api.job import JobPhase, job_phase
from lahar.client.api import KubeApi
from lahar.client.errors import AlreadyExists, NotFound
from lahar.client.events import EventRecorder, ObjectRef
from lahar.client.informer import Informer, by_owner
from lahar.controller.lifecycle import format_time, parse_time
from lahar.controller.workqueue import Key, ReconcileLoop, object_key

OWNER_INDEX = "owner"
SUCCEEDED = frozenset({JobPhase.COMPLETED})
FAILED = frozenset({JobPhase.FAILED, JobPhase.TERMINATED, JobPhase.ABORTED})
TOO_MANY_MISSED = 100
SCAN_LIMIT = 10_000  # scheduled times walked through before starting from a day ago


@dataclass(frozen=True)
class CronFlavour:
    """The kind of CronJob and of the Jobs it makes, and how such a Job is read: Volcano's here,
    batch/v1's in controller/workloads/cronjob.py."""

    cronjob_kind: kinds.Kind
    job_kind: kinds.Kind
    outcome: Callable[[Mapping[str, Any]], str | None]  # "succeeded", "failed", or None while active
    finished_at: Callable[[Mapping[str, Any]], datetime | None]


def _volcano_outcome(job: Mapping[str, Any]) -> str | None:
    phase = job_phase(job)
    return "succeeded" if phase in SUCCEEDED else "failed" if phase in FAILED else None


@dataclass
class CronDecision:
    create: dict[str, Any] | None = None
    delete: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    requeue_after: float | None = None


def job_name(cronjob: str, scheduled: datetime) -> str:
    return f"{cronjob}-{int(scheduled.timestamp() // 60)}"


def _created(job: Mapping[str, Any]) -> str:
    return str((job.get("metadata") or {}).get("creationTimestamp") or "")


def _finished_at(job: Mapping[str, Any]) -> datetime | None:
    return parse_time(((job.get("status") or {}).get("state") or {}).get("lastTransitionTime"))


def due_time(
    schedule_text: str, zone: str | None, since: datetime, now: datetime, deadline: int | None
) -> tuple[datetime | None, int, datetime | None]:
    """(the latest scheduled time in (since, now] not past the deadline, how many were missed,
    the next scheduled time after now)."""
    schedule = parse_schedule(schedule_text)
    start = since if deadline is None else max(since, now - timedelta(seconds=deadline))
    if isinstance(schedule, EverySchedule):
        # A chain from the start, one delay apart (robfig's Next applied again and again): no
        # walk needed, and no time zone (the delay is absolute).
        base = start.replace(microsecond=0)
        count = max((now - base) // schedule.delay, 0)
        latest = base + count * schedule.delay if count else None
        return latest, count, base + (count + 1) * schedule.delay
    tz = ZoneInfo(zone) if zone else UTC
    current = start.astimezone(tz)
    latest, missed = None, 0
    while True:
        following = schedule.next_after(current)
        if following is None or following > now:
            break
        latest, missed, current = following, missed + 1, following
        if missed > SCAN_LIMIT:  # a minute schedule left alone for weeks: start from a day ago
            current = max(current, (now - timedelta(days=1)).astimezone(tz))
    upcoming = schedule.next_after(now.astimezone(tz))
    return latest, missed, upcoming


def cron_step(
    cronjob: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]], now: datetime, flavour: CronFlavour | None = None
) -> CronDecision:
    flavour = flavour or VOLCANO
    meta, spec = cronjob.get("metadata") or {}, cronjob.get("spec") or {}
    status = cronjob.get("status") or {}
    name = str(meta.get("name", ""))
    decision = CronDecision()
    jobs = sorted(jobs, key=_created)
    outcomes = [(j, flavour.outcome(j)) for j in jobs]
    active = [j for j, outcome in outcomes if outcome is None]
    succeeded = [j for j, outcome in outcomes if outcome == "succeeded"]
    failed = [j for j, outcome in outcomes if outcome == "failed"]
    # History: the oldest finished Jobs past each limit go.
    for finished, limit in (
        (succeeded, spec.get("successfulJobsHistoryLimit", 3)),
        (failed, spec.get("failedJobsHistoryLimit", 1)),
    ):
        extra = len(finished) - int(limit if limit is not None else len(finished))
        decision.delete += [j["metadata"]["name"] for j in finished[: max(extra, 0)]]
    new_status: dict[str, Any] = {
        "active": [_reference(j, flavour) for j in active],
        "lastScheduleTime": status.get("lastScheduleTime"),
        "lastSuccessfulTime": status.get("lastSuccessfulTime"),
    }
    finish_times = [t for t in map(flavour.finished_at, succeeded) if t is not None]
    if finish_times:
        new_status["lastSuccessfulTime"] = format_time(max(finish_times))
    decision.status = {k: v for k, v in new_status.items() if v is not None}
    if spec.get("suspend"):
        return decision
    since = parse_time(status.get("lastScheduleTime")) or parse_time(meta.get("creationTimestamp")) or now
    try:
        scheduled, missed, upcoming = due_time(
            str(spec.get("schedule", "")), spec.get("timeZone"), since, now, spec.get("startingDeadlineSeconds")
        )
    except (CronError, KeyError, ValueError) as error:  # admission refuses these; an old object may hold one
        decision.events.append(("Warning", "InvalidSchedule", f"unparseable schedule: {error}"))
        return decision
    if upcoming is not None:
        decision.requeue_after = max((upcoming - now).total_seconds(), 0.0) + 0.5
    if missed > TOO_MANY_MISSED:
        decision.events.append(("Warning", "TooManyMissedTimes", f"{missed} start times missed; only the latest runs"))
    if scheduled is None:
        return decision
    wanted = job_name(name, scheduled)
    if any(j["metadata"]["name"] == wanted for j in jobs):
        decision.status["lastScheduleTime"] = format_time(scheduled)
        return decision
    policy = spec.get("concurrencyPolicy", "Allow")
    if active and policy == "Forbid":
        decision.events.append(("Normal", "JobAlreadyActive", f"not starting {wanted}: a job is still active"))
        return decision
    if active and policy == "Replace":
        decision.delete += [j["metadata"]["name"] for j in active]
        decision.status["active"] = []
    decision.create = _job_from_template(cronjob, wanted, flavour)
    decision.status["lastScheduleTime"] = format_time(scheduled)
    decision.status["active"] = [
        *decision.status["active"],
        {"kind": "Job", "name": wanted, "namespace": meta.get("namespace")},
    ]
    decision.events.append(("Normal", "SuccessfulCreate", f"created job {wanted}"))
    return decision


def _reference(job: Mapping[str, Any], flavour: CronFlavour) -> dict[str, Any]:
    meta = job.get("metadata") or {}
    return {
        "apiVersion": flavour.job_kind.api_version,
        "kind": "Job",
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
    }


def _job_from_template(cronjob: Mapping[str, Any], name: str, flavour: CronFlavour) -> dict[str, Any]:
    meta, template = cronjob.get("metadata") or {}, (cronjob.get("spec") or {}).get("jobTemplate") or {}
    template_meta = template.get("metadata") or {}
    return {
        "apiVersion": flavour.job_kind.api_version,
        "kind": flavour.job_kind.kind,
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace"),
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": dict(template_meta.get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": flavour.cronjob_kind.api_version,
                    "kind": flavour.cronjob_kind.kind,
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": dict(template.get("spec") or {}),
    }


VOLCANO = CronFlavour(kinds.CRONJOB, kinds.JOB, _volcano_outcome, _finished_at)


class CronJobController(ReconcileLoop):
    """Watches CronJobs and Jobs; each change or due time reconciles the CronJob."""

    name = "cronjob-controller"

    def __init__(self, api: KubeApi, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        super().__init__()
        self.api = api
        self.clock = clock
        self.events = EventRecorder(api, "lahar-controller", clock=clock)
        enqueue = lambda obj, *_: self.queue.add(object_key(obj))  # noqa: E731
        self.cronjobs = Informer(kinds.CRONJOB, api, on_change=enqueue)
        self.jobs = Informer(kinds.JOB, api, on_change=self._job_changed)
        self.jobs.add_index(OWNER_INDEX, by_owner)
        self.informers = [self.cronjobs, self.jobs]

    def _job_changed(self, job: dict[str, Any], *_: Any) -> None:
        meta = job.get("metadata") or {}
        owner = next((r for r in meta.get("ownerReferences") or () if r.get("kind") == kinds.CRONJOB.kind), None)
        if owner is not None:
            self.queue.add((meta.get("namespace", ""), owner.get("name", "")))

    def reconcile(self, key: Key) -> CronDecision | None:
        namespace, name = key
        cronjob = self.cronjobs.get(name, namespace)
        if cronjob is None:
            return None
        owned = self.jobs.by_index(OWNER_INDEX, cronjob["metadata"].get("uid", ""))
        decision = cron_step(cronjob, owned, self.clock())
        for victim in decision.delete:
            with contextlib.suppress(NotFound):
                self.api.delete(kinds.JOB, victim, namespace)
        if decision.create is not None:
            with contextlib.suppress(AlreadyExists):
                self.api.create(kinds.JOB, decision.create, namespace)
        if decision.status != {k: v for k, v in (cronjob.get("status") or {}).items() if k in decision.status}:
            with contextlib.suppress(NotFound):
                self.api.patch(kinds.CRONJOB, name, {"status": decision.status}, namespace, subresource="status")
        about = ObjectRef(kinds.CRONJOB, namespace, name, cronjob["metadata"].get("uid", ""))
        for event_type, reason, message in decision.events:
            self.events.record(about, event_type, reason, message)
        if decision.requeue_after is not None:
            self.queue.add(key, after=decision.requeue_after)
        return decision
