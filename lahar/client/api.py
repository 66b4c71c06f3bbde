"""KubeApi: the Kubernetes REST API as dicts in, dicts out.

The official client is the transport (configuration, auth, TLS, urllib3 connection pool); its
typed models are skipped: they cost more than the work on the hot paths (binding, watching), and
the binding endpoint answers a Status that the generated method refuses to deserialize
(kubernetes-client/python issues 547 and 825). Every response is read raw and parsed with
`json.loads`.

Failures are KubeError subclasses carrying the HTTP code and the Status' reason and message, so
callers write `except NotFound` or `except Conflict`. A server that cannot be reached (refused,
reset, timed out, cut mid-stream) raises ApiUnavailable. One KubeApi may be shared by threads.
"""

from __future__ import annotations

import builtins
import json
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client

from lahar.api.kinds import POD, Kind
from lahar.client.errors import ApiUnavailable, KubeError, error_from_status

Obj = dict[str, Any]
Query = builtins.list[tuple[str, str]]
Timeout = float | tuple[float, float | None]

JSON = "application/json"
PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
AUTH_SETTINGS = ["BearerToken"]
DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 5.0
# A watch may stay silent between events; the read timeout only has to catch a dead peer.
WATCH_READ_GRACE = 30.0
READ_SIZE = 64 * 1024


# Everything urllib3 raises when the peer is away or the connection breaks.
TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


# -- watch streams -------------------------------------------------------------------------------


class WatchStream(Iterator[tuple[str, Obj]]):
    """The events of one watch request, as (type, object) in the order the server sent them.

    BOOKMARK events are yielded (their object carries only metadata.resourceVersion). An ERROR
    event is raised as its KubeError (Gone for an expired resourceVersion). `close()` may be called
    from another thread to end a blocked read; the iteration then simply stops."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        # Kept apart: urllib3 hands the connection back to its pool when a chunked body ends, even
        # one cut short by close(); such a connection must be closed, not reused.
        self._connection = getattr(response, "connection", None)
        self._lock = threading.Lock()
        self._closed = False
        self._reading = False  # a thread is blocked in a socket read right now
        self._events = self._read_events()

    def __next__(self) -> tuple[str, Obj]:
        return next(self._events)

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        if reading:
            _shutdown_read(self._response)  # the reading thread wakes, sees _closed and closes the response
        else:
            self._response.close()

    def _read_events(self) -> Iterator[tuple[str, Obj]]:
        pending: builtins.list[bytes] = []  # bytes of a line not finished yet
        chunks = _chunks(self._response)
        ended_cleanly = False
        try:
            while (chunk := self._next_chunk(chunks)) is not None:
                if b"\n" not in chunk:
                    pending.append(chunk)
                    continue
                pending.append(chunk)
                *lines, rest = b"".join(pending).split(b"\n")
                pending = [rest] if rest else []
                for line in lines:
                    if line.strip():
                        yield _parse_event(line)
            if pending and b"".join(pending).strip():
                yield _parse_event(b"".join(pending))
            ended_cleanly = not self._closed
        finally:
            with self._lock:
                self._closed = True
            if ended_cleanly:
                self._response.release_conn()  # fully read: the connection goes back to the pool
            else:
                self._response.close()
                if self._connection is not None:
                    self._connection.close()

    def _next_chunk(self, chunks: Iterator[bytes]) -> bytes | None:
        """The next piece of the body; None at its end or once closed."""
        with self._lock:
            if self._closed:
                return None
            self._reading = True
        try:
            return next(chunks, None)
        except (*TRANSPORT_ERRORS, ValueError) as exc:  # ValueError: read on a file closed under us
            if self._closed:
                return None
            raise ApiUnavailable(f"watch connection broke: {exc}") from exc
        finally:
            with self._lock:
                self._reading = False


def _chunks(response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """Body bytes as soon as they arrive (a watch line must not wait for a full buffer)."""
    if getattr(response, "chunked", False) and response.supports_chunked_reads():  # type: ignore[attr-defined]
        yield from response.read_chunked(decode_content=True)
        return
    while chunk := response.read1(READ_SIZE):
        yield chunk


def _shutdown_read(response: urllib3.BaseHTTPResponse) -> None:
    try:
        response.shutdown()
    except (ValueError, RuntimeError, OSError, AttributeError):
        response.close()  # no socket to shut down: closing is the remaining way to wake the reader


def _parse_event(line: bytes) -> tuple[str, Obj]:
    try:
        event = json.loads(line)
        event_type, obj = event["type"], event["object"]
    except (ValueError, KeyError, TypeError) as exc:
        raise KubeError(500, "InternalError", f"malformed watch event: {line[:200]!r}") from exc
    if event_type == "ERROR":
        raise error_from_status(int(obj.get("code") or 500), obj)
    return str(event_type), obj


# -- the API -------------------------------------------------------------------------------------


class KubeApi:
    """Kubernetes REST calls on dicts, over an official ApiClient (its configuration, auth and pool)."""

    def __init__(self, api_client: client.ApiClient, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.api_client = api_client
        self.timeout = timeout

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    # -- reads -----------------------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        return self.request("GET", _object_path(kind, name, namespace))

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> Obj:
        """One page of a collection (all of it when limit is 0); metadata.continue names the next page."""
        query = _selector_query(label_selector, field_selector)
        if limit:
            query.append(("limit", str(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        return self.request("GET", kind.base_path(namespace), query)

    def list_all(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 500,
    ) -> Obj:
        """The whole collection fetched `limit` objects at a time, as one List. Its resourceVersion
        is the first page's: every page is a view of the collection at that version."""
        first = self.list(kind, namespace, label_selector, field_selector, limit)
        items: builtins.list[Obj] = list(first.get("items") or [])
        token = (first.get("metadata") or {}).get("continue", "")
        while token:
            page = self.list(kind, namespace, label_selector, field_selector, limit, token)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue", "")
        metadata = {k: v for k, v in (first.get("metadata") or {}).items() if k != "continue"}
        return {**first, "metadata": metadata, "items": items}

    def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        resource_version: str = "",
        label_selector: str = "",
        field_selector: str = "",
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> WatchStream:
        """Open a watch; iterate the result for (type, object) events as they arrive. An HTTP error
        (410 included) raises here; an ERROR event raises while iterating."""
        query = [("watch", "true"), *_selector_query(label_selector, field_selector)]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if timeout_seconds is not None:
            query.append(("timeoutSeconds", str(int(timeout_seconds))))
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        read_timeout = timeout_seconds + WATCH_READ_GRACE if timeout_seconds is not None else None
        response = self._send("GET", kind.base_path(namespace), query, None, JSON, (CONNECT_TIMEOUT, read_timeout))
        return WatchStream(response)

    # -- writes ----------------------------------------------------------------------------------

    def create(self, kind: Kind, obj: Obj, namespace: str | None = None) -> Obj:
        namespace = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
        return self.request("POST", kind.base_path(namespace), body=_with_type(kind, obj))

    def update(self, kind: Kind, obj: Obj) -> Obj:
        """Replace an object; its metadata.resourceVersion, when set, must still be current (else Conflict)."""
        return self.request("PUT", _path_of(kind, obj), body=_with_type(kind, obj))

    def update_status(self, kind: Kind, obj: Obj) -> Obj:
        return self.request("PUT", _path_of(kind, obj) + "/status", body=_with_type(kind, obj))

    def patch(
        self,
        kind: Kind,
        name: str,
        patch: Obj | builtins.list[Obj],
        namespace: str | None = None,
        patch_type: str = "merge",
        subresource: str = "",
    ) -> Obj:
        """Patch with "merge" (RFC 7386), "strategic" (built-in kinds only) or "json" (RFC 6902, a list)."""
        content_type = PATCH_CONTENT_TYPES.get(patch_type)
        if content_type is None:
            raise ValueError(f'patch_type must be one of {", ".join(PATCH_CONTENT_TYPES)}, not "{patch_type}"')
        if (patch_type == "json") != isinstance(patch, builtins.list):
            raise ValueError("a json patch is a list of operations; merge and strategic patches are objects")
        path = _object_path(kind, name, namespace) + (f"/{subresource}" if subresource else "")
        return self.request("PATCH", path, body=patch, content_type=content_type)

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        propagation_policy: str | None = None,
    ) -> Obj:
        """Delete; answers the object (still terminating, or as it was) or a Status. `uid` is a
        precondition: a different object of the same name is left alone (Conflict)."""
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            options["preconditions"] = {"uid": uid}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        return self.request("DELETE", _object_path(kind, name, namespace), body=options)

    def bind(self, namespace: str, pod_name: str, node_name: str, uid: str | None = None) -> Obj:
        """Assign a pod to a node (pods/binding). A pod already bound answers Conflict."""
        metadata: Obj = {"name": pod_name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        return self.request("POST", _object_path(POD, pod_name, namespace) + "/binding", body=binding)

    def evict(
        self, namespace: str, pod_name: str, uid: str | None = None, grace_period_seconds: int | None = None
    ) -> Obj:
        """Evict through policy/v1 Eviction; a PodDisruptionBudget refusal raises TooManyRequests."""
        options: Obj = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        eviction: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod_name, "namespace": namespace},
        }
        if options:
            eviction["deleteOptions"] = options
        return self.request("POST", _object_path(POD, pod_name, namespace) + "/eviction", body=eviction)

    # -- transport -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: Timeout | None = None,
    ) -> Obj:
        """One call: the parsed JSON answer ({} when empty), or the KubeError of a failure."""
        response = self._send(
            method,
            path,
            query or [],
            body,
            content_type,
            timeout if timeout is not None else (CONNECT_TIMEOUT, self.timeout),
        )
        try:
            raw = response.read()
        except TRANSPORT_ERRORS as exc:
            response.close()
            raise ApiUnavailable(f"{method} {path}: connection broke while reading the answer: {exc}") from exc
        response.release_conn()
        return json.loads(raw) if raw else {}

    def _send(
        self, method: str, path: str, query: Query, body: Any, content_type: str, timeout: Timeout
    ) -> urllib3.BaseHTTPResponse:
        """Send a request; the un-read response when 2xx, else its KubeError.

        Straight to the client's urllib3 pool, with the client's host, default headers, cookie
        and auth (`update_params_for_auth`: a refreshed token is asked for as the client would),
        the body dumped once: the client's `param_serialize` and REST wrapper walked every body
        and header again (`sanitize_for_serialization`), a tenth of the scheduler's CPU in a
        preemption wave's thousands of binds, evictions and Events. Bodies are JSON-ready dicts
        (this class takes no typed models)."""
        api_client = self.api_client
        headers = {"Accept": JSON, **api_client.default_headers}
        if api_client.cookie:
            headers["Cookie"] = api_client.cookie
        if body is not None:
            headers["Content-Type"] = content_type
        api_client.update_params_for_auth(headers, query, AUTH_SETTINGS, path, method, body)
        url = api_client.configuration.host + path
        if query:
            url += "?" + "&".join(f"{name}={quote(str(value))}" for name, value in query)
        limits = (
            urllib3.Timeout(connect=timeout[0], read=timeout[1])
            if isinstance(timeout, tuple)
            else urllib3.Timeout(total=timeout)
        )
        try:
            response: urllib3.BaseHTTPResponse = api_client.rest_client.pool_manager.urlopen(
                method,
                url,
                body=None if body is None else json.dumps(body),
                headers=headers,
                timeout=limits,
                preload_content=False,
            )
        except TRANSPORT_ERRORS as exc:
            raise ApiUnavailable(f"{method} {self.host}{path}: {_transport_reason(exc)}") from exc
        if 200 <= response.status < 300:
            return response
        try:
            raw = response.read()
        except TRANSPORT_ERRORS:
            raw = b""
        finally:
            response.release_conn()
        raise error_from_status(response.status, raw)


def _transport_reason(exc: BaseException) -> str:
    """The innermost cause urllib3 wraps (e.g. "Connection refused" inside MaxRetryError)."""
    reason = getattr(exc, "reason", None)
    return str(reason) if reason is not None else str(exc)


def _selector_query(label_selector: str, field_selector: str) -> Query:
    query: Query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


def _object_path(kind: Kind, name: str, namespace: str | None) -> str:
    if not name:
        raise ValueError(f"a {kind.kind} name is required")
    if kind.namespaced and not namespace:
        raise ValueError(f"{kind.plural} are namespaced: give the namespace of {kind.kind} {name!r}")
    return kind.object_path(quote(name, safe=""), namespace)


def _path_of(kind: Kind, obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    return _object_path(kind, metadata.get("name", ""), metadata.get("namespace"))


def _with_type(kind: Kind, obj: Obj) -> Obj:
    """The object with apiVersion and kind filled in, as the server expects a typed body."""
    if obj.get("apiVersion") and obj.get("kind"):
        return obj
    return {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
