"""A small HTTP server for a component's Prometheus registry: `/metrics` (the registry in the text
exposition format) and `/healthz` (also `/readyz`; and `/livez`, which a component may answer
from its liveness alone: 200 or 503 with the reason), served from a daemon thread. Shared by the
agent and the controller; each brings its own registry and its own idea of healthy."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

# (healthy, reason): the reason is the body of /healthz either way.
Health = Callable[[], tuple[bool, str]]
HEALTH_PATHS = ("/healthz", "/readyz", "/livez")


class MetricsServer:
    """`/metrics` and `/healthz` on a port of their own (port 0 picks a free one: see `port`)."""

    def __init__(
        self, registry: CollectorRegistry, healthy: Health, address: str, port: int, live: Health | None = None
    ) -> None:
        self.registry = registry
        self.healthy = healthy  # /healthz and /readyz
        self.live = live or healthy  # /livez: only what a restart would cure
        try:
            self.httpd = ThreadingHTTPServer((address, port), self._handler())
        except OSError as exc:  # say which listener failed, not just "Address already in use"
            raise OSError(exc.errno, f"cannot serve /metrics on {address}:{port}: {exc.strerror or exc}") from exc
        self.httpd.daemon_threads = True
        self.port: int = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(server.registry), CONTENT_TYPE_LATEST)
                elif path in HEALTH_PATHS:
                    ok, reason = server.live() if path == "/livez" else server.healthy()
                    self._send(200 if ok else 503, (reason + "\n").encode(), "text/plain; charset=utf-8")
                else:
                    self._send(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
