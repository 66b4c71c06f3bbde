"""The bench's grpc.aio baseline loop (bench/ingest.py): uvloop's where installed, asyncio's
otherwise; and (lahar/grpc_loop.py) a serving thread under SCHED_BATCH (tests/rpc/test_report_stream.py checks that the
report server's thread runs so and takes a reconnect storm at once)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import Any

import pytest

from lahar.bench.ingest import new_event_loop
from lahar.grpc_loop import run_as_batch


def test_the_loop_is_uvloops_where_installed_asyncios_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvloop

    loop = new_event_loop()
    loop.close()
    assert isinstance(loop, uvloop.Loop)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on a platform uvloop does not support
    loop = new_event_loop()
    loop.close()
    assert isinstance(loop, asyncio.AbstractEventLoop) and not isinstance(loop, uvloop.Loop)


def in_a_thread(function: Any) -> Any:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(function()))
    thread.start()
    thread.join()
    return result[0]


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_run_as_batch_puts_the_calling_thread_under_sched_batch() -> None:
    assert in_a_thread(lambda: (run_as_batch(), os.sched_getscheduler(0))) == (True, os.SCHED_BATCH)
    assert os.sched_getscheduler(0) != os.SCHED_BATCH, "only that thread"


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_a_refused_policy_is_logged_and_the_thread_serves_as_before(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*_: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with caplog.at_level("INFO", logger="lahar.grpc_loop"):
        assert run_as_batch() is False
    assert "cannot run under SCHED_BATCH" in caplog.text
