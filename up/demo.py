"""`lahar up --demo`: four small scenarios from examples/, applied and narrated on a running system.

1. online-service.yaml: an online (LS) request/response server on this machine, under steady
   open-loop load; its p99 alone.
2. be-batch-job.yaml: a best-effort Volcano Job of CPU busy loops on this machine (one per CPU);
   the agent's QoS engine gives the BE cgroups the lowest CPU priority; the online p99
   again, and the CPU the BE pods harvested (their cgroups' CPU accounting) out of what the online
   service left idle. The job is deleted after.
3. gang-job.yaml: a filler job holds the simulated nodes, a gang of 4 binds nothing while it runs
   (its PodGroup says why), then all 4 bind together once the filler ends.
4. two-queues.yaml: queues of weight 1 and 3, each with more work than the simulated nodes hold;
   each queue's allocated and deserved CPU from the queue status.

Then a summary of the figures. Every wait has a timeout with a message that says what did not
happen; a stop (Ctrl-C) ends the narration at the next wait. Objects a previous demo left are
deleted first, so the demo can run again on the same data directory."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lahar.agent.qos.config import QosConfig, load_config
from lahar.agent.qos.strategies.cpu_suppress import NAME as CPU_SUPPRESS
from lahar.agent.qos.strategies.cpu_suppress import CpuSuppressConfig
from lahar.api import kinds
from lahar.api.kinds import Kind
from lahar.api.qos import BEST_EFFORT, k8s_qos_class
from lahar.api.quantity import cpu_millis
from lahar.client.api import KubeApi, Obj
from lahar.client.errors import NotFound
from lahar.node.node_object import local_cpus
from lahar.node.simulated import SIM_DURATION_ANNOTATION
from lahar.up.system import EXAMPLES, System, say

T = TypeVar("T")

ONLINE, BE_JOB, GANG, QUEUES = "online-service.yaml", "be-batch-job.yaml", "gang-job.yaml", "two-queues.yaml"
NAMESPACE = "default"
JOB_NAME_LABEL = "volcano.sh/job-name"
LOAD_RATE = 200.0  # online requests per second, ~1 ms of CPU each
LOAD_SECONDS = 8.0
LOAD_WARMUP_SECONDS = 1.0
QOS_SETTLE_SECONDS = 3.0  # a few ticks of the agent after its first writes
POD_START_TIMEOUT = 60.0
STABLE_SECONDS = 2.0  # queue allocations unchanged this long count as settled


class DemoError(Exception):
    """A step did not happen in time; the message says what."""


class DemoStopped(Exception):
    """The system is stopping."""


@dataclass
class Load:
    """One run of the load generator, and (with cgroups) CPU over the same window: bench/
    colocation.py's CpuMeter figures (online_cpu_cores, be_cpu_cores, other_cpu_cores,
    be_harvest_ratio: BE CPU / the CPU the online service left idle)."""

    p50_ms: float | None
    p99_ms: float | None
    requests: int
    unanswered: int
    cpu: dict[str, Any] = field(default_factory=dict)


@dataclass
class QueueShare:
    name: str
    weight: int
    allocated_cpu: float
    deserved_cpu: float | None


@dataclass
class Figures:
    alone: Load | None = None
    with_be: Load | None = None
    cores: int = 1
    queues: list[QueueShare] = field(default_factory=list)


class Demo:
    def __init__(self, system: System, stop: threading.Event) -> None:
        assert system.api is not None
        self.system = system
        self.api: KubeApi = system.api
        self.stop = stop
        self.began = time.monotonic()
        self.figures = Figures(cores=local_cpus())
        self._generator: subprocess.Popen[str] | None = None
        self._port = 0  # the online server's, once it runs
        self._online_pod: Obj = {}

    # --- the narration -----------------------------------------------------------------------------

    def run(self) -> bool:
        """The whole demo; True when every step happened."""
        say(
            "\n=== Demo: co-location on this machine, a gang and two queues on the simulated nodes (about a minute) ==="
        )
        try:
            self._clean_up()
            if self.system.local_node is not None:
                self.online_alone()
                self.be_job()
            else:
                say("(no local node (--no-local-node): skipping the online service and the BE job)")
            if self.system.sim_nodes is not None:
                self.gang()
                self.two_queues()
            else:
                say("(no simulated nodes (--sim-nodes 0): skipping the gang and the queues)")
            self.summary()
            say("\nThe demo is done.")
            return True
        except DemoError as exc:
            say(f"\ndemo: {exc}")
            return False
        except DemoStopped:
            say("\ndemo: stopped")
            return False
        finally:
            self._end_generator()

    def step(self, text: str) -> None:
        say(f"\n[{time.monotonic() - self.began:5.1f}s] {text}")

    def note(self, text: str) -> None:
        say(f"         {text}")

    def _clean_up(self) -> None:
        """Delete what an earlier demo left (finished jobs would not run again) and wait for its pods."""
        names = [
            (kind, obj["metadata"]["name"])
            for file in (ONLINE, BE_JOB, GANG, QUEUES)
            for kind, obj in self.manifests(file)
            if kind in (kinds.JOB, kinds.POD)
        ]
        deleted = []
        for kind, name in names:
            try:
                self.api.delete(kind, name, NAMESPACE)
                deleted.append(name)
            except NotFound:
                pass
        if not deleted:
            return
        self.step(f"deleting what an earlier demo left: {', '.join(deleted)}")
        jobs = [name for kind, name in names if kind is kinds.JOB]

        def gone() -> bool:
            left = self.pods(f"{JOB_NAME_LABEL} in ({','.join(jobs)})") if jobs else []
            return not left and not self.get(kinds.POD, "online-service")

        self.wait(gone, 60, "the earlier demo's pods to go")

    # --- 1. the online service alone ---------------------------------------------------------------

    def online_alone(self) -> None:
        self.step(
            "1/4  An online service on this machine (an LS pod: a TCP request/response server, "
            "~1 ms of CPU per request)"
        )
        self.apply(ONLINE)
        pod = self.wait(
            lambda: self.running(self.get(kinds.POD, "online-service")),
            POD_START_TIMEOUT,
            "online-service to be Running",
        )
        port = self.wait(lambda: self.server_port(pod), 30, "online-service to log its port")
        self.note(
            f"online-service is Running on {pod['spec']['nodeName']}; its log says it listens on 127.0.0.1:{port}"
        )
        self.note(f"steady load: {LOAD_RATE:g} requests/s, open loop, for {LOAD_SECONDS:g} s…")
        self.figures.alone = self.measure(port, pod)
        self.note(
            f"alone: p50 {self.figures.alone.p50_ms} ms, p99 {self.figures.alone.p99_ms} ms"
            + self.cpu_text(self.figures.alone)
        )
        self._port, self._online_pod = port, pod

    # --- 2. a BE job beside it ---------------------------------------------------------------------

    def be_job(self) -> None:
        cores = self.figures.cores
        self.step(f"2/4  A best-effort batch job fills the idle CPU: {cores} BE pods (CPU busy loops) on this machine")
        [(kind, job)] = self.manifests(BE_JOB)
        first_task(job)["replicas"] = cores  # one busy loop per CPU
        self.apply_objects(BE_JOB, [(kind, job)])
        self.wait(
            lambda: self.all_running(self.job_pods("be-batch"), cores),
            POD_START_TIMEOUT,
            f"the {cores} be-batch pods to be Running",
        )
        self.note(f"{cores}/{cores} be-batch pods Running")
        tree = self.cgroups()
        if tree is None:
            self.note(f"pods run without cgroups here: no QoS for them (the agent says: QoS {self.system.agent_qos})")
        else:
            qos = self.wait(lambda: self.be_qos(tree), 20, "the agent's QoS on the BE cgroups")
            self.note(f"the agent's QoS engine on {tree.layout.qos_dir(BEST_EFFORT)}: {qos}")
            self.note(
                "(BE runs at the smallest CPU weight on every cycle the online service leaves idle"
                + (
                    "; the agent caps it only while the online pod measurably waits for a CPU — more than "
                    f"{CpuSuppressConfig().wait_threshold:.0%} of its runnable time — and lifts the cap as that clears)"
                    if qos_cap_enabled(self.system.options.qos_config)
                    else "; no CPU cap: measured, the weights protect online pods better than a quota, which costs "
                    "latency of its own, so cpu_suppress.interference_cap is off by default)"
                )
            )
            self.stop.wait(QOS_SETTLE_SECONDS)
        self.note(f"the same load again, with the BE job running, for {LOAD_SECONDS:g} s…")
        self.figures.with_be = self.measure(self._port, self._online_pod)
        self.note(
            f"with the BE job: p50 {self.figures.with_be.p50_ms} ms, p99 {self.figures.with_be.p99_ms} ms"
            + self.cpu_text(self.figures.with_be)
        )
        if tree is not None:
            self.note(f"BE cap at the end: {self.be_qos(tree)}")
        self.api.delete(kinds.JOB, "be-batch", NAMESPACE)
        self.note("be-batch deleted (its pods are stopped)")

    # --- 3. a gang that waits until it fits --------------------------------------------------------

    def gang(self) -> None:
        sims = self.system.sim_nodes
        assert sims is not None
        self.step(f"3/4  A gang of 4 on the {len(sims.node_names)} simulated nodes ({sims.size.cpu} CPUs each)")
        filler, gang = self.manifests(GANG)
        replicas = first_task(filler[1])["replicas"]
        self.apply_objects(GANG, [filler])
        self.wait(
            lambda: self.all_running(self.job_pods("gang-filler"), replicas),
            POD_START_TIMEOUT,
            "the gang-filler pods to be Running",
        )
        self.note(
            f"gang-filler: {replicas} pods of {task_cpu(filler[1])} CPUs Running, for {sim_duration(filler[1]):g} s"
        )
        self.apply_objects(GANG, [gang])
        applied = time.monotonic()
        waiting = self.wait(self.gang_waiting, 30, "gang-of-4's PodGroup to say it cannot be placed")
        self.note(f"gang-of-4 waits with none of its 4 pods bound: {waiting}")
        bound_at: dict[str, float] = {}

        def all_bound() -> bool:
            for pod in self.job_pods("gang-of-4"):
                if pod["spec"].get("nodeName"):
                    bound_at.setdefault(pod["metadata"]["name"], time.monotonic())
            return len(bound_at) >= 4

        self.wait(all_bound, 90, "gang-of-4's 4 pods to be bound", interval=0.1)
        spread = max(bound_at.values()) - min(bound_at.values())
        nodes = sorted({pod["spec"]["nodeName"] for pod in self.job_pods("gang-of-4")})
        filler_done = all(
            (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") for pod in self.job_pods("gang-filler")
        )
        self.note(
            f"{min(bound_at.values()) - applied:.1f} s after it was applied"
            + (", gang-filler's pods having ended" if filler_done else "")
            + f": all 4 pods bound together (within {spread:.1f} s), on {', '.join(nodes)}"
        )
        phase = self.wait(
            lambda: self.job_phase("gang-of-4") == "Completed" and "Completed", 60, "gang-of-4 to complete"
        )
        self.note(f"gang-of-4 {phase}")

    def gang_waiting(self) -> str | None:
        """Why the gang waits, once its PodGroup says so (and while none of its pods is bound)."""
        if any(pod["spec"].get("nodeName") for pod in self.job_pods("gang-of-4")):
            raise DemoError(
                "gang-of-4 had pods bound while the filler ran: the simulated nodes are larger "
                "than the example expects (4 nodes of 8 CPUs)"
            )
        group = self.get(kinds.PODGROUP, "gang-of-4")
        if group is None:
            return None
        status = group.get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
                phase = status.get("phase") or "Pending"
                admitted = (
                    " (not admitted yet, so the controller has not created its pods)" if phase == "Pending" else ""
                )
                return f"its PodGroup is {phase}{admitted}; Unschedulable: {condition.get('message')}"
        return None

    # --- 4. two queues -----------------------------------------------------------------------------

    def two_queues(self) -> None:
        objects = self.manifests(QUEUES)
        queues = {
            obj["metadata"]["name"]: int(obj["spec"].get("weight", 1)) for kind, obj in objects if kind is kinds.QUEUE
        }
        jobs = [obj for kind, obj in objects if kind is kinds.JOB]
        duration = sim_duration(jobs[0])
        self.step(
            "4/4  Two queues share the simulated nodes by weight: "
            + " and ".join(f"{name} (weight {weight})" for name, weight in queues.items())
            + f", each with {first_task(jobs[0])['replicas']} pods of {task_cpu(jobs[0])} CPU, "
            f"{duration:g} s each"
        )
        self.apply_objects(QUEUES, objects)
        first = self.wait(
            self.settled_shares(queues, require_all=False),
            30,
            "the first pods of the two queues to be placed",
            interval=0.5,
        )
        self.note(
            "first placements: "
            + ", ".join(f"{share.name} {cpus(share.allocated_cpu)}" for share in first)
            + " (whichever queue's pods existed first; a running job whose gang is met is not "
            "taken back from)"
        )
        self.stop.wait(duration)  # those pods end; what they free goes by the queues' shares
        shares = self.wait(
            self.settled_shares(queues, require_all=True), 30, "both queues' allocations to settle", interval=0.5
        )
        self.figures.queues = shares
        total = sum(share.allocated_cpu for share in shares)
        total_weight = sum(share.weight for share in shares)
        self.note(
            "as they end, freed CPUs go to the queue furthest below its deserved share (deserved: "
            "its weight's part of all the cluster's CPUs, this machine's included):"
        )
        for share in shares:
            deserved = "-" if share.deserved_cpu is None else f"{share.deserved_cpu:.1f}"
            self.note(
                f"  {share.name}: weight {share.weight} ({share.weight / total_weight:.0%}), allocated "
                f"{cpus(share.allocated_cpu)} ({share.allocated_cpu / total:.0%} of the two), deserved "
                f"{deserved}"
            )

    def settled_shares(self, queues: dict[str, int], require_all: bool) -> Callable[[], list[QueueShare] | None]:
        """A condition: the queues' shares once their allocations (all non-zero if `require_all`,
        else some) have not changed for STABLE_SECONDS."""
        history: list[tuple[float, tuple[int, ...]]] = []

        def settled() -> list[QueueShare] | None:
            shares = [self.queue_share(name, weight) for name, weight in queues.items()]
            allocated = tuple(round(share.allocated_cpu * 1000) for share in shares)
            now = time.monotonic()
            if not history or history[-1][1] != allocated:
                history.append((now, allocated))
            placed = all(allocated) if require_all else any(allocated)
            return shares if placed and now - history[-1][0] >= STABLE_SECONDS else None

        return settled

    def queue_share(self, name: str, weight: int) -> QueueShare:
        status = (self.get(kinds.QUEUE, name, namespaced=False) or {}).get("status") or {}
        deserved = (status.get("deserved") or {}).get("cpu")
        return QueueShare(
            name,
            weight,
            cpu_millis((status.get("allocated") or {}).get("cpu", "0")) / 1000,
            cpu_millis(deserved) / 1000 if deserved else None,
        )

    # --- the summary -------------------------------------------------------------------------------

    def summary(self) -> None:
        figures = self.figures
        self.step("Summary")
        if figures.alone is not None and figures.with_be is not None:
            ratio = (
                f" ({figures.with_be.p99_ms / figures.alone.p99_ms:.2f}x)"
                if figures.alone.p99_ms and figures.with_be.p99_ms
                else ""
            )
            self.note(f"online p99 alone:               {figures.alone.p99_ms} ms")
            self.note(f"online p99 with the BE job:     {figures.with_be.p99_ms} ms{ratio}")
            cpu = figures.with_be.cpu
            if cpu:
                idle = figures.cores - cpu["online_cpu_cores"]
                ratio = f" ({cpu['be_harvest_ratio']:.0%})" if cpu.get("be_harvest_ratio") is not None else ""
                self.note(
                    f"BE CPU harvested:               {cpu['be_cpu_cores']:.2f} cores of the {idle:.2f} the "
                    f"online service left idle{ratio}; everything else on this machine used "
                    f"{cpu['other_cpu_cores']:.2f}"
                )
            else:
                self.note("BE CPU harvested:               not measured (pods run without cgroups here)")
        total = sum(share.allocated_cpu for share in figures.queues)
        total_weight = sum(share.weight for share in figures.queues)
        for share in figures.queues:
            deserved = "" if share.deserved_cpu is None else f", deserved {share.deserved_cpu:.1f}"
            self.note(
                f"{'queue ' + share.name + ':':<32}{share.allocated_cpu / total:.0%} of the CPUs the two hold "
                f"({share.allocated_cpu:g}{deserved}); weight {share.weight} ({share.weight / total_weight:.0%})"
            )

    # --- measuring ---------------------------------------------------------------------------------

    def measure(self, port: int, online_pod: Obj) -> Load:
        """One run of the load generator; with cgroups, the CPU of the online pod, the BE pods and
        the rest of the machine over the same window."""
        meter = self.cpu_meter(online_pod)
        before = meter.read() if meter is not None else None
        segment = self.run_generator(port, self.pod_cgroup(online_pod))["segments"][0]
        load = Load(
            segment.get("p50_ms"), segment.get("p99_ms"), segment.get("requests", 0), segment.get("unanswered", 0)
        )
        if meter is not None and before is not None:
            load.cpu = meter.usage(before, meter.read(), self.figures.cores)
        if load.unanswered:
            self.note(f"({load.unanswered} of {load.requests} requests unanswered)")
        return load

    def cpu_meter(self, online_pod: Obj) -> Any:
        """bench/colocation.py's CpuMeter over this node's cgroups; None without cgroups."""
        from lahar.up.workloads import colocation

        tree = self.cgroups()
        if tree is None:
            return None
        kube_qos = (online_pod.get("status") or {}).get("qosClass") or k8s_qos_class(online_pod["spec"])
        return colocation().CpuMeter(
            CgroupCpu(tree.root),
            tree.pod_path(online_pod["metadata"]["uid"], kube_qos),
            [tree.layout.qos_dir(BEST_EFFORT)],
        )

    def pod_cgroup(self, pod: Obj) -> tuple[Any, str] | None:
        """(the node's cgroup tree, the pod's cgroup), None without cgroups."""
        tree = self.cgroups()
        if tree is None:
            return None
        kube_qos = (pod.get("status") or {}).get("qosClass") or k8s_qos_class(pod["spec"])
        return tree, tree.pod_path(pod["metadata"]["uid"], kube_qos)

    def run_generator(self, port: int, cgroup: tuple[Any, str] | None = None) -> dict[str, Any]:
        """The load generator; with `cgroup`, inside the online pod's cgroup, as a client sidecar of
        the service would be (outside every pod it would compete with the whole pod tree)."""
        argv = [
            sys.executable,
            "-P",  # not the working directory first: a lahar/ folder there (a checkout) is not this lahar
            "-m",
            "lahar",
            "workload",
            "load",
            "--port",
            str(port),
            "--rate",
            f"{LOAD_RATE:g}",
            "--seconds",
            f"{LOAD_SECONDS:g}",
            "--warmup",
            f"{LOAD_WARMUP_SECONDS:g}",
        ]
        # A session of its own: a Ctrl-C reaches lahar up, which ends the generator itself.
        self._generator = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        if cgroup is not None:
            tree, path = cgroup
            for procs in tree.procs_files(path):
                with contextlib.suppress(OSError):  # the pod's cgroup went away: measure from here
                    procs.write_text(str(self._generator.pid))
        deadline = time.monotonic() + LOAD_SECONDS + LOAD_WARMUP_SECONDS + 40
        while True:
            try:
                out, err = self._generator.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if self.stop.is_set():
                    raise DemoStopped() from None
                if time.monotonic() > deadline:
                    raise DemoError("the load generator did not finish in time") from None
        code = self._generator.returncode
        self._generator = None
        if code != 0 or not out.strip():
            raise DemoError(f"the load generator failed (exit code {code}): {err.strip()[-500:]}")
        return dict(json.loads(out.strip().splitlines()[-1]))

    def _end_generator(self) -> None:
        if self._generator is not None and self._generator.poll() is None:
            self._generator.kill()
            self._generator.communicate()
        self._generator = None

    @staticmethod
    def cpu_text(load: Load) -> str:
        if not load.cpu:
            return ""
        be = f", BE {load.cpu['be_cpu_cores']:.2f}" if load.cpu["be_cpu_cores"] >= 0.01 else ""
        return (
            f"; cores used: online {load.cpu['online_cpu_cores']:.2f}{be}, everything else "
            f"{load.cpu['other_cpu_cores']:.2f}"
        )

    def cgroups(self) -> Any:
        node = self.system.local_node
        return node.context.cgroups if node is not None else None

    def be_qos(self, tree: Any) -> str | None:
        """What the agent wrote on the besteffort level: its CPU priority and cap, or None yet."""
        level = tree.layout.qos_dir(BEST_EFFORT)
        idle = read_knob(tree, level, "cpu.idle")
        weight = read_knob(tree, level, "cpu.weight")
        cap = read_knob(tree, level, "cpu.max")
        if idle is None and weight is None:
            return None
        cores = cap.cores if cap is not None else None
        parts = (
            ["cpu.idle=1 (runs only on CPU nobody else wants)"] if idle == 1 else [f"CPU weight {weight} (the minimum)"]
        )
        parts.append(f"all BE pods capped at {cores:.2f} cores" if cores is not None else "no cap")
        return ", ".join(parts)

    def server_port(self, pod: Obj) -> int | None:
        """The online server's port: the last `PORT ITERATIONS` line of its log (a restart appends)."""
        from lahar.node.logs import container_log, find_pod_logs

        found = find_pod_logs(self.system.data_dir, NAMESPACE, pod["metadata"]["name"])
        if found is None:
            return None
        text = read_text(container_log(found.directory, "server")) or ""
        ports = re.findall(r"^(\d+) \d+$", text, re.MULTILINE)
        return int(ports[-1]) if ports else None

    # --- the API -----------------------------------------------------------------------------------

    def manifests(self, file: str) -> list[tuple[Kind, dict[str, Any]]]:
        from lahar.client.manifests import load_manifests

        return load_manifests([str(EXAMPLES / file)], NAMESPACE)

    def apply(self, file: str) -> None:
        self.apply_objects(file, self.manifests(file))

    def apply_objects(self, file: str, objects: list[tuple[Kind, dict[str, Any]]]) -> None:
        from lahar.client.manifests import apply_object, display_name

        part = (
            ""
            if len(objects) == len(self.manifests(file))
            else f"   # only {', '.join(obj['metadata']['name'] for _, obj in objects)}"
        )
        say(f"         $ lahar apply -f examples/{file}{part}")
        for kind, obj in objects:
            outcome = apply_object(self.api, kind, obj)
            say(f"         {display_name(kind, obj['metadata']['name'])} {outcome}")

    def get(self, kind: Kind, name: str, namespaced: bool = True) -> Obj | None:
        try:
            return self.api.get(kind, name, NAMESPACE if namespaced else None)
        except NotFound:
            return None

    def pods(self, label_selector: str) -> list[Obj]:
        return list(self.api.list(kinds.POD, NAMESPACE, label_selector=label_selector).get("items") or [])

    def job_pods(self, job: str) -> list[Obj]:
        return self.pods(f"{JOB_NAME_LABEL}={job}")

    def job_phase(self, job: str) -> str | None:
        obj = self.get(kinds.JOB, job)
        return ((obj or {}).get("status") or {}).get("state", {}).get("phase")

    @staticmethod
    def running(pod: Obj | None) -> Obj | None:
        return pod if pod is not None and (pod.get("status") or {}).get("phase") == "Running" else None

    @staticmethod
    def all_running(pods: list[Obj], count: int) -> bool:
        return sum((pod.get("status") or {}).get("phase") == "Running" for pod in pods) >= count

    def wait(self, condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25) -> T:
        """Poll until `condition()` is truthy; DemoError after `timeout`, DemoStopped on a stop."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise DemoError(
                    f"timed out after {timeout:.0f} s waiting for {what}; the system stays up to look "
                    f"at (export KUBECONFIG={self.system.kubeconfig}; lahar get pods; lahar get podgroups)"
                )
            if self.stop.wait(interval):
                raise DemoStopped()


def cpus(amount: float) -> str:
    return f"{amount:g} CPU" + ("" if amount == 1 else "s")


def first_task(job: Obj) -> Any:
    return job["spec"]["tasks"][0]


def task_cpu(job: Obj) -> str:
    """The CPU request of the job's first task (its first container)."""
    return str(first_task(job)["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"])


def sim_duration(job: Obj) -> float:
    """How long the job's simulated pods run (their lahar.dev/sim-duration)."""
    return float(first_task(job)["template"]["metadata"]["annotations"][SIM_DURATION_ANNOTATION])


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def qos_cap_enabled(qos_config: Path | None) -> bool:
    """Whether the agent's BE CPU cap (cpu_suppress.interference_cap, off by default) may act."""
    config = load_config(qos_config) if qos_config is not None else QosConfig()
    section = config.section(CPU_SUPPRESS)
    return bool(section.enabled and section.interference_cap)


def read_knob(tree: Any, path: str, knob: str) -> Any:
    """A QoS knob's value in a cgroup as the agent reads it (cpu.idle, cpu.max as a CpuMax), for
    either cgroup version; None when the kernel lacks it or the cgroup is gone."""
    from lahar.agent.qos.knobs import binding

    found = binding(knob, tree.version)
    if found is None:
        return None
    try:
        return found.read(tree.file(path, found.filename).parent)
    except (OSError, ValueError):
        return None


class CgroupCpu:
    """bench/colocation.py's CpuMeter reads `tree.cpu_seconds(path)`: here from the agent's cgroup
    reader, so it works on either cgroup version."""

    def __init__(self, root: Path) -> None:
        from lahar.agent.collectors.pods import cgroup_reader

        self.reader = cgroup_reader(root)

    def cpu_seconds(self, path: str) -> float:
        return float(self.reader.cpu(path).usage_seconds)


def run_demo(system: System, stop: threading.Event) -> bool:
    return Demo(system, stop).run()
