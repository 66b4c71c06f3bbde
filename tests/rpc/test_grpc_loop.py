"""The event loop the report server's thread runs: uvloop's where installed, asyncio's otherwise
(tests/rpc/test_report_stream.py checks that the server answers alike on both)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from lahar.grpc_loop import new_event_loop


def test_the_loop_is_uvloops_where_installed_asyncios_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvloop

    loop = new_event_loop()
    loop.close()
    assert isinstance(loop, uvloop.Loop)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on a platform uvloop does not support
    loop = new_event_loop()
    loop.close()
    assert isinstance(loop, asyncio.AbstractEventLoop) and not isinstance(loop, uvloop.Loop)
