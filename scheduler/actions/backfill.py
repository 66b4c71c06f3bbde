"""backfill: place the pending tasks that ask for nothing (Volcano's BestEffort tasks, which
allocate leaves alone) on any node that passes the predicates (Volcano's backfill action).

Jobs are taken by `queue_order` then `job_order` (admitted jobs only, valid ones), tasks by
`task_order`; each task goes to `best_node`. A job's placements bind if it is ready (a gang
counts these tasks as ready while they wait, so it is ready unless its other tasks did not fit);
otherwise it keeps nothing. A task that fits nowhere gets a FailedScheduling event.
"""

from __future__ import annotations

from collections.abc import Hashable

from lahar.api.podgroup import PodGroupPhase
from lahar.scheduler.actions.allocate import nodes_message
from lahar.scheduler.framework.plugin import Action, register_action
from lahar.scheduler.framework.session import NO_NODE, Session
from lahar.scheduler.model import JobInfo, TaskInfo, TaskStatus


@register_action
class BackfillAction(Action):
    name = "backfill"

    def execute(self, session: Session) -> None:
        reasons: dict[Hashable, str] = {}  # per class (Session.class_key)
        for job, tasks in self._candidates(session):
            statement = session.statement()
            for task in tasks:
                row = session.best_node(task)
                if row != NO_NODE:
                    refusal = statement.allocate(task, row)
                    if refusal is None:
                        continue
                    why = f"refused at placement: {refusal}"
                else:
                    key = session.class_key(task)
                    found = reasons.get(key)
                    if found is None:
                        found = reasons[key] = nodes_message(session.explain(task), len(session.nodes))
                    why = found
                # A gang counts these tasks as ready while pending, so only the pod can say it.
                session.record_event("Pod", task.namespace, task.name, "Warning", "FailedScheduling", why)
                if job.podgroup is None:
                    job.set_unschedulable(1, why)
            if session.job_ready(job):
                statement.commit()
            else:
                statement.discard()

    @staticmethod
    def _candidates(session: Session) -> list[tuple[JobInfo, list[TaskInfo]]]:
        """Admitted, valid jobs with pending tasks that ask for nothing, in queue and job order."""
        found = []
        for job in session.jobs.values():
            if job.phase is PodGroupPhase.PENDING or job.queue not in session.queues:
                continue
            tasks = [
                task
                for task in job.by_status.get(TaskStatus.PENDING, {}).values()
                if task.no_request and not task.gated
            ]
            if not tasks or session.job_valid(job):
                continue
            if "allocate" not in session.conf.actions:  # else allocate has refused them already
                tasks = session.refuse_unsupported(job, tasks)
            tasks.sort(key=session.task_order_key)
            order = (session.queue_order_key(session.queues[job.queue]), session.job_order_key(job))
            found.append((order, job, tasks))
        found.sort(key=lambda entry: entry[0])
        return [(job, tasks) for _, job, tasks in found]
