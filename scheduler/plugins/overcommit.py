"""overcommit: admit PodGroups while the cluster, overcommitted by a factor, has room for their
minResources (Volcano's overcommit plugin).

`idle = total allocatable × overcommit-factor − everything requested`; a PodGroup is admitted if
`inqueue + its minResources ≤ idle` on the resources its minResources names, where `inqueue` is
what admitted PodGroups hold back (`JobInfo.inqueue_request`) plus what this session admitted.
A PodGroup without minResources is admitted. The factor (default 1.2) bounds how many pods
the controller creates ahead of the capacity to run them; a factor below 1 is refused.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.session import PERMIT, REJECT, Session
from lahar.scheduler.model import JobInfo

DEFAULT_FACTOR = 1.2
OVERUSED = "resource in cluster is overused"


@register_plugin
class OvercommitPlugin(Plugin):
    name = "overcommit"
    ARGUMENTS: ClassVar[Arguments] = {"overcommit-factor": number(minimum=1.0)}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        nodes = session.nodes
        factor = self.argument("overcommit-factor", DEFAULT_FACTOR)
        self.idle = session.total * factor - (nodes.used + nodes.be_used).sum(axis=0)
        self.inqueue = np.zeros(len(session.resources), dtype=np.int64)
        for job in session.jobs.values():
            self.inqueue += job.inqueue_request
        session.add_job_enqueueable_fn(self.job_enqueueable)
        session.add_job_enqueued_fn(self.job_enqueued)

    def job_enqueueable(self, job: JobInfo) -> int:
        wanted = job.min_resources
        asked = wanted > 0
        if not asked.any():
            return PERMIT
        if ((self.inqueue + wanted)[asked] <= self.idle[asked]).all():
            return PERMIT
        if job.podgroup is not None:
            self.session.record_event("PodGroup", job.namespace, job.name, "Normal", "Unschedulable", OVERUSED)
        return REJECT

    def job_enqueued(self, job: JobInfo) -> None:
        self.inqueue += job.min_resources
