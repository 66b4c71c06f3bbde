"""The event loop for a thread that serves grpc.aio: uvloop's where it is installed, asyncio's
otherwise.

uvloop runs the loop on libuv, its machinery in C: asyncio's selector, handles and turns of the
loop are Python, and at the report server's 5,000 reports a second (a completion, a turn and a
task step for each) they were a large part of the server's thread. Measured with `lahar bench
ingest` at 5,000 agents (docs/performance.md, "Report ingest"): the report server fell from 0.673
to 0.589 core on uvloop, a bare grpc.aio server from 0.450 to 0.412 (one round, one hold).
uvloop is a dependency wherever it is supported; elsewhere the server runs as before."""

from __future__ import annotations

import asyncio


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's where installed, asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:  # a platform uvloop does not support
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
