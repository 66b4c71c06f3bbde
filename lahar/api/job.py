"""Volcano's batch Job (`batch.volcano.sh/v1alpha1`): typed views, Volcano's mutating-webhook
defaults, the validating-webhook rules (each error naming its field), and the status layout the
controller writes (`status.state.phase`, pod counters).

Where Volcano's behaviour is kept on purpose:
- a task without a name is named `default<i>`; a task without replicas has 0 (Go's zero value);
  a task's minAvailable defaults to its replicas (with a `partitionPolicy` giving
  minPartitions: minPartitions × partitionSize), the job's to the sum of the tasks';
- a task's `partitionPolicy` (totalPartitions × partitionSize = replicas, minPartitions,
  networkTopology) splits its pods into partitions, each a sub-job of the Job's PodGroup
  (`subGroupPolicy`, docs/scheduler.md "Sub-jobs"); the controller labels each pod with its
  partition (`volcano.sh/partition-id`, index // partitionSize);
- `event` and `events` may both be given in one policy (Volcano merges them); `exitCode` excludes
  both.
Where Lahar differs:
- defaults fill absent fields only; Volcano also overwrites an explicit `maxRetry: 0` or
  `minAvailable: 0`, which made "no retries" impossible to ask for;
- an update may change only Volcano's mutable fields (minAvailable, maxRetry,
  priorityClassName, tasks[*].replicas/minAvailable/maxRetry) plus `ttlSecondsAfterFinished`,
  which only affects clean-up; tasks may not be added or removed (MUTABLE_SPEC_FIELDS,
  MUTABLE_TASK_FIELDS).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lahar.api.errors import (
    DUPLICATE,
    FORBIDDEN,
    NOT_SUPPORTED,
    TOO_LONG,
    Field,
    FieldError,
    child_dict,
    dict_elements,
    json_copy,
    set_default,
)
from lahar.api.goflags import PLUGIN_FLAGS, plugin_flags
from lahar.api.meta import MetaAccessors, ObjectMeta, check_name, dns1123_label_problems, dns1123_subdomain_problems
from lahar.api.pod import validate_pod_template
from lahar.api.podgroup import validate_network_topology
from lahar.api.queue import DEFAULT_QUEUE

DEFAULT_SCHEDULER_NAME = "lahar"
DEFAULT_MAX_RETRY = 3
DEFAULT_TASK_NAME_PREFIX = "default"
# Volcano labels every pod with the job name, so it must fit in a label value.
JOB_NAME_MAX = 63
# Pods one Job may ask for: Kubernetes refuses an Indexed Job that runs more than 100,000 pods at once
# (maxParallelismForIndexedJob); past that a controller spends its time making pods, not reconciling.
MAX_TOTAL_REPLICAS = 100_000

KNOWN_PLUGINS = tuple(PLUGIN_FLAGS)
# Volcano's mutating webhook: these plugins find peers by the svc plugin's names (and mpi by ssh).
PLUGINS_NEEDING_SVC = ("pytorch", "tensorflow", "mpi", "ray")
PLUGINS_NEEDING_SSH = ("mpi",)
# The role task a plugin cannot work without: (plugin, the flag naming it).
PLUGIN_REQUIRED_TASKS = (("mpi", "master"), ("ray", "head"))
ANY_EVENT = "*"
# Volcano's policy events and actions open to users (its webhook's policyEventMap/ActionMap).
# JobUpdated is accepted as Volcano accepts it; neither Volcano's controller nor Lahar's raises it.
EVENTS = ("PodFailed", "PodEvicted", "PodPending", "TaskCompleted", "TaskFailed", "Unknown", "JobUpdated", ANY_EVENT)
ACTIONS = ("AbortJob", "RestartJob", "RestartTask", "RestartPod", "TerminateJob", "CompleteJob", "ResumeJob")
# Events and actions the controller uses internally; Volcano's webhook refuses them in policies.
INTERNAL_EVENTS = ("OutOfSync", "CommandIssued", "PodRunning")
INTERNAL_ACTIONS = ("SyncJob", "EnqueueJob", "SyncQueue", "OpenQueue", "CloseQueue")
# The event whose policy is meaningless without a timeout (how long is "pending too long").
TIMED_EVENT = "PodPending"
# A user's command to a Job's controller (`lahar job suspend|resume`, the federation's member
# fence): the annotation's value is an action, AbortJob or ResumeJob; the controller removes it.
COMMAND_ANNOTATION = "lahar.dev/command"
ABORT_JOB = "AbortJob"
TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
DEPENDS_ON_ITERATIONS = ("any", "all")

# Fields an update may change; everything else under spec is fixed once the job exists.
MUTABLE_SPEC_FIELDS = frozenset({"minAvailable", "maxRetry", "priorityClassName", "ttlSecondsAfterFinished"})
MUTABLE_TASK_FIELDS = frozenset({"replicas", "minAvailable", "maxRetry"})


# --- status layout --------------------------------------------------------------------------


class JobPhase(enum.StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    COMPLETING = "Completing"
    COMPLETED = "Completed"
    ABORTING = "Aborting"
    ABORTED = "Aborted"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"
    FAILED = "Failed"


# Volcano's finishedState: nothing brings a job back from these (Aborted can be resumed).
FINISHED_PHASES = frozenset({JobPhase.COMPLETED, JobPhase.FAILED, JobPhase.TERMINATED})

# status: {state: {phase, reason, message, lastTransitionTime}, minAvailable, pending, running,
#          succeeded, failed, terminating, unknown, version, retryCount, taskStatusCount,
#          conditions}
STATUS_STATE = "state"
STATE_PHASE = "phase"
STATE_REASON = "reason"
STATE_MESSAGE = "message"
STATE_LAST_TRANSITION = "lastTransitionTime"
STATUS_MIN_AVAILABLE = "minAvailable"
STATUS_RETRY_COUNT = "retryCount"
STATUS_VERSION = "version"
STATUS_TASK_STATUS_COUNT = "taskStatusCount"
STATUS_CONDITIONS = "conditions"
POD_COUNTERS = ("pending", "running", "succeeded", "failed", "terminating", "unknown")


def job_phase(job: Mapping[str, Any]) -> JobPhase:
    """`status.state.phase`; Pending until the controller first writes it."""
    state = (job.get("status") or {}).get(STATUS_STATE) or {}
    phase = state.get(STATE_PHASE)
    return JobPhase(phase) if isinstance(phase, str) and phase in JobPhase._value2member_map_ else JobPhase.PENDING


def job_state(
    phase: JobPhase, reason: str = "", message: str = "", transition_time: str | None = None
) -> dict[str, Any]:
    """A `status.state` value."""
    state: dict[str, Any] = {STATE_PHASE: phase.value}
    if reason:
        state[STATE_REASON] = reason
    if message:
        state[STATE_MESSAGE] = message
    if transition_time:
        state[STATE_LAST_TRANSITION] = transition_time
    return state


# --- durations --------------------------------------------------------------------------------

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# Longer units first so "ms" is not read as "m" followed by garbage.
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """A Go duration ("30s", "10m", "1h30m", "1.5h", "-2m", "0") in seconds; ValueError otherwise."""
    body = text[1:] if text[:1] in ("+", "-") else text
    sign = -1.0 if text.startswith("-") else 1.0
    if body == "0":
        return 0.0
    total, position = 0.0, 0
    while position < len(body):
        part = _DURATION_PART.match(body, position)
        if part is None:
            break
        total += float(part.group(1)) * _DURATION_UNITS[part.group(2)]
        position = part.end()
    if not body or position != len(body):
        raise ValueError(f'invalid duration "{text}": expected a Go duration such as "30s", "10m" or "1h30m"')
    return sign * total


# --- views ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LifecyclePolicy:
    action: str
    events: tuple[str, ...] = ()
    exit_code: int | None = None
    timeout_seconds: float | None = None

    @classmethod
    def from_dict(cls, policy: Mapping[str, Any]) -> LifecyclePolicy:
        timeout = policy.get("timeout")
        return cls(
            policy.get("action", ""),
            _policy_events(policy),
            policy.get("exitCode"),
            parse_duration(timeout) if timeout else None,
        )

    def matches_event(self, event: str) -> bool:
        return event in self.events or ANY_EVENT in self.events


def _policy_events(policy: Mapping[str, Any]) -> tuple[str, ...]:
    """`event` and `events` merged, without repeats (as Volcano's getEventList)."""
    events = [*(policy.get("events") or ()), *([policy["event"]] if policy.get("event") else [])]
    return tuple(dict.fromkeys(events))


@dataclass(frozen=True, slots=True)
class DependsOn:
    names: tuple[str, ...]
    iteration: str = "all"

    @classmethod
    def from_dict(cls, depends_on: Mapping[str, Any]) -> DependsOn:
        return cls(tuple(depends_on.get("name") or ()), depends_on.get("iteration") or "all")


@dataclass(frozen=True, slots=True)
class PartitionPolicy:
    """A task's `partitionPolicy` (Volcano's): its pods in `total` partitions of `size` pods, at
    least `minimum` of them needed (0: no minimum), each within `topology` when given."""

    total: int
    size: int
    minimum: int
    topology: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, policy: Mapping[str, Any]) -> PartitionPolicy:
        topology = policy.get("networkTopology")
        return cls(
            total=policy.get("totalPartitions") or 0,
            size=policy.get("partitionSize") or 0,
            minimum=policy.get("minPartitions") or 0,
            topology=topology if isinstance(topology, Mapping) else None,
        )

    def partition_of(self, index: int) -> int:
        """The partition of the task's pod at `index` (Volcano's index / partitionSize)."""
        return index // self.size if self.size > 0 else 0


def task_min_available_default(replicas: Any, partition: Any) -> Any:
    """A task's minAvailable when it gives none (Volcano's mutating webhook): minPartitions ×
    partitionSize when its partitionPolicy sets minPartitions, else its replicas."""
    if isinstance(partition, Mapping):
        minimum, size = partition.get("minPartitions"), partition.get("partitionSize")
        if isinstance(minimum, int) and isinstance(size, int) and minimum > 0:
            return minimum * size
    return replicas


@dataclass(frozen=True, slots=True)
class TaskSpec:
    name: str
    replicas: int
    min_available: int
    max_retry: int
    template: Mapping[str, Any] = field(compare=False, repr=False)
    policies: tuple[LifecyclePolicy, ...] = ()
    depends_on: DependsOn | None = None
    topology_policy: str = ""
    partition: PartitionPolicy | None = None

    @classmethod
    def from_dict(cls, task: Mapping[str, Any], index: int) -> TaskSpec:
        replicas = task.get("replicas") or 0
        min_available = task.get("minAvailable")
        depends_on = task.get("dependsOn")
        partition = task.get("partitionPolicy")
        return cls(
            name=task.get("name") or f"{DEFAULT_TASK_NAME_PREFIX}{index}",
            replicas=replicas,
            min_available=task_min_available_default(replicas, partition) if min_available is None else min_available,
            max_retry=task.get("maxRetry", DEFAULT_MAX_RETRY),
            template=task.get("template") or {},
            policies=tuple(LifecyclePolicy.from_dict(p) for p in task.get("policies") or ()),
            depends_on=DependsOn.from_dict(depends_on) if depends_on else None,
            topology_policy=task.get("topologyPolicy") or "",
            partition=PartitionPolicy.from_dict(partition) if isinstance(partition, Mapping) else None,
        )


@dataclass(frozen=True, slots=True)
class Job(MetaAccessors):
    """A typed, read-only snapshot of a (valid) Job dict."""

    meta: ObjectMeta = field(compare=False)
    scheduler_name: str
    queue: str
    min_available: int
    max_retry: int
    priority_class_name: str
    min_success: int | None
    ttl_seconds_after_finished: int | None
    plugins: Mapping[str, tuple[str, ...]]
    policies: tuple[LifecyclePolicy, ...]
    tasks: tuple[TaskSpec, ...]
    phase: JobPhase
    raw: Mapping[str, Any] = field(compare=False, repr=False)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Job:
        spec = obj.get("spec") or {}
        tasks = tuple(TaskSpec.from_dict(t, i) for i, t in enumerate(spec.get("tasks") or ()))
        min_available = spec.get("minAvailable")
        return cls(
            meta=ObjectMeta.of(obj),
            scheduler_name=spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME,
            queue=spec.get("queue") or DEFAULT_QUEUE,
            min_available=sum(t.min_available for t in tasks) if min_available is None else min_available,
            max_retry=spec.get("maxRetry", DEFAULT_MAX_RETRY),
            priority_class_name=spec.get("priorityClassName") or "",
            min_success=spec.get("minSuccess"),
            ttl_seconds_after_finished=spec.get("ttlSecondsAfterFinished"),
            plugins={name: tuple(args or ()) for name, args in (spec.get("plugins") or {}).items()},
            policies=tuple(LifecyclePolicy.from_dict(p) for p in spec.get("policies") or ()),
            tasks=tasks,
            phase=job_phase(obj),
            raw=obj,
        )

    @property
    def total_replicas(self) -> int:
        return sum(task.replicas for task in self.tasks)

    @property
    def is_finished(self) -> bool:
        return self.phase in FINISHED_PHASES

    def task(self, name: str) -> TaskSpec | None:
        return next((task for task in self.tasks if task.name == name), None)


# --- defaults ---------------------------------------------------------------------------------


def _default_task(task: dict[str, Any], index: int) -> None:
    if not task.get("name"):
        task["name"] = f"{DEFAULT_TASK_NAME_PREFIX}{index}"
    set_default(task, "replicas", 0)
    if isinstance(task["replicas"], int):
        set_default(task, "minAvailable", task_min_available_default(task["replicas"], task.get("partitionPolicy")))
    set_default(task, "maxRetry", DEFAULT_MAX_RETRY)
    pod_spec = child_dict(child_dict(task, "template"), "spec")
    # Volcano: host-network pods still resolve cluster names.
    if pod_spec is not None and pod_spec.get("hostNetwork") is True:
        set_default(pod_spec, "dnsPolicy", "ClusterFirstWithHostNet")


def _default_plugins(spec: dict[str, Any]) -> None:
    """Volcano's patchDefaultPlugins: svc for the framework plugins, ssh for mpi."""
    plugins = spec.get("plugins")
    if not isinstance(plugins, dict):
        return
    for needed, users in (("svc", PLUGINS_NEEDING_SVC), ("ssh", PLUGINS_NEEDING_SSH)):
        if needed not in plugins and any(user in plugins for user in users):
            plugins[needed] = []


def _sum_of_ints(values: list[Any]) -> int | None:
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        total: int = sum(values)
        return total
    return None


def defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A defaulted copy of a Job (Volcano's mutating webhook, filling absent fields only)."""
    result = json_copy(obj)
    spec = child_dict(result, "spec")
    if spec is None:
        return result
    for key, default in (("schedulerName", DEFAULT_SCHEDULER_NAME), ("queue", DEFAULT_QUEUE)):
        if not spec.get(key):
            spec[key] = default
    set_default(spec, "maxRetry", DEFAULT_MAX_RETRY)
    _default_plugins(spec)
    tasks = list(dict_elements(spec.get("tasks")))
    for index, task in enumerate(tasks):
        _default_task(task, index)
    # The job's minimum is the tasks' sum, when every task is well-formed enough to have one.
    if spec.get("minAvailable") is None and tasks and len(tasks) == len(spec["tasks"]):
        total = _sum_of_ints([t.get("minAvailable") for t in tasks])
        if total is not None:
            spec["minAvailable"] = total
    return result


# --- validation -------------------------------------------------------------------------------


def validate_policies(policies: Field) -> None:
    """A lifecycle policy list (the job's or one task's): each policy names events or an exit
    code and a known action; an event or exit code appears once per list; `*` stands alone."""
    seen_events: set[str] = set()
    seen_exit_codes: set[int] = set()
    for policy in policies.elements():
        _validate_policy(policy, seen_events, seen_exit_codes)
    if ANY_EVENT in seen_events and len(seen_events) > 1:
        policies.report(f'"{ANY_EVENT}" cannot be combined with other events')


def _event_fields(policy: Field) -> list[Field]:
    event = policy.child("event")
    listed = [event] if event.as_str() else []
    return listed + [e for e in policy.child("events").elements() if e.as_str() is not None]


def _validate_policy(policy: Field, seen_events: set[str], seen_exit_codes: set[int]) -> None:
    if policy.as_mapping() is None:
        return
    events = _event_fields(policy)
    exit_code = policy.child("exitCode")
    if events and exit_code.present:
        policy.report("must not specify event(s) and exitCode together", FORBIDDEN)
    elif not events and not exit_code.present:
        policy.required("one of event, events or exitCode is required")

    own_events: set[str] = set()
    for event in events:
        name = event.value
        if name in own_events:
            continue  # repeated within one policy: Volcano merges these
        own_events.add(name)
        if name in INTERNAL_EVENTS:
            event.report(f'"{name}" is an event internal to the controller; a policy cannot use it', NOT_SUPPORTED)
        elif name not in EVENTS:
            event.not_supported(name, EVENTS, "policy event")
        elif name in seen_events:
            event.report(f'duplicate policy event "{name}"', DUPLICATE)
        seen_events.add(name)

    code = exit_code.as_int()
    if code == 0:
        exit_code.report("0 is not a valid exit code (it means success)")
    elif code is not None:
        if code in seen_exit_codes:
            exit_code.report(f"duplicate policy exitCode {code}", DUPLICATE)
        seen_exit_codes.add(code)

    action = policy.child("action")
    name = action.require_str()
    if name in INTERNAL_ACTIONS:
        action.report(f'"{name}" is an action internal to the controller; a policy cannot use it', NOT_SUPPORTED)
    elif name:
        action.as_choice(ACTIONS, "policy action")
    _validate_timeout(policy.child("timeout"), TIMED_EVENT in own_events)


def _validate_timeout(timeout: Field, required: bool) -> None:
    text = timeout.as_str()
    if not text:
        if required:
            timeout.required(f'is required for the "{TIMED_EVENT}" event')
        return
    try:
        seconds = parse_duration(text)
    except ValueError as error:
        timeout.report(str(error))
        return
    if seconds < 0:
        timeout.report(f'must not be negative, got "{text}"')


@dataclass
class _TaskFacts:
    """What the job-level rules need to know about one task, once it is validated."""

    field: Field
    name: str | None
    replicas: int | None
    depends_on: list[tuple[str, Field]]


def _validate_task(task: Field, seen_names: set[str]) -> _TaskFacts:
    name = task.child("name")
    name_value = name.require_str()
    if name_value is not None:
        check_name(name, dns1123_label_problems)
        if name_value in seen_names:
            name.report(f'duplicate task name "{name_value}"', DUPLICATE)
        seen_names.add(name_value)

    replicas = task.child("replicas").as_int(minimum=0)
    replicas = 0 if replicas is None and not task.child("replicas").present else replicas
    min_available = task.child("minAvailable")
    min_value = min_available.as_int(minimum=0)
    if min_value is not None and replicas is not None and min_value > replicas:
        min_available.report(f"minAvailable ({min_value}) must not be greater than replicas ({replicas})")
    task.child("maxRetry").as_int(minimum=0)
    task.child("topologyPolicy").as_choice(TOPOLOGY_POLICIES, "topology policy")
    _validate_partition_policy(task.child("partitionPolicy"), replicas, min_value if min_available.present else None)
    validate_pod_template(task.child("template"))
    validate_policies(task.child("policies"))
    return _TaskFacts(task, name_value, replicas, _depends_on(task.child("dependsOn")))


def _validate_partition_policy(policy: Field, replicas: int | None, min_available: int | None) -> None:
    """Volcano's rules (validatePartitionPolicy): totalPartitions and partitionSize at least 1,
    their product the task's replicas; minPartitions at least 0 and, when above 0 and the task
    gives minAvailable, minPartitions × partitionSize equal to it; networkTopology as the job's."""
    if not policy.present or policy.as_mapping() is None:
        return
    counts = {}
    for key, least in (("totalPartitions", 1), ("partitionSize", 1), ("minPartitions", 0)):
        count = policy.child(key)
        if key != "minPartitions" and not count.require_present():
            continue
        counts[key] = count.as_int(minimum=least)
    total, size, minimum = counts.get("totalPartitions"), counts.get("partitionSize"), counts.get("minPartitions")
    if total is not None and size is not None and replicas is not None and total * size != replicas:
        policy.report(f"totalPartitions * partitionSize ({total} * {size}) must equal replicas ({replicas})")
    if minimum and size is not None:
        if total is not None and minimum > total:
            policy.child("minPartitions").report(f"must not be greater than totalPartitions ({total})")
        elif min_available is not None and minimum * size != min_available:
            policy.report(
                f"minPartitions * partitionSize ({minimum} * {size})"
                f" must equal the task's minAvailable ({min_available})"
            )
    validate_network_topology(policy.child("networkTopology"))


def _depends_on(depends_on: Field) -> list[tuple[str, Field]]:
    if depends_on.as_mapping() is None:
        return []
    depends_on.child("iteration").as_choice(DEPENDS_ON_ITERATIONS, "iteration")
    names = depends_on.child("name")
    names.require_nonempty_list("at least one task name is required")
    return [(n.value, n) for n in names.elements() if n.as_str() is not None]


def _validate_dependencies(tasks: list[_TaskFacts]) -> None:
    """dependsOn names other tasks of the job, and the dependencies form no cycle."""
    known = {t.name for t in tasks if t.name is not None}
    graph: dict[str, list[str]] = {}
    for task in tasks:
        for target, target_field in task.depends_on:
            if target == task.name:
                target_field.report("a task cannot depend on itself")
            elif target not in known:
                target_field.report(f'unknown task "{target}"')
            elif task.name is not None:
                graph.setdefault(task.name, []).append(target)
    cycle = find_cycle(graph)
    if cycle:
        first = next(t for t in tasks if t.name == cycle[0])
        first.field.child("dependsOn").report(f"dependency cycle: {' -> '.join(cycle)}")


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (depth-first, three colours)."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for successor in graph.get(node, ()):
            found = visit(successor, path)
            if found:
                return found
        path.pop()
        done.add(node)
        return None

    for start in graph:
        found = visit(start, [])
        if found:
            return found
    return None


def _validate_plugins(plugins: Field, task_names: set[str]) -> None:
    """Known plugin names with string arguments; mpi's master task (Volcano's webhook) and
    ray's head task (without which Volcano fails every pod creation) must exist."""
    for name, arguments in plugins.entries():
        if name not in KNOWN_PLUGINS:
            arguments.not_supported(name, KNOWN_PLUGINS, "job plugin")
        args = arguments.as_str_list()
        for plugin, flag in PLUGIN_REQUIRED_TASKS:
            if name == plugin and args is not None:
                role = str(plugin_flags(plugin, args)[flag])
                if role not in task_names:
                    arguments.report(f'the {plugin} plugin\'s {flag} task "{role}" is not a task of this job')


def _validate_totals(spec: Field, total: int | None) -> None:
    """minAvailable and minSuccess against the job's total replicas (when every count is valid),
    and the total within MAX_TOTAL_REPLICAS."""
    if total is not None and total > MAX_TOTAL_REPLICAS:
        spec.child("tasks").report(
            f"the total replicas ({total}) must be at most {MAX_TOTAL_REPLICAS}, "
            "as Kubernetes bounds an Indexed Job's parallelism"
        )
    min_available = spec.child("minAvailable")
    min_value = min_available.as_int(minimum=0)
    if min_value is not None and total is not None and min_value > total:
        min_available.report(f"minAvailable ({min_value}) must not be greater than the total replicas ({total})")
    min_success = spec.child("minSuccess")
    success_value = min_success.as_int(minimum=1)
    if success_value is not None and total is not None and success_value > total:
        min_success.report(f"minSuccess ({success_value}) must not be greater than the total replicas ({total})")


def _validate_job_name(name: Field) -> None:
    value = name.value
    if isinstance(value, str) and len(value) > JOB_NAME_MAX:
        name.report(f"must be no more than {JOB_NAME_MAX} characters (it is used as a label value)", TOO_LONG)


def _validate_update(spec: Field, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Only MUTABLE_SPEC_FIELDS and MUTABLE_TASK_FIELDS may change; defaults are applied to both
    sides first so an omitted defaulted field does not read as a change."""
    old_spec = defaults(old).get("spec")
    new_spec = defaults(new).get("spec")
    if not isinstance(old_spec, dict) or not isinstance(new_spec, dict):
        return
    _report_changes(spec, old_spec, new_spec, MUTABLE_SPEC_FIELDS | {"tasks"})
    old_tasks, new_tasks = old_spec.get("tasks"), new_spec.get("tasks")
    if not isinstance(old_tasks, list) or not isinstance(new_tasks, list):
        return
    if len(old_tasks) != len(new_tasks):
        spec.child("tasks").report("tasks may not be added or removed", FORBIDDEN)
        return
    for task, old_task, new_task in zip(spec.child("tasks").elements(), old_tasks, new_tasks, strict=True):
        if isinstance(old_task, dict) and isinstance(new_task, dict):
            _report_changes(task, old_task, new_task, MUTABLE_TASK_FIELDS)


def _report_changes(at: Field, old: Mapping[str, Any], new: Mapping[str, Any], mutable: frozenset[str]) -> None:
    for key in sorted((old.keys() | new.keys()) - mutable):
        if old.get(key) != new.get(key):
            at.child(key).report("field is immutable", FORBIDDEN)


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    _validate_job_name(root.child("metadata").child("name"))
    spec = root.child("spec")
    if not spec.require_present() or spec.as_mapping() is None:
        return root.errors
    seen_names: set[str] = set()
    tasks = [_validate_task(task, seen_names) for task in spec.child("tasks").elements()]
    spec.child("tasks").require_nonempty_list("at least one task is required")
    replicas = [task.replicas for task in tasks]
    _validate_totals(spec, None if None in replicas else sum(r for r in replicas if r is not None))
    _validate_dependencies(tasks)
    spec.child("maxRetry").as_int(minimum=0)
    spec.child("ttlSecondsAfterFinished").as_int(minimum=0)
    spec.child("schedulerName").as_str()
    for key in ("queue", "priorityClassName"):
        check_name(spec.child(key), dns1123_subdomain_problems, allow_empty=True)
    _validate_plugins(spec.child("plugins"), {t.name for t in tasks if t.name is not None})
    validate_policies(spec.child("policies"))
    validate_network_topology(spec.child("networkTopology"))
    if old is not None:
        _validate_update(spec, old, obj)
    return root.errors
