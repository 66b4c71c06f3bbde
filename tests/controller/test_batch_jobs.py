"""batch/v1 Job (controller/workloads/job.py and lahar/api/batch.py): admission's defaults and
refusals, and the controller's decisions: completions within parallelism, work queues,
backoffLimit with Never and OnFailure pods, activeDeadlineSeconds, suspend, and finished Jobs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from lahar.api import admission, kinds, printing
from lahar.api.errors import ValidationError
from lahar.controller.workloads import cronjob, job

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def make_job(restart: str = "Never", **spec: Any) -> dict[str, Any]:
    obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi", "namespace": "lab", "uid": "j-uid"},
        "spec": {
            "template": {"spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "perl"}]}},
            **spec,
        },
    }
    return admission.apply_defaults(kinds.BATCH_JOB, obj)


def pod(name: str, phase: str = "Running", restarts: int = 0, owner: str = "j-uid") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"{name}-uid", "ownerReferences": [{"uid": owner, "controller": True}]},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, "containerStatuses": [{"name": "c", "restartCount": restarts}]},
    }


# -- admission ---------------------------------------------------------------------------------------


def test_defaults_follow_kubernetes() -> None:
    spec = make_job()["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["completionMode"] == "NonIndexed" and spec["suspend"] is False
    queue = make_job(parallelism=3)["spec"]
    assert "completions" not in queue and queue["parallelism"] == 3, "parallelism alone makes a work queue"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"restart": "Always"}, "spec.template.spec.restartPolicy"),
        ({"completions": -1}, "spec.completions"),
        ({"backoffLimit": "six"}, "spec.backoffLimit"),
        ({"activeDeadlineSeconds": 0}, "spec.activeDeadlineSeconds"),
    ],
)
def test_bad_jobs_are_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    obj = make_job(**change)
    with pytest.raises(ValidationError) as caught:
        admission.validate(kinds.BATCH_JOB, obj)
    assert field in str(caught.value)


def test_the_template_may_not_change_but_parallelism_may() -> None:
    old = make_job(completions=4, parallelism=2)
    scaled = make_job(completions=4, parallelism=3)
    admission.validate(kinds.BATCH_JOB, scaled, old)
    changed = make_job(completions=4, parallelism=2)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "perl:2"
    with pytest.raises(ValidationError, match=r"spec\.template"):
        admission.validate(kinds.BATCH_JOB, changed, old)


# -- the controller's decisions ------------------------------------------------------------------------


def test_pods_are_made_up_to_parallelism_and_the_completions_left() -> None:
    first = job.plan(make_job(completions=5, parallelism=2), [], NOW)
    assert first.create == 2 and first.status["startTime"] == "2026-01-01T12:00:00Z"
    # Four succeeded: only one more is wanted although two may run.
    pods = [pod(f"p{i}", "Succeeded") for i in range(4)]
    later = job.plan(make_job(completions=5, parallelism=2), pods, NOW)
    assert later.create == 1 and later.status["succeeded"] == 4


def test_the_job_completes_when_completions_succeeded() -> None:
    decided = job.plan(make_job(completions=2), [pod("a", "Succeeded"), pod("b", "Succeeded")], NOW)
    assert decided.create == 0
    (condition,) = decided.status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Complete", "True", "CompletionsReached")
    assert decided.status["completionTime"] == "2026-01-01T12:00:00Z" and decided.status["succeeded"] == 2
    assert ("Normal", "Completed", "Job completed") in decided.events
    # Once finished it stays finished: no new pods, no second event.
    finished = {**make_job(completions=2), "status": decided.status}
    again = job.plan(finished, [pod("a", "Succeeded")], NOW)
    assert again.create == 0 and not again.events and again.status["conditions"] == decided.status["conditions"]


def test_a_work_queue_completes_when_one_succeeded_and_none_runs() -> None:
    queue = make_job(parallelism=3)
    assert job.plan(queue, [], NOW).create == 3
    running = job.plan(queue, [pod("a", "Succeeded"), pod("b")], NOW)
    assert running.create == 0 and "conditions" not in running.status
    done = job.plan(queue, [pod("a", "Succeeded"), pod("b", "Succeeded")], NOW)
    assert done.status["conditions"][0]["type"] == "Complete"


def test_failed_pods_past_the_backoff_limit_fail_the_job_and_stop_its_pods() -> None:
    obj = make_job(completions=3, parallelism=2, backoffLimit=1)
    retry = job.plan(obj, [pod("a", "Failed"), pod("b")], NOW)
    assert retry.create == 1, "one failure within the limit: a replacement pod"
    failed = job.plan(obj, [pod("a", "Failed"), pod("c", "Failed"), pod("b")], NOW)
    (condition,) = failed.status["conditions"]
    assert (condition["type"], condition["reason"]) == ("Failed", "BackoffLimitExceeded")
    assert [p["metadata"]["name"] for p in failed.delete] == ["b"] and failed.create == 0
    assert failed.status["failed"] == 2 and "active" not in failed.status


def test_on_failure_counts_container_restarts_against_the_limit() -> None:
    obj = make_job(restart="OnFailure", backoffLimit=2)
    assert "conditions" not in job.plan(obj, [pod("a", restarts=2)], NOW).status
    assert job.plan(obj, [pod("a", restarts=3)], NOW).status["conditions"][0]["reason"] == "BackoffLimitExceeded"
    # With Never the restarts of a pod are not the Job's retries.
    assert "conditions" not in job.plan(make_job(backoffLimit=2), [pod("a", restarts=3)], NOW).status


def test_the_active_deadline_fails_a_job_that_runs_too_long() -> None:
    obj = make_job(activeDeadlineSeconds=60)
    obj["status"] = {"startTime": "2026-01-01T11:59:30Z"}
    waiting = job.plan(obj, [pod("a")], NOW)
    assert waiting.requeue_after == 30 and "conditions" not in waiting.status
    obj["status"] = {"startTime": "2026-01-01T11:58:00Z"}
    late = job.plan(obj, [pod("a")], NOW)
    assert late.status["conditions"][0]["reason"] == "DeadlineExceeded" and len(late.delete) == 1


def test_suspend_removes_the_running_pods_and_lowering_parallelism_trims_them() -> None:
    suspended = job.plan(make_job(completions=4, parallelism=2, suspend=True), [pod("a"), pod("b")], NOW)
    assert len(suspended.delete) == 2 and suspended.create == 0
    trimmed = job.plan(make_job(completions=4, parallelism=1), [pod("a"), pod("b")], NOW)
    assert len(trimmed.delete) == 1 and trimmed.status["active"] == 1


def test_pods_of_other_owners_are_not_counted() -> None:
    decided = job.plan(make_job(completions=1), [pod("x", "Succeeded", owner="other")], NOW)
    assert decided.create == 1 and "conditions" not in decided.status


def test_job_pods_carry_the_job_labels_and_owner() -> None:
    made = job.job_pod(make_job())
    labels = made["metadata"]["labels"]
    assert labels[job.JOB_NAME_LABEL] == labels["job-name"] == "pi"
    assert labels[job.CONTROLLER_UID_LABEL] == "j-uid" and made["metadata"]["generateName"] == "pi-"
    assert made["metadata"]["ownerReferences"][0]["kind"] == "Job" and made["spec"]["restartPolicy"] == "Never"


# -- CronJob ----------------------------------------------------------------------------------------------


def make_cronjob(**spec: Any) -> dict[str, Any]:
    obj = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": "nightly",
            "namespace": "lab",
            "uid": "cj-uid",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "schedule": "*/5 * * * *",
            "jobTemplate": {
                "spec": {
                    "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "perl"}]}}
                }
            },
            **spec,
        },
    }
    return admission.apply_defaults(kinds.BATCH_CRONJOB, obj)


def finished_job(name: str, condition: str, at: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"{name}-uid", "creationTimestamp": at},
        "status": {"completionTime": at, "conditions": [{"type": condition, "status": "True"}]},
    }


def test_cronjob_defaults_and_refusals_reuse_the_cron_rules_with_a_batch_job_template() -> None:
    obj = make_cronjob()
    assert obj["spec"]["concurrencyPolicy"] == "Allow" and obj["spec"]["successfulJobsHistoryLimit"] == 3
    assert obj["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 6, "the template defaulted as a batch/v1 Job"
    admission.validate(kinds.BATCH_CRONJOB, obj)
    with pytest.raises(ValidationError, match="schedule"):
        admission.validate(kinds.BATCH_CRONJOB, make_cronjob(schedule="61 * * * *"))
    always = make_cronjob()
    always["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(ValidationError, match=r"spec\.jobTemplate\.spec\.template\.spec\.restartPolicy"):
        admission.validate(kinds.BATCH_CRONJOB, always)


def test_a_due_cronjob_makes_a_batch_job_owned_by_it() -> None:
    decided = cronjob.plan(make_cronjob(), [], datetime(2026, 1, 1, 0, 7, tzinfo=UTC))
    assert decided.create is not None
    made = decided.create
    assert (made["apiVersion"], made["kind"]) == ("batch/v1", "Job")
    assert made["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert made["metadata"]["ownerReferences"][0]["apiVersion"] == "batch/v1"
    assert made["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert decided.status["lastScheduleTime"] == "2026-01-01T00:05:00Z"
    admission.validate(kinds.BATCH_JOB, admission.apply_defaults(kinds.BATCH_JOB, made))


def test_finished_batch_jobs_are_read_by_their_conditions() -> None:
    jobs = [
        finished_job("nightly-1", "Complete", "2026-01-01T00:01:00Z"),
        finished_job("nightly-2", "Failed", "2026-01-01T00:02:00Z"),
        finished_job("nightly-3", "Failed", "2026-01-01T00:03:00Z"),
        {"metadata": {"name": "nightly-4", "uid": "4", "creationTimestamp": "2026-01-01T00:04:00Z"}, "status": {}},
    ]
    decided = cronjob.plan(make_cronjob(suspend=True), jobs, datetime(2026, 1, 1, 0, 7, tzinfo=UTC))
    assert decided.delete == ["nightly-2"], "failedJobsHistoryLimit 1: the older failed Job goes"
    assert [ref["name"] for ref in decided.status["active"]] == ["nightly-4"]
    assert decided.status["active"][0]["apiVersion"] == "batch/v1"
    assert decided.status["lastSuccessfulTime"] == "2026-01-01T00:01:00Z"
    forbid = cronjob.plan(make_cronjob(concurrencyPolicy="Forbid"), jobs, datetime(2026, 1, 1, 0, 7, tzinfo=UTC))
    assert forbid.create is None, "Forbid: the unfinished Job keeps the next one from starting"


def test_jobs_and_cronjobs_print_kubectls_columns() -> None:
    finished = {
        **make_job(completions=2),
        "status": {
            "succeeded": 2,
            "startTime": "2026-01-01T12:00:00Z",
            "completionTime": "2026-01-01T12:01:30Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    }
    lines = printing.text_table(kinds.BATCH_JOB, [finished]).splitlines()
    assert lines[0].split()[:4] == ["NAME", "STATUS", "COMPLETIONS", "DURATION"]
    assert lines[1].split()[:4] == ["pi", "Complete", "2/2", "90s"]
    header = printing.text_table(kinds.BATCH_CRONJOB, [make_cronjob()]).splitlines()
    assert header[1].split()[:3] == ["nightly", "*/5", "*"]
