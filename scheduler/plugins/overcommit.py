"""overcommit: admit PodGroups while the cluster, overcommitted by a factor, has room for their
minResources (Volcano's overcommit plugin).

`idle = total allocatable × overcommit-factor − everything requested`; a PodGroup is admitted if
`inqueue + its minResources ≤ idle` on the resources its minResources names, where `inqueue` is
what admitted PodGroups hold back (`JobInfo.inqueue_request`) plus what this session admitted.
A PodGroup without minResources is admitted. The factor (default 1.2) bounds how many pods
the controller creates ahead of the capacity to run them; a factor below 1 is refused.

Where the oversubscription plugin lends the agents' reclaimable capacity, what BE pods use of cpu
and memory is borrowed from what online pods leave idle and is not counted as requested: online
pods are placed ignoring it (the fit rule) and take it back at run time (the agent's QoS), so
harvesting must not close admission to online jobs. (The controller leaves a BE job's cpu and
memory out of its minResources for the same reason: controller/desired.py.)
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.session import PERMIT, REJECT, Session
from lahar.scheduler.framework.shares import uncharged_columns
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
        self.idle = overcommitted_idle(
            session.total, nodes.used.sum(axis=0), nodes.be_used.sum(axis=0), factor, uncharged_columns(session)
        )
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


def overcommitted_idle(
    total: np.ndarray, used: np.ndarray, be_used: np.ndarray, factor: float, uncharged: np.ndarray | None
) -> np.ndarray:
    """What admission may still hand out: the cluster overcommitted by `factor`, less what pods
    request; with capacity lent to BE pods, less only what they charge (`uncharged_columns`, the
    rule the queue plugins use: their borrowed cpu/memory is left out)."""
    charged = be_used.copy()
    if uncharged is not None:
        charged[uncharged] = 0
    return total * factor - used - charged
