"""`pods/exec` and `pods/attach` for the pods lahar up's local runtime runs, over the WebSocket
remote-command protocol kubectl speaks (`v5.channel.k8s.io`, else `v4.channel.k8s.io`).

Every binary message starts with its channel: 0 stdin (client to server), 1 stdout, 2 stderr,
3 error (a Status when the command ends: Success, or NonZeroExitCode with the exit code, which
kubectl exits with), 4 terminal resize (`{"Width":..,"Height":..}`); in v5 a message on channel
255 carrying a channel number closes that channel (kubectl closes stdin so at end of input).
As kubelet does, the server first writes an empty message on the lowest output channel.

The server does not know how the runtime runs a container: `lahar up` hands it a finder (the
local node's `exec_target`) that gives a running container's environment, working directory and
cgroups, so an exec'd command runs as the container's own processes do. `lahar apiserver` alone
runs no pods and says so. SPDY (the older transport, which kubectl falls back to when the
WebSocket upgrade is refused) is not served.

`attach` follows the container's output from now on (its log: the runtime gives containers no
terminal or stdin to share), and ends when the container does.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import pty
import struct
import termios
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from aiohttp import WSMsgType, web

from lahar.apiserver import errors

PROTOCOLS: Final = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
CHUNK: Final = 32 * 1024
ATTACH_POLL_SECONDS: Final = 0.2


class ExecTarget(Protocol):
    """A running container as exec needs it (node's ExecTarget)."""

    @property
    def env(self) -> dict[str, str]: ...

    @property
    def cwd(self) -> Path: ...

    @property
    def log_path(self) -> Path: ...

    def argv(self, command: Sequence[str]) -> list[str]: ...  # joined to the container's cgroups

    def running(self) -> bool: ...


ExecFinder = Callable[[str, str, str], "ExecTarget | None"]  # (namespace, pod, container)


def success_status() -> dict[str, Any]:
    return {"metadata": {}, "status": "Success"}


def exit_status(command: Sequence[str], code: int) -> dict[str, Any]:
    """kubelet's Status for a command that exited non-zero; kubectl exits with the code it carries."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command {list(command)}, "
        f"exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def failure_status(message: str) -> dict[str, Any]:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500}


def frame(channel: int, data: bytes = b"") -> bytes:
    return bytes([channel]) + data


def _flag(query: Any, name: str) -> bool:
    return query.get(name, "").lower() in ("true", "1")


def _container(pod: dict[str, Any], query: Any) -> str:
    """The container asked for; the pod's only (or annotated default) container when none is."""
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    wanted = query.get("container", "")
    name = pod["metadata"]["name"]
    if not wanted:
        default = (pod["metadata"].get("annotations") or {}).get("kubectl.kubernetes.io/default-container")
        if default in names:
            return str(default)
        if len(names) != 1:
            raise errors.bad_request(
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(map(str, names))}]"
            )
        return str(names[0])
    if wanted not in names:
        raise errors.bad_request(f"container {wanted} is not valid for pod {name}")
    return str(wanted)


def _target(request: web.Request, pod: dict[str, Any], finder: ExecFinder | None) -> tuple[str, ExecTarget]:
    """The running container a request names, or the error kube-apiserver gives."""
    name = pod["metadata"]["name"]
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise errors.bad_request(f"cannot exec into a container in a completed pod; current phase is {phase}")
    container = _container(pod, request.query)
    if finder is None:
        raise errors.bad_request(
            f"pod {name} does not run on this machine: `lahar apiserver` alone runs no pods (use lahar up)"
        )
    target = finder(pod["metadata"].get("namespace", ""), name, container)
    if target is None or not target.running():
        raise errors.bad_request(f'unable to upgrade connection: container not found ("{container}")')
    return container, target


async def _open(request: web.Request) -> web.WebSocketResponse:
    socket = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=0)
    if not socket.can_prepare(request).ok:
        raise errors.bad_request("pods/exec and pods/attach need a WebSocket upgrade (v5.channel.k8s.io)")
    await socket.prepare(request)
    return socket


async def serve_exec(request: web.Request, pod: dict[str, Any], finder: ExecFinder | None) -> web.StreamResponse:
    query = request.query
    command = query.getall("command", [])
    if not command:
        raise errors.bad_request("you must specify at least 1 command")
    use_stdin, use_stdout, use_stderr, tty = (_flag(query, n) for n in ("stdin", "stdout", "stderr", "tty"))
    if not (use_stdin or use_stdout or use_stderr):
        raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
    _, target = _target(request, pod, finder)
    socket = await _open(request)
    await socket.send_bytes(frame(STDOUT if use_stdout else STDERR if use_stderr else ERROR))
    try:
        status = await _run(socket, target, command, use_stdin, use_stdout, use_stderr, tty)
    except OSError as exc:  # the command could not start
        status = failure_status(f"failed to exec in container: {exc}")
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await socket.send_bytes(frame(ERROR, json.dumps(status).encode()))
        await socket.close()
    return socket


async def _run(
    socket: web.WebSocketResponse,
    target: ExecTarget,
    command: Sequence[str],
    use_stdin: bool,
    use_stdout: bool,
    use_stderr: bool,
    tty: bool,
) -> dict[str, Any]:
    """Run the command, pumping the channels, until it exits and its output is sent."""
    master = None
    if tty:  # one terminal for all three streams, as a container runtime gives with -t
        master, slave = pty.openpty()
        streams: dict[str, Any] = {"stdin": slave, "stdout": slave, "stderr": slave}
    else:
        pipe = asyncio.subprocess.PIPE
        streams = {
            "stdin": pipe if use_stdin else asyncio.subprocess.DEVNULL,
            "stdout": pipe if use_stdout else asyncio.subprocess.DEVNULL,
            "stderr": pipe if use_stderr else asyncio.subprocess.DEVNULL,
        }
    try:
        process = await asyncio.create_subprocess_exec(
            *target.argv(command), env=target.env, cwd=target.cwd, start_new_session=True, **streams
        )
    finally:
        if tty:
            os.close(streams["stdin"])
    pumps = []
    if master is not None:
        pumps.append(asyncio.create_task(_pump_fd(master, socket, STDOUT)))
    else:
        if process.stdout is not None:
            pumps.append(asyncio.create_task(_pump(process.stdout, socket, STDOUT)))
        if process.stderr is not None:
            pumps.append(asyncio.create_task(_pump(process.stderr, socket, STDERR)))
    reader = asyncio.create_task(_read_client(socket, process, master))
    try:
        code = await process.wait()
        await asyncio.gather(*pumps, return_exceptions=True)
    finally:
        reader.cancel()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
        if master is not None:
            os.close(master)
    return success_status() if code == 0 else exit_status(command, code if code > 0 else 128 - code)


async def _pump(stream: asyncio.StreamReader, socket: web.WebSocketResponse, channel: int) -> None:
    while chunk := await stream.read(CHUNK):
        await socket.send_bytes(frame(channel, chunk))


async def _pump_fd(fd: int, socket: web.WebSocketResponse, channel: int) -> None:
    """A terminal's output until its last writer closes it (EIO on Linux)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            chunk = await loop.run_in_executor(None, os.read, fd, CHUNK)
        except OSError:
            return
        if not chunk:
            return
        await socket.send_bytes(frame(channel, chunk))


async def _read_client(socket: web.WebSocketResponse, process: asyncio.subprocess.Process, master: int | None) -> None:
    """stdin, resizes and (v5) channel closes from the client; its going away ends the command."""
    async for message in socket:
        if message.type != WSMsgType.BINARY or not message.data:
            continue
        channel, data = message.data[0], message.data[1:]
        if channel == STDIN and data:
            if master is not None:
                os.write(master, data)
            elif process.stdin is not None:
                process.stdin.write(data)
                with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                    await process.stdin.drain()
        elif channel == CLOSE and data[:1] == bytes([STDIN]) and process.stdin is not None:
            process.stdin.close()
        elif channel == RESIZE and master is not None:
            _resize(master, data)
    if process.returncode is None:  # the client left: so does the command
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)


def _resize(fd: int, data: bytes) -> None:
    try:
        size = json.loads(data)
        rows, columns = int(size.get("Height", 0)), int(size.get("Width", 0))
    except (ValueError, TypeError, AttributeError):
        return
    if rows > 0 and columns > 0:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


async def serve_attach(request: web.Request, pod: dict[str, Any], finder: ExecFinder | None) -> web.StreamResponse:
    """The container's output from now on, until it ends (or the client leaves)."""
    query = request.query
    if _flag(query, "stdin"):
        raise errors.bad_request(
            "attach with stdin is not supported: lahar's local runtime gives containers no stdin to share"
        )
    _, target = _target(request, pod, finder)
    socket = await _open(request)
    await socket.send_bytes(frame(STDOUT))
    reader = asyncio.create_task(_drain(socket))
    try:
        with open(target.log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            while not reader.done():
                chunk = log.read(CHUNK)
                if chunk:
                    await socket.send_bytes(frame(STDOUT, chunk))
                elif not target.running():
                    break
                else:
                    await asyncio.sleep(ATTACH_POLL_SECONDS)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await socket.send_bytes(frame(ERROR, json.dumps(success_status()).encode()))
            await socket.close()
    finally:
        reader.cancel()
    return socket


async def _drain(socket: web.WebSocketResponse) -> None:
    async for _message in socket:
        pass
