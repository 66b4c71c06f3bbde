"""The Volcano Job state machine as one pure function: `next_state(job, pods, podgroup, now)`
looks at a Job, its pods and its PodGroup and returns a `Decision` (new phase and status, pods
to create and delete, whether to delete the Job). The reconcile loop performs the writes.

Events are read off the pods' current state rather than off watch deltas, so every call is
idempotent: a pod that is being deleted while the Job is Pending or Running was not deleted by
the controller (Restarting waits until no pod is terminating before going back to Pending), so
it reads as evicted. For the same reason a restart records the pods it must delete in
`status.restartingPods`: if a deletion fails, the next call in Restarting issues it again
instead of reading the pod's failure a second time (and counting a second retry).

A Job whose queue is missing or not Open is held in Pending, creating no pods, with
`state.reason` QueueNotFound / QueueNotOpen saying why; it proceeds once the queue is Open (as
Volcano, whose scheduler admits nothing into a queue that is not Open).

Where Lahar differs from Volcano (on purpose):
- `maxRetry` counts restarts: a restart asked for when `retryCount >= maxRetry` fails the job
  (Volcano counts attempts: its maxRetry 1 allows no restart);
- ResumeJob (a user's request) does not count as a retry;
- Restarting goes back to Pending once no pod is terminating (Volcano: once
  `replicas - terminating >= minAvailable`), which keeps event detection stateless;
- a policy `timeout` is honoured for PodPending only (Volcano also delays other actions by it);
- a task's `maxRetry` is Volcano's: TaskFailed once the container restarts (kubelet's, in place)
  of the task's Pending and Running pods add up to it; but an explicit `maxRetry: 0` means no
  restart is tolerated (Volcano reads 0 as its default, 3); Lahar's admission refuses Volcano's
  -1 ("no limit").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from lahar.api.job import (
    FINISHED_PHASES,
    POD_COUNTERS,
    STATE_LAST_TRANSITION,
    STATUS_CONDITIONS,
    STATUS_MIN_AVAILABLE,
    STATUS_RETRY_COUNT,
    STATUS_STATE,
    STATUS_TASK_STATUS_COUNT,
    STATUS_VERSION,
    Job,
    JobPhase,
    LifecyclePolicy,
    TaskSpec,
    job_state,
)
from lahar.api.podgroup import PodGroupConditionType, PodGroupPhase
from lahar.api.queue import QueueState
from lahar.controller.desired import PodMutator, desired_pods
from lahar.controller.naming import TASK_SPEC_KEY, pod_index, pod_task_name

# Events (Volcano's bus/v1alpha1 names).
POD_FAILED = "PodFailed"
POD_EVICTED = "PodEvicted"
POD_PENDING = "PodPending"
TASK_COMPLETED = "TaskCompleted"
TASK_FAILED = "TaskFailed"
UNKNOWN = "Unknown"

# Actions.
ABORT_JOB = "AbortJob"
RESTART_JOB = "RestartJob"
RESTART_TASK = "RestartTask"
RESTART_POD = "RestartPod"
TERMINATE_JOB = "TerminateJob"
COMPLETE_JOB = "CompleteJob"
RESUME_JOB = "ResumeJob"
RESTART_ACTIONS = frozenset({RESTART_JOB, RESTART_TASK, RESTART_POD})

# PodGroup phases in which the scheduler has admitted the gang (Volcano: "not Pending").
ADMITTED_PODGROUP_PHASES = frozenset({PodGroupPhase.INQUEUE, PodGroupPhase.RUNNING, PodGroupPhase.UNKNOWN})
# Phases that kill the job's unfinished pods and then settle in the paired phase.
WINDING_DOWN = {
    JobPhase.COMPLETING: JobPhase.COMPLETED,
    JobPhase.TERMINATING: JobPhase.TERMINATED,
    JobPhase.ABORTING: JobPhase.ABORTED,
}
# The transitional phase each stopping action enters.
STOPPING_ACTIONS = {
    ABORT_JOB: JobPhase.ABORTING,
    TERMINATE_JOB: JobPhase.TERMINATING,
    COMPLETE_JOB: JobPhase.COMPLETING,
}
# The job phases that hold a PodGroup (Decision.keeps_podgroup).
PODGROUP_PHASES = frozenset({JobPhase.PENDING, JobPhase.RUNNING, JobPhase.RESTARTING})
EVICTED_REASON = "Evicted"
CRASH_LOOP_REASON = "CrashLoopBackOff"

# Why a Pending job creates no pods: its queue (state.reason values).
QUEUE_NOT_FOUND = "QueueNotFound"
QUEUE_NOT_OPEN = "QueueNotOpen"
QUEUE_HOLD_REASONS = frozenset({QUEUE_NOT_FOUND, QUEUE_NOT_OPEN})
QUEUE_OPENED = "QueueOpen"
# A Pending job whose gang the scheduler cannot admit or place: state.message says why.
UNSCHEDULABLE_REASON = "Unschedulable"
# Lahar's addition to Volcano's status: the pods a restart still has to see deleted.
STATUS_RESTARTING_PODS = "restartingPods"

POD_PENDING_PHASE, POD_RUNNING_PHASE = "Pending", "Running"
POD_SUCCEEDED_PHASE, POD_FAILED_PHASE, POD_UNKNOWN_PHASE = "Succeeded", "Failed", "Unknown"
POD_FINISHED_PHASES = frozenset({POD_SUCCEEDED_PHASE, POD_FAILED_PHASE})


# --- time ---------------------------------------------------------------------------------------


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC, second precision (Kubernetes' metav1.Time)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodDeletion:
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    phase: JobPhase
    reason: str
    message: str
    counters: dict[str, int]
    task_status_count: dict[str, dict[str, dict[str, int]]]
    retry_count: int
    version: int
    pods_to_create: list[dict[str, Any]] = field(default_factory=list)
    pods_to_delete: list[PodDeletion] = field(default_factory=list)
    new_conditions: list[dict[str, str]] = field(default_factory=list)
    delete_job: bool = False
    command_consumed: bool = False
    # Seconds until the decision may change with no pod change (a pending timeout, the TTL).
    requeue_after: float | None = None
    retry_incremented: bool = False
    # The action a policy or command made the job take in this step (for metrics), if any.
    action: str | None = None
    # The whole status to write (previous conditions plus new_conditions).
    status: dict[str, Any] = field(default_factory=dict)
    # The tasks the PodGroup's gang counts now (see runnable_tasks).
    runnable_tasks: frozenset[str] = frozenset()

    @property
    def keeps_podgroup(self) -> bool:
        """Whether the job holds a PodGroup in this phase. A finished, aborted or stopping job
        releases it (Volcano's killJob deletes it), so it no longer reserves its queue's quota;
        a job that starts again (ResumeJob, a restart) gets a new one once Pending."""
        return self.phase in PODGROUP_PHASES


# --- reading pods -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodFacts:
    name: str
    task: str | None
    index: int | None
    phase: str
    deleting: bool
    evicted: bool
    exit_code: int | None
    created: datetime | None
    restarts: int = 0  # kubelet's in-place container restarts (init containers included)
    ready: bool = False  # every container ready (what a dependent task waits for)
    # Why the pod is crash-looping (a container waiting in CrashLoopBackOff), else None.
    crash_loop: str | None = None

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodFacts:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        phase = status.get("phase") or POD_PENDING_PHASE
        deleting = meta.get("deletionTimestamp") is not None
        evicted = status.get("reason") == EVICTED_REASON or (deleting and phase not in POD_FINISHED_PHASES)
        restarts = sum(
            container.get("restartCount") or 0
            for container in (*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ()))
        )
        return cls(
            meta.get("name") or "",
            pod_task_name(pod),
            pod_index(pod),
            phase,
            deleting,
            evicted,
            _exit_code(status),
            parse_time(meta.get("creationTimestamp")),
            restarts,
            _all_ready(status),
            crash_loop_message(pod),
        )


def _all_ready(status: Mapping[str, Any]) -> bool:
    """Every container reports ready (Volcano's test for a running dependency)."""
    containers = status.get("containerStatuses") or ()
    return bool(containers) and all(container.get("ready") for container in containers)


def crash_loop_message(pod: Mapping[str, Any]) -> str | None:
    """`<container>: <kubelet's message>` for the first container waiting in CrashLoopBackOff
    (a pod whose phase still says Running, but whose work is not running), else None."""
    for container in (pod.get("status") or {}).get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") == CRASH_LOOP_REASON:
            return f"{container.get('name', '?')}: {waiting.get('message') or CRASH_LOOP_REASON}"
    return None


def unschedulable_message(podgroup: Mapping[str, Any] | None) -> str | None:
    """What the scheduler says the gang lacks (its PodGroup's Unschedulable condition, when
    True), else None."""
    for condition in ((podgroup or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == PodGroupConditionType.UNSCHEDULABLE and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "unschedulable")
    return None


def _exit_code(status: Mapping[str, Any]) -> int | None:
    """The first non-zero exit code of a terminated container (what exitCode policies match)."""
    for container in status.get("containerStatuses") or ():
        code = ((container.get("state") or {}).get("terminated") or {}).get("exitCode")
        if code:
            return code
    return None


_COUNTER_OF_PHASE = {
    POD_PENDING_PHASE: "pending",
    POD_RUNNING_PHASE: "running",
    POD_SUCCEEDED_PHASE: "succeeded",
    POD_FAILED_PHASE: "failed",
}


def count_pods(pods: Iterable[PodFacts]) -> dict[str, int]:
    """Volcano's status counters by pod phase: a pod being deleted counts as terminating only.
    The state machine decides on these."""
    counts = dict.fromkeys(POD_COUNTERS, 0)
    for pod in pods:
        counts["terminating" if pod.deleting else _COUNTER_OF_PHASE.get(pod.phase, "unknown")] += 1
    return counts


def shown_phase(pod: PodFacts) -> str:
    """The phase a pod is shown in: a crash-looping pod's phase says Running, but its work is not
    running (kubectl shows it not ready, CrashLoopBackOff), so it is shown Pending."""
    return POD_PENDING_PHASE if pod.crash_loop and pod.phase == POD_RUNNING_PHASE else pod.phase


def shown_counts(pods: Iterable[PodFacts]) -> dict[str, int]:
    """The counters written to the status: count_pods, with crash-looping pods as pending."""
    counts = dict.fromkeys(POD_COUNTERS, 0)
    for pod in pods:
        counts["terminating" if pod.deleting else _COUNTER_OF_PHASE.get(shown_phase(pod), "unknown")] += 1
    return counts


def count_tasks(pods: Iterable[PodFacts]) -> dict[str, dict[str, dict[str, int]]]:
    """`status.taskStatusCount`: {task: {"phase": {podPhase: n}}}, the pods that are not being
    deleted (as Volcano: those count as terminating only), in their shown phase."""
    per_task: dict[str, Counter[str]] = {}
    for pod in pods:
        if pod.task is not None and not pod.deleting:
            phase = shown_phase(pod)
            per_task.setdefault(pod.task, Counter())[phase if phase in _COUNTER_OF_PHASE else POD_UNKNOWN_PHASE] += 1
    return {task: {"phase": dict(phases)} for task, phases in per_task.items()}


# --- policies -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    task: str | None
    pod: str | None = None
    exit_code: int | None = None
    pending_seconds: float | None = None

    def describe(self) -> str:
        subject = f"pod {self.pod}" if self.pod else f"task {self.task}"
        code = f" (exit code {self.exit_code})" if self.exit_code else ""
        return f"{self.name} on {subject}{code}"


def _policy_matches(policy: LifecyclePolicy, event: Event) -> bool:
    if policy.exit_code is not None:
        return event.exit_code == policy.exit_code
    if not policy.matches_event(event.name):
        return False
    if event.name == POD_PENDING:
        # Pending is only an event once it has lasted the policy's timeout.
        return (
            policy.timeout_seconds is not None
            and event.pending_seconds is not None
            and event.pending_seconds >= policy.timeout_seconds
        )
    return True


def resolve_action(job: Job, event: Event) -> str | None:
    """The action of the first matching policy, the event's task's policies before the job's
    (Volcano's applyPolicies); None stands for Volcano's SyncJob (no action)."""
    task = job.task(event.task) if event.task else None
    for policy in (*(task.policies if task else ()), *job.policies):
        if _policy_matches(policy, event):
            return policy.action
    return None


def _pending_seconds(pod: PodFacts, now: datetime) -> float | None:
    return (now - pod.created).total_seconds() if pod.created else None


def pod_events(pod: PodFacts, now: datetime) -> list[Event]:
    if pod.evicted:
        return [Event(POD_EVICTED, pod.task, pod.name)]
    if pod.deleting:
        return []
    if pod.phase == POD_FAILED_PHASE:
        return [Event(POD_FAILED, pod.task, pod.name, exit_code=pod.exit_code)]
    if pod.phase == POD_PENDING_PHASE:
        return [Event(POD_PENDING, pod.task, pod.name, pending_seconds=_pending_seconds(pod, now))]
    if pod.phase == POD_UNKNOWN_PHASE:
        return [Event(UNKNOWN, pod.task, pod.name)]
    return []


def task_events(task: TaskSpec, pods: Sequence[PodFacts]) -> list[Event]:
    """TaskCompleted when every replica succeeded; TaskFailed once so many pods failed that the
    task can no longer reach its minAvailable, or once its live pods' container restarts reach
    the task's maxRetry (Volcano's TaskFailed)."""
    mine = [p for p in pods if p.task == task.name and not p.deleting]
    phases = Counter(p.phase for p in mine)
    if task.replicas and phases[POD_SUCCEEDED_PHASE] >= task.replicas:
        return [Event(TASK_COMPLETED, task.name)]
    if phases[POD_FAILED_PHASE] and phases[POD_FAILED_PHASE] > task.replicas - task.min_available:
        return [Event(TASK_FAILED, task.name)]
    restarts = sum(p.restarts for p in mine if p.phase in (POD_PENDING_PHASE, POD_RUNNING_PHASE))
    if restarts and restarts >= task.max_retry:
        return [Event(TASK_FAILED, task.name)]
    return []


def first_action(job: Job, pods: Sequence[PodFacts], now: datetime) -> tuple[str, Event] | None:
    """The first event (pods in order, then tasks) whose policy asks for an action."""
    events = [e for pod in pods for e in pod_events(pod, now)]
    events += [e for task in job.tasks for e in task_events(task, pods)]
    for event in events:
        action = resolve_action(job, event)
        if action:
            return action, event
    return None


def next_pending_timeout(job: Job, pods: Sequence[PodFacts], now: datetime) -> float | None:
    """Seconds until the next PodPending timeout would fire, to requeue then."""
    waits: list[float] = []
    for pod in pods:
        if pod.phase != POD_PENDING_PHASE or pod.deleting or pod.created is None:
            continue
        task = job.task(pod.task) if pod.task else None
        for policy in (*(task.policies if task else ()), *job.policies):
            if policy.timeout_seconds is not None and policy.matches_event(POD_PENDING):
                waits.append(policy.timeout_seconds - (now - pod.created).total_seconds())
    remaining = [w for w in waits if w > 0]
    return min(remaining) if remaining else None


# --- the state machine --------------------------------------------------------------------------


@dataclass(slots=True)
class _Plan:
    """The mutable working state of one decision."""

    phase: JobPhase
    reason: str = ""
    message: str = ""
    retry_count: int = 0
    version: int = 0
    deletions: dict[str, str] = field(default_factory=dict)
    may_create: bool = False
    command_consumed: bool = False
    action: str | None = None
    # While Restarting: the pods the restart deletes (status.restartingPods).
    restart_targets: tuple[str, ...] = ()

    def move(self, phase: JobPhase, reason: str, message: str = "") -> None:
        self.phase, self.reason, self.message = phase, reason, message

    def delete(self, pods: Iterable[PodFacts], reason: str) -> None:
        for pod in pods:
            if not pod.deleting:
                self.deletions.setdefault(pod.name, reason)

    def restart(self, reason: str, message: str, pods: Sequence[PodFacts]) -> None:
        """Enter Restarting, deleting `pods` now and, until they are gone, on every later step."""
        self.move(JobPhase.RESTARTING, reason, message)
        self.restart_targets = tuple(pod.name for pod in pods)
        self.delete(pods, reason)


def _unfinished(pods: Iterable[PodFacts]) -> list[PodFacts]:
    return [p for p in pods if p.phase not in POD_FINISHED_PHASES]


def _restart_targets(action: str, event: Event, pods: Sequence[PodFacts]) -> list[PodFacts]:
    if action == RESTART_POD and event.pod:
        return [p for p in pods if p.name == event.pod]
    if action == RESTART_TASK and event.task:
        return [p for p in pods if p.task == event.task]
    return list(pods)


def _apply_action(plan: _Plan, job: Job, action: str, event: Event | None, pods: Sequence[PodFacts]) -> None:
    """An action in Pending or Running (Volcano's pendingState/runningState Execute)."""
    why = event.describe() if event else "command"
    if action in RESTART_ACTIONS:
        plan.action = action
        if plan.retry_count >= job.max_retry:
            plan.move(
                JobPhase.FAILED,
                "MaxRetryExceeded",
                f"{why}: {action} refused after {plan.retry_count} of {job.max_retry} retries",
            )
            plan.delete(_unfinished(pods), "JobFailed")
            return
        plan.retry_count += 1
        if action == RESTART_JOB:
            plan.version += 1
        plan.restart(action, why, _restart_targets(action, event, pods) if event else list(pods))
    elif action in STOPPING_ACTIONS:
        plan.action = action
        plan.move(STOPPING_ACTIONS[action], action, why)
        plan.delete(_unfinished(pods), action)


def _dependencies_met(job: Job, task: TaskSpec, pods: Sequence[PodFacts]) -> bool:
    """Volcano's dependsOn: a dependency is met once minAvailable of its pods succeeded or run
    with every container ready."""
    if task.depends_on is None:
        return True

    def ready(name: str) -> bool:
        dependency = job.task(name)
        if dependency is None:
            return False
        started = sum(
            1
            for p in pods
            if p.task == name
            and not p.deleting
            and (p.phase == POD_SUCCEEDED_PHASE or (p.phase == POD_RUNNING_PHASE and p.ready))
        )
        return started >= dependency.min_available

    check = any if task.depends_on.iteration == "any" else all
    return check(ready(name) for name in task.depends_on.names)


def runnable_tasks(job: Job, pods: Sequence[PodFacts]) -> frozenset[str]:
    """The tasks whose pods may exist now: those whose dependencies are met, and those that have
    pods already (created when their dependencies were met). The PodGroup's gang counts these
    only, so a task waiting for another is not demanded before it can be created."""
    with_pods = {p.task for p in pods if not p.deleting}
    return frozenset(t.name for t in job.tasks if t.name in with_pods or _dependencies_met(job, t, pods))


def _pods_to_create(
    job: Job, pods: Sequence[PodFacts], retry_count: int, mutators: Sequence[PodMutator]
) -> list[dict[str, Any]]:
    existing = {p.name for p in pods}
    ready_tasks = {t.name for t in job.tasks if _dependencies_met(job, t, pods)}
    return [
        pod
        for name, pod in desired_pods(job, retry_count, mutators).items()
        if name not in existing and (pod["metadata"]["labels"][TASK_SPEC_KEY] in ready_tasks)
    ]


def _sync_running(
    plan: _Plan, job: Job, counts: Mapping[str, int], task_counts: Mapping[str, Mapping[str, Mapping[str, int]]]
) -> None:
    """Volcano's runningState sync: minSuccess, then the verdict once every pod finished."""
    succeeded, failed = counts["succeeded"], counts["failed"]
    if job.min_success is not None and succeeded >= job.min_success:
        plan.move(JobPhase.COMPLETED, "MinSuccess", f"{succeeded} pods succeeded (minSuccess {job.min_success})")
        return
    if succeeded + failed < job.total_replicas or job.total_replicas == 0:
        if counts["pending"] > job.total_replicas - job.min_available:
            plan.move(JobPhase.PENDING, "PodsPending", f"{counts['pending']} pods pending")
        return
    short = [
        t.name
        for t in job.tasks
        if task_counts.get(t.name, {}).get("phase", {}).get(POD_SUCCEEDED_PHASE, 0) < t.min_available
    ]
    if short:
        plan.move(JobPhase.FAILED, "TaskMinAvailable", f"tasks below minAvailable successes: {', '.join(short)}")
    elif job.min_success is not None:
        plan.move(JobPhase.FAILED, "MinSuccess", f"{succeeded} of minSuccess {job.min_success} pods succeeded")
    elif succeeded >= job.min_available:
        plan.move(JobPhase.COMPLETED, "Completed", f"{succeeded} pods succeeded")
    else:
        plan.move(JobPhase.FAILED, "Failed", f"{succeeded} of minAvailable {job.min_available} pods succeeded")


def _finish_time(job: Job) -> datetime | None:
    state = (job.raw.get("status") or {}).get(STATUS_STATE) or {}
    return parse_time(state.get(STATE_LAST_TRANSITION))


def next_state(
    job_obj: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    podgroup: Mapping[str, Any] | None,
    now: datetime,
    *,
    command: str | None = None,
    admission_required: bool = True,
    mutators: Sequence[PodMutator] = (),
    queue_state: str | None = QueueState.OPEN.value,
) -> Decision:
    """One step of the Job state machine. `command` is a user request (AbortJob, ResumeJob,
    ...; e.g. from `lahar job suspend|resume`); `admission_required=False` creates pods without
    waiting for the PodGroup to be Inqueue; `queue_state` is the state of the job's queue, None
    when the queue does not exist."""
    job = Job.from_dict(job_obj)
    status = job.raw.get("status") or {}
    facts = sorted((PodFacts.of(p) for p in pods), key=_pod_order(job))
    plan = _Plan(
        job.phase,
        (status.get(STATUS_STATE) or {}).get("reason", ""),
        (status.get(STATUS_STATE) or {}).get("message", ""),
        status.get(STATUS_RETRY_COUNT) or 0,
        status.get(STATUS_VERSION) or 0,
    )
    # A command is used once, acted on or not where its phase has no use for it (Volcano deletes
    # its Command object either way): a leftover ResumeJob must not resume a later abort.
    plan.command_consumed = command is not None
    counts = count_pods(facts)
    task_counts = count_tasks(facts)
    requeue: float | None = None
    delete_job = False

    if job.phase in FINISHED_PHASES:
        plan.delete(_unfinished(facts), f"Job{job.phase.value}")
        delete_job, requeue = _ttl(job, now)
    elif job.phase in WINDING_DOWN:
        if command == RESUME_JOB and job.phase == JobPhase.ABORTING:
            _resume(plan, facts)
        else:
            plan.delete(_unfinished(facts), plan.reason or job.phase.value)
            if not _unfinished(facts) and counts["terminating"] == 0:
                plan.move(WINDING_DOWN[job.phase], plan.reason, plan.message)
    elif job.phase == JobPhase.ABORTED:
        if command == RESUME_JOB:
            _resume(plan, facts)
    elif job.phase == JobPhase.RESTARTING:
        # Deletions that failed last time are issued again; gone or terminating pods are skipped.
        plan.restart_targets = tuple(status.get(STATUS_RESTARTING_PODS) or ())
        plan.delete((p for p in facts if p.name in plan.restart_targets), plan.reason)
        if not plan.deletions and counts["terminating"] == 0:
            plan.move(JobPhase.PENDING, "Restarted", plan.message)
    else:  # Pending or Running
        _step_active(plan, job, facts, counts, task_counts, now, command, podgroup)
        if plan.phase in (JobPhase.PENDING, JobPhase.RUNNING):
            requeue = next_pending_timeout(job, facts, now)
            plan.delete((p for p in facts if _beyond_replicas(job, p)), "ScaledDown")
            admitted = podgroup is not None and _podgroup_phase(podgroup) in ADMITTED_PODGROUP_PHASES
            plan.may_create = admitted or not admission_required
        if plan.phase == JobPhase.PENDING:
            _hold_for_queue(plan, job.queue, queue_state)

    pods_to_create = _pods_to_create(job, facts, plan.retry_count, mutators) if plan.may_create else []
    decision = _decision(job, plan, shown_counts(facts), task_counts, pods_to_create, delete_job, requeue, now)
    return replace(decision, runnable_tasks=runnable_tasks(job, facts))


def _resume(plan: _Plan, facts: Sequence[PodFacts]) -> None:
    """ResumeJob on an Aborting or Aborted job: start over from no pods (not a retry)."""
    plan.action = RESUME_JOB
    plan.restart(RESUME_JOB, "command", facts)


def queue_hold(queue: str, queue_state: str | None) -> tuple[str, str] | None:
    """(reason, message) when a Pending job of `queue` must not start, else None."""
    if queue_state is None:
        return QUEUE_NOT_FOUND, f'queue "{queue}" does not exist; the job waits until it is created'
    if queue_state != QueueState.OPEN.value:
        return QUEUE_NOT_OPEN, f'queue "{queue}" is {queue_state}; the job waits until it is opened'
    return None


def _hold_for_queue(plan: _Plan, queue: str, queue_state: str | None) -> None:
    hold = queue_hold(queue, queue_state)
    if hold is not None:
        plan.move(JobPhase.PENDING, *hold)
        plan.may_create = False
    elif plan.reason in QUEUE_HOLD_REASONS:  # released: say so, rather than keep the stale reason
        plan.move(JobPhase.PENDING, QUEUE_OPENED, f'queue "{queue}" is Open')


def _step_active(
    plan: _Plan,
    job: Job,
    facts: Sequence[PodFacts],
    counts: Mapping[str, int],
    task_counts: Mapping[str, Mapping[str, Mapping[str, int]]],
    now: datetime,
    command: str | None,
    podgroup: Mapping[str, Any] | None,
) -> None:
    if command and command != RESUME_JOB:  # nothing to resume in Pending/Running
        _apply_action(plan, job, command, None, facts)
        return
    found = first_action(job, facts, now)
    if found:
        _apply_action(plan, job, found[0], found[1], facts)
        if plan.phase != job.phase or plan.deletions:
            return
    started = counts["running"] + counts["succeeded"] + counts["failed"]
    if job.phase == JobPhase.PENDING:
        if started >= job.min_available:
            plan.move(JobPhase.RUNNING, "MinAvailable", f"{started} of minAvailable {job.min_available} pods started")
        elif (why := unschedulable_message(podgroup)) is not None:
            plan.move(JobPhase.PENDING, UNSCHEDULABLE_REASON, why)
    else:
        _sync_running(plan, job, counts, task_counts)


def _pod_order(job: Job):
    order = {task.name: position for position, task in enumerate(job.tasks)}
    return lambda pod: (order.get(pod.task or "", len(order)), pod.index or 0, pod.name)


def _beyond_replicas(job: Job, pod: PodFacts) -> bool:
    task = job.task(pod.task) if pod.task else None
    return task is not None and pod.index is not None and pod.index >= task.replicas


def _podgroup_phase(podgroup: Mapping[str, Any]) -> PodGroupPhase:
    phase = (podgroup.get("status") or {}).get("phase") or PodGroupPhase.PENDING
    return PodGroupPhase(phase) if phase in PodGroupPhase._value2member_map_ else PodGroupPhase.UNKNOWN


def _ttl(job: Job, now: datetime) -> tuple[bool, float | None]:
    """(delete now, seconds until deletion) for a finished job with ttlSecondsAfterFinished."""
    finished = _finish_time(job)
    if job.ttl_seconds_after_finished is None or finished is None:
        return False, None
    remaining = job.ttl_seconds_after_finished - (now - finished).total_seconds()
    return (True, None) if remaining <= 0 else (False, remaining)


def _decision(
    job: Job,
    plan: _Plan,
    counts: dict[str, int],
    task_counts: dict[str, dict[str, dict[str, int]]],
    pods_to_create: list[dict[str, Any]],
    delete_job: bool,
    requeue: float | None,
    now: datetime,
) -> Decision:
    previous = job.raw.get("status") or {}
    old_state = previous.get(STATUS_STATE) or {}
    # A new phase, or the same phase for a new reason (a queue hold starting or ending).
    changed = (
        not old_state
        or plan.phase != job.phase
        or (plan.reason, plan.message) != (old_state.get("reason", ""), old_state.get("message", ""))
    )
    stamp = format_time(now)
    state = job_state(plan.phase, plan.reason, plan.message, stamp) if changed else dict(old_state)
    # A condition per new phase or reason; a new message alone (the scheduler's word on an
    # unschedulable gang changes as the cluster does) updates the state only.
    new_reason = not old_state or plan.phase != job.phase or plan.reason != old_state.get("reason", "")
    conditions = [_condition(plan, stamp)] if new_reason else []
    status: dict[str, Any] = {
        STATUS_STATE: state,
        STATUS_MIN_AVAILABLE: job.min_available,
        **counts,
        STATUS_VERSION: plan.version,
        STATUS_RETRY_COUNT: plan.retry_count,
        STATUS_TASK_STATUS_COUNT: task_counts,
        STATUS_CONDITIONS: [*(previous.get(STATUS_CONDITIONS) or ()), *conditions],
    }
    if plan.phase == JobPhase.RESTARTING:
        status[STATUS_RESTARTING_PODS] = list(plan.restart_targets)
    return Decision(
        phase=plan.phase,
        reason=plan.reason,
        message=plan.message,
        counters=counts,
        task_status_count=task_counts,
        retry_count=plan.retry_count,
        version=plan.version,
        pods_to_create=pods_to_create,
        pods_to_delete=[PodDeletion(name, why) for name, why in plan.deletions.items()],
        new_conditions=conditions,
        delete_job=delete_job,
        command_consumed=plan.command_consumed,
        requeue_after=requeue,
        action=plan.action,
        retry_incremented=plan.retry_count > (previous.get(STATUS_RETRY_COUNT) or 0),
        status=status,
    )


def _condition(plan: _Plan, stamp: str) -> dict[str, str]:
    """Volcano's JobCondition (status = the phase, lastTransitionTime), with the reason and
    message when there are some, so the history says why as well as when."""
    condition = {"status": plan.phase.value, "lastTransitionTime": stamp}
    if plan.reason:
        condition["reason"] = plan.reason
    if plan.message:
        condition["message"] = plan.message
    return condition
