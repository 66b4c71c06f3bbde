"""The batch/v1 CronJob controller's decision: Volcano's CronJob rules (controller/cronjobs.py
`cron_step`: the schedule in its time zone, concurrencyPolicy, startingDeadlineSeconds, suspend,
history limits) making batch/v1 Jobs, which are read by their Complete or Failed condition. The
runner (controller/workloads/runner.py) performs the decision."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from lahar.api import kinds
from lahar.controller.cronjobs import CronDecision, CronFlavour, cron_step
from lahar.controller.lifecycle import parse_time
from lahar.controller.workloads.job import COMPLETE, FAILED


def _conditions(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]


def outcome(job: Mapping[str, Any]) -> str | None:
    kinds_seen = {c.get("type") for c in _conditions(job)}
    if COMPLETE in kinds_seen:
        return "succeeded"
    return "failed" if FAILED in kinds_seen else None


def finished_at(job: Mapping[str, Any]) -> datetime | None:
    return parse_time((job.get("status") or {}).get("completionTime"))


BATCH = CronFlavour(kinds.BATCH_CRONJOB, kinds.BATCH_JOB, outcome, finished_at)


def plan(cronjob: Mapping[str, Any], jobs: list[dict[str, Any]], now: datetime) -> CronDecision:
    """What to do for one batch/v1 CronJob given the Jobs it owns, at `now`."""
    return cron_step(cronjob, jobs, now, BATCH)
