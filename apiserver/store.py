"""The embedded API server's object store: SQLite on disk, every object also in memory.

Each write is one SQLite transaction (WAL journal) committed before the server answers, so an
answered 2xx survives a crash of the process. `--fsync full` also survives losing the machine's
power, at the cost of an fsync per write. Reads never touch SQLite: the current objects live in
memory with their encoded JSON, and a history of changes serves watches from a resourceVersion.

The history is bounded by count and by bytes (each change holds its object's JSON): patching a
1 MiB ConfigMap 300 times keeps at most `history_bytes` of it, and a watch from a version the
history dropped answers 410 Gone, as after an etcd compaction. An object is at most
`max_object_bytes` encoded (etcd's default request limit); a write that finds the disk full
raises StorageFullError and changes nothing, in SQLite or in memory.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lahar.api.kinds import Kind

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"

Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped kinds


def resource_key(kind: Kind) -> str:
    return f"{kind.group}/{kind.plural}"


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored object and its JSON; both are shared and must never be mutated."""

    obj: dict[str, Any]
    raw: bytes
    rv: int


@dataclass(frozen=True, slots=True)
class Change:
    rv: int
    resource: str
    type: str
    entry: Entry
    previous: Entry | None  # the object before the change (selector transitions need it)


class TooOldError(Exception):
    """The requested resourceVersion is older than the history kept."""


class ObjectTooLargeError(ValueError):
    """An object whose encoded JSON is past the store's limit; nothing was written."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the object is {size} bytes encoded, at most {limit}")
        self.size = size


class StorageFullError(OSError):
    """SQLite could not write for want of disk space; nothing was written."""


DEFAULT_HISTORY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_OBJECT_BYTES = 3 * 1024 * 1024 // 2  # etcd's default --max-request-bytes


Listener = Callable[[Change], None]


class Store:
    def __init__(
        self,
        path: Path,
        history_size: int = 200_000,
        fsync: str = "normal",
        history_bytes: int = DEFAULT_HISTORY_BYTES,
        max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
    ) -> None:
        _private_file(path)
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        for journal in ("-wal", "-shm"):  # SQLite gives them the database's mode; older ones may differ
            _private_file(path.with_name(path.name + journal), create=False)
        self._db.execute(f"PRAGMA synchronous={'FULL' if fsync == 'full' else 'NORMAL'}")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS objects (resource TEXT NOT NULL, namespace TEXT NOT NULL, "
            "name TEXT NOT NULL, rv INTEGER NOT NULL, body BLOB NOT NULL, "
            "PRIMARY KEY (resource, namespace, name)) WITHOUT ROWID"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        self._objects: dict[str, dict[Key, Entry]] = {}
        self._history: deque[Change] = deque()
        self._history_size = history_size
        self._history_bytes_limit = history_bytes
        self.history_bytes = 0  # the encoded size of the objects the history holds
        self.max_object_bytes = max_object_bytes
        self._listeners: dict[str, set[Listener]] = {}
        # owner uid -> the objects whose ownerReferences name it (garbage collection's index)
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}
        self.revision = 0
        self._load()
        # Watches may resume from any version at or after this one.
        self._oldest_resumable = self.revision

    def _load(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key='revision'").fetchone()
        self.revision = row[0] if row else 0
        for resource, namespace, name, rv, body in self._db.execute(
            "SELECT resource, namespace, name, rv, body FROM objects"
        ):
            raw = bytes(body)
            entry = Entry(json.loads(raw), raw, rv)
            self._objects.setdefault(resource, {})[(namespace, name)] = entry
            self._index_owners(resource, (namespace, name), None, entry)

    def close(self) -> None:
        self._db.close()

    # -- reads -----------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str, name: str) -> Entry | None:
        return self._objects.get(resource_key(kind), {}).get((namespace, name))

    def entries(self, kind: Kind, namespace: str | None = None) -> Iterator[Entry]:
        """Objects of a kind, in (namespace, name) order, optionally in one namespace."""
        table = self._objects.get(resource_key(kind), {})
        for key in sorted(table):
            if namespace is None or key[0] == namespace:
                yield table[key]

    def count(self, kind: Kind) -> int:
        return len(self._objects.get(resource_key(kind), {}))

    # -- writes ----------------------------------------------------------------------------------

    def next_revision(self) -> int:
        return self.revision + 1

    def put(self, kind: Kind, obj: dict[str, Any]) -> Entry:
        """Create or replace an object. Its metadata.resourceVersion must already be next_revision()."""
        rv = self.next_revision()
        meta = obj["metadata"]
        assert meta["resourceVersion"] == str(rv), "caller must stamp the next revision"
        key = (meta.get("namespace", "") if kind.namespaced else "", meta["name"])
        resource = resource_key(kind)
        entry = Entry(obj, encode(obj), rv)
        if len(entry.raw) > self.max_object_bytes:
            raise ObjectTooLargeError(len(entry.raw), self.max_object_bytes)
        self._write("INSERT OR REPLACE INTO objects VALUES (?,?,?,?,?)", (resource, key[0], key[1], rv, entry.raw), rv)
        table = self._objects.setdefault(resource, {})
        previous = table.get(key)
        table[key] = entry
        self._index_owners(resource, key, previous, entry)
        self._publish(Change(rv, resource, MODIFIED if previous else ADDED, entry, previous))
        return entry

    def remove(self, kind: Kind, namespace: str, name: str) -> Entry:
        """Delete an object; the DELETED event carries it with a new resourceVersion, as in k8s."""
        resource = resource_key(kind)
        key = (namespace if kind.namespaced else "", name)
        previous = self._objects[resource][key]
        rv = self.next_revision()
        obj = dict(previous.obj)
        obj["metadata"] = {**previous.obj["metadata"], "resourceVersion": str(rv)}
        self._write("DELETE FROM objects WHERE resource=? AND namespace=? AND name=?", (resource, *key), rv)
        del self._objects[resource][key]
        self._index_owners(resource, key, previous, None)
        entry = Entry(obj, encode(obj), rv)
        self._publish(Change(rv, resource, DELETED, entry, previous))
        return entry

    def _write(self, sql: str, args: tuple[Any, ...], rv: int) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(sql, args)
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('revision', ?)", (rv,))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            if _disk_full(exc):
                raise StorageFullError(str(exc)) from exc
            raise
        self.revision = rv

    def dependents(self, owner_uid: str) -> list[tuple[str, str, str]]:
        """(resource, namespace, name) of the objects whose ownerReferences name owner_uid."""
        return sorted(self._dependents.get(owner_uid, ()))

    def _index_owners(self, resource: str, key: Key, old: Entry | None, new: Entry | None) -> None:
        for entry, add in ((old, False), (new, True)):
            for ref in (entry.obj["metadata"].get("ownerReferences") or []) if entry else []:
                uid = ref.get("uid") if isinstance(ref, dict) else None
                if not uid:
                    continue
                dependents = self._dependents.setdefault(uid, set())
                if add:
                    dependents.add((resource, *key))
                else:
                    dependents.discard((resource, *key))
                    if not dependents:
                        del self._dependents[uid]

    # -- watch -----------------------------------------------------------------------------------

    def _publish(self, change: Change) -> None:
        self._history.append(change)
        self.history_bytes += len(change.entry.raw)
        while len(self._history) > self._history_size or (
            self.history_bytes > self._history_bytes_limit and len(self._history) > 1
        ):
            dropped = self._history.popleft()
            self.history_bytes -= len(dropped.entry.raw)
            self._oldest_resumable = dropped.rv  # a watch from before this version missed changes
        for listener in list(self._listeners.get(change.resource, ())):
            listener(change)

    def subscribe(self, kind: Kind, listener: Listener) -> Callable[[], None]:
        """Call listener for every later change of this kind; returns the unsubscribe function."""
        listeners = self._listeners.setdefault(resource_key(kind), set())
        listeners.add(listener)
        return lambda: listeners.discard(listener)

    def changes_since(self, kind: Kind, rv: int) -> list[Change]:
        """Changes of a kind after resourceVersion rv; TooOldError when history no longer covers it."""
        if rv < self._oldest_resumable:
            raise TooOldError(f"too old resource version: {rv} ({self._oldest_resumable})")
        if rv > self.revision:
            # A version this store never issued (its data was replaced): the watcher must re-list.
            raise TooOldError(f"too large resource version: {rv}, current: {self.revision}")
        resource = resource_key(kind)
        found: list[Change] = []
        for change in reversed(self._history):
            if change.rv <= rv:
                break
            if change.resource == resource:
                found.append(change)
        found.reverse()
        return found


def _disk_full(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_FULL: "database or disk is full"."""
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc)


def _private_file(path: Path, create: bool = True) -> None:
    """The file readable by its owner alone (0600): the database holds Secrets."""
    if create and not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    if path.exists() and path.stat().st_mode & 0o077:
        path.chmod(0o600)
