"""Volcano's CronJob (`batch.volcano.sh/v1alpha1`): a Volcano Job made on a cron schedule, with
Kubernetes' CronJob fields and rules. Defaults: concurrencyPolicy Allow, suspend false,
successfulJobsHistoryLimit 3, failedJobsHistoryLimit 1. Validation: the schedule parses (five
fields or a descriptor), the time zone exists, the policy is Allow/Forbid/Replace, the limits
and the deadline are not negative, and the job template is a valid Job spec (its errors named
under spec.jobTemplate.spec)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lahar.api import job as job_api
from lahar.api.cron import CronError, parse_schedule
from lahar.api.errors import Field, FieldError, child_dict, json_copy, set_default

CONCURRENCY_POLICIES = ("Allow", "Forbid", "Replace")
DEFAULT_SUCCESSFUL_HISTORY = 3
DEFAULT_FAILED_HISTORY = 1
# The Jobs it makes are named <cronjob>-<minutes since the epoch>: 11 characters after the name
# (Kubernetes caps CronJob names at 52 for the same reason).
NAME_MAX = job_api.JOB_NAME_MAX - 11


JobDefaults = Callable[[dict[str, Any]], dict[str, Any]]
JobValidator = Callable[[dict[str, Any], "dict[str, Any] | None"], list[FieldError]]


def defaults(obj: dict[str, Any], job_defaults: JobDefaults = job_api.defaults) -> dict[str, Any]:
    """Volcano's CronJob defaults; batch/v1's CronJob (lahar.api.batch) passes its own Job's."""
    result = json_copy(obj)
    spec = child_dict(result, "spec")
    if spec is None:
        return result
    set_default(spec, "concurrencyPolicy", "Allow")
    set_default(spec, "suspend", False)
    set_default(spec, "successfulJobsHistoryLimit", DEFAULT_SUCCESSFUL_HISTORY)
    set_default(spec, "failedJobsHistoryLimit", DEFAULT_FAILED_HISTORY)
    template = child_dict(spec, "jobTemplate")
    if template is not None and isinstance(template.get("spec"), dict):
        template["spec"] = job_defaults({"spec": template["spec"]})["spec"]
    return result


def validate(
    obj: dict[str, Any], old: dict[str, Any] | None = None, validate_job: JobValidator = job_api.validate
) -> list[FieldError]:
    root = Field(obj)
    name = root.child("metadata").child("name").value
    if isinstance(name, str) and len(name) > NAME_MAX:
        root.child("metadata").child("name").report(
            f"must be no more than {NAME_MAX} characters (its Jobs add 11 to it, and a Job name holds 63)"
        )
    spec = root.child("spec")
    if not spec.require_present() or spec.as_mapping() is None:
        return root.errors
    schedule = spec.child("schedule")
    text = schedule.require_str()
    if text is not None:
        try:
            parse_schedule(text)
        except CronError as error:
            schedule.report(f'invalid schedule "{text}": {error}')
    zone = spec.child("timeZone")
    zone_name = zone.as_str()
    if zone_name:
        try:
            ZoneInfo(zone_name)
        except (ZoneInfoNotFoundError, ValueError):
            zone.report(f'unknown time zone "{zone_name}"')
    spec.child("concurrencyPolicy").as_choice(CONCURRENCY_POLICIES, "concurrency policy")
    spec.child("startingDeadlineSeconds").as_int(minimum=0, bits=64)
    spec.child("successfulJobsHistoryLimit").as_int(minimum=0)
    spec.child("failedJobsHistoryLimit").as_int(minimum=0)
    spec.child("suspend").as_bool()
    template = spec.child("jobTemplate")
    if template.require_present() and template.as_mapping() is not None:
        job_spec = template.child("spec")
        if job_spec.require_present() and job_spec.as_mapping() is not None:
            job = {"metadata": {"name": name if isinstance(name, str) else ""}, "spec": job_spec.value}
            for problem in validate_job(job, None):
                if problem.field.startswith("spec"):
                    root.errors.append(FieldError(f"spec.jobTemplate.{problem.field}", problem.message, problem.reason))
    return root.errors
