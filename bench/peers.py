"""Lahar, Volcano and kube-scheduler side by side on the same API server (issue 21).

    lahar bench peers [--scale F] [--shapes basic,gangs,...] [--peers lahar,volcano,kube-scheduler]
                      [--backends real,embedded] [--runs 3] [--out DIR] [--json]
    make bench BENCH=peers ARGS="--scale 0.1"

For each shape, each scheduler runs alone, `--runs` times, each time on a fresh API server (a new
etcd for the real control plane of tests/kube, a new data folder for the embedded server): the
nodes are registered by SimulatedNodes (node/simulated.py, the same code `lahar up --sim-nodes`
runs), the shape's objects are created, and only then is the scheduler process started; the
bench watches the pods until every measured pod is bound (or the shape's time limit passes).

Measured per run, from the scheduler's start to the last measured pod bound:
  seconds          time to all bound (the scheduler's start-up and first list included);
  pods_per_second  measured pods / (last bind - first bind): the binding rate once it schedules
                   (for a wave created while the scheduler runs, from its creation);
  scheduler_cpu_s  the scheduler process's user+system CPU seconds (/proc/PID/stat) from its start
                   (for a wave created while it runs, from that wave's creation) to the last bind,
                   and the same per 1,000 measured pods; apiserver_cpu_s and etcd_cpu_s likewise.
                   Such a wave is created once the scheduler is quiet (wait_quiet): what it still
                   did for the pods before (their Events, status writes, watch events) is not
                   counted as the wave's; `settled_before_wave` says how long and how much CPU
                   that took;
  scheduler_cpu_to_first_bind_s  the part of scheduler_cpu_s spent before the first measured bind
                   was seen (start-up, first list, first cycle; read within a 50 ms poll of it);
  peak_rss_mib     the scheduler's VmHWM (/proc/PID/status);
  over_capacity    binds that took a node past its allocatable CPU, memory or pod count, replayed
                   from the watch in etcd order (a pod holds its node until it ends or is deleted);
  partial_gangs    PodGroups some but not all of whose minMember pods were ever bound at the end;
  beyond_requests, over_reclaim, over_usage
                   (oversubscription) BE binds that took their node's requests past allocatable
                   (placements on lent capacity); BE binds past the reclaimable capacity the
                   node's agent reports; binds past the node's capacity in real usage. BE pods
                   count toward a node's pods, not its allocatable cpu and memory (over_capacity);
  podgroups_admitted  (oversubscription, where PodGroups are made) those enqueue let through;
  share_error      (queues) max over the queues of |mean share - weight share| / weight share, a
                   fraction (0.05: 5 %; the table prints it in %), where a queue's share is its
                   part of the CPU allocated to the queues, sampled every 0.5 s while all queues
                   wait; q1 holding 50 % for a weight share of 1/6 is an error of 2 (200 %).
Each figure is reported as the median of the runs and their spread (max - min).

Shapes (sizes are the issue's; --scale multiplies node and pod counts, not pod sizes):
  basic       1,000 nodes (4 CPU, 32Gi, 110 pods), 10,000 pods of 100m / 500Mi (scheduler_perf's
              SchedulingBasic). Volcano schedules only pods of a PodGroup: its job controller
              makes one PodGroup (minMember 1) per plain pod; here the bench makes them up front.
  gangs       1,000 nodes; 500 PodGroups x 20 pods of 1 CPU / 1Gi, minMember 20: 10,000 CPU asked
              of 4,000, each pod running 10 s, so gangs wait for others to end. Not kube-scheduler.
  queues      100 nodes; queues q1, q2, q3 of weights 1, 2, 3; each submits a 4-pod job (1 CPU,
              1Gi, 10 s) every 0.1 s for 60 s: three times the cluster. Not kube-scheduler.
  preemption  500 nodes filled by low-priority jobs (10 pods of 1 CPU, minMember 1, priority 0);
              then 50 gangs x 20 pods of priority 1000 (half the cluster) arrive: measured are
              the high-priority pods. kube-scheduler gets the same pods without PodGroups (it has
              no gangs: its row is not a gang result).
  affinity    1,000 nodes in 10 zones; 2,000 pods with required pod anti-affinity per hostname
              (one per node per app of 2) and a zone topology spread (maxSkew 1): Lahar's
              predicates plugin, Volcano's and kube-scheduler's all enforce both.
  oversubscription
              1,000 nodes, each running an online (LS) pod created bound to it that asks 3 of
              its 4 CPUs (16Gi) and uses a tenth; then 8,000 batch pods (BE: lahar.dev/qos-class,
              500m / 1Gi each, using all they ask), more than anyone may place. For Lahar the
              simulated agents stream their usage over its gRPC report endpoint (every 1 s) and
              its oversubscription plugin lends what they report reclaimable; Volcano runs its
              overcommit plugin with overcommit-factor 2 (an enqueue admission factor: it places
              by requests); kube-scheduler places by requests. Measured: the batch pods. The run
              ends 5 s after the last bind (once every node's report was taken).

Peers: `lahar` (this checkout's scheduler: its built-in plugins, with the shape's actions, which
are Volcano's: enqueue, allocate, backfill, plus preempt for `preemption`), `volcano` (vc-scheduler
built by scripts/build-volcano.sh from VOLCANO_SRC; Volcano's default configuration, plus the
preempt action for `preemption`; client QPS/burst 2000, its defaults) and `kube-scheduler`
(scripts/build-k8s.sh; its default profile, client QPS/burst raised from 50/100 to Volcano's
2000 as scheduler_perf does). A peer that cannot be built or started is reported with the reason
and the others still run. Backends: `real` (etcd + kube-apiserver + kube-controller-manager of
tests/kube) and `embedded` (`lahar apiserver`).

Writes peers.json and peers.svg (pods bound over time, the first run of each peer per shape) to
--out. Ctrl-C (or SIGTERM) stops every process the bench started before it exits. Needs a checkout
of the repository (scripts/, tools/, deploy/ and tests/kube)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lahar.api import kinds
from lahar.api.qos import QOS_CLASS_KEY, QoSClass, qos_class
from lahar.api.quantity import cpu_millis, memory_bytes
from lahar.bench.scheduler import (
    api_shaped,
    pod_dict,
    podgroup_dict,
    priority_class_dict,
    queue_dict,
)
from lahar.client.api import KubeApi, Obj
from lahar.client.errors import AlreadyExists, Gone, KubeError
from lahar.endpoints import free_loopback_port
from lahar.node.simulated import SIM_USAGE_ANNOTATION, SyntheticUsage, reclaimable, sim_usage, system_usage
from lahar.scheduler.conf import DEFAULT_CONF

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
PEERS = ("lahar", "volcano", "kube-scheduler")
BACKENDS = ("real", "embedded")
SIM_DURATION = "lahar.dev/sim-duration"
QUEUE_LABEL = "bench.lahar.dev/queue"
GROUP_LABEL = "bench.lahar.dev/group"
ZONE_LABEL = "topology.kubernetes.io/zone"
CLIENT_QPS = 2000  # Volcano's default; kube-scheduler's 50 is raised to it (as scheduler_perf raises it)
CREATE_THREADS = 16
STOP_GRACE = 10.0
SAMPLE_SECONDS = 0.5
# Before a measured wave is created while the scheduler runs, the scheduler must be done with what
# came before (a fill's binds may leave its Events, status writes and watch events to finish): its
# CPU must grow by less than QUIET_CPU_S in QUIET_SECONDS, waited for at most QUIET_LIMIT_SECONDS.
QUIET_SECONDS, QUIET_CPU_S, QUIET_LIMIT_SECONDS = 0.5, 0.02, 15.0
NO_PROGRESS_SECONDS = 60.0  # a scheduler that binds nothing for this long has stalled: the run ends
NODE_PREFIX = "bench-node-"
REPORT_SECONDS = 1.0  # the simulated agents' report interval where a shape streams reports
# oversubscription: what online pods ask and use, what batch pods ask, Volcano's enqueue factor.
ONLINE_CPU, ONLINE_MEMORY, ONLINE_USAGE = "3", "16Gi", 0.1
BATCH_CPU, BATCH_MEMORY, BATCH_USAGE, BATCH_PER_NODE = "500m", "1Gi", 1.0, 8
OVERCOMMIT_FACTOR = 2.0
SETTLE_SECONDS = 5.0


class PeerUnavailable(RuntimeError):
    """A peer could not be built or started; the message says why."""


# --- shapes -----------------------------------------------------------------------------------------


@dataclass
class NodeShape:
    count: int
    cpu: str = "4"
    memory: str = "32Gi"
    pods: int = 110
    zones: int = 0  # > 0: nodes labelled topology.kubernetes.io/zone round-robin


@dataclass
class Wave:
    """Objects created together `at` seconds after the scheduler starts (or, with `after_bound`,
    once every pod of the waves before is bound). `measured` waves count in the figures."""

    podgroups: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    at: float = 0.0
    after_bound: bool = False
    measured: bool = True


@dataclass
class Workload:
    nodes: NodeShape
    waves: list[Wave]
    queues: dict[str, int] = field(default_factory=dict)  # name -> weight
    priority_classes: dict[str, int] = field(default_factory=dict)
    share_window: tuple[float, float] | None = None  # seconds after start when queue shares count
    end_at: float | None = None  # the run ends then, bound or not (an over-subscribed shape never catches up)
    limit_seconds: float = 600.0
    note: str = ""
    # The simulated nodes' usage model; given, the ledger also counts binds against usage and
    # the reclaimable capacity the agents report (oversubscription).
    usage: SyntheticUsage | None = None
    reports: bool = False  # the simulated agents stream their reports to the scheduler (Lahar's endpoint)
    # The run ends once nothing has been bound for this long (after every report stream has had
    # a report acked): the shape asks for more than any scheduler may place.
    settle_seconds: float | None = None


@dataclass(frozen=True)
class Shape:
    name: str
    build: Callable[[str, float], Workload]  # (peer, scale) -> its workload
    peers: tuple[str, ...]
    unsupported: dict[str, str] = field(default_factory=dict)  # peer -> why it does not run
    # Pods wait for others to end (run times, capacity), so pods/s measures the workload, not the
    # scheduler: the throughput targets do not apply.
    capacity_bound: bool = False


def scaled(count: int, scale: float, least: int = 1) -> int:
    return max(least, round(count * scale))


def scheduler_name(peer: str) -> str:
    return "default-scheduler" if peer == "kube-scheduler" else "volcano"


def bench_pod(
    name: str, peer: str, cpu: str, memory: str, *, group: str = "", queue: str = "", seconds: float = 0, pc: str = ""
) -> Obj:
    """A pod for `peer`: grouped only where the peer has groups (kube-scheduler has none)."""
    grouped = group if peer != "kube-scheduler" else ""
    pod = pod_dict(name, cpu, memory, group=grouped, scheduler=scheduler_name(peer), priority_class=pc)
    labels = pod["metadata"]["labels"]
    if group:
        labels[GROUP_LABEL] = group
    if queue:
        labels[QUEUE_LABEL] = queue
    if seconds:
        pod["metadata"].setdefault("annotations", {})[SIM_DURATION] = f"{seconds:g}"
    pod["spec"].pop("priority", None)  # admission resolves it from priorityClassName
    return pod


def group_of(
    name: str,
    members: int,
    peer: str,
    *,
    queue: str = "default",
    pc: str = "",
    cpu: str = "1",
    min_resources: bool = True,
) -> list[Obj]:
    """The PodGroup of `members` pods as Volcano's job controller writes it (minResources: what
    minMember pods ask), or without minResources; none for kube-scheduler."""
    if peer == "kube-scheduler":
        return []
    asked = {"cpu": f"{cpu_millis(cpu) * members}m"} if min_resources else None
    return [podgroup_dict(name, members, queue=queue, priority_class=pc, min_resources=asked, namespace=NAMESPACE)]


def basic(peer: str, scale: float) -> Workload:
    nodes, count = scaled(1000, scale), scaled(10_000, scale)
    wave = Wave()
    for i in range(count):
        name = f"pod-{i:06d}"
        if peer == "volcano":  # what vc-controller-manager's PodGroup controller makes for a plain pod
            wave.podgroups += group_of(f"pg-{name}", 1, peer, cpu="100m")
            wave.pods.append(bench_pod(name, peer, "100m", "500Mi", group=f"pg-{name}"))
        else:
            wave.pods.append(bench_pod(name, peer, "100m", "500Mi"))
    note = "Volcano: one PodGroup per pod (as its controller makes them)" if peer == "volcano" else ""
    return Workload(NodeShape(nodes), [wave], limit_seconds=max(300.0, count / 20), note=note)


def gangs(peer: str, scale: float) -> Workload:
    nodes, groups = scaled(1000, scale), scaled(500, scale, least=2)
    wave = Wave()
    for g in range(groups):
        name = f"gang-{g:04d}"
        wave.podgroups += group_of(name, 20, peer)
        wave.pods += [bench_pod(f"{name}-{i:02d}", peer, "1", "1Gi", group=name, seconds=10) for i in range(20)]
    return Workload(NodeShape(nodes), [wave], limit_seconds=max(300.0, groups * 20 / 10))


QUEUE_WEIGHTS = {"q1": 1, "q2": 2, "q3": 3}


def queues(peer: str, scale: float) -> Workload:
    nodes = scaled(100, scale, least=10)  # fewer: a 4-CPU job outgrows q1's share
    arrival = 60.0
    # A wave asks 3 queues x 4 pods x 1 CPU for 10 s: one every 10 / nodes s keeps 3x the cluster asked.
    every = 10.0 / nodes
    waves = []
    job = 0
    at = 0.0
    while at < arrival:
        wave = Wave(at=at)
        for queue in QUEUE_WEIGHTS:
            name = f"job-{queue}-{job:05d}"
            wave.podgroups += group_of(name, 4, peer, queue=queue)
            wave.pods += [
                bench_pod(f"{name}-{i}", peer, "1", "1Gi", group=name, queue=queue, seconds=10) for i in range(4)
            ]
        waves.append(wave)
        job += 1
        at += every
    return Workload(
        NodeShape(nodes),
        waves,
        queues=dict(QUEUE_WEIGHTS),
        share_window=(15.0, arrival),
        end_at=arrival,
        note="ends with the arrivals (60 s): three times the cluster is asked, so most pods are never bound",
    )


def preemption(peer: str, scale: float) -> Workload:
    nodes = scaled(500, scale, least=2)
    low_jobs, high_gangs = nodes * 4 // 10, max(1, nodes // 10)
    fill = Wave(measured=False)
    for j in range(low_jobs):
        name = f"low-{j:04d}"
        fill.podgroups += group_of(name, 1, peer, pc="low")  # minMember 1: each pod may be preempted
        fill.pods += [bench_pod(f"{name}-{i}", peer, "1", "1Gi", group=name, pc="low") for i in range(10)]
    high = Wave(after_bound=True)
    for g in range(high_gangs):
        name = f"high-{g:04d}"
        # Without minResources: enqueue's overcommit check (Volcano's and Lahar's alike) holds
        # back a gang that asks for more than a full cluster has idle, so preemption never starts.
        high.podgroups += group_of(name, 20, peer, pc="high", min_resources=False)
        high.pods += [bench_pod(f"{name}-{i:02d}", peer, "1", "1Gi", group=name, pc="high") for i in range(20)]
    note = "kube-scheduler: the high-priority pods without PodGroups (no gangs)" if peer == "kube-scheduler" else ""
    return Workload(
        NodeShape(nodes),
        [fill, high],
        priority_classes={"low": 0, "high": 1000},
        limit_seconds=max(300.0, nodes * 4 / 5),
        note=note,
    )


def affinity(peer: str, scale: float) -> Workload:
    nodes = scaled(1000, scale, least=10)
    count = nodes * 2
    wave = Wave()
    for i in range(count):
        app = f"app-{i % 2}"
        name = f"pod-{i:06d}"
        group = f"pg-{name}"
        if peer == "volcano":
            wave.podgroups += group_of(group, 1, peer, cpu="100m")
        pod = bench_pod(name, peer, "100m", "500Mi", group=group if peer == "volcano" else "")
        pod["metadata"]["labels"]["app"] = app
        selector = {"matchLabels": {"app": app}}
        pod["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
        pod["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE_LABEL,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            }
        ]
        wave.pods.append(pod)
    return Workload(NodeShape(nodes, zones=10), [wave], limit_seconds=max(300.0, count / 10))


OVERSUBSCRIPTION_USAGE = SyntheticUsage(noise=0.0)  # steady usage: what each report says is the model's


def oversubscription(peer: str, scale: float) -> Workload:
    """Each node runs an online (LS) pod that reserves 3 of its 4 CPUs and uses a tenth of them;
    then 8 batch (BE) pods a node, each asking 500m and using all of it, more than anyone may
    place. By requests 2 fit a node; the agents report 3.42 CPUs reclaimable (by the agent's
    rule: 4 − 0.08 system − 0.3 online − 0.2 margin), room for 6."""
    nodes = scaled(1000, scale, least=2)
    online = Wave(measured=False)
    for i in range(nodes):
        pod = pod_dict(f"online-{i:05d}", ONLINE_CPU, ONLINE_MEMORY, node=f"{NODE_PREFIX}{i}", namespace=NAMESPACE)
        pod.pop("status", None)
        pod["metadata"]["annotations"] = {SIM_USAGE_ANNOTATION: f"{ONLINE_USAGE:g}"}
        online.pods.append(pod)
    batch = Wave()
    for i in range(nodes * BATCH_PER_NODE):
        name = f"batch-{i:06d}"
        if peer == "volcano":  # as vc-controller-manager makes them for plain pods
            batch.podgroups += group_of(f"pg-{name}", 1, peer, cpu=BATCH_CPU)
        pod = bench_pod(name, peer, BATCH_CPU, BATCH_MEMORY, group=f"pg-{name}" if peer == "volcano" else "")
        pod["metadata"]["labels"][QOS_CLASS_KEY] = "BE"
        pod["metadata"].setdefault("annotations", {})[SIM_USAGE_ANNOTATION] = f"{BATCH_USAGE:g}"
        batch.pods.append(pod)
    notes = {
        "lahar": "the simulated agents stream their usage to Lahar's report endpoint (gRPC)",
        "volcano": f"overcommit-factor {OVERCOMMIT_FACTOR:g}: admits PodGroups at enqueue; places by requests",
        "kube-scheduler": "requests only",
    }
    return Workload(
        NodeShape(nodes),
        [online, batch],
        usage=OVERSUBSCRIPTION_USAGE,
        reports=peer == "lahar",
        settle_seconds=SETTLE_SECONDS,
        limit_seconds=max(300.0, nodes * BATCH_PER_NODE / 10),
        note=notes[peer],
    )


SHAPES = {
    shape.name: shape
    for shape in (
        Shape("basic", basic, PEERS),
        Shape("gangs", gangs, ("lahar", "volcano"), {"kube-scheduler": "no gangs (PodGroups)"}, capacity_bound=True),
        Shape("queues", queues, ("lahar", "volcano"), {"kube-scheduler": "no queues"}, capacity_bound=True),
        Shape("preemption", preemption, PEERS),
        Shape("affinity", affinity, PEERS),
        Shape("oversubscription", oversubscription, PEERS),
    )
}
DEFAULT_SHAPES = tuple(SHAPES)
# Seen in their logs: each lists and waits for kinds `lahar apiserver` does not serve.
NOT_ON_EMBEDDED = {
    "kube-scheduler": "waits for kinds the embedded server does not serve (PersistentVolumes, StorageClasses, "
    "CSINodes, ReplicaSets, StatefulSets, ResourceSlices, ...)",
    "volcano": "waits for kinds the embedded server does not serve (Numatopologies, HyperNodes, StorageClasses, "
    "ResourceQuotas, VolumeAttachments, ...)",
}


# --- processes -----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, SIGKILL after a grace: nothing of it stays; always reaped."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def process(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
        )
    try:
        yield proc
    finally:
        stop_group(proc)


def _control_plane_module() -> Any:
    """tests/kube/control_plane.py: the real control plane lives with the tests that made it."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        from tests.kube import control_plane
    except ImportError as exc:
        raise PeerUnavailable(f"no real control plane here (tests/kube/control_plane.py in {REPO}): {exc}") from exc
    return control_plane


def build(script: str, env: dict[str, str] | None = None) -> Path:
    """Run a build script (cached: seconds once built) and return the folder it prints last."""
    try:
        done = subprocess.run(
            [str(REPO / "scripts" / script)],
            capture_output=True,
            text=True,
            timeout=3 * 3600,
            env={**os.environ, **(env or {})},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerUnavailable(f"scripts/{script}: {exc}") from exc
    if done.returncode != 0:
        raise PeerUnavailable(f"scripts/{script} failed: {done.stderr.strip().splitlines()[-1:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class Backend:
    """A running API server: its kubeconfig and the processes whose CPU counts as the API's."""

    name: str
    kubeconfig: Path
    server_pids: dict[str, int]


@contextlib.contextmanager
def real_backend(workdir: Path, k8s_bin: Path) -> Iterator[Backend]:
    control_plane = _control_plane_module()
    with control_plane.ControlPlane(workdir, bin_dir=k8s_bin) as plane:
        pids = {c.name: c.proc.pid for c in plane.components}
        yield Backend("real", Path(plane.admin_kubeconfig), {"apiserver": pids["kube-apiserver"], "etcd": pids["etcd"]})


@contextlib.contextmanager
def embedded_backend(workdir: Path) -> Iterator[Backend]:
    from lahar.bench.apiserver import start_server

    port = free_loopback_port()
    data = workdir / "data"
    data.mkdir(parents=True)
    server = start_server(data, port, "normal")
    try:
        kubeconfig = workdir / "embedded.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "embedded", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "admin", "user": {}}],
                    "contexts": [{"name": "embedded", "context": {"cluster": "embedded", "user": "admin"}}],
                    "current-context": "embedded",
                }
            )
        )
        yield Backend("embedded", kubeconfig, {"apiserver": server.pid})
    finally:
        server.terminate()
        try:
            server.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def start_backend(name: str, workdir: Path, k8s_bin: Path | None) -> contextlib.AbstractContextManager[Backend]:
    if name == "embedded":
        return embedded_backend(workdir)
    if k8s_bin is None:
        raise PeerUnavailable("no real control plane: scripts/build-k8s.sh failed")
    return real_backend(workdir, k8s_bin)


@dataclass(frozen=True)
class ReportEndpoint:
    """Where the simulated agents stream their reports to Lahar's scheduler, with the token it
    takes for any node."""

    address: str
    token: str

    @classmethod
    def on_loopback(cls) -> ReportEndpoint:
        return cls(f"127.0.0.1:{free_loopback_port()}", secrets.token_hex(16))

    def listening(self) -> bool:
        host, _, port = self.address.rpartition(":")
        with socket.socket() as probe:
            probe.settimeout(0.2)
            return probe.connect_ex((host, int(port))) == 0


@dataclass
class Peer:
    """How to start one scheduler: its binaries (None: not available, `why` says why)."""

    name: str
    bin_dir: Path | None = None
    why: str = ""
    verbosity: int = 1  # klog's -v for the Go schedulers (their logs are in the run's folder)

    def argv(self, backend: Backend, workdir: Path, shape: str, reports: ReportEndpoint | None = None) -> list[str]:
        if self.name == "lahar":
            conf = workdir / "lahar-scheduler.conf"
            conf.write_text(lahar_conf(shape))
            argv = [
                sys.executable,
                "-m",
                "lahar",
                "scheduler",
                f"--kubeconfig={backend.kubeconfig}",
                f"--conf={conf}",
                "--metrics-address=127.0.0.1",
                "--metrics-port=0",
            ]
            if reports is not None:
                tokens = workdir / "report-tokens"
                tokens.write_text(f"{reports.token} *\n")
                tokens.chmod(0o600)
                argv += [f"--report-address={reports.address}", f"--token-file={tokens}"]
            return argv
        assert self.bin_dir is not None
        if self.name == "volcano":
            # In a folder of its own: vc-scheduler watches the configuration's folder and reloads
            # on every write there (with its log beside it, each log line reloaded it again).
            conf = workdir / "volcano-conf" / "volcano-scheduler.conf"
            conf.parent.mkdir(exist_ok=True)
            conf.write_text(volcano_conf(shape))
            return [
                str(self.bin_dir / "vc-scheduler"),
                f"--kubeconfig={backend.kubeconfig}",
                f"--scheduler-conf={conf}",
                "--leader-elect=false",
                f"--listen-address=127.0.0.1:{free_loopback_port()}",
                f"--healthz-address=127.0.0.1:{free_loopback_port()}",
                "--cache-dumper=false",
                f"--kube-api-qps={CLIENT_QPS}",
                f"--kube-api-burst={CLIENT_QPS}",
                f"-v={self.verbosity}",
            ]
        config = workdir / "kube-scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(backend.kubeconfig), "qps": CLIENT_QPS, "burst": CLIENT_QPS},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        return [
            str(self.bin_dir / "kube-scheduler"),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_loopback_port()}",
            f"-v={self.verbosity}",
        ]


def shape_actions(shape: str) -> str:
    """The actions Lahar and Volcano both run for `shape`: Volcano's built-in list (pkg/scheduler/
    util.go), with preempt for `preemption`."""
    return "enqueue, allocate, preempt, backfill" if shape == "preemption" else "enqueue, allocate, backfill"


def volcano_conf(shape: str) -> str:
    """Volcano's built-in configuration, with the shape's actions; for `oversubscription` its
    overcommit plugin (in the defaults already, factor 1.2) with `overcommit-factor` set."""
    plugins: list[dict[str, Any]] = [
        {"name": name} for name in ("overcommit", "drf", "predicates", "proportion", "nodeorder")
    ]
    if shape == "oversubscription":
        plugins[0]["arguments"] = {"overcommit-factor": OVERCOMMIT_FACTOR}
    tiers = [{"plugins": [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]}, {"plugins": plugins}]
    return yaml.safe_dump({"actions": shape_actions(shape), "tiers": tiers}, sort_keys=False)


def lahar_conf(shape: str) -> str:
    """Lahar's built-in configuration (its plugins as they ship) with the shape's actions, the same
    as Volcano's. Lahar's own default adds preempt and reclaim everywhere: on `queues`, reclaim
    takes back the weight-1 queue's early surplus by evicting pods of its running gangs, and with
    no job controller here to restart a broken gang its PodGroups keep holding the queue's
    admission budget; the comparison would then measure the missing controller."""
    actions, _, tiers = DEFAULT_CONF.partition("\n")
    assert actions.startswith("actions:"), actions
    return f'actions: "{shape_actions(shape)}"\n{tiers}'


def find_peers(names: list[str], volcano_src: str | None, progress: Callable[[str], None]) -> dict[str, Peer]:
    """Build (or find cached) each peer; a failure makes the peer unavailable with the reason."""
    peers: dict[str, Peer] = {}
    k8s: Path | None = None
    k8s_why = ""
    try:
        k8s = build("build-k8s.sh")
    except PeerUnavailable as exc:
        k8s_why = str(exc)
    for name in names:
        if name == "lahar":
            peers[name] = Peer(name, k8s)
        elif name == "kube-scheduler":
            peers[name] = Peer(name, k8s, k8s_why)
        elif name == "volcano":
            if not volcano_src:
                peers[name] = Peer(name, None, "VOLCANO_SRC is not set: scripts/build-volcano.sh needs a Volcano clone")
                continue
            try:
                peers[name] = Peer(name, build("build-volcano.sh", {"VOLCANO_SRC": volcano_src}))
            except PeerUnavailable as exc:
                peers[name] = Peer(name, None, str(exc))
        progress(f"peer {name}: {'ready' if not peers[name].why else peers[name].why}")
    peers["_k8s"] = Peer("_k8s", k8s, k8s_why)
    return peers


# --- the pod ledger ----------------------------------------------------------------------------------


@dataclass
class PodEntry:
    node: str = ""
    cpu: int = 0
    memory: int = 0
    group: str = ""
    queue: str = ""
    app: str = ""  # the `app` label: what anti-affinity and spread select on
    holding: bool = False  # bound and neither ended nor deleted
    best_effort: bool = False  # Lahar's QoS class BE: borrows what online pods leave idle
    usage: float = 0.0  # the share of its requests it uses (the simulated nodes' model)


class Ledger:
    """Every pod of the bench namespace from one list + watch, replayed in etcd order: when each
    was bound, what each node holds, and binds past a node's allocatable.

    BE pods count toward a node's pods but not toward its allocatable cpu and memory: they borrow
    what online pods leave idle. With a `usage` model (the simulated nodes'), each bind is also
    checked against the node's real usage and, for BE pods, against the reclaimable capacity its
    agent reports (the same function the simulated agents report with)."""

    def __init__(
        self, api: KubeApi, node_cpu: int, node_memory: int, node_pods: int, usage: SyntheticUsage | None = None
    ) -> None:
        self.api = api
        self.capacity = (node_cpu, node_memory, node_pods)
        self.usage = usage
        self.pods: dict[str, PodEntry] = {}
        self.used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # online cpu, memory; all pods
        self.be_used: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # BE cpu, memory requested
        self.online_load: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # online pods' usage
        self.be_load: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # BE pods' usage
        self.bound_at: dict[str, float] = {}  # pod name -> perf_counter when first seen bound
        self.over_capacity = 0
        self.beyond_requests = 0  # BE binds past allocatable by requests: placements on lent capacity
        self.over_reclaim = 0  # BE binds past the reclaimable capacity the node's agent reports
        self.over_usage = 0  # binds after which the node's real usage is past its capacity
        self.queue_cpu: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-ledger", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    listed = self.api.list_all(kinds.POD, NAMESPACE)
                    for pod in listed.get("items") or []:
                        self._apply("ADDED", pod)
                    version = listed["metadata"]["resourceVersion"]
                for kind, pod in self.api.watch(kinds.POD, NAMESPACE, resource_version=version, timeout_seconds=5):
                    if self._stop.is_set():
                        return
                    version = pod.get("metadata", {}).get("resourceVersion", version)
                    if kind != "BOOKMARK":
                        self._apply(kind, pod)
            except Gone:
                self.error = RuntimeError("the pod watch fell behind (410 Gone): its figures would be wrong")
                return
            except Exception:  # a dropped connection or a watch that ended: watch on from the last version
                if self._stop.is_set():
                    return
                time.sleep(0.2)

    def _apply(self, kind: str, pod: Obj) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        name = meta["name"]
        now = time.perf_counter()
        with self.changed:
            entry = self.pods.get(name)
            if entry is None:
                cpu = memory = 0
                for container in spec.get("containers") or []:
                    requests = (container.get("resources") or {}).get("requests") or {}
                    cpu += cpu_millis(str(requests.get("cpu", "0")))
                    memory += memory_bytes(str(requests.get("memory", "0")))
                labels = meta.get("labels") or {}
                share = sim_usage(pod)[0] if self.usage is not None else None
                entry = self.pods[name] = PodEntry(
                    cpu=cpu,
                    memory=memory,
                    group=labels.get(GROUP_LABEL, ""),
                    queue=labels.get(QUEUE_LABEL, ""),
                    app=labels.get("app", ""),
                    best_effort=qos_class(pod) is QoSClass.BE,
                    usage=(self.usage.factor if share is None else share) if self.usage is not None else 0.0,
                )
            node = spec.get("nodeName") or ""
            ended = kind == "DELETED" or status.get("phase") in ("Succeeded", "Failed")
            if node and not entry.node:
                entry.node = node
                self.bound_at.setdefault(name, now)
                if not ended:
                    self._hold(entry, +1)
                    self._check_bind(entry)
            elif entry.holding and ended:
                self._hold(entry, -1)
            self.changed.notify_all()

    def _check_bind(self, entry: PodEntry) -> None:
        """Count what the bind just held took its node past."""
        node_cpu, node_memory, _ = self.capacity
        used, be_used = self.used[entry.node], self.be_used[entry.node]
        if any(u > c for u, c in zip(used, self.capacity, strict=True)):
            self.over_capacity += 1
        if entry.best_effort and (used[0] + be_used[0] > node_cpu or used[1] + be_used[1] > node_memory):
            self.beyond_requests += 1
        if self.usage is None:
            return
        system_cpu, system_memory = system_usage(node_cpu, node_memory, self.usage)
        online, batch = self.online_load[entry.node], self.be_load[entry.node]
        if entry.best_effort:
            lent = reclaimable(node_cpu, node_memory, system_cpu + online[0], system_memory + online[1], self.usage)
            if be_used[0] > lent["cpu"] or be_used[1] > lent["memory"]:
                self.over_reclaim += 1
        if system_cpu + online[0] + batch[0] > node_cpu or system_memory + online[1] + batch[1] > node_memory:
            self.over_usage += 1

    def _hold(self, entry: PodEntry, sign: int) -> None:
        entry.holding = sign > 0
        used = self.used[entry.node]
        requested, load = (
            (self.be_used[entry.node], self.be_load[entry.node])
            if entry.best_effort
            else (used, self.online_load[entry.node])
        )
        requested[0] += sign * entry.cpu
        requested[1] += sign * entry.memory
        load[0] += sign * entry.cpu * entry.usage
        load[1] += sign * entry.memory * entry.usage
        used[2] += sign
        if entry.queue:
            self.queue_cpu[entry.queue] += sign * entry.cpu

    def count_bound(self, names: set[str]) -> int:
        with self.lock:
            return sum(1 for name in names if name in self.bound_at)

    def queue_shares(self) -> dict[str, int]:
        with self.lock:
            return dict(self.queue_cpu)

    def affinity_violations(self, zone_of: dict[str, str]) -> int:
        """Pods placed against the affinity shape's rules: a second pod of an app on a node
        (required anti-affinity per hostname), and pods past a zone skew of 1 per app."""
        per_node: dict[tuple[str, str], int] = defaultdict(int)
        per_zone: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(set(zone_of.values()), 0))
        with self.lock:
            for entry in self.pods.values():
                if entry.node and entry.app:
                    per_node[entry.node, entry.app] += 1
                    per_zone[entry.app][zone_of.get(entry.node, "")] += 1
        crowded = sum(count - 1 for count in per_node.values() if count > 1)
        skewed = sum(max(0, max(z.values()) - min(z.values()) - 1) for z in per_zone.values() if z)
        return crowded + skewed

    def partial_gangs(self, min_members: dict[str, int]) -> list[str]:
        bound: dict[str, int] = defaultdict(int)
        with self.lock:
            for name, entry in self.pods.items():
                if entry.group and name in self.bound_at:
                    bound[entry.group] += 1
        return sorted(g for g, n in bound.items() if g in min_members and 0 < n < min_members[g])


# --- one run -------------------------------------------------------------------------------------------


def create_objects(api: KubeApi, kind: Any, objects: list[Obj], pool: ThreadPoolExecutor) -> None:
    for _ in pool.map(lambda obj: api.create(kind, api_shaped(obj), NAMESPACE), objects):
        pass


def prepare(api: KubeApi, backend: Backend, peer: Peer, workload: Workload) -> None:
    """CRDs (Volcano's own for Volcano, Lahar's deploy/crds otherwise) on a real server, the
    namespace, queues and PriorityClasses."""
    if backend.name == "real":
        crds = (
            [str(peer.bin_dir / "crds")]
            if peer.name == "volcano" and peer.bin_dir
            else ["-k", str(REPO / "deploy" / "crds")]
        )
        flag = crds if crds[0] == "-k" else ["-f", *crds]
        kubectl(backend.kubeconfig, "apply", "--server-side", *flag)
        kubectl(backend.kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    with contextlib.suppress(KubeError):
        api.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for name, weight in {"default": 1, **workload.queues}.items():
        _create_when_served(api, kinds.QUEUE, api_shaped(queue_dict(name, weight)))
        # Open, as Volcano's queue controller (not running here) marks a new queue: vc-scheduler
        # rejects every job of a queue whose status says nothing.
        api.patch(kinds.QUEUE, name, {"status": {"state": "Open"}}, subresource="status")
    for name, value in workload.priority_classes.items():
        with contextlib.suppress(KubeError):
            api.create(kinds.PRIORITY_CLASS, api_shaped(priority_class_dict(name, value)))


def _create_when_served(api: KubeApi, kind: Any, obj: Obj) -> None:
    """A new CRD is served to clients a moment after it is Established: retry a short while."""
    deadline = time.monotonic() + 30
    while True:
        try:
            api.create(kind, obj)
            return
        except AlreadyExists:
            return
        except KubeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def kubectl(kubeconfig: Path, *args: str) -> None:
    done = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:2])}: {done.stderr.strip()[-500:]}")


def run_once(
    shape: Shape, peer: Peer, backend: Backend, scale: float, workdir: Path, progress: Callable[[str], None]
) -> dict[str, Any]:
    from lahar.client.connect import new_api_client
    from lahar.node.simulated import SimNodeSize, SimulatedNodes

    workload = shape.build(peer.name, scale)
    api = KubeApi(new_api_client(str(backend.kubeconfig), pool_size=CREATE_THREADS * 2))
    prepare(api, backend, peer, workload)
    size = workload.nodes
    reports = ReportEndpoint.on_loopback() if workload.reports else None
    sim = SimulatedNodes(
        api,
        size.count,
        SimNodeSize(size.cpu, size.memory, size.pods),
        reports.address if reports else None,
        reports.token if reports else None,
        name_prefix=NODE_PREFIX,
        report_interval=REPORT_SECONDS,
        usage=workload.usage,
    )
    zones = size.zones
    ledger = Ledger(api, cpu_millis(size.cpu), memory_bytes(size.memory), size.pods, workload.usage)
    measured: set[str] = set()
    min_members: dict[str, int] = {}
    for wave in workload.waves:
        for group in wave.podgroups:
            min_members[group["metadata"]["name"]] = group["spec"]["minMember"]
        if wave.measured:
            measured |= {pod["metadata"]["name"] for pod in wave.pods}
    samples: list[tuple[float, dict[str, int]]] = []
    sim.start(stream_reports=False)  # streams start once the scheduler listens
    try:
        if zones:
            label_zones(api, zones_of(sim.node_names, zones))
        ledger.start()
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            timed = [w for w in workload.waves if w.at == 0 and not w.after_bound]
            for wave in timed:  # everything there is at the start is created before the scheduler
                create_objects(api, kinds.PODGROUP, wave.podgroups, pool)
                create_objects(api, kinds.POD, wave.pods, pool)
                wait_running(sim, wave)
            progress(
                f"  {len(sim.node_names)} nodes, {sum(len(w.pods) for w in timed)} pods created; starting {peer.name}"
            )
            log = workdir / f"{peer.name}.log"
            started = time.perf_counter()
            with process(peer.argv(backend, workdir, shape.name, reports), log) as proc:
                pids = {"scheduler": proc.pid, **backend.server_pids}
                before = {name: cpu_seconds(pid) for name, pid in backend.server_pids.items()} | {"scheduler": 0.0}
                reported = stream_reports_when_listening(sim, reports, proc, log) if reports else lambda: True
                result = watch_run(
                    workload, ledger, api, pool, proc, log, measured, started, samples, pids, before, reported
                )
                for name, pid in pids.items():  # from the start, or the measured wave's creation
                    result[f"{name}_cpu_s"] = round(cpu_seconds(pid) - before[name], 3)
                result["peak_rss_mib"] = round(peak_rss_mib(proc.pid), 1)
                if workload.usage is not None and min_members:  # what enqueue admitted (Volcano's overcommit)
                    result["podgroups_admitted"] = podgroups_admitted(api)
                sim.stop()  # the report streams end before their scheduler does
    finally:
        ledger.stop()
        sim.stop()
    if ledger.error is not None:
        raise RuntimeError(str(ledger.error))
    result["over_capacity"] = ledger.over_capacity
    if workload.usage is not None:
        result["beyond_requests"] = ledger.beyond_requests
        result["over_reclaim"] = ledger.over_reclaim
        result["over_usage"] = ledger.over_usage
    result["partial_gangs"] = len(ledger.partial_gangs(min_members)) if peer.name != "kube-scheduler" else None
    if workload.queues:
        result["queue_shares"] = mean_shares(samples, workload)
        result["share_error"] = share_error(result["queue_shares"], workload.queues)
    if zones:
        result["affinity_violations"] = ledger.affinity_violations(zones_of(sim.node_names, zones))
    if result.get("scheduler_cpu_s") is not None and result["bound"]:
        result["scheduler_cpu_s_per_1000"] = round(result["scheduler_cpu_s"] * 1000 / result["bound"], 3)
    result["note"] = workload.note
    return result


def podgroups_admitted(api: KubeApi) -> int:
    """PodGroups of the bench namespace that enqueue let through (no longer Pending)."""
    groups = api.list_all(kinds.PODGROUP, NAMESPACE).get("items") or []
    return sum(1 for group in groups if (group.get("status") or {}).get("phase", "Pending") != "Pending")


def wait_running(sim: Any, wave: Wave, timeout: float = 120.0) -> None:
    """Pods created bound (with a nodeName: online pods already running) are waited for until
    the simulated nodes run them, so the first report shows their usage."""
    count = sum(1 for pod in wave.pods if pod["spec"].get("nodeName"))
    deadline = time.monotonic() + timeout
    while count and sum(len(node.pods) for node in sim.nodes.values()) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the simulated nodes did not run the {count} pods created bound in {timeout:.0f}s")
        time.sleep(0.05)


def stream_reports_when_listening(
    sim: Any, reports: ReportEndpoint, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0
) -> Callable[[], bool]:
    """Start the simulated agents' report streams once the scheduler's endpoint listens (the
    streams would otherwise wait out their reconnect backoff); returns whether every node has
    had a report acked."""
    deadline = time.monotonic() + timeout
    while not reports.listening():
        if proc.poll() is not None:
            raise RuntimeError(f"the scheduler exited with {proc.returncode}:\n{log_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the scheduler's report endpoint {reports.address} did not listen in {timeout:.0f}s")
        time.sleep(0.05)
    sim.start_streams()
    return lambda: all(stats.acked for stats in sim.stream_stats().values())


def zones_of(nodes: list[str], zones: int) -> dict[str, str]:
    """Nodes to zones, round-robin."""
    return {name: f"zone-{index % zones}" for index, name in enumerate(nodes)}


def label_zones(api: KubeApi, zone_of: dict[str, str]) -> None:
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(
            pool.map(
                lambda item: api.patch(kinds.NODE, item[0], {"metadata": {"labels": {ZONE_LABEL: item[1]}}}),
                zone_of.items(),
            )
        )


def watch_run(
    workload: Workload,
    ledger: Ledger,
    api: KubeApi,
    pool: ThreadPoolExecutor,
    proc: subprocess.Popen[bytes],
    log: Path,
    measured: set[str],
    started: float,
    samples: list[tuple[float, dict[str, int]]],
    pids: dict[str, int],
    cpu_before: dict[str, float],
    reported: Callable[[], bool] = lambda: True,
) -> dict[str, Any]:
    """Create the later waves when due, sample, and wait until every measured pod is bound, the
    scheduler exits, stalls, settles (the shape's `settle_seconds` without a bind once something
    is bound and, where agents report, every node has had a report taken), or the shape's limit
    passes. A measured wave created while the scheduler runs moves `cpu_before` to that moment:
    its CPU figures are that wave's."""
    pending = [w for w in workload.waves if w.at > 0 or w.after_bound]
    created_before: set[str] = {p["metadata"]["name"] for w in workload.waves if w not in pending for p in w.pods}
    measure_from = started
    last_count, last_progress = -1, started
    outcome = "all bound"
    next_sample = started
    reported_at: float | None = None
    first_bind_cpu: float | None = None
    settled: dict[str, float] | None = None  # the wait for a quiet scheduler before a measured wave
    while True:
        now = time.perf_counter()
        if proc.poll() is not None:
            raise RuntimeError(f"the scheduler exited with {proc.returncode}:\n{log_tail(log)}")
        while pending and (
            (pending[0].after_bound and ledger.count_bound(created_before) == len(created_before))
            or (not pending[0].after_bound and now - started >= pending[0].at)
        ):
            wave = pending.pop(0)
            if wave.after_bound and wave.measured:
                settle_started, settle_cpu = time.perf_counter(), cpu_seconds(pids["scheduler"])
                wait_quiet(pids["scheduler"])
                settled = {
                    "seconds": round(time.perf_counter() - settle_started, 3),
                    "scheduler_cpu_s": round(cpu_seconds(pids["scheduler"]) - settle_cpu, 3),
                }
                cpu_before.update({name: cpu_seconds(pid) for name, pid in pids.items()})
                measure_from = time.perf_counter()
            create_objects(api, kinds.PODGROUP, wave.podgroups, pool)
            create_objects(api, kinds.POD, wave.pods, pool)
            created_before |= {p["metadata"]["name"] for p in wave.pods}
        count = ledger.count_bound(measured)
        if count and first_bind_cpu is None:  # seen within a poll (50 ms) of the first bind
            first_bind_cpu = cpu_seconds(pids["scheduler"]) - cpu_before["scheduler"]
        if now >= next_sample and workload.queues:
            samples.append((now - started, ledger.queue_shares()))
            next_sample = now + SAMPLE_SECONDS
        if count == len(measured) and not pending:
            break
        if count != last_count:
            last_count, last_progress = count, now
        if reported_at is None and reported():
            reported_at = now
        settle = workload.settle_seconds
        if (
            settle is not None
            and count
            and not pending
            and reported_at is not None
            and now - max(last_progress, reported_at) >= settle
        ):
            outcome = f"settled: nothing bound for {settle:.0f}s"
            break
        if now - last_progress > NO_PROGRESS_SECONDS and not pending:
            outcome = f"stalled: nothing bound for {NO_PROGRESS_SECONDS:.0f}s"
            break
        if workload.end_at is not None and now - started >= workload.end_at:
            outcome = f"ended at {workload.end_at:.0f}s"
            break
        if now - started > workload.limit_seconds:
            outcome = f"time limit {workload.limit_seconds:.0f}s"
            break
        time.sleep(0.05)
    with ledger.lock:
        times = sorted(t for name, t in ledger.bound_at.items() if name in measured)
    ended = time.perf_counter() - started
    seconds = (times[-1] - measure_from) if times else None
    # The rate counts from the measured wave's creation when it arrives while the scheduler runs
    # (preemption), else from the first bind: a scheduler's start-up and first list are not its
    # throughput (they are in `seconds`).
    window = (times[-1] - (times[0] if measure_from == started else measure_from)) if len(times) > 1 else None
    return {
        "outcome": outcome,
        "pods": len(measured),
        "bound": len(times),
        "seconds": round(seconds, 3) if seconds is not None else None,
        "first_bind_s": round(times[0] - measure_from, 3) if times else None,
        "scheduler_cpu_to_first_bind_s": round(first_bind_cpu, 3) if first_bind_cpu is not None else None,
        "settled_before_wave": settled,
        "pods_per_second": round(len(times) / window, 1) if window else None,
        "curve": bound_curve([t - started for t in times], ended),
    }


def wait_quiet(pid: int, limit: float = QUIET_LIMIT_SECONDS) -> None:
    """Wait until the process's CPU grows by less than QUIET_CPU_S in QUIET_SECONDS (or `limit`
    passes): a measured wave's CPU must be that wave's, not the end of the work before it."""
    deadline = time.perf_counter() + limit
    last = cpu_seconds(pid)
    while time.perf_counter() < deadline:
        time.sleep(QUIET_SECONDS)
        now = cpu_seconds(pid)
        if now - last < QUIET_CPU_S:
            return
        last = now


def bound_curve(bind_seconds: list[float], ended: float, points: int = 200) -> list[tuple[float, int]]:
    """Pods bound over seconds since the scheduler started, from every bind time (sorted), thinned
    to about `points` steps, from (0, 0) to the run's end."""
    step = max(1, len(bind_seconds) // points)
    curve = [(0.0, 0)]
    for index in range(0, len(bind_seconds), step):
        curve.append((round(bind_seconds[index], 3), index + 1))
    if bind_seconds:
        curve.append((round(bind_seconds[-1], 3), len(bind_seconds)))
    curve.append((round(max(ended, bind_seconds[-1] if bind_seconds else 0.0), 3), len(bind_seconds)))
    return curve


def mean_shares(samples: list[tuple[float, dict[str, int]]], workload: Workload) -> dict[str, float]:
    """Each queue's mean share of the CPU allocated to the queues, over the samples in the shape's
    window ({} when nothing was allocated then)."""
    assert workload.share_window is not None
    low, high = workload.share_window
    shares: dict[str, list[float]] = defaultdict(list)
    for at, cpu in samples:
        total = sum(cpu.get(q, 0) for q in workload.queues)
        if low <= at <= high and total:
            for queue in workload.queues:
                shares[queue].append(cpu.get(queue, 0) / total)
    return {queue: round(statistics.fmean(values), 4) for queue, values in shares.items()}


def share_error(shares: dict[str, float], weights: dict[str, int]) -> float | None:
    """The largest relative gap between a queue's mean share and its weight's share, as a
    fraction of the weight's share (0.05: 5 %)."""
    if not shares:
        return None
    total = sum(weights.values())
    return round(max(abs(shares[q] - w / total) / (w / total) for q, w in weights.items()), 4)


# --- figures -------------------------------------------------------------------------------------------

FIGURES = (
    "seconds",
    "pods_per_second",
    "scheduler_cpu_s",
    "scheduler_cpu_to_first_bind_s",
    "scheduler_cpu_s_per_1000",
    "apiserver_cpu_s",
    "etcd_cpu_s",
    "peak_rss_mib",
    "over_capacity",
    "partial_gangs",
    "share_error",
    "affinity_violations",
    "beyond_requests",
    "over_reclaim",
    "over_usage",
    "podgroups_admitted",
)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread (max - min) of each figure over the runs that gave it."""
    summary: dict[str, Any] = {}
    for figure in FIGURES:
        values = [r[figure] for r in runs if r.get(figure) is not None]
        if values:
            summary[figure] = {
                "median": round(statistics.median(values), 3),
                "spread": round(max(values) - min(values), 3),
                "max": round(max(values), 3),
            }
    summary["outcomes"] = sorted({r["outcome"] for r in runs})
    summary["bound"] = [r["bound"] for r in runs]
    summary["pods"] = runs[0]["pods"] if runs else 0
    return summary


LAHAR_LIMITS = (
    ("over_capacity", 0),
    ("partial_gangs", 0),
    ("share_error", 0.05),
    ("affinity_violations", 0),
    ("over_reclaim", 0),
    ("over_usage", 0),
)


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, per shape and backend, where Lahar and the other peer both ran."""
    checks: list[dict[str, Any]] = []

    def median(entry: dict[str, Any], figure: str) -> float | None:
        value = (entry.get("summary") or {}).get(figure)
        return value["median"] if value else None

    for key, by_peer in results.items():
        lahar = by_peer.get("lahar") or {}
        if not lahar.get("summary"):
            continue
        ours = median(lahar, "pods_per_second")
        shape = SHAPES.get(key.split(" / ")[0])
        for peer, factor in (("volcano", 1.2), ("kube-scheduler", 1.0)):
            theirs = median(by_peer.get(peer) or {}, "pods_per_second")
            if ours is not None and theirs and shape is not None and shape.capacity_bound:
                what = f"pods/s vs {peer} (not applicable: capacity and run times bound it)"
                checks.append({"where": key, "what": what, "ok": None, "ratio": round(ours / theirs, 2)})
            elif ours is not None and theirs:
                checks.append(
                    {
                        "where": key,
                        "what": f"pods/s >= {factor} x {peer}",
                        "ok": ours >= factor * theirs,
                        "ratio": round(ours / theirs, 2),
                    }
                )
        cpu, theirs_cpu = (
            median(lahar, "scheduler_cpu_s_per_1000"),
            median(by_peer.get("volcano") or {}, "scheduler_cpu_s_per_1000"),
        )
        if cpu is not None and theirs_cpu:
            checks.append(
                {
                    "where": key,
                    "what": "CPU-s/1000 pods <= volcano",
                    "ok": cpu <= theirs_cpu,
                    "ratio": round(cpu / theirs_cpu, 2),
                }
            )
        if median(lahar, "beyond_requests") is not None:  # oversubscription: how many more BE pods
            for peer in ("volcano", "kube-scheduler"):
                theirs_bound = (by_peer.get(peer) or {}).get("summary", {}).get("bound")
                if theirs_bound and statistics.median(theirs_bound):
                    ratio = statistics.median(lahar["summary"]["bound"]) / statistics.median(theirs_bound)
                    what = f"BE pods placed vs {peer} (no target: what borrowing reclaimable capacity adds)"
                    checks.append({"where": key, "what": what, "ok": None, "ratio": round(ratio, 2)})
        for figure, limit in LAHAR_LIMITS:
            worst = (lahar["summary"].get(figure) or {}).get("max")
            if worst is not None:
                checks.append(
                    {"where": key, "what": f"{figure} <= {limit} (worst run)", "ok": worst <= limit, "value": worst}
                )
    return checks


PERCENT = frozenset({"share_error"})  # fractions in the JSON, printed in % in the table
SHAPE_FIGURES = frozenset({"beyond_requests", "over_reclaim", "over_usage", "podgroups_admitted"})  # oversubscription


def print_table(results: dict[str, Any], out: Any = None) -> None:
    out = out or sys.stdout
    every = {
        "bound": "bound",
        "pods_per_second": "pods/s",
        "seconds": "to all bound s",
        "scheduler_cpu_s": "sched CPU-s",
        "scheduler_cpu_to_first_bind_s": "of it to 1st bind",
        "scheduler_cpu_s_per_1000": "CPU-s/1k pods",
        "apiserver_cpu_s": "apiserver CPU-s",
        "etcd_cpu_s": "etcd CPU-s",
        "peak_rss_mib": "RSS MiB",
        "over_capacity": "over-cap",
        "partial_gangs": "partial",
        "share_error": "share err %",
        "affinity_violations": "affinity viol.",
        "beyond_requests": "BE beyond requests",
        "over_reclaim": "over-reclaim",
        "over_usage": "over-usage",
        "podgroups_admitted": "PodGroups admitted",
    }
    # The shape-specific figures only where some shape of these results gives them.
    given = {figure for by_peer in results.values() for e in by_peer.values() for figure in e.get("summary") or {}}
    names = [name for name in every if name in given or name not in SHAPE_FIGURES]
    columns = [every[name] for name in names]
    print("| shape / backend | peer | " + " | ".join(columns) + " |", file=out)
    print("|---|---|" + "---|" * len(columns), file=out)
    for key, by_peer in results.items():
        for peer, entry in by_peer.items():
            if "summary" not in entry:
                print(f"| {key} | {peer} | " + f"not run: {entry.get('why', '?')}" + " |" * len(columns), file=out)
                continue
            cells = []
            for name in names:
                value = entry["summary"].get(name)
                if name == "bound":  # the summary keeps each run's count
                    counts = value or [0]
                    value = {"median": statistics.median(counts), "spread": max(counts) - min(counts)}
                scale = 100 if name in PERCENT else 1
                cells.append(
                    "–"
                    if value is None
                    else f"{round(value['median'] * scale, 3):g} ±{round(value['spread'] * scale, 3):g}"
                )
            outcome = ", ".join(entry["summary"]["outcomes"])
            label = peer if outcome == "all bound" else f"{peer} ({outcome})"
            print(f"| {key} | {label} | " + " | ".join(cells) + " |", file=out)


COLOURS = {"lahar": "#d62728", "volcano": "#1f77b4", "kube-scheduler": "#2ca02c"}


def write_svg(results: dict[str, Any], path: Path) -> None:
    """Pods bound over time, one panel per shape and backend, one line per peer (its first run)."""
    panels = [(key, by_peer) for key, by_peer in results.items() if any(e.get("runs") for e in by_peer.values())]
    width, height, pad, top = 420, 260, 45, 20
    columns = 2
    rows = max(1, (len(panels) + columns - 1) // columns)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{columns * width}" height="{top + rows * height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{columns * width}" height="{top + rows * height}" fill="white"/>',
    ]
    for index, (key, by_peer) in enumerate(panels):
        x0, y0 = (index % columns) * width, top + (index // columns) * height
        curves = {p: e["runs"][0]["curve"] for p, e in by_peer.items() if e.get("runs") and e["runs"][0].get("curve")}
        t_max = max((c[-1][0] for c in curves.values()), default=1.0) or 1.0
        n_max = max((max(n for _, n in c) for c in curves.values()), default=1) or 1
        plot_w, plot_h = width - 2 * pad, height - 2 * pad
        parts.append(f'<text x="{x0 + width / 2}" y="{y0 + 18}" text-anchor="middle" font-weight="bold">{key}</text>')
        parts.append(
            f'<rect x="{x0 + pad}" y="{y0 + pad}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>'
        )
        parts.append(f'<text x="{x0 + pad}" y="{y0 + height - 12}">0</text>')
        parts.append(f'<text x="{x0 + width - pad}" y="{y0 + height - 12}" text-anchor="end">{t_max:.0f} s</text>')
        parts.append(f'<text x="{x0 + pad - 4}" y="{y0 + pad + 4}" text-anchor="end">{n_max}</text>')
        parts.append(f'<text x="{x0 + pad - 4}" y="{y0 + pad + plot_h}" text-anchor="end">0</text>')
        for line, (peer, curve) in enumerate(curves.items()):
            points = " ".join(
                f"{x0 + pad + plot_w * t / t_max:.1f},{y0 + pad + plot_h * (1 - n / n_max):.1f}" for t, n in curve
            )
            colour = COLOURS.get(peer, "#000")
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
            parts.append(f'<text x="{x0 + pad + 6}" y="{y0 + pad + 14 + 13 * line}" fill="{colour}">{peer}</text>')
    parts.append(
        '<text x="6" y="12" fill="#555">pods bound (measured pods) over seconds since the scheduler started</text>'
    )
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


# --- the command ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lahar bench peers", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply node and pod counts (default 1: the issue's sizes)"
    )
    parser.add_argument(
        "--shapes",
        default=",".join(DEFAULT_SHAPES),
        help=f"comma-separated, of {', '.join(SHAPES)}",
    )
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {', '.join(PEERS)}")
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated, of {', '.join(BACKENDS)}")
    parser.add_argument("--runs", type=int, default=3, help="runs per shape, peer and backend (default 3)")
    parser.add_argument(
        "--out", type=Path, default=Path("bench-peers"), help="folder for peers.json, peers.svg and logs"
    )
    parser.add_argument(
        "--volcano-src", default=os.environ.get("VOLCANO_SRC"), help="a Volcano git clone (default $VOLCANO_SRC)"
    )
    parser.add_argument("--peer-verbosity", type=int, default=1, help="klog -v of vc-scheduler and kube-scheduler")
    parser.add_argument(
        "--render", nargs="+", metavar="JSON", help="run nothing: merge these peers.json files into one table and plot"
    )
    parser.add_argument(
        "--pool",
        action="store_true",
        help="with --render: pool the runs of a shape, backend and peer found in several files (one run per"
        " quiet window, peers interleaved) instead of the later file's replacing the earlier's",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    args = parser.parse_args(argv)
    if args.pool and not args.render:
        parser.error("--pool only applies with --render")
    if not 0 < args.scale <= 10:
        parser.error(f"--scale must be in (0, 10], not {args.scale}")
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    for option, known in (("shapes", list(SHAPES)), ("peers", PEERS), ("backends", BACKENDS)):
        chosen = [name for name in getattr(args, option).split(",") if name]
        unknown = [name for name in chosen if name not in known]
        if unknown or not chosen:
            parser.error(f"--{option}: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")
        setattr(args, option, chosen)
    return args


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> dict[str, Any]:
    args.out.mkdir(parents=True, exist_ok=True)
    peers = find_peers(args.peers, args.volcano_src, progress)
    for peer in peers.values():
        peer.verbosity = args.peer_verbosity
    k8s = peers.pop("_k8s")
    results: dict[str, Any] = {}
    for shape_name in args.shapes:
        for backend_name in args.backends:
            key = f"{shape_name} / {backend_name}"
            by_peer: dict[str, Any] = results.setdefault(key, {})
            shape = SHAPES[shape_name]
            for peer_name in args.peers:
                peer = peers[peer_name]
                why = shape.unsupported.get(peer_name) or peer.why
                if backend_name == "embedded" and peer_name in NOT_ON_EMBEDDED:
                    why = why or NOT_ON_EMBEDDED[peer_name]
                if backend_name == "real" and not why and k8s.why:
                    why = k8s.why
                if why:
                    by_peer[peer_name] = {"why": why}
                    continue
                runs, failures = [], []
                for number in range(1, args.runs + 1):
                    progress(f"{key}: {peer_name}, run {number}/{args.runs}")
                    workdir = Path(tempfile.mkdtemp(prefix=f"{shape_name}-{backend_name}-{peer_name}-", dir=args.out))
                    try:
                        with start_backend(backend_name, workdir, k8s.bin_dir) as backend:
                            outcome = run_once(shape, peer, backend, args.scale, workdir, progress)
                        runs.append(outcome)
                        progress(
                            f"  {outcome['outcome']}: {outcome['bound']}/{outcome['pods']} bound in "
                            f"{outcome['seconds']}s, {outcome['pods_per_second']} pods/s, "
                            f"scheduler CPU {outcome.get('scheduler_cpu_s')}s "
                            f"({outcome.get('scheduler_cpu_to_first_bind_s')}s of it to the first bind)"
                            + (
                                f"; before the wave, {settled['seconds']}s and {settled['scheduler_cpu_s']} "
                                "CPU-s until the scheduler was quiet"
                                if (settled := outcome.get("settled_before_wave"))
                                else ""
                            )
                        )
                    except (RuntimeError, KubeError, OSError, PeerUnavailable) as exc:
                        failures.append(f"run {number}: {exc}")
                        progress(f"  failed: {str(exc)[:800]}")
                        if not runs:
                            break  # a peer that cannot run once will not run the next time either
                entry: dict[str, Any] = {"runs": runs, "failures": failures}
                if runs:
                    entry["summary"] = summarize(runs)
                else:
                    entry["why"] = failures[0][:300] if failures else "no run"
                by_peer[peer_name] = entry
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        return render(args)

    def progress(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    # SIGTERM unwinds like Ctrl-C: every `with` above stops what it started.
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        results = run(args, progress)
    except KeyboardInterrupt:
        progress("interrupted: everything the bench started is stopped")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    command = "lahar bench peers " + " ".join(argv if argv is not None else sys.argv[1:])
    publish({"commands": [command], "machine": machine(), "runs": args.runs, "results": results}, args)
    return 0


def render(args: argparse.Namespace) -> int:
    """--render: one table, JSON and plot from the peers.json of several runs of the bench (run
    in parts, each on a quiet machine), a later part's result for a shape, backend and peer
    replacing an earlier one (a part may re-measure one peer of a shape and keep the others), or
    with --pool adding its runs to the earlier ones (parts that each ran every peer once)."""
    document: dict[str, Any] = {"commands": [], "machine": "", "results": {}}
    for path in args.render:
        try:
            part = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            print(f"error: cannot read {path}: {exc}", file=sys.stderr)
            return 2
        document["commands"] += part.get("commands", [])
        document["machine"] = part.get("machine", document["machine"])
        document["runs"] = part.get("runs")
        for key, by_peer in part.get("results", {}).items():
            merged = document["results"].setdefault(key, {})
            for peer, entry in by_peer.items():
                earlier = merged.get(peer)
                if args.pool and earlier and earlier.get("runs") and entry.get("runs"):
                    entry = {**entry, "runs": earlier["runs"] + entry["runs"]}
                merged[peer] = entry
    if args.pool:
        document["runs"] = max(
            (len(entry.get("runs") or []) for by_peer in document["results"].values() for entry in by_peer.values()),
            default=0,
        )
    for by_peer in document["results"].values():  # summaries again from the runs, by this version's rules
        for entry in by_peer.values():
            if entry.get("runs"):
                entry["summary"] = summarize(entry["runs"])
    publish(document, args)
    return 0


def publish(document: dict[str, Any], args: argparse.Namespace) -> None:
    """Write peers.json and peers.svg to --out, print the table (or the JSON) and the targets."""
    document["targets"] = targets(document["results"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "peers.json").write_text(json.dumps(document, indent=1) + "\n")
    write_svg(document["results"], args.out / "peers.svg")
    if args.json:
        print(json.dumps(document, indent=1))
        return
    print_table(document["results"])
    for check in document["targets"]:
        figure = check.get("ratio", check.get("value"))
        verdict = "n/a   " if check["ok"] is None else "met   " if check["ok"] else "MISSED"
        print(f"{verdict} {check['where']}: {check['what']} ({figure})")
    print(f"wrote {args.out / 'peers.json'} and {args.out / 'peers.svg'}")


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} vCPUs ({model}), {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') >> 30} GiB"


if __name__ == "__main__":
    sys.exit(main())
