"""The agent's own threads under the configured scheduling policy (agent/qos/own_threads.py):
the decision, and the real syscall on this kernel."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from lahar.agent.qos import own_threads


@pytest.mark.parametrize(
    ("applied", "wanted", "policy"),
    [
        (None, "normal", None),  # a thread never changed is left as it was started (an operator's chrt stays)
        (None, "idle", os.SCHED_IDLE),
        ("idle", "idle", None),  # once per change, not every cycle
        ("idle", "normal", os.SCHED_OTHER),  # a reload back to normal undoes it
        ("normal", "idle", os.SCHED_IDLE),
        ("normal", "normal", None),
    ],
)
def test_change(applied: str | None, wanted: str, policy: int | None) -> None:
    assert own_threads.change(applied, wanted) == policy


def test_parse_policy_names_the_key() -> None:
    assert own_threads.parse_policy("idle") == "idle"
    with pytest.raises(ValueError, match="agent_cpu_policy: must be one of normal, idle, got 'fifo'"):
        own_threads.parse_policy("fifo")


def in_thread(function: Any) -> Any:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(function()))
    thread.start()
    thread.join(5)
    return result[0]


def test_a_thread_puts_itself_under_sched_idle_and_back() -> None:
    def run() -> tuple[bool, int, bool, bool, int]:
        first = own_threads.hold("idle")
        idle = os.sched_getscheduler(0)
        again = own_threads.hold("idle")
        back = own_threads.hold("normal")
        return first, idle, again, back, os.sched_getscheduler(0)

    assert in_thread(run) == (True, os.SCHED_IDLE, False, True, os.SCHED_OTHER)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # per thread: the caller's own is untouched


def test_a_refused_policy_is_logged_not_raised(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    def refuse(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(own_threads.os, "sched_setscheduler", refuse)
    assert in_thread(lambda: (own_threads.hold("idle"), own_threads.hold("idle"))) == (False, False)
    assert "cannot run under idle" in caplog.text
