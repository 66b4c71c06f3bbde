"""The controllers' work queue: object keys to reconcile, each at most once in the queue,
optionally after a delay (client-go's rate-limited queue, without the rate limit)."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from lahar.client.errors import KubeError, NotFound

log = logging.getLogger("lahar.controller")

Key = tuple[str, str]  # (namespace, name); ("", name) for a cluster-scoped object (a queue)


class WorkQueue:
    """Job keys to reconcile, for any number of workers: each key at most once in the queue and
    never handed to two workers at once (client-go's workqueue). `get` moves a key from the
    dirty set (wanted) to the processing set; the worker calls `done(key)` when its reconcile
    ends. A key added while it is being processed is only marked dirty, and queued again by
    `done`, so the change is reconciled after the current pass rather than beside it."""

    def __init__(self) -> None:
        self._ready: deque[Key] = deque()
        self._dirty: set[Key] = set()  # wanted: queued, or to queue when its processing is done
        self._processing: set[Key] = set()  # handed to a worker, not yet done
        self._delayed: list[tuple[float, Key]] = []
        self._cond = threading.Condition()
        self._closed = False

    def add(self, key: Key, after: float = 0.0) -> None:
        with self._cond:
            if after > 0:
                heapq.heappush(self._delayed, (time.monotonic() + after, key))
            else:
                self._mark_dirty(key)
            self._cond.notify()

    def get(self, timeout: float = 0.5) -> Key | None:
        """The next key, now in processing (call `done` with it), or None after `timeout`."""
        with self._cond:
            self._promote()
            if not self._ready and not self._closed:
                wait = timeout if not self._delayed else min(timeout, max(self._delayed[0][0] - time.monotonic(), 0))
                self._cond.wait(wait)
                self._promote()
            if not self._ready:
                return None
            key = self._ready.popleft()
            self._dirty.discard(key)
            self._processing.add(key)
            return key

    def done(self, key: Key) -> None:
        """The worker finished `key`: queue it again if it was added meanwhile."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._ready.append(key)
                self._cond.notify()

    def __len__(self) -> int:
        """Keys waiting for a worker (not those in processing or delayed)."""
        with self._cond:
            return len(self._ready)

    def _mark_dirty(self, key: Key) -> None:
        """Under _cond: want `key` reconciled; queue it unless it is queued or being processed."""
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.append(key)

    def _promote(self) -> None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, key = heapq.heappop(self._delayed)
            self._mark_dirty(key)

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
            finally:
                self.queue.done(key)


def still_there(api: Any, kind: Any, obj: Mapping[str, Any]) -> bool:
    """Whether an owner still exists, asked of the API: the cache may not have seen its deletion
    yet, and dependents made for a deleted owner would outlive it (the API's garbage collector
    removed its dependents when it was deleted, not the ones made after)."""
    meta = obj["metadata"]
    try:
        live = api.get(kind, meta["name"], meta.get("namespace", ""))
    except NotFound:
        return False
    return bool(live["metadata"]["uid"] == meta.get("uid") and not live["metadata"].get("deletionTimestamp"))


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")
