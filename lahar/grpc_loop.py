"""The CPU policy of a thread that serves gRPC (`run_as_batch`): the report server's thread runs
under SCHED_BATCH. Its weight is unchanged (nice 0, the same share of the CPU); what changes is
that its wake-ups do not preempt the task running on that CPU: a socket's data or the batch's
deadline waits until that task blocks or its slice ends (milliseconds), and more of them are
handled per turn, with fewer context switches (docs/performance.md, "Report ingest").

The report server served on grpc.aio on uvloop's loop until it moved to gRPC's completion queue
(scheduler/report_server.py); `lahar bench ingest --baseline aio` still measures a bare grpc.aio
server on uvloop (bench/ingest.py, `new_event_loop`).
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("lahar.grpc_loop")


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
