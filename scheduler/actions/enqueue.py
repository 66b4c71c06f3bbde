"""enqueue: admit Pending PodGroups (Pending → Inqueue), Volcano's admission control.

Queues take turns in `queue_order`'s admission variant (`Session.admission_order_key`: proportion
orders by what a queue holds and has admitted against the share its whole demand deserves, the
waiting PodGroups included), each turn admitting or passing over its next PodGroup in
`job_order`; a PodGroup is admitted when it names no minResources or `job_enqueueable` says so,
and `job_enqueued` lets the plugins count it against what later PodGroups may have. A queue that
is not Open admits nothing. The controller creates a job's pods once its PodGroup is Inqueue, so
this is what bounds how much work waits for room.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from lahar.api.podgroup import PodGroupPhase
from lahar.scheduler.framework.plugin import Action, register_action
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import JobInfo


@register_action
class EnqueueAction(Action):
    name = "enqueue"

    def execute(self, session: Session) -> None:
        tie = itertools.count()  # heap entries never compare the objects themselves
        waiting: dict[str, list[tuple[tuple[Any, ...], int, JobInfo]]] = {}
        for job in session.jobs.values():
            if job.podgroup is None or job.phase is not PodGroupPhase.PENDING:
                continue
            queue = session.queues.get(job.queue)
            if queue is None:
                job.set_unschedulable(job.min_member, f"queue {job.queue} does not exist")
                continue
            if not queue.is_open:
                continue
            waiting.setdefault(queue.name, []).append((session.job_order_key(job), next(tie), job))
        queues = []
        for name, jobs in waiting.items():
            heapq.heapify(jobs)
            queue = session.queues[name]
            queues.append((session.admission_order_key(queue), next(tie), queue))
        heapq.heapify(queues)
        while queues:
            _, _, queue = heapq.heappop(queues)
            jobs = waiting[queue.name]
            _, _, job = heapq.heappop(jobs)
            if not job.min_resources.any() or session.job_enqueueable(job):
                job.phase = PodGroupPhase.INQUEUE
                session.job_enqueued(job)
            if jobs:
                heapq.heappush(queues, (session.admission_order_key(queue), next(tie), queue))
