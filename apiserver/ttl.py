"""Events expire, as kube-apiserver's --event-ttl (default 1 h) makes them: each Event lives `ttl`
seconds after its last write (etcd's lease is renewed by each write), then the server deletes it.
Without this, a busy system grows its database and watch history by every event forever."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from lahar.api import kinds
from lahar.apiserver.store import DELETED, Change, Store

DEFAULT_EVENT_TTL_SECONDS = 3600.0
SWEEP_SECONDS_MAX = 60.0


def _created_at(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


class EventExpiry:
    """Tracks each Event's expiry from the store's changes and deletes the expired ones on a
    sweep every `ttl / 10` seconds (at most a minute), scheduled through `call_at`."""

    def __init__(
        self,
        store: Store,
        remove: Callable[[str, str], object],
        call_at: Callable[[float, Callable[[], None]], None],
        ttl: float = DEFAULT_EVENT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.remove = remove  # (namespace, name): delete the Event
        self.call_at = call_at
        self.ttl = ttl
        self.clock = clock
        self.expired = 0
        self._expiry: dict[tuple[str, str], float] = {}
        now = clock()
        for entry in store.entries(kinds.EVENT):  # Events stored before a restart: from their creation
            meta = entry.obj["metadata"]
            created = _created_at(meta.get("creationTimestamp"))
            self._expiry[(meta.get("namespace", ""), meta["name"])] = (created if created is not None else now) + ttl
        store.subscribe(kinds.EVENT, self._changed)

    @property
    def sweep_seconds(self) -> float:
        return min(self.ttl / 10, SWEEP_SECONDS_MAX)

    def start(self) -> None:
        self.sweep()

    def _changed(self, change: Change) -> None:
        meta = change.entry.obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if change.type == DELETED:
            self._expiry.pop(key, None)
        else:
            self._expiry[key] = self.clock() + self.ttl

    def due(self, now: float) -> list[tuple[str, str]]:
        """The Events whose time is up at `now`."""
        return sorted(key for key, expiry in self._expiry.items() if expiry <= now)

    def sweep(self) -> None:
        """Delete the expired Events, then schedule the next sweep."""
        now = self.clock()
        try:
            for namespace, name in self.due(now):
                if self.store.get(kinds.EVENT, namespace, name) is not None:
                    self.remove(namespace, name)  # may fail (a full disk): the next sweep retries
                    self.expired += 1
                self._expiry.pop((namespace, name), None)
        finally:
            self.call_at(now + self.sweep_seconds, self.sweep)
