"""Volcano's CronJob: the cron parser, the pure decision (controller/cronjobs.py: cron_step) and
the controller making Jobs through the embedded API server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lahar.api import admission, kinds
from lahar.api.cron import CronError, parse_schedule
from lahar.api.errors import ValidationError
from lahar.client.api import KubeApi
from lahar.controller.controller import JobController
from lahar.controller.cronjobs import cron_step, job_name
from lahar.controller.lifecycle import format_time
from tests.controller.fake_kubelet import NAMESPACE, task
from tests.support import wait_for

NOW = datetime(2026, 3, 10, 12, 7, 30, tzinfo=UTC)


def cronjob(schedule: str = "*/5 * * * *", created: datetime = NOW - timedelta(hours=1), **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "CronJob",
        "metadata": {
            "name": "nightly",
            "namespace": NAMESPACE,
            "uid": "cj-uid",
            "creationTimestamp": format_time(created),
        },
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Allow",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": {"spec": {"minAvailable": 1, "tasks": [task("t", 1)]}},
            **spec,
        },
    }


def owned_job(name: str, phase: str, minutes_ago: int) -> dict[str, Any]:
    at = format_time(NOW - timedelta(minutes=minutes_ago))
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": name, "creationTimestamp": at},
        "status": {"state": {"phase": phase, "lastTransitionTime": at}},
    }


@pytest.mark.parametrize(
    ("schedule", "after", "expected"),
    [
        ("*/5 * * * *", datetime(2026, 1, 1, 10, 3, tzinfo=UTC), datetime(2026, 1, 1, 10, 5, tzinfo=UTC)),
        ("@monthly", datetime(2026, 1, 31, 10, 3, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)),
        ("0 9 * * mon-fri", datetime(2026, 11, 27, 10, tzinfo=UTC), datetime(2026, 11, 30, 9, tzinfo=UTC)),
        ("0 0 1,15 * 3", datetime(2026, 4, 2, tzinfo=UTC), datetime(2026, 4, 8, tzinfo=UTC)),  # 1st, 15th or Wed
        ("30 2 * * 7", datetime(2026, 3, 1, 3, tzinfo=UTC), datetime(2026, 3, 8, 2, 30, tzinfo=UTC)),  # 7 = Sunday
        # @every: the moment (less its fraction of a second) plus the delay, as robfig/cron.
        ("@every 1h30m", datetime(2026, 1, 1, 10, 3, 7, 500, tzinfo=UTC), datetime(2026, 1, 1, 11, 33, 7, tzinfo=UTC)),
        ("@every 90s", datetime(2026, 1, 1, 10, 3, tzinfo=UTC), datetime(2026, 1, 1, 10, 4, 30, tzinfo=UTC)),
        ("@every 2.5s", datetime(2026, 1, 1, 10, 3, tzinfo=UTC), datetime(2026, 1, 1, 10, 3, 2, tzinfo=UTC)),
        ("@every 300ms", datetime(2026, 1, 1, 10, 3, tzinfo=UTC), datetime(2026, 1, 1, 10, 3, 1, tzinfo=UTC)),
    ],
)
def test_next_scheduled_time(schedule: str, after: datetime, expected: datetime) -> None:
    assert parse_schedule(schedule).next_after(after) == expected


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("* * *", "expected 5 fields"),
        ("61 * * * *", "minute: 61 is out of range 0-59"),
        ("*/0 * * * *", 'step "0" must be a positive number'),
        ("5-1 * * * *", 'range "5-1" runs backwards'),
        ("TZ=UTC 0 * * * *", "set spec.timeZone"),
        ("0 0 * foo *", 'month: "foo" is not a number or a name'),
        ("@every", 'unknown descriptor "@every"'),
        ("@every 10 minutes", '@every: "10 minutes" is not a duration'),
        ("@every 5d", '@every: "5d" is not a duration'),
        ("@every -5m", "@every: the interval must be positive"),
        ("@every 0s", "@every: the interval must be positive"),
        ("@every 3000000h", "longer than a Go duration holds"),
    ],
)
def test_bad_schedules_say_what_is_wrong(schedule: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse_schedule(schedule)


def test_admission_refuses_a_bad_cronjob_naming_every_field() -> None:
    bad = cronjob("*/5 * *", timeZone="Mars/Olympus", concurrencyPolicy="Sometimes")
    bad["spec"]["jobTemplate"]["spec"]["tasks"][0]["replicas"] = -1
    with pytest.raises(ValidationError) as refused:
        admission.validate(kinds.CRONJOB, admission.apply_defaults(kinds.CRONJOB, bad))
    fields = {error.field for error in refused.value.errors}
    assert {
        "spec.schedule",
        "spec.timeZone",
        "spec.concurrencyPolicy",
        "spec.jobTemplate.spec.tasks[0].replicas",
    } <= fields


def test_only_the_latest_missed_time_runs_and_names_the_job() -> None:
    decision = cron_step(cronjob(), [], NOW)
    scheduled = datetime(2026, 3, 10, 12, 5, tzinfo=UTC)
    assert decision.create is not None and decision.create["metadata"]["name"] == job_name("nightly", scheduled)
    assert decision.create["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert decision.status["lastScheduleTime"] == format_time(scheduled)
    assert decision.requeue_after == pytest.approx(150.5)  # 12:10:00 is next


def test_every_runs_the_latest_time_of_its_chain_from_the_last_run() -> None:
    # Created 12:00:10; every 2m: 12:02:10, 12:04:10, 12:06:10 are due by 12:07:30, the latest runs.
    decision = cron_step(cronjob("@every 2m", created=datetime(2026, 3, 10, 12, 0, 10, 250, tzinfo=UTC)), [], NOW)
    scheduled = datetime(2026, 3, 10, 12, 6, 10, tzinfo=UTC)
    assert decision.create is not None and decision.create["metadata"]["name"] == job_name("nightly", scheduled)
    assert decision.status["lastScheduleTime"] == format_time(scheduled)
    assert decision.requeue_after == pytest.approx(40.5)  # 12:08:10 is next
    # Run at 12:06:10: the chain goes on from there, and nothing is due before 12:08:10.
    ran = cronjob("@every 2m", created=datetime(2026, 3, 10, 12, 0, 10, tzinfo=UTC))
    ran["status"] = {"lastScheduleTime": format_time(scheduled)}
    again = cron_step(ran, [], NOW)
    assert again.create is None and again.requeue_after == pytest.approx(40.5)


def test_every_left_alone_for_years_is_one_step_not_a_walk() -> None:
    old = cronjob("@every 1s", created=NOW - timedelta(days=3 * 365))
    decision = cron_step(old, [], NOW)
    assert decision.status["lastScheduleTime"] == format_time(NOW.replace(microsecond=0))
    assert any(reason == "TooManyMissedTimes" for _, reason, _ in decision.events)


def test_the_starting_deadline_skips_a_time_too_old() -> None:
    stale = cronjob(created=NOW - timedelta(hours=1), startingDeadlineSeconds=60)  # 12:05 is 150 s ago
    assert cron_step(stale, [], NOW).create is None


def test_concurrency_policies() -> None:
    running = owned_job("nightly-old", "Running", 30)
    assert cron_step(cronjob(concurrencyPolicy="Forbid"), [running], NOW).create is None
    replace = cron_step(cronjob(concurrencyPolicy="Replace"), [running], NOW)
    assert replace.create is not None and replace.delete == ["nightly-old"]
    allow = cron_step(cronjob(), [running], NOW)
    assert allow.create is not None and allow.delete == []
    assert [ref["name"] for ref in allow.status["active"]] == ["nightly-old", allow.create["metadata"]["name"]]


def test_history_limits_delete_the_oldest_finished_jobs_and_suspend_makes_none() -> None:
    jobs = [owned_job(f"ok-{i}", "Completed", 50 - i) for i in range(5)] + [
        owned_job(f"bad-{i}", "Failed", 40 - i) for i in range(3)
    ]
    decision = cron_step(cronjob(suspend=True), jobs, NOW)
    assert decision.delete == ["ok-0", "ok-1", "bad-0", "bad-1"]
    assert decision.create is None
    assert decision.status["lastSuccessfulTime"] == format_time(NOW - timedelta(minutes=46))


def test_the_controller_makes_the_job_of_a_due_time(api: KubeApi) -> None:
    # The controller's clock runs a minute ahead, so the next minute's run is due at once.
    ahead = JobController(api, admission_required=False, clock=lambda: datetime.now(UTC) + timedelta(seconds=61))
    ahead.start()
    try:
        api.create(kinds.CRONJOB, cronjob("* * * * *"), NAMESPACE)
        made = wait_for(lambda: api.list(kinds.JOB, NAMESPACE)["items"], 15, "the first scheduled Job")
        status = wait_for(lambda: api.get(kinds.CRONJOB, "nightly", NAMESPACE).get("status"), 10, "the status")
    finally:
        ahead.stop()
    assert made[0]["metadata"]["name"].startswith("nightly-")
    assert made[0]["metadata"]["ownerReferences"][0]["name"] == "nightly"
    assert status["active"][0]["name"] == made[0]["metadata"]["name"] and status["lastScheduleTime"]
