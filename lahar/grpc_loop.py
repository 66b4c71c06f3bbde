"""The event loop for a thread that serves grpc.aio: uvloop's where it is installed, asyncio's
otherwise; and the CPU policy of a thread that serves gRPC.

uvloop runs the loop on libuv, its machinery in C: asyncio's selector, handles and turns of the
loop are Python, and at 5,000 reports a second (a completion, a turn and a task step for each)
they were a large part of a grpc.aio server's thread. Measured with `lahar bench ingest` at 5,000
agents (docs/performance.md, "Report ingest"): the report server, when it served on grpc.aio, fell
from 0.673 to 0.589 core on uvloop, a bare grpc.aio server from 0.450 to 0.412 (one round, one
hold). The report server now serves on gRPC's completion queue from a thread of its own (no event
loop); `lahar bench ingest --baseline aio` still measures a bare grpc.aio server on this loop.

The threads' CPU policy (`run_as_batch`): the report server's thread runs under SCHED_BATCH. Its
weight is unchanged (nice 0, the same share of the CPU); what changes is that its wake-ups do not
preempt the task running on that CPU: a socket's data or the batch's deadline waits until that
task blocks or its slice ends (milliseconds), and more of them are handled per turn, with fewer
context switches (docs/performance.md, "Report ingest").
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading

log = logging.getLogger("lahar.grpc_loop")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's where installed, asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:  # a platform uvloop does not support
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


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
