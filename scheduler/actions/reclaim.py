"""reclaim: starving jobs take back resources other queues hold beyond their share (Volcano's
reclaim action).

For every queue (queue order) that is not overused and every starving job in it (job order),
each pending task (task order) that `Session.preemptive(queue, task)` lets reclaim looks for a
node where it would fit once victims are gone: running or bound tasks of OTHER queues whose
queue is reclaimable (`spec.reclaimable`, default true), as `Session.reclaimable` allows (the
proportion plugin keeps victims to queues above their deserved share and never below their
guarantee; gang never breaks another gang below minMember). A BE task reclaims only from BE
tasks, as in preempt. Victims go lowest first until the task fits on the future state; then the
task is pipelined there. The job's evictions and pipelines are committed only if the job is then
pipelined, else undone; a job with a hard `networkTopology` makes its room within one HyperNode
(`in_one_domain`). The node search is preempt's (`VictimSearch`), over a different pool.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from lahar.scheduler.actions.preempt import (
    VictimAction,
    VictimSearch,
    anyone,
    in_one_domain,
    preemptors,
    still_needed,
)
from lahar.scheduler.framework.plugin import register_action
from lahar.scheduler.framework.session import Session, Statement
from lahar.scheduler.model import JobInfo, QueueInfo, TaskInfo


def _always() -> bool:
    return True


@register_action
class Reclaim(VictimAction):
    name = "reclaim"

    def may_lose(self, session: Session, starving: dict[str, list[JobInfo]]) -> Callable[[JobInfo], bool]:
        # Jobs of reclaimable queues other than a starving one (with one starving queue, not its own).
        victims = {
            name
            for name, queue in session.queues.items()
            if queue.reclaimable and (len(starving) > 1 or name not in starving)
        }
        return lambda job: job.queue in victims

    def serve(self, session: Session, search: VictimSearch, queue: QueueInfo, jobs: list[JobInfo]) -> None:
        reclaimable = search.pool.queue_names - {queue.name}
        for job in jobs:
            if session.overused(queue):
                break
            self._reclaim_for(session, search, queue, job, reclaimable)

    @staticmethod
    def _reclaim_for(session: Session, search: VictimSearch, queue: QueueInfo, job: JobInfo, others: set[str]) -> None:
        pool = search.pool

        def selection_of(task: TaskInfo) -> tuple[Hashable, Callable[[], np.ndarray]]:
            """Tasks of the other reclaimable queues (BE ones only for a BE task)."""

            def selection(be: bool = task.best_effort) -> np.ndarray:
                return pool.queue_mask(others) & (pool.best_effort | (not be))

            return ("queues", queue.name, task.best_effort), selection

        pending = preemptors(session, job)
        if not pending or not search.can_hold(pending, still_needed(job), selection_of):
            return

        def attempt(tasks: list[TaskInfo]) -> list[Statement]:
            statements: list[Statement] = []
            for task in tasks:
                if not session.job_starving(job):
                    break
                if not session.preemptive(queue, task):
                    continue  # the queue may still take a smaller task (Volcano's rule)
                statement = search.place(task, *selection_of(task), anyone, session.reclaimable, _always)
                if statement is not None:
                    statements.append(statement)
            return statements

        in_one_domain(session, job, pending, attempt, search.max_domains)
