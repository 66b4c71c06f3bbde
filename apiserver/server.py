"""Running the embedded API server: data directory, listening address, token, signals."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from lahar.apiserver import limits
from lahar.apiserver.app import ApiServer
from lahar.apiserver.podexec import ExecFinder
from lahar.apiserver.podlogs import LogFinder
from lahar.apiserver.store import DEFAULT_HISTORY_BYTES, Store
from lahar.endpoints import EMBEDDED_HOST, EMBEDDED_PORT, is_explicit_loopback
from lahar.tls import TlsFiles, ensure_self_signed

log = logging.getLogger("lahar.apiserver")

DEFAULT_PORT = EMBEDDED_PORT
DEFAULT_HOST = EMBEDDED_HOST
DB_FILE = "lahar.db"


class ConfigError(ValueError):
    """A refused server setting; the message says which and why."""


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token_file: Path | None = None
    fsync: str = "normal"  # "full": survive power loss too, one fsync per write
    watch_history: int = 200_000  # changes kept for watches that resume from a resourceVersion
    watch_history_bytes: int = DEFAULT_HISTORY_BYTES  # and the most bytes of objects they hold
    event_ttl: float = 3600.0  # seconds an Event lives, as kube-apiserver's --event-ttl
    max_connections: int = limits.MAX_CONNECTIONS
    header_timeout: float = limits.HEADER_TIMEOUT_SECONDS  # a request head must arrive within this
    body_timeout: float = limits.BODY_TIMEOUT_SECONDS  # and its body within this
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    pod_logs: LogFinder | None = None  # lahar up's: finds its runtime's container logs (pods/log)
    pod_exec: ExecFinder | None = None  # lahar up's: finds its runtime's running containers (pods/exec, attach)

    def token(self) -> str | None:
        """The bearer token; required on any address but an explicit loopback one (127.0.0.1,
        ::1, or localhost when it resolves to nothing else)."""
        if self.token_file is None:
            if not is_explicit_loopback(self.host):
                raise ConfigError(
                    f"listening on {self.host} requires --token-file (only 127.0.0.1, ::1 and a localhost "
                    "that resolves to them alone may go without one)"
                )
            return None
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read --token-file {self.token_file}: {exc.strerror}") from exc
        if not token:
            raise ConfigError(f"--token-file {self.token_file} is empty")
        return token


def private_directory(directory: Path) -> None:
    """The data directory, made or narrowed to its owner (0700): the database holds Secrets and
    the token, as etcd keeps its data directory."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if directory.stat().st_mode & 0o077:
        log.warning("narrowing %s to its owner (0700): it holds the cluster's Secrets", directory)
        directory.chmod(0o700)


def tls_files(config: ServerConfig, token: str | None) -> TlsFiles | None:
    """HTTPS with the given certificate, or with a self-made one when a token guards the server
    (client-go sends tokens only over TLS); plain HTTP on loopback without a token."""
    if config.tls_cert_file is not None or config.tls_key_file is not None:
        if config.tls_cert_file is None or config.tls_key_file is None:
            raise ConfigError("--tls-cert-file and --tls-private-key-file go together")
        return TlsFiles(config.tls_cert_file, config.tls_key_file, None)
    if token is None:
        return None
    return ensure_self_signed(config.data_dir / "tls", [config.host])


def ssl_context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS certificate {files.cert} and key {files.key}: {exc}") from exc
    return context


def validate(config: ServerConfig) -> str | None:
    if not 0 <= config.port <= 65535:
        raise ConfigError(f"--port {config.port} is not a TCP port (0-65535)")
    if config.fsync not in ("normal", "full"):
        raise ConfigError(f'--fsync must be "normal" or "full", not "{config.fsync}"')
    if config.watch_history < 1:
        raise ConfigError(f"--watch-history must be at least 1, not {config.watch_history}")
    if config.watch_history_bytes < 1:
        raise ConfigError(f"--watch-history-bytes must be at least 1, not {config.watch_history_bytes}")
    if not config.event_ttl > 0:  # NaN too
        raise ConfigError(f"--event-ttl must be a positive number of seconds, not {config.event_ttl}")
    if config.max_connections < 1:
        raise ConfigError(f"--max-connections must be at least 1, not {config.max_connections}")
    for flag, seconds in (
        ("--request-header-timeout", config.header_timeout),
        ("--request-body-timeout", config.body_timeout),
    ):
        if not seconds > 0:
            raise ConfigError(f"{flag} must be a positive number of seconds, not {seconds}")
    return config.token()


async def serve(
    config: ServerConfig,
    on_ready: Callable[[str], Coroutine[Any, Any, None]] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until `stop` is set (or SIGINT/SIGTERM); `on_ready(url)` runs once the port listens."""
    token = validate(config)
    private_directory(config.data_dir)
    tls = tls_files(config, token)
    context = ssl_context(tls) if tls is not None else None
    store = Store(
        config.data_dir / DB_FILE,
        history_size=config.watch_history,
        fsync=config.fsync,
        history_bytes=config.watch_history_bytes,
    )
    server = ApiServer(
        store,
        token=token,
        event_ttl=config.event_ttl,
        body_timeout=config.body_timeout,
        pod_logs=config.pod_logs,
        pod_exec=config.pod_exec,
    )
    runner = web.AppRunner(server.make_app(), access_log=None, handle_signals=False, shutdown_timeout=5)
    await runner.setup()
    site = limits.GuardedSite(
        runner,
        lambda factory: limits.ConnectionGuard(factory, config.max_connections, config.header_timeout),
        host=config.host,
        port=config.port,
        backlog=1024,
        ssl_context=context,
    )
    await site.start()
    server.connections = site.guard
    port = runner.addresses[0][1] if runner.addresses else config.port
    url = f"{'https' if context else 'http'}://{config.host}:{port}"
    print(
        f"lahar apiserver listening on {url} (data: {config.data_dir / DB_FILE}, revision {store.revision})", flush=True
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # not the main thread: the caller stops us through `stop`
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    greeting = asyncio.create_task(on_ready(url)) if on_ready is not None else None
    try:
        await stop.wait()
    finally:
        if greeting is not None:
            greeting.cancel()
        await runner.cleanup()
        store.close()
        print("lahar apiserver stopped", flush=True)
