"""The event loop for a thread that serves grpc.aio: uvloop's where it is installed, asyncio's
otherwise; how gRPC's completions reach it; and the CPU policy of the threads that serve.

uvloop runs the loop on libuv, its machinery in C: asyncio's selector, handles and turns of the
loop are Python, and at the report server's 5,000 reports a second (a completion, a turn and a
task step for each) they were a large part of the server's thread. Measured with `lahar bench
ingest` at 5,000 agents (docs/performance.md, "Report ingest"): the report server fell from 0.673
to 0.589 core on uvloop, a bare grpc.aio server from 0.450 to 0.412 (one round, one hold).
uvloop is a dependency wherever it is supported; elsewhere the server runs as before.

How completions reach the loop. grpc.aio's poller thread (grpcio's PollerCompletionQueue) takes
each completion off gRPC's queue and, where the loop can watch a file descriptor, writes one
byte to a socket pair the loop watches: one write, one wake-up of the loop's thread and one
`recv` of one byte per completion (5,500 a second at 5,000 agents: the write alone was 88 % of
the poller thread's samples). Where the loop's `add_reader` raises NotImplementedError, grpc.aio
instead hands each completion to the loop with `call_soon_threadsafe`, its own fallback for loops
without descriptor watching. uvloop's `call_soon_threadsafe` queues the callback and signals the
loop through libuv's async handle, which writes only when no signal is pending: completions that
arrive while the loop is busy or not yet awake share one wake-up, and none waits (no timer: a
reconnect storm's new calls are taken as fast as they come). The loop returned here refuses
`add_reader` for grpc.aio's wake-up socket only (`hands_over`). grpc.aio keeps that choice for the
whole process (every loop, every channel and server in it), and both ways deliver every
completion on the loop it belongs to.

The threads' CPU policy (`run_as_batch`): the report server's thread and grpc.aio's poller thread
run under SCHED_BATCH. Their weight is unchanged (nice 0, the same share of the CPU); what changes
is that their wake-ups do not preempt the task running on that CPU: a completion, a socket's data
or the batch's timer waits until that task blocks or its slice ends (milliseconds), and more of
them are handled in one turn, with fewer context switches.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from functools import cache
from typing import Any

log = logging.getLogger("lahar.grpc_loop")

# grpcio's completion queue class whose bound method grpc.aio hands to add_reader
GRPC_POLLER_QUEUE = "PollerCompletionQueue"
GRPC_POLLER_TARGET = "_poll_wrapper"  # the poller thread's target: its name ends "(_poll_wrapper)"


def hands_over(callback: Any) -> bool:
    """Whether `callback`, given to add_reader, is grpc.aio's reader of its poller's wake-up socket
    (a functools.partial of PollerCompletionQueue._handle_events), to be refused so that grpc.aio
    hands its completions over with call_soon_threadsafe instead."""
    owner = getattr(getattr(callback, "func", None), "__self__", None)
    return type(owner).__name__ == GRPC_POLLER_QUEUE


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's where installed (refusing grpc.aio's wake-up socket, see
    `hands_over`), asyncio's otherwise (asyncio's call_soon_threadsafe writes a byte per call:
    nothing to gain, so grpc.aio watches its socket as before)."""
    loop_class = _hand_over_loop()
    return asyncio.new_event_loop() if loop_class is None else loop_class()


@cache
def _hand_over_loop() -> type[asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # a platform uvloop does not support
        return None

    class HandOverLoop(uvloop.Loop):
        def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:
            if hands_over(callback):
                raise NotImplementedError("grpc.aio's completions are handed over by call_soon_threadsafe")
            super().add_reader(fd, callback, *args)

    return HandOverLoop


def grpc_poller_threads() -> list[threading.Thread]:
    """grpc.aio's poller threads (one per process once a grpc.aio server or channel exists)."""
    return [thread for thread in threading.enumerate() if thread.name.endswith(f"({GRPC_POLLER_TARGET})")]


def run_as_batch(thread_id: int = 0) -> bool:
    """Put the thread of native id `thread_id` (0: the calling thread) under SCHED_BATCH; True if
    done. A refusal (a platform without it, a seccomp profile) is logged, not raised: the thread
    serves as it did."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None:
        return False
    try:
        os.sched_setscheduler(thread_id, policy, os.sched_param(0))
    except OSError as exc:
        log.info("thread %d: cannot run under SCHED_BATCH: %s", thread_id or threading.get_native_id(), exc)
        return False
    return True
