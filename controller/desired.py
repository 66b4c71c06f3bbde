"""What a Job's PodGroup and pods should look like: pure builders, no API calls.

Plugins (env, svc, ssh) are applied by `PodMutator`s passed in by the caller, so this module
stays free of plugin knowledge.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from lahar.api.errors import json_copy
from lahar.api.job import STATUS_VERSION, Job, TaskSpec
from lahar.api.qos import QoSClass, qos_class
from lahar.api.quantity import QuantityError
from lahar.api.resources import ResourceList, pod_requests
from lahar.controller.naming import (
    PARTITION_ID_KEY,
    TASK_SPEC_KEY,
    job_owner_reference,
    pod_annotations,
    pod_labels,
    pod_name,
    podgroup_name,
)

PODGROUP_API_VERSION = "scheduling.volcano.sh/v1beta1"
PODGROUP_KIND = "PodGroup"

# A plugin hook: edits a freshly built pod in place (pod, job, task, index).
PodMutator = Callable[[dict[str, Any], Job, TaskSpec, int], None]


def _template_pod(task: TaskSpec) -> dict[str, Any]:
    """A pod with only the task template's spec (enough for its requests)."""
    return {"spec": json_copy(dict(task.template.get("spec") or {}))}


def _minimum_pod_tasks(job: Job, tasks: Sequence[TaskSpec] | None = None) -> Iterator[TaskSpec]:
    """The tasks of the first `gang_minimum(job, tasks)` pods, one entry per pod: every task's
    own minAvailable first, then the remaining replicas, both passes in task order (`tasks`:
    those the gang counts, all by default).

    Volcano's calcPGMinResources walks tasks by priority-class value; Lahar has no
    PriorityClass lookup in a pure function, so it uses the order the tasks are written in
    (the same result when the tasks share a priority)."""
    tasks = job.tasks if tasks is None else tasks
    minimum = gang_minimum(job, tasks)
    taken = 0
    for task in tasks:
        for _ in range(min(task.min_available, task.replicas)):
            if taken >= minimum:
                return
            taken += 1
            yield task
    for task in tasks:
        for _ in range(task.replicas - min(task.min_available, task.replicas)):
            if taken >= minimum:
                return
            taken += 1
            yield task


def gang_minimum(job: Job, tasks: Sequence[TaskSpec]) -> int:
    """The PodGroup's minMember: the job's minAvailable, but never more pods than `tasks` (the
    ones that can run now) have: a task waiting on a dependency cannot be demanded yet."""
    return min(job.min_available, sum(task.replicas for task in tasks))


# What a BE pod borrows from the nodes' reclaimable capacity (docs/oversubscription.md).
BORROWED = ("cpu", "memory")


def admission_requests(task: TaskSpec) -> ResourceList:
    """What one pod of the task asks of admission (the PodGroup's minResources): its requests,
    less the cpu and memory of a BE pod. Those are borrowed from what online pods leave idle,
    neither queue quota nor room the cluster holds back, so a BE job is not refused admission for
    capacity online pods requested; its pods then wait for reclaimable capacity to place."""
    requests = pod_requests(_template_pod(task))
    template = {"metadata": task.template.get("metadata") or {}, "spec": task.template.get("spec") or {}}
    if qos_class(template) is not QoSClass.BE:
        return requests
    return ResourceList({name: amount for name, amount in requests.items() if name not in BORROWED})


def min_resources(job: Job, tasks: Sequence[TaskSpec] | None = None) -> ResourceList:
    """The admission requests of the smallest set of pods that lets the gang run (see
    _minimum_pod_tasks and admission_requests)."""
    per_task = {task.name: admission_requests(task) for task in job.tasks}
    return sum((per_task[task.name] for task in _minimum_pod_tasks(job, tasks)), ResourceList())


def desired_podgroup_spec(job: Job, runnable: Collection[str] | None = None) -> dict[str, Any]:
    """The PodGroup spec for the job as it is now (replicas and minAvailable follow scaling).
    `runnable`: the tasks that can have pods now (all when None); a task still waiting on its
    dependencies gets minTaskMember 0 and adds nothing to minMember or minResources."""
    tasks = [task for task in job.tasks if runnable is None or task.name in runnable]
    counted = {task.name for task in tasks}
    spec: dict[str, Any] = {
        "minMember": gang_minimum(job, tasks),
        "minTaskMember": {task.name: task.min_available if task.name in counted else 0 for task in job.tasks},
        "minResources": min_resources(job, tasks).without_zeros().to_k8s(),
        "queue": job.queue,
    }
    if job.priority_class_name:
        spec["priorityClassName"] = job.priority_class_name
    topology = network_topology(job)
    if topology:
        spec["networkTopology"] = topology
    policies = [sub_group_policy(task) for task in job.tasks if task.partition is not None]
    if policies:
        spec["subGroupPolicy"] = policies
    return spec


def sub_group_policy(task: TaskSpec) -> dict[str, Any]:
    """The PodGroup's sub-group policy for a partitioned task (as Volcano's job controller writes
    it): the task's pods, one sub-job per partition (`volcano.sh/partition-id`), each of
    partitionSize pods within the partition's networkTopology, minPartitions of them needed."""
    assert task.partition is not None
    policy: dict[str, Any] = {
        "name": task.name,
        "subGroupSize": task.partition.size,
        "minSubGroups": task.partition.minimum,
        "labelSelector": {"matchLabels": {TASK_SPEC_KEY: task.name}},
        "matchLabelKeys": [PARTITION_ID_KEY],
    }
    topology = copied_topology(task.partition.topology)
    if topology:
        policy["networkTopology"] = topology
    return policy


def network_topology(job: Job) -> dict[str, Any] | None:
    """The job's `networkTopology` as its PodGroup carries it (as Volcano's job controller copies
    it: the mode, and highestTierAllowed, or else highestTierName), for network-topology-aware."""
    return copied_topology((job.raw.get("spec") or {}).get("networkTopology"))


def copied_topology(given: Any) -> dict[str, Any] | None:
    """A Job's (or a task partition's) networkTopology as the PodGroup carries it."""
    if not isinstance(given, Mapping):
        return None
    topology: dict[str, Any] = {"mode": given.get("mode") or "hard"}
    if given.get("highestTierAllowed") is not None:
        topology["highestTierAllowed"] = given["highestTierAllowed"]
    elif given.get("highestTierName"):
        topology["highestTierName"] = given["highestTierName"]
    return topology


def podgroup_spec_patch(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any] | None:
    """The spec fields of an existing PodGroup to change (None: it is as wanted). Only the fields
    the controller owns are compared; minResources compares as quantities."""
    patch: dict[str, Any] = {}
    for key, value in wanted.items():
        old = current.get(key)
        if key == "minResources":
            same = _same_resources(old or {}, value)
        elif key == "minTaskMember":
            same = {k: v for k, v in (old or {}).items() if v} == {k: v for k, v in value.items() if v}
        else:
            same = old == value
        if not same:
            patch[key] = value
    return patch or None


def _same_resources(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    try:
        return ResourceList.from_k8s(old).without_zeros() == ResourceList.from_k8s(new).without_zeros()
    except QuantityError:
        return False


def desired_podgroup(job: Job, runnable: Collection[str] | None = None) -> dict[str, Any]:
    spec = desired_podgroup_spec(job, runnable)
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": PODGROUP_KIND,
        "metadata": {
            "name": podgroup_name(job),
            "namespace": job.namespace,
            "ownerReferences": [job_owner_reference(job)],
        },
        "spec": spec,
    }


def job_version(job: Job) -> int:
    return (job.raw.get("status") or {}).get(STATUS_VERSION) or 0


def build_pod(
    job: Job, task: TaskSpec, index: int, retry_count: int, mutators: Sequence[PodMutator] = ()
) -> dict[str, Any]:
    """One pod from the task's template, before and then through the plugin mutators."""
    template = task.template
    template_meta: Mapping[str, Any] = template.get("metadata") or {}
    spec = json_copy(dict(template.get("spec") or {}))
    # Lahar's gangs only work if Lahar's scheduler places the pods, so the job's scheduler
    # wins over the template's (Volcano keeps a template's explicit schedulerName).
    spec["schedulerName"] = job.scheduler_name
    if not spec.get("priorityClassName") and job.priority_class_name:
        spec["priorityClassName"] = job.priority_class_name
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(job.name, task.name, index),
            "namespace": job.namespace,
            "labels": {**(template_meta.get("labels") or {}), **pod_labels(job, task.name, index)},
            "annotations": {
                **(template_meta.get("annotations") or {}),
                **pod_annotations(job, task.name, index, job_version(job), retry_count),
            },
            "ownerReferences": [job_owner_reference(job)],
        },
        "spec": spec,
    }
    for mutate in mutators:
        mutate(pod, job, task, index)
    return pod


def desired_pods(job: Job, retry_count: int, mutators: Sequence[PodMutator] = ()) -> dict[str, dict[str, Any]]:
    """Every pod of every task, by name, in task order then index order."""
    return {
        pod_name(job.name, task.name, index): build_pod(job, task, index, retry_count, mutators)
        for task in job.tasks
        for index in range(task.replicas)
    }
