"""Builders for the preempt, reclaim and report-based plugin tests: clusters fed through the
scheduler cache (the manifests are test_cache's, configurations cluster_fixtures'), synthetic
NodeReports in a store whose clock the test moves, and one-cycle runs."""

from __future__ import annotations

import copy
from typing import Any

from lahar.rpc.report import Accelerators, CpuUsage, GpuDevice, MemoryUsage, NodeReport, NumaNode
from lahar.scheduler.cache import Cache
from lahar.scheduler.conf import SchedulerConf
from lahar.scheduler.framework.session import Session, open_session, run_cycle
from lahar.scheduler.model import TaskInfo
from lahar.scheduler.node_reports import NodeReportStore
from lahar.scheduler.shards import NOT_SHARDED, Sharding
from tests.scheduler.cluster_fixtures import conf
from tests.scheduler.test_cache import a_pod, bound, node, podgroup, queue

Obj = dict[str, Any]
GIB = 1 << 30

__all__ = [
    "GIB",
    "Clock",
    "a_pod",
    "annotate",
    "bound",
    "cluster",
    "conf",
    "gang",
    "guaranteed",
    "node",
    "opened",
    "podgroup",
    "prioritised",
    "priority_class",
    "queue",
    "report",
    "run",
    "running",
    "store",
    "task",
]


class Clock:
    """A store clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def cluster(*objects: Obj, sharding: Sharding = NOT_SHARDED) -> Cache:
    """A cache fed the given Nodes, Queues, PriorityClasses, PDBs, HyperNodes, NodeShards, PodGroups
    and Pods (by their kind), for a scheduler sharded as `sharding` says."""
    cache = Cache(sharding=sharding)
    adders = {
        "Node": cache.add_node,
        "Queue": cache.add_queue,
        "PodGroup": cache.add_podgroup,
        "Pod": cache.add_pod,
        "PriorityClass": cache.add_priority_class,
        "PodDisruptionBudget": cache.add_disruption_budget,
        "HyperNode": cache.add_hypernode,
        "NodeShard": cache.add_nodeshard,
        "Numatopology": cache.add_numatopology,
    }
    for obj in objects:
        adders[obj["kind"]](obj)
    return cache


def prioritised(obj: Obj, priority: int) -> Obj:
    """A pod (or a PodGroup) with a priority: the pod's own, as admission would have resolved it."""
    obj = copy.deepcopy(obj)
    obj["spec"]["priority"] = priority
    return obj


def gang(name: str, min_member: int, *, phase: str = "Inqueue", priority_class: str = "", **kwargs: Any) -> Obj:
    """A PodGroup already admitted (phase Inqueue unless told), optionally with a priority class."""
    obj = podgroup(name, min_member, **kwargs)
    obj["status"] = {"phase": phase}
    if priority_class:
        obj["spec"]["priorityClassName"] = priority_class
    return obj


def priority_class(name: str, value: int) -> Obj:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def annotate(obj: Obj, **annotations: str) -> Obj:
    """`annotate(pod, **{"lahar.dev/qos-class": "BE"})`."""
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("annotations", {}).update(annotations)
    return obj


def running(name: str, node_name: str, priority: int = 0, **kwargs: Any) -> Obj:
    """A pod with a uid, running on `node_name`."""
    return bound(prioritised(a_pod(name, **kwargs), priority), node_name)


def report(
    name: str,
    *,
    cores: int = 4,
    cpu_ratio: float = 0.0,
    memory_total: int = 32 * GIB,
    memory_used: int = 0,
    reclaimable: dict[str, int] | None = None,
    numa: list[NumaNode] | None = None,
    gpus: list[GpuDevice] | None = None,
    sequence: int = 1,
) -> NodeReport:
    return NodeReport(
        node=name,
        sequence=sequence,
        timestamp=0.0,
        cpu=CpuUsage(cores, cores * cpu_ratio, cpu_ratio),
        memory=MemoryUsage(memory_total, memory_used, memory_total - memory_used, 0),
        numa=numa or [],
        reclaimable=reclaimable or {},
        gpu=Accelerators(True, source="nvml", gpus=gpus) if gpus else Accelerators(False, "no GPU"),
    )


def store(clock: Clock, *reports: NodeReport) -> NodeReportStore:
    """A store holding `reports`, all arrived now on `clock`."""
    reports_store = NodeReportStore(clock)
    for each in reports:
        reports_store.submit(each)
    return reports_store


def run(cache: Cache, configuration: SchedulerConf, reports: NodeReportStore | None = None) -> Session:
    """One scheduling cycle on a snapshot of `cache` (the cache itself is left unchanged)."""
    return run_cycle(cache.snapshot(), configuration, reports)


def opened(cache: Cache, configuration: SchedulerConf, reports: NodeReportStore | None = None) -> Session:
    """A session opened on a snapshot of `cache`, for asking its predicates and scores directly."""
    return open_session(cache.snapshot(), configuration, reports)


def task(session: Session, name: str) -> TaskInfo:
    """The task of the pod `name` (namespace default)."""
    return next(t for job in session.jobs.values() for t in job.tasks.values() if t.name == name)


def guaranteed(obj: Obj) -> Obj:
    """A pod whose limits equal its requests (Kubernetes' Guaranteed class)."""
    obj = copy.deepcopy(obj)
    for container in obj["spec"]["containers"]:
        resources = container.setdefault("resources", {})
        resources["limits"] = dict(resources.get("requests") or {})
    return obj


def spy(monkeypatch: Any, owner: type, name: str) -> list[tuple[Any, ...]]:
    """The arguments (after self) of every call of the method `owner.name`, which still runs."""
    calls: list[tuple[Any, ...]] = []
    original = getattr(owner, name)

    def spied(self: Any, *args: Any) -> Any:
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(owner, name, spied)
    return calls
