"""Events: what every program leaves on the objects it acts on (the agent on the pods it evicts,
the controller on Jobs, the scheduler on Pods and PodGroups). Recording one is best effort: a
failure is logged, never raised, because an Event only informs.

As client-go's EventCorrelator: the same event (object, type, reason, message, source) said again
within DEDUP_WINDOW is not a new Event object; the first one's `count` grows and its
`lastTimestamp` moves (what `kubectl describe` shows as "x3 over 2m").

QueuedEventRecorder sends from threads of its own, as client-go's event broadcaster does from its
sink goroutine: a program that says something on a hot path (the scheduler's "Scheduled" after
every bind) does not wait for the API to store it."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lahar.api import kinds
from lahar.api.kinds import Kind
from lahar.client.errors import KubeError, NotFound

log = logging.getLogger("lahar.client.events")

DEDUP_WINDOW = timedelta(minutes=10)  # client-go's: a repeat after this starts a new Event
DEDUP_CACHE = 4096  # events remembered per recorder (client-go's LRU size)
QUEUE_SIZE = 10_000  # events waiting for a QueuedEventRecorder's senders before `record` waits


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about."""

    kind: Kind
    namespace: str
    name: str
    uid: str = ""


def utc_now() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Events through the API, as `component` (and, for a node agent, from `host`)."""

    def __init__(self, api: Any, component: str, host: str = "", clock: Callable[[], datetime] = utc_now) -> None:
        self.api = api
        self.component = component
        self.host = host
        self.clock = clock
        # (object, type, reason, message) -> (event name, count, last said)
        self._said: OrderedDict[tuple[str, ...], tuple[str, int, datetime]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, about: ObjectRef, event_type: str, reason: str, message: str) -> None:
        self._record_at(about, event_type, reason, message, self.clock())

    def _record_at(self, about: ObjectRef, event_type: str, reason: str, message: str, now: datetime) -> None:
        key = (about.kind.kind, about.namespace, about.name, about.uid, event_type, reason, message)
        with self._lock:
            seen = self._said.get(key)
        if seen is not None and now - seen[2] < DEDUP_WINDOW:
            name, count = seen[0], seen[1] + 1
            try:
                self.api.patch(
                    kinds.EVENT,
                    name,
                    {"count": count, "lastTimestamp": rfc3339(now)},
                    about.namespace or "default",
                )
                self._remember(key, name, count, now)
                return
            except NotFound:
                pass  # expired (the events' time-to-live): say it anew
            except KubeError as exc:
                log.warning(
                    "event %s on %s %s/%s not counted: %s", reason, about.kind.kind, about.namespace, about.name, exc
                )
                return
        created = self._create(about, event_type, reason, message, rfc3339(now))
        if created is not None:
            self._remember(key, created["metadata"]["name"], 1, now)

    def _remember(self, key: tuple[str, ...], name: str, count: int, now: datetime) -> None:
        with self._lock:
            self._said[key] = (name, count, now)
            self._said.move_to_end(key)
            while len(self._said) > DEDUP_CACHE:
                self._said.popitem(last=False)

    def _create(
        self, about: ObjectRef, event_type: str, reason: str, message: str, stamp: str
    ) -> dict[str, Any] | None:
        source = {"component": self.component, **({"host": self.host} if self.host else {})}
        event = {
            "metadata": {"generateName": f"{about.name}.", "namespace": about.namespace or "default"},
            "involvedObject": {
                "apiVersion": about.kind.api_version,
                "kind": about.kind.kind,
                "name": about.name,
                "namespace": about.namespace,
                "uid": about.uid,
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": source,
            "reportingComponent": self.component,
            **({"reportingInstance": self.host} if self.host else {}),
        }
        try:
            created: dict[str, Any] = self.api.create(kinds.EVENT, event, about.namespace or "default")
            return created
        except KubeError as exc:
            log.warning(
                "event %s on %s %s/%s not recorded: %s", reason, about.kind.kind, about.namespace, about.name, exc
            )
            return None


class QueuedEventRecorder(EventRecorder):
    """An EventRecorder whose `record` queues the event and returns; `senders` threads take the
    queued events in order (two senders may finish them out of order: each carries the time it
    was said) and write them, de-duplicated as EventRecorder does. When QUEUE_SIZE events wait,
    `record` waits for room: an event is late rather than lost. `close` sends what is queued
    (within its timeout) and stops the senders; after it, `record` sends on the caller's thread."""

    def __init__(
        self,
        api: Any,
        component: str,
        host: str = "",
        clock: Callable[[], datetime] = utc_now,
        senders: int = 2,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        super().__init__(api, component, host, clock)
        # (object, type, reason, message, when said); None tells a sender to stop.
        self._queue: queue.Queue[tuple[ObjectRef, str, str, str, datetime] | None] = queue.Queue(queue_size)
        self._closed = False
        self._senders = [
            threading.Thread(target=self._send_queued, name=f"{component}-events-{i}", daemon=True)
            for i in range(senders)
        ]
        for sender in self._senders:
            sender.start()

    def record(self, about: ObjectRef, event_type: str, reason: str, message: str) -> None:
        if self._closed:
            super().record(about, event_type, reason, message)
            return
        # The time is taken now: an Event says when it happened, not when it was written.
        self._queue.put((about, event_type, reason, message, self.clock()))

    def _send_queued(self) -> None:
        while (item := self._queue.get()) is not None:
            about, event_type, reason, message, when = item
            try:
                self._record_at(about, event_type, reason, message, when)
            except Exception:  # an Event only informs: a sender must outlive any failure
                log.exception("event %s on %s %s/%s not recorded", reason, about.kind.kind, about.namespace, about.name)
            finally:
                self._queue.task_done()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every event queued so far has been sent (or failed); False on timeout."""
        with self._queue.all_tasks_done:
            return self._queue.all_tasks_done.wait_for(lambda: self._queue.unfinished_tasks == 0, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Send what is queued, then stop the senders (what is left after `timeout` is dropped)."""
        if self._closed:
            return
        self._closed = True
        for _ in self._senders:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for sender in self._senders:
            sender.join(max(deadline - time.monotonic(), 0.0))
        if any(sender.is_alive() for sender in self._senders):
            log.warning("events still queued after %.0fs at shutdown: not all were recorded", timeout)
