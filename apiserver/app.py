"""The HTTP face of the embedded API server: Kubernetes REST paths on aiohttp.

This module only parses requests and writes responses; object rules live in registry.py,
storage in store.py."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from lahar.api.kinds import ALL_KINDS, EVENT, POD, Kind
from lahar.api.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from lahar.apiserver import (
    authorization,
    discovery,
    errors,
    fieldmanager,
    limits,
    openapi,
    podexec,
    podlogs,
    protobuf,
    scale,
)
from lahar.apiserver.errors import ApiError
from lahar.apiserver.fieldmanager import Manager
from lahar.apiserver.registry import Registry
from lahar.apiserver.store import (
    ADDED,
    DELETED,
    MODIFIED,
    Change,
    Entry,
    ObjectTooLargeError,
    StorageFullError,
    Store,
    TooOldError,
    encode,
)
from lahar.apiserver.table import table
from lahar.apiserver.ttl import DEFAULT_EVENT_TTL_SECONDS, EventExpiry

log = logging.getLogger("lahar.apiserver")

JSON = "application/json"
# A missing Content-Type and aiohttp's default for it are read as JSON, as kube-apiserver does.
JSON_BODY_TYPES = {JSON, "", "application/octet-stream"}
MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's request size limit
KINDS_BY_PATH: dict[tuple[str, str], Kind] = {(k.api_version, k.plural): k for k in ALL_KINDS}
HEALTH_PATHS = {"/healthz", "/readyz", "/livez", "/version"}


@dataclass(frozen=True)
class Target:
    """What a resource URL names."""

    kind: Kind
    namespace: str | None  # None: all namespaces (or a cluster-scoped kind)
    name: str | None
    subresource: str = ""


def _respond(body: dict[str, Any] | bytes, status: int = 200) -> web.Response:
    raw = body if isinstance(body, bytes) else encode(body)
    return web.Response(body=raw, status=status, content_type=JSON)


def _warn(response: web.Response, warnings: list[str]) -> web.Response:
    """Warnings as kube-apiserver sends them (code 299), which kubectl prints."""
    for warning in warnings:
        response.headers.add("Warning", '299 - "' + warning.replace('"', '\\"') + '"')
    return response


def _patch_document(raw: bytes, content_type: str) -> Any:
    """A merge-style patch as the object it mirrors, for field validation; None for a JSON patch
    (a list of operations) or a body the patch code will refuse anyway."""
    if content_type == "application/json-patch+json" or limits.flow_too_deep(raw):
        return None
    try:
        return yaml.safe_load(raw) if content_type == "application/apply-patch+yaml" else limits.loads(raw)
    except (ValueError, yaml.YAMLError, RecursionError):
        return None


def _success_status(code: int = 201) -> web.Response:
    return _respond({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}, code)


def _query_bool(params: Any, name: str) -> bool:
    return params.get(name, "").lower() in ("true", "1")


def _manager(request: web.Request, subresource: str = "", apply: bool = False) -> Manager:
    """The write's field manager: the fieldManager parameter, else the first word of the
    User-Agent (as kube-apiserver names managers); an apply must name one."""
    name = request.query.get("fieldManager", "")
    force = request.query.get("force", "")
    if force and not apply:
        raise errors.bad_request("force is only allowed with server-side apply")
    if force not in ("", "true", "false"):
        raise errors.bad_request(f"force must be true or false, not {force!r}")
    if apply and not name:
        raise errors.bad_request("PATCH with apply type requires a fieldManager")
    if not name:
        name = request.headers.get("User-Agent", "").split("/", 1)[0]
    if len(name) > fieldmanager.MAX_MANAGER_LENGTH:
        raise errors.bad_request(f"fieldManager may not be longer than {fieldmanager.MAX_MANAGER_LENGTH} characters")
    operation = fieldmanager.APPLY if apply else fieldmanager.UPDATE
    return Manager(name, operation, subresource, force == "true")


def _event_line(kind: str, raw: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"


class ApiServer:
    def __init__(
        self,
        store: Store,
        token: str | None = None,
        bookmark_interval: float = 10.0,
        max_watch_seconds: float = 1800.0,
        event_ttl: float = DEFAULT_EVENT_TTL_SECONDS,
        body_timeout: float = limits.BODY_TIMEOUT_SECONDS,
        pod_logs: podlogs.LogFinder | None = None,  # lahar up's: where its runtime keeps container logs
        pod_exec: podexec.ExecFinder | None = None,  # lahar up's: its runtime's running containers
    ) -> None:
        self.store = store
        self.pod_logs = pod_logs
        self.pod_exec = pod_exec
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.max_watch_seconds = max_watch_seconds
        self.body_timeout = body_timeout
        self.registry = Registry(store, self._call_at)
        self.objects = self.registry.store  # the store with events.k8s.io/v1 Events in their own shape
        self.events = EventExpiry(
            store, lambda ns, name: self.registry.delete(EVENT, ns, name), self._call_at, ttl=event_ttl
        )
        self.connections: limits.ConnectionGuard | None = None  # set by whoever serves the app
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending_calls: list[tuple[float, Callable[[], None]]] = []
        self._watches: set[asyncio.Queue[Change | None]] = set()

    # -- wiring ----------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(
            middlewares=[self._errors_middleware, self._auth_middleware], client_max_size=MAX_BODY_BYTES
        )
        app[limits.BODY_TIMEOUT] = self.body_timeout
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_startup(self, _app: web.Application) -> None:
        self._loop = asyncio.get_running_loop()
        self.registry.ensure_defaults()
        self.events.start()
        for pending in self._pending_calls:
            self._call_at(*pending)
        self._pending_calls.clear()

    def _call_at(self, deadline: float, function: Callable[[], None]) -> None:
        """Run function on the event loop at a wall-clock time (kept until the loop runs)."""
        if self._loop is None:
            self._pending_calls.append((deadline, function))
        else:
            self._loop.call_later(max(deadline - time.time(), 0.0), function)

    @web.middleware
    async def _errors_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return _respond(exc.status(), exc.code)
        except web.HTTPRequestEntityTooLarge:
            return _respond(ApiError(413, "RequestEntityTooLarge", "the request body is too large").status(), 413)
        except ObjectTooLargeError as exc:
            return _respond(limits.too_large(exc.size).status(), 413)
        except StorageFullError as exc:
            return _respond(limits.insufficient_storage(exc).status(), 507)
        except RecursionError:  # a structure past what the checks foresaw: still the client's
            log.warning("recursion limit serving %s %s", request.method, request.path)
            return _respond(errors.bad_request("the request is nested too deeply").status(), 400)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug: answer a Status rather than a bare 500 page
            log.exception("internal error serving %s %s", request.method, request.path)
            return _respond(ApiError(500, "InternalError", f"internal error: {exc}").status(), 500)

    @web.middleware
    async def _auth_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if self.token is not None and request.path not in HEALTH_PATHS:
            scheme, _, credentials = request.headers.get("Authorization", "").strip().partition(" ")
            # The scheme is case-insensitive (RFC 9110 11.1), as kube-apiserver reads it.
            if scheme.lower() != "bearer" or not hmac.compare_digest(credentials.strip().encode(), self.token.encode()):
                raise ApiError(401, "Unauthorized", "Unauthorized")
        return await handler(request)

    # -- routing ---------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if request.method == "GET":
            document = self._discovery(parts, request)
            if document is not None:
                return _respond(document)
            if parts[:1] == ["openapi"]:
                return self._openapi(parts, request)
        if (
            parts[:3] == ["apis", *authorization.GROUP_VERSION.split("/")]
            and parts[3:]
            and parts[3] in authorization.RESOURCES
        ):
            if request.method != "POST" or len(parts) != 4:
                raise ApiError(405, "MethodNotAllowed", f"{parts[3]} may only be created")
            return _respond(authorization.review(parts[3], await self._json_body(request)), 201)
        target = self._target(parts)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return await self._serve(request, target)

    def _discovery(self, parts: list[str], request: web.Request) -> dict[str, Any] | None:
        if parts in (["healthz"], ["readyz"], ["livez"]):
            return {"status": "ok"}
        if parts == ["version"]:
            return discovery.version_info()
        if parts == ["api"]:
            return discovery.core_versions(request.host)
        if parts == ["apis"]:
            return discovery.group_list()
        if len(parts) == 2 and parts[0] == "api":
            return discovery.resource_list(parts[1])
        if len(parts) == 2 and parts[0] == "apis":
            return discovery.group(parts[1])
        if len(parts) == 3 and parts[0] == "apis":
            return discovery.resource_list(f"{parts[1]}/{parts[2]}")
        return None

    @staticmethod
    def _openapi(parts: list[str], request: web.Request) -> web.Response:
        accept = request.headers.get("Accept", "")
        if accept and not any(t in accept for t in ("json", "*/*")):
            # kubectl asks for /openapi/v2 as protobuf only when /openapi/v3 lacks a kind.
            raise ApiError(406, "NotAcceptable", f"only application/json is served here, not {accept!r}")
        body = None
        if parts == ["openapi", "v3"]:
            body = encode(openapi.v3_root())
        elif parts[:2] == ["openapi", "v3"]:
            body = openapi.v3_for_path("/".join(parts[2:]))
        elif parts == ["openapi", "v2"]:
            body = openapi.v2_document()
        if body is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return _respond(body)

    @staticmethod
    def _target(parts: list[str]) -> Target | None:
        if len(parts) >= 2 and parts[0] == "api":
            api_version, rest = parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return None
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = KINDS_BY_PATH.get((api_version, rest[2]))
            if (candidate and candidate.namespaced) or (api_version == "v1" and rest[2] == "bindings"):
                namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        if namespace is not None and api_version == "v1" and rest == ["bindings"]:
            return Target(POD, namespace, None, "bindings")
        kind = KINDS_BY_PATH.get((api_version, rest[0]))
        if kind is None:
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in kind.subresources:
            return None
        if namespace is None and kind.namespaced and name is not None:
            return None  # a namespaced object needs its namespace in the path
        return Target(kind, namespace, name, sub)

    async def _serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        method, params = request.method, request.query
        dry_run = params.get("dryRun", "") == "All"
        kind, ns, name, sub = target.kind, target.namespace, target.name, target.subresource
        if sub == "bindings" and method == "POST":  # the legacy namespaced bindings collection
            body = await self._json_body(request)
            self.registry.bind(ns or "default", (body.get("metadata") or {}).get("name", ""), body)
            return _success_status()
        if name is None:
            if method == "GET":
                if _query_bool(params, "watch"):
                    return await self._watch(request, target)
                return self._list(request, target)
            if method == "POST":
                body = await self._json_body(request)
                warnings = openapi.field_problems(kind, body, params.get("fieldValidation", ""))
                created = self.registry.create(kind, ns, body, dry_run, _manager(request))
                return _warn(self._written(kind, created, 201), warnings)
            if method == "DELETE":
                return self._delete_collection(request, target, dry_run)
        elif sub in ("", "status"):
            if method == "GET":
                return self._get(request, target)
            if method == "PUT":
                body = await self._json_body(request)
                warnings = openapi.field_problems(kind, body, params.get("fieldValidation", ""))
                updated = self.registry.update(kind, ns, name, body, sub, dry_run, _manager(request, sub))
                return _warn(self._written(kind, updated), warnings)
            if method == "PATCH":
                raw = await limits.read_body(request)
                document = _patch_document(raw, request.content_type)
                warnings = openapi.field_problems(kind, document, params.get("fieldValidation", ""))
                if request.content_type == "application/apply-patch+yaml":
                    # Server-side apply; of an object that does not exist, a create (kubectl apply --server-side).
                    manager = _manager(request, sub, apply=True)
                    applied, is_new = self.registry.apply(kind, ns, name, raw, manager, sub, dry_run)
                    return _warn(self._written(kind, applied, 201 if is_new else 200), warnings)
                manager = _manager(request, sub)
                patched = self.registry.patch(kind, ns, name, raw, request.content_type, sub, dry_run, manager)
                return _warn(self._written(kind, patched), warnings)
            if method == "DELETE" and not sub:
                options = await self._delete_options(request)
                return _respond(self.registry.delete(kind, ns, name, options, dry_run))
        elif sub == "scale":
            return await self._scale(request, target, dry_run)
        elif sub == "log" and method == "GET":
            pod = self.registry.require(kind, ns or "", name).obj
            return await podlogs.serve_log(request, pod, self.pod_logs)
        elif sub in ("exec", "attach") and method in ("GET", "POST"):
            pod = self.registry.require(kind, ns or "", name).obj
            serve = podexec.serve_exec if sub == "exec" else podexec.serve_attach
            return await serve(request, pod, self.pod_exec)
        elif method == "POST" and sub == "binding":
            self.registry.bind(ns or "", name, await self._json_body(request))
            return _success_status()
        elif method == "POST" and sub == "eviction":
            self.registry.evict(ns or "", name, await self._json_body(request))
            return _success_status()
        raise ApiError(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({method} {request.path})",
        )

    async def _scale(self, request: web.Request, target: Target, dry_run: bool) -> web.Response:
        """GET, PUT and PATCH of a Scale; writes change spec.replicas through the main endpoint."""
        kind, ns, name = target.kind, target.namespace or "", target.name or ""
        current = self.registry.require(kind, ns, name).obj
        if request.method == "GET":
            return _respond(scale.scale_of(current))
        if request.method == "PUT":
            wanted = await self._json_body(request)
        elif request.method == "PATCH":
            wanted = scale.patched_scale(current, await request.read(), request.content_type)
        else:
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow {request.method} on scale")
        replicas = scale.replicas_of(wanted)
        given_rv = (wanted.get("metadata") or {}).get("resourceVersion")
        if given_rv and given_rv != current["metadata"]["resourceVersion"]:
            raise errors.stale(kind, name)
        updated = {**current, "spec": {**(current.get("spec") or {}), "replicas": replicas}}
        manager = _manager(request, "scale")
        return _respond(scale.scale_of(self.registry.update(kind, ns, name, updated, "", dry_run, manager)))

    def _written(self, kind: Kind, obj: dict[str, Any], status: int = 200) -> web.Response:
        """The answer to a write: the stored object's JSON as the store encoded it, when `obj` is
        what the store holds (not a dry run), instead of encoding it a second time."""
        meta = obj.get("metadata") or {}
        entry = self.store.get(kind, meta.get("namespace", "") if kind.namespaced else "", meta.get("name", ""))
        return _respond(entry.raw if entry is not None and entry.obj is obj else obj, status)

    # -- bodies ----------------------------------------------------------------------------------

    @staticmethod
    async def _json_body(request: web.Request) -> Any:
        if request.can_read_body and request.content_type == protobuf.PROTOBUF:
            try:
                return protobuf.decode_body(await limits.read_body(request))
            except protobuf.NoProtobufFormError as exc:
                raise ApiError(415, "UnsupportedMediaType", str(exc)) from exc
            except protobuf.ProtobufError as exc:
                raise errors.bad_request(f"the request body is not valid protobuf: {exc}") from exc
        if request.can_read_body and request.content_type not in JSON_BODY_TYPES:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f'the body of the request was in an unknown format ("{request.content_type}"); '
                f"accepted media types include: {', '.join(sorted(JSON_BODY_TYPES - {''} | {protobuf.PROTOBUF}))}",
            )
        return limits.decode_body(await limits.read_body(request))

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        options = await self._json_body(request) if request.can_read_body else {}
        if not isinstance(options, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        for key in ("gracePeriodSeconds", "propagationPolicy"):
            if key in request.query:
                options[key] = request.query[key]
        if "gracePeriodSeconds" in options:
            grace = options["gracePeriodSeconds"]
            if isinstance(grace, int) and not isinstance(grace, bool):
                grace = str(grace)
            if not isinstance(grace, str):
                raise errors.bad_request("gracePeriodSeconds must be an integer")
            options["gracePeriodSeconds"] = limits.query_int(
                {"gracePeriodSeconds": grace}, "gracePeriodSeconds", 0, minimum=limits.INT64_MIN
            )
        return options

    # -- reads -----------------------------------------------------------------------------------

    @staticmethod
    def _wants_table(request: web.Request) -> bool:
        return "as=Table" in request.headers.get("Accept", "")

    def _get(self, request: web.Request, target: Target) -> web.Response:
        entry = self.registry.require(target.kind, target.namespace or "", target.name or "")
        if self._wants_table(request):
            include = request.query.get("includeObject", "") == "Object"
            return _respond(table(target.kind, [entry.obj], str(self.store.revision), include))
        return _respond(entry.raw)

    @staticmethod
    def _selectors(request: web.Request, kind: Kind) -> tuple[LabelSelector, FieldSelector]:
        try:
            return (
                parse_label_selector(request.query.get("labelSelector", "")),
                parse_field_selector(request.query.get("fieldSelector", ""), kind.field_selectors),
            )
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc

    def _selected(self, request: web.Request, target: Target) -> list[Entry]:
        labels, fields = self._selectors(request, target.kind)
        return [e for e in self.objects.entries(target.kind, target.namespace) if _matches(e.obj, labels, fields)]

    def _list(self, request: web.Request, target: Target) -> web.Response:
        limit, after, list_rv = self._page_args(request)
        entries = self._selected(request, target)
        if after is not None:
            entries = [e for e in entries if _key(e) > after]
        token = ""
        if limit and len(entries) > limit:
            entries = entries[:limit]
            token = _encode_continue(list_rv, _key(entries[-1]))
        if self._wants_table(request):
            include = request.query.get("includeObject", "") == "Object"
            return _respond(table(target.kind, [e.obj for e in entries], str(list_rv), include, token))
        metadata = {"resourceVersion": str(list_rv)}
        if token:
            metadata["continue"] = token
        kind = target.kind
        head = encode({"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": metadata})
        body = head[:-1] + b',"items":[' + b",".join(e.raw for e in entries) + b"]}"
        return _respond(body)

    def _page_args(self, request: web.Request) -> tuple[int, tuple[str, str] | None, int]:
        limit = limits.query_int(request.query, "limit", 0)
        token = request.query.get("continue", "")
        if not token:
            return limit, None, self.store.revision
        try:
            state = json.loads(base64.urlsafe_b64decode(token.encode()))
            return limit, (str(state["key"][0]), str(state["key"][1])), int(state["rv"])
        except (ValueError, KeyError, TypeError, IndexError, binascii.Error) as exc:
            raise errors.bad_request(f"invalid continue token: {token!r}") from exc

    def _delete_collection(self, request: web.Request, target: Target, dry_run: bool) -> web.Response:
        deleted = [
            self.registry.delete(
                target.kind, e.obj["metadata"].get("namespace"), e.obj["metadata"]["name"], None, dry_run
            )
            for e in self._selected(request, target)
        ]
        kind = target.kind
        return _respond(
            {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": {"resourceVersion": str(self.store.revision)},
                "items": deleted,
            }
        )

    # -- watch -----------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        labels, fields = self._selectors(request, target.kind)
        timeout = limits.query_int(request.query, "timeoutSeconds", int(self.max_watch_seconds))
        since = limits.query_int(request.query, "resourceVersion", 0)
        bookmarks = _query_bool(request.query, "allowWatchBookmarks")
        queue: asyncio.Queue[Change | None] = asyncio.Queue()
        # Subscribing and reading the backlog happen with no await between them: nothing is missed.
        unsubscribe = self.objects.subscribe(target.kind, queue.put_nowait)
        self._watches.add(queue)
        try:
            expired = False
            if since == 0:  # "any version": start with the current objects, as k8s does
                lines = [
                    _event_line(ADDED, self._event_body(request, target.kind, e))
                    for e in self.objects.entries(target.kind, target.namespace)
                    if _matches(e.obj, labels, fields)
                ]
            else:
                try:
                    lines = self._watch_lines(
                        self.objects.changes_since(target.kind, since), target, labels, fields, request
                    )
                except TooOldError as exc:
                    lines, expired = [_event_line("ERROR", encode(errors.gone(str(exc)).status()))], True
            response = web.StreamResponse(headers={"Content-Type": JSON})
            response.enable_chunked_encoding()
            await response.prepare(request)
            try:
                await response.write(b"".join(lines))
                if not expired:
                    await self._stream(
                        response,
                        queue,
                        target,
                        labels,
                        fields,
                        min(timeout, self.max_watch_seconds),
                        bookmarks,
                        request,
                    )
                await response.write_eof()
            except (ConnectionResetError, RuntimeError):
                pass  # the client went away
            return response
        finally:
            self._watches.discard(queue)
            unsubscribe()

    async def _stream(
        self,
        response: web.StreamResponse,
        queue: asyncio.Queue[Change | None],
        target: Target,
        labels: LabelSelector,
        fields: FieldSelector,
        timeout: float,
        bookmarks: bool,
        request: web.Request,
    ) -> None:
        """Write changes as they come until the timeout (or shutdown); with bookmarks, one every
        bookmark interval whatever else happens, and a last one when the watch ends.

        A bookmark promises that every change up to its version was sent: a client resumes its
        next watch from it. So a bookmark is written only after the changes still queued (they
        arrive while an earlier write waits for the client to read), at the revision read as the
        queue was emptied: writes run on this loop, and a change is queued in the same step that
        moves the revision on, so nothing at or below that revision is left behind."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_bookmark = loop.time() + self.bookmark_interval if bookmarks else math.inf
        while True:
            now = loop.time()
            ending = now >= deadline
            if ending or now >= next_bookmark:
                changes, covered = _take_queued(queue), self.store.revision
                if None in changes:  # the server is shutting down
                    return
                await self._write_changes(response, changes, target, labels, fields, request)
                if bookmarks:
                    await response.write(self._bookmark(target.kind, covered))
                if ending:
                    return
                next_bookmark = now + self.bookmark_interval
                continue
            try:
                first = await asyncio.wait_for(queue.get(), min(deadline, next_bookmark) - now)
            except TimeoutError:
                continue
            changes = [first, *_take_queued(queue)]
            if None in changes:  # the server is shutting down
                return
            await self._write_changes(response, changes, target, labels, fields, request)

    async def _write_changes(
        self,
        response: web.StreamResponse,
        changes: list[Change | None],
        target: Target,
        labels: LabelSelector,
        fields: FieldSelector,
        request: web.Request,
    ) -> None:
        lines = self._watch_lines([c for c in changes if c is not None], target, labels, fields, request)
        if lines:
            await response.write(b"".join(lines))

    async def _on_shutdown(self, _app: web.Application) -> None:
        """End open watches so shutdown does not wait for their timeouts."""
        for queue in list(self._watches):
            queue.put_nowait(None)

    @staticmethod
    def _bookmark(kind: Kind, version: int) -> bytes:
        return _event_line(
            "BOOKMARK",
            encode({"kind": kind.kind, "apiVersion": kind.api_version, "metadata": {"resourceVersion": str(version)}}),
        )

    def _watch_lines(
        self, changes: list[Change], target: Target, labels: LabelSelector, fields: FieldSelector, request: web.Request
    ) -> list[bytes]:
        """Events as a filtered watcher sees them: leaving the selection is a DELETED, entering an ADDED."""
        lines = []
        for change in changes:
            event = _filtered_event(change, target.namespace, labels, fields)
            if event is not None:
                lines.append(_event_line(event, self._event_body(request, target.kind, change.entry)))
        return lines

    def _event_body(self, request: web.Request, kind: Kind, entry: Entry) -> bytes:
        """A watch event's object: the object, or a one-row Table when the client asked for tables
        (`kubectl get -w`), as kube-apiserver sends them."""
        if not self._wants_table(request):
            return entry.raw
        include = request.query.get("includeObject", "") == "Object"
        return encode(table(kind, [entry.obj], entry.obj["metadata"].get("resourceVersion", ""), include))


def _take_queued(queue: asyncio.Queue[Change | None]) -> list[Change | None]:
    """Every change queued now (None: the server is shutting down), without waiting."""
    taken = []
    while not queue.empty():
        taken.append(queue.get_nowait())
    return taken


def _key(entry: Entry) -> tuple[str, str]:
    meta = entry.obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _encode_continue(rv: int, key: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "key": list(key)}).encode()).decode()


def _matches(obj: dict[str, Any], labels: LabelSelector, fields: FieldSelector) -> bool:
    return labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)


def _in_view(obj: dict[str, Any] | None, namespace: str | None, labels: LabelSelector, fields: FieldSelector) -> bool:
    if obj is None:
        return False
    if namespace is not None and obj["metadata"].get("namespace") != namespace:
        return False
    return _matches(obj, labels, fields)


def _filtered_event(change: Change, namespace: str | None, labels: LabelSelector, fields: FieldSelector) -> str | None:
    now_in = change.type != DELETED and _in_view(change.entry.obj, namespace, labels, fields)
    was_in = change.previous is not None and _in_view(change.previous.obj, namespace, labels, fields)
    if change.type == DELETED:
        return DELETED if was_in else None
    if now_in:
        return MODIFIED if was_in else ADDED
    return DELETED if was_in else None
