"""Events: what every program leaves on the objects it acts on (the agent on the pods it evicts,
the controller on Jobs, the scheduler on Pods and PodGroups). Recording one is best effort: a
failure is logged, never raised, because an Event only informs.

As client-go's EventCorrelator: the same event (object, type, reason, message, source) said again
within DEDUP_WINDOW is not a new Event object; the first one's `count` grows and its
`lastTimestamp` moves (what `kubectl describe` shows as "x3 over 2m")."""

from __future__ import annotations

import logging
import threading
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
        now = self.clock()
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
