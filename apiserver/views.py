"""Kinds served from another kind's storage, as kube-apiserver serves events.k8s.io/v1 Events
from the core/v1 Events it stores: one object, two shapes. Writes through either API change the
same stored object; lists and watches of either see every object, in its own shape.

:class:`ViewStore` is the store as the registry and the HTTP layer see it: objects of a view
kind are converted on the way in and out, everything else passes through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from lahar.api import kinds
from lahar.api.kinds import Kind
from lahar.apiserver.store import Change, Entry, Listener, Store, encode

# events.k8s.io/v1 field <- core/v1 field (k8s.io/kubernetes pkg/apis/events/v1 conversion).
EVENT_FIELDS: Final = (
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("action", "action"),
    ("reason", "reason"),
    ("regarding", "involvedObject"),
    ("related", "related"),
    ("note", "message"),
    ("type", "type"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)
# Fields Go's encoder writes even when empty (structs, and times that encode as null).
ALWAYS_WRITTEN: Final[dict[str, Any]] = {
    "eventTime": None,
    "regarding": {},
    "deprecatedSource": {},
    "deprecatedFirstTimestamp": None,
    "deprecatedLastTimestamp": None,
}


def _series(series: Any) -> Any:
    """A series as both versions keep it: count and lastObservedTime (core's old `state` is gone)."""
    if not isinstance(series, dict):
        return series
    return {k: series[k] for k in ("count", "lastObservedTime") if k in series}


def event_from_core(core: dict[str, Any]) -> dict[str, Any]:
    """A stored core/v1 Event as events.k8s.io/v1 shows it."""
    event: dict[str, Any] = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": core.get("metadata", {})}
    for field, core_field in EVENT_FIELDS:
        value = core.get(core_field)
        if field == "series":
            value = _series(value)
        if value not in (None, "", 0):
            event[field] = value
        elif field in ALWAYS_WRITTEN:
            event[field] = ALWAYS_WRITTEN[field]
    return event


def event_to_core(event: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event as the core/v1 Event it is stored as."""
    core: dict[str, Any] = {"apiVersion": "v1", "kind": "Event", "metadata": event.get("metadata", {})}
    for field, core_field in EVENT_FIELDS:
        value = event.get(field)
        if field == "series":
            value = _series(value)
        if value not in (None, "", {}):
            core[core_field] = value
    return core


@dataclass(frozen=True)
class View:
    stored: Kind
    from_stored: Callable[[dict[str, Any]], dict[str, Any]]
    to_stored: Callable[[dict[str, Any]], dict[str, Any]]

    def entry(self, entry: Entry) -> Entry:
        obj = self.from_stored(entry.obj)
        return Entry(obj, encode(obj), entry.rv)

    def change(self, change: Change) -> Change:
        previous = self.entry(change.previous) if change.previous is not None else None
        return Change(change.rv, change.resource, change.type, self.entry(change.entry), previous)


VIEWS: Final[dict[Kind, View]] = {kinds.EVENTS_V1: View(kinds.EVENT, event_from_core, event_to_core)}


class ViewStore:
    """The store with each view kind read and written in its own shape."""

    def __init__(self, store: Store) -> None:
        self.raw = store

    @property
    def revision(self) -> int:
        return self.raw.revision

    def next_revision(self) -> int:
        return self.raw.next_revision()

    def dependents(self, owner_uid: str) -> list[tuple[str, str, str]]:
        return self.raw.dependents(owner_uid)

    def get(self, kind: Kind, namespace: str, name: str) -> Entry | None:
        view = VIEWS.get(kind)
        entry = self.raw.get(view.stored if view else kind, namespace, name)
        return view.entry(entry) if view and entry else entry

    def entries(self, kind: Kind, namespace: str | None = None) -> Iterator[Entry]:
        view = VIEWS.get(kind)
        for entry in self.raw.entries(view.stored if view else kind, namespace):
            yield view.entry(entry) if view else entry

    def count(self, kind: Kind) -> int:
        view = VIEWS.get(kind)
        return self.raw.count(view.stored if view else kind)

    def put(self, kind: Kind, obj: dict[str, Any]) -> Entry:
        view = VIEWS.get(kind)
        if view is None:
            return self.raw.put(kind, obj)
        return view.entry(self.raw.put(view.stored, view.to_stored(obj)))

    def remove(self, kind: Kind, namespace: str, name: str) -> Entry:
        view = VIEWS.get(kind)
        if view is None:
            return self.raw.remove(kind, namespace, name)
        return view.entry(self.raw.remove(view.stored, namespace, name))

    def subscribe(self, kind: Kind, listener: Listener) -> Callable[[], None]:
        view = VIEWS.get(kind)
        if view is None:
            return self.raw.subscribe(kind, listener)
        return self.raw.subscribe(view.stored, lambda change: listener(view.change(change)))

    def changes_since(self, kind: Kind, rv: int) -> list[Change]:
        view = VIEWS.get(kind)
        if view is None:
            return self.raw.changes_since(kind, rv)
        return [view.change(c) for c in self.raw.changes_since(view.stored, rv)]
