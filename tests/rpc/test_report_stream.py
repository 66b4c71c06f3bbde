"""Both ends of the report stream on loopback: the agent's ReportStreamer against a real
ReportServer (one thread on gRPC's completion queue) feeding a NodeReportStore, plus raw clients
that send what a real agent would not (bad tokens, garbage bytes, invalid and oversized reports).
Every server and streamer a test starts is stopped by its fixture, whatever the test's outcome."""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from lahar.agent.report_stream import ReportStreamer, backoff_delay
from lahar.rpc.convert import report_to_proto
from lahar.rpc.report import ContainerUsage, CpuUsage, MemoryUsage, NodeReport, PodUsage
from lahar.rpc.v1 import agent_pb2 as pb
from lahar.scheduler.node_reports import NodeReportStore, WireReport
from lahar.scheduler.report_server import (
    METHOD_PATH,
    ReportServer,
    ReportServerError,
    ack_due,
    load_tokens,
    stream_end_due,
)
from lahar.tls import TlsFiles, ensure_self_signed
from tests.support import wait_for

TOKENS = {"token-a": "node-a", "token-b": "node-b", "token-any": "*"}
GIB = 1 << 30


def report(node: str = "node-a", sequence: int = 1, pods: int = 2) -> NodeReport:
    return NodeReport(
        node=node,
        sequence=sequence,
        timestamp=time.time(),
        cpu=CpuUsage(cores=8, usage_cores=2.5, usage_ratio=2.5 / 8, per_core_ratio=[0.3] * 8),
        memory=MemoryUsage(total_bytes=32 * GIB, used_bytes=12 * GIB, available_bytes=20 * GIB, page_cache_bytes=GIB),
        pods=[
            PodUsage(
                "default",
                f"pod-{index}",
                f"uid-{index}",
                "BE",
                "BestEffort",
                f"kubepods/pod{index}",
                0.5,
                (index + 1) << 28,
                containers=[ContainerUsage("main", 0.5, (index + 1) << 28)],
            )
            for index in range(pods)
        ],
        reclaimable={"cpu": 3000, "memory": 8 * GIB},
    )


def raw_stream(
    port: int, messages: list[bytes], token: str | None = "token-a", credentials: grpc.ChannelCredentials | None = None
) -> list[pb.ReportAck]:
    """Send raw bytes (no serializer) on one Report stream, then close it; the acks received."""
    target = f"127.0.0.1:{port}"
    with grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(METHOD_PATH)
        metadata = [("authorization", f"Bearer {token}")] if token is not None else []
        return [pb.ReportAck.FromString(ack) for ack in call(iter(messages), metadata=metadata, timeout=10)]


def wire(item: NodeReport) -> bytes:
    return report_to_proto(item).SerializeToString()


def status_of(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[ReportServer, int]]]:
    """Start a ReportServer on loopback (port 0 unless given); every one is stopped afterwards."""
    started: list[ReportServer] = []

    def start(store: NodeReportStore | None = None, port: int = 0, **options: Any) -> tuple[ReportServer, int]:
        server = ReportServer(store or NodeReportStore(), options.pop("tokens", TOKENS), **options)
        started.append(server)
        return server, server.start(f"127.0.0.1:{port}")

    yield start
    for server in started:
        server.stop(0)


@pytest.fixture
def streamers() -> Iterator[Callable[..., ReportStreamer]]:
    """Start ReportStreamers with a quick backoff; every one is stopped afterwards."""
    started: list[ReportStreamer] = []

    def start(port: int, node: str = "node-a", token: str = "token-a", **options: Any) -> ReportStreamer:
        options = {"backoff_initial": 0.05, "backoff_max": 0.3, **options}
        streamer = ReportStreamer(f"127.0.0.1:{port}", node, token, **options)
        started.append(streamer)
        streamer.start()
        return streamer

    yield start
    for streamer in started:
        streamer.stop()


SEQUENCES = itertools.count(1)  # shared by every offer_until: sequences only rise


def offer_until(
    streamer: ReportStreamer,
    condition: Callable[[], Any],
    node: str = "node-a",
    timeout: float = 10.0,
    what: str = "the report to arrive",
) -> Any:
    """Offer a fresh report every 50 ms, like an agent's loop, until `condition` holds. Sequence
    numbers keep rising across calls, as an agent's do: a report offered after a reconnection is
    newer than every report before it."""
    return wait_for(lambda: streamer.offer(report(node, next(SEQUENCES))) or condition(), timeout, what)


# --- agent streamer -> server -> store ---


def test_a_report_reaches_the_store_with_its_values(serve: Any, streamers: Any) -> None:
    store = NodeReportStore()
    _, port = serve(store)
    streamer = streamers(port)
    sent = report(sequence=41, pods=3)
    streamer.offer(sent)
    stored = wait_for(lambda: store.latest("node-a"), what="the report in the store")
    assert stored == sent and stored is not sent
    assert (stored.node, stored.sequence, stored.cpu.usage_cores, stored.memory.used_bytes) == (
        "node-a",
        41,
        2.5,
        12 * GIB,
    )
    assert [pod.name for pod in stored.pods] == ["pod-0", "pod-1", "pod-2"]
    assert stored.pods[2].containers[0].memory_working_set_bytes == 3 << 28
    assert stored.reclaimable == {"cpu": 3000, "memory": 8 * GIB}
    age = store.age("node-a")
    assert age is not None and 0 <= age < 2
    assert store.fresh("node-a", staleness_seconds=5) == stored
    stats = wait_for(lambda: (s := streamer.stats()).acked == 1 and s, what="the ack")
    assert stats.connected and stats.sent == 1 and stats.refused == 0 and stats.reconnects == 0
    assert store.counts() == {"accepted": 1}


def test_only_the_latest_report_is_kept_and_each_is_acked(serve: Any, streamers: Any) -> None:
    store = NodeReportStore()
    _, port = serve(store, ack_every=1)
    streamer = streamers(port)
    for sequence in range(1, 6):
        streamer.offer(report(sequence=sequence))
        wait_for(lambda sequence=sequence: streamer.stats().acked == sequence, what=f"the ack of report {sequence}")
    assert store.latest("node-a").sequence == 5
    assert store.counts() == {"accepted": 5} and store.nodes() == ["node-a"]


def test_acks_are_cumulative_the_first_at_once_then_one_per_ack_every(serve: Any, streamers: Any) -> None:
    store = NodeReportStore()
    _, port = serve(store, ack_every=3)
    streamer = streamers(port)
    # Report 1 is the stream's first: acked at once. 2 and 3 wait; 4 is the third since: one ack
    # answers 2, 3 and 4. A refusal (6) is answered at once, with 5 before it.
    for sequence, acked in [(1, 1), (2, 1), (3, 1), (4, 4), (5, 4)]:
        streamer.offer(report(sequence=sequence))
        wait_for(
            lambda sequence=sequence: (stored := store.latest("node-a")) is not None and stored.sequence == sequence,
            30,
            what=f"report {sequence} in the store",
        )
        wait_for(lambda acked=acked: streamer.stats().acked == acked, 30, what=f"{acked} reports acked")
    time.sleep(0.2)
    assert streamer.stats().acked == 4, "no ack before the third accepted report since the last"
    bad = report(sequence=6)
    bad.memory.total_bytes = -1
    streamer.offer(bad)
    stats = wait_for(lambda: (s := streamer.stats()).acked == 6 and s, what="the refusal, answering 5 too")
    assert stats.refused == 1 and stats.sent == 6


def test_what_is_left_unacked_is_answered_when_the_agent_closes_its_side(serve: Any) -> None:
    _, port = serve(ack_every=10)
    acks = raw_stream(port, [wire(report(sequence=n)) for n in range(1, 5)])
    assert [(ack.sequence, ack.error) for ack in acks] == [(1, ""), (4, "")]


@pytest.mark.parametrize(
    ("refused", "acked_before", "unanswered", "due"),
    [
        (False, False, 1, True),  # a stream's first report
        (False, True, 9, False),
        (False, True, 10, True),
        (True, True, 0, True),  # a refusal, whatever is unanswered
    ],
)
def test_when_an_ack_is_due(refused: bool, acked_before: bool, unanswered: int, due: bool) -> None:
    assert ack_due(refused, acked_before, unanswered, ack_every=10) is due


def test_ack_every_below_one_is_refused() -> None:
    with pytest.raises(ReportServerError, match="ack_every must be at least 1, not 0"):
        ReportServer(NodeReportStore(), TOKENS, ack_every=0)


def test_the_streamer_reconnects_to_a_new_server_on_the_same_port(serve: Any, streamers: Any) -> None:
    first = NodeReportStore()
    server, port = serve(first)
    streamer = streamers(port)
    offer_until(streamer, lambda: first.latest("node-a"))
    server.stop(0)
    wait_for(lambda: not streamer.stats().connected, what="the streamer to notice the server is gone")
    offer_until(streamer, lambda: streamer.stats().reconnects >= 1, what="a failed reconnection")

    second = NodeReportStore()
    _, same_port = serve(second, port=port)
    assert same_port == port
    stored = offer_until(streamer, lambda: second.latest("node-a"), what="the report in the new store")
    assert stored.sequence > first.latest("node-a").sequence
    assert streamer.stats().connected and "UNAVAILABLE" in streamer.stats().last_error


def test_offer_never_blocks_or_raises_while_the_scheduler_is_away(streamers: Any) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    streamer = streamers(port)
    started = time.monotonic()
    for sequence in range(1, 201):
        streamer.offer(report(sequence=sequence))
    assert time.monotonic() - started < 1.0
    wait_for(lambda: streamer.stats().reconnects >= 2, what="reconnection attempts")
    stats = streamer.stats()
    assert not stats.connected and stats.sent == 0 and stats.offered == 200 and stats.superseded == 199
    assert "UNAVAILABLE" in stats.last_error
    started = time.monotonic()
    streamer.stop()
    assert time.monotonic() - started < 2.0


def test_a_report_that_cannot_be_encoded_is_dropped_and_the_stream_goes_on(serve: Any, streamers: Any) -> None:
    store = NodeReportStore()
    _, port = serve(store)
    streamer = streamers(port)
    broken = report(sequence=1)
    broken.memory.used_bytes = 1.5  # type: ignore[assignment]  # a float where the wire wants an integer
    streamer.offer(broken)
    wait_for(lambda: "report 1 not sent" in streamer.stats().last_error, what="the report to be dropped")
    streamer.offer(report(sequence=2))
    assert wait_for(lambda: store.latest("node-a")).sequence == 2
    assert streamer.stats().sent == 1 and streamer.stats().reconnects == 0


def test_backoff_doubles_from_half_a_second_to_ten_with_jitter() -> None:
    rng = random.Random(3)
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (4, 8.0), (5, 10.0), (40, 10.0)]:
        delays = [backoff_delay(attempt, rng=rng) for _ in range(200)]
        assert all(ceiling / 2 <= delay <= ceiling for delay in delays), attempt
        assert max(delays) - min(delays) > ceiling / 4, "jittered"


# --- authentication and authorization ---


def test_a_node_may_only_report_for_itself(serve: Any, streamers: Any) -> None:
    store = NodeReportStore()
    server, port = serve(store)
    error = status_of(lambda: raw_stream(port, [wire(report("node-b"))], token="token-a"))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "a node may only report for itself" in error.details()

    streamer = streamers(port, node="node-b", token="token-a")
    offer_until(
        streamer,
        lambda: "PERMISSION_DENIED" in streamer.stats().last_error,
        node="node-b",
        what="the streamer to be refused",
    )
    assert server.counts["forbidden"] >= 2 and "accepted" not in server.counts
    assert store.latest("node-b") is None and streamer.stats().acked == 0


def test_an_any_node_token_may_report_for_any_node(serve: Any) -> None:
    store = NodeReportStore()
    _, port = serve(store)
    acks = raw_stream(port, [wire(report("node-x")), wire(report("node-y"))], token="token-any")
    assert [ack.error for ack in acks] == ["", ""]
    assert store.nodes() == ["node-x", "node-y"]


@pytest.mark.parametrize("metadata_token", ["not-a-token", None, ""])
def test_an_unknown_or_missing_token_is_unauthenticated(serve: Any, metadata_token: str | None) -> None:
    store = NodeReportStore()
    server, port = serve(store)
    error = status_of(lambda: raw_stream(port, [wire(report())], token=metadata_token))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert server.counts == {"unauthenticated": 1} and store.nodes() == []


def test_a_streamer_with_a_bad_token_is_refused_and_keeps_trying(serve: Any, streamers: Any) -> None:
    server, port = serve()
    streamer = streamers(port, token="wrong")
    offer_until(streamer, lambda: server.counts.get("unauthenticated", 0) >= 2, what="two refused attempts")
    stats = streamer.stats()
    assert not stats.connected and stats.acked == 0 and "UNAUTHENTICATED" in stats.last_error


# --- what the server refuses ---


def test_malformed_bytes_are_refused_and_counted(serve: Any) -> None:
    store = NodeReportStore()
    server, port = serve(store)
    acks = raw_stream(port, [b"\xff\xff\xff\xff", wire(report(sequence=9))])
    assert acks[0].sequence == 0 and acks[0].error.startswith("malformed report")
    assert acks[1] == pb.ReportAck(sequence=9, error=""), "the stream goes on after a refused report"
    assert server.counts == {"malformed": 1, "accepted": 1}


def test_a_report_with_a_string_that_is_not_utf8_is_malformed_and_not_stored(serve: Any) -> None:
    store = NodeReportStore()
    server, port = serve(store)
    data = bytearray(wire(report(sequence=4)))
    data[data.index(b"pod-1")] = 0xFF  # a pod's name, deep in the report, no longer UTF-8
    acks = raw_stream(port, [bytes(data), wire(report(sequence=5))])
    assert acks[0].error.startswith("malformed report") and "UTF-8" in acks[0].error
    assert acks[1] == pb.ReportAck(sequence=5, error="")
    assert server.counts == {"malformed": 1, "accepted": 1} and store.latest("node-a").sequence == 5


def test_an_invalid_report_is_refused_counted_and_not_stored(serve: Any) -> None:
    store = NodeReportStore()
    server, port = serve(store)
    bad = report(sequence=3)
    bad.cpu.usage_cores = math.nan
    bad.pods[1].memory_working_set_bytes = -4096
    (ack,) = raw_stream(port, [wire(bad)])
    assert ack.sequence == 3
    assert ack.error == (
        "invalid report: cpu.usage_cores is not a finite number (nan); "
        "pods[1].memory_working_set_bytes is negative (-4096)"
    )
    assert server.counts == {"invalid": 1} and store.latest("node-a") is None


def test_a_streamer_learns_why_its_report_was_refused(serve: Any, streamers: Any) -> None:
    store = NodeReportStore()
    _, port = serve(store)
    streamer = streamers(port)
    bad = report(sequence=5)
    bad.memory.total_bytes = -1
    streamer.offer(bad)
    wait_for(lambda: streamer.stats().refused == 1, what="the refusal")
    assert "memory.total_bytes is negative" in streamer.stats().last_error and store.latest("node-a") is None
    streamer.offer(report(sequence=6))
    assert wait_for(lambda: store.latest("node-a")).sequence == 6
    assert streamer.stats().reconnects == 0, "a refused report does not cost the stream"


def test_an_oversized_message_gets_resource_exhausted(serve: Any) -> None:
    store = NodeReportStore()
    _, port = serve(store)
    error = status_of(lambda: raw_stream(port, [b"\x00" * ((1 << 20) + 1)]))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert store.nodes() == []


def test_the_message_limit_is_configurable(serve: Any) -> None:
    _, port = serve(max_message_bytes=4096)
    assert [ack.error for ack in raw_stream(port, [wire(report(pods=2))])] == [""]
    error = status_of(lambda: raw_stream(port, [wire(report(pods=100))]))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


# --- the server's thread ---


def test_every_kind_of_answer_on_one_server(serve: Any) -> None:
    store = NodeReportStore()
    server, port = serve(store)
    bad = report(sequence=3)
    bad.cpu.usage_cores = math.nan
    acks = raw_stream(port, [wire(report(sequence=1)), b"\xff\xff\xff\xff", wire(bad), wire(report(sequence=4))])
    assert [(ack.sequence, ack.error.partition(":")[0]) for ack in acks] == [
        (1, ""),
        (0, "malformed report"),
        (3, "invalid report"),
        (4, ""),
    ]
    error = status_of(lambda: raw_stream(port, [wire(report("node-b"))], token="token-a"))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert server.counts == {"accepted": 2, "malformed": 1, "invalid": 1, "forbidden": 1}
    assert store.latest("node-a").sequence == 4


def test_an_unknown_method_is_unimplemented(serve: Any) -> None:
    _, port = serve()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream("/lahar.rpc.v1.NodeReports/Nothing")
        error = status_of(lambda: list(call(iter([b""]), metadata=[("authorization", "Bearer token-a")], timeout=10)))
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("half_closed", "waiting", "writing", "outbox", "due"),
    [
        (True, 0, False, 0, True),
        (False, 0, False, 0, False),  # the agent still sends
        (True, 1, False, 0, False),  # a report of the stream waits for the batch
        (True, 0, True, 0, False),  # an ack is in flight
        (True, 0, False, 1, False),  # an ack is queued
    ],
)
def test_when_a_stream_ends(half_closed: bool, waiting: int, writing: bool, outbox: int, due: bool) -> None:
    assert stream_end_due(half_closed, waiting, writing, outbox) is due


def test_stopping_with_streams_open_ends_them(serve: Any) -> None:
    """stop() cancels open streams and returns; the reports stored before stay stored."""
    store = NodeReportStore()
    server, port = serve(store)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        sent = threading.Event()

        def messages() -> Iterator[bytes]:
            yield wire(report(sequence=1))
            sent.wait(10)  # the stream stays open until the server is stopped

        responses = channel.stream_stream(METHOD_PATH)(
            messages(), metadata=[("authorization", "Bearer token-a")], timeout=10
        )
        assert pb.ReportAck.FromString(next(responses)).sequence == 1
        started = time.monotonic()
        server.stop(0)
        assert time.monotonic() - started < 2.0
        error = status_of(lambda: next(responses))
        sent.set()
    assert error.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
    assert store.latest("node-a").sequence == 1
    assert not [thread for thread in threading.enumerate() if thread.name == "lahar-report-server"]


def storm(port: int, streams: int) -> float:
    """Open `streams` Report streams at once, as agents do when the scheduler restarts, each
    sending one report; the seconds until every stream has its first ack."""

    async def one(channel: grpc.aio.Channel, index: int) -> pb.ReportAck:
        call = channel.stream_stream(METHOD_PATH)(metadata=(("authorization", "Bearer token-any"),))
        await call.write(wire(report(f"node-{index}", sequence=1)))
        async for ack in call:
            call.cancel()
            return pb.ReportAck.FromString(ack)
        raise AssertionError(f"stream {index} ended without an ack")

    async def run() -> float:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            started = time.monotonic()
            acks = await asyncio.wait_for(asyncio.gather(*(one(channel, index) for index in range(streams))), 60)
            took = time.monotonic() - started
        assert [ack.error for ack in acks] == [""] * streams
        return took

    return asyncio.run(run())


def test_a_reconnect_storm_is_accepted_at_once(serve: Any) -> None:
    """Every agent reconnects within a second or so of a scheduler restart: the server takes new
    streams as fast as they come, not at a fixed rate of loop turns (a loop that ran gRPC's
    completions once a millisecond took 1,000 streams a second at most: docs/performance.md,
    "Report ingest"). The time is mostly this test's own Python client's."""
    store = NodeReportStore()
    server, port = serve(store)
    took = storm(port, 2000)
    assert server.counts == {"accepted": 2000} and len(store.nodes()) == 2000
    assert took < 10.0, f"2,000 streams took {took:.2f} s to be answered"


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_the_servers_thread_runs_under_sched_batch(serve: Any) -> None:
    serve()
    threads = {thread.name: thread.native_id for thread in threading.enumerate()}
    wait_for(lambda: os.sched_getscheduler(threads["lahar-report-server"]) == os.SCHED_BATCH, what="SCHED_BATCH")
    assert os.sched_getscheduler(0) != os.SCHED_BATCH, "the caller's thread is left as it was"


# --- TLS and where the server may listen ---


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return ensure_self_signed(tmp_path / "tls", ["127.0.0.1"])


def test_tls_with_our_own_ca(serve: Any, streamers: Any, tls: TlsFiles) -> None:
    store = NodeReportStore()
    _, port = serve(store, tls=tls)
    assert tls.ca is not None
    streamer = streamers(port, ca_file=tls.ca)
    assert offer_until(streamer, lambda: store.latest("node-a")).cpu.cores == 8

    trusted = grpc.ssl_channel_credentials(tls.ca.read_bytes())
    assert [ack.error for ack in raw_stream(port, [wire(report())], credentials=trusted)] == [""]
    without_our_ca = grpc.ssl_channel_credentials()  # the system's roots only
    assert (
        status_of(lambda: raw_stream(port, [wire(report())], credentials=without_our_ca)).code()
        == grpc.StatusCode.UNAVAILABLE
    )
    assert status_of(lambda: raw_stream(port, [wire(report())])).code() == grpc.StatusCode.UNAVAILABLE


def test_plain_text_only_on_loopback(tmp_path: Path) -> None:
    server = ReportServer(NodeReportStore(), TOKENS)
    with pytest.raises(ReportServerError, match=r"not loopback.*requires TLS"):
        server.start("0.0.0.0:0")
    with pytest.raises(ValueError, match="requires a CA file"):
        ReportStreamer("scheduler.example:7070", "node-a", "token-a")


def test_tls_files_that_cannot_be_read_are_a_clear_error(tmp_path: Path) -> None:
    server = ReportServer(NodeReportStore(), TOKENS, tls=TlsFiles(tmp_path / "no.crt", tmp_path / "no.key", None))
    with pytest.raises(ReportServerError, match="cannot read the TLS certificate"):
        server.start("127.0.0.1:0")


# --- token file ---


def test_load_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# token node\nabc123 node-a\n\n  def456   node-b  # the second node\nfeed * \n")
    assert load_tokens(path) == {"abc123": "node-a", "def456": "node-b", "feed": "*"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc node-a\nonly-a-token\n", r"tokens:2: expected `TOKEN NODE`, found 1 words"),
        ("abc node-a extra\n", r"tokens:1: expected `TOKEN NODE`, found 3 words"),
        ("abc node-a\n# note\nabc node-b\n", r"tokens:3: token repeated \(first given for node node-a\)"),
    ],
)
def test_a_malformed_token_file_names_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(ReportServerError, match=message):
        load_tokens(path)


def test_a_missing_token_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReportServerError, match="cannot read token file"):
        load_tokens(tmp_path / "absent")


# --- the store ---


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_age_and_staleness_follow_arrival_on_the_store_clock() -> None:
    clock = FakeClock()
    store = NodeReportStore(clock=clock)
    assert store.latest("node-a") is None and store.age("node-a") is None and store.fresh("node-a", 5) is None
    late_clock_report = report(sequence=1)
    late_clock_report.timestamp = 1.0  # the agent's clock is far off; the age ignores it
    store.submit(late_clock_report)
    clock.now += 4.0
    assert store.age("node-a") == 4.0
    assert store.fresh("node-a", staleness_seconds=5) == late_clock_report
    clock.now += 2.0
    assert store.fresh("node-a", staleness_seconds=5) is None and store.latest("node-a") == late_clock_report
    assert store.age("node-a", now=1010.0) == 10.0
    store.submit(report(sequence=2), received_at=1009.0)
    assert store.age("node-a", now=1010.0) == 1.0


def test_a_sequence_that_goes_back_is_an_agent_restart_and_replaces_the_latest() -> None:
    store = NodeReportStore()
    store.submit(report(sequence=500))
    store.submit(report(sequence=1))
    assert store.latest("node-a").sequence == 1 and store.sequence_resets == 1
    store.submit(report(sequence=2))
    assert store.sequence_resets == 1 and store.counts() == {"accepted": 3}


def test_a_wire_message_is_stored_and_decoded_when_read() -> None:
    store = NodeReportStore()
    store.submit(report_to_proto(report("node-b", 8)))
    stored = store.latest("node-b")
    assert isinstance(stored, NodeReport) and stored.sequence == 8 and stored.pods[1].name == "pod-1"
    assert store.latest("node-b") is stored, "decoded once"


def test_a_reports_bytes_are_stored_and_decoded_when_read() -> None:
    store = NodeReportStore()
    store.submit(WireReport("node-b", 9, wire(report("node-b", 9))))
    store.submit(WireReport("node-c", 3, wire(report("node-c", 3))))
    store.submit(WireReport("node-c", 2, wire(report("node-c", 2))))
    stored = store.latest("node-b")
    assert isinstance(stored, NodeReport) and stored.sequence == 9 and stored.pods[1].name == "pod-1"
    assert store.latest("node-b") is stored, "decoded once"
    assert store.latest("node-c").sequence == 2 and store.sequence_resets == 1


def test_listeners_hear_of_every_change_and_a_failing_one_changes_nothing() -> None:
    store = NodeReportStore()
    heard: list[str] = []

    def broken(node: str) -> None:
        raise RuntimeError("listener bug")

    store.subscribe(broken)
    unsubscribe = store.subscribe(heard.append)
    store.submit(report("node-a"))
    store.submit(report("node-b"))
    assert store.forget("node-a") and not store.forget("node-a")
    unsubscribe()
    store.submit(report("node-c"))
    assert heard == ["node-a", "node-b", "node-a"]
    assert store.nodes() == ["node-b", "node-c"]


def test_refusals_are_counted_by_reason() -> None:
    store = NodeReportStore()
    for reason in ("invalid", "invalid", "malformed"):
        store.refuse(reason)
    store.submit(report())
    assert store.counts() == {"invalid": 2, "malformed": 1, "accepted": 1}


def test_writers_and_readers_in_threads() -> None:
    store = NodeReportStore()
    errors: list[BaseException] = []

    def write(node: str) -> None:
        for sequence in range(1, 301):
            store.submit(report_to_proto(report(node, sequence)) if sequence % 2 else report(node, sequence))

    def read() -> None:
        try:
            for _ in range(300):
                for node in store.nodes():
                    latest = store.latest(node)
                    assert latest is not None and latest.node == node
                    assert (store.age(node) or 0) >= 0
        except BaseException as exc:  # re-raised in the test's thread below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(f"node-{index}",)) for index in range(4)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.counts() == {"accepted": 1200}
    assert [store.latest(f"node-{index}").sequence for index in range(4)] == [300] * 4
