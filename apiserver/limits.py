"""What the embedded API server refuses before any object rule runs, and the limits that keep one
client (careless or hostile) from taking the server down for the others.

- Request bodies: JSON as Go's decoder reads it (no NaN or Infinity, no number past float64, no
  integer past int64: kube-apiserver cannot decode them either), nested at most MAX_JSON_DEPTH
  levels (Python recursion has limits Go's decoder does not), read within BODY_TIMEOUT_SECONDS.
- Objects: at most MAX_OBJECT_BYTES encoded, etcd's default request limit (--max-request-bytes),
  which kube-apiserver answers as 413 "etcdserver: request is too large".
- Query parameters that are numbers: integers, in range; `limit=-1` or `timeoutSeconds=nan` is a
  400, never a traceback.
- Connections: a slowloris that sends its headers a byte at a time is cut after
  HEADER_TIMEOUT_SECONDS (kube-apiserver's ReadHeaderTimeout is 32 s), and past MAX_CONNECTIONS
  open connections a new one is closed at once (what kube-apiserver's max-requests-inflight does
  for requests, for sockets)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from lahar.apiserver import errors
from lahar.apiserver.errors import ApiError

MAX_JSON_DEPTH = 100
MAX_OBJECT_BYTES = 3 * 1024 * 1024 // 2  # 1.5 MiB, etcd's default --max-request-bytes
BODY_TIMEOUT_SECONDS = 60.0  # kube-apiserver's default --request-timeout
HEADER_TIMEOUT_SECONDS = 32.0  # kube-apiserver's ReadHeaderTimeout
MAX_CONNECTIONS = 1024
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
BODY_TIMEOUT = web.AppKey("body_timeout", float)

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # unrolled: linear, no per-character branch
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class TooDeepError(ValueError):
    """A document nested more than MAX_JSON_DEPTH levels."""


def json_depth(raw: bytes) -> int:
    """How deeply a JSON text nests arrays and objects (brackets inside strings do not count).
    Iterative and linear, so a hostile body of 3 MiB of '[' costs milliseconds, not a stack."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    steps = (1 if b in b"[{" else -1 for b in brackets)
    return max(itertools.accumulate(steps, initial=0))


def value_depth(value: Any) -> int:
    """How deeply a decoded value nests lists and dicts (iterative: a YAML body is checked too)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, Mapping) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            break  # deep enough to refuse: no need to walk the rest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text[:40]} is out of range")
    return number


def _int64(text: str) -> int:
    if len(text) > 20:  # int() of a 100,000-digit literal is slow; no int64 is that long
        raise ValueError(f"the integer {text[:40]}... is out of range (int64)")
    number = int(text)
    if not INT64_MIN <= number <= INT64_MAX:
        raise ValueError(f"the integer {text} is out of range (int64)")
    return number


def loads(text: str | bytes) -> Any:
    """json.loads as Go's decoder accepts JSON; ValueError (TooDeepError for nesting) otherwise."""
    raw = text.encode() if isinstance(text, str) else text
    if flow_too_deep(raw):  # a document cannot nest deeper than it opens brackets: most need no scan
        raise TooDeepError(f"the document is nested more than {MAX_JSON_DEPTH} levels deep")
    return json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_int64)


def flow_too_deep(raw: bytes) -> bool:
    """Whether a JSON or YAML body nests brackets past MAX_JSON_DEPTH: checked before a YAML
    parser (recursive, and slow on such input: 2,000 levels cost it a second) sees the body."""
    return raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and json_depth(raw) > MAX_JSON_DEPTH


def decode_body(raw: bytes) -> Any:
    """A request body as JSON, or a 400 Status saying what is wrong with it."""
    if not raw:
        return {}
    try:
        return loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"the request body is not valid JSON: {exc}") from exc


def check_depth(value: Any, what: str) -> None:
    """Refuse a decoded document (a YAML patch) nested past MAX_JSON_DEPTH."""
    if value_depth(value) > MAX_JSON_DEPTH:
        raise errors.bad_request(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")


def too_large(size: int) -> ApiError:
    return ApiError(
        413,
        "RequestEntityTooLarge",
        f"etcdserver: request is too large: the object is {size} bytes encoded, at most {MAX_OBJECT_BYTES}",
    )


def insufficient_storage(exc: BaseException) -> ApiError:
    """The database could not be written for want of space: nothing changed, writes resume when
    space returns (etcd raises its NOSPACE alarm in the same case)."""
    return ApiError(
        507,
        "InsufficientStorage",
        f"the data directory is full ({exc}): the write was refused and nothing changed; "
        "writes succeed again once space is freed",
    )


async def read_body(request: web.Request) -> bytes:
    """The request body, within the app's deadline: a client trickling its body holds no slot forever."""
    timeout = request.config_dict.get(BODY_TIMEOUT, BODY_TIMEOUT_SECONDS)
    try:
        return await asyncio.wait_for(request.read(), timeout)
    except TimeoutError as exc:
        raise ApiError(408, "Timeout", f"the request body did not arrive within {timeout:.0f}s") from exc


def query_int(params: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    """An integer query parameter (absent or empty: `default`); anything else is a 400."""
    text = params.get(name, "")
    if not text:
        return default
    try:
        value = _int64(text.strip())
    except ValueError:
        raise errors.bad_request(f"{name} must be an integer, not {text[:40]!r}") from None
    if value < minimum:
        raise errors.bad_request(f"{name} must be at least {minimum}, not {value}")
    return value


# -- connections ------------------------------------------------------------------------------------


class _GuardedHandler(RequestHandler):
    """aiohttp's protocol, telling its ConnectionGuard when a connection opens, closes, starts
    sending a request head and completes one."""

    guard: ConnectionGuard

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.guard.opened(self, transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._messages or self._current_request is not None:  # a head arrived, or a body is coming
            self.guard.headers_arrived(self)
        elif self.transport is not None:  # the first bytes of a next request's head
            self.guard.head_started(self, self.transport)


class ConnectionGuard:
    """Wraps an aiohttp Server (the protocol factory a site listens with): connections beyond
    `max_connections` are closed as they open, and a connection whose request head is not
    complete within `header_timeout` of its opening (or of the head's first byte, for the next
    request of a kept-alive connection) is closed. Idle kept-alive connections are aiohttp's
    keep-alive timeout's."""

    def __init__(
        self,
        server: web.Server,
        max_connections: int = MAX_CONNECTIONS,
        header_timeout: float = HEADER_TIMEOUT_SECONDS,
    ) -> None:
        self.server = server
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.refused = 0  # connections closed at once: too many open
        self.timed_out = 0  # connections closed for a slow request head
        self._open: set[RequestHandler] = set()
        self._deadlines: dict[RequestHandler, asyncio.TimerHandle] = {}
        self._handler_class = type("GuardedHandler", (_GuardedHandler,), {"guard": self})

    @property
    def open(self) -> int:
        return len(self._open)

    def __call__(self) -> RequestHandler:
        # What web.Server.__call__ does, with our subclass.
        handler: RequestHandler = self._handler_class(self.server, loop=self.server._loop, **self.server._kwargs)
        return handler

    def opened(self, handler: RequestHandler, transport: asyncio.BaseTransport) -> None:
        if len(self._open) >= self.max_connections:
            self.refused += 1
            transport.close()
            return
        self._open.add(handler)
        self._arm(handler, transport)

    def closed(self, handler: RequestHandler) -> None:
        self.headers_arrived(handler)
        self._open.discard(handler)

    def headers_arrived(self, handler: RequestHandler) -> None:
        deadline = self._deadlines.pop(handler, None)
        if deadline is not None:
            deadline.cancel()

    def head_started(self, handler: RequestHandler, transport: asyncio.BaseTransport) -> None:
        if handler in self._open and handler not in self._deadlines:
            self._arm(handler, transport)

    def _arm(self, handler: RequestHandler, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        self._deadlines[handler] = loop.call_later(self.header_timeout, self._expire, handler, transport)

    def _expire(self, handler: RequestHandler, transport: asyncio.BaseTransport) -> None:
        if self._deadlines.pop(handler, None) is not None:
            self.timed_out += 1
            transport.close()


class GuardedSite(web.TCPSite):
    """A TCP site whose connections pass through a ConnectionGuard."""

    def __init__(self, runner: web.AppRunner, guard_factory: Callable[[web.Server], ConnectionGuard], **kw: Any):
        super().__init__(runner, **kw)
        self._guard_factory = guard_factory
        self.guard: ConnectionGuard | None = None

    async def start(self) -> None:
        server = self._runner.server
        assert server is not None
        self.guard = self._guard_factory(server)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.guard,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self._runner._reg_site(self)  # what BaseSite.start does
