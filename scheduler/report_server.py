"""The scheduler's end of the agent stream: a gRPC server for `lahar.rpc.v1.NodeReports`.

Each agent keeps one `Report` stream open and sends a complete NodeReport every interval. Acks
are cumulative: a ReportAck answers the report of its sequence and every report before it on the
stream not answered yet (accepted, since a refused one is answered at once). The server acks a
stream's first report, every refused one, every `ack_every`-th accepted one since the last ack
(`ack_due`), and what is left unanswered when the agent closes its side. At 5000 agents a
second, gRPC's Python transport costs about as much to write an ack as to read a report; one ack
per ten reports saves most of the writes (docs/agent.md, "Cost"). What the server checks, in
order:

- the stream's `authorization: Bearer <token>` metadata names a known token, else the stream is
  ended with UNAUTHENTICATED before any report is read; an accepted stream gets the
  STREAM_ACCEPTED initial metadata at once;
- each message's header parses (lahar.rpc.convert.parse_report_header: node, sequence, the parts
  the checks read, the lists of pods and such left as bytes), else it is refused as malformed
  (the method takes raw bytes, so that garbage is counted here rather than failing inside gRPC's
  deserializer);
- the report is for the token's node ("*" tokens may report for any node), else the stream is
  ended with PERMISSION_DENIED: a node may only report for itself;
- the report's bytes pass validate_wire_reports, else it is refused: as malformed where they do
  not parse as a NodeReport (a string that is not UTF-8 deep in a pod), as invalid where
  validate_report names problems.

A refused report is counted and its ack carries the reason in `error`, and the stream stays open:
a report is complete and the next one supersedes it, so one bad reading (a NaN from a collector)
costs one report, not a reconnect, and the agent learns what was wrong. Messages over
`max_message_bytes` never reach the server's code: gRPC ends the stream with RESOURCE_EXHAUSTED
(they are not in the counts). Accepted reports go to the NodeReportStore as their bytes (decoded
when a reader first asks: a report is never parsed in full on the way in), whose counts by result
are `lahar_scheduler_reports_total{result}`. Without TLS the server listens on loopback only: a
token sent in clear over a network is a token given away.

How it serves: on gRPC's completion queue, from one thread (`_CompletionServer`), as grpcio's own
synchronous server does (grpc/_server.py, on grpcio's core binding `grpc._cython.cygrpc`), but
without its thread per call: the thread polls the queue (gRPC's polling I/O reads the sockets in
that call, lahar/grpc_io.py), and each completion (a new call, a report read, an ack written, a
call ended) is handled right there, the next read started at once. grpc.aio, which served here
before, runs a poller thread of its own that hands every completion to the asyncio loop's thread
through a socket pair: a one-byte write, a wake-up of the loop's thread, a read, a future and a
task step per report, most of what a bare grpc.aio server cost (docs/performance.md, "Report
ingest": 0.36 core for 5,000 agents, against 0.23 for a bare server on the completion queue).
grpcio is pinned to one minor version (pyproject.toml); tests/rpc/test_report_stream.py drives
this server with grpc's own clients."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc._cython import cygrpc  # type: ignore[attr-defined]  # grpcio's core binding, under grpc's own servers

from lahar.grpc_loop import run_as_batch
from lahar.rpc import STREAM_ACCEPTED, is_loopback_address
from lahar.rpc.convert import ReportHeader, WireCheck, parse_report_header, validate_wire_reports
from lahar.rpc.v1 import agent_pb2 as pb
from lahar.tls import TlsFiles

from .node_reports import NodeReportStore, WireReport

log = logging.getLogger("lahar.scheduler.report_server")

SERVICE = pb.DESCRIPTOR.services_by_name["NodeReports"].full_name
METHOD = "Report"
METHOD_PATH = f"/{SERVICE}/{METHOD}"
METHOD_PATH_BYTES = METHOD_PATH.encode()
ANY_NODE = "*"
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20  # a report is kilobytes; 10,000 pods is still well under this
MAX_PROBLEMS_IN_ACK = 5
DEFAULT_ACK_EVERY = 10  # accepted reports answered by one ack
BATCH_WINDOW_SECONDS = 0.05
BATCH_MAX_REPORTS = 1024

# Results counted besides "accepted" (see NodeReportStore.counts).
MALFORMED = "malformed"
INVALID = "invalid"
UNAUTHENTICATED = "unauthenticated"
FORBIDDEN = "forbidden"

SERVER_OPTIONS: list[tuple[str, Any]] = [
    # Find agents that vanished without closing their stream (node powered off).
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    # Agents ping every 30 s (agent/report_stream.py); allow that instead of answering GOAWAY.
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    # When the scheduler restarts, every agent opens its stream within a second or so; gRPC's
    # default sheds new calls beyond 1000 not yet picked up (the agent sees CANCELLED and backs off).
    ("grpc.server.max_pending_requests", 10_000),
    ("grpc.server.max_pending_requests_hard_limit", 20_000),
]


class ReportServerError(ValueError):
    """A refused server setting or token file; the message says which and why."""


def load_tokens(path: Path) -> dict[str, str]:
    """Tokens from a file of `TOKEN NODE` lines (NODE "*": any node); blank lines and # comments
    are ignored. Returns token -> node."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ReportServerError(f"cannot read token file {path}: {exc.strerror}") from exc
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise ReportServerError(f"{path}:{number}: expected `TOKEN NODE`, found {len(words)} words")
        token, node = words
        if token in tokens:
            raise ReportServerError(f"{path}:{number}: token repeated (first given for node {tokens[token]})")
        tokens[token] = node
    return tokens


def _digest(token: str) -> bytes:
    # Tokens are looked up by digest, so the time a lookup takes says nothing about the token.
    return hashlib.sha256(token.encode()).digest()


def _bearer_token(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode() if isinstance(value, bytes) else str(value)
            scheme, _, token = text.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def _ack(sequence: int, error: str = "") -> bytes:
    return pb.ReportAck(sequence=sequence, error=error).SerializeToString()


def ack_due(refused: bool, acked_before: bool, unanswered: int, ack_every: int) -> bool:
    """Whether the server acks now, having just answered a report (`refused` or not) on a stream
    that has (`acked_before`) or has not had an ack yet, with `unanswered` accepted reports
    (this one included) not acked yet: a refusal at once, so the agent learns why; a stream's
    first report at once, so the agent learns its reports are taken; then every `ack_every`."""
    return refused or not acked_before or unanswered >= ack_every


def _decode_error(raw: bytes) -> str:
    """Why `raw`, whose header did not parse, is not a NodeReport, in the words of the report's
    own parse (the header's names a schema of the server's)."""
    try:
        pb.NodeReport.FromString(raw)
    except DecodeError as exc:
        return str(exc)
    return (
        "the report's header does not parse"  # cannot be: the header's schema is the report's, with lists left as bytes
    )


def _summary(problems: list[str]) -> str:
    shown = "; ".join(problems[:MAX_PROBLEMS_IN_ACK])
    hidden = len(problems) - MAX_PROBLEMS_IN_ACK
    return f"{shown} (and {hidden} more)" if hidden > 0 else shown


class _Stream:
    """One agent's open stream: the acks it is owed, written in order, one at a time (gRPC allows
    one write in flight per call), and how it ends. Never holds its own completions' tags (a
    cycle would keep the call until the collector ran)."""

    __slots__ = (
        "acked_before",
        "call",
        "ended",
        "half_closed",
        "last",
        "node",
        "outbox",
        "status",
        "unanswered",
        "waiting",
        "writing",
    )

    def __init__(self, call: Any) -> None:
        self.call = call  # cygrpc.Call
        self.node = ""  # what the token may report for (ANY_NODE: any node)
        self.acked_before = False  # an ack was sent on this stream
        self.unanswered = 0  # accepted reports not acked yet
        self.last = 0  # the sequence of the last report answered
        self.waiting = 0  # reports of this stream in the batch, not answered yet
        self.outbox: list[bytes] = []
        self.writing = False  # an ack is in flight
        self.half_closed = False  # the agent closed its side
        # the call's end once decided (code, details), sent when no write is in flight
        self.status: tuple[Any, bytes] | None = None
        self.ended = False  # the call is over (status sent, or it failed): nothing more is started on it

    @property
    def answering(self) -> bool:
        """Whether acks are still written: not once the call's end is decided."""
        return self.status is None and not self.ended


def stream_end_due(half_closed: bool, waiting: int, writing: bool, outbox: int) -> bool:
    """Whether a stream whose agent has (`half_closed`) or has not closed its side ends now (what
    is left unanswered acked first): once the agent closed it, none of its reports waits for the
    batch, and no ack is in flight or queued."""
    return half_closed and not waiting and not writing and not outbox


class _Batcher:
    """Answers reports in batches. The serving thread only parses a report's header and hands it
    over; the batch, up to BATCH_WINDOW_SECONDS (`due`, on time.monotonic) or BATCH_MAX_REPORTS
    later, validates them together (checking many reports at once costs much less per report,
    see lahar.rpc.convert), stores the accepted ones and queues the acks that are due, which
    `settle` sends. At 5000 agents a second a window gathers some 250 reports (a 10 ms window, 50,
    cost measurably more: docs/performance.md, "Report ingest"); the wait only delays the ack (an
    agent sends one report a second)."""

    def __init__(self, store: NodeReportStore, ack_every: int, settle: Callable[[_Stream], None]) -> None:
        self.store = store
        self.ack_every = ack_every
        self.settle = settle
        # (stream, header or None when refused before validation, its bytes, why refused)
        self._waiting: list[tuple[_Stream, ReportHeader | None, bytes, str]] = []
        self.due: float | None = None  # when the waiting reports are answered at the latest

    def add(self, stream: _Stream, header: ReportHeader | None, wire: bytes, refused: str = "") -> None:
        """Queue a report whose header was parsed from `wire` (or one already `refused`, to be
        answered in order)."""
        stream.waiting += 1
        self._waiting.append((stream, header, wire, refused))
        if len(self._waiting) >= BATCH_MAX_REPORTS:
            self.flush()
        elif self.due is None:
            self.due = time.monotonic() + BATCH_WINDOW_SECONDS

    def flush(self) -> None:
        """Answer every queued report now."""
        self.due = None
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return
        headers = [header for _, header, _, _ in waiting if header is not None]
        wires = [wire for _, header, wire, _ in waiting if header is not None]
        try:
            results = iter(validate_wire_reports(headers, wires))
        except Exception as exc:  # a bug in validation fails these reports, not the server
            log.exception("validating %d reports failed", len(headers))
            results = iter([WireCheck("", [f"internal error validating the report: {exc}"])] * len(headers))
        answers: list[tuple[_Stream, int, str]] = []
        accepted: list[WireReport] = []
        for stream, header, wire, refused in waiting:
            if header is None:
                answers.append((stream, 0, refused))
                continue
            malformed, problems = next(results)
            if malformed:  # its sequence is not known: the header's may be any bytes of a broken report
                self.store.refuse(MALFORMED)
                answers.append((stream, 0, f"malformed report: {malformed}"))
            elif problems:
                self.store.refuse(INVALID)
                log.debug("refused report %d from %s: %s", header.sequence, header.node, problems)
                answers.append((stream, header.sequence, f"invalid report: {_summary(problems)}"))
            else:
                accepted.append(WireReport(header.node, header.sequence, wire))
                answers.append((stream, header.sequence, ""))
        self.store.submit_many(accepted)  # stored before any of them is acked
        for stream, sequence, error in answers:
            stream.waiting -= 1
            if self._answer(stream, sequence, error) or stream.half_closed:
                self.settle(stream)

    def _answer(self, stream: _Stream, sequence: int, error: str) -> bool:
        """Count the answer to a report on `stream`; True if an ack was queued."""
        stream.last = sequence
        if not error:
            stream.unanswered += 1
        if not stream.answering or not ack_due(bool(error), stream.acked_before, stream.unanswered, self.ack_every):
            return False
        stream.outbox.append(_ack(sequence, error))
        stream.acked_before, stream.unanswered = True, 0
        return True


# What a completion is for: the first item of its tag.
_NEW_CALL = "a new call"  # the tag itself
_SHUTDOWN = "the server's shutdown"  # the tag itself
_READ, _WRITE, _CALL_OVER, _STATUS_SENT = "read", "write", "call over", "status sent"
_REQUESTED_CALLS = 64  # new calls asked of gRPC at a time: a reconnect storm's streams are taken as they come
_IDLE_POLL_SECONDS = 1.0
_OK = cygrpc.StatusCode.ok
_STATUS_CODES = {
    grpc.StatusCode.UNAUTHENTICATED: cygrpc.StatusCode.unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: cygrpc.StatusCode.permission_denied,
    grpc.StatusCode.UNIMPLEMENTED: cygrpc.StatusCode.unimplemented,
}


class _CompletionServer:
    """gRPC's server and its completion queue, served by one thread (`serve`): every completion
    is handled on that thread, reports handed to the batcher, acks written as it queues them."""

    def __init__(
        self, options: list[tuple[str, Any]], store: NodeReportStore, nodes_by_digest: dict[bytes, str], ack_every: int
    ) -> None:
        self.store = store
        self.nodes_by_digest = nodes_by_digest
        self.batcher = _Batcher(store, ack_every, self.settle)
        self.queue = cygrpc.CompletionQueue()
        self.server = cygrpc.Server(tuple(options), False)
        self.server.register_completion_queue(self.queue)
        self.stopping = False
        self.stopped = threading.Event()  # set once the serving thread has returned

    def add_port(self, address: str, credentials: grpc.ServerCredentials | None) -> int:
        target = address.encode()
        port: int = (
            self.server.add_http2_port(target)
            if credentials is None
            else self.server.add_http2_port(target, credentials._credentials)  # type: ignore[attr-defined]
        )
        return port

    def start(self) -> None:
        self.server.start()
        for _ in range(_REQUESTED_CALLS):
            self.server.request_call(self.queue, self.queue, _NEW_CALL)

    def begin_shutdown(self) -> None:
        """No new calls; open ones go on until cancel_calls (the serving thread ends once all are over)."""
        self.stopping = True
        self.server.shutdown(self.queue, _SHUTDOWN)

    def cancel_calls(self) -> None:
        self.server.cancel_all_calls()

    # --- the serving thread ---

    def serve(self) -> None:
        run_as_batch()  # this thread's wake-ups wait for the task on its CPU (lahar.grpc_loop)
        try:
            self._serve()
        finally:
            self.stopped.set()

    def _serve(self) -> None:
        poll, batcher, now = self.queue.poll, self.batcher, time.monotonic
        while True:
            due = batcher.due
            wait = _IDLE_POLL_SECONDS if due is None else max(0.0, due - now())
            event = poll(time.time() + wait)  # gRPC's deadline is on the wall clock
            completion = event.completion_type
            if completion == cygrpc.CompletionType.queue_shutdown:
                return
            try:
                if completion == cygrpc.CompletionType.operation_complete:
                    self._handle(event)
                if batcher.due is not None and now() >= batcher.due:
                    batcher.flush()
            except Exception:  # a bug costs this completion, not the server
                log.exception("the report server failed to handle a completion")

    def _handle(self, event: Any) -> None:
        tag = event.tag
        if tag is _NEW_CALL:
            self._accept(event)
        elif tag is _SHUTDOWN:  # every call is over: store what the batch holds (its acks go nowhere)
            try:
                self.batcher.flush()
            finally:
                self.queue.shutdown()  # the serving thread ends once the queue is drained
        else:
            what, stream = tag
            if what is _READ:
                self._read(stream, event)
            elif what is _WRITE:
                stream.writing = False
                if not event.success:  # the call ended under it (the agent went away, the server stops)
                    stream.ended = True
                self.settle(stream)
            elif what is _CALL_OVER:
                stream.ended = True

    def _start(self, stream: _Stream, operations: tuple[Any, ...], what: str) -> None:
        stream.call.start_server_batch(operations, (what, stream))

    def _accept(self, event: Any) -> None:
        if not self.stopping:
            with contextlib.suppress(ValueError):  # stop() began the shutdown since
                self.server.request_call(self.queue, self.queue, _NEW_CALL)
        if not event.success:  # the server is shutting down
            return
        stream = _Stream(event.call)
        if event.call_details.method != METHOD_PATH_BYTES:
            self._end_at_once(stream, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return
        node = self._node_of_caller(event.invocation_metadata)
        if node is None:
            self.store.refuse(UNAUTHENTICATED)
            self._end_at_once(stream, grpc.StatusCode.UNAUTHENTICATED, "missing or unknown bearer token")
            return
        stream.node = node
        self._start(stream, (cygrpc.ReceiveCloseOnServerOperation(0),), _CALL_OVER)
        self._start(
            stream,
            (cygrpc.SendInitialMetadataOperation((STREAM_ACCEPTED,), 0), cygrpc.ReceiveMessageOperation(0)),
            _READ,
        )

    def _end_at_once(self, stream: _Stream, code: grpc.StatusCode, details: str) -> None:
        stream.ended = True
        operations = (
            cygrpc.SendInitialMetadataOperation((), 0),
            cygrpc.ReceiveCloseOnServerOperation(0),
            cygrpc.SendStatusFromServerOperation((), _STATUS_CODES[code], details.encode(), 0),
        )
        self._start(stream, operations, _STATUS_SENT)

    def _read(self, stream: _Stream, event: Any) -> None:
        if not event.success:  # the call ended (cancelled, a message over the size limit, the server stops)
            stream.ended = True
            return
        raw = event.batch_operations[-1].message()
        if raw is None:  # the agent closed its side: answer what is queued and what is left unacked
            stream.half_closed = True
            if stream.waiting:
                self.batcher.flush()
            self.settle(stream)
            return
        if not stream.answering:
            return
        try:
            header = parse_report_header(raw)
        except DecodeError:
            self.store.refuse(MALFORMED)
            self.batcher.add(stream, None, raw, f"malformed report: {_decode_error(raw)}")
        else:
            if stream.node != ANY_NODE and header.node != stream.node:
                self.store.refuse(FORBIDDEN)
                stream.status = (
                    cygrpc.StatusCode.permission_denied,
                    f"a node may only report for itself: this token is for {stream.node}, "
                    f"the report is for {header.node or '(no node)'}".encode(),
                )
                self.settle(stream)
                return
            self.batcher.add(stream, header, raw)
        self._start(stream, (cygrpc.ReceiveMessageOperation(0),), _READ)

    def settle(self, stream: _Stream) -> None:
        """Start what `stream` is owed next, if nothing is in flight: its next ack, or its end."""
        if stream.ended or stream.writing:
            return
        if stream.status is None:
            if stream.outbox:
                stream.writing = True
                self._start(stream, (cygrpc.SendMessageOperation(stream.outbox.pop(0), 0),), _WRITE)
                return
            if not stream_end_due(stream.half_closed, stream.waiting, stream.writing, len(stream.outbox)):
                return
            if stream.unanswered:
                stream.outbox.append(_ack(stream.last))
                stream.unanswered = 0
                self.settle(stream)
                return
            stream.status = (_OK, b"")
        code, details = stream.status
        stream.ended = True
        self._start(stream, (cygrpc.SendStatusFromServerOperation((), code, details, 0),), _STATUS_SENT)

    def _node_of_caller(self, metadata: Iterable[tuple[str, Any]] | None) -> str | None:
        token = _bearer_token(metadata)
        return None if token is None else self.nodes_by_digest.get(_digest(token))


class ReportServer:
    """Serve `NodeReports` into `store`, from a thread of the server's own: start()/stop()."""

    def __init__(
        self,
        store: NodeReportStore,
        tokens: dict[str, str],
        tls: TlsFiles | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        ack_every: int = DEFAULT_ACK_EVERY,
    ) -> None:
        if ack_every < 1:
            raise ReportServerError(f"ack_every must be at least 1, not {ack_every}")
        self.store = store
        self.tls = tls
        self.max_message_bytes = max_message_bytes
        self.ack_every = ack_every
        self._nodes_by_digest = {_digest(token): node for token, node in tokens.items()}
        self._server: _CompletionServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def counts(self) -> dict[str, int]:
        """Reports by result: accepted, malformed, invalid, unauthenticated, forbidden."""
        return self.store.counts()

    def start(self, address: str) -> int:
        """Listen on `address` ("host:port", port 0 for any); returns the port. The server's
        thread runs under SCHED_BATCH (lahar.grpc_loop.run_as_batch)."""
        if self._server is not None:
            raise ReportServerError("the report server is already started")
        if self.tls is None and not is_loopback_address(address):
            raise ReportServerError(f"listening on {address} (not loopback) requires TLS")
        credentials = self._credentials() if self.tls else None
        options = [*SERVER_OPTIONS, ("grpc.max_receive_message_length", self.max_message_bytes)]
        server = _CompletionServer(options, self.store, self._nodes_by_digest, self.ack_every)
        port = server.add_port(address, credentials)
        if port == 0:
            raise ReportServerError(f"cannot listen on {address}")
        server.start()
        thread = threading.Thread(target=server.serve, name="lahar-report-server", daemon=True)
        thread.start()
        self._server, self._thread = server, thread
        log.info("node report server listening on %s (port %d, %s)", address, port, "TLS" if self.tls else "insecure")
        return port

    def stop(self, grace: float | None = None) -> None:
        """Stop listening; open streams get `grace` seconds (None: none) before they are cancelled."""
        if self._server is None or self._thread is None:
            return
        server, thread = self._server, self._thread
        self._server = self._thread = None
        server.begin_shutdown()
        if not grace or not server.stopped.wait(grace):
            server.cancel_calls()
        thread.join()

    def _credentials(self) -> grpc.ServerCredentials:
        assert self.tls is not None
        try:
            pair = (self.tls.key.read_bytes(), self.tls.cert.read_bytes())
        except OSError as exc:
            raise ReportServerError(
                f"cannot read the TLS certificate {self.tls.cert} or key {self.tls.key}: {exc.strerror}"
            ) from exc
        return grpc.ssl_server_credentials([pair])
