"""The event loop for a thread that serves grpc.aio: uvloop's where it is installed, asyncio's
otherwise; and the CPU policy of the threads that serve.

uvloop runs the loop on libuv, its machinery in C: asyncio's selector, handles and turns of the
loop are Python, and at the report server's 5,000 reports a second (a completion, a turn and a
task step for each) they were a large part of the server's thread. Measured with `lahar bench
ingest` at 5,000 agents (docs/performance.md, "Report ingest"): the report server fell from 0.673
to 0.589 core on uvloop, a bare grpc.aio server from 0.450 to 0.412 (one round, one hold).
uvloop is a dependency wherever it is supported; elsewhere the server runs as before.

The threads' CPU policy (`run_as_batch`): the report server's thread and grpc.aio's poller thread
(which reads the sockets and wakes the loop's thread once per completion) run under SCHED_BATCH.
Their weight is unchanged (nice 0, the same share of the CPU); what changes is that their
wake-ups do not preempt the task running on that CPU: a completion, a socket's data or the
batch's timer waits until that task blocks or its slice ends (milliseconds), and more of them are
handled per turn, with fewer context switches (docs/performance.md, "Report ingest").
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading

log = logging.getLogger("lahar.grpc_loop")

GRPC_POLLER_TARGET = "_poll_wrapper"  # grpc.aio's poller thread's target: its name ends "(_poll_wrapper)"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's where installed, asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:  # a platform uvloop does not support
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


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
