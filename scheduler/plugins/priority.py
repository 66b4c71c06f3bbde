"""priority: order jobs and tasks by priority, higher first; victims must rank lower (Volcano's
priority plugin).

Between jobs the job priority decides (the PodGroup's priority class, or the lone pod's own);
within one job the task priority does. A job starves while fewer of its tasks are ready or
pipelined than it has tasks.
"""

from __future__ import annotations

from lahar.scheduler.framework.plugin import Plugin, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import READY, JobInfo, TaskInfo, TaskStatus


@register_plugin
class PriorityPlugin(Plugin):
    name = "priority"

    def on_session_open(self, session: Session) -> None:
        self.session = session
        # Order keys sort ascending: negate so the higher priority comes first.
        session.add_job_order_fn(lambda job: -job.priority)
        session.add_task_order_fn(lambda task: -task.priority)
        session.add_preemptable_fn(self.victims)
        session.add_job_starving_fn(self.job_starving)

    def victims(self, preemptor: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        jobs = self.session.jobs
        preemptor_job = jobs[preemptor.job]
        chosen = []
        for victim in candidates:
            if victim.job == preemptor.job:
                lower = victim.priority < preemptor.priority
            else:
                lower = jobs[victim.job].priority < preemptor_job.priority
            if lower:
                chosen.append(victim)
        return chosen

    @staticmethod
    def job_starving(job: JobInfo) -> bool:
        return job.count(READY | {TaskStatus.PIPELINED}) < len(job.tasks)
