"""sla: jobs that have waited past their waiting-time SLA go first and are admitted (Volcano's sla
plugin).

A job's SLA is its PodGroup's annotation `sla-waiting-time` (a Volcano Job's annotations are
copied onto its PodGroup), else the plugin's argument `sla-waiting-time`; both in Go's duration
notation (`1h2m3s`). A job without one is left alone.

- job_order: jobs with an SLA before those without, the earliest deadline (creation + SLA) first;
- job_enqueueable: a job past its deadline is admitted (a permit: in its tier it outvotes the
  abstentions, not a reject), a job within it abstains.

Volcano also registers the same vote as a job-pipelined callback; Lahar's `job_pipelined` is an
all-must-agree check, where a vote that never rejects changes nothing, so it is not registered.
An SLA that cannot be read (a bad annotation) is reported once per session with a Warning event
on the PodGroup and the job is treated as having none; a bad argument refuses the configuration.
"""

from __future__ import annotations

from typing import ClassVar

from lahar.scheduler.framework.plugin import Arguments, Plugin, epoch_seconds, go_duration, register_plugin
from lahar.scheduler.framework.session import ABSTAIN, PERMIT, Session
from lahar.scheduler.model import JobInfo

WAITING_TIME = "sla-waiting-time"


@register_plugin
class SlaPlugin(Plugin):
    name = "sla"
    ARGUMENTS: ClassVar[Arguments] = {WAITING_TIME: go_duration}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        default = self.argument(WAITING_TIME, None)
        self.default = default if default is not None and default > 0 else None
        self._deadlines: dict[str, float | None] = {}
        if self.default is None and not any(
            job.podgroup is not None and WAITING_TIME in job.podgroup.meta.annotations for job in session.jobs.values()
        ):
            return  # no job has an SLA: no callback, no cost per job
        session.add_job_order_fn(self.job_order)
        session.add_job_enqueueable_fn(self.job_enqueueable)

    def waiting_time(self, job: JobInfo) -> float | None:
        group = job.podgroup
        given = None if group is None else group.meta.annotations.get(WAITING_TIME)
        if given is None:
            return self.default
        try:
            seconds = go_duration(given)
        except ValueError as exc:
            message = f"annotation {WAITING_TIME}: {exc}; the job has no SLA"
            self.session.record_event("PodGroup", job.namespace, job.name, "Warning", "InvalidSLA", message)
            return self.default
        return seconds if seconds > 0 else self.default

    def deadline(self, job: JobInfo) -> float | None:
        """When the job's SLA runs out (seconds since the epoch), or None without one."""
        if job.key not in self._deadlines:
            waiting = self.waiting_time(job)
            created = epoch_seconds(job.creation) if waiting is not None and job.creation else None
            self._deadlines[job.key] = None if waiting is None or created is None else created + waiting
        return self._deadlines[job.key]

    def job_order(self, job: JobInfo) -> tuple[int, float]:
        deadline = self.deadline(job)
        return (1, 0.0) if deadline is None else (0, deadline)

    def job_enqueueable(self, job: JobInfo) -> int:
        deadline = self.deadline(job)
        return PERMIT if deadline is not None and self.session.now >= deadline else ABSTAIN
