"""Builders for the federation's tests: Volcano Jobs as the hub holds them, members as the planner
sees them."""

from __future__ import annotations

from typing import Any

from lahar.api.resources import ResourceList
from lahar.federation import names
from lahar.federation.placement import MemberView, demand_of
from lahar.federation.planner import HubJob, MemberCopy, hub_job

GI = 1024**3


def resources(cpu: int, memory_gi: int = 1, gpu: int = 0) -> ResourceList:
    amounts = {"cpu": cpu * 1000, "memory": memory_gi * GI}
    if gpu:
        amounts["nvidia.com/gpu"] = gpu
    return ResourceList(amounts)


def vcjob(
    name: str,
    replicas: int = 2,
    cpu: str = "1",
    *,
    namespace: str = "default",
    queue: str = "default",
    gpu: int = 0,
    uid: str | None = None,
    created: str = "2026-01-01T00:00:00Z",
    cluster: str = "",
    placement: int = 0,
    dispatched: int | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    priority_class: str = "",
    generation: int = 1,
) -> dict[str, Any]:
    limits = {"cpu": cpu, "memory": "1Gi", **({"nvidia.com/gpu": str(gpu)} if gpu else {})}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}",
        "resourceVersion": "1",
        "generation": generation,
        "creationTimestamp": created,
        "labels": {"team": "a"},
        "annotations": dict(annotations or {}),
    }
    if cluster:
        metadata["labels"][names.CLUSTER_LABEL] = cluster
        metadata["annotations"][names.PLACEMENT_ANNOTATION] = str(placement)
    if dispatched is not None:
        metadata["annotations"][names.DISPATCHED_ANNOTATION] = str(dispatched)
    job: dict[str, Any] = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "minAvailable": replicas,
            "queue": queue,
            "schedulerName": "volcano",
            **({"priorityClassName": priority_class} if priority_class else {}),
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "busybox",
                                    "resources": {"requests": limits, "limits": limits},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }
    if status is not None:
        job["status"] = status
    return job


def view(obj: dict[str, Any], priorities: dict[str, int] | None = None) -> HubJob:
    return hub_job(obj, priorities or {})


def member(
    name: str,
    nodes: int = 2,
    cpu: int = 4,
    *,
    gpu: int = 0,
    labels: dict[str, str] | None = None,
    cost: float = 1.0,
    used: list[ResourceList] | None = None,
    reachable: bool = True,
    last_heartbeat: float | None = 1000.0,
    queue_capability: dict[str, ResourceList] | None = None,
) -> MemberView:
    allocatable = tuple(resources(cpu, 16, gpu) for _ in range(nodes))
    free = tuple(a - (used[i] if used and i < len(used) else ResourceList()) for i, a in enumerate(allocatable))
    return MemberView(
        name=name,
        labels=labels or {},
        cost=cost,
        reachable=reachable,
        known=True,
        node_allocatable=allocatable,
        node_free=free,
        queue_capability=queue_capability or {},
        last_heartbeat=last_heartbeat,
    )


def member_copy(
    job: dict[str, Any],
    member_name: str,
    placement: int,
    status: dict[str, Any] | None = None,
    *,
    made_from: dict[str, Any] | None = None,
) -> MemberCopy:
    """The copy of `job` in a member, made from `made_from` (an earlier version of the Job; by
    default `job` itself: its spec and generation)."""
    metadata = job["metadata"]
    source = made_from or job
    return MemberCopy(
        member=member_name,
        key=(metadata["namespace"], metadata["name"]),
        uid=f"member-{metadata['uid']}",
        hub_uid=metadata["uid"],
        placement=placement,
        status=status or {},
        hub_generation=source["metadata"].get("generation") or 0,
        total=demand_of(source).total,
    )


def running_status(count: int) -> dict[str, Any]:
    return {"state": {"phase": "Running"}, "running": count, "minAvailable": count}
