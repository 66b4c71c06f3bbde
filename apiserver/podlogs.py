"""The `pods/log` subresource (`kubectl logs`): container logs of the pods lahar up's local runtime
ran, read from the files it writes. The server does not know where those are: `lahar up` hands it
a finder (node/logs.py's `find_pod_logs` on its data directory); `lahar apiserver` alone runs no
pods and says so. Options as kube-apiserver takes them: container, follow, tailLines, limitBytes,
previous, timestamps (refused: the runtime's files carry no times)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from lahar.apiserver import errors
from lahar.apiserver.errors import ApiError

FOLLOW_POLL_SECONDS = 0.2
CHUNK = 64 * 1024


class PodLogs(Protocol):
    """One pod's log directory (node/logs.py's PodLogs)."""

    @property
    def directory(self) -> Path: ...

    def running(self, container: str) -> bool: ...


LogFinder = Callable[[str, str], "PodLogs | None"]  # (namespace, pod name) -> its logs


def _int_param(query: Any, name: str) -> int | None:
    text = query.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError as exc:
        raise errors.bad_request(f"{name} must be an integer, not {text!r}") from exc
    if value < 0 or (name == "limitBytes" and value == 0):
        raise errors.bad_request(f"{name} must be {'positive' if name == 'limitBytes' else 'at least 0'}")
    return value


def choose_container(pod: dict[str, Any], wanted: str) -> str:
    """The container asked for, or the only one; kube-apiserver's 400s otherwise."""
    spec = pod.get("spec") or {}
    names = [c.get("name") for c in spec.get("containers") or []]
    init = [c.get("name") for c in spec.get("initContainers") or []]
    pod_name = pod["metadata"]["name"]
    if wanted:
        if wanted not in names + init:
            raise errors.bad_request(f"container {wanted} is not valid for pod {pod_name}")
        return wanted
    if len(names) == 1:
        return str(names[0])
    raise errors.bad_request(
        f"a container name must be specified for pod {pod_name}, choose one of: [{' '.join(map(str, names))}]"
    )


def tail(data: bytes, lines: int | None) -> bytes:
    """The last `lines` lines (a last line without its newline counts)."""
    if lines is None:
        return data
    if lines == 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


async def serve_log(request: web.Request, pod: dict[str, Any], finder: LogFinder | None) -> web.StreamResponse:
    query = request.query
    container = choose_container(pod, query.get("container", ""))
    tail_lines, limit = _int_param(query, "tailLines"), _int_param(query, "limitBytes")
    follow = query.get("follow", "").lower() == "true"
    meta, status = pod["metadata"], pod.get("status") or {}
    if query.get("timestamps", "").lower() == "true":
        raise errors.bad_request("timestamps are not kept by lahar up's runtime: ask without --timestamps")
    if query.get("previous", "").lower() == "true":
        restarts = {s.get("name"): s.get("restartCount", 0) for s in status.get("containerStatuses") or []}
        if not restarts.get(container):
            raise errors.bad_request(f'previous terminated container "{container}" in pod "{meta["name"]}" not found')
        raise errors.bad_request(
            f"lahar up's runtime appends every instance of container {container} to one log: ask without --previous"
        )
    if not (pod.get("spec") or {}).get("nodeName"):
        return web.Response(body=b"", content_type="text/plain")  # not started anywhere: nothing yet
    if finder is None:
        raise errors.bad_request("this API server runs no pods (lahar apiserver alone): pod logs come with lahar up")
    logs = finder(meta["namespace"], meta["name"])
    path = logs.directory / f"{container}.log" if logs is not None else None
    if logs is None or path is None or not path.exists():
        raise ApiError(
            400,
            "BadRequest",
            f'container "{container}" in pod "{meta["name"]}" has no log on this machine '
            "(not started yet, or on a simulated node, which runs nothing)",
        )
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    sent = 0

    async def send(chunk: bytes) -> bool:
        """Write within limitBytes; False once the limit is reached."""
        nonlocal sent
        if limit is not None:
            chunk = chunk[: max(limit - sent, 0)]
        if chunk:
            await response.write(chunk)
            sent += len(chunk)
        return limit is None or sent < limit

    try:
        with open(path, "rb") as log_file:
            going = await send(tail(log_file.read(), tail_lines))
            while going and follow and logs.directory.is_dir() and logs.running(container):
                await asyncio.sleep(FOLLOW_POLL_SECONDS)
                while going and (chunk := log_file.read(CHUNK)):
                    going = await send(chunk)
            if going and follow:
                await send(log_file.read())  # what the last moments wrote
        await response.write_eof()
    except (ConnectionResetError, RuntimeError):
        pass  # the client went away (kubectl logs -f interrupted)
    return response
