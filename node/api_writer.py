"""Writes to the API off the runtime's own loop, latest first: kubelet's status manager in small.

Each write has a key (a pod's uid, a node's name). A newer write for a key replaces one not yet
sent, so a pod that changed three times while the API was slow costs one request; writes of one
key never run concurrently, so they land in order. A write that finds the API unreachable is
retried with backoff (unless a newer one came meanwhile); one the API refuses (the pod is gone,
a uid precondition failed) is dropped with a debug line: the object moved on without us."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

from lahar.client.errors import ApiUnavailable, KubeError
from lahar.client.informer import Backoff

log = logging.getLogger("lahar.node.api_writer")

Write = Callable[[], object]


class ApiWriter:
    def __init__(self, name: str, workers: int = 1, backoff: Backoff | None = None) -> None:
        self.name = name
        self.workers = workers
        self.backoff = backoff or Backoff(0.5, 10.0)
        self._pending: dict[Hashable, Write] = {}  # insertion-ordered: oldest first
        self._not_before: dict[Hashable, float] = {}  # keys waiting out a retry delay
        self._in_flight: set[Hashable] = set()
        self._changed = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self.written = 0
        self.failed = 0

    def start(self) -> None:
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{self.name}-writer-{i}", daemon=True)
            for i in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, key: Hashable, write: Write) -> None:
        with self._changed:
            self._pending.pop(key, None)  # re-inserted last: a newer write waits its turn
            self._pending[key] = write
            self._not_before.pop(key, None)
            self._changed.notify()

    def flush(self, timeout: float) -> bool:
        """Wait until every write submitted so far was sent (or dropped); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._pending or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def stop(self, flush_timeout: float = 0.0) -> None:
        """Stop the workers, after up to `flush_timeout` seconds of sending what is pending."""
        if flush_timeout > 0:
            self.flush(flush_timeout)
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _next(self) -> tuple[Hashable, Write] | None:
        """The oldest write that may go now, waiting for one; None once stopping."""
        with self._changed:
            while not self._stopping:
                now = time.monotonic()
                wake_at = None
                for key in self._pending:
                    if key in self._in_flight:
                        continue
                    ready_at = self._not_before.get(key, now)
                    if ready_at <= now:
                        self._not_before.pop(key, None)
                        self._in_flight.add(key)
                        return key, self._pending.pop(key)
                    wake_at = ready_at if wake_at is None else min(wake_at, ready_at)
                self._changed.wait(None if wake_at is None else wake_at - now)
            return None

    def _work(self) -> None:
        while (item := self._next()) is not None:
            key, write = item
            retry = False
            try:
                write()
                self.written += 1
                self.backoff.reset()
            except ApiUnavailable as exc:
                retry = True
                log.warning("%s: API unavailable writing %s (%s); retrying", self.name, key, exc.message)
            except KubeError as exc:
                self.failed += 1
                log.debug("%s: write for %s refused: %s", self.name, key, exc)
            except Exception:  # a bug in one write must not stop the others
                self.failed += 1
                log.exception("%s: write for %s failed", self.name, key)
            with self._changed:
                self._in_flight.discard(key)
                if retry and key not in self._pending:
                    self._pending[key] = write
                    self._not_before[key] = time.monotonic() + self.backoff.next_delay()
                self._changed.notify_all()
