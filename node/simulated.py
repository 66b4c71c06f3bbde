"""SimulatedNodes: `lahar up --sim-nodes N`. N Nodes that accept the pods bound to them without
running anything, as kwok does, so big jobs, gangs and queues can be tried on a laptop:

- a pod bound to a simulated node is Running at once (its init containers shown completed);
- with the annotation `lahar.dev/sim-duration: "<seconds>"` it ends that long after it started,
  Succeeded, or Failed with the exit code `lahar.dev/sim-exit-code` names (default 0); without
  the annotation it runs until deleted (the restart policy is not simulated);
- a deleted or evicted pod is removed at once (its grace period is not simulated);
- with `lahar.dev/sim-usage: "<fraction>"` it uses that share of its requests in the usage
  reports (default: the node's `factor`), so online pods that reserve much and use little sit
  beside batch pods that use all they ask;
- a bad annotation fails the pod with a StartError that names it.

With a scheduler report address, each node also streams synthetic usage NodeReports over the
agents' gRPC protocol (agent/report_stream.py, one stream per node): each running pod uses its
requests × `factor` with relative noise `noise`, the node adds a small system share, and
`reclaimable` is what the agent would offer BE pods from that usage, by the agent's own rule.
`start(stream_reports=False)` then `start_streams()` starts the streams later, once the scheduler
listens (the streams would otherwise wait out their reconnect backoff).

Efficient by construction: one asyncio loop thread runs every node's timers and report streams,
one informer watches all bound pods, and a small pool of API writers sends statuses. A thousand
nodes fit on two cores."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import random
import threading
import time
from collections.abc import Container, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lahar
from lahar.agent.qos.reclaimable import ReclaimableConfig
from lahar.agent.qos.reclaimable import reclaimable as agent_reclaimable
from lahar.agent.report_stream import ReportStreamer, StreamStats
from lahar.api import kinds
from lahar.api.pod import RUNNING, TERMINAL_PHASES
from lahar.api.qos import QoSClass, k8s_qos_class, qos_class
from lahar.api.quantity import QuantityError, cpu_millis, memory_bytes
from lahar.api.resources import pod_requests
from lahar.client.api import KubeApi, Obj
from lahar.client.errors import KubeError
from lahar.client.informer import Informer
from lahar.node import node_object
from lahar.node.api_writer import ApiWriter
from lahar.node.lifecycle import (
    START_ERROR,
    START_ERROR_EXIT_CODE,
    PodRecords,
    Terminated,
    exit_reason,
    parse_rfc3339,
    pod_status,
)
from lahar.rpc import is_loopback_address
from lahar.rpc.report import AgentHealth, CpuUsage, MemoryUsage, NodeReport, PodUsage

log = logging.getLogger("lahar.node.simulated")

SIM_DURATION_ANNOTATION = "lahar.dev/sim-duration"
SIM_EXIT_CODE_ANNOTATION = "lahar.dev/sim-exit-code"
SIM_USAGE_ANNOTATION = "lahar.dev/sim-usage"
SIMULATED_LABEL = "lahar.dev/simulated"
DEFAULT_PREFIX = "lahar-sim-"
DEFAULT_REPORT_SECONDS = 5.0
THREAD_NAME = "lahar-sim"
STREAM_LOGGER = "lahar.agent.report_stream"
STREAM_SUMMARY_SECONDS = 30.0  # how often disconnected streams are summed up in one line
REGISTER_WORKERS = 4


@dataclass(frozen=True)
class SimNodeSize:
    """Each simulated node's capacity and extra labels."""

    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_resource: str = "nvidia.com/gpu"
    # What a kubelet reports for its root filesystem; a job asking for some fits, as on a real node.
    ephemeral_storage: str = "100Gi"

    def __post_init__(self) -> None:
        for name, value, parse in (
            ("cpu", self.cpu, cpu_millis),
            ("memory", self.memory, memory_bytes),
            ("ephemeral-storage", self.ephemeral_storage, memory_bytes),
        ):
            try:
                amount = parse(value)
            except QuantityError as exc:
                raise ValueError(f"simulated node size: {name}: {exc}") from exc
            if amount <= 0:
                raise ValueError(f"simulated node size: {name} must be more than 0, not {value!r}")
        if self.pods <= 0 or self.gpus < 0:
            raise ValueError(
                f"simulated node size: pods must be positive and gpus not negative (pods={self.pods}, gpus={self.gpus})"
            )

    @classmethod
    def parse(cls, text: str, labels: Mapping[str, str] | None = None) -> SimNodeSize:
        """From `cpu=8,memory=32Gi,pods=110,gpus=2` (any subset), as a command line gives it."""
        values: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, equals, value = item.partition("=")
            key = key.replace("-", "_")
            if not equals or key not in ("cpu", "memory", "ephemeral_storage", "pods", "gpus"):
                raise ValueError(
                    f"simulated node size {text!r}: expected cpu=, memory=, ephemeral-storage=, pods= or gpus=,"
                    f" not {item!r}"
                )
            try:
                values[key] = int(value) if key in ("pods", "gpus") else value
            except ValueError:
                raise ValueError(f"simulated node size: {key} must be a whole number, not {value!r}") from None
        return cls(**values, labels=dict(labels or {}))

    def spec(self) -> str:
        """The size as `parse` reads it (labels aside), to hand to another process."""
        return (
            f"cpu={self.cpu},memory={self.memory},ephemeral-storage={self.ephemeral_storage},"
            f"pods={self.pods},gpus={self.gpus}"
        )

    def capacity(self) -> dict[str, str]:
        capacity = {
            "cpu": self.cpu,
            "memory": self.memory,
            "ephemeral-storage": self.ephemeral_storage,
            "pods": str(self.pods),
        }
        if self.gpus:
            capacity[self.gpu_resource] = str(self.gpus)
        return capacity


@dataclass(frozen=True)
class SyntheticUsage:
    """How simulated pods and nodes use what they have."""

    factor: float = 0.6  # a pod uses this share of its requests, on average
    noise: float = 0.1  # relative standard deviation of each sample
    system_ratio: float = 0.02  # the node's own use outside pods, of its capacity
    # What the agent lends BE pods from that usage: its own rule and defaults (agent/qos/reclaimable.py).
    reclaim: ReclaimableConfig = field(default_factory=ReclaimableConfig)
    best_effort_cpu_millis: int = 100  # what a pod without requests uses
    best_effort_memory_bytes: int = 128 << 20


# --- simulation state -------------------------------------------------------------------------------


@dataclass
class SimPod:
    namespace: str
    name: str
    uid: str
    cpu_millis: int
    memory_bytes: int
    qos_class: str
    kube_qos_class: str
    timer: asyncio.TimerHandle | None = None
    factor: float | None = None  # its share of its requests used (lahar.dev/sim-usage); None: the node's

    @classmethod
    def of(cls, pod: Obj, usage: SyntheticUsage, factor: float | None = None) -> SimPod:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        requests = pod_requests(pod)
        cpu = requests.get("cpu") or requests.get("kubernetes.io/batch-cpu") or usage.best_effort_cpu_millis
        memory = requests.get("memory") or requests.get("kubernetes.io/batch-memory") or usage.best_effort_memory_bytes
        return cls(
            meta.get("namespace") or "default",
            meta["name"],
            meta["uid"],
            cpu,
            memory,
            str(qos_class(pod)),
            (pod.get("status") or {}).get("qosClass") or k8s_qos_class(spec),
            factor=factor,
        )


@dataclass
class SimNode:
    name: str
    address: str
    cpu_millis: int
    memory_bytes: int
    pods: dict[str, SimPod] = field(default_factory=dict)  # running, by uid
    sequence: int = 0

    @property
    def cores(self) -> int:
        return max(1, math.ceil(self.cpu_millis / 1000))


def sim_plan(pod: Obj) -> tuple[float | None, int, str]:
    """(duration in seconds or None, exit code, problem) from the pod's annotations."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    duration_text = annotations.get(SIM_DURATION_ANNOTATION)
    exit_text = annotations.get(SIM_EXIT_CODE_ANNOTATION, "0")
    try:
        duration = float(duration_text) if duration_text is not None else None
        if duration is not None and not (math.isfinite(duration) and duration >= 0):
            raise ValueError
    except ValueError:
        return None, 0, f"{SIM_DURATION_ANNOTATION}: {duration_text!r} is not a number of seconds"
    try:
        exit_code = int(exit_text)
    except ValueError:
        return None, 0, f"{SIM_EXIT_CODE_ANNOTATION}: {exit_text!r} is not an exit code"
    return duration, exit_code, ""


def sim_usage(pod: Obj) -> tuple[float | None, str]:
    """(the share of its requests the pod uses, or None for the default; problem) from
    `lahar.dev/sim-usage`."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(SIM_USAGE_ANNOTATION)
    if text is None:
        return None, ""
    try:
        factor = float(text)
    except ValueError:
        factor = -1.0
    if not (math.isfinite(factor) and factor >= 0):
        return None, f"{SIM_USAGE_ANNOTATION}: {text!r} is not a share of the requests (a number, 0 or more)"
    return factor, ""


def reclaimable(
    node_cpu: int, node_memory: int, online_cpu: float, online_memory: float, usage: SyntheticUsage
) -> dict[str, int]:
    """What the agent would offer BE pods on a node of `node_cpu` millicores and `node_memory`
    bytes, by its own rule (agent/qos/reclaimable.py: CPU = capacity − online usage − a 5 %
    margin; memory = capacity × 0.65 − online usage) with steady usage as the online peak and no
    interference. Online usage includes the node's own share (`system_usage`)."""
    online = {"cpu": round(online_cpu), "memory": round(online_memory)}
    return agent_reclaimable({"cpu": node_cpu, "memory": node_memory}, online, usage.reclaim)


def system_usage(node_cpu: int, node_memory: int, usage: SyntheticUsage) -> tuple[float, float]:
    """The node's own use outside pods (millicores, bytes)."""
    return node_cpu * usage.system_ratio, node_memory * usage.system_ratio


def sim_status(
    pod: Obj, host_ip: str, started_at: float, at: float, end: tuple[int, str, str] | None = None
) -> dict[str, Any]:
    """The status of a simulated pod: every container running since `started_at`, or, with
    `end` = (exit code, reason, message), all ended so at `at`."""
    records = PodRecords.for_pod(pod)
    container_id = f"sim://{pod['metadata']['uid']}"
    for record in records.init:
        record.start(container_id, started_at)
        record.end(Terminated(0, exit_reason(0), started_at, started_at, container_id=container_id), final=True)
    for record in records.app:
        record.start(container_id, started_at)
        if end is not None:
            code, reason, message = end
            record.end(Terminated(code, reason, at, started_at, message, container_id), final=True)
    return pod_status(pod, records.init, records.app, host_ip, host_ip, started_at, at)


def synthetic_report(node: SimNode, usage: SyntheticUsage, rng: random.Random, now: float) -> NodeReport:
    """One NodeReport of what the node's running pods would use."""

    def sample(amount: float, factor: float | None) -> float:
        return amount * (usage.factor if factor is None else factor) * max(0.0, rng.gauss(1.0, usage.noise))

    pods = []
    online_cpu, online_memory = system_usage(node.cpu_millis, node.memory_bytes, usage)
    for pod in node.pods.values():
        cpu, memory = sample(pod.cpu_millis, pod.factor), sample(pod.memory_bytes, pod.factor)
        pods.append(
            PodUsage(pod.namespace, pod.name, pod.uid, pod.qos_class, pod.kube_qos_class, "", cpu / 1000, int(memory))
        )
        if pod.qos_class != QoSClass.BE:
            online_cpu, online_memory = online_cpu + cpu, online_memory + memory
    used_cpu = min(node.cpu_millis, node.cpu_millis * usage.system_ratio + sum(p.cpu_usage_cores for p in pods) * 1000)
    used_memory = min(
        node.memory_bytes, int(node.memory_bytes * usage.system_ratio + sum(p.memory_working_set_bytes for p in pods))
    )
    node.sequence += 1
    return NodeReport(
        node=node.name,
        sequence=node.sequence,
        timestamp=now,
        cpu=CpuUsage(node.cores, used_cpu / 1000, used_cpu / node.cpu_millis),
        memory=MemoryUsage(node.memory_bytes, used_memory, node.memory_bytes - used_memory, 0),
        pods=pods,
        reclaimable=reclaimable(node.cpu_millis, node.memory_bytes, online_cpu, online_memory, usage),
        health=AgentHealth(f"lahar-sim-{lahar.__version__}", 0.0),
    )


class _FromSimulation(logging.Filter):
    """Keeps the per-stream reconnect warnings of a thousand simulated nodes out of the log; the
    simulation sums them up in one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName != THREAD_NAME


class SimulatedNodes:
    def __init__(
        self,
        api: KubeApi,
        count: int,
        size: SimNodeSize | None = None,
        report_address: str | None = None,
        token: str | None = None,
        *,
        ca_file: Path | None = None,
        name_prefix: str = DEFAULT_PREFIX,
        report_interval: float = DEFAULT_REPORT_SECONDS,
        usage: SyntheticUsage | None = None,
        writers: int = 4,
        seed: int | None = None,
    ) -> None:
        if count < 0:
            raise ValueError(f"the number of simulated nodes cannot be negative ({count})")
        if report_address and token is None:
            raise ValueError("streaming simulated reports needs a token the scheduler accepts for any node ('*')")
        if report_address and ca_file is None and not is_loopback_address(report_address):
            raise ValueError(f"streaming reports to {report_address} (not loopback) requires a CA file for TLS")
        if report_interval <= 0:
            raise ValueError(f"the report interval must be positive, not {report_interval}")
        self.api = api
        self.size = size or SimNodeSize()
        self.report_address = report_address
        self.token = token or ""
        self.ca_file = ca_file
        self.name_prefix = name_prefix
        self.report_interval = report_interval
        self.usage = usage or SyntheticUsage()
        self.rng = random.Random(seed)
        cpu, memory = cpu_millis(self.size.cpu), memory_bytes(self.size.memory)
        self.nodes = {
            name: SimNode(name, f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", cpu, memory)
            for i, name in enumerate(f"{name_prefix}{index}" for index in range(count))
        }
        self.writer = ApiWriter("sim", workers=writers)
        self.informer = Informer(
            kinds.POD,
            api,
            field_selector="spec.nodeName!=",
            on_add=lambda pod: self._from_informer(pod, deleted=False),
            on_update=lambda _old, pod: self._from_informer(pod, deleted=False),
            on_delete=lambda pod: self._from_informer(pod, deleted=True),
        )
        self._placed: dict[str, SimNode] = {}  # running pod uid -> its node; loop thread only
        self._finalized: set[str] = set()
        self._streamers: dict[str, ReportStreamer] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._reporting: asyncio.Task[None] | None = None
        self._heartbeats: asyncio.Task[None] | None = None
        self._node_uids: dict[str, str] = {}  # for the owner reference of each node's Lease
        self._log_filter = _FromSimulation()

    @property
    def node_names(self) -> list[str]:
        return list(self.nodes)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self, *, stream_reports: bool = True) -> None:
        """Register the nodes (removing simulated nodes of this prefix beyond the count), then
        take pods and (unless told not to: `start_streams` later) stream reports. Raises the
        API's error when the nodes cannot be registered."""
        self._register_nodes()
        self.writer.start()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=THREAD_NAME, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start_heartbeats(), self._loop).result()
        if stream_reports:
            self.start_streams()
        self.informer.start()
        log.info(
            "%d simulated nodes of %s CPU, %s memory%s",
            len(self.nodes),
            self.size.cpu,
            self.size.memory,
            f"; reports to {self.report_address} every {self.report_interval:g}s" if self.report_address else "",
        )

    def start_streams(self) -> None:
        """Start streaming reports, if there is a report address and they are not streaming yet
        (after `start(stream_reports=False)`, once the scheduler listens)."""
        if self._loop is None:
            raise RuntimeError("start the simulated nodes first")
        if not self.report_address or self._reporting is not None:
            return
        logging.getLogger(STREAM_LOGGER).addFilter(self._log_filter)
        asyncio.run_coroutine_threadsafe(self._start_reports(), self._loop).result()

    def stop(self) -> None:
        """Stop taking pods and close the report streams; the nodes and their pods stay."""
        if self._loop is None or self._thread is None:
            return
        self.informer.stop()
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._loop = self._thread = None
        logging.getLogger(STREAM_LOGGER).removeFilter(self._log_filter)
        self.writer.stop(flush_timeout=5.0)

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self.informer.wait_for_sync(timeout)

    def healthy(self) -> tuple[bool, str]:
        """(ready, why): the nodes registered, their loop running, the pod cache listed."""
        if self._thread is None or not self._thread.is_alive():
            return False, "the simulated nodes are not running (still registering, or stopped)"
        if not self.informer.has_synced:
            return False, "the pod cache has not listed yet"
        return True, f"ok: {len(self.nodes)} simulated nodes"

    def stream_stats(self) -> dict[str, StreamStats]:
        """Each node's report stream counters (sent, acked, connected, ...)."""
        return {name: streamer.stats() for name, streamer in self._streamers.items()}

    def _register_nodes(self) -> None:
        now = time.time()
        labels = {SIMULATED_LABEL: "true", **self.size.labels}
        capacity = self.size.capacity()

        def register(node: SimNode) -> None:
            obj = node_object.node_object(
                node.name,
                {**node_object.base_labels(node.name), **labels},
                capacity,
                [node_object.ready_condition(True, now, "simulated by lahar")],
                node.address,
                runtime="lahar-sim",
            )
            self._node_uids[node.name] = node_object.register(self.api, obj)["metadata"]["uid"]

        with ThreadPoolExecutor(REGISTER_WORKERS, thread_name_prefix="sim-register") as pool:
            list(pool.map(register, self.nodes.values()))
        stale = remove_simulated_nodes(self.api, self.name_prefix, keep=self.nodes)
        if stale:
            log.info("removed %d simulated nodes beyond the %d asked for", stale, len(self.nodes))

    # --- pods (on the loop) ----------------------------------------------------------------------

    def _from_informer(self, pod: Obj, deleted: bool) -> None:
        if (pod.get("spec") or {}).get("nodeName") in self.nodes and self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_pod, pod, deleted)

    def _on_pod(self, pod: Obj, deleted: bool) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if deleted:
            self._finalized.discard(uid)
            self._forget(uid)
        elif meta.get("deletionTimestamp"):
            self._forget(uid)
            if uid not in self._finalized:  # nothing to stop: the object goes at once
                self._finalized.add(uid)
                self.writer.submit(
                    uid,
                    lambda: self.api.delete(
                        kinds.POD, meta["name"], meta.get("namespace"), grace_period_seconds=0, uid=uid
                    ),
                )
        elif (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self._forget(uid)
        elif uid not in self._placed:
            self._accept(pod)

    def _accept(self, pod: Obj) -> None:
        node = self.nodes[pod["spec"]["nodeName"]]
        status = pod.get("status") or {}
        now = time.time()
        duration, exit_code, problem = sim_plan(pod)
        factor, usage_problem = sim_usage(pod)
        if problem or usage_problem:
            message = problem or usage_problem
            self._post(pod, sim_status(pod, node.address, now, now, (START_ERROR_EXIT_CODE, START_ERROR, message)))
            return
        sim = SimPod.of(pod, self.usage, factor)
        node.pods[sim.uid] = sim
        self._placed[sim.uid] = node
        started = parse_rfc3339(status.get("startTime")) if status.get("phase") == RUNNING else None
        if started is None:  # a new pod (a Running one is re-adopted after a restart as it was)
            started = now
            self._post(pod, sim_status(pod, node.address, started, now))
        if duration is not None:
            assert self._loop is not None
            delay = max(0.0, started + duration - now)
            sim.timer = self._loop.call_later(delay, self._finish, pod, started, exit_code)

    def _finish(self, pod: Obj, started: float, exit_code: int) -> None:
        node = self._forget(pod["metadata"]["uid"])
        if node is not None:
            self._post(
                pod, sim_status(pod, node.address, started, time.time(), (exit_code, exit_reason(exit_code), ""))
            )

    def _forget(self, uid: str) -> SimNode | None:
        node = self._placed.pop(uid, None)
        if node is not None:
            sim = node.pods.pop(uid)
            if sim.timer is not None:
                sim.timer.cancel()
        return node

    def _post(self, pod: Obj, status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        patch = {"metadata": {"uid": meta["uid"]}, "status": status}
        self.writer.submit(
            meta["uid"],
            lambda: self.api.patch(kinds.POD, meta["name"], patch, meta.get("namespace"), subresource="status"),
        )

    # --- heartbeats (on the loop) ----------------------------------------------------------------

    async def _start_heartbeats(self) -> None:
        assert self._loop is not None
        self._heartbeats = self._loop.create_task(self._renew_leases_every_interval())

    async def _renew_leases_every_interval(self) -> None:
        """Each node's Lease in kube-node-lease, renewed as kubelet does: a node lifecycle
        controller (on a real cluster) then keeps the nodes Ready."""
        while True:
            now = time.time()
            for name in self.nodes:
                renew = functools.partial(node_object.renew_node_lease, self.api, name, now, self._node_uids.get(name))
                self.writer.submit(("lease", name), renew)
            await asyncio.sleep(node_object.NODE_LEASE_RENEW_SECONDS)

    # --- reports (on the loop) -------------------------------------------------------------------

    async def _start_reports(self) -> None:
        assert self.report_address is not None and self._loop is not None
        for name in self.nodes:
            streamer = ReportStreamer(self.report_address, name, self.token, self.ca_file)
            streamer.start_in(self._loop)
            self._streamers[name] = streamer
        self._reporting = self._loop.create_task(self._report_every_interval())

    async def _report_every_interval(self) -> None:
        next_summary = time.monotonic() + STREAM_SUMMARY_SECONDS
        while True:
            now = time.time()
            for name, node in self.nodes.items():
                try:
                    self._streamers[name].offer(synthetic_report(node, self.usage, self.rng, now))
                except Exception:  # a bug in one node's report must not end every node's
                    log.exception("simulated report for %s failed", name)
            if time.monotonic() >= next_summary:
                self._summarize_streams()
                next_summary = time.monotonic() + STREAM_SUMMARY_SECONDS
            await asyncio.sleep(self.report_interval)

    def _summarize_streams(self) -> None:
        down = [stats for stats in (s.stats() for s in self._streamers.values()) if not stats.connected]
        if down:
            log.warning(
                "%d of %d simulated report streams to %s are not connected (e.g. %s)",
                len(down),
                len(self._streamers),
                self.report_address,
                down[0].last_error or "connecting",
            )

    async def _shutdown(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            await asyncio.gather(self._heartbeats, return_exceptions=True)
            self._heartbeats = None
        if self._reporting is not None:
            self._reporting.cancel()
            await asyncio.gather(self._reporting, return_exceptions=True)
            self._reporting = None
        await asyncio.gather(*(streamer.stop_in_loop() for streamer in self._streamers.values()))
        self._streamers.clear()
        for uid in list(self._placed):
            self._forget(uid)


def remove_simulated_nodes(api: KubeApi, name_prefix: str = DEFAULT_PREFIX, keep: Container[str] = ()) -> int:
    """Delete the simulated Nodes of a prefix but those to `keep` (a `lahar up` started with fewer
    --sim-nodes than before, or none); how many went."""
    removed = 0
    for node in api.list_all(kinds.NODE, label_selector=f"{SIMULATED_LABEL}=true")["items"]:
        if node["metadata"]["name"].startswith(name_prefix) and node["metadata"]["name"] not in keep:
            try:
                api.delete(kinds.NODE, node["metadata"]["name"])
                removed += 1
            except KubeError as exc:
                log.warning("cannot remove simulated node %s: %s", node["metadata"]["name"], exc)
    return removed
