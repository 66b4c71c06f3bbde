"""Report ingest: what N agents reporting once a second cost the scheduler's gRPC server.

    python -m bench.ingest [--agents 5000] [--seconds 20] [--pods 20] [--read-interval 0] [--ack-every 10]
                           [--baseline [aio|queue]] [--json]

Starts the ReportServer (with a NodeReportStore) as a separate process on loopback (its garbage
collector set as `lahar scheduler` sets it, lahar/collector.py), then
simulates --agents agents in this process: each keeps its own Report stream open and sends one
complete report a second (--pods pods with a container each, two NUMA nodes, pressure,
reclaimable), the streams spread over a few channels (--streams-per-channel) and their phases
spread over the second. After the streams are up and a warm-up, it measures for --seconds: the
server process's CPU time (user + system, psutil) as a fraction of one core, the reports acked per
second, and the ack latency (write to ack) percentiles. With --read-interval S, a thread in the
server process also reads every node's latest report every S seconds, as the scheduler's cycle
would, so the figure includes decoding the reports that get read. --ack-every N sets how many
accepted reports one (cumulative) ack answers (the server's default; 1: an ack per report), on
the ReportServer and on the bare --baseline servers alike.

The simulated agents run on the same machine and compete with the server for its cores, so on a
small machine the latencies include the client's own queueing. Both processes use gRPC's I/O as
every Lahar program does (lahar/grpc_io.py: the polling I/O, not grpcio's EventEngine threads);
`GRPC_EXPERIMENTS= python -m lahar.bench.ingest ...` measures with grpcio's default instead. Two
bare servers, each only acking: `--baseline` (or `--baseline aio`) a grpc.aio server on
lahar/grpc_loop.py's event loop (uvloop's where installed), what the ReportServer cost before it
served on the completion queue; `--baseline queue` one thread on gRPC's completion queue, as the
ReportServer serves now: what gRPC alone costs it. The simulated agents run on asyncio's loop.

`server_cpu_cores` is the server process's own CPU time (user + system, every thread of it), not
the simulated agents'; those run in this process, on the same cores (`client_cpu_cores`), so a
machine busy with other work shows in both. `reports_per_second` near --agents says the server
kept up.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
import psutil

from lahar.collector import collect_rarely
from lahar.rpc import STREAM_ACCEPTED
from lahar.rpc.convert import report_to_proto
from lahar.rpc.report import (
    AgentHealth,
    ContainerUsage,
    CpuUsage,
    MemoryUsage,
    NodeReport,
    NumaNode,
    PodUsage,
    Pressure,
)
from lahar.rpc.v1 import agent_pb2 as pb
from lahar.rpc.v1 import agent_pb2_grpc
from lahar.scheduler.report_server import DEFAULT_ACK_EVERY

TOKEN = "bench-token"
GIB = 1 << 30
MIB = 1 << 20


def realistic_report(node: str, pods: int, rng: random.Random) -> NodeReport:
    """A 32-CPU, 128 GiB node running `pods` pods of mixed QoS, as an agent would report it."""
    cpus = 32
    pod_usages = [
        PodUsage(
            namespace=f"team-{index % 7}",
            name=f"job-{index:03d}-worker-{index % 4}",
            uid=f"{rng.getrandbits(128):032x}",
            qos_class=("LS", "BE", "LC")[index % 3],
            kube_qos_class=("Burstable", "BestEffort", "Guaranteed")[index % 3],
            cgroup=f"kubepods/burstable/pod{index:08x}",
            cpu_usage_cores=rng.uniform(0, 2),
            memory_working_set_bytes=rng.randrange(64 * MIB, 4 * GIB),
            cpu_throttled_periods_total=rng.randrange(10_000),
            cpu_throttled_seconds_total=rng.uniform(0, 100),
            io_read_bytes_total=rng.randrange(GIB),
            io_write_bytes_total=rng.randrange(GIB),
            containers=[ContainerUsage("main", rng.uniform(0, 2), rng.randrange(64 * MIB, 4 * GIB))],
        )
        for index in range(pods)
    ]
    per_core = [rng.random() for _ in range(cpus)]
    return NodeReport(
        node=node,
        sequence=0,
        timestamp=time.time(),
        cpu=CpuUsage(cpus, sum(per_core), sum(per_core) / cpus, per_core),
        memory=MemoryUsage(128 * GIB, 70 * GIB, 58 * GIB, 20 * GIB),
        numa=[NumaNode(index, list(range(index * 16, index * 16 + 16)), 64 * GIB, 35 * GIB, 8.0) for index in (0, 1)],
        pressure=[
            Pressure(resource, 1.5, 1.2, 1.0, 1234.5, 0.3, 0.2, 0.1, 99.0) for resource in ("cpu", "memory", "io")
        ],
        pods=pod_usages,
        reclaimable={"cpu": 9_000, "memory": 40 * GIB},
        health=AgentHealth("bench", 0.02),
    )


# --- the server process ---------------------------------------------------------------------------


def serve(read_interval: float, baseline: str | None, ack_every: int) -> int:
    """The server side: print the port, serve until SIGTERM, print the counts as JSON."""
    from lahar.scheduler.node_reports import NodeReportStore
    from lahar.scheduler.report_server import ReportServer

    collect_rarely()  # as in `lahar scheduler`, whose process the report server runs in
    store = NodeReportStore()
    bare = {"aio": BareServer, "queue": BareQueueServer}
    server: Any = bare[baseline](ack_every) if baseline else ReportServer(store, {TOKEN: "*"}, ack_every=ack_every)
    print(server.start("127.0.0.1:0"), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if read_interval > 0:
        threading.Thread(target=read_every, args=(store, read_interval, stop), daemon=True).start()
    stop.wait()
    server.stop(0)
    print(json.dumps(store.counts()), flush=True)
    return 0


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop for the grpc.aio baseline: uvloop's where installed (its machinery in C, as
    the report server ran on grpc.aio), asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:  # a platform uvloop does not support, or installed without the dev extra
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class BareServer:
    """--baseline aio: the same method and gRPC options, answering every message with the same ack
    and doing nothing else (no token, no parsing, no validation, no store): what gRPC costs. It
    acks every `ack_every`-th message (and the first, as the ReportServer does)."""

    def __init__(self, ack_every: int) -> None:
        self.ack_every = ack_every
        self.loop = new_event_loop()  # the loop the ReportServer ran on while it served on grpc.aio
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def start(self, address: str) -> int:
        return asyncio.run_coroutine_threadsafe(self._start(address), self.loop).result()

    async def _start(self, address: str) -> int:
        from lahar.scheduler.report_server import METHOD, SERVER_OPTIONS, SERVICE

        ack = pb.ReportAck(sequence=1 << 62).SerializeToString()  # answers every report sent

        async def report(requests: Any, context: Any) -> Any:
            await context.send_initial_metadata((STREAM_ACCEPTED,))
            count = 0
            async for _ in requests:
                if count % self.ack_every == 0:
                    yield ack
                count += 1

        self.server = grpc.aio.server(options=SERVER_OPTIONS)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {METHOD: grpc.stream_stream_rpc_method_handler(report)}),)
        )
        port = self.server.add_insecure_port(address)
        await self.server.start()
        return port

    def stop(self, grace: float | None) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(grace), self.loop).result()


class BareQueueServer:
    """--baseline queue: BareServer's answers from one thread on gRPC's completion queue, as the
    ReportServer serves (scheduler/report_server.py): each read completion starts the next read."""

    def __init__(self, ack_every: int) -> None:
        from grpc._cython import cygrpc  # type: ignore[attr-defined]

        from lahar.scheduler.report_server import SERVER_OPTIONS

        self.ack_every, self.cygrpc = ack_every, cygrpc
        self.queue = cygrpc.CompletionQueue()
        self.server = cygrpc.Server(tuple(SERVER_OPTIONS), False)
        self.server.register_completion_queue(self.queue)

    def start(self, address: str) -> int:
        port: int = self.server.add_http2_port(address.encode())
        self.server.start()
        for _ in range(64):
            self.server.request_call(self.queue, self.queue, None)
        threading.Thread(target=self._serve, daemon=True).start()
        return port

    def stop(self, grace: float | None) -> None:
        pass  # the process exits

    def _serve(self) -> None:
        cygrpc, ack = self.cygrpc, pb.ReportAck(sequence=1 << 62).SerializeToString()
        counts: dict[Any, int] = {}  # call -> messages read
        while True:
            event = self.queue.poll(time.time() + 1.0)
            if event.completion_type != cygrpc.CompletionType.operation_complete or not event.success:
                continue
            if event.tag is None:  # a new call: accept it and read
                self.server.request_call(self.queue, self.queue, None)
                call = event.call
                counts[call] = 0
                metadata = cygrpc.SendInitialMetadataOperation((STREAM_ACCEPTED,), 0)
                call.start_server_batch((metadata, cygrpc.ReceiveMessageOperation(0)), ("read", call))
                continue
            what, call = event.tag
            if what != "read":
                continue
            if event.batch_operations[-1].message() is None:
                del counts[call]
                status = cygrpc.SendStatusFromServerOperation((), cygrpc.StatusCode.ok, b"", 0)
                call.start_server_batch((status,), ("end", call))
                continue
            if counts[call] % self.ack_every == 0:  # one write in flight: the agents send one report a second
                call.start_server_batch((cygrpc.SendMessageOperation(ack, 0),), ("ack", call))
            counts[call] += 1
            call.start_server_batch((cygrpc.ReceiveMessageOperation(0),), ("read", call))


def read_every(store: Any, interval: float, stop: threading.Event) -> None:
    """What a scheduler cycle does with the store: read every node's latest report."""
    while not stop.wait(interval):
        for node in store.nodes():
            store.latest(node)


@dataclass
class ServerProcess:
    process: subprocess.Popen[str]
    port: int

    @classmethod
    def start(cls, read_interval: float, baseline: str | None, ack_every: int) -> ServerProcess:
        command = [sys.executable, "-m", "lahar.bench.ingest", "--serve", "--read-interval", str(read_interval)]
        command += ["--ack-every", str(ack_every)]
        command += ["--baseline", baseline] if baseline else []
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            process.kill()
            raise RuntimeError(f"the report server did not start (said {line!r})")
        return cls(process, int(line))

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return times.user + times.system

    def stop(self) -> dict[str, int]:
        self.process.send_signal(signal.SIGTERM)
        try:
            out, _ = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return {}
        return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}


# --- the simulated agents -------------------------------------------------------------------------


@dataclass
class Tally:
    connected: int = 0
    acked: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    latencies: list[float] = field(default_factory=list)
    measuring: bool = False


async def agent(
    stub: agent_pb2_grpc.NodeReportsStub, message: pb.NodeReport, phase: float, tally: Tally, stop: asyncio.Event
) -> None:
    """One agent's stream: a report every second at its phase, acks read as they come (each
    answers every report up to its sequence; the latency is the acked report's own)."""
    call = stub.Report(metadata=(("authorization", f"Bearer {TOKEN}"),))
    sent_at: collections.deque[tuple[int, float]] = collections.deque()  # (sequence, when), not acked yet

    async def read_acks() -> None:
        async for ack in call:
            answered, latency = 0, math.nan
            while sent_at and sent_at[0][0] <= ack.sequence:
                latency = time.perf_counter() - sent_at.popleft()[1]
                answered += 1
            if tally.measuring:
                tally.acked += answered
                if answered:
                    tally.latencies.append(latency)
            if ack.error:
                tally.errors[ack.error[:80]] += 1

    reader = asyncio.create_task(read_acks())
    try:
        await call.initial_metadata()
        tally.connected += 1
        loop = asyncio.get_running_loop()
        next_send = loop.time() + phase
        while not stop.is_set() and not reader.done():
            await asyncio.sleep(max(0.0, next_send - loop.time()))
            message.sequence += 1
            message.timestamp = time.time()
            sent_at.append((message.sequence, time.perf_counter()))
            await call.write(message)
            next_send += 1.0
    except Exception as exc:  # counted and shown: a stream that died is a finding, not a crash
        tally.errors[f"stream: {type(exc).__name__}: {exc}"[:120]] += 1
    finally:
        call.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def simulate(
    port: int, agents: int, pods: int, seconds: float, streams_per_channel: int, server: ServerProcess
) -> dict[str, Any]:
    rng = random.Random(7)
    messages = [report_to_proto(realistic_report(f"node-{index:05d}", pods, rng)) for index in range(agents)]
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(math.ceil(agents / streams_per_channel))]
    stubs = [agent_pb2_grpc.NodeReportsStub(channel) for channel in channels]
    tally, stop = Tally(), asyncio.Event()
    tasks = [
        asyncio.create_task(agent(stubs[index % len(stubs)], message, index / agents, tally, stop))
        for index, message in enumerate(messages)
    ]
    while tally.connected < agents and not any(task.done() for task in tasks):
        await asyncio.sleep(0.1)
    await asyncio.sleep(3.0)  # warm-up: every agent has sent a few reports
    cpu_before, client_before, wall_before = server.cpu_seconds(), time.process_time(), time.perf_counter()
    tally.measuring = True
    await asyncio.sleep(seconds)
    tally.measuring = False
    cpu_after, client_after, wall_after = server.cpu_seconds(), time.process_time(), time.perf_counter()
    stop.set()
    await asyncio.gather(*tasks)
    for channel in channels:
        await channel.close()
    wall = wall_after - wall_before
    latencies = sorted(tally.latencies) or [math.nan]
    return {
        "agents": agents,
        "connected": tally.connected,
        "pods_per_report": pods,
        "channels": len(channels),
        "report_bytes": messages[0].ByteSize(),
        "seconds": round(wall, 2),
        "server_cpu_cores": round((cpu_after - cpu_before) / wall, 3),
        "client_cpu_cores": round((client_after - client_before) / wall, 3),
        "reports_per_second": round(tally.acked / wall, 1),
        "ack_latency_p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
        "ack_latency_p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
        "errors": dict(tally.errors),
        "machine_cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the measured window")
    parser.add_argument("--pods", type=int, default=20, help="pods in each report")
    parser.add_argument("--streams-per-channel", type=int, default=500)
    parser.add_argument(
        "--read-interval",
        type=float,
        default=0.0,
        help="in the server process, read every node's latest report this often (0: never)",
    )
    parser.add_argument(
        "--baseline",
        nargs="?",
        const="aio",
        choices=["aio", "queue"],
        help="a bare gRPC server that only acks, for what gRPC alone costs: grpc.aio's (the default) or one "
        "thread on the completion queue, as the ReportServer serves",
    )
    parser.add_argument(
        "--ack-every", type=int, default=DEFAULT_ACK_EVERY, help="accepted reports one ack answers (1: each)"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.read_interval, args.baseline, args.ack_every)
    if args.ack_every < 1:
        parser.error(f"--ack-every must be at least 1, not {args.ack_every}")
    server = ServerProcess.start(args.read_interval, args.baseline, args.ack_every)
    try:
        result = asyncio.run(
            simulate(server.port, args.agents, args.pods, args.seconds, args.streams_per_channel, server)
        )
    finally:
        counts = server.stop()
    result.update(
        server_counts=counts, read_interval=args.read_interval, baseline=args.baseline, ack_every=args.ack_every
    )
    print(json.dumps(result) if args.json else summary(result))
    return 0


def summary(result: dict[str, Any]) -> str:
    server = f"bare gRPC server (--baseline {result['baseline']})" if result["baseline"] else "ReportServer"
    return (
        f"{result['agents']} agents -> {server}: {result['pods_per_report']} pods, {result['report_bytes']} B "
        f"a report, {result['channels']} channels, an ack per {result['ack_every']} reports, "
        f"measured over {result['seconds']} s\n"
        f"  server CPU        {result['server_cpu_cores']:.3f} of one core (the simulated agents: "
        f"{result['client_cpu_cores']:.3f}, on the same {result['machine_cpus']} CPUs)\n"
        f"  reports acked     {result['reports_per_second']:.0f}/s\n"
        f"  ack latency       p50 {result['ack_latency_p50_ms']} ms, p99 {result['ack_latency_p99_ms']} ms\n"
        f"  server counts     {result['server_counts'] or '-'}; errors {result['errors'] or 'none'}"
    )


if __name__ == "__main__":
    sys.exit(main())
