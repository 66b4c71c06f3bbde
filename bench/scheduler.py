"""Scheduler throughput, gangs, preemption, fair share and oversubscription, as figures.

    lahar bench scheduler --scenario NAME [--nodes N] [--pods P] [--json]
    python -m bench.scheduler --scenario all --nodes 50 --pods 200     (a quick run)

Shapes follow kube-scheduler's scheduler_perf (nodes: 4 CPU, 32Gi, 110 pods, Ready; pods:
100m / 500Mi) so the figures line up with its SchedulingBasic thresholds (DESIGN.md
"Performance", shared/reference/perf-anchors.md). Every scenario runs with all default plugins
on (scheduler.conf.DEFAULT_CONF) unless it says otherwise.

In-process scenarios (all but `http`) feed the scheduler's cache core (scheduler.cache.Cache)
with API-shaped dicts and run scheduling cycles on its snapshots, as the scheduler loop does;
a commit is treated as bound through the cache's assume / confirm path, with no API: the
batch is assumed, the PodGroup status the status writer would write is fed back, then each
pod comes back with spec.nodeName set (as its watch event would) and victims are deleted.
Their `seconds` are wall seconds of what the loop does per cycle: snapshot, session (every
action) and assume, nothing else (generating and feeding the objects is not counted); the
informer's share, the pod updates that confirm the binds, is `confirm_seconds`, apart.
`http` runs the real scheduler loop against `lahar apiserver` over HTTP.

Scenarios:
  basic      5000 nodes, 1000 init pods (bound), 10,000 lone pods. Target >= 5000 pods/s.
  basic-50k  5000 nodes, 5000 init pods, 50,000 lone pods (held to basic's target).
  gang       5000 nodes; 10 gangs x 5000 pods and 1 x 10,000 (PodGroups, minMember = size),
             submitted one per cycle: each gang's decision seconds (target <= 0.5 s), gangs
             placed partly (must be 0); then a gang one pod larger than the 1-CPU pods the
             cluster still has room for, whose cost on later cycles is compared with idle ones.
  preempt    5000 nodes full of 20,000 low-priority pods (900m, priority 0), 5000 pending
             high-priority pods (3 CPU, priority 1000) that fit only by preemption: preemptor
             decisions (pipelined) per second. Target >= 1000. Evictions are then applied and
             cycles run until every preemptor is bound.
  queues     150 nodes (600 CPU, Kueue's total nominal quota), 30 queues of weights 1, 2, 4
             and Kueue's baseline workload (per queue 350 small jobs of 1 CPU, 100 medium of 5,
             50 large of 20; runtimes 0.2 / 0.5 / 1 s; priorities 50 / 100 / 200 through
             PriorityClasses) arriving as seeded Poisson streams with Kueue's mean intervals
             (0.1 / 0.5 / 1.2 s) in virtual time; cycles every 0.1 virtual s. A job is a PodGroup
             (minMember = size) of 1-CPU / 1Gi pods (1, 5 or 20), whose pods are created once it
             is Inqueue, as the job controller does (--eager-pods: with it, as Spark and Ray do);
             a job that loses a pod to preemption or reclaim restarts (Volcano's RestartJob).
             Each queue's average CPU share of the cluster against its deserved share (the
             proportion plugin's figures, averaged over the cycles up to the last arrival), and
             the mean virtual time from arrival to all pods bound per size.
  oversub    5000 nodes fully requested by LS pods (4 x 1 CPU / 8Gi) at 30-50 % real usage; agent
             reports lend what agent/qos/reclaimable.py lends; BE pods (500m / 2Gi) are placed on
             it. Extra utilization (BE requested / allocatable), nodes placed beyond their
             reclaimable capacity (must be 0), BE pods on nodes with stale or no reports (must
             be 0). Then a simulated fleet (500 nodes): online load over time (base, waves,
             bursts), each node's reclaimable from 300 s of its own reports, BE workers (500m /
             1Gi, 1 core at most) placed by the scheduler, then 300 s measured: harvested CPU
             (BE usage / CPU online left idle, target >= 0.9) and online SLO violations (online
             CPU unmet under the agent's weights, or memory past 95%: target 0), for the agent's
             rule and the old capacity x 0.65 - 300 s peak.
  http       basic through the embedded API server over HTTP: objects created first (not
             counted), then the real scheduler loop (scheduler.Scheduler: informers, cycles, the
             binder's concurrent pods/binding calls, status writes) runs in this process from
             its start (informers' first lists included) until the API shows every measured pod
             bound. Target >= 1000 pods/s.

--nodes / --pods scale any scenario down for a quick run (--pods is the measured pods: gang
pods in all, preemptors, the jobs of `queues`, BE pods). Progress goes to stderr. The figures
are wall seconds on whatever else the machine runs: every result carries the 1-minute load
average seen at its end.
"""

from __future__ import annotations

import argparse
import functools
import gc
import heapq
import json
import math
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from lahar.api.pod import defaults as pod_defaults

GIB = 1 << 30
MIB = 1 << 20
NAMESPACE = "bench"
SCHEDULER_NAME = "lahar"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
QOS_KEY = "lahar.dev/qos-class"
# Object creation times count up from here (FIFO order among equal priorities).
EPOCH = datetime(2025, 1, 1, tzinfo=UTC).timestamp()

Obj = dict[str, Any]


# --- progress -------------------------------------------------------------------------------


class Progress:
    """Lines on stderr with the seconds since the benchmark started (silent with --quiet)."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.started:7.1f}s] {message}", file=sys.stderr, flush=True)


# --- API-shaped objects (scheduler_perf's templates) ------------------------------------------


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(kind: str, name: str) -> str:
    """A stable uid per object, derived from its kind and name."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"lahar-bench/{kind}/{name}"))


def node_dict(
    name: str, cpu: str = "4", memory: str = "32Gi", pods: str = "110", labels: dict[str, str] | None = None
) -> Obj:
    """scheduler_perf's node-default.yaml: 4 CPU, 32Gi, 110 pods, Ready."""
    capacity = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid("node", name),
            "resourceVersion": "1",
            "creationTimestamp": rfc3339(EPOCH),
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_dict(
    name: str,
    cpu: str = "100m",
    memory: str = "500Mi",
    *,
    node: str = "",
    priority: int | None = None,
    group: str = "",
    qos: str = "",
    limits: bool = False,
    created: float = EPOCH,
    phase: str = "",
    namespace: str = NAMESPACE,
    scheduler: str = SCHEDULER_NAME,
    priority_class: str = "",
) -> Obj:
    """scheduler_perf's pod-default.yaml (100m / 500Mi requests) for the scheduler `lahar`, as the
    API server stores it. `node` makes it a bound pod, `group` puts it in a PodGroup, `qos` sets
    lahar.dev/qos-class, `limits` makes it Guaranteed (limits = requests), `scheduler` hands it
    to another scheduler."""
    resources: Obj = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = {"cpu": cpu, "memory": memory}
    metadata: Obj = {
        "name": name,
        "namespace": namespace,
        "uid": _uid("pod", f"{namespace}/{name}"),
        "resourceVersion": "1",
        "creationTimestamp": rfc3339(created),
        "labels": {"app": "bench"},
    }
    if group:
        metadata["annotations"] = {GROUP_ANNOTATION: group}
    if qos:
        metadata["labels"][QOS_KEY] = qos
    spec: Obj = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
    }
    if priority is not None:
        spec["priority"] = priority  # as admission resolves it from the PriorityClass
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node:
        spec["nodeName"] = node
    pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if phase or node:
        pod["status"] = {"phase": phase or "Running"}
    return pod_defaults(pod)  # as the API server stores it (status.phase, status.qosClass, ...)


def podgroup_dict(
    name: str,
    min_member: int,
    *,
    queue: str = "default",
    min_resources: dict[str, str] | None = None,
    created: float = EPOCH,
    phase: str = "Pending",
    namespace: str = NAMESPACE,
    priority_class: str = "",
) -> Obj:
    """A Volcano PodGroup as the controller writes it (minResources = what minMember pods ask)."""
    spec: Obj = {"minMember": min_member, "queue": queue}
    if min_resources:
        spec["minResources"] = min_resources
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid("podgroup", f"{namespace}/{name}"),
            "resourceVersion": "1",
            "creationTimestamp": rfc3339(created),
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def priority_class_dict(name: str, value: int) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "uid": _uid("priorityclass", name), "resourceVersion": "1"},
        "value": value,
        "globalDefault": False,
    }


def queue_dict(name: str, weight: int = 1) -> Obj:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {
            "name": name,
            "uid": _uid("queue", name),
            "resourceVersion": "1",
            "creationTimestamp": rfc3339(EPOCH),
        },
        "spec": {"weight": weight, "reclaimable": True},
        "status": {"state": "Open"},
    }


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def scaled_quantity(millis: int) -> str:
    return f"{millis}m"


# --- figures ----------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


# --- in process: the cache core and scheduling cycles -----------------------------------------


@dataclass
class Cycle:
    """One scheduling cycle's cost and outcome. `seconds` is what the scheduler loop spends per
    cycle: snapshot, session, and assuming its decisions in the cache (plus the PodGroup status
    it would write); `confirm_seconds` is the informer's share (pod updates and deletions coming
    back from the API), reported apart."""

    snapshot_seconds: float
    session_seconds: float
    assume_seconds: float
    confirm_seconds: float
    session: Any
    bound: list[tuple[Any, str]]  # (task, node) committed this cycle
    pipelined: list[Any]
    evicted: list[Any]

    @property
    def seconds(self) -> float:
        return self.snapshot_seconds + self.session_seconds + self.assume_seconds


@dataclass
class Timings:
    """Cycle costs summed over a run."""

    cycles: list[Cycle] = field(default_factory=list)
    actions: Counter[str] = field(default_factory=Counter)

    def add(self, cycle: Cycle) -> Cycle:
        # Keep the costs only: the session holds a whole snapshot.
        self.cycles.append(
            Cycle(
                cycle.snapshot_seconds,
                cycle.session_seconds,
                cycle.assume_seconds,
                cycle.confirm_seconds,
                None,
                [],
                [],
                [],
            )
        )
        if cycle.session is not None:
            self.actions.update(cycle.session.action_seconds)
        return cycle

    @property
    def seconds(self) -> float:
        return sum(c.seconds for c in self.cycles)

    @property
    def confirm_seconds(self) -> float:
        return sum(c.confirm_seconds for c in self.cycles)

    def figures(self) -> dict[str, Any]:
        seconds = [c.seconds for c in self.cycles]
        return {
            "cycles": len(self.cycles),
            "snapshot_seconds": round(sum(c.snapshot_seconds for c in self.cycles), 4),
            "session_seconds": round(sum(c.session_seconds for c in self.cycles), 4),
            "assume_seconds": round(sum(c.assume_seconds for c in self.cycles), 4),
            "confirm_seconds": round(self.confirm_seconds, 4),
            "max_cycle_seconds": round(max(seconds, default=0.0), 4),
            "action_seconds": {name: round(value, 4) for name, value in self.actions.items()},
        }


class InProcess:
    """The scheduler's decision side in this process: the cache core fed with API-shaped dicts,
    cycles on its snapshots, commits assumed and then confirmed as the binding's watch event
    would (the pod comes back with spec.nodeName), evictions applied as deletions."""

    def __init__(self, conf: Any = None, reports: Any = None) -> None:
        from lahar.scheduler.cache import Cache
        from lahar.scheduler.conf import default_conf

        self.conf = conf if conf is not None else default_conf()
        self.reports = reports
        self.cache = Cache()
        self.pods: dict[str, Obj] = {}  # namespace/name -> the dict fed to the cache
        self.bound: dict[str, str] = {}  # namespace/name -> node, for every bind committed here
        self.podgroups: dict[str, Obj] = {}  # namespace/name -> the PodGroup as last written

    # feeding
    def add_node(self, obj: Obj) -> None:
        self.cache.add_node(obj)

    def add_queue(self, obj: Obj) -> None:
        self.cache.add_queue(obj)

    def add_podgroup(self, obj: Obj) -> None:
        self.podgroups[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = obj
        self.cache.add_podgroup(obj)

    def delete_podgroup(self, key: str) -> None:
        self.cache.delete_podgroup(self.podgroups.pop(key))

    def add_pod(self, obj: Obj) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        self.pods[key] = obj
        if obj["spec"].get("nodeName"):
            self.bound[key] = obj["spec"]["nodeName"]
        self.cache.add_pod(obj)

    def delete_pod(self, key: str) -> None:
        obj = self.pods.pop(key)
        self.bound.pop(key, None)
        self.cache.delete_pod(obj)

    # cycles
    def cycle(self, now: float | None = None) -> Cycle:
        """One cycle as the scheduler loop runs it, with the API's part played here: the binds
        are assumed, confirmed and come back as pod updates (nodeName set, Running), victims are
        marked releasing and then deleted (grace period 0), and the PodGroup statuses the status
        writer would write are fed back (so Pending -> Inqueue -> Running persists)."""
        from lahar.scheduler.framework.session import paused_collector, run_cycle
        from lahar.scheduler.status import podgroup_status_patch

        cache = self.cache
        bound: list[tuple[Any, str]] = []
        with paused_collector():  # as the scheduler loop's cycle (Scheduler.run_once)
            started = time.perf_counter()
            snapshot = cache.snapshot()
            snapped = time.perf_counter()
            session = run_cycle(snapshot, self.conf, self.reports, now)
            decided = time.perf_counter()
            for batch in session.binds:
                cache.assume(batch)
                bound.extend((task, task.node) for task in batch.tasks)
            evicted = [eviction.task for eviction in session.evictions]
            cache.assume_evicted(evicted)
            cache.nominate(session.pipelined)
        stamp = rfc3339(EPOCH)
        for job in session.jobs.values():
            if job.podgroup is None or job.key not in self.podgroups:
                continue
            patch = podgroup_status_patch(job, stamp)
            if patch is not None:
                obj = self.podgroups[job.key]
                version = str(int(obj["metadata"]["resourceVersion"]) + 1)
                written = {
                    **obj,
                    "metadata": {**obj["metadata"], "resourceVersion": version},
                    "status": {**(obj.get("status") or {}), **patch},
                }
                self.podgroups[job.key] = written
                cache.update_podgroup(obj, written)
        assumed = time.perf_counter()
        for task, node in bound:
            key = task.key
            obj = self.pods[key]
            confirmed = {
                **obj,
                "spec": {**obj["spec"], "nodeName": node},
                "status": {**(obj.get("status") or {}), "phase": "Running"},
            }
            cache.confirm(task.uid)
            self.pods[key] = confirmed
            self.bound[key] = node
            cache.update_pod(obj, confirmed)
        for task in evicted:
            if task.key in self.pods:
                self.delete_pod(task.key)
        confirmed_at = time.perf_counter()
        return Cycle(
            snapped - started,
            decided - snapped,
            assumed - decided,
            confirmed_at - assumed,
            session,
            bound,
            list(session.pipelined),
            evicted,
        )


def feed_nodes(sim: InProcess, count: int, progress: Progress) -> None:
    for i in range(count):
        sim.add_node(node_dict(node_name(i)))
    progress(f"{count} nodes fed to the cache")


def all_bound(sim: InProcess, keys: list[str]) -> bool:
    return all(key in sim.bound for key in keys)


def run_until(
    sim: InProcess,
    timings: Timings,
    done: Callable[[], bool],
    progress: Progress,
    what: str,
    stall_limit: int = 2,
    on_cycle: Callable[[Cycle], None] | None = None,
    max_cycles: int = 100_000,
) -> bool:
    """Run cycles until `done()`; give up after `stall_limit` cycles in a row that bind,
    pipeline and evict nothing. True when done."""
    stalled = 0
    for _ in range(max_cycles):
        if done():
            return True
        cycle = timings.add(sim.cycle())
        if on_cycle is not None:
            on_cycle(cycle)
        progress(
            f"{what}: cycle {len(timings.cycles)}: {len(cycle.bound)} bound, {len(cycle.pipelined)} pipelined, "
            f"{len(cycle.evicted)} evicted in {cycle.seconds:.3f}s (snapshot {cycle.snapshot_seconds:.3f}s)"
        )
        stalled = 0 if (cycle.bound or cycle.pipelined or cycle.evicted) else stalled + 1
        if stalled >= stall_limit:
            return done()
    return done()


def target(metric: str, op: str, value: float, actual: float) -> dict[str, Any]:
    met = actual >= value if op == ">=" else actual <= value if op == "<=" else actual == value
    return {"metric": metric, "op": op, "value": value, "met": bool(met)}


# --- basic --------------------------------------------------------------------------------------


def scenario_basic(
    args: argparse.Namespace,
    progress: Progress,
    name: str = "basic",
    default_pods: int = 10_000,
    default_init: int = 1000,
) -> dict[str, Any]:
    nodes = args.nodes or 5000
    pods = args.pods or default_pods
    init = args.init if args.init is not None else (default_init if args.pods is None else pods // 10)
    sim = InProcess()
    feed_nodes(sim, nodes, progress)
    for i in range(init):
        sim.add_pod(pod_dict(f"init-{i:06d}", node=node_name(i % nodes)))
    for i in range(pods):
        sim.add_pod(pod_dict(f"pod-{i:06d}", created=EPOCH + 1 + i // 1000))
    progress(f"{init} init pods (bound) and {pods} pending pods fed")
    measured = [f"{NAMESPACE}/pod-{i:06d}" for i in range(pods)]
    timings = Timings()
    gc.collect()
    run_until(sim, timings, lambda: all(key in sim.bound for key in measured), progress, name)
    placed = sum(1 for key in measured if key in sim.bound)
    seconds = timings.seconds
    result = {
        "scenario": name,
        "nodes": nodes,
        "init_pods": init,
        "pods": pods,
        "placed": placed,
        "pods_per_second": rate(placed, seconds),
        "seconds": round(seconds, 4),
        "pods_per_second_with_confirm": rate(placed, seconds + timings.confirm_seconds),
        **timings.figures(),
    }
    result["target"] = target("pods_per_second", ">=", 5000, result["pods_per_second"])
    result["ok"] = placed == pods
    return result


def scenario_basic_50k(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    return scenario_basic(args, progress, "basic-50k", 50_000, 5000)


# --- gang ---------------------------------------------------------------------------------------


def gang_objects(
    name: str,
    size: int,
    cpu: str = "100m",
    memory: str = "500Mi",
    queue: str = "default",
    created: float = EPOCH,
    priority: int | None = None,
    priority_class: str = "",
) -> tuple[Obj, list[Obj]]:
    """A PodGroup of `size` (minMember = size, minResources = what the pods ask) and its pods."""
    min_resources = {"cpu": scaled_quantity(millicores(cpu) * size), "memory": f"{_mebibytes(memory) * size}Mi"}
    group = podgroup_dict(
        name, size, queue=queue, min_resources=min_resources, created=created, priority_class=priority_class
    )
    pods = [
        pod_dict(
            f"{name}-{i:05d}",
            cpu,
            memory,
            group=name,
            created=created,
            priority=priority,
            priority_class=priority_class,
        )
        for i in range(size)
    ]
    return group, pods


def _mebibytes(quantity: str) -> int:
    if quantity.endswith("Gi"):
        return int(quantity[:-2]) * 1024
    if quantity.endswith("Mi"):
        return int(quantity[:-2])
    raise ValueError(f"bench quantities are in Mi or Gi, not {quantity!r}")


def partial_gangs(sim: InProcess, groups: dict[str, int]) -> list[str]:
    """PodGroups with some but fewer than minMember pods placed (from the binds committed)."""
    placed: Counter[str] = Counter()
    for key in sim.bound:
        group = (sim.pods[key]["metadata"].get("annotations") or {}).get(GROUP_ANNOTATION)
        if group:
            placed[f"{NAMESPACE}/{group}"] += 1
    return sorted(g for g, minimum in groups.items() if 0 < placed[g] < minimum)


def free_slots(sim: InProcess, cpu_millis: int, memory_bytes: int) -> tuple[int, int]:
    """How many pods of this size still fit, node by node, and the free cpu (millicores) in all,
    from a snapshot of the cache."""
    from lahar.scheduler.model import CPU, MEMORY, PODS

    snapshot = sim.cache.snapshot()
    table = snapshot.nodes
    column = snapshot.resources.column
    idle = table.idle[table.schedulable]
    fit = np.minimum(
        np.minimum(idle[:, column[CPU]] // cpu_millis, idle[:, column[MEMORY]] // memory_bytes), idle[:, column[PODS]]
    )
    return int(fit.clip(min=0).sum()), int(idle[:, column[CPU]].clip(min=0).sum())


def scenario_gang(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    nodes = args.nodes or 5000
    count = args.gangs
    total = args.pods or 60_000
    size = max(1, total // (count + 2))  # ten of `size` and one of twice that: 10 x 5000 + 1 x 10,000
    sizes = [size] * count + [2 * size]
    sim = InProcess()
    feed_nodes(sim, nodes, progress)
    timings = Timings()
    groups: dict[str, int] = {}
    per_gang: list[dict[str, Any]] = []
    gc.collect()
    for index, gang_size in enumerate(sizes):
        name = f"gang-{index:02d}"
        group, pods = gang_objects(name, gang_size, created=EPOCH + index)
        groups[f"{NAMESPACE}/{name}"] = gang_size
        sim.add_podgroup(group)
        for pod in pods:
            sim.add_pod(pod)
        keys = [f"{NAMESPACE}/{pod['metadata']['name']}" for pod in pods]
        before = len(timings.cycles)
        run_until(sim, timings, functools.partial(all_bound, sim, keys), progress, name)
        cycles = timings.cycles[before:]
        placed = sum(1 for key in keys if key in sim.bound)
        per_gang.append(
            {
                "gang": name,
                "pods": gang_size,
                "placed": placed,
                "cycles": len(cycles),
                "seconds": round(sum(c.seconds for c in cycles), 4),
                "snapshot": round(sum(c.snapshot_seconds for c in cycles), 4),
                "session": round(sum(c.session_seconds for c in cycles), 4),
                "assume": round(sum(c.assume_seconds for c in cycles), 4),
            }
        )
        progress(f"{name}: {placed}/{gang_size} placed in {per_gang[-1]['seconds']:.3f}s")
    placed_total = sum(g["placed"] for g in per_gang)
    decided_seconds = timings.seconds
    figures = timings.figures()

    # A gang one pod larger than the room left for its pods: it passes the capacity sum (the
    # enqueue gate) but cannot be placed; what does it cost the cycles after it arrived?
    idle = Timings()
    for _ in range(args.repeat):
        idle.add(sim.cycle())
    cpu, memory = 1000, 500 * MIB
    room, free_cpu = free_slots(sim, cpu, memory)
    unfit_size = room + 1
    name = "gang-unfit"
    group, pods = gang_objects(name, unfit_size, cpu="1", memory="500Mi", created=EPOCH + len(sizes))
    groups[f"{NAMESPACE}/{name}"] = unfit_size
    sim.add_podgroup(group)
    for pod in pods:
        sim.add_pod(pod)
    progress(f"{name}: {unfit_size} pods of 1 CPU, room for {room} (free cpu {free_cpu / 1000:.1f})")
    pending = Timings()
    first = sim.cycle()
    for _ in range(args.repeat):
        pending.add(sim.cycle())
    unfit_placed = sum(1 for pod in pods if f"{NAMESPACE}/{pod['metadata']['name']}" in sim.bound)
    partial = partial_gangs(sim, groups)
    idle_mean = statistics.mean(c.seconds for c in idle.cycles) if idle.cycles else 0.0
    pending_mean = statistics.mean(c.seconds for c in pending.cycles) if pending.cycles else 0.0
    max_gang = max(g["seconds"] for g in per_gang)
    result = {
        "scenario": "gang",
        "nodes": nodes,
        "pods": sum(sizes),
        "gangs": len(sizes),
        "placed": placed_total,
        "pods_per_second": rate(placed_total, decided_seconds),
        "seconds": round(decided_seconds, 4),
        "max_gang_decision_seconds": round(max_gang, 4),
        "partial_gangs": len(partial),
        "per_gang": per_gang,
        **figures,
        "unfit_gang": {
            "pods": unfit_size,
            "cpu_per_pod": 1,
            "room": room,
            "fits_by_sum": unfit_size * cpu <= free_cpu,
            "placed": unfit_placed,
            "first_cycle_seconds": round(first.seconds, 4),
            "later_cycle_seconds": round(pending_mean, 4),
            "idle_cycle_seconds": round(idle_mean, 4),
            "extra_seconds_per_cycle": round(pending_mean - idle_mean, 4),
            "first_cycle_action_seconds": {k: round(v, 4) for k, v in first.session.action_seconds.items()},
            "later_cycle_action_seconds": {k: round(v / len(pending.cycles), 4) for k, v in pending.actions.items()},
            "later_cycle_snapshot_seconds": round(statistics.mean(c.snapshot_seconds for c in pending.cycles), 4),
        },
    }
    result["target"] = target("max_gang_decision_seconds", "<=", 0.5, max_gang)
    result["ok"] = placed_total == sum(sizes) and not partial and unfit_placed == 0
    return result


# --- preempt ------------------------------------------------------------------------------------


def scenario_preempt(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    """scheduler_perf's PreemptionBasic: low-priority 900m pods fill every node (4 per node, 3.6 of
    4 CPU), each 3-CPU high-priority pod needs three of them evicted."""
    nodes = args.nodes or 5000
    wanted = args.pods or 5000
    preemptors = min(wanted, nodes)  # one 3-CPU preemptor per node at most
    if preemptors < wanted:
        progress(f"preempt: {wanted} preemptors asked, {nodes} nodes take one each: using {preemptors}")
    low = 4 * nodes
    sim = InProcess()
    feed_nodes(sim, nodes, progress)
    for i in range(low):
        sim.add_pod(pod_dict(f"low-{i:06d}", "900m", "500Mi", node=node_name(i // 4), priority=0, limits=True))
    for i in range(preemptors):
        sim.add_pod(
            pod_dict(f"high-{i:06d}", "3000m", "500Mi", priority=1000, limits=True, created=EPOCH + 1 + i // 1000)
        )
    progress(f"{low} low-priority pods (bound) and {preemptors} high-priority pods fed")
    keys = [f"{NAMESPACE}/high-{i:06d}" for i in range(preemptors)]
    decided: dict[str, float] = {}  # preemptor -> cumulative seconds when first pipelined or bound
    victims: list[Any] = []
    bad_victims = 0
    timings = Timings()

    def on_cycle(cycle: Cycle) -> None:
        nonlocal bad_victims
        for task in cycle.pipelined:
            decided.setdefault(task.key, timings.seconds)
        for task, _ in cycle.bound:
            decided.setdefault(task.key, timings.seconds)
        victims.extend(cycle.evicted)
        bad_victims += sum(1 for task in cycle.evicted if task.priority >= 1000)

    gc.collect()
    run_until(sim, timings, lambda: len(decided) == preemptors, progress, "preempt", on_cycle=on_cycle)
    decide_seconds = timings.seconds
    decide_figures = timings.figures()
    run_until(
        sim, timings, lambda: all(key in sim.bound for key in keys), progress, "preempt (binding)", on_cycle=on_cycle
    )
    bound = sum(1 for key in keys if key in sim.bound)
    result = {
        "scenario": "preempt",
        "nodes": nodes,
        "init_pods": low,
        "pods": preemptors,
        "decided": len(decided),
        "pods_per_second": rate(len(decided), decide_seconds),
        "seconds": round(decide_seconds, 4),
        "victims": len(victims),
        "victims_per_preemptor": round(len(victims) / max(1, len(decided)), 2),
        "victims_not_lower_priority": bad_victims,
        **decide_figures,
        "bound": bound,
        "seconds_to_bound": round(timings.seconds, 4),
        "bound_pods_per_second": rate(bound, timings.seconds),
        "cycles_to_bound": len(timings.cycles),
    }
    result["target"] = target("pods_per_second", ">=", 1000, result["pods_per_second"])
    result["ok"] = len(decided) == preemptors and bound == preemptors and bad_victims == 0
    return result


# --- queues -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobClass:
    """Kueue's baseline workload classes (test/performance/scheduler/configs/baseline)."""

    name: str
    pods: int  # a gang of this many 1-CPU pods
    runtime: float  # virtual seconds from admission to finish
    interval: float  # mean virtual seconds between arrivals, per queue
    priority: int
    share: float  # of a queue's jobs


JOB_CLASSES = (
    JobClass("small", 1, 0.2, 0.1, 50, 0.7),
    JobClass("medium", 5, 0.5, 0.5, 100, 0.2),
    JobClass("large", 20, 1.0, 1.2, 200, 0.1),
)
QUEUE_WEIGHTS = (1, 2, 4)


@dataclass
class Job:
    name: str
    queue: str
    job_class: JobClass
    arrival: float
    attempt: int = 0
    admitted: float | None = None  # first admission
    finish: float | None = None
    pod_keys: list[str] = field(default_factory=list)
    group_name: str = ""
    bound: int = 0
    restarts: int = 0


def queue_shares(session: Any) -> dict[str, tuple[float, float]]:
    """queue -> (allocated cpu, deserved cpu) in millicores, from the proportion plugin's figures
    (`session.queue_figures`: resource lists per queue)."""
    shares: dict[str, tuple[float, float]] = {}
    for name, entry in session.queue_figures.items():
        shares[name] = (float(entry["allocated"].get("cpu", 0)), float(entry["deserved"].get("cpu", 0)))
    return shares


def scenario_queues(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    nodes = args.nodes or 150
    queue_count = args.queues
    jobs_wanted = args.pods or 15_000
    period = args.period
    rng = random.Random(args.seed)
    sim = InProcess()
    feed_nodes(sim, nodes, progress)
    queues = [f"q-{i:02d}" for i in range(queue_count)]
    weights = {q: QUEUE_WEIGHTS[i % len(QUEUE_WEIGHTS)] for i, q in enumerate(queues)}
    for q in queues:
        sim.add_queue(queue_dict(q, weights[q]))
    for job_class in JOB_CLASSES:  # Kueue's workload priorities; a job may preempt lower ones in its queue
        sim.cache.add_priority_class(priority_class_dict(f"bench-{job_class.name}", job_class.priority))
    # Seeded Poisson arrivals per queue and class, with the class's mean interval.
    jobs: list[Job] = []
    per_queue = max(1, jobs_wanted // queue_count)
    for q in queues:
        for job_class in JOB_CLASSES:
            t = rng.uniform(0, job_class.interval)
            for _ in range(max(1, round(per_queue * job_class.share))):
                jobs.append(Job("", q, job_class, t))
                t += rng.expovariate(1 / job_class.interval)
    jobs.sort(key=lambda job: job.arrival)
    for index, job in enumerate(jobs):
        job.name = f"{job.queue}-{job.job_class.name}-{index:05d}"
    last_arrival = jobs[-1].arrival
    progress(
        f"{len(jobs)} jobs in {queue_count} queues over {last_arrival:.1f} virtual s, "
        f"{sum(j.job_class.pods for j in jobs)} pods"
    )

    by_pod: dict[str, Job] = {}
    running: list[tuple[float, int, Job]] = []  # (finish, tiebreak, job)
    arrivals = iter(jobs)
    upcoming = next(arrivals, None)
    total_cpu = nodes * 4000
    share_sum: dict[str, list[float]] = {q: [0.0, 0.0] for q in queues}
    loaded_cycles = 0
    utilization_sum = 0.0
    timings = Timings()
    evicted_pods = restarts = 0
    now = 0.0

    # As the job controller does: a job's PodGroup first, its pods once the PodGroup is Inqueue.
    unborn: dict[str, Job] = {}  # PodGroup key -> admitted-to-be job without pods yet
    bound_pods = 0

    def submit(job: Job, at: float) -> None:
        job.group_name = job.name if not job.attempt else f"{job.name}-r{job.attempt}"
        job.pod_keys, job.bound = [], 0
        size = job.job_class.pods
        sim.add_podgroup(
            podgroup_dict(
                job.group_name,
                size,
                queue=job.queue,
                created=EPOCH + at,
                min_resources={"cpu": str(size), "memory": f"{size}Gi"},
                priority_class=f"bench-{job.job_class.name}",
            )
        )
        if args.eager_pods:
            create_pods(job)
        else:
            unborn[f"{NAMESPACE}/{job.group_name}"] = job

    def create_pods(job: Job) -> None:
        for i in range(job.job_class.pods):
            pod = pod_dict(
                f"{job.group_name}-{i:05d}",
                "1",
                "1Gi",
                group=job.group_name,
                created=EPOCH + now,
                priority=job.job_class.priority,
                priority_class=f"bench-{job.job_class.name}",
            )
            key = f"{NAMESPACE}/{pod['metadata']['name']}"
            sim.add_pod(pod)
            by_pod[key] = job
            job.pod_keys.append(key)

    def remove(job: Job) -> None:
        for key in job.pod_keys:
            if key in sim.pods:
                sim.delete_pod(key)
            by_pod.pop(key, None)
        unborn.pop(f"{NAMESPACE}/{job.group_name}", None)
        sim.delete_podgroup(f"{NAMESPACE}/{job.group_name}")

    pending_jobs = 0
    gc.collect()
    while True:
        while upcoming is not None and upcoming.arrival <= now:
            submit(upcoming, upcoming.arrival)
            pending_jobs += 1
            upcoming = next(arrivals, None)
        while running and running[0][0] <= now:
            _, _, job = heapq.heappop(running)
            remove(job)
        if pending_jobs == 0:
            if upcoming is None and not running:
                break
            # Nothing to decide: jump to the next arrival or finish.
            following = min(([upcoming.arrival] if upcoming else []) + ([running[0][0]] if running else []))
            now = max(now + period, math.ceil(following / period - 1e-9) * period)
            continue
        cycle = timings.add(sim.cycle())
        bound_pods += len(cycle.bound)
        for task, _ in cycle.bound:
            job = by_pod[task.key]
            job.bound += 1
            if job.bound == len(job.pod_keys):
                pending_jobs -= 1
                if job.admitted is None:
                    job.admitted = now
                job.finish = now + job.job_class.runtime
                heapq.heappush(running, (job.finish, id(job), job))
        evicted_pods += len(cycle.evicted)
        for task in cycle.evicted:
            owner = by_pod.get(task.key)
            if owner is None:
                continue  # its job was restarted for another of its pods already
            job = owner
            # The controller restarts a gang that lost a pod (Volcano's PodEvicted -> RestartJob).
            restarts += 1
            if job.finish is not None and job.bound == len(job.pod_keys):
                running = [entry for entry in running if entry[2] is not job]
                heapq.heapify(running)
                pending_jobs += 1
            remove(job)
            job.attempt += 1
            job.restarts += 1
            job.finish = None
            submit(job, now)
        created = 0
        for key, job in list(unborn.items()):
            if sim.podgroups[key]["status"].get("phase") != "Pending":
                del unborn[key]
                create_pods(job)
                created += 1
        if now <= last_arrival:
            shares = queue_shares(cycle.session)
            loaded_cycles += 1
            allocated_total = 0.0
            for q in queues:
                allocated, deserved = shares.get(q, (0.0, 0.0))
                share_sum[q][0] += allocated / total_cpu
                share_sum[q][1] += deserved / total_cpu
                allocated_total += allocated
            utilization_sum += allocated_total / total_cpu
        if len(timings.cycles) % 100 == 0:
            progress(
                f"queues: virtual {now:.1f}s, {len(timings.cycles)} cycles, {pending_jobs} jobs pending "
                f"({len(unborn)} not admitted), {len(running)} running, {timings.seconds:.1f}s of cycles"
            )
        if upcoming is None and not running and not created and not (cycle.bound or cycle.pipelined or cycle.evicted):
            break  # what is left cannot be placed
        now += period
        if now > last_arrival * 20 + 60:
            break

    admitted = [job for job in jobs if job.admitted is not None]
    # Gangs with some but not all pods bound (a job is all-or-nothing: must be none), and jobs
    # left pending when the run ended (nothing running, nothing arriving, nothing placed).
    partial = sum(1 for job in jobs if 0 < sum(key in sim.bound for key in job.pod_keys) < len(job.pod_keys))
    stuck = Counter(job.job_class.name for job in jobs if job.admitted is None)
    by_class: dict[str, list[float]] = defaultdict(list)
    for job in admitted:
        by_class[job.job_class.name].append(job.admitted - job.arrival)  # type: ignore[operator]
    seconds = timings.seconds
    queue_rows: list[dict[str, Any]] = []
    for q in queues:
        allocated_share = share_sum[q][0] / max(1, loaded_cycles)
        deserved_share = share_sum[q][1] / max(1, loaded_cycles)
        queue_rows.append(
            {
                "queue": q,
                "weight": weights[q],
                "share": round(allocated_share, 4),
                "deserved": round(deserved_share, 4),
                "ratio": round(allocated_share / deserved_share, 3) if deserved_share else None,
            }
        )
    by_weight: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in queue_rows:
        by_weight[row["weight"]].append(row)
    result = {
        "scenario": "queues",
        "nodes": nodes,
        "queues": queue_count,
        "jobs": len(jobs),
        "admitted": len(admitted),
        "pods": sum(job.job_class.pods for job in jobs),
        "pods_per_second": rate(bound_pods, seconds),
        "seconds": round(seconds, 4),
        "virtual_seconds": round(now, 2),
        "period": period,
        "pods_created": "with the PodGroup" if args.eager_pods else "once Inqueue",
        "partial_gangs": partial,
        "never_admitted": dict(stuck),
        "evicted_pods": evicted_pods,
        "job_restarts": restarts,
        "utilization": round(utilization_sum / max(1, loaded_cycles), 4),
        "mean_time_to_admission": {name: round(statistics.mean(values), 3) for name, values in by_class.items()},
        "p90_time_to_admission": {name: round(percentile(values, 0.9), 3) for name, values in by_class.items()},
        "share_by_weight": {
            str(w): {
                "share": round(statistics.mean(r["share"] for r in rows), 4),
                "deserved": round(statistics.mean(r["deserved"] for r in rows), 4),
            }
            for w, rows in sorted(by_weight.items())
        },
        "per_queue": queue_rows,
        **timings.figures(),
    }
    result["ok"] = len(admitted) == len(jobs) and partial == 0
    return result


# --- oversub ------------------------------------------------------------------------------------

RECLAIM_THRESHOLD = 0.65  # the old rule, per resource: capacity x 0.65 - online peak (the fleet's comparison)


def synthetic_report(node: str, usage_cores: float, memory_used: int, reclaimable: dict[str, int]) -> Any:
    from lahar.rpc.report import AgentHealth, CpuUsage, MemoryUsage, NodeReport

    return NodeReport(
        node=node,
        sequence=1,
        timestamp=time.time(),
        cpu=CpuUsage(4, usage_cores, usage_cores / 4, []),
        memory=MemoryUsage(32 * GIB, memory_used, 32 * GIB - memory_used, 0),
        reclaimable=reclaimable,
        health=AgentHealth("bench", 0.0),
    )


def scenario_oversub(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    from lahar.agent.qos.reclaimable import ReclaimableConfig
    from lahar.agent.qos.reclaimable import reclaimable as agent_rule
    from lahar.scheduler.node_reports import NodeReportStore

    config = ReclaimableConfig()
    nodes = args.nodes or 5000
    be_pods = args.pods or 10_000
    rng = random.Random(args.seed)
    store = NodeReportStore(clock=lambda: 0.0)  # reports age only as set here: fresh 0 s, stale 1 h
    sim = InProcess(reports=store)
    feed_nodes(sim, nodes, progress)
    reclaimable: dict[str, dict[str, int]] = {}
    stale: set[str] = set()
    unreported: set[str] = set()
    stale_age = 3600.0
    for i in range(nodes):
        name = node_name(i)
        for j in range(4):  # 4 x (1 CPU, 8Gi): every node fully requested by online services, which
            # kube-scheduler placed (they hold their nodes' resources but are in no queue)
            sim.add_pod(pod_dict(f"ls-{i:05d}-{j}", "1", "8Gi", node=name, qos="LS", scheduler="default-scheduler"))
        if i % 20 == 7:
            stale.add(name)
        elif i % 50 == 13:
            unreported.add(name)
            continue
        usage_cores = 4 * rng.uniform(0.30, 0.50)
        memory_used = int(32 * GIB * rng.uniform(0.30, 0.50))
        # what the agent lends with that online usage as its recent peak (agent/qos/reclaimable.py)
        lent = agent_rule(
            {"cpu": 4000, "memory": 32 * GIB}, {"cpu": int(usage_cores * 1000), "memory": memory_used}, config
        )
        reclaimable[name] = lent
        received = -stale_age if name in stale else 0.0
        store.submit(synthetic_report(name, usage_cores, memory_used, lent), received_at=received)
    for i in range(be_pods):
        sim.add_pod(pod_dict(f"be-{i:06d}", "500m", "2Gi", qos="BE", created=EPOCH + 1 + i // 1000))
    progress(
        f"{4 * nodes} LS pods (bound), {len(reclaimable) - len(stale)} fresh reports, {len(stale)} stale, "
        f"{len(unreported)} nodes without one, {be_pods} BE pods fed"
    )
    keys = [f"{NAMESPACE}/be-{i:06d}" for i in range(be_pods)]
    timings = Timings()
    gc.collect()
    run_until(sim, timings, lambda: all(key in sim.bound for key in keys), progress, "oversub", stall_limit=1)
    be_cpu: Counter[str] = Counter()
    be_memory: Counter[str] = Counter()
    placed = 0
    for key in keys:
        node = sim.bound.get(key)
        if node:
            placed += 1
            be_cpu[node] += 500
            be_memory[node] += 2 * GIB
    violations = sum(
        1
        for node in be_cpu
        if node not in reclaimable
        or be_cpu[node] > reclaimable[node]["cpu"]
        or be_memory[node] > reclaimable[node]["memory"]
    )
    fresh_cpu = sum(lent["cpu"] for node, lent in reclaimable.items() if node not in stale)
    seconds = timings.seconds
    total_cpu, total_memory = nodes * 4000, nodes * 32 * GIB
    result = {
        "scenario": "oversub",
        "nodes": nodes,
        "init_pods": 4 * nodes,
        "pods": be_pods,
        "placed": placed,
        "pending": be_pods - placed,
        "pods_per_second": rate(placed, seconds),
        "seconds": round(seconds, 4),
        "extra_utilization_cpu": round(sum(be_cpu.values()) / total_cpu, 4),
        "extra_utilization_memory": round(sum(be_memory.values()) / total_memory, 4),
        "reclaimable_cpu_lent_ratio": round(sum(be_cpu.values()) / fresh_cpu, 4) if fresh_cpu else 0.0,
        "violations": violations,
        "be_on_stale_nodes": sum(be_cpu[node] > 0 for node in stale),
        "be_on_unreported_nodes": sum(be_cpu[node] > 0 for node in unreported),
        "stale_nodes": len(stale),
        "unreported_nodes": len(unreported),
        **timings.figures(),
    }
    fleet_nodes = min(nodes, FLEET_NODES)
    result["fleet"] = {rule: oversub_fleet(fleet_nodes, args.seed, rule, progress) for rule in ("agent", "old")}
    fleet = result["fleet"]["agent"]
    result["harvested_cpu"] = fleet["harvested_cpu"]
    result["online_slo_violations"] = fleet["online_slo_violations"]
    result["ok"] = (
        placed > 0
        and violations == 0
        and result["be_on_stale_nodes"] == 0
        and result["be_on_unreported_nodes"] == 0
        and fleet["harvested_cpu"] >= 0.9
        and fleet["online_slo_violations"] == 0
    )
    return result


# The simulated fleet: online load over time, each node's agent computing reclaimable from its own
# reports, the scheduler placing long-running BE workers on it once, then harvest and online SLO
# measured second by second.
FLEET_NODES = 500
FLEET_WARMUP_SECONDS = 300  # the memory window fills before BE is placed
FLEET_SECONDS = 300  # measured after the first placement
FLEET_PLACE_EVERY = 10  # seconds between scheduling cycles (reports reach the scheduler then)
FLEET_BE_SECONDS = 120  # how long each BE worker runs
FLEET_BE_CPU, FLEET_BE_MEMORY = 500, GIB  # each BE pod: a single-threaded worker, 1 core at most
FLEET_SYSTEM_CORES = 0.1  # kubelet, runtime, kernel: outside pods
FLEET_MEMORY_LIMIT = 0.95  # online + BE memory above this share of the node: reclaim / OOM risk


def fleet_traces(nodes: int, seconds: int, seed: int) -> tuple[Any, Any]:
    """Online CPU (cores) and memory (bytes) per node and second, shape (nodes, seconds): a base
    of 30-50% of the node, a slow wave (+-10%, 2-5 min), bursts (+0.5-1.5 cores for 2-10 s, about
    one a minute) and noise; memory 30-50% drifting slowly."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(seconds)
    base = rng.uniform(0.30, 0.50, (nodes, 1)) * 4
    wave = 0.4 * np.sin(2 * np.pi * t / rng.uniform(120, 300, (nodes, 1)) + rng.uniform(0, 6.3, (nodes, 1)))
    bursts = np.zeros((nodes, seconds))
    for node, start in zip(*np.nonzero(rng.random((nodes, seconds)) < 1 / 60), strict=True):
        bursts[node, start : start + rng.integers(2, 11)] += rng.uniform(0.5, 1.5)
    cpu = np.clip(base + wave + bursts + rng.normal(0, 0.05, (nodes, seconds)), 0.05, 3.8)
    memory_share = rng.uniform(0.30, 0.50, (nodes, 1)) + 0.03 * np.sin(2 * np.pi * t / 600)
    return cpu, (memory_share * 32 * GIB).astype(np.int64)


def fleet_report(node: str, at: float, online: float, memory: int, be_pods: int, be_cores: float) -> Any:
    from lahar.rpc.report import AgentHealth, CpuUsage, MemoryUsage, NodeReport, PodUsage

    pods = [PodUsage(NAMESPACE, f"{node}-ls", f"{node}-ls", "LS", "Burstable", "ls", online, memory)]
    pods += [
        PodUsage(NAMESPACE, f"{node}-be{i}", f"{node}-be{i}", "BE", "Burstable", "be", be_cores / be_pods, GIB)
        for i in range(be_pods)
    ]
    used = online + FLEET_SYSTEM_CORES + be_cores
    memory_used = memory + be_pods * GIB
    return NodeReport(
        node=node,
        sequence=int(at) + 1,
        timestamp=at,
        cpu=CpuUsage(4, used, used / 4, []),
        memory=MemoryUsage(32 * GIB, memory_used, 32 * GIB - memory_used, 0),
        pods=pods,
        health=AgentHealth("bench", 0.0),
    )


def old_rule_reclaimable(cpu: Any, memory: Any, node: int, at: int) -> dict[str, int]:
    """The rule before issue 23: capacity x 0.65 - online peak over 300 s, CPU and memory alike."""
    window = slice(max(0, at - 299), at + 1)
    online_peak = float(cpu[node, window].max()) + FLEET_SYSTEM_CORES
    return {
        "cpu": max(0, int(4000 * RECLAIM_THRESHOLD) - int(online_peak * 1000)),
        "memory": max(0, int(32 * GIB * RECLAIM_THRESHOLD) - int(memory[node, window].max())),
    }


def oversub_fleet(nodes: int, seed: int, rule: str, progress: Progress) -> dict[str, Any]:
    """Harvest and online SLO of one reclaimable rule over the simulated fleet. `rule`: "agent"
    (agent/qos/reclaimable.py's tracker fed each node's reports, as the agents run it) or "old"
    (capacity x 0.65 - online peak over 300 s). Every node reports each second; every
    FLEET_PLACE_EVERY seconds the latest reports reach the scheduler and a cycle places BE
    workers, each running FLEET_BE_SECONDS. CPU under the kernel's weights (BE at the smallest
    weight, as the agent sets it): online pods take what they demand first and BE gets the rest,
    each worker at most one core. Online SLO violation: a node-second where online demand plus the
    BE workers' weight share passes the node's cores (online would be short), or online plus BE
    memory passes FLEET_MEMORY_LIMIT of the node (reclaim or OOM would hit online pods)."""
    import numpy as np

    from lahar.agent.qos.reclaimable import ReclaimableConfig, ReclaimableTracker
    from lahar.scheduler.node_reports import NodeReportStore

    total = FLEET_WARMUP_SECONDS + FLEET_SECONDS
    cpu, memory = fleet_traces(nodes, total, seed)
    names = [node_name(i) for i in range(nodes)]
    row_of_node = {name: i for i, name in enumerate(names)}
    trackers = [ReclaimableTracker(ReclaimableConfig()) for _ in range(nodes)]
    store = NodeReportStore(clock=lambda: 0.0)
    sim = InProcess(reports=store)
    for i, name in enumerate(names):
        sim.add_node(node_dict(name))
        for j in range(4):
            sim.add_pod(pod_dict(f"ls-{i:05d}-{j}", "1", "8Gi", node=name, qos="LS", scheduler="default-scheduler"))
    count = np.zeros(nodes, dtype=np.int64)  # BE workers running per node
    ends: list[tuple[int, str]] = []  # (second it ends, pod key), a heap
    created = placed = 0
    shape = (nodes, FLEET_SECONDS)
    idle, be_usage, be_count = np.zeros(shape), np.zeros(shape), np.zeros(shape, dtype=np.int64)
    lent_cpu: list[int] = []
    quiet = Progress(quiet=True)
    for at in range(total):
        while ends and ends[0][0] <= at:  # workers that finished
            _, key = heapq.heappop(ends)
            count[row_of_node[sim.bound[key]]] -= 1
            sim.delete_pod(key)
        free = np.maximum(4 - FLEET_SYSTEM_CORES - cpu[:, at], 0.0)
        usage = np.minimum(count * 1.0, free)  # weights: online first, BE the rest
        reports = []
        for i, name in enumerate(names):
            report = fleet_report(
                name, float(at), float(cpu[i, at]), int(memory[i, at]), int(count[i]), float(usage[i])
            )
            report.reclaimable = trackers[i].update(report, [], float(at))
            if rule == "old":
                report.reclaimable = old_rule_reclaimable(cpu, memory, i, at)
            reports.append(report)
        if at >= FLEET_WARMUP_SECONDS:
            k = at - FLEET_WARMUP_SECONDS
            idle[:, k], be_usage[:, k], be_count[:, k] = free, usage, count
        if at >= FLEET_WARMUP_SECONDS - FLEET_PLACE_EVERY and at % FLEET_PLACE_EVERY == 0:
            for report in reports:
                store.submit(report, received_at=0.0)
            lent_cpu += [report.reclaimable["cpu"] for report in reports]
            while created - placed < nodes * 8:  # more than the fleet takes: the queue never runs dry
                sim.add_pod(pod_dict(f"fleet-be-{created:07d}", f"{FLEET_BE_CPU}m", "1Gi", qos="BE", created=EPOCH + 1))
                created += 1
            before = set(sim.bound)
            run_until(sim, Timings(), lambda: False, quiet, f"fleet-{rule}", stall_limit=1)
            for key in set(sim.bound) - before:
                count[row_of_node[sim.bound[key]]] += 1
                placed += 1
                heapq.heappush(ends, (at + FLEET_BE_SECONDS, key))
    progress(f"fleet ({rule}): {nodes} nodes, {total} s, {placed} BE workers placed")
    online = cpu[:, FLEET_WARMUP_SECONDS:]
    # Shares: each online pod 1024 x 1 CPU requested, each BE worker 2 (the agent's BE weight).
    online_weight = 4 * 1024
    online_guaranteed = (4 - FLEET_SYSTEM_CORES) * online_weight / (online_weight + 2 * be_count)
    cpu_short = (online > online_guaranteed) & (be_count > 0)
    memory_over = memory[:, FLEET_WARMUP_SECONDS:] + be_count * GIB > FLEET_MEMORY_LIMIT * 32 * GIB
    return {
        "rule": rule,
        "nodes": nodes,
        "be_workers_placed": placed,
        "cpu_lent_cores_mean": round(float(np.mean(lent_cpu)) / 1000, 3),
        "cpu_idle_cores_mean": round(float(idle.mean()), 3),
        "be_cpu_cores_mean": round(float(be_usage.mean()), 3),
        "be_workers_per_node_mean": round(float(be_count.mean()), 2),
        "harvested_cpu": round(float(be_usage.sum() / max(idle.sum(), 1e-9)), 4),
        "online_slo_violations": int((cpu_short | memory_over).sum()),
    }


# --- http ---------------------------------------------------------------------------------------


def api_shaped(obj: Obj) -> Obj:
    """The object as a client would POST it: the server sets uid, version and creation time."""
    metadata = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion", "creationTimestamp")}
    return {**obj, "metadata": metadata}


def create_all(api: Any, kind: Any, objects: list[Obj], threads: int, progress: Progress, what: str) -> float:
    from concurrent.futures import ThreadPoolExecutor

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(lambda obj: api.create(kind, api_shaped(obj)), objects):
            pass
    seconds = time.perf_counter() - started
    progress(f"{len(objects)} {what} created in {seconds:.1f}s ({rate(len(objects), seconds)}/s)")
    return seconds


def scenario_http(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    """The real scheduler loop (scheduler.Scheduler: informers, cycles, the binder's concurrent
    pods/binding calls, status writes) against `lahar apiserver` on loopback, over HTTP."""
    import tempfile
    from pathlib import Path

    from kubernetes import client

    from lahar.api import kinds
    from lahar.bench.apiserver import start_server
    from lahar.client.api import KubeApi
    from lahar.endpoints import free_loopback_port
    from lahar.scheduler.scheduler import Scheduler

    nodes = args.nodes or 5000
    pods = args.pods or 10_000
    init = args.init if args.init is not None else (1000 if args.pods is None else pods // 10)
    port = free_loopback_port()
    threads = 8
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), port, "normal")
        scheduler = None
        try:
            configuration = client.Configuration()
            configuration.host = f"http://127.0.0.1:{port}"
            configuration.connection_pool_maxsize = 64
            api = KubeApi(client.ApiClient(configuration))
            api.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            create_all(api, kinds.NODE, [node_dict(node_name(i)) for i in range(nodes)], threads, progress, "nodes")
            create_all(
                api,
                kinds.POD,
                [pod_dict(f"init-{i:06d}", node=node_name(i % nodes)) for i in range(init)],
                threads,
                progress,
                "init pods (bound)",
            )
            create_all(
                api, kinds.POD, [pod_dict(f"pod-{i:06d}") for i in range(pods)], threads, progress, "pending pods"
            )

            def unbound() -> int:
                page = api.list(kinds.POD, NAMESPACE, field_selector="spec.nodeName=", limit=1)
                return len(page.get("items") or [])

            class TimedScheduler(Scheduler):
                """The scheduler, its cycles timed (when each ended, how long, how many binds)."""

                cycle_log: list[tuple[float, float, int]]

                def run_once(self) -> Any:
                    begun = time.perf_counter()
                    session = super().run_once()
                    ended = time.perf_counter()
                    self.cycle_log.append((ended, ended - begun, sum(len(batch.tasks) for batch in session.binds)))
                    return session

            scheduler = TimedScheduler(api, period=args.loop_period)
            scheduler.cycle_log = []
            gc.collect()
            started = time.perf_counter()
            scheduler.start()
            synced_at = None
            next_report = started + 2
            deadline = started + max(120.0, pods / 50)
            while unbound():
                now = time.perf_counter()
                if synced_at is None and scheduler.cache.synced:
                    synced_at = now
                if now > deadline:
                    break
                if now >= next_report:
                    progress(
                        f"http: {now - started:.1f}s, {scheduler.cycles} cycles, cache synced: {scheduler.cache.synced}"
                    )
                    next_report = now + 2
                time.sleep(0.05)
            seconds = time.perf_counter() - started
            bound_pods = api.list(kinds.POD, NAMESPACE, field_selector="spec.nodeName!=")["items"]
        finally:
            if scheduler is not None:
                scheduler.stop()
            server.terminate()
            server.wait(10)
    placed = sum(1 for pod in bound_pods if pod["metadata"]["name"].startswith("pod-"))
    # Read after stop() joined the loop: the last binds can land before their cycle has counted itself.
    cycles = scheduler.cycles
    log = scheduler.cycle_log
    committed, decided_at = 0, None
    for ended, _, count in log:
        committed += count
        if decided_at is None and committed >= pods:
            decided_at = ended - started
    result = {
        "scenario": "http",
        "nodes": nodes,
        "init_pods": init,
        "pods": pods,
        "placed": placed,
        "pods_per_second": rate(placed, seconds),
        "seconds": round(seconds, 3),
        "sync_seconds": round(synced_at - started, 3) if synced_at is not None else None,
        "first_cycle_seconds": round(log[0][1], 3) if log else None,
        "all_decided_at_seconds": round(decided_at, 3) if decided_at is not None else None,
        "binding_seconds_after_decisions": round(seconds - decided_at, 3) if decided_at is not None else None,
        "cycles": cycles,
        "cycle_seconds_total": round(sum(duration for _, duration, _ in log), 3),
        "bind_threads": 32,
        "loop_period": args.loop_period,
    }
    result["target"] = target("pods_per_second", ">=", 1000, result["pods_per_second"])
    result["ok"] = placed == pods
    return result


# --- the command --------------------------------------------------------------------------------

SCENARIOS: dict[str, Callable[[argparse.Namespace, Progress], dict[str, Any]]] = {
    "basic": scenario_basic,
    "basic-50k": scenario_basic_50k,
    "gang": scenario_gang,
    "preempt": scenario_preempt,
    "queues": scenario_queues,
    "oversub": scenario_oversub,
    "http": scenario_http,
}


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, dict):
        if any(isinstance(v, dict) for v in value.values()):
            return "; ".join(f"{k}: {_format(v)}" for k, v in value.items())
        return ", ".join(f"{k}={_format(v)}" for k, v in value.items()) or "-"
    return str(value)


def print_human(result: dict[str, Any]) -> None:
    head = (
        f"{result['scenario']}: {result['nodes']:,} nodes, {result['pods']:,} pods: "
        f"{result['pods_per_second']:,.1f} pods/s in {result['seconds']:.3f}s"
    )
    goal = result.get("target")
    if goal:
        head += (
            f"   target {goal['metric']} {goal['op']} {_format(goal['value'])}: {'met' if goal['met'] else 'MISSED'}"
        )
    print(head)
    skip = {"scenario", "nodes", "pods", "pods_per_second", "seconds", "target"}
    width = max(len(key) for key in result)
    for key, value in result.items():
        if key in skip:
            continue
        if isinstance(value, list):
            print(f"  {key}:")
            for row in value:
                print(f"    {_format(row)}")
        else:
            print(f"  {key:<{width}}  {_format(value)}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lahar bench scheduler", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", required=True, choices=[*SCENARIOS, "all"])
    parser.add_argument("--nodes", type=int, help="nodes (default: the scenario's shape)")
    parser.add_argument("--pods", type=int, help="measured pods (default: the scenario's shape)")
    parser.add_argument("--init", type=int, help="init pods for basic/basic-50k/http (default 1/10 of --pods)")
    parser.add_argument("--gangs", type=int, default=10, help="gang: gangs of the common size (default 10)")
    parser.add_argument("--queues", type=int, default=30, help="queues: how many queues (default 30)")
    parser.add_argument(
        "--period", type=float, default=0.1, help="queues: virtual seconds between cycles (default 0.1)"
    )
    parser.add_argument(
        "--eager-pods",
        action="store_true",
        help="queues: create a job's pods with its PodGroup, as Spark and Ray do (default: "
        "once the PodGroup is Inqueue, as the job controller does)",
    )
    parser.add_argument(
        "--loop-period",
        type=float,
        default=1.0,
        help="http: the scheduler loop's period in seconds (default 1, the scheduler's own)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="gang: idle cycles and cycles with the unfit gang pending that are averaged (default 5)",
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed for queues and oversub (default 1)")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the run to FILE")
    parser.add_argument("--json", action="store_true", help="one JSON object per scenario")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    for name in ("nodes", "pods", "init"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "init" else 1):
            parser.error(f"--{name} must be at least {0 if name == 'init' else 1}")
    if args.gangs < 1 or args.queues < 1 or args.period <= 0 or args.loop_period <= 0 or args.repeat < 1:
        parser.error("--gangs, --queues and --repeat must be at least 1, --period and --loop-period above 0")
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    progress = Progress(args.quiet)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    ok = True
    for name in names:
        progress(f"scenario {name}")
        if profiler is not None:
            profiler.enable()
        result = SCENARIOS[name](args, progress)
        if profiler is not None:
            profiler.disable()
        result["cpus"] = os.cpu_count()
        result["load_average_1m"] = round(os.getloadavg()[0], 2)  # the machine is shared: how busy it was
        ok = ok and bool(result.get("ok", True))
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print_human(result)
        gc.collect()
    if profiler is not None:
        profiler.dump_stats(args.profile)
        progress(f"profile written to {args.profile} (python -m pstats {args.profile})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
