"""gang: all-or-nothing by `minMember` and `minTaskMember` (Volcano's gang plugin).

- job_valid: a job with fewer valid tasks (pending, placed or succeeded) than minMember, or than
  a task's minTaskMember, is skipped for the session;
- job_ready: ready tasks (allocated, binding, bound, running, succeeded) plus pending tasks that
  ask for nothing (backfill places those) reach minMember, and every minTaskMember is met;
- job_pipelined / job_starving: the same counts with pipelined tasks as "waiting";
- sub-jobs (a PodGroup's `subGroupPolicy`, framework/subjobs.py): a job is valid only with at
  least minSubGroups sub-jobs of each policy, ready (pipelined) only with at least minSubGroups of
  them ready (pipelined), a sub-job being ready when `subGroupSize` of its tasks are;
- job_order: gangs that are not ready go first;
- preemptable / reclaimable: never take a victim whose job would fall below minMember;
- on close: every gang that is not ready gets an Unschedulable message and a Warning event.

Readiness is asked after every placement, so nothing is recounted: the job's tasks by state are
kept by the job itself (`JobInfo.by_status`, `pending_no_request`), and the per-task counts that
minTaskMember needs are kept here, only for jobs that have such minimums, and moved by the
session's allocate/deallocate handlers (a 10,000-task gang would otherwise cost 10,000² status
walks).
"""

from __future__ import annotations

from collections import Counter

from lahar.api.podgroup import PodGroupPhase
from lahar.scheduler.framework.plugin import Plugin, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.framework.subjobs import Partition, job_policies
from lahar.scheduler.model import READY, JobInfo, TaskInfo, TaskStatus

# Volcano's ValidTaskNum: tasks that may still run (not failed, not unknown).
VALID = READY | {TaskStatus.PENDING, TaskStatus.PIPELINED}


class _ByTask:
    """A job's occupied tasks (ready, or pending with no request) by task name, for its
    minTaskMember; `occupied` holds the uids counted."""

    __slots__ = ("counts", "occupied")

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.occupied: set[str] = set()


def _occupied(task: TaskInfo) -> bool:
    status = task.status
    return status in READY or (status is TaskStatus.PENDING and task.no_request)


_NONE = Partition({}, {}, {})  # a job without sub-jobs


def _ready(job: JobInfo) -> int:
    """Ready tasks plus pending ones that ask for nothing (backfill places them)."""
    return job.count(READY) + job.pending_no_request


def _pipelined(job: JobInfo) -> int:
    return len(job.by_status.get(TaskStatus.PIPELINED) or ())


@register_plugin
class GangPlugin(Plugin):
    name = "gang"

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self._by_task: dict[str, _ByTask] = {}
        session.add_job_valid_fn(self.job_valid)
        session.add_job_ready_fn(self.job_ready)
        session.add_job_pipelined_fn(self.job_pipelined)
        session.add_job_starving_fn(self.job_starving)
        session.add_job_order_fn(lambda job: 1 if self.job_ready(job) else 0)  # not ready first
        session.add_preemptable_fn(self.victims)
        session.add_reclaimable_fn(self.victims)
        if any(job.min_task_member for job in session.jobs.values()):
            session.add_event_handler(self._moved, self._moved)
        # Jobs whose sub-group policies ask for a number of sub-jobs (minSubGroups): only these
        # pay for counting sub-jobs, once per readiness question.
        self._partitioned: frozenset[str] = frozenset(
            job.key
            for job in session.jobs.values()
            if job_policies(job) and (session.sub_jobs(job) or _NONE).min_groups
        )

    def _tasks_of(self, job: JobInfo) -> Counter[str]:
        """The job's occupied tasks by task name (a job with per-task minimums)."""
        by_task = self._by_task.get(job.key)
        if by_task is None:
            by_task = self._by_task[job.key] = _ByTask()
            for task in job.tasks.values():
                if _occupied(task):
                    by_task.occupied.add(task.uid)
                    by_task.counts[task.task_name] += 1
        return by_task.counts

    def _moved(self, task: TaskInfo) -> None:
        """A task changed state in the session: move it within its job's per-task counts."""
        by_task = self._by_task.get(task.job)
        if by_task is None:
            return  # counted from scratch when first asked
        was, now = task.uid in by_task.occupied, _occupied(task)
        if was != now:
            by_task.counts[task.task_name] += 1 if now else -1
            (by_task.occupied.add if now else by_task.occupied.discard)(task.uid)

    # -- callbacks ---------------------------------------------------------------------------

    def job_valid(self, job: JobInfo) -> str | None:
        valid = job.count(VALID)
        if valid < job.min_member:
            return f"Not enough valid tasks for gang-scheduling, valid: {valid}, min: {job.min_member}"
        # As Volcano's CheckTaskValid: per-task minimums only when minMember covers their sum (a
        # job whose minMember is below it asked for an elastic gang, e.g. one whose dependent
        # tasks have no pods yet).
        if job.min_task_member and job.min_member >= sum(job.min_task_member.values()):
            by_task = Counter(task.task_name for task in job.with_status(*VALID))
            short = sorted(name for name, least in job.min_task_member.items() if by_task[name] < least)
            if short:
                return f"Not enough valid pods of each task for gang-scheduling: {', '.join(short)}"
        if job.key in self._partitioned:
            groups = (self.session.sub_jobs(job) or _NONE).short_of_valid()
            if groups:
                listed = ", ".join(f"{name} ({have} of {need})" for name, (have, need) in sorted(groups.items()))
                return f"Not enough valid subGroups of each task for gang-scheduling: {listed}"
        return None

    def _tasks_met(self, job: JobInfo) -> bool:
        minimums = job.min_task_member
        # Volcano checks per-task minimums only when minMember covers them: a job whose
        # minMember is below their sum asked for an elastic gang.
        if not minimums or job.min_member < sum(minimums.values()):
            return True
        counts = self._tasks_of(job)
        return all(counts[name] >= least for name, least in minimums.items())

    def job_ready(self, job: JobInfo) -> bool:
        if _ready(job) < job.min_member or not self._tasks_met(job):
            return False
        return job.key not in self._partitioned or (self.session.sub_jobs(job) or _NONE).ready(job)

    def job_pipelined(self, job: JobInfo) -> bool:
        if _ready(job) + _pipelined(job) < job.min_member:
            return False
        return job.key not in self._partitioned or (self.session.sub_jobs(job) or _NONE).pipelined(job)

    def job_starving(self, job: JobInfo) -> bool:
        # Volcano's count: ready and pipelined tasks only. A pending task that asks for nothing
        # counts towards readiness, but it still needs a pod slot, which it may have to preempt.
        return job.count(READY) + _pipelined(job) < job.min_member

    def victims(self, preemptor: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        """The candidates whose eviction keeps their job at or above minMember, taking them in
        the order given (each one taken lowers what is left for the next of the same job)."""
        left: dict[str, int] = {}
        chosen = []
        for victim in candidates:
            job = self.session.jobs[victim.job]
            ready = left.get(job.key, job.ready_count)
            if ready > job.min_member:
                left[job.key] = ready - 1
                chosen.append(victim)
            else:
                left[job.key] = ready
        return chosen

    # -- close -------------------------------------------------------------------------------

    def on_session_close(self, session: Session) -> None:
        for job in session.jobs.values():
            if job.phase is PodGroupPhase.COMPLETED or self.job_ready(job):
                continue
            if not job.by_status.get(TaskStatus.PENDING) and (
                job.podgroup is None or job.phase is not PodGroupPhase.PENDING
            ):
                # Nothing to schedule: a lone pod that has finished, or an admitted gang whose pods
                # are gone or going (torn down). Only a PodGroup waiting for admission is reported.
                continue
            if not job.unschedulable_message:
                job.set_unschedulable(job.min_member - _ready(job), self._not_ready(job))
            if job.podgroup is not None:
                session.record_event(
                    "PodGroup", job.namespace, job.name, "Warning", "Unschedulable", job.unschedulable_message
                )
            else:
                for task in job.pending:
                    session.record_event(
                        "Pod", task.namespace, task.name, "Warning", "FailedScheduling", job.unschedulable_message
                    )

    @staticmethod
    def _not_ready(job: JobInfo) -> str:
        """Volcano's FitError when no action said more: task counts by state and minAvailable."""
        histogram = Counter({status.value: len(tasks) for status, tasks in job.by_status.items() if tasks})
        histogram["minAvailable"] = job.min_member
        return "pod group is not ready, " + ", ".join(sorted(f"{n} {what}" for what, n in histogram.items()))
