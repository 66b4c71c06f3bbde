"""Small clusters for the scheduler's decision tests: API-shaped dicts for nodes, pods, PodGroups and
Queues, a Snapshot built from them the way the cache lays them out, a configuration from tier
lists, and one cycle's outcome. Importable as `tests.scheduler.cluster_fixtures`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from lahar.api.node import Node
from lahar.api.pod import Pod
from lahar.api.podgroup import GROUP_NAME_ANNOTATION, PodGroup
from lahar.api.queue import DEFAULT_QUEUE, Queue
from lahar.scheduler.conf import SchedulerConf, parse_conf
from lahar.scheduler.framework.session import Session, run_cycle
from lahar.scheduler.model import (
    OCCUPYING,
    TASK_SPEC_ANNOTATION,
    NodeTable,
    Resources,
    Snapshot,
    TaskInfo,
    default_queue_info,
    job_info,
    queue_info,
    task_info,
)

Obj = dict[str, Any]
T0 = "2024-01-01T00:00:00Z"


def node(
    name: str,
    cpu: str = "4",
    memory: str = "32Gi",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready: bool = True,
    **extra: str,
) -> Obj:
    """A node; `extra` adds resources (`node("n", **{"nvidia.com/gpu": "4"})`)."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), **extra}
    spec: Obj = {"taints": [dict(t) for t in taints]}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
        "status": {
            "allocatable": allocatable,
            "capacity": dict(allocatable),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    group: str | None = None,
    namespace: str = "default",
    priority: int = 0,
    node_name: str = "",
    phase: str = "Pending",
    task: str = "",
    created: str = T0,
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    annotations: Mapping[str, str] | None = None,
    **extra: str,
) -> Obj:
    """A pod of one container requesting `cpu`/`memory` (None: not requested) and `extra`."""
    requests = {k: v for k, v in {"cpu": cpu, "memory": memory, **extra}.items() if v is not None}
    notes = dict(annotations or {})
    if group:
        notes[GROUP_NAME_ANNOTATION] = group
    if task:
        notes[TASK_SPEC_ANNOTATION] = task
    spec: Obj = {
        "schedulerName": "lahar",
        "priority": priority,
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "annotations": notes,
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def gang(
    name: str,
    size: int,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    min_member: int | None = None,
    queue: str = DEFAULT_QUEUE,
    **pod_fields: Any,
) -> list[Obj]:
    """A PodGroup and its `size` pods (`<name>-0`...), minMember `size` unless given."""
    group = podgroup(name, size if min_member is None else min_member, queue=queue)
    return [group] + [pod(f"{name}-{i}", cpu, memory, group=name, **pod_fields) for i in range(size)]


def podgroup(
    name: str,
    min_member: int = 1,
    queue: str = DEFAULT_QUEUE,
    phase: str = "Inqueue",
    min_task_member: Mapping[str, int] | None = None,
    min_resources: Mapping[str, str] | None = None,
    namespace: str = "default",
    created: str = T0,
) -> Obj:
    spec: Obj = {"minMember": min_member, "queue": queue}
    if min_task_member:
        spec["minTaskMember"] = dict(min_task_member)
    if min_resources:
        spec["minResources"] = dict(min_resources)
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": spec,
        "status": {"phase": phase},
    }


def queue(
    name: str,
    weight: int = 1,
    capability: Mapping[str, str] | None = None,
    guarantee: Mapping[str, str] | None = None,
    deserved: Mapping[str, str] | None = None,
    state: str = "Open",
    priority: int = 0,
    reclaimable: bool = True,
) -> Obj:
    spec: Obj = {"weight": weight, "reclaimable": reclaimable, "priority": priority}
    if capability:
        spec["capability"] = dict(capability)
    if guarantee:
        spec["guarantee"] = {"resource": dict(guarantee)}
    if deserved:
        spec["deserved"] = dict(deserved)
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"state": state},
    }


def snapshot(objects: Iterable[Obj | list[Obj]]) -> Snapshot:
    """A snapshot of the given objects (lists are flattened: `gang()` returns one). Pods naming a
    PodGroup join its job, others are gangs of one; placed pods hold their node's resources."""
    flat: list[Obj] = []
    for obj in objects:
        flat.extend(obj if isinstance(obj, list) else [obj])
    by_kind: dict[str, list[Obj]] = {}
    for obj in flat:
        by_kind.setdefault(obj["kind"], []).append(obj)
    nodes = [Node(obj) for obj in by_kind.get("Node", [])]
    pods = [Pod(obj) for obj in by_kind.get("Pod", [])]
    groups = [PodGroup(obj) for obj in by_kind.get("PodGroup", [])]
    queues = [Queue(obj) for obj in by_kind.get("Queue", [])]
    names: set[str] = set()
    for n in nodes:
        names.update(n.allocatable)
    for p in pods:
        names.update(p.requests)
    for g in groups:
        names.update(g.min_resources)
    for q in queues:
        names.update(q.capability, q.guarantee, q.deserved)
    resources = Resources(names)
    table = NodeTable(resources, nodes)
    jobs = {g.key: job_info(g.key, g.namespace, g.name, g, 0, resources) for g in groups}
    for p in pods:
        key = f"{p.namespace}/{p.group_name}" if p.group_name else p.key
        if key not in jobs:
            jobs[key] = job_info(key, p.namespace, p.name, None, p.priority, resources, p.meta.creation_timestamp or "")
        task = task_info(p, key, resources)
        jobs[key].add(task)
        if task.node and task.status in OCCUPYING:
            table.add_task(table.index[task.node], task)
    infos = {q.name: queue_info(q, resources) for q in queues}
    infos.setdefault(DEFAULT_QUEUE, default_queue_info(resources))
    return Snapshot(resources, table, jobs, infos)


def conf(actions: str, *tiers: Sequence[str | Mapping[str, Any]]) -> SchedulerConf:
    """A configuration from an actions string and tiers of plugin names or plugin entries."""
    document = {
        "actions": actions,
        "tiers": [{"plugins": [{"name": p} if isinstance(p, str) else dict(p) for p in tier]} for tier in tiers],
    }
    return parse_conf(yaml.safe_dump(document))


# Every plugin of this part, in Volcano's default tiers.
ALL_TIERS: tuple[list[str | Mapping[str, Any]], ...] = (
    ["priority", {"name": "gang", "enablePreemptable": False}],
    [{"name": "drf", "enablePreemptable": False}, "predicates", "proportion", "nodeorder", "binpack", "overcommit"],
)


def cycle(
    objects: Iterable[Obj | list[Obj]],
    actions: str = "enqueue, allocate, backfill",
    tiers: Sequence[Sequence[str | Mapping[str, Any]]] = ALL_TIERS,
) -> Session:
    """One scheduling cycle over the objects."""
    return run_cycle(snapshot(objects), conf(actions, *tiers))


def task_named(session: Session, name: str) -> TaskInfo:
    """The session's task for the pod called `name`."""
    return next(task for job in session.jobs.values() for task in job.tasks.values() if task.name == name)


def placed(session: Session) -> dict[str, str]:
    """pod name -> node for every committed placement."""
    return {task.name: task.node for batch in session.binds for task in batch.tasks}
