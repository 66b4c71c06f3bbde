"""The event loop the report server's thread runs (lahar/grpc_loop.py): uvloop's where installed,
asyncio's otherwise; grpc.aio's completions handed over by call_soon_threadsafe on uvloop's; the
serving threads under SCHED_BATCH (tests/rpc/test_report_stream.py checks that the server answers
alike on both loops, takes a reconnect storm at once and puts its threads under SCHED_BATCH)."""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import sys
import threading
from typing import Any

import pytest

from lahar import grpc_loop
from lahar.grpc_loop import grpc_poller_threads, hands_over, new_event_loop, run_as_batch


def test_the_loop_is_uvloops_where_installed_asyncios_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvloop

    loop = new_event_loop()
    loop.close()
    assert isinstance(loop, uvloop.Loop)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on a platform uvloop does not support
    grpc_loop._hand_over_loop.cache_clear()
    try:
        loop = new_event_loop()
        loop.close()
    finally:
        grpc_loop._hand_over_loop.cache_clear()
    assert isinstance(loop, asyncio.AbstractEventLoop) and not isinstance(loop, uvloop.Loop)


class PollerCompletionQueue:
    """Stands in for grpcio's class of that name: grpc.aio hands add_reader a partial of its
    bound `_handle_events`."""

    def _handle_events(self, loop: Any) -> None:
        pass


def test_only_grpcs_wake_up_reader_is_handed_over() -> None:
    assert hands_over(functools.partial(PollerCompletionQueue()._handle_events, None))
    assert not hands_over(lambda: None)
    assert not hands_over(functools.partial(print, "x"))
    assert not hands_over(PollerCompletionQueue()._handle_events)  # not the partial grpc.aio passes


def test_the_loop_refuses_grpcs_reader_and_watches_any_other() -> None:
    loop = new_event_loop()
    ours, theirs = socket.socketpair()
    try:
        with pytest.raises(NotImplementedError):
            loop.add_reader(ours, functools.partial(PollerCompletionQueue()._handle_events, loop))
        read = loop.create_future()
        loop.add_reader(ours, lambda: read.done() or read.set_result(ours.recv(1)))
        theirs.send(b"1")
        assert loop.run_until_complete(asyncio.wait_for(read, 5)) == b"1"
        loop.remove_reader(ours)
    finally:
        loop.close()
        ours.close()
        theirs.close()


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


def test_grpcs_poller_thread_is_found_by_its_target() -> None:
    stop = threading.Event()
    poller = threading.Thread(target=lambda: stop.wait(), name="Thread-9 (_poll_wrapper)", daemon=True)
    other = threading.Thread(target=lambda: stop.wait(), name="lahar-report-server", daemon=True)
    poller.start()
    other.start()
    try:
        found = grpc_poller_threads()
        assert poller in found and other not in found
    finally:
        stop.set()
        poller.join()
        other.join()
