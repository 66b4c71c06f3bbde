"""Informer: a local cache of one kind kept current by list-then-watch, with event handlers.

The cycle, as client-go's reflector runs it:

- list the collection (paginated) and reconcile the cache against it, then watch from the list's
  resourceVersion with bookmarks, recording the version of every event and bookmark;
- a watch that ends normally (its timeoutSeconds) is reopened from the last version seen;
- a watch answered 410 Gone (history no longer covers that version) means a re-list;
- an API that cannot be reached, or a connection that breaks, is retried with capped exponential
  backoff and jitter; the cache is kept meanwhile, and the first attempt that reaches the API again
  re-lists (a restarted embedded server has lost its watch history anyway).

A re-list fires handlers for the differences only: objects new to the cache, objects whose
resourceVersion changed, and objects gone from the API. Handlers run one at a time on the
informer's thread; an exception in one is logged and the informer carries on. The objects handed
to handlers and returned by get()/list() are the cache's own: read them, never mutate them.

`stop()` keeps the cache and the last resourceVersion; a later `start()` resumes the watch from
there (re-listing only if the server no longer has that version).
"""

from __future__ import annotations

import builtins
import logging
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lahar.api.kinds import Kind
from lahar.client.api import KubeApi, Obj, WatchStream
from lahar.client.errors import ApiUnavailable, Gone, KubeError

log = logging.getLogger("lahar.client.informer")

Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped kinds
AddHandler = Callable[[Obj], None]
UpdateHandler = Callable[[Obj, Obj], None]
DeleteHandler = Callable[[Obj], None]
# An index function (client-go's IndexFunc): the values an object is found under.
Indexer = Callable[[Obj], Iterable[str]]

ADDED, MODIFIED, DELETED, BOOKMARK = "ADDED", "MODIFIED", "DELETED", "BOOKMARK"
DEFAULT_WATCH_TIMEOUT = 300  # seconds; each watch asks for between this and twice this (spreads reconnects)
DEFAULT_PAGE_SIZE = 500


def object_key(obj: Obj) -> Key:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata.get("name", "")


def resource_version_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def is_newer(version: str, than: str) -> bool:
    """Whether an event's version is past the cached one. A paginated list of the embedded server is
    not a snapshot (later pages may be newer than the list's version), so the watch that follows
    can replay changes the cache already holds. Versions are compared as numbers where they are
    (etcd's and the embedded server's are); opaque ones only as different."""
    try:
        return int(version) > int(than)
    except ValueError:
        return version != than


# -- standard indexes (Informer.add_index) --------------------------------------------------------


def by_namespace(obj: Obj) -> tuple[str, ...]:
    return ((obj.get("metadata") or {}).get("namespace") or "",)


def by_owner(obj: Obj) -> tuple[str, ...]:
    """The uids of the object's owners (ownerReferences)."""
    return tuple(ref["uid"] for ref in (obj.get("metadata") or {}).get("ownerReferences") or () if ref.get("uid"))


def by_node(obj: Obj) -> tuple[str, ...]:
    """A pod's node (spec.nodeName), once bound."""
    node = (obj.get("spec") or {}).get("nodeName")
    return (node,) if node else ()


def by_label(key: str) -> Indexer:
    """ "<namespace>/<value of label `key`>", e.g. a Volcano job's pods by their job-name label."""

    def index(obj: Obj) -> tuple[str, ...]:
        metadata = obj.get("metadata") or {}
        value = (metadata.get("labels") or {}).get(key)
        return (f"{metadata.get('namespace') or ''}/{value}",) if value is not None else ()

    return index


@dataclass(frozen=True)
class EventHandler:
    on_add: AddHandler | None = None
    on_update: UpdateHandler | None = None
    on_delete: DeleteHandler | None = None


class Backoff:
    """Capped exponential delays with jitter: initial, 2x, 4x, ... up to cap, each scaled by 0.5-1.0
    so that many clients do not come back at the same instant."""

    def __init__(self, initial: float = 0.2, cap: float = 5.0) -> None:
        self.initial = initial
        self.cap = cap
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.cap)
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._next = self.initial


class Informer:
    def __init__(
        self,
        kind: Kind,
        api: KubeApi,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        *,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
        on_change: AddHandler | None = None,
        watch_timeout: int = DEFAULT_WATCH_TIMEOUT,
        page_size: int = DEFAULT_PAGE_SIZE,
        backoff: Backoff | None = None,
    ) -> None:
        self.kind = kind
        self.api = api
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.backoff = backoff or Backoff()
        self.relists = 0  # lists made, the first included
        self.watches = 0  # watch requests opened
        self._handlers: builtins.list[EventHandler] = []
        if on_change is not None:  # one callback for all three, with the object (the new one on updates)
            on_add, on_delete = on_add or on_change, on_delete or on_change
            on_update = on_update or (lambda old, new: on_change(new))
        if on_add or on_update or on_delete:
            self.add_handler(on_add, on_update, on_delete)
        self._cache: dict[Key, Obj] = {}
        self._indexers: dict[str, Indexer] = {}
        self._indexes: dict[str, dict[str, set[Key]]] = {}  # index -> value -> keys, under _lock
        self._resource_version = ""
        self._lock = threading.Lock()  # guards _cache, _resource_version and _watch
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: WatchStream | None = None  # the open one, so stop() can interrupt its read

    @property
    def name(self) -> str:
        scope = f" in {self.namespace}" if self.namespace else ""
        selectors = ",".join(s for s in (self.label_selector, self.field_selector) if s)
        return f"{self.kind.plural}{scope}" + (f" [{selectors}]" if selectors else "")

    # -- handlers --------------------------------------------------------------------------------

    def add_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        """Register callbacks; register before start() to see the initial objects as adds."""
        self._handlers.append(EventHandler(on_add, on_update, on_delete))

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"informer for {self.name} is already running")
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.kind.plural}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the watch and the thread; the cache and resourceVersion stay for a later start()."""
        self._stopping.set()
        with self._lock:
            watch = self._watch
        if watch is not None:
            watch.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("informer for %s did not stop within %.1fs", self.name, timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """True once the first list is in the cache (and its adds were handled); False on timeout."""
        return self._synced.wait(timeout)

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    # -- cache -----------------------------------------------------------------------------------

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        """The cached object (namespace None for cluster-scoped kinds), or None."""
        with self._lock:
            return self._cache.get((namespace or "", name))

    def list(self) -> builtins.list[Obj]:
        with self._lock:
            return list(self._cache.values())

    def add_index(self, name: str, indexer: Indexer) -> None:
        """Keep the cache findable by `indexer`'s values (by_namespace, by_owner, by_node, by_label(...)),
        so a reader takes its few objects instead of filtering the whole list."""
        with self._lock:
            self._indexers[name] = indexer
            self._indexes[name] = {}
            for key, obj in self._cache.items():
                self._index_add(name, key, obj)

    def by_index(self, name: str, value: str) -> builtins.list[Obj]:
        """The cached objects `name`'s indexer files under `value`, in key order."""
        with self._lock:
            return [self._cache[key] for key in sorted(self._indexes[name].get(value, ()))]

    def _index_add(self, name: str, key: Key, obj: Obj) -> None:
        index = self._indexes[name]
        for value in self._indexers[name](obj):
            index.setdefault(value, set()).add(key)

    def _index_remove(self, name: str, key: Key, obj: Obj) -> None:
        index = self._indexes[name]
        for value in self._indexers[name](obj):
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]

    def _reindex(self, key: Key, old: Obj | None, new: Obj | None) -> None:
        """Under _lock: move one object's index entries from `old` to `new` (None: absent)."""
        for name in self._indexers:
            if old is not None:
                self._index_remove(name, key, old)
            if new is not None:
                self._index_add(name, key, new)

    def keys(self) -> builtins.list[Key]:
        with self._lock:
            return list(self._cache)

    @property
    def resource_version(self) -> str:
        """The newest version the cache reflects (of the last list, event or bookmark)."""
        return self._resource_version

    # -- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        must_list = not self._resource_version  # a restarted informer resumes its watch
        unreachable = False
        while not self._stopping.is_set():
            try:
                if must_list:
                    self._list_and_reconcile(unreachable)
                    must_list = unreachable = False
                self._watch_once()
            except Gone as exc:
                must_list = True
                # Backed off too: a server that keeps expiring fresh versions must not be listed in a loop.
                self._pause(
                    f"watch from resourceVersion {self._resource_version} expired ({exc.message}); re-listing",
                    logging.INFO,
                )
            except ApiUnavailable as exc:
                must_list = unreachable = True
                self._pause(f"API unavailable ({exc.message}); retrying")
            except KubeError as exc:
                must_list = True
                self._pause(f"API error {exc}; re-listing")
            except Exception:  # a bug must not end the informer silently
                log.exception("%s: unexpected failure; re-listing", self.name)
                must_list = True
                self._pause("unexpected failure; re-listing")

    def _pause(self, why: str, level: int = logging.WARNING) -> None:
        if self._stopping.is_set():
            return
        delay = self.backoff.next_delay()
        log.log(level, "%s: %s in %.2fs", self.name, why, delay)
        self._stopping.wait(delay)

    def _list_and_reconcile(self, after_outage: bool) -> None:
        listing = self.api.list_all(self.kind, self.namespace, self.label_selector, self.field_selector, self.page_size)
        fresh = {object_key(obj): obj for obj in listing.get("items") or []}
        version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            previous, self._cache, self._resource_version = self._cache, fresh, version
            for name in self._indexers:
                self._indexes[name] = {}
                for key, obj in fresh.items():
                    self._index_add(name, key, obj)
        self.relists += 1
        if after_outage:
            log.info(
                "%s: reconnected to %s; re-listed %d objects at resourceVersion %s",
                self.name,
                self.api.host,
                len(fresh),
                version,
            )
        elif self.relists > 1:
            log.info("%s: re-listed %d objects at resourceVersion %s", self.name, len(fresh), version)
        self._dispatch_differences(previous, fresh)
        self._synced.set()

    def _dispatch_differences(self, previous: dict[Key, Obj], fresh: dict[Key, Obj]) -> None:
        for key, gone in previous.items():
            if key not in fresh:
                self._dispatch(DELETED, gone, None)
        for key, new in fresh.items():
            old = previous.get(key)
            if old is None:
                self._dispatch(ADDED, new, None)
            elif resource_version_of(old) != resource_version_of(new):
                self._dispatch(MODIFIED, new, old)

    def _watch_once(self) -> None:
        """One watch request, from the last version seen until it ends (or raises)."""
        timeout = random.randint(self.watch_timeout, 2 * self.watch_timeout)
        stream = self.api.watch(
            self.kind,
            self.namespace,
            self._resource_version,
            self.label_selector,
            self.field_selector,
            timeout_seconds=timeout,
            allow_bookmarks=True,
        )
        self.watches += 1
        with self._lock:
            self._watch = stream
        try:
            if self._stopping.is_set():
                return  # stop() ran before the stream was published
            for event_type, obj in stream:
                self._apply(event_type, obj)
                self.backoff.reset()  # the API answers again: the next failure starts from a short delay
        finally:
            with self._lock:
                self._watch = None
            stream.close()

    def _apply(self, event_type: str, obj: Obj) -> None:
        key = object_key(obj)
        version = resource_version_of(obj)
        with self._lock:
            self._resource_version = version or self._resource_version
            if event_type == BOOKMARK:
                return
            old = self._cache.get(key)
            if old is not None and not is_newer(version, resource_version_of(old)):
                return  # a replay of a change the list already showed (see is_newer)
            if event_type == DELETED:
                if old is None:
                    return  # never seen: nothing to forget, no handler to tell
                del self._cache[key]
                self._reindex(key, old, None)
            else:
                self._cache[key] = obj
                self._reindex(key, old, obj)
        self._dispatch(event_type, obj, old)

    def _dispatch(self, event_type: str, obj: Obj, old: Obj | None) -> None:
        """Call the handlers; an ADDED for a known object is an update, a MODIFIED for an unknown
        one an add (both happen when a selector's view of an object changes)."""
        for handler in self._handlers:
            try:
                if event_type == DELETED:
                    if handler.on_delete:
                        handler.on_delete(obj)
                elif old is None:
                    if handler.on_add:
                        handler.on_add(obj)
                elif handler.on_update:
                    handler.on_update(old, obj)
            except Exception:
                log.exception("%s: %s handler failed for %s/%s", self.name, event_type.lower(), *object_key(obj))
