"""The co-location benchmark's shared pieces (`lahar bench colocation`, the demo and `lahar
workload` use them): the built-in online server (each request burns ~1 ms of CPU), the BE busy
loop, the open-loop load generator, and a kubelet-like cgroup v1 tree whose pods are also mirrored
into the cgroup2 mount where there is one, so each has its own PSI. Runs as root; every cgroup it
made is removed and every process it started stopped, on failure and on Ctrl-C too.

Run as a script, it is one of its child processes: `kit.py serve|load|hog OPTIONS`."""

from __future__ import annotations

import contextlib
import ctypes
import json
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
from collections.abc import Callable
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


def serve(work_ms: float, deadline: float, observe: Callable[[float], None] | None = None) -> None:
    """The online service: one connection at a time, each 16-byte request answered (echoed) after
    burning `work_ms` of CPU. Prints `port iterations` once listening. `observe`, when given, gets
    each request's service time in seconds (from a whole request read to its answer sent)."""
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
                        started = time.perf_counter()
                        burn(iterations)
                        connection.sendall(request)
                        if observe is not None:
                            observe(time.perf_counter() - started)
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
        window = [lat for t, lat in zip(times, latencies, strict=True) if at + skip <= t < at + segment.seconds]
        replies = [lat for lat in window if lat is not None]
        result["segments"].append(
            {
                "start": at,
                "rate": segment.rate,
                "requests": len(window),
                "unanswered": len(window) - len(replies),
                **percentiles(replies),
            }
        )
        at += segment.seconds
    return result


def role_main(argv: list[str]) -> int:
    """Entry point of the child processes (`kit.py serve|load|hog ...`)."""
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
                # Unchanged pods keep their version, as an informer's objects do: the agent parses
                # a pod's spec again only when it changes (without one, every tick, in the bench only)
                "resourceVersion": "1",
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
        if controller not in (*CONTROLLERS, "unified"):  # the cgroup2 mirror too
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
    ) -> dict[str, float | None]:
        elapsed = max(after[0] - before[0], 1e-6)
        online, best_effort, node = ((a - b) / elapsed for a, b in zip(after[1:], before[1:], strict=True))
        other = max(0.0, node - online - best_effort)  # other tenants of this shared machine, this bench
        return {
            "online_cpu_cores": round(online, 3),
            "be_cpu_cores": round(best_effort, 3),
            "other_cpu_cores": round(other, 3),
            "be_harvest_ratio": _share(best_effort, cores - online),
            "be_harvest_ratio_net_of_other": _share(best_effort, cores - online - other),
            "window_seconds": round(elapsed, 3),  # what the figures cover: a stalled bench shows here
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


if __name__ == "__main__":
    raise SystemExit(role_main(sys.argv[1:]))
