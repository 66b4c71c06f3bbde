"""The controllers' work queue: object keys to reconcile, each at most once in the queue,
optionally after a delay (client-go's rate-limited queue, without the rate limit)."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from lahar.client.errors import KubeError

log = logging.getLogger("lahar.controller")

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


class ReconcileLoop:
    """What a small controller shares: informers started and synced together, one worker thread
    taking keys off a WorkQueue and calling `reconcile(key)`, retried after a KubeError (1 s)
    or a bug (5 s, logged) so one bad object does not stop the others."""

    name = "controller"

    def __init__(self) -> None:
        self.queue = WorkQueue()
        self.informers: list[Any] = []
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None

    def reconcile(self, key: Key) -> object:
        raise NotImplementedError

    def start(self, sync_timeout: float = 30.0) -> None:
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            informer.wait_for_sync(sync_timeout)
        self._worker = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._worker.start()

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        if self._worker is not None:
            self._worker.join(10)
        for informer in self.informers:
            informer.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get()
            if key is None:
                continue
            try:
                self.reconcile(key)
            except KubeError as exc:
                log.warning("%s %s/%s: %s; retrying", self.name, key[0], key[1], exc)
                self.queue.add(key, after=1.0)
            except Exception:  # a bug in one object must not stop the others
                log.exception("%s %s/%s failed", self.name, *key)
                self.queue.add(key, after=5.0)


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")
