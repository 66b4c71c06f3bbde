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
pipelined, else undone. The node search is preempt's (`VictimSearch`), over a different pool.
"""

from __future__ import annotations

import numpy as np

from lahar.scheduler.actions.preempt import VictimAction, VictimSearch, anyone, commit_if_pipelined
from lahar.scheduler.framework.plugin import register_action
from lahar.scheduler.framework.session import Session, Statement
from lahar.scheduler.model import JobInfo, QueueInfo


def _always() -> bool:
    return True


@register_action
class Reclaim(VictimAction):
    name = "reclaim"

    def victim_queues(self, session: Session, starving: dict[str, list[JobInfo]]) -> set[str]:
        return {name for name, queue in session.queues.items() if queue.reclaimable}

    def serve(self, session: Session, search: VictimSearch, queue: QueueInfo, jobs: list[JobInfo]) -> None:
        reclaimable = search.pool.queue_names - {queue.name}
        for job in jobs:
            if session.overused(queue):
                break
            self._reclaim_for(session, search, queue, job, reclaimable)

    @staticmethod
    def _reclaim_for(session: Session, search: VictimSearch, queue: QueueInfo, job: JobInfo,
                     others: set[str]) -> None:
        pool = search.pool
        statements: list[Statement] = []
        for task in sorted(job.pending, key=session.task_order_key):
            if not session.job_starving(job) or not session.preemptive(queue, task):
                break
            best_effort = task.best_effort

            def selection(be: bool = best_effort) -> np.ndarray:
                return pool.queue_mask(others) & (pool.best_effort | (not be))

            statement = search.place(task, ("queues", queue.name, best_effort), selection,
                                     anyone, session.reclaimable, _always)
            if statement is not None:
                statements.append(statement)
        commit_if_pipelined(session, job, statements)
