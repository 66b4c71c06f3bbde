"""The work queue's guarantee to several workers: one key is never handed to two at once, a key
added while it is processed is reconciled again after, and each key is queued once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from lahar.controller.controller import JobController
from lahar.controller.workqueue import Key, WorkQueue
from tests.support import wait_for


def test_a_key_added_while_processed_waits_for_done() -> None:
    queue = WorkQueue()
    queue.add(("team", "a"))
    assert queue.get(timeout=0.1) == ("team", "a")
    queue.add(("team", "a"))  # changed while a worker has it
    queue.add(("team", "a"))
    assert queue.get(timeout=0.1) is None  # not to a second worker
    queue.done(("team", "a"))
    assert queue.get(timeout=0.1) == ("team", "a")  # once more, after the first pass
    queue.done(("team", "a"))
    assert queue.get(timeout=0.1) is None


def test_a_delayed_key_due_during_processing_waits_for_done() -> None:
    queue = WorkQueue()
    queue.add(("team", "a"))
    assert queue.get(timeout=0.1) == ("team", "a")
    queue.add(("team", "a"), after=0.01)
    time.sleep(0.05)
    assert queue.get(timeout=0.1) is None
    queue.done(("team", "a"))
    assert queue.get(timeout=0.1) == ("team", "a")


def test_workers_never_share_a_key_and_every_change_is_seen() -> None:
    """8 workers on 5 keys added over and over: a key in two workers at once fails the test, and
    each key's last add is followed by a pass that began after it."""
    queue = WorkQueue()
    keys: list[Key] = [("team", f"job-{n}") for n in range(5)]
    lock = threading.Lock()
    in_flight: Counter[Key] = Counter()
    overlaps: list[Key] = []
    last_added: dict[Key, float] = {}
    last_started: dict[Key, float] = {}
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            key = queue.get(timeout=0.05)
            if key is None:
                continue
            with lock:
                in_flight[key] += 1
                if in_flight[key] > 1:
                    overlaps.append(key)
                last_started[key] = time.monotonic()
            time.sleep(0.001)  # a reconcile that waits on the API
            with lock:
                in_flight[key] -= 1
            queue.done(key)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(8)]
    for worker in workers:
        worker.start()
    try:
        for round_ in range(400):
            key = keys[round_ % len(keys)]
            with lock:
                last_added[key] = time.monotonic()
            queue.add(key)
        wait_for(
            lambda: all(last_started.get(k, 0) >= last_added[k] for k in keys) and not sum(in_flight.values()),
            timeout=10,
            what="every key reconciled after its last change",
        )
    finally:
        stop.set()
        for worker in workers:
            worker.join(5)
    assert overlaps == []


def test_the_controller_runs_its_workers_one_key_each() -> None:
    """JobController's workers, with a reconcile that records overlap: several at once, never
    on one key."""
    lock = threading.Lock()
    running: Counter[Key] = Counter()
    overlaps: list[Key] = []
    peak = 0
    done: Counter[Key] = Counter()

    def reconcile(key: Key) -> Any:
        nonlocal peak
        with lock:
            running[key] += 1
            if running[key] > 1:
                overlaps.append(key)
            peak = max(peak, sum(running.values()))
        time.sleep(0.01)
        with lock:
            running[key] -= 1
            done[key] += 1

    controller = JobController(None, workers=4)  # type: ignore[arg-type]  # no API: informers never start
    controller.reconcile = reconcile  # type: ignore[method-assign]
    controller.start_workers()
    try:
        for _ in range(20):
            for n in range(8):
                controller.queue.add(("team", f"job-{n}"))
        wait_for(lambda: len(done) == 8 and not sum(running.values()), timeout=10, what="all keys reconciled")
    finally:
        controller._stop.set()
        controller.queue.close()
    assert overlaps == []
    assert peak > 1  # the workers did run at once
    assert len(controller._workers) == 4


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="workers must be at least 1"):
        JobController(None, workers=0)  # type: ignore[arg-type]
