"""The interference matrix: online services x loads x best-effort (BE) kinds, each cell measured in
one run, interleaved, as online alone, beside BE under kubelet's cgroups only, and beside BE under
the agent's QoS (`lahar bench colocation --matrix`; docs/qos.md has the figures).

- Online services, in a Burstable LS pod (500m requested, kubelet-like shares) with a client
  container beside the server: the built-in request/response server (~1 ms of CPU a request),
  redis-server (RESP: 9 GETs of a 1 KiB value, then a SET of it), memcached (the same mix in its
  text protocol) and nginx (HTTP/1.1 GET of a 1 KiB static file). Each is started on a free
  127.0.0.1 port and driven open-loop at a low and a high rate by our own pipelined client,
  latency from each request's intended send time (no coordinated omission).
- BE kinds, one pod per core: `cpu` (busy loops, BestEffort pods), `cpu-requests` (the same in
  Burstable pods labelled BE that request 1 CPU each: kubelet gives them 4x the online pod's
  weight), `stream` (stress-ng --stream: memory bandwidth), `cache` (stress-ng --cache),
  `pagecache` (stress-ng --hdd: buffered writes through the page cache), `io` (fio, direct writes).
- Modes, interleaved each round: `solo` (BE stopped), `kubelet` (BE running, no agent), `lahar`
  (the real Agent with its default QoS config, its threads in a cgroup of their own like the
  DaemonSet pod it is, 51 shares for 50m). Every cell runs `runs` rounds; the median is reported.
- Figures per cell: p50/p99/p999 per mode, ratios, harvest (BE CPU used / CPU the online pod and
  other tenants left idle) for kubelet and lahar, the agent's BE cap changes and its own CPU, and
  the verdicts of the issue's targets. Every phase is sampled every 50 ms alike (the online pod's
  CPU wait from its own cpu.pressure in the cgroup2 mirror, BE cap, BE usage, BE weight): the
  wait share's spread is reported per mode, and the last Lahar phase's series drawn as an SVG and
  written as CSV per cell.
- `--reaction`: a low -> high load step beside BE under kubelet and under Lahar (how long until
  the online wait is back at its pre-step level) and a quiet period at the low load under Lahar
  (BE cap changes: none is the target where nothing interferes).

What this machine cannot isolate is probed and said beside the cell (isolation_notes): memory
bandwidth and cache need resctrl, their signal perf counters; IO weights need BFQ."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import select
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lahar.bench.colocation import kit as co
from lahar.bench.colocation.svg import line_chart
from lahar.endpoints import free_loopback_port

UNIFIED = Path("/sys/fs/cgroup/unified")  # the cgroup2 mount of a v1 host: per-pod PSI
ONLINE_KINDS = ("builtin", "redis", "memcached", "nginx")
BE_KINDS = ("cpu", "cpu-requests", "stream", "cache", "pagecache", "io")
LOADS = {"builtin": {"low": 200.0, "high": 400.0}, "redis": {"low": 500.0, "high": 4000.0}}
LOADS["memcached"] = LOADS["nginx"] = LOADS["redis"]
SERVERS = {"redis": "redis-server", "memcached": "memcached", "nginx": "nginx"}  # the Debian programs
MODES = ("solo", "kubelet", "lahar")
VALUE_BYTES = 1024
PHASE_RETRIES = 2  # a phase stalled by the machine is measured again, at most this often
GETS_PER_SET = 9  # the caches' request mix: 9 reads, then a write of the same key
STATIC_FILE = "lahar-bench.html"  # nginx's 1 KiB static file
AGENT_SHARES = 51  # kubelet's shares for the agent DaemonSet's 50m request
SAMPLE_SECONDS = 0.05
AGENT_DIR = "agent"  # under the bench's kubepods: the agent's own pod cgroup
AGENT_COST_BAR_CORES = 0.01


def isolation_notes(be: str, scratch: Path, root: Path = Path("/")) -> str | None:
    """What this machine's kernel cannot isolate for a BE kind, probed, or None: the agent's lever
    there is CPU time (and IO throttling) only, so the cell is reported with this note."""
    notes = []
    if be in ("stream", "cache"):
        try:
            resctrl = "resctrl" in (root / "proc/filesystems").read_text()
        except OSError:
            resctrl = False
        if not resctrl:
            what = "memory bandwidth (MBA)" if be == "stream" else "last-level cache (CAT)"
            notes.append(f"no resctrl in this kernel: {what} cannot be partitioned")
        if not (root / "sys/bus/event_source/devices/cpu").exists():
            notes.append("no hardware perf counters (no CPU PMU): no cache-miss or bandwidth signal")
    if be in ("io", "pagecache"):
        scheduler = block_scheduler(scratch, root)
        if scheduler is not None and scheduler != "bfq":
            notes.append(f"the disk's IO scheduler is {scheduler}, not bfq: BE IO can be throttled, not weighed")
    return "; ".join(notes) or None


def block_scheduler(path: Path, root: Path = Path("/")) -> str | None:
    """The active IO scheduler of the disk holding `path` (a partition's: its disk's), or None."""
    device = os.stat(path).st_dev
    block = root / f"sys/dev/block/{os.major(device)}:{os.minor(device)}"
    for candidate in (block, block / ".."):
        with contextlib.suppress(OSError):
            text = (candidate / "queue/scheduler").read_text()
            return next((word[1:-1] for word in text.split() if word.startswith("[")), None)
    return None


# --- the online services' protocols ----------------------------------------------------------


@dataclass(frozen=True)
class Protocol:
    """Requests sent in turn (cycled) and the fixed size of each one's answer: answers come back
    in order on one connection, so counting bytes frames them without parsing."""

    requests: tuple[tuple[bytes, int], ...]  # (request, its answer's size in bytes)
    prime: bytes = b""  # sent once before the run (e.g. the value to GET)
    prime_answer_bytes: int = 0


def protocol(kind: str, port: int = 0) -> Protocol:
    """The request mix of an online kind: 9 GETs of a 1 KiB value then a SET of it (a cache's
    read-mostly traffic), or an HTTP GET of a 1 KiB static file (its answer's size asked first)."""
    value = b"x" * VALUE_BYTES
    if kind == "redis":
        key = b"lahar-bench"
        set_ = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value)
        get = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)
        got = len(b"$%d\r\n" % len(value)) + len(value) + 2
        return Protocol(((get, got),) * GETS_PER_SET + ((set_, len(b"+OK\r\n")),), set_, len(b"+OK\r\n"))
    if kind == "memcached":
        set_ = b"set lahar-bench 0 0 %d\r\n%s\r\n" % (len(value), value)
        got = len(b"VALUE lahar-bench 0 %d\r\n%s\r\nEND\r\n" % (len(value), value))
        stored = len(b"STORED\r\n")
        return Protocol(((b"get lahar-bench\r\n", got),) * GETS_PER_SET + ((set_, stored),), set_, stored)
    if kind == "nginx":
        request = b"GET /%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % STATIC_FILE.encode()
        return Protocol(((request, http_answer_bytes(port, request)),))
    raise ValueError(f"no fixed protocol for {kind!r}")


def http_answer_bytes(port: int, request: bytes) -> int:
    """The size of the server's whole answer to `request` (headers and body): nginx's headers are
    of fixed width (its Date is too), so every later answer has the same size."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += _recv_some(connection)
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise ConnectionError(f"the HTTP server answered {head.splitlines()[0]!r}")
        length = http_content_length(head)
        while len(body) < length:
            body += _recv_some(connection)
        return len(head) + 4 + length


def http_content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise ValueError("an HTTP answer without Content-Length")


def load_fixed(
    port: int, proto: Protocol, start: float, segments: Sequence[co.Segment], warmup: float, deadline: float
) -> dict[str, Any]:
    """Open-loop requests over one pipelined connection; latency = answer time - intended send
    time (no coordinated omission). Figures per segment, the first `warmup` seconds left out."""
    stop = co._die_with_parent(deadline)
    connection = socket.create_connection(("127.0.0.1", port))
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if proto.prime:
        connection.sendall(proto.prime)
        _recv_exactly(connection, proto.prime_answer_bytes)
    connection.setblocking(False)
    times = co.intended_times(start, list(segments))
    latencies: list[float | None] = [None] * len(times)
    requests = [request for request, _ in proto.requests]
    sizes = [size for _, size in proto.requests]
    cycle = len(requests)
    outgoing, pending = bytearray(), 0
    sent = received = 0
    drain_until = (times[-1] if times else start) + 2.0
    while received < len(times) and time.monotonic() < drain_until and not stop():
        now = time.monotonic()
        while sent < len(times) and times[sent] <= now:
            outgoing += requests[sent % cycle]
            sent += 1
        if outgoing:
            with contextlib.suppress(BlockingIOError):
                del outgoing[: connection.send(outgoing)]
        try:
            data = connection.recv(1 << 20)
        except BlockingIOError:
            data = None
        if data == b"":
            raise ConnectionError("the online server closed the connection")
        if data:
            answered = time.monotonic()
            pending += len(data)
            while received < sent and pending >= sizes[received % cycle]:
                latencies[received] = answered - times[received]
                pending -= sizes[received % cycle]
                received += 1
            continue
        wait = max(0.0, times[sent] - time.monotonic()) if sent < len(times) else 0.002
        select.select([connection], [], [], min(wait, 0.002))
    connection.close()
    result: dict[str, Any] = {"start": start, "sent": sent, "answered": received, "segments": []}
    at = start
    for index, segment in enumerate(segments):
        skip = warmup if index == 0 else 0.0
        window = [lat for t, lat in zip(times, latencies, strict=True) if at + skip <= t < at + segment.seconds]
        replies = [lat for lat in window if lat is not None]
        result["segments"].append(
            {"start": at, "rate": segment.rate, "requests": len(window), "unanswered": len(window) - len(replies)}
            | co.percentiles(replies)
        )
        at += segment.seconds
    return result


def _recv_some(connection: socket.socket) -> bytes:
    chunk = connection.recv(65536)
    if not chunk:
        raise ConnectionError("the online server closed the connection")
    return chunk


def _recv_exactly(connection: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the online server closed the connection")
        data += chunk
    return data


def role_main(argv: list[str]) -> int:
    """Entry point of the client child (`matrix.py load KIND OPTIONS`)."""
    _, kind, raw = argv
    options = json.loads(raw)
    figures = load_fixed(
        options["port"],
        protocol(kind, options["port"]),
        options["start"],
        [co.Segment(seconds, rate) for seconds, rate in options["segments"]],
        options["warmup"],
        options["deadline"],
    )
    print(json.dumps(figures), flush=True)
    return 0


# --- processes in the pod tree ----------------------------------------------------------------


@dataclass
class Group:
    """A child started in its own session, so that stopping it reaches every process it forked."""

    process: subprocess.Popen[str]

    def signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, number)


@dataclass
class Tree:
    """The bench's kubelet-like tree (colocation.BenchTree), mirrored into the cgroup2 mount so
    that every pod has its own PSI, as on a v2 node."""

    tree: co.BenchTree = field(default_factory=co.BenchTree)
    groups: list[Group] = field(default_factory=list)

    def __post_init__(self) -> None:
        if (UNIFIED / "cgroup.procs").exists():
            self.tree.mounts["unified"] = UNIFIED

    def spawn(self, cgroup: str, argv: Sequence[str], *, stdout: Any = subprocess.DEVNULL) -> Group:
        joins = " && ".join(f"echo $$ > {shlex.quote(str(f))}" for f in self.tree.procs_files(cgroup))
        process = subprocess.Popen(
            ["sh", "-c", f'{joins} && exec "$@"', "sh", *argv],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        group = Group(process)
        self.groups.append(group)
        return group

    def stop(self) -> None:
        for group in self.groups:
            group.signal(signal.SIGCONT)
            group.signal(signal.SIGKILL)
        for group in self.groups:
            with contextlib.suppress(subprocess.TimeoutExpired):
                group.process.wait(5)
            if group.process.stdout is not None:
                group.process.stdout.close()


# --- one cell ---------------------------------------------------------------------------------


@dataclass
class Cell:
    online: str
    load: str
    be: str

    @property
    def name(self) -> str:
        return f"{self.online}-{self.load}-{self.be}"

    @property
    def cpu(self) -> bool:
        return self.be in ("cpu", "cpu-requests")


def be_command(kind: str, deadline: float, scratch: Path) -> list[str]:
    seconds = str(max(1, int(deadline - time.monotonic())))
    if kind in ("cpu", "cpu-requests"):
        return [sys.executable, co.__file__, "hog", json.dumps({"deadline": deadline})]
    if kind == "stream":
        return ["stress-ng", "--stream", "1", "--timeout", seconds, "--quiet"]
    if kind == "cache":
        return ["stress-ng", "--cache", "1", "--timeout", seconds, "--quiet"]
    if kind == "pagecache":
        return ["stress-ng", "--hdd", "1", "--hdd-bytes", "256M", "--temp-path", str(scratch), "--timeout", seconds]
    if kind == "io":
        target = scratch / f"fio-{secrets.token_hex(4)}"
        return [
            "fio",
            "--name=be",
            f"--filename={target}",
            "--rw=write",
            "--bs=64k",
            "--size=256M",
            "--direct=1",
            "--time_based",
            f"--runtime={seconds}",
            "--output=/dev/null",
        ]
    raise ValueError(f"unknown BE kind {kind!r}")


def online_command(kind: str, port: int, scratch: Path) -> list[str]:
    """The third-party server, in the foreground on 127.0.0.1:port, one worker thread or process
    (the online pod requests half a core), nothing written outside `scratch`."""
    if kind == "redis":
        return [
            "redis-server",
            *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(scratch)),
        ]
    if kind == "memcached":
        return ["memcached", "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-t", "1", "-u", "root"]
    if kind == "nginx":
        return ["nginx", "-p", str(scratch), "-c", str(nginx_config(port, scratch)), "-e", str(scratch / "nginx.err")]
    raise ValueError(f"unknown online kind {kind!r}")


def nginx_config(port: int, scratch: Path) -> Path:
    """One process (no master, no daemon: it stays the process the bench started, in the online
    pod), keep-alive without a request limit (one pipelined connection carries the whole run)."""
    www = scratch / "www"
    www.mkdir(exist_ok=True)
    (www / STATIC_FILE).write_bytes(b"x" * VALUE_BYTES)
    config = scratch / f"nginx-{port}.conf"
    config.write_text(
        f"""daemon off;
master_process off;
worker_processes 1;
pid {scratch}/nginx-{port}.pid;
error_log {scratch}/nginx.err;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {scratch}/nginx-body;
    keepalive_requests 100000000;
    keepalive_timeout 60s;
    server {{
        listen 127.0.0.1:{port};
        root {www};
        location / {{ }}
    }}
}}
"""
    )
    return config


class CellRun:
    """One cell's pods, processes and measurements."""

    def __init__(self, cell: Cell, seconds: float, scratch: Path, deadline: float) -> None:
        self.cell, self.seconds, self.scratch, self.deadline = cell, seconds, scratch, deadline
        self.tree = Tree()
        self.bench = co.Bench(self.tree.tree, co.Processes(), os.cpu_count() or 1, seconds, 1.0, deadline)
        self.be_groups: list[Group] = []
        self.port = 0

    def start(self) -> None:
        tree = self.tree.tree
        tree.make(tree.kubepods)
        tree.write("cpu", tree.kubepods, "cpu.shares", 1024 * self.bench.cores)  # kubelet: allocatable
        if self.cell.online == "builtin":
            self.bench.start_online()  # server in the online pod (the bench's own processes)
            self.port = self.bench.server_port
        else:
            self._start_third_party()
        for index in range(1 if self.cell.be == "io" else self.bench.cores):
            self._start_be(index)

    def _start_third_party(self) -> None:
        from lahar.api.qos import BURSTABLE

        pod = co.BenchPod(
            "online",
            str(uuid.uuid4()),
            BURSTABLE,
            "LS",
            1000,
            {"server": secrets.token_hex(32), "client": secrets.token_hex(32)},
            cpu_request_millicores=co.ONLINE_REQUEST_MILLICORES,
        )
        self.bench.online_dir = self.tree.tree.add_pod(pod)
        self.bench.pods.append(pod)
        self.port = free_loopback_port()
        self.tree.spawn(
            f"{self.bench.online_dir}/{pod.containers['server']}",
            online_command(self.cell.online, self.port, self.scratch),
        )
        until = time.monotonic() + 10
        while time.monotonic() < until:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.cell.online} did not listen on 127.0.0.1:{self.port}")

    def _start_be(self, index: int) -> None:
        from lahar.api.qos import BEST_EFFORT, BURSTABLE

        requests = self.cell.be == "cpu-requests"
        pod = co.BenchPod(
            f"batch-{index}",
            str(uuid.uuid4()),
            BURSTABLE if requests else BEST_EFFORT,
            "BE",
            0,
            {"work": secrets.token_hex(32)},
            cpu_request_millicores=1000 if requests else 0,
        )
        pod_dir = self.tree.tree.add_pod(pod)
        self.bench.pods.append(pod)
        self.bench.be_dirs.append(pod_dir)
        command = be_command(self.cell.be, self.deadline, self.scratch)
        self.be_groups.append(self.tree.spawn(f"{pod_dir}/{pod.containers['work']}", command))

    def be_running(self, running: bool) -> None:
        for group in self.be_groups:
            group.signal(signal.SIGCONT if running else signal.SIGSTOP)

    def drive(self, segments: Sequence[co.Segment]) -> dict[str, Any]:
        """One measured phase: the client in the online pod's client container, CPU over the same
        window (after the warm-up). Figures per segment under "segments"."""
        if self.cell.online == "builtin":
            figures = self.bench.drive(list(segments))
            return {k: v for k, v in figures.items() if k == "segments" or k.endswith("cores") or "harvest" in k}
        client = f"{self.bench.online_dir}/{self.bench.pods[0].containers['client']}"
        start = time.monotonic() + 0.5
        total = sum(segment.seconds for segment in segments)
        options = {
            "port": self.port,
            "start": start,
            "segments": [(segment.seconds, segment.rate) for segment in segments],
            "warmup": co.WARMUP_SECONDS,
            "deadline": self.deadline,
        }
        group = self.tree.spawn(
            client, [sys.executable, __file__, "load", self.cell.online, json.dumps(options)], stdout=subprocess.PIPE
        )
        meter = co.CpuMeter(self.tree.tree, self.bench.online_dir, self.bench.be_dirs)
        co._sleep_until(start + co.WARMUP_SECONDS)
        before = meter.read()
        co._sleep_until(start + total)
        after = meter.read()
        line = co._read_line(group.process.stdout, 15, "the client's figures")
        figures = json.loads(line)
        return {"segments": figures["segments"], **co.CpuMeter.usage(before, after, self.bench.cores)}

    def measure(self, rate: float) -> dict[str, Any]:
        """One phase at a steady rate: its figures flat. A phase the bench itself did not see
        through as planned (this machine stalled it: its CPU window is off, or requests are
        missing) is measured again, up to twice; how many were is kept."""
        for attempt in range(1 + PHASE_RETRIES):
            figures = self.drive([co.Segment(self.seconds + co.WARMUP_SECONDS, rate)])
            flat = {**figures.pop("segments")[0], **figures}
            problem = disturbed(flat, self.seconds, rate)
            if problem is None or attempt == PHASE_RETRIES:
                return flat | ({"disturbed": problem} if problem else {}) | {"retried": attempt}
        raise AssertionError("unreachable")

    def stop(self) -> list[str]:
        self.tree.stop()
        self.bench.processes.stop()
        return self.tree.tree.remove()


@contextlib.contextmanager
def lahar_agent(run: CellRun, config: dict[str, Any] | None) -> Iterator[Any]:
    """The real Agent, its threads moved into a cgroup of their own (its DaemonSet pod)."""
    from lahar.agent.agent import Agent, AgentSettings
    from lahar.agent.qos.config import QosConfig

    tree = run.tree.tree
    settings = AgentSettings(
        node="bench", cgroup_root=tree.root, kubepods=tree.kubepods, qos=QosConfig.from_mapping(config or {})
    )
    agent = Agent(settings, pods=run.bench.api_pods)
    thread = threading.Thread(target=agent.run, name="agent", daemon=True)
    thread.start()
    try:
        time.sleep(0.5)  # its first tick starts the interference loop
        agent_dir = f"{tree.kubepods}/{AGENT_DIR}"
        tree.make(agent_dir)
        tree.write("cpu", agent_dir, "cpu.shares", AGENT_SHARES)
        main = threading.main_thread().native_id
        for tid in os.listdir("/proc/self/task"):
            if int(tid) != main:
                for controller in ("cpu", "cpuacct"):
                    with contextlib.suppress(OSError):
                        (tree.mounts[controller] / agent_dir / "tasks").write_text(tid)
        yield agent
    finally:
        agent.stop()
        thread.join(10)
        agent.close()


@dataclass(frozen=True)
class Point:
    at: float  # monotonic seconds
    wait_share: float  # of the online pod's runnable time, spent waiting for a CPU (PSI "some")
    wait_rate: float  # seconds waited per second (PSI "some" total's rate)
    be_cap: float  # cores all BE pods may use, as the cgroup files say
    be_usage: float  # cores BE pods used
    be_weight: float  # the BE pods' CPU weight in cores' worth of shares (1024 a core), as the files say


class Series:
    """The online pod's CPU wait (its own cpu.pressure in the unified mirror), the BE cap and the
    BE usage every 50 ms while it runs."""

    def __init__(self, run: CellRun) -> None:
        from lahar.agent.collectors.cpu_wait import CpuWaitReader
        from lahar.agent.collectors.host import Host

        self.run = run
        self.reader = CpuWaitReader(Host(cgroup_root=run.tree.tree.root))
        self.points: list[Point] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="series", daemon=True)

    def __enter__(self) -> Series:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.reader.close()

    def _loop(self) -> None:
        # The sampler is the bench's, not the node's: under SCHED_IDLE an online wake-up on its CPU
        # preempts it at once instead of waiting up to a tick (traced: 22% of Lahar's stalls).
        with contextlib.suppress(OSError):  # a kernel or sandbox without it: sample as before
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        tree, bench = self.run.tree.tree, self.run.bench
        last = None
        while not self._stop.wait(SAMPLE_SECONDS):
            with contextlib.suppress(OSError, ValueError):
                wait = self.reader.read(bench.online_dir)
                be = sum(tree.cpu_seconds(d) for d in bench.be_dirs)
                now = time.monotonic()
                if wait is not None and last is not None:
                    elapsed = now - last[0]
                    waited = max(0.0, wait.wait_seconds - last[1].wait_seconds)
                    ran = wait.cpu_seconds - last[1].cpu_seconds
                    share = waited / (waited + ran) if waited + ran > 1e-4 else 0.0
                    cap = be_cap(tree, bench.be_dirs, bench.cores)
                    weight = be_weight(tree, bench.be_dirs)
                    self.points.append(Point(now, share, waited / elapsed, cap, (be - last[2]) / elapsed, weight))
                last = (now, wait, be) if wait is not None else None


def disturbed(phase: dict[str, Any], seconds: float, rate: float) -> str | None:
    """Why a measured phase cannot be trusted, or None: its CPU window is not the one planned (the
    bench was stalled) or far fewer requests fell in it than the schedule sends."""
    window = phase.get("window_seconds")
    if window is not None and abs(window - seconds) > max(0.25 * seconds, 0.2):
        return f"CPU measured over {window} s instead of {seconds:g} s"
    if phase.get("requests", 0) < 0.9 * int(seconds * rate):
        return f"{phase.get('requests', 0)} requests of the {int(seconds * rate)} scheduled"
    if phase.get("online_cpu_cores", 1.0) < 0.005:  # hundreds of requests a second cost more than that
        return "the online pod's CPU time did not move"
    return None


def be_weight(tree: co.BenchTree, be_dirs: list[str]) -> float:
    """The BE pods' CPU weight against the online pod's, in cores' worth of shares: a pod under
    the BestEffort directory weighs what that directory does (2 shares for all of them, kubelet's),
    a Burstable BE pod its own shares (1024 a requested core). The agent's everyday lever."""
    from lahar.api.qos import BEST_EFFORT

    best_effort = tree.layout.qos_dir(BEST_EFFORT)
    shares = 0
    if any(d.startswith(best_effort + "/") for d in be_dirs):
        shares += int(tree.read("cpu", best_effort, "cpu.shares"))
    shares += sum(int(tree.read("cpu", d, "cpu.shares")) for d in be_dirs if not d.startswith(best_effort + "/"))
    return shares / 1024


def series_csv(points: Sequence[Point]) -> str:
    """The samples as CSV, seconds from the first."""
    origin = points[0].at if points else 0.0
    rows = ["seconds,online_wait_share,online_wait_rate,be_cap_cores,be_usage_cores,be_weight_cores"]
    rows += [
        f"{p.at - origin:.3f},{p.wait_share:.4f},{p.wait_rate:.4f},{p.be_cap:.3f},{p.be_usage:.3f},{p.be_weight:.4f}"
        for p in points
    ]
    return "\n".join(rows) + "\n"


def be_cap(tree: co.BenchTree, be_dirs: list[str], cores: int) -> float:
    """What all BE pods may use: the BestEffort directory's CFS cap (when it exists) or the sum of
    the pods' caps, whichever is tighter, at most the node's cores."""
    from lahar.api.qos import BEST_EFFORT

    caps = [sum(co.cpu_cap_cores(tree, d) for d in be_dirs)]
    with contextlib.suppress(OSError):
        caps.append(co.cpu_cap_cores(tree, tree.layout.qos_dir(BEST_EFFORT)))
    return min(*caps, float(cores))


def without(
    config: dict[str, Any] | None, strategies: Sequence[str], variants: Mapping[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any] | None]:
    """The agent configurations a cell runs: `lahar` (the given one, or the defaults), per
    strategy in `strategies` `lahar-without-STRATEGY` (the same with that strategy off), and per
    named variant `lahar-NAME` (its own configuration): measured in the same rounds, so each
    mechanism or setting shows what it changes against the rest."""
    modes: dict[str, dict[str, Any] | None] = {"lahar": config}
    for strategy in strategies:
        section = dict((config or {}).get(strategy) or {})
        modes[f"lahar-without-{strategy}"] = {**(config or {}), strategy: {**section, "enabled": False}}
    for name, variant in (variants or {}).items():
        modes[f"lahar-{name}"] = variant
    return modes


def run_cell(
    cell: Cell,
    runs: int,
    seconds: float,
    settle: float,
    config: dict[str, Any] | None,
    out: Path | None,
    strategies_off: Sequence[str] = (),
    variants: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    agents = without(config, strategies_off, variants)
    modes = ("solo", "kubelet", *agents)
    # A backstop only (every process also stops with its parent): twice the cell's expected length,
    # so a machine slowed by other work does not stop the servers in the middle of a round.
    deadline = time.monotonic() + 2 * runs * len(modes) * (seconds + settle + 8) + 120
    scratch = Path(tempfile.mkdtemp(prefix="lahar-bench-"))
    run = CellRun(cell, seconds, scratch, deadline)
    rate = LOADS[cell.online][cell.load]
    rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    series: Series | None = None
    cap_changes: dict[str, list[int]] = {mode: [] for mode in agents}
    result: dict[str, Any] = {"cell": cell.name, "online": cell.online, "load": cell.load, "rate": rate, "be": cell.be}
    agent_cores: list[float] = []
    note = isolation_notes(cell.be, scratch)
    waits: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        run.start()
        for _ in range(runs):
            for mode in modes:
                run.be_running(mode != "solo")
                if mode not in agents:
                    time.sleep(0.5)
                    # Sampled in every mode, not only Lahar's: the sampler's own wake-ups must
                    # cost every phase alike (it ran in the Lahar phase only until 2026-11-26)
                    with Series(run) as sampled:
                        rounds[mode].append(run.measure(rate))
                    waits[mode] += _round_waits(rounds[mode][-1], sampled)
                    continue
                with lahar_agent(run, agents[mode]) as agent:
                    time.sleep(max(settle - 0.5, 0.0))
                    before = agent.qos.cap_changes
                    agent_dir = f"{run.tree.tree.kubepods}/{AGENT_DIR}"
                    used, began = run.tree.tree.cpu_seconds(agent_dir), time.monotonic()
                    with Series(run) as sampled:
                        rounds[mode].append(run.measure(rate))
                    waits[mode] += _round_waits(rounds[mode][-1], sampled)
                    cap_changes[mode].append(agent.qos.cap_changes - before)
                    if mode == "lahar":
                        series = sampled
                        agent_cores.append((run.tree.tree.cpu_seconds(agent_dir) - used) / (time.monotonic() - began))
    finally:
        run.be_running(True)
        left = run.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if left:
        result["cgroups_left"] = left
    result.update(summarise(rounds, cell, cap_changes["lahar"], note))
    for mode in agents:
        if mode != "lahar":  # the ablation: each variant against kubelet and against Lahar in full
            p99 = result["modes"][mode]["p99_ms"]
            kubelet, lahar = result["modes"]["kubelet"]["p99_ms"], result["modes"]["lahar"]["p99_ms"]
            result["ratios"][f"{mode}_vs_kubelet"] = _ratio(p99, kubelet)
            result["ratios"][f"{mode}_vs_lahar"] = _ratio(p99, lahar)
            result["modes"][mode]["cap_changes"] = sum(cap_changes[mode])
    # The agent's own cost, its threads' cgroup over the measured Lahar phases (the issue: <= 1% of a core)
    result["agent_cpu_cores"] = agent = median(agent_cores, 4)
    result["verdicts"]["agent_cost"] = None if agent is None else agent <= AGENT_COST_BAR_CORES
    # The online pod's CPU wait share per 50 ms sample, every round of each mode
    result["online_wait_share_50ms"] = {mode: spread(samples) for mode, samples in waits.items()}
    if out is not None and series is not None:
        (out / f"{cell.name}.svg").write_text(plot(f"{cell.name}: under Lahar", series.points))
        (out / f"{cell.name}.csv").write_text(series_csv(series.points))
        result["plot"] = f"{cell.name}.svg"
    return result


def _round_waits(phase: dict[str, Any], sampled: Series) -> list[float]:
    """The online pod's CPU wait share per sample of one round, its mean kept on the round: a slow
    round with a high share waited for CPU, one without waited elsewhere (the load generator)."""
    shares = [point.wait_share for point in sampled.points]
    phase["online_wait_share_mean"] = round(statistics.fmean(shares), 4) if shares else None
    return shares


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p90 and the largest of samples (nearest rank)."""
    if not values:
        return {"p50": None, "p90": None, "max": None}
    ordered = sorted(values)
    return {
        "p50": round(ordered[(len(ordered) - 1) // 2], 3),
        "p90": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))], 3),
        "max": round(ordered[-1], 3),
    }


def median(values: Sequence[float | None], digits: int = 3) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), digits) if present else None


def summarise(
    rounds: dict[str, list[dict[str, Any]]], cell: Cell, cap_changes: list[int], not_isolated: str | None = None
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for mode, phases in rounds.items():
        figures[mode] = {
            key: median([p.get(key) for p in phases])
            for key in ("p50_ms", "p99_ms", "p999_ms", "online_cpu_cores", "be_cpu_cores", "other_cpu_cores")
        }
        figures[mode]["harvest"] = median([p.get("be_harvest_ratio_net_of_other") for p in phases])
        figures[mode]["p99_runs_ms"] = [p.get("p99_ms") for p in phases]  # the spread behind the median
        figures[mode]["wait_share_runs"] = [p.get("online_wait_share_mean") for p in phases]
        figures[mode]["retried"] = sum(p.get("retried", 0) for p in phases)
        if any(p.get("disturbed") for p in phases):
            figures[mode]["disturbed"] = [p["disturbed"] for p in phases if p.get("disturbed")]
    # In CPU cells harvest is BE CPU over the CPU online and other tenants left idle; where BE is
    # bound by memory or disks its CPU says little, so there it is the BE work kept, Lahar's over
    # kubelet's.
    if not cell.cpu:
        kubelet_be, lahar_be = figures["kubelet"]["be_cpu_cores"], figures["lahar"]["be_cpu_cores"]
        figures["lahar"]["harvest"] = _ratio(lahar_be, kubelet_be)
        figures["kubelet"]["harvest"] = 1.0 if kubelet_be else None  # the reference
    solo, kubelet, lahar = (figures[m]["p99_ms"] for m in MODES)
    ratios = {
        "kubelet_vs_solo": _ratio(kubelet, solo),
        "lahar_vs_solo": _ratio(lahar, solo),
        "lahar_vs_kubelet": _ratio(lahar, kubelet),
    }
    harvest_bar = 0.9 if cell.cpu else 0.7
    verdicts = judge(ratios, figures["lahar"]["harvest"], harvest_bar)
    result = {"modes": figures, "ratios": ratios, "verdicts": verdicts, "harvest_bar": harvest_bar}
    result["cap_changes"] = sum(cap_changes)
    if not_isolated is not None:
        result["not_isolated"] = not_isolated
    return result


def judge(ratios: dict[str, float | None], harvest: float | None, harvest_bar: float) -> dict[str, bool | None]:
    """The issue's verdicts for one cell: never worse than kubelet (within 5%), near solo where
    kubelet is not (within 10%; None where kubelet already is), and the BE work harvested."""
    lahar_vs_kubelet, kubelet_vs_solo, lahar_vs_solo = (
        ratios["lahar_vs_kubelet"],
        ratios["kubelet_vs_solo"],
        ratios["lahar_vs_solo"],
    )
    return {
        "never_worse_than_kubelet": lahar_vs_kubelet is not None and lahar_vs_kubelet <= 1.05,
        "holds_solo_where_kubelet_does_not": (
            None
            if kubelet_vs_solo is None or kubelet_vs_solo <= 1.10
            else lahar_vs_solo is not None and lahar_vs_solo <= 1.10
        ),
        "harvest": harvest is not None and harvest >= harvest_bar,
    }


def pool(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several matrix runs (their matrix.json) as one: per cell, every round's p99 of each mode
    pooled and its median taken, the ratios and verdicts on those medians, and per mode how many
    rounds were slow (p99 above twice the pooled solo median). A cell missing from a run is pooled
    from the runs that have it; harvest and agent CPU are the median of the runs' medians."""
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for summary in summaries:
        for result in summary.get("cells", []):
            if all(mode in result.get("modes", {}) for mode in MODES):
                by_cell.setdefault(result["cell"], []).append(result)
    pooled = []
    for name, results in by_cell.items():
        rounds = {
            mode: [v for r in results for v in r["modes"][mode]["p99_runs_ms"] if v is not None] for mode in MODES
        }
        p99 = {mode: median(values) for mode, values in rounds.items()}
        solo = p99["solo"]
        slow = {mode: sum(1 for v in values if solo and v > 2 * solo) for mode, values in rounds.items()}
        ratios = {
            "kubelet_vs_solo": _ratio(p99["kubelet"], solo),
            "lahar_vs_solo": _ratio(p99["lahar"], solo),
            "lahar_vs_kubelet": _ratio(p99["lahar"], p99["kubelet"]),
        }
        harvest = median([r["modes"]["lahar"].get("harvest") for r in results])
        bar = results[0].get("harvest_bar", 0.9)
        pooled.append(
            {
                "cell": name,
                "runs": len(results),
                "rounds": rounds,
                "p99_ms": p99,
                "slow_rounds": slow,
                "ratios": ratios,
                "harvest": harvest,
                "cap_changes": sum(r.get("cap_changes", 0) for r in results),
                "agent_cpu_cores": median([r.get("agent_cpu_cores") for r in results], 4),
                "verdicts": judge(ratios, harvest, bar),
            }
        )
    missed = [f"{c['cell']}: {k}" for c in pooled for k, ok in c["verdicts"].items() if ok is False]
    return {"benchmark": "colocation-pooled", "runs": len(summaries), "cells": pooled, "missed": missed}


def verdict_marks(verdicts: dict[str, bool | None]) -> str:
    """The verdicts that apply, as `name: ok` or `name: MISSED`."""
    return ", ".join(f"{k}: {'ok' if ok else 'MISSED'}" for k, ok in verdicts.items() if ok is not None)


def pooled_table(cells: list[dict[str, Any]]) -> str:
    """A markdown table of pooled runs: medians over every round, ratios, slow rounds per mode."""
    lines = [
        "| cell | runs | rounds | p99 solo ms | kubelet | Lahar | Lahar ÷ kubelet | kubelet ÷ solo | Lahar ÷ solo "
        "| slow rounds solo / kubelet / Lahar | harvest | cap changes | verdicts |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        p, q, slow = c["p99_ms"], c["ratios"], c["slow_rounds"]
        marks = verdict_marks(c["verdicts"])
        lines.append(
            f"| {c['cell']} | {c['runs']} | {len(c['rounds']['lahar'])} | "
            f"{p['solo']} | {p['kubelet']} | {p['lahar']} | "
            f"{q['lahar_vs_kubelet']} | {q['kubelet_vs_solo']} | {q['lahar_vs_solo']} | "
            f"{slow['solo']} / {slow['kubelet']} / {slow['lahar']} | {c['harvest']} | {c['cap_changes']} | {marks} |"
        )
    return "\n".join(lines)


def _ratio(value: float | None, base: float | None) -> float | None:
    return round(value / base, 3) if value is not None and base else None


def plot(title: str, points: Sequence[Point], markers: Sequence[tuple[float, str]] = ()) -> str:
    """The time series as an SVG line chart, seconds from its first sample; `markers` are
    (monotonic time, label) drawn as vertical lines (the load step)."""
    origin = points[0].at if points else 0.0
    return line_chart(
        f"{title}: online CPU wait, BE cap and BE usage",
        [p.at - origin for p in points],
        {
            "online wait share": [p.wait_share for p in points],
            "BE cap (cores)": [p.be_cap for p in points],
            "BE usage (cores)": [p.be_usage for p in points],
            "BE weight (cores of shares)": [p.be_weight for p in points],
        },
        x_label="seconds",
        markers=[(at - origin, label) for at, label in markers],
    )


def cells(online: Sequence[str], loads: Sequence[str], be: Sequence[str]) -> list[Cell]:
    return [Cell(o, load, b) for o in online for load in loads for b in be]


def table(results: list[dict[str, Any]]) -> str:
    """A markdown table of the matrix."""
    lines = [
        "| cell | p99 solo | p99 kubelet | p99 Lahar | Lahar/kubelet | Lahar/solo | kubelet/solo "
        "| harvest kubelet | harvest Lahar | cap changes | agent CPU | verdicts |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        m, q, v = r["modes"], r["ratios"], r["verdicts"]
        marks = verdict_marks(v)
        note = f" ({r['not_isolated']})" if "not_isolated" in r else ""
        stalled = [f"{mode}: {'; '.join(m[mode]['disturbed'])}" for mode in MODES if m[mode].get("disturbed")]
        note += f" (disturbed after retries, {', '.join(stalled)})" if stalled else ""
        lines.append(
            f"| {r['cell']} | {m['solo']['p99_ms']} | {m['kubelet']['p99_ms']} | {m['lahar']['p99_ms']} | "
            f"{q['lahar_vs_kubelet']} | {q['lahar_vs_solo']} | {q['kubelet_vs_solo']} | {m['kubelet']['harvest']} | "
            f"{m['lahar']['harvest']} | {r['cap_changes']} | {r.get('agent_cpu_cores')} | {marks}{note} |"
        )
    return "\n".join(lines)


def tails_table(results: list[dict[str, Any]]) -> str:
    """p50 / p99 / p999 per mode, with the p99 of every round behind the median."""
    lines = [
        "| cell | solo p50 / p99 / p999 | kubelet p50 / p99 / p999 | Lahar p50 / p99 / p999 | p99 rounds (s, k, L) |"
    ]
    lines.append("|---|---|---|---|---|")
    for r in results:
        m = r["modes"]
        tails = [" / ".join(str(m[mode][f"{q}_ms"]) for q in ("p50", "p99", "p999")) for mode in MODES]
        rounds = "; ".join(",".join(str(v) for v in m[mode].get("p99_runs_ms", [])) for mode in MODES)
        lines.append(f"| {r['cell']} | {' | '.join(tails)} | {rounds} |")
    return "\n".join(lines)


def ablation_table(results: list[dict[str, Any]]) -> str:
    """Each further Lahar mode's p99 (`lahar-without-*`, `lahar-NAME`) against kubelet's and
    Lahar's as configured, per cell."""
    lines = [
        "| cell | variant | p99 | ÷ kubelet | ÷ Lahar | p99 rounds | harvest | cap changes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for mode, m in r["modes"].items():
            if mode.startswith("lahar-"):
                q = r["ratios"]
                lines.append(
                    f"| {r['cell']} | {mode} | {m['p99_ms']} | {q[f'{mode}_vs_kubelet']} | {q[f'{mode}_vs_lahar']} | "
                    f"{' / '.join(str(v) for v in m['p99_runs_ms'])} | {m['harvest']} | {m['cap_changes']} |"
                )
    return "\n".join(lines)


def run_summary(benchmark: str, results: list[dict[str, Any]], **parameters: Any) -> dict[str, Any]:
    """What a run writes as its JSON: the machine, the run's parameters, its cells and the
    verdicts it missed."""
    return {
        "benchmark": benchmark,
        "cores": os.cpu_count(),
        "kernel": os.uname().release,
        **parameters,
        "cells": results,
        "missed": [f"{r['cell']}: {name}" for r in results for name, ok in r["verdicts"].items() if ok is False],
    }


def run_matrix(
    selected: list[Cell],
    runs: int,
    seconds: float,
    settle: float,
    config: dict[str, Any] | None,
    out: Path | None,
    progress: Callable[[str], None],
    strategies_off: Sequence[str] = (),
    variants: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    co.sweep_stale()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    results = []
    for index, cell in enumerate(selected, 1):
        modes = ", ".join(["solo", "kubelet", *without(config, strategies_off, variants)])
        progress(f"[{index}/{len(selected)}] {cell.name} ({runs} rounds of {modes})…")
        started = time.monotonic()
        result = run_cell(cell, runs, seconds, settle, config, out, strategies_off, variants)
        result["wall_seconds"] = round(time.monotonic() - started, 1)
        results.append(result)
        if out is not None:  # as it goes: a long matrix stopped half way keeps what it measured
            (out / "matrix.partial.json").write_text(json.dumps(results, indent=1))
        r = result["ratios"]
        progress(
            f"    p99 Lahar/kubelet {r['lahar_vs_kubelet']}, Lahar/solo {r['lahar_vs_solo']}, "
            f"kubelet/solo {r['kubelet_vs_solo']}, harvest {result['modes']['lahar']['harvest']}"
            + "".join(
                f", {name.replace('_vs_', '/')} {value}" for name, value in r.items() if name.startswith("lahar-")
            )
        )
    summary = run_summary("colocation-matrix", results, runs=runs, seconds=seconds)
    if out is not None:
        (out / "matrix.json").write_text(json.dumps(summary, indent=1))
        extra = "\n\n" + ablation_table(results) if strategies_off or variants else ""
        (out / "matrix.md").write_text(table(results) + "\n\n" + tails_table(results) + extra + "\n")
    return summary


# --- reaction to a load step, and the quiet period --------------------------------------------

REACTION_WINDOW_SECONDS = 0.2  # the bar: excess online wait gone within 200 ms of a step
BASELINE_SECONDS = 2.0  # of wait before the step, its "pre-step level"
REACTION_BAR_MS = 200.0


def reaction(points: Sequence[Point], step_at: float, floor: float = 0.0) -> dict[str, Any]:
    """How the online pod's wait answered a load step at `step_at`. Its level is the p90 of the
    50 ms wait shares over the 2 s before the step, or `floor` if higher (the p90 the online pod
    has alone at the higher load: the wait a load brings by itself is no interference). After the
    step each sample is judged by the mean of the 200 ms starting at it (one noisy sample is not a
    rise). `rose`: some such mean exceeded the level; `reaction_ms`: from the step to the first
    sample, after the first rise, from which 200 ms sit at or below the level again (None: not
    within the phase; 0: it never rose); `excess_ms`: how long in all the wait sat above it."""
    before = [p.wait_share for p in points if step_at - BASELINE_SECONDS <= p.at < step_at]
    after = [p for p in points if p.at >= step_at]
    window = REACTION_WINDOW_SECONDS - SAMPLE_SECONDS / 2  # samples at t .. t + 150 ms: 4 of them
    judged = [(index, point) for index, point in enumerate(after) if point.at + window <= after[-1].at + 1e-9]
    if not before or not judged:
        return {"baseline": None, "rose": None, "reaction_ms": None, "excess_ms": None, "peak": None}
    level = max(spread(before)["p90"] or 0.0, floor)
    means = []
    for index, point in judged:
        inside = [q.wait_share for q in after[index:] if q.at <= point.at + window + 1e-9]
        means.append(sum(inside) / len(inside))
    above = [mean > level + 1e-9 for mean in means]
    durations = [(after[i + 1].at if i + 1 < len(after) else p.at + SAMPLE_SECONDS) - p.at for i, p in judged]
    result: dict[str, Any] = {
        "baseline": round(level, 3),
        "peak": round(max(p.wait_share for p in after), 3),  # the largest 50 ms sample
        "after_p50": spread([p.wait_share for p in after])["p50"],
        "rose": any(above),
        "excess_ms": round(sum(d for d, high in zip(durations, above, strict=True) if high) * 1000),
    }
    if not any(above):
        result["reaction_ms"] = 0.0
        return result
    first = above.index(True)
    back = next((judged[i][1].at for i in range(first, len(judged)) if not above[i]), None)
    result["reaction_ms"] = None if back is None else round((back - step_at) * 1000, 1)
    return result


def run_reaction(
    online: str,
    be: str,
    step_seconds: float,
    quiet_seconds: float,
    settle: float,
    config: dict[str, Any] | None,
    out: Path | None,
) -> dict[str, Any]:
    """The online load steps from low to high: alone (BE stopped: the wait the higher load brings
    by itself, which is no interference), then beside running BE under kubelet's cgroups only
    (how the wait answers a step with nobody acting) and under Lahar;
    then, under a fresh agent, the online service at its low load for `quiet_seconds`, counting
    the BE cap changes (where kubelet's weights already protect it, the target is none)."""
    from contextlib import nullcontext

    cell = Cell(online, "step", be)
    low, high = LOADS[online]["low"], LOADS[online]["high"]
    segments = [co.Segment(step_seconds + co.WARMUP_SECONDS, low), co.Segment(step_seconds, high)]
    deadline = time.monotonic() + 3 * (2 * step_seconds + settle + 10) + quiet_seconds + 60
    scratch = Path(tempfile.mkdtemp(prefix="lahar-bench-"))
    run = CellRun(cell, step_seconds, scratch, deadline)
    result: dict[str, Any] = {"cell": cell.name, "online": online, "be": be, "low": low, "high": high}
    try:
        run.start()
        floor = 0.0
        for mode in MODES:
            run.be_running(mode != "solo")
            agent_context = lahar_agent(run, config) if mode == "lahar" else nullcontext(None)
            with agent_context as agent:
                time.sleep(max(settle - 0.5, 0.0) if agent is not None else 0.5)
                changes = agent.qos.cap_changes if agent is not None else 0
                with Series(run) as series:
                    figures = run.drive(segments)
                step_at = figures["segments"][1]["start"]
                result[mode] = {
                    "p99_before_ms": figures["segments"][0]["p99_ms"],
                    "p99_after_ms": figures["segments"][1]["p99_ms"],
                    "cap_changes": agent.qos.cap_changes - changes if agent is not None else 0,
                    "weight_changes": changes_seen([p.be_weight for p in series.points]),
                    **reaction(series.points, step_at, floor),
                }
                if mode == "solo":  # the p90 wait alone at the higher load: the floor of the others' level
                    floor = spread([p.wait_share for p in series.points if p.at >= step_at])["p90"] or 0.0
                    result[mode]["wait_after_p90"] = floor
                if out is not None:
                    name = f"{cell.name}-{mode}.svg"
                    title = f"{cell.name} ({low:g} -> {high:g} req/s) under {mode}"
                    (out / name).write_text(plot(title, series.points, [(step_at, "load step")]))
                    (out / name.replace(".svg", ".csv")).write_text(series_csv(series.points))
                    result[mode]["plot"] = name
        if quiet_seconds > 0:
            with lahar_agent(run, config) as agent:
                time.sleep(max(settle - 0.5, 0.0))
                changes, writes = agent.qos.cap_changes, agent.qos.snapshot().writes
                with Series(run) as series:
                    figures = run.drive([co.Segment(quiet_seconds + co.WARMUP_SECONDS, low)])
                written = {
                    k: n - writes.get(k, 0) for k, n in agent.qos.snapshot().writes.items() if n != writes.get(k, 0)
                }
                result["quiet"] = {
                    "seconds": quiet_seconds,
                    "rate": low,
                    "cap_changes": agent.qos.cap_changes - changes,
                    "weight_changes": changes_seen([p.be_weight for p in series.points]),
                    "writes": written,  # every cgroup write of the agent's QoS engine, by knob
                    "be_cap_min": min((p.be_cap for p in series.points), default=None),
                    "p99_ms": figures["segments"][0]["p99_ms"],
                    "wait_share_50ms": spread([p.wait_share for p in series.points]),
                }
                if out is not None:
                    name = f"{online}-quiet-{be}.svg"
                    (out / name).write_text(plot(f"{online}-quiet-{be} under Lahar", series.points))
                    (out / name.replace(".svg", ".csv")).write_text(series_csv(series.points))
                    result["quiet"]["plot"] = name
    finally:
        run.be_running(True)
        left = run.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if left:
        result["cgroups_left"] = left
    lahar = result["lahar"]
    result["verdicts"] = {
        "reacts_within_200ms": None
        if not lahar["rose"]
        else lahar["reaction_ms"] is not None and lahar["reaction_ms"] <= REACTION_BAR_MS,
        "quiet_no_cap_changes": None if "quiet" not in result else result["quiet"]["cap_changes"] == 0,
        "quiet_no_writes": None if "quiet" not in result else not result["quiet"]["writes"],
    }
    return result


def changes_seen(values: Sequence[float]) -> int:
    """How often a sampled setting changed (the BE weight: the agent's everyday lever, which
    should be written once and then left alone)."""
    return sum(1 for before, after in itertools.pairwise(values) if after != before)


def reaction_table(results: list[dict[str, Any]]) -> str:
    """A markdown table of the load steps and quiet periods."""
    lines = [
        "| cell | alone: wait p90 after, p99 after | kubelet: level, peak, reaction ms, excess ms, p99 after "
        "| Lahar: level, peak, reaction ms, excess ms, p99 after | cap changes (step) "
        "| quiet: s, cap changes, weight changes, writes, min BE cap | verdicts |",
        "|---|---|---|---|---|---|---|",
    ]

    def side(figures: dict[str, Any]) -> str:
        keys = ("baseline", "peak", "reaction_ms", "excess_ms", "p99_after_ms")
        return ", ".join(str(figures.get(key)) for key in keys)

    for r in results:
        solo, quiet = r.get("solo", {}), r.get("quiet")
        marks = ", ".join(f"{n}: {'ok' if ok else 'MISSED'}" for n, ok in r["verdicts"].items() if ok is not None)
        quiet_text = (
            f"{quiet['seconds']:g}, {quiet['cap_changes']}, {quiet['weight_changes']}, "
            f"{sum(quiet.get('writes', {}).values())}, {quiet['be_cap_min']}"
            if quiet
            else "-"
        )
        lines.append(
            f"| {r['cell']} | {solo.get('wait_after_p90')}, {solo.get('p99_after_ms')} | {side(r['kubelet'])} "
            f"| {side(r['lahar'])} | {r['lahar']['cap_changes']} | {quiet_text} | {marks or '-'} |"
        )
    return "\n".join(lines)


def run_reactions(
    pairs: list[tuple[str, str]],
    step_seconds: float,
    quiet_seconds: float,
    settle: float,
    config: dict[str, Any] | None,
    out: Path | None,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    co.sweep_stale()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    results = []
    for index, (online, be) in enumerate(pairs, 1):
        progress(
            f"[{index}/{len(pairs)}] {online}-step-{be} (load step under kubelet and Lahar, {quiet_seconds:g} s quiet)"
        )
        started = time.monotonic()
        result = run_reaction(online, be, step_seconds, quiet_seconds, settle, config, out)
        result["wall_seconds"] = round(time.monotonic() - started, 1)
        results.append(result)
        if out is not None:
            (out / "reaction.partial.json").write_text(json.dumps(results, indent=1))
        quiet = result.get("quiet")
        progress(
            f"    Lahar reaction {result['lahar']['reaction_ms']} ms (rose: {result['lahar']['rose']}), "
            f"quiet cap changes {quiet['cap_changes'] if quiet else '-'}"
        )
    summary = run_summary("colocation-reaction", results, step_seconds=step_seconds, quiet_seconds=quiet_seconds)
    if out is not None:
        (out / "reaction.json").write_text(json.dumps(summary, indent=1))
        (out / "reaction.md").write_text(reaction_table(results) + "\n")
    return summary


if __name__ == "__main__":
    raise SystemExit(role_main(sys.argv[1:]))
