"""Co-location: does the agent's QoS engine keep an online service's tail latency while
best-effort (BE) work soaks up the CPU it leaves idle?

    lahar bench colocation [--seconds N] [--rate RPS] [--step-rate RPS] [--work-ms MS]
                           [--cpu-threshold RATIO] [--settle S] [--json] [--verbose]

Runs on this machine's real cgroup v1 hierarchy, as root. Under a unique kubelet-like root
(`kubepods-bench-<pid>-<hex>/burstable/pod<uid>/<container>`, `.../besteffort/pod<uid>/<container>`,
with kubelet's static cpu.shares) it starts
- an online latency-sensitive service: a TCP request/response server on 127.0.0.1 where each
  request burns ~1 ms of CPU, driven at a fixed rate by an open-loop load generator (latency is
  measured from each request's intended send time, so a stalled server cannot hide its queue:
  no coordinated omission); both in one LS pod;
- BE CPU hogs, one busy loop per core, each in its own BE pod.
Phases, in one run:
1. online alone;
2. online + BE, no QoS (kubelet's cgroups only);
3. online + BE with the agent's QoS engine on, as deployed (the real `Agent` in a thread, fed pod
   dicts for the pods above; its default QoS config, the CPU suppress threshold aside when
   --cpu-threshold is given; no API, so evictions are only logged);
4. load steps: the online rate jumps from --rate to --step-rate; how long until the BE CPU cap
   (polled every 2 ms from the cgroup files the executor writes) shrinks for good, first with the
   pressure (PSI) fast path, then with the 1 s tick alone.
Reported: online p50/p99/p999 per phase, `online_p99_solo`, `online_p99_colocated_noqos`,
`online_p99_colocated_qos`, their ratios to solo, `be_harvest_ratio` (BE CPU used / CPU the
online service left idle) and the step reaction times. Targets (DESIGN.md, "Performance"): p99
with QoS <= 1.15 x solo, harvest >= 0.8, reaction <= 1 s (<= 0.2 s through the pressure path).

Everything it started is stopped and every cgroup it made removed at the end, on failure and on
Ctrl-C; its child processes also die with it and stop at a deadline of their own.
The machine is shared: other processes' CPU use shows up as `other_cpu_cores` in each phase."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import math
import os
import secrets
import selectors
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
# What kubelet creates pod cgroups under on v1; cpuset needs cpus/mems copied in before tasks join.
CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "blkio")
BENCH_PREFIX = "kubepods-bench-"  # + <bench pid>-<random hex>
MESSAGE = struct.Struct("!qd")  # request id, intended send time (CLOCK_MONOTONIC seconds)
ONLINE_REQUEST_MILLICORES = 500  # the LS pod's CPU request: its cpu.shares, as kubelet sets them
WARMUP_SECONDS = 1.0  # of every phase, measured but left out of the figures
PR_SET_PDEATHSIG = 1


# --- child processes: the online server, the load generator, the BE hogs ----------------------


def _die_with_parent(deadline: float) -> Callable[[], bool]:
    """Ask the kernel to kill this process with its parent (the bench); answer a check that is
    true once the parent is gone or the deadline passed, for loops that must stop by themselves."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return lambda: os.getppid() != parent or time.monotonic() > deadline


def burn(iterations: int) -> int:
    """A fixed amount of pure-Python CPU work."""
    x = 0
    for i in range(iterations):
        x ^= i * 2654435761
    return x


def calibrate(work_seconds: float) -> int:
    """Iterations of `burn` that take `work_seconds` on an idle core (the fastest of several runs)."""
    probe = 20_000
    best = min(_timed(burn, probe) for _ in range(30))
    return max(1, round(probe * work_seconds / best))


def _timed(function: Callable[[int], Any], argument: int) -> float:
    started = time.perf_counter()
    function(argument)
    return time.perf_counter() - started


def serve(work_ms: float, deadline: float) -> None:
    """The online service: one connection at a time, each 16-byte request answered (echoed) after
    burning `work_ms` of CPU. Prints `port iterations` once listening."""
    stop = _die_with_parent(deadline)
    iterations = calibrate(work_ms / 1000)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.5)
    print(listener.getsockname()[1], iterations, flush=True)
    while not stop():
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        with connection:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.settimeout(0.5)
            pending = b""
            while not stop():
                try:
                    data = connection.recv(65536)
                    if not data:
                        break
                    pending += data
                    while len(pending) >= MESSAGE.size:
                        request, pending = pending[: MESSAGE.size], pending[MESSAGE.size :]
                        burn(iterations)
                        connection.sendall(request)
                except TimeoutError:
                    continue
                except OSError:  # the generator gave up on its last answers and left
                    break


def hog(deadline: float) -> None:
    """A BE busy loop, checking every ~50 ms whether to stop."""
    stop = _die_with_parent(deadline)
    while not stop():
        burn(200_000)


@dataclass(frozen=True)
class Segment:
    seconds: float
    rate: float  # requests per second


def intended_times(start: float, segments: list[Segment]) -> list[float]:
    """Send times of an open-loop schedule: evenly spaced at each segment's rate."""
    times: list[float] = []
    at = start
    for segment in segments:
        count = int(segment.seconds * segment.rate)
        times.extend(at + i / segment.rate for i in range(count))
        at += segment.seconds
    return times


def percentiles(latencies: list[float]) -> dict[str, float | None]:
    """p50/p99/p999 in milliseconds (nearest rank)."""
    if not latencies:
        return {"p50_ms": None, "p99_ms": None, "p999_ms": None}
    ordered = sorted(latencies)

    def rank(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000, 3)

    return {"p50_ms": rank(0.50), "p99_ms": rank(0.99), "p999_ms": rank(0.999)}


def load(port: int, start: float, segments: list[Segment], warmup: float, deadline: float) -> dict[str, Any]:
    """Send requests at their intended times whatever the answers do (open loop), over one
    pipelined connection; latency = answer time - intended send time. Stats per segment, the
    first `warmup` seconds left out."""
    stop = _die_with_parent(deadline)
    times = intended_times(start, segments)
    latencies: list[float | None] = [None] * len(times)
    connection = socket.create_connection(("127.0.0.1", port))
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    connection.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(connection, selectors.EVENT_READ)
    outgoing, incoming = bytearray(), b""
    sent = received = 0
    drain_until = (times[-1] if times else start) + 2.0
    while received < len(times) and time.monotonic() < drain_until and not stop():
        now = time.monotonic()
        while sent < len(times) and times[sent] <= now:
            outgoing += MESSAGE.pack(sent, times[sent])
            sent += 1
        if outgoing:
            with contextlib.suppress(BlockingIOError):
                del outgoing[: connection.send(outgoing)]
        wait = max(0.0, times[sent] - time.monotonic()) if sent < len(times) else 0.05
        selector.modify(connection, selectors.EVENT_READ | (selectors.EVENT_WRITE if outgoing else 0))
        for _key, events in selector.select(min(wait, 0.05)):
            if events & selectors.EVENT_READ:
                data = connection.recv(65536)
                answered = time.monotonic()
                if not data:
                    raise ConnectionError("the online server closed the connection")
                incoming += data
                usable = len(incoming) - len(incoming) % MESSAGE.size
                for request, intended in MESSAGE.iter_unpack(incoming[:usable]):
                    latencies[request] = answered - intended
                    received += 1
                incoming = incoming[usable:]
    connection.close()
    result: dict[str, Any] = {"start": start, "sent": sent, "answered": received, "segments": []}
    at = start
    for index, segment in enumerate(segments):
        skip = warmup if index == 0 else 0.0
        window = [lat for t, lat in zip(times, latencies) if at + skip <= t < at + segment.seconds]
        answered = [lat for lat in window if lat is not None]
        result["segments"].append(
            {
                "start": at,
                "rate": segment.rate,
                "requests": len(window),
                "unanswered": len(window) - len(answered),
                **percentiles(answered),
            }
        )
        at += segment.seconds
    return result


def role_main(argv: list[str]) -> int:
    """Entry point of the child processes (`colocation.py serve|load|hog ...`)."""
    role, options = argv[0], json.loads(argv[1])
    if role == "serve":
        serve(options["work_ms"], options["deadline"])
    elif role == "hog":
        hog(options["deadline"])
    elif role == "load":
        segments = [Segment(s, r) for s, r in options["segments"]]
        print(json.dumps(load(options["port"], options["start"], segments, options["warmup"], options["deadline"])))
    else:
        raise SystemExit(f"unknown role {role!r}")
    return 0


# --- the kubelet-like cgroup tree --------------------------------------------------------------


def cgroup_problem(root: Path = CGROUP_ROOT) -> str | None:
    """Why this bench cannot run here, or None."""
    from lahar.agent.cgroups.layout import v1_write_problem

    return v1_write_problem(root, CONTROLLERS)


@dataclass
class BenchPod:
    name: str
    uid: str
    kube_qos: str  # Burstable, BestEffort
    qos: str  # Lahar's class
    priority: int
    containers: dict[str, str]  # container name -> id
    cpu_request_millicores: int = 0

    def as_api_object(self) -> dict[str, Any]:
        """The pod as the API would list it on this node."""
        resources = {"requests": {"cpu": f"{self.cpu_request_millicores}m"}} if self.cpu_request_millicores else {}
        return {
            "metadata": {
                "name": self.name,
                "namespace": "bench",
                "uid": self.uid,
                "labels": {"lahar.dev/qos-class": self.qos},
            },
            "spec": {
                "nodeName": "bench",
                "priority": self.priority,
                "containers": [{"name": name, "resources": resources} for name in self.containers],
            },
            "status": {
                "phase": "Running",
                "qosClass": self.kube_qos,
                "containerStatuses": [
                    {"name": name, "containerID": f"containerd://{cid}"} for name, cid in self.containers.items()
                ],
            },
        }


class BenchTree:
    """A kubelet-like cgroupfs tree under every controller, made and removed by this bench."""

    def __init__(self, root: Path = CGROUP_ROOT) -> None:
        from lahar.agent.cgroups.layout import CgroupDriver, KubeLayout, v1_controller_dirs

        self.root = root
        self.kubepods = f"{BENCH_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self.layout = KubeLayout(CgroupDriver.CGROUPFS, self.kubepods)
        self.mounts = {c: v1_controller_dirs(root)[c] for c in CONTROLLERS}
        self.created: list[str] = []  # relative paths, parents first
        self.qos_shares: dict[str, int] = {}  # Kubernetes QoS level -> the cpu.shares of its pods

    def make(self, relative: str) -> None:
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            path = "/".join(parts[:depth])
            if path in self.created:
                continue
            for controller, mount in self.mounts.items():
                (mount / path).mkdir(exist_ok=True)
                if controller == "cpuset":  # an empty cpuset takes no tasks
                    for name in ("cpuset.cpus", "cpuset.mems"):
                        (mount / path / name).write_text((mount / path).parent.joinpath(name).read_text())
            self.created.append(path)

    def write(self, controller: str, relative: str, name: str, value: object) -> None:
        (self.mounts[controller] / relative / name).write_text(str(value))

    def read(self, controller: str, relative: str, name: str) -> str:
        return (self.mounts[controller] / relative / name).read_text().strip()

    def add_pod(self, pod: BenchPod) -> str:
        """The pod's and its containers' cgroups, with the cpu.shares kubelet would set."""
        from lahar.agent.qos.knobs import MIN_SHARES, milli_to_shares
        from lahar.api.qos import BEST_EFFORT

        qos_dir = self.layout.qos_dir(pod.kube_qos)
        pod_dir = self.layout.pod_dir(pod.uid, pod.kube_qos)
        self.make(qos_dir)
        shares = milli_to_shares(pod.cpu_request_millicores)
        for container_id in pod.containers.values():
            self.make(f"{pod_dir}/{container_id}")
        self.write("cpu", pod_dir, "cpu.shares", shares)
        # kubelet: the besteffort level gets the minimum, burstable the sum of its pods' requests
        self.qos_shares[pod.kube_qos] = self.qos_shares.get(pod.kube_qos, 0) + shares
        self.write(
            "cpu", qos_dir, "cpu.shares", MIN_SHARES if pod.kube_qos == BEST_EFFORT else self.qos_shares[pod.kube_qos]
        )
        return pod_dir

    def procs_files(self, relative: str) -> list[Path]:
        return [mount / relative / "cgroup.procs" for mount in self.mounts.values()]

    def cpu_seconds(self, relative: str) -> float:
        return int(self.read("cpuacct", relative, "cpuacct.usage")) / 1e9

    def remove(self) -> list[str]:
        """rmdir everything made, deepest first, after moving any task left to the root; answers
        what could not be removed."""
        left: list[str] = []
        for relative in reversed(self.created):
            for mount in self.mounts.values():
                path = mount / relative
                if not path.exists():
                    continue
                with contextlib.suppress(OSError):
                    for pid in (path / "cgroup.procs").read_text().split():
                        with contextlib.suppress(OSError):
                            (mount / "cgroup.procs").write_text(pid)
                if not _rmdir(path):
                    left.append(str(path))
        return left


def sweep_stale(root: Path = CGROUP_ROOT) -> list[str]:
    """Remove the trees of earlier runs whose bench process is gone (killed with SIGKILL: its
    children died with it, its empty cgroups stayed); answers what was removed."""
    from lahar.agent.cgroups.layout import v1_controller_dirs

    removed = []
    for controller, mount in v1_controller_dirs(root).items():
        if controller not in CONTROLLERS:
            continue
        for top in mount.glob(f"{BENCH_PREFIX}*-*"):
            pid = top.name[len(BENCH_PREFIX) :].partition("-")[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            for directory, _, _ in sorted(os.walk(top), key=lambda entry: -len(Path(entry[0]).parts)):
                _rmdir(Path(directory), timeout=0.5)
            removed.append(str(top))
    return removed


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])


def _rmdir(path: Path, timeout: float = 5.0) -> bool:
    """The kernel may call a cgroup busy for a moment after its last task exits."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Processes:
    """Children of this bench, killed at the end whatever happens."""

    children: list[subprocess.Popen[str]] = field(default_factory=list)

    def spawn(self, tree: BenchTree, cgroup: str, role: str, options: dict[str, Any]) -> subprocess.Popen[str]:
        """Start a role in a cgroup: a shell joins the cgroup, then becomes the Python child, so
        not one instruction of it runs outside."""
        joins = " && ".join(f"echo $$ > {shlex.quote(str(f))}" for f in tree.procs_files(cgroup))
        command = [
            "sh",
            "-c",
            f'{joins} && exec "$@"',
            "sh",
            sys.executable,
            str(Path(__file__).resolve()),
            role,
            json.dumps(options),
        ]
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        self.children.append(child)
        return child

    def stop(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(5)
            if child.stdout is not None:
                child.stdout.close()


def _read_line(stream: IO[str] | None, timeout: float, what: str) -> str:
    """One line from a child, or an error naming what did not come."""
    assert stream is not None
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not found or not found[0]:
        raise RuntimeError(f"{what}: nothing came within {timeout} s")
    return found[0]


def node_busy_seconds() -> float:
    from lahar.agent.collectors.cpu import parse_proc_stat

    sample = parse_proc_stat(Path("/proc/stat").read_text())
    return sum(ticks.busy for ticks in sample.values()) / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuMeter:
    """CPU used by the online pod, the BE pods and the whole node over a window."""

    tree: BenchTree
    online: str
    best_effort: list[str]

    def read(self) -> tuple[float, float, float, float]:
        return (
            time.monotonic(),
            self.tree.cpu_seconds(self.online),
            sum(self.tree.cpu_seconds(p) for p in self.best_effort),
            node_busy_seconds(),
        )

    @staticmethod
    def usage(
        before: tuple[float, float, float, float], after: tuple[float, float, float, float], cores: int
    ) -> dict[str, float]:
        elapsed = after[0] - before[0]
        online, best_effort, node = ((a - b) / elapsed for a, b in zip(after[1:], before[1:]))
        other = max(0.0, node - online - best_effort)  # other tenants of this shared machine, this bench
        return {
            "online_cpu_cores": round(online, 3),
            "be_cpu_cores": round(best_effort, 3),
            "other_cpu_cores": round(other, 3),
            "be_harvest_ratio": _share(best_effort, cores - online),
            "be_harvest_ratio_net_of_other": _share(best_effort, cores - online - other),
        }


@dataclass
class Bench:
    tree: BenchTree
    processes: Processes
    cores: int
    seconds: float
    work_ms: float
    deadline: float  # monotonic: every child stops by then
    server_port: int = 0
    online_dir: str = ""
    pods: list[BenchPod] = field(default_factory=list)
    be_dirs: list[str] = field(default_factory=list)

    def start_online(self) -> None:
        from lahar.api.qos import BURSTABLE

        pod = BenchPod(
            "online",
            str(uuid.uuid4()),
            BURSTABLE,
            "LS",
            1000,
            {"server": secrets.token_hex(32), "client": secrets.token_hex(32)},
            cpu_request_millicores=ONLINE_REQUEST_MILLICORES,
        )
        self.online_dir = self.tree.add_pod(pod)
        self.pods.append(pod)
        server = self.processes.spawn(
            self.tree,
            f"{self.online_dir}/{pod.containers['server']}",
            "serve",
            {"work_ms": self.work_ms, "deadline": self.deadline},
        )
        self.server_port = int(_read_line(server.stdout, 30, "the online server's port").split()[0])

    def start_best_effort(self) -> None:
        from lahar.api.qos import BEST_EFFORT

        for index in range(self.cores):
            pod = BenchPod(
                f"batch-{index}", str(uuid.uuid4()), BEST_EFFORT, "BE", index, {"hog": secrets.token_hex(32)}
            )
            pod_dir = self.tree.add_pod(pod)
            self.pods.append(pod)
            self.be_dirs.append(pod_dir)
            self.processes.spawn(self.tree, f"{pod_dir}/{pod.containers['hog']}", "hog", {"deadline": self.deadline})

    def api_pods(self) -> list[dict[str, Any]]:
        return [pod.as_api_object() for pod in self.pods]

    def drive(self, segments: list[Segment], on_start: Callable[[float], None] | None = None) -> dict[str, Any]:
        """Run the load generator over `segments`, measuring CPU over the same window (after the
        warm-up); `on_start` gets the schedule's start time."""
        client_dir = f"{self.online_dir}/{self.pods[0].containers['client']}"
        start = time.monotonic() + 0.5  # the generator's own start-up
        total = sum(s.seconds for s in segments)
        generator = self.processes.spawn(
            self.tree,
            client_dir,
            "load",
            {
                "port": self.server_port,
                "start": start,
                "warmup": WARMUP_SECONDS,
                "deadline": self.deadline,
                "segments": [(s.seconds, s.rate) for s in segments],
            },
        )
        if on_start is not None:
            on_start(start)
        meter = CpuMeter(self.tree, self.online_dir, self.be_dirs)
        _sleep_until(start + WARMUP_SECONDS)
        before = meter.read()
        _sleep_until(start + total)
        after = meter.read()
        output = _read_line(generator.stdout, 10, "the load generator's figures")
        generator.wait(5)
        return {**json.loads(output), **CpuMeter.usage(before, after, self.cores)}


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 3) if whole > 0.01 else None


def _sleep_until(at: float) -> None:
    while (left := at - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))


# --- the BE CPU cap, as the cgroup files say ---------------------------------------------------


def cpu_cap_cores(tree: BenchTree, relative: str) -> float:
    """A cgroup's CFS cap in cores; infinity when unlimited."""
    quota = int(tree.read("cpu", relative, "cpu.cfs_quota_us"))
    return quota / int(tree.read("cpu", relative, "cpu.cfs_period_us")) if quota > 0 else float("inf")


def be_cap_cores(tree: BenchTree, be_dirs: list[str]) -> float:
    """What all BE pods together may use: the besteffort QoS cgroup's cap, or the sum of the
    pods' caps, whichever is tighter (the executor may write either)."""
    from lahar.api.qos import BEST_EFFORT

    pods = sum(cpu_cap_cores(tree, d) for d in be_dirs)
    return min(cpu_cap_cores(tree, tree.layout.qos_dir(BEST_EFFORT)), pods)


class CapWatcher:
    """Polls the BE cap every few milliseconds; keeps (time, cap) at each change."""

    def __init__(self, read: Callable[[], float], period: float = 0.002) -> None:
        self.read = read
        self.period = period
        self.changes: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cap-watcher", daemon=True)

    def __enter__(self) -> CapWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = None
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                cap = self.read()
                if cap != last:
                    self.changes.append((time.monotonic(), cap))
                    last = cap
            time.sleep(self.period)

    def cap_at(self, at: float) -> float | None:
        found = None
        for when, cap in self.changes:
            if when > at:
                break
            found = cap
        return found

    def settled_below(self, limit: float, after: float) -> float | None:
        """When the cap went to `limit` or under and stayed there (a dip the next tick undoes,
        e.g. a pressure cut that was due anyway, does not count); None if it did not."""
        since = None
        for when, cap in self.changes:
            if when < after:
                continue
            if cap <= limit:
                since = when if since is None else since
            else:
                since = None
        return since


def reaction(watcher: CapWatcher, step_at: float, expected_drop: float) -> dict[str, Any]:
    """How long after the step the cap fell, for good, by half the online usage the step added."""
    before = watcher.cap_at(step_at)
    result: dict[str, Any] = {"cap_before_cores": before, "expected_drop_cores": round(expected_drop, 3)}
    if before is None or before == float("inf"):
        return {**result, "reaction_seconds": None, "why": "no BE cap in force before the step"}
    limit = before - expected_drop / 2
    shrunk = watcher.settled_below(limit, step_at)
    result["cap_after_cores"] = watcher.changes[-1][1] if watcher.changes else None
    if shrunk is None:
        lowest = min((cap for when, cap in watcher.changes if when >= step_at), default=before)
        return {
            **result,
            "reaction_seconds": None,
            "why": f"the cap did not settle at or under {limit:.2f} cores after the step (before: "
            f"{before:.2f}, lowest after: {lowest:.2f}; it may have been as tight as the new load "
            "calls for already, e.g. at the engine's floor)",
        }
    return {**result, "reaction_seconds": round(shrunk - step_at, 3)}


# --- the agent with its QoS engine -------------------------------------------------------------


@contextlib.contextmanager
def qos_agent(bench: Bench, fast_path: bool, cpu_threshold: float | None) -> Iterator[Any]:
    """The real Agent with its QoS engine on, in a thread of this process, fed the bench's pods
    (no API: evictions are only logged). `fast_path`: the pressure fast path between ticks.
    Closing it relaxes every BE limit it set."""
    from lahar.agent.agent import Agent, AgentSettings
    from lahar.agent.qos.config import QosConfig

    suppress: dict[str, Any] = {"fast_path": fast_path}
    if cpu_threshold is not None:
        suppress["threshold"] = cpu_threshold
    settings = AgentSettings(
        node="bench",
        cgroup_root=bench.tree.root,
        kubepods=bench.tree.kubepods,
        qos=QosConfig.from_mapping({"cpu_suppress": suppress}),
    )
    agent = Agent(settings, pods=bench.api_pods)
    thread = threading.Thread(target=agent.run, name="agent", daemon=True)
    thread.start()
    try:
        yield agent
    finally:
        agent.stop()
        thread.join(10)
        agent.close()


def health_errors(agent: Any) -> dict[str, str]:
    """What the agent's last report says went wrong (QoS unavailable, a collector failing)."""
    return dict(agent.latest.health.errors) if agent.latest is not None else {"agent": "no report collected"}


# --- main --------------------------------------------------------------------------------------


def phase_summary(phase: dict[str, Any]) -> dict[str, Any]:
    segment = phase["segments"][0]
    return {key: segment[key] for key in ("p50_ms", "p99_ms", "p999_ms", "requests", "unanswered")} | {
        key: phase[key]
        for key in (
            "online_cpu_cores",
            "be_cpu_cores",
            "other_cpu_cores",
            "be_harvest_ratio",
            "be_harvest_ratio_net_of_other",
        )
    }


def ratio(value: float | None, base: float | None) -> float | None:
    return round(value / base, 3) if value is not None and base else None


def run(
    seconds: float, rate: float, step_rate: float, work_ms: float, cpu_threshold: float | None, settle: float
) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    step_seconds = max(2.0, seconds / 2)
    budget = 4 * seconds + 4 * step_seconds + 2 * settle + 60  # every phase, start-up and slack
    sweep_stale()
    tree, processes = BenchTree(), Processes()
    bench = Bench(tree, processes, cores, seconds, work_ms, time.monotonic() + budget)
    result: dict[str, Any] = {
        "benchmark": "colocation",
        "cores": cores,
        "seconds": seconds,
        "rate": rate,
        "step_rate": step_rate,
        "work_ms": work_ms,
        "kubepods": tree.kubepods,
    }
    phases: dict[str, Any] = {}
    try:
        bench.start_online()
        phases["solo"] = bench.drive([Segment(seconds + WARMUP_SECONDS, rate)])
        bench.start_best_effort()
        phases["colocated_noqos"] = bench.drive([Segment(seconds + WARMUP_SECONDS, rate)])
        with qos_agent(bench, fast_path=True, cpu_threshold=cpu_threshold) as agent:  # as deployed
            time.sleep(settle)
            phases["colocated_qos"] = bench.drive([Segment(seconds + WARMUP_SECONDS, rate)])
            phases["step_psi"] = step_phase(bench, rate, step_rate, step_seconds, phases["colocated_qos"])
            agent_errors = health_errors(agent)
        with qos_agent(bench, fast_path=False, cpu_threshold=cpu_threshold) as agent:  # the tick alone
            time.sleep(settle)
            phases["step"] = step_phase(bench, rate, step_rate, step_seconds, phases["colocated_qos"])
            agent_errors |= health_errors(agent)
        if agent_errors:
            result["agent_errors"] = agent_errors
    finally:
        processes.stop()
        left = tree.remove()
        if left:
            result["cgroups_left"] = left
    steady = {name: phase_summary(phases[name]) for name in ("solo", "colocated_noqos", "colocated_qos")}
    result["phases"] = {**steady, "step_psi": phases["step_psi"], "step": phases["step"]}
    solo, noqos, qos = (steady[name]["p99_ms"] for name in ("solo", "colocated_noqos", "colocated_qos"))
    result.update(
        {
            "online_p99_solo": solo,
            "online_p99_colocated_noqos": noqos,
            "online_p99_colocated_qos": qos,
            "p99_ratio_noqos": ratio(noqos, solo),
            "p99_ratio_qos": ratio(qos, solo),
            "be_harvest_ratio": steady["colocated_qos"]["be_harvest_ratio"],
            "be_harvest_ratio_noqos": steady["colocated_noqos"]["be_harvest_ratio"],
            "step_reaction_seconds": phases["step"]["reaction_seconds"],
            "step_reaction_seconds_psi": phases["step_psi"]["reaction_seconds"],
        }
    )
    return result


def step_phase(bench: Bench, rate: float, step_rate: float, seconds: float, steady: dict[str, Any]) -> dict[str, Any]:
    """Online load jumps from `rate` to `step_rate`; when does the BE cap shrink?"""
    per_request = steady["online_cpu_cores"] / rate  # CPU seconds the online pod spends per request
    starts: list[float] = []
    with CapWatcher(lambda: be_cap_cores(bench.tree, bench.be_dirs)) as watcher:
        figures = bench.drive([Segment(seconds, rate), Segment(seconds, step_rate)], on_start=starts.append)
    step_at = starts[0] + seconds
    return {
        **reaction(watcher, step_at, (step_rate - rate) * per_request),
        "p99_ms_before": figures["segments"][0]["p99_ms"],
        "p99_ms_after": figures["segments"][1]["p99_ms"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lahar bench colocation", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per phase (default 10)")
    parser.add_argument("--rate", type=float, default=200.0, help="online requests per second (default 200)")
    parser.add_argument("--step-rate", type=float, help="online rate after the load step (default 2 x --rate)")
    parser.add_argument("--work-ms", type=float, default=1.0, help="CPU work per online request (default 1 ms)")
    parser.add_argument(
        "--cpu-threshold", type=float, help="the QoS engine's CPU suppress threshold (default: the engine's own)"
    )
    parser.add_argument("--settle", type=float, default=3.0, help="seconds the QoS engine gets before measuring")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="show the agent's cgroup writes as it makes them")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rate <= 0 or args.work_ms <= 0 or args.settle < 0:
        parser.error("--seconds, --rate and --work-ms must be > 0, --settle >= 0")
    problem = cgroup_problem()
    if problem is not None:
        print(f"lahar bench colocation cannot run here: {problem}", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up like Ctrl-C
    agent_log = logging.getLogger("lahar.agent")
    level = agent_log.level
    if not args.verbose:  # each cap change is an INFO line: a few hundred per run
        agent_log.setLevel(logging.WARNING)
    try:
        result = run(
            args.seconds, args.rate, args.step_rate or 2 * args.rate, args.work_ms, args.cpu_threshold, args.settle
        )
    except KeyboardInterrupt:
        print("lahar bench colocation: interrupted; its processes and cgroups are removed", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        agent_log.setLevel(level)
    print(json.dumps(result) if args.json else render(result))
    return 0 if "cgroups_left" not in result else 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def render(result: dict[str, Any]) -> str:
    lines = [
        f"co-location on {result['cores']} cores, online {result['rate']:g} req/s x {result['work_ms']:g} ms "
        f"of CPU, {result['seconds']:g} s per phase"
    ]
    for name, phase in result["phases"].items():
        if "p99_ms" in phase:
            lines.append(
                f"  {name:16} p50 {phase['p50_ms']} ms  p99 {phase['p99_ms']} ms  p999 {phase['p999_ms']} ms"
                f"  online {phase['online_cpu_cores']} / BE {phase['be_cpu_cores']} / other "
                f"{phase['other_cpu_cores']} cores  harvest {phase['be_harvest_ratio']}"
            )
    lines.append(
        f"  p99 ratio to solo: no QoS {result['p99_ratio_noqos']}, QoS {result['p99_ratio_qos']} (target <= 1.15)"
    )
    lines.append(f"  BE harvest with QoS: {result['be_harvest_ratio']} (target >= 0.8)")
    lines.append(
        f"  load step: BE cap shrank after {result['step_reaction_seconds']} s (target <= 1), "
        f"{result['step_reaction_seconds_psi']} s with PSI (target <= 0.2)"
    )
    if "agent_errors" in result:
        lines.append(f"  agent errors: {result['agent_errors']}")
    if "cgroups_left" in result:
        lines.append(f"  cgroups not removed: {', '.join(result['cgroups_left'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(
        role_main(sys.argv[1:]) if len(sys.argv) > 2 and sys.argv[1] in ("serve", "load", "hog") else main()
    )
