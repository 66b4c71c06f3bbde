"""The controllers' work queue: object keys to reconcile, each at most once in the queue,
optionally after a delay (client-go's rate-limited queue, without the rate limit)."""

from __future__ import annotations

import heapq
import threading
import time

Key = tuple[str, str]  # (namespace, name); ("", name) for a cluster-scoped object (a queue)


class WorkQueue:
    """Job keys to reconcile: each key at most once in the queue, optionally after a delay."""

    def __init__(self) -> None:
        self._ready: list[Key] = []
        self._queued: set[Key] = set()
        self._delayed: list[tuple[float, Key]] = []
        self._cond = threading.Condition()
        self._closed = False

    def add(self, key: Key, after: float = 0.0) -> None:
        with self._cond:
            if after > 0:
                heapq.heappush(self._delayed, (time.monotonic() + after, key))
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
            self._cond.notify()

    def get(self, timeout: float = 0.5) -> Key | None:
        with self._cond:
            self._promote()
            if not self._ready and not self._closed:
                wait = timeout if not self._delayed else min(timeout, max(self._delayed[0][0] - time.monotonic(), 0))
                self._cond.wait(wait)
                self._promote()
            if not self._ready:
                return None
            key = self._ready.pop(0)
            self._queued.discard(key)
            return key

    def _promote(self) -> None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, key = heapq.heappop(self._delayed)
            if key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
