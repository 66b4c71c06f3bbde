"""The scheduler's end of the agent stream: a grpc.aio server for `lahar.rpc.v1.NodeReports`.

Each agent keeps one `Report` stream open and sends a complete NodeReport every interval. Acks
are cumulative: a ReportAck answers the report of its sequence and every report before it on the
stream not answered yet (accepted, since a refused one is answered at once). The server acks a
stream's first report, every refused one, every `ack_every`-th accepted one since the last ack
(`ack_due`), and what is left unanswered when the agent closes its side. At 5000 agents a
second, gRPC's Python transport costs about as much to write an ack as to read a report; one ack
per ten reports saves most of the writes (docs/agent.md, "Cost"). What the server checks, in
order:

- the stream's `authorization: Bearer <token>` metadata names a known token, else the stream is
  aborted with UNAUTHENTICATED before any report is read; an accepted stream gets the
  STREAM_ACCEPTED initial metadata at once;
- each message's header parses (lahar.rpc.convert.parse_report_header: node, sequence, the parts
  the checks read, the lists of pods and such left as bytes), else it is refused as malformed
  (the method takes raw bytes, so that garbage is counted here rather than failing inside gRPC's
  deserializer);
- the report is for the token's node ("*" tokens may report for any node), else the stream is
  aborted with PERMISSION_DENIED: a node may only report for itself;
- the report's bytes pass validate_wire_reports, else it is refused: as malformed where they do
  not parse as a NodeReport (a string that is not UTF-8 deep in a pod), as invalid where
  validate_report names problems.

A refused report is counted and its ack carries the reason in `error`, and the stream stays open:
a report is complete and the next one supersedes it, so one bad reading (a NaN from a collector)
costs one report, not a reconnect, and the agent learns what was wrong. Messages over
`max_message_bytes` never reach the handler: gRPC ends the stream with RESOURCE_EXHAUSTED (they
are not in the counts). Accepted reports go to the NodeReportStore as their bytes (decoded when a
reader first asks: a report is never parsed in full on the way in), whose counts by result are
`lahar_scheduler_reports_total{result}`. Without TLS the server listens on loopback only: a token
sent in clear over a network is a token given away."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from lahar.grpc_loop import grpc_poller_threads, new_event_loop, run_as_batch
from lahar.rpc import STREAM_ACCEPTED, is_loopback_address
from lahar.rpc.convert import ReportHeader, WireCheck, parse_report_header, validate_wire_reports
from lahar.rpc.v1 import agent_pb2 as pb
from lahar.tls import TlsFiles

from .node_reports import NodeReportStore, WireReport

log = logging.getLogger("lahar.scheduler.report_server")

SERVICE = pb.DESCRIPTOR.services_by_name["NodeReports"].full_name
METHOD = "Report"
METHOD_PATH = f"/{SERVICE}/{METHOD}"
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
    """One agent's open stream, as the batches answer its reports: the acks it is owed, written
    in order by one writer task at a time (gRPC allows one write in flight per call)."""

    __slots__ = ("acked_before", "closed", "context", "last", "outbox", "unanswered", "waiting", "writer")

    def __init__(self, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        self.context = context
        self.acked_before = False  # an ack was sent on this stream
        self.unanswered = 0  # accepted reports not acked yet
        self.last = 0  # the sequence of the last report answered
        self.waiting = 0  # reports of this stream in the batch, not answered yet
        self.outbox: list[bytes] = []
        self.writer: asyncio.Task[None] | None = None
        self.closed = False  # the handler has returned: nothing more is written


class _Batcher:
    """Answers reports in batches. A stream's handler only parses a report's header and hands it
    over (no await per report); the batch, up to BATCH_WINDOW_SECONDS or BATCH_MAX_REPORTS later,
    validates them together (checking many reports at once costs much less per report, see
    lahar.rpc.convert), stores the accepted ones and queues the acks that are due, which a
    writer task per stream sends. At 5000 agents a second a window gathers some 250 reports (a
    10 ms window, 50, cost measurably more: docs/performance.md, "Report ingest"); the wait only
    delays the ack (an agent sends one report a second)."""

    def __init__(self, store: NodeReportStore, ack_every: int) -> None:
        self.store = store
        self.ack_every = ack_every
        # (stream, header or None when refused before validation, its bytes, why refused)
        self._waiting: list[tuple[_Stream, ReportHeader | None, bytes, str]] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, stream: _Stream, header: ReportHeader | None, wire: bytes, refused: str = "") -> None:
        """Queue a report whose header was parsed from `wire` (or one already `refused`, to be
        answered in order)."""
        stream.waiting += 1
        self._waiting.append((stream, header, wire, refused))
        if len(self._waiting) >= BATCH_MAX_REPORTS:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(BATCH_WINDOW_SECONDS, self.flush)

    def flush(self) -> None:
        """Answer every queued report now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
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
            self._answer(stream, sequence, error)

    def _answer(self, stream: _Stream, sequence: int, error: str) -> None:
        stream.last = sequence
        if not error:
            stream.unanswered += 1
        if stream.closed or not ack_due(bool(error), stream.acked_before, stream.unanswered, self.ack_every):
            return
        stream.outbox.append(_ack(sequence, error))
        stream.acked_before, stream.unanswered = True, 0
        if stream.writer is None:
            stream.writer = asyncio.get_running_loop().create_task(_write_acks(stream))


async def _write_acks(stream: _Stream) -> None:
    """Send the stream's queued acks in order, then end (the next due ack starts another writer)."""
    try:
        while stream.outbox and not stream.closed:
            await stream.context.write(stream.outbox.pop(0))
    except Exception as exc:  # the call ended under it (the agent went away, the server stops)
        log.debug("an ack could not be written, the stream has ended: %s", exc)
    finally:
        stream.writer = None


def _serve_forever(loop: asyncio.AbstractEventLoop) -> None:
    run_as_batch()  # this thread's wake-ups wait for the task on its CPU (lahar.grpc_loop)
    loop.run_forever()


class ReportServer:
    """Serve `NodeReports` into `store`. Use start()/stop() from ordinary code (the server then
    runs its own event loop in a thread), or start_async()/stop_async() inside a running loop."""

    def __init__(
        self,
        store: NodeReportStore,
        tokens: dict[str, str],
        tls: TlsFiles | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        ack_every: int = DEFAULT_ACK_EVERY,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    ) -> None:
        if ack_every < 1:
            raise ReportServerError(f"ack_every must be at least 1, not {ack_every}")
        self.store = store
        self.tls = tls
        self.max_message_bytes = max_message_bytes
        self.ack_every = ack_every
        self._loop_factory = loop_factory or new_event_loop
        self._nodes_by_digest = {_digest(token): node for token, node in tokens.items()}
        self._server: grpc.aio.Server | None = None
        self._batcher: _Batcher | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def counts(self) -> dict[str, int]:
        """Reports by result: accepted, malformed, invalid, unauthenticated, forbidden."""
        return self.store.counts()

    # --- lifecycle ---

    async def start_async(self, address: str) -> int:
        """Listen on `address` ("host:port", port 0 for any) in the running loop; returns the port."""
        if self.tls is None and not is_loopback_address(address):
            raise ReportServerError(f"listening on {address} (not loopback) requires TLS")
        server = grpc.aio.server(options=[*SERVER_OPTIONS, ("grpc.max_receive_message_length", self.max_message_bytes)])
        # raw bytes in: parsed and counted here
        handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.stream_stream_rpc_method_handler(self._report)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {METHOD: handler}),))
        try:
            port = (
                server.add_secure_port(address, self._credentials()) if self.tls else server.add_insecure_port(address)
            )
        except RuntimeError as exc:
            raise ReportServerError(f"cannot listen on {address}: {exc}") from exc
        self._batcher = _Batcher(self.store, self.ack_every)
        await server.start()
        self._server = server
        log.info("node report server listening on %s (port %d, %s)", address, port, "TLS" if self.tls else "insecure")
        return port

    async def stop_async(self, grace: float | None = None) -> None:
        """Stop listening; open streams get `grace` seconds (None: none) before they are cancelled."""
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    def start(self, address: str) -> int:
        """start_async in an event loop of the server's own, on a daemon thread: `loop_factory`'s,
        by default lahar.grpc_loop's (uvloop's where installed). That thread and grpc.aio's poller
        thread run under SCHED_BATCH (lahar.grpc_loop.run_as_batch)."""
        if self._server is not None or self._loop is not None:
            raise ReportServerError("the report server is already started")
        loop = self._loop_factory()
        thread = threading.Thread(target=_serve_forever, args=(loop,), name="lahar-report-server", daemon=True)
        thread.start()
        try:
            port = asyncio.run_coroutine_threadsafe(self.start_async(address), loop).result()
        except BaseException:
            self._close_loop(loop, thread)
            raise
        for poller in grpc_poller_threads():  # started with the first grpc.aio server or channel
            if poller.native_id is not None:
                run_as_batch(poller.native_id)
        self._loop, self._thread = loop, thread
        return port

    def stop(self, grace: float | None = None) -> None:
        if self._loop is None or self._thread is None:
            return
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        try:
            asyncio.run_coroutine_threadsafe(self._stop_and_finish_tasks(grace), loop).result()
        finally:
            self._close_loop(loop, thread)

    async def _stop_and_finish_tasks(self, grace: float | None) -> None:
        await self.stop_async(grace)
        # Stream handlers gRPC cancelled may still be unwinding: let them end before the loop closes.
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _close_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def _credentials(self) -> grpc.ServerCredentials:
        assert self.tls is not None
        try:
            pair = (self.tls.key.read_bytes(), self.tls.cert.read_bytes())
        except OSError as exc:
            raise ReportServerError(
                f"cannot read the TLS certificate {self.tls.cert} or key {self.tls.key}: {exc.strerror}"
            ) from exc
        return grpc.ssl_server_credentials([pair])

    # --- the stream ---

    async def _report(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        node = self._node_of_caller(context)
        if node is None:
            self.store.refuse(UNAUTHENTICATED)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown bearer token")
        assert node is not None and self._batcher is not None
        batcher = self._batcher
        await context.send_initial_metadata((STREAM_ACCEPTED,))
        stream = _Stream(context)
        try:
            # the stubs type read() as the request alone; it returns EOF once the stream ends
            while (raw := await context.read()) is not grpc.aio.EOF:  # type: ignore[comparison-overlap]
                try:
                    header = parse_report_header(raw)
                except DecodeError:
                    self.store.refuse(MALFORMED)
                    batcher.add(stream, None, raw, f"malformed report: {_decode_error(raw)}")
                    continue
                if node != ANY_NODE and header.node != node:
                    self.store.refuse(FORBIDDEN)
                    await context.abort(
                        grpc.StatusCode.PERMISSION_DENIED,
                        f"a node may only report for itself: this token is for {node}, "
                        f"the report is for {header.node or '(no node)'}",
                    )
                batcher.add(stream, header, raw)
            # The agent closed its side: answer what is queued and what is left unacked.
            if stream.waiting:
                batcher.flush()
            if stream.writer is not None:
                await stream.writer
            if stream.unanswered:
                await context.write(_ack(stream.last))
        finally:
            stream.closed = True

    def _node_of_caller(self, context: grpc.aio.ServicerContext[bytes, bytes]) -> str | None:
        token = _bearer_token(context.invocation_metadata())
        return None if token is None else self._nodes_by_digest.get(_digest(token))
