"""Builders shaped like Volcano's scheduler test helpers (pkg/scheduler/util/test_utils.go:
BuildPod, BuildNode, BuildPodGroup, BuildQueue, BuildPriorityClass), so the conformance tables in
test_volcano_conformance.py read like the Go tables they are ported from, and the runner that
feeds one case through Lahar's cache and one session."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lahar.scheduler.conf import SWITCHES
from lahar.scheduler.framework.session import Session
from lahar.scheduler.shards import NOT_SHARDED, Sharding
from tests.scheduler.preempt_builders import cluster, conf, run

Obj = dict[str, Any]
PREEMPTABLE = "volcano.sh/preemptable"
AGREE, DISAGREE = "agree", "disagree"


def quantities(cpu: str | None, memory: str | None) -> dict[str, str]:
    """api.BuildResourceList(cpu, memory); (None, None) is v1.ResourceList{}."""
    return {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}


def vc_node(name: str, cpu: str, memory: str, pods: int = 110, labels: Mapping[str, str] | None = None) -> Obj:
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "status": {
            "allocatable": allocatable,
            "capacity": dict(allocatable),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def vc_pod(
    namespace: str,
    name: str,
    node: str,
    phase: str,
    request: Mapping[str, str],
    group: str,
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, str] | None = None,
    priority: int | None = None,
    never_preempts: bool = False,
) -> Obj:
    spec: Obj = {
        "schedulerName": "volcano",
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": dict(request)}}],
    }
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = dict(selector)
    if priority is not None:
        spec["priority"] = priority
    if never_preempts:
        spec["preemptionPolicy"] = "Never"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{namespace}-{name}",
            "labels": dict(labels or {}),
            "annotations": {"scheduling.k8s.io/group-name": group},
            "creationTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def vc_podgroup(
    name: str,
    namespace: str,
    queue: str,
    min_member: int,
    min_task_member: Mapping[str, int] | None,
    phase: str,
    priority_class: str = "",
) -> Obj:
    spec: Obj = {"minMember": min_member, "queue": queue}
    if min_task_member:
        spec["minTaskMember"] = dict(min_task_member)
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": spec,
        "status": {"phase": phase},
    }


def vc_queue(
    name: str,
    weight: int = 1,
    capability: Mapping[str, str] | None = None,
    priority: int = 0,
    state: str = "Open",
    deserved: Mapping[str, str] | None = None,
) -> Obj:
    spec: Obj = {"weight": weight, "priority": priority}
    if capability:
        spec["capability"] = dict(capability)
    if deserved:
        spec["deserved"] = dict(deserved)
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"state": state},
    }


def vc_hypernode(
    name: str, tier: int, members: Sequence[str], hypernodes: Collection[str] = (), tier_name: str = ""
) -> Obj:
    """A HyperNode whose members are nodes by name, or HyperNodes where named in `hypernodes`."""
    spec: Obj = {
        "tier": tier,
        "members": [
            {"type": "HyperNode" if m in hypernodes else "Node", "selector": {"exactMatch": {"name": m}}}
            for m in members
        ],
    }
    if tier_name:
        spec["tierName"] = tier_name
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name}, "spec": spec}


def vc_nodeshard(name: str, desired: Sequence[str], in_use: Sequence[str] | None = None) -> Obj:
    """A NodeShard (shard.volcano.sh/v1alpha1) with its desired nodes and, when given, the nodes its
    scheduler has in use (Volcano's buildShard)."""
    shard: Obj = {
        "apiVersion": "shard.volcano.sh/v1alpha1",
        "kind": "NodeShard",
        "metadata": {"name": name},
        "spec": {"nodesDesired": list(desired)},
    }
    if in_use is not None:
        shard["status"] = {"nodesInUse": list(in_use)}
    return shard


def vc_numatopology(
    name: str,
    cpu_detail: Mapping[int, tuple[int, int, int]],
    allocatable: str,
    topology_policy: str = "single-numa-node",
    cpu_manager_policy: str = "static",
    reserved: str | None = None,
    pinned: Sequence[tuple[str, str]] = (),
) -> Obj:
    """A Numatopology as Volcano's resource-exporter writes it: each CPU's (NUMA node, socket,
    core), the CPUs still free to pin, the kubelet's policies and reserved CPUs, and the pods
    (namespace, name) the kubelet has pinned."""
    spec: Obj = {
        "policies": {"CPUManagerPolicy": cpu_manager_policy, "TopologyManagerPolicy": topology_policy},
        "numares": {"cpu": {"allocatable": allocatable, "capacity": len(cpu_detail)}},
        "cpuDetail": {str(cpu): {"numa": n, "socket": s, "core": c} for cpu, (n, s, c) in cpu_detail.items()},
        "podAllocations": [{"namespace": ns, "name": pod} for ns, pod in pinned],
    }
    if reserved is not None:
        spec["resReserved"] = {"cpu": reserved}
    return {
        "apiVersion": "nodeinfo.volcano.sh/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": name},
        "spec": spec,
    }


def vc_priority_class(name: str, value: int) -> Obj:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


@dataclass
class Case:
    """One row of a Volcano table: its inputs and expectations as written there, and whether
    Lahar agrees. For a disagreement, `lahar_*` holds what Lahar decides and `why` the reason
    (docs/scheduler-conformance.md lists them)."""

    source: str  # the Go file and test name
    name: str
    objects: Sequence[Obj]
    expect_binds: Mapping[str, str] | None = None  # "ns/pod" -> node
    expect_bind_count: int | None = None
    expect_evicted: Sequence[str] | None = None  # "ns/pod", any order
    expect_evict_count: int | None = None
    verdict: str = AGREE
    lahar_binds: Mapping[str, str] | None = None
    lahar_evicted: Sequence[str] | None = None
    why: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def outcome(
    objects: Sequence[Obj], actions: str, tiers: Sequence[Sequence[Any]], sharding: Sharding = NOT_SHARDED
) -> Session:
    return run(cluster(*objects, sharding=sharding), conf(actions, *tiers))


def binds(session: Session) -> dict[str, str]:
    return {f"{task.namespace}/{task.name}": task.node for batch in session.binds for task in batch.tasks}


def evicted(session: Session) -> list[str]:
    return sorted(f"{e.task.namespace}/{e.task.name}" for e in session.evictions)


def only(name: str, *kinds: str) -> dict[str, Any]:
    """A plugin entry with every switchable callback off but `kinds` (Volcano's tests build tiers
    in Go, where a switch left nil is off; a Lahar file leaves it on)."""
    return {"name": name, **{switch: kind in kinds for switch, kind in SWITCHES.items()}}
