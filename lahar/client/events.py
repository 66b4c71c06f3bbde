"""Events: what every program leaves on the objects it acts on (the agent on the pods it evicts,
the controller on Jobs, the scheduler on Pods and PodGroups). Recording one is best effort: a
failure is logged, never raised, because an Event only informs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lahar.api import kinds
from lahar.api.kinds import Kind
from lahar.client.errors import KubeError

log = logging.getLogger("lahar.client.events")


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

    def record(self, about: ObjectRef, event_type: str, reason: str, message: str) -> None:
        stamp = rfc3339(self.clock())
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
            self.api.create(kinds.EVENT, event, about.namespace or "default")
        except KubeError as exc:
            log.warning(
                "event %s on %s %s/%s not recorded: %s", reason, about.kind.kind, about.namespace, about.name, exc
            )
