"""Kubernetes' Job and CronJob (`batch/v1`). The CronJob's rules are Volcano's CronJob's
(lahar.api.cronjob: schedule, time zone, policy, limits) with this Job's for its template.
The Job's defaults, as kube-apiserver's: parallelism 1, completions 1 when neither is given (only
parallelism makes a work queue, completions unset), backoffLimit 6, completionMode NonIndexed,
suspend false; the pod template as a pod's. Validation: the counts are not negative, the
template's restartPolicy is OnFailure or Never (a Job's pods finish), and the template is a valid
pod template; the template and completions may not change after create (parallelism may: it is
how a Job is scaled)."""

from __future__ import annotations

from typing import Any

from lahar.api import cronjob
from lahar.api.errors import Field, FieldError, child_dict, json_copy, set_default
from lahar.api.pod import default_pod_spec, validate_pod_template

DEFAULT_BACKOFF_LIMIT = 6
JOB_RESTART_POLICIES = ("OnFailure", "Never")
NON_INDEXED = "NonIndexed"


def job_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    result = json_copy(obj)
    spec = child_dict(result, "spec")
    if spec is None:
        return result
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    set_default(spec, "parallelism", 1)
    set_default(spec, "backoffLimit", DEFAULT_BACKOFF_LIMIT)
    set_default(spec, "completionMode", NON_INDEXED)
    set_default(spec, "suspend", False)
    template = child_dict(spec, "template")
    pod_spec = child_dict(template, "spec") if template is not None else None
    if pod_spec is not None:
        default_pod_spec(pod_spec)
    return result


def validate_job(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    spec = root.child("spec")
    if not spec.require_present() or spec.as_mapping() is None:
        return root.errors
    for name in ("parallelism", "completions", "backoffLimit"):
        spec.child(name).as_int(minimum=0)
    spec.child("activeDeadlineSeconds").as_int(minimum=1)
    spec.child("ttlSecondsAfterFinished").as_int(minimum=0)
    spec.child("completionMode").as_choice((NON_INDEXED,), "completion mode")
    template = spec.child("template")
    if template.require_present() and template.as_mapping() is not None:
        validate_pod_template(template)
        restart = spec.child("template").child("spec").child("restartPolicy")
        if restart.value not in JOB_RESTART_POLICIES:
            restart.report(f'Unsupported value: "{restart.value}": supported values: "OnFailure", "Never"')
    if old is not None:
        old_spec = old.get("spec") or {}
        new_spec = obj.get("spec") or {}
        for name in ("template", "completions", "completionMode", "selector"):
            if old_spec.get(name) != new_spec.get(name):
                spec.child(name).report("field is immutable")
    return root.errors


def cronjob_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    return cronjob.defaults(obj, job_defaults)


def validate_cronjob(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    return cronjob.validate(obj, old, validate_job)
