"""The Job controller (`batch/v1`): run pods from the template until `completions` of them have
succeeded, at most `parallelism` at once; a Job with completions unset is a work queue, done when
one pod has succeeded and none is left running. Failures (failed pods, and container restarts when
the pods restart OnFailure) past `backoffLimit`, or a run longer than `activeDeadlineSeconds`,
fail the Job and remove its running pods. `suspend: true` keeps no pods. Status as Kubernetes
writes it: active, ready, succeeded, failed, startTime, completionTime and a Complete or Failed
condition. `plan` decides from the Job, its pods and the time; the runner performs it."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lahar.controller.lifecycle import format_time, parse_time
from lahar.controller.workloads.replicaset import controlled_by, is_active, is_ready, pod_from_template

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
# The older spellings kubectl and scripts still select on; Kubernetes sets both.
LEGACY_LABELS = ("job-name", "controller-uid")
COMPLETE, FAILED = "Complete", "Failed"


@dataclass
class JobPlan:
    create: int = 0
    delete: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    requeue_after: float | None = None  # when the active deadline falls


def job_pod(job: dict[str, Any]) -> dict[str, Any]:
    """A pod from the Job's template, owned by it and labelled with its name and uid."""
    pod = pod_from_template(job)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    labels = pod["metadata"]["labels"]
    for key, value in ((JOB_NAME_LABEL, name), (CONTROLLER_UID_LABEL, uid)):
        labels[key] = value
    labels.update(dict(zip(LEGACY_LABELS, (name, uid), strict=True)))
    return pod


def finished_condition(job: dict[str, Any]) -> str | None:
    """Complete or Failed once the Job has finished, else None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in (COMPLETE, FAILED) and condition.get("status") == "True":
            return str(condition["type"])
    return None


def _phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _restarts(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def _condition(kind: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    stamp = format_time(now)
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }


def plan(job: dict[str, Any], pods: list[dict[str, Any]], now: datetime) -> JobPlan:
    """What to do for one Job given the pods it controls, at `now`."""
    spec, old_status = job.get("spec") or {}, job.get("status") or {}
    result = JobPlan()
    mine = [p for p in pods if controlled_by(p, job["metadata"]["uid"])]
    active = [p for p in mine if is_active(p)]
    succeeded = sum(1 for p in mine if _phase(p) == "Succeeded")
    failed_pods = sum(1 for p in mine if _phase(p) == "Failed")
    on_failure = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "OnFailure"
    failures = failed_pods + (sum(_restarts(p) for p in active) if on_failure else 0)
    completions = spec.get("completions")
    parallelism = int(spec.get("parallelism", 1))
    suspended = bool(spec.get("suspend"))
    status: dict[str, Any] = {
        key: old_status[key] for key in ("startTime", "completionTime", "conditions") if key in old_status
    }
    status["conditions"] = copy.deepcopy(status.get("conditions") or [])
    if not suspended and "startTime" not in status:
        status["startTime"] = format_time(now)
    finished = finished_condition(job)
    if finished is None:
        finished = _decide_end(spec, status, active, succeeded, failures, now, result)
    if finished == FAILED:
        result.delete = list(active)
    elif finished is None:
        if completions is None:  # a work queue: once one pod succeeded, no new ones
            wanted = 0 if succeeded else parallelism
        else:
            wanted = min(parallelism, max(int(completions) - succeeded, 0))
        if suspended:
            wanted = 0
        if len(active) < wanted:
            result.create = wanted - len(active)
        elif len(active) > wanted:
            result.delete = active[wanted:] if not suspended else list(active)
    status.update(
        active=len(active) - len(result.delete) if finished != FAILED else 0,
        ready=sum(1 for p in active if is_ready(p)),
        succeeded=succeeded,
        failed=failed_pods,
    )
    result.status = {key: value for key, value in status.items() if value or key in ("ready",)}
    return result


def _decide_end(
    spec: dict[str, Any],
    status: dict[str, Any],
    active: list[dict[str, Any]],
    succeeded: int,
    failures: int,
    now: datetime,
    result: JobPlan,
) -> str | None:
    """Whether the Job finishes now: appends its condition to `status` and its event to `result`."""
    completions = spec.get("completions")
    done = succeeded >= int(completions) if completions is not None else succeeded > 0 and not active
    if done:
        status["conditions"].append(
            _condition(COMPLETE, "CompletionsReached", "Reached expected number of succeeded pods", now)
        )
        status["completionTime"] = format_time(now)
        result.events.append(("Normal", "Completed", "Job completed"))
        return COMPLETE
    backoff = int(spec.get("backoffLimit", 6))
    if failures > backoff:
        message = "Job has reached the specified backoff limit"
        status["conditions"].append(_condition(FAILED, "BackoffLimitExceeded", message, now))
        result.events.append(("Warning", "BackoffLimitExceeded", message))
        return FAILED
    deadline, started = spec.get("activeDeadlineSeconds"), parse_time(status.get("startTime"))
    if deadline is not None and started is not None and not spec.get("suspend"):
        left = started.timestamp() + int(deadline) - now.timestamp()
        if left <= 0:
            message = "Job was active longer than specified deadline"
            status["conditions"].append(_condition(FAILED, "DeadlineExceeded", message, now))
            result.events.append(("Warning", "DeadlineExceeded", message))
            return FAILED
        result.requeue_after = left
    return None
