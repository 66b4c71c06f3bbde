"""The agent's end of the report stream: sends each NodeReport to the scheduler over one
long-lived gRPC stream, from a background thread with its own event loop.

The collector loop calls `offer(report)` every interval; offer never blocks and never raises. Only
the latest unsent report is kept: a report is complete, so one that could not be sent in time is
simply superseded by the next. When the scheduler is unreachable or the stream breaks, the
streamer reconnects with capped exponential backoff and jitter (0.5 s doubling to 10 s), and the
agent keeps enforcing QoS locally meanwhile (DESIGN.md "Reliability and security")."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import random
import threading
from pathlib import Path
from typing import Any

import grpc

from lahar.rpc import STREAM_ACCEPTED, is_loopback_address
from lahar.rpc.convert import report_to_proto
from lahar.rpc.report import NodeReport
from lahar.rpc.v1 import agent_pb2_grpc

log = logging.getLogger("lahar.agent.report_stream")

BACKOFF_INITIAL_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 10.0
CLOSE_TIMEOUT_SECONDS = 2.0
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    # Notice a scheduler that vanished without closing the connection (the server allows pings
    # every 10 s, see scheduler/report_server.py).
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.enable_retries", 0),  # a lost report is superseded, never retried
    # Each attempt gets a fresh channel; without a pool of its own it would share the previous
    # channel's subchannel and wait out gRPC's own reconnect backoff (up to 2 minutes) instead of ours.
    ("grpc.use_local_subchannel_pool", 1),
]


class _StreamEnded(Exception):
    """Why a stream ended, as `last_error` says it."""


@dataclasses.dataclass
class StreamStats:
    connected: bool = False  # a stream is open and the server accepted our token
    offered: int = 0
    superseded: int = 0  # offered reports replaced by a newer one before they were sent
    sent: int = 0
    acked: int = 0  # reports the scheduler answered (an ack answers every report up to its sequence)
    refused: int = 0  # acks that carried an error: the server did not store that report
    reconnects: int = 0
    last_error: str = ""


def backoff_delay(
    attempt: int,
    initial: float = BACKOFF_INITIAL_SECONDS,
    maximum: float = BACKOFF_MAX_SECONDS,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before reconnection `attempt` (0, 1, ...): doubling from `initial`, capped at
    `maximum`, with the upper half jittered so that agents cut off together do not come back
    together."""
    ceiling = min(maximum, initial * 2 ** min(attempt, 32))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


class ReportStreamer:
    """Streams the agent's reports to the scheduler at `address` ("host:port"). TLS with `ca_file`
    (the CA that signed the scheduler's certificate); without one, only a loopback address is
    allowed, since the bearer token would cross the network in clear."""

    def __init__(
        self,
        address: str,
        node: str,
        token: str,
        ca_file: Path | None = None,
        *,
        backoff_initial: float = BACKOFF_INITIAL_SECONDS,
        backoff_max: float = BACKOFF_MAX_SECONDS,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        if ca_file is None and not is_loopback_address(address):
            raise ValueError(f"streaming reports to {address} (not loopback) requires a CA file for TLS")
        self.address = address
        self.node = node
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._ca = Path(ca_file).read_bytes() if ca_file is not None else None
        self._backoff = (backoff_initial, backoff_max)
        self._connect_timeout = connect_timeout
        self._stats = StreamStats()
        self._pending: NodeReport | None = None
        self._pending_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None  # when run in a caller's loop (start_in)
        self._wake = asyncio.Event()  # a report is pending, or stop() was called
        self._stopping = False

    # --- what the agent calls ---

    def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_until_complete, args=(self._run(),), name="lahar-report-stream", daemon=True
        )
        self._thread.start()

    def start_in(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stream as a task of a running loop the caller owns, instead of on a thread and loop of
        its own (a thousand simulated nodes need one thread, not a thousand); call from `loop`."""
        self._loop = loop
        self._task = loop.create_task(self._run())

    async def stop_in_loop(self, timeout: float = 5.0) -> None:
        """The counterpart of `start_in`: close the stream and await its task."""
        task = self._task
        if task is None:
            return
        self._stopping = True
        self._wake.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, timeout)
        self._task = None

    def offer(self, report: NodeReport) -> None:
        """Hand over the newest report; returns at once. Never raises: a report that cannot be sent
        is dropped and superseded by the next."""
        try:
            with self._pending_lock:
                if self._pending is not None:
                    self._stats.superseded += 1
                self._pending = report
                self._stats.offered += 1
            self._call_in_loop(self._wake.set)
        except Exception as exc:  # the agent must keep working whatever happens here
            self._stats.last_error = f"offer: {exc}"

    def stop(self, timeout: float = 5.0) -> None:
        """Close the stream and end the thread; an unsent report is dropped."""
        if self._thread is None or self._loop is None:
            return
        self._stopping = True
        self._call_in_loop(self._wake.set)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._loop.close()
        self._thread = None

    def stats(self) -> StreamStats:
        return dataclasses.replace(self._stats)

    def __enter__(self) -> ReportStreamer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call_in_loop(self, callback: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback)

    def _take_pending(self) -> NodeReport | None:
        with self._pending_lock:
            report, self._pending = self._pending, None
        return report

    # --- the background thread ---

    async def _run(self) -> None:
        attempt = 0
        while not self._stopping:
            acked_before = self._stats.acked - self._stats.refused
            try:
                await self._stream()
            except _StreamEnded as ended:
                self._stats.last_error = str(ended)
            except Exception as exc:  # keep streaming whatever broke this attempt
                self._stats.last_error = f"{type(exc).__name__}: {exc}"
            self._stats.connected = False
            if self._stopping:
                break
            if self._stats.acked - self._stats.refused > acked_before:
                attempt = 0  # that stream worked: start the backoff over
            delay = backoff_delay(attempt, *self._backoff)
            attempt += 1
            log.warning("report stream to %s: %s; reconnecting in %.1f s", self.address, self._stats.last_error, delay)
            await self._sleep_unless_stopped(delay)
            self._stats.reconnects += 1

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        deadline = asyncio.get_running_loop().time() + seconds
        while not self._stopping and (left := deadline - asyncio.get_running_loop().time()) > 0:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except TimeoutError:
                return

    def _channel(self) -> grpc.aio.Channel:
        if self._ca is None:
            return grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        return grpc.aio.secure_channel(self.address, grpc.ssl_channel_credentials(self._ca), options=CHANNEL_OPTIONS)

    async def _stream(self) -> None:
        """One stream, from connecting to its end; raises what ended it."""
        async with self._channel() as channel:
            call = agent_pb2_grpc.NodeReportsStub(channel).Report(metadata=self._metadata)
            try:
                metadata = await asyncio.wait_for(call.initial_metadata(), self._connect_timeout)
                if STREAM_ACCEPTED not in tuple(metadata or ()):
                    await asyncio.wait_for(call.code(), self._connect_timeout)  # the refusal, on its way
                    raise ConnectionError("the scheduler refused the stream")
                self._stats.connected = True
                unanswered: collections.deque[int] = collections.deque()  # sequences sent, not acked yet
                reader = asyncio.create_task(self._read_acks(call, unanswered))
                reader.add_done_callback(lambda _: self._wake.set())
                await self._send_reports(call, reader, unanswered)
                # Stopping: close our side and let the server end the stream, so that no gRPC
                # event is still on its way to this loop when the loop closes.
                await call.done_writing()
                await asyncio.wait_for(reader, CLOSE_TIMEOUT_SECONDS)
            except Exception as exc:
                raise _StreamEnded(await self._why_it_ended(call, exc)) from exc
            finally:
                call.cancel()

    async def _why_it_ended(self, call: Any, exc: Exception) -> str:
        if call.done() and (code := await call.code()) not in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED):
            # The server's status: a write to a call the server just ended fails with a bare INTERNAL.
            return f"{code.name}: {await call.details()}"
        if isinstance(exc, grpc.aio.AioRpcError):
            return f"{exc.code().name}: {exc.details()}"
        if isinstance(exc, TimeoutError):
            return f"no answer from the scheduler within {self._connect_timeout:g} s"
        return str(exc) or type(exc).__name__

    async def _send_reports(self, call: Any, reader: asyncio.Task[None], unanswered: collections.deque[int]) -> None:
        """Write each pending report until stop() (returns) or the stream ends (raises)."""
        while not self._stopping:
            self._wake.clear()
            report = self._take_pending()
            if report is not None:
                try:
                    message = report_to_proto(report)
                except (TypeError, ValueError) as exc:  # a collector's bug costs this report, not the stream
                    self._stats.last_error = f"report {report.sequence} not sent: {exc}"
                    log.error("report %d not sent: %s", report.sequence, exc)
                    continue
                unanswered.append(message.sequence)
                await call.write(message)
                self._stats.sent += 1
            elif reader.done():
                await reader  # raises what ended the stream
                raise ConnectionError("the scheduler ended the stream")
            else:
                await self._wake.wait()

    async def _read_acks(self, call: Any, unanswered: collections.deque[int]) -> None:
        """Count the reports each ack answers: acks are cumulative (scheduler/report_server.py),
        one answers its sequence and every report sent before it on this stream."""
        async for ack in call:
            answered = 0
            while unanswered and unanswered[0] <= ack.sequence:
                unanswered.popleft()
                answered += 1
            self._stats.acked += max(answered, 1)
            if ack.error:
                self._stats.refused += 1
                self._stats.last_error = f"report {ack.sequence} refused: {ack.error}"
                log.warning("scheduler refused report %d: %s", ack.sequence, ack.error)
