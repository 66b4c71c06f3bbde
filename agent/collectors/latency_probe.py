"""An online pod's own latency against its target, Heracles-style slack: the second signal of the
CPU interference controller, for pods that declare one (docs/qos.md, "CPU interference control").

    metadata:
      annotations:
        lahar.dev/latency-probe: tcp://10.1.2.3:6379        # or http://10.1.2.3:8080/healthz
        lahar.dev/latency-target: 5ms                       # a Go duration

The agent times the probe every `PROBE_INTERVAL_SECONDS` (a TCP connect, or an HTTP GET to the
end of the response headers), keeps the last `WINDOW_SAMPLES` and reports the slack of their
p90: `1 - p90 / target` (below 0: the pod misses its target; a probe that fails or times out
counts as twice the target). Probes run in one thread of their own, so a slow target never
delays the control loop."""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lahar.api.job import parse_duration

log = logging.getLogger("lahar.agent.qos")

PROBE_ANNOTATION = "lahar.dev/latency-probe"
HISTOGRAM_ANNOTATION = "lahar.dev/latency-histogram"  # collectors/latency_histogram.py
TARGET_ANNOTATION = "lahar.dev/latency-target"
PROBE_INTERVAL_SECONDS = 0.1
WINDOW_SAMPLES = 20  # two seconds of probes: a p90 over 20 samples moves with 2 slow ones
FAILED_PROBE_FACTOR = 2.0  # a probe that fails counts as this many targets
MAX_TARGET_SECONDS = 10.0


@dataclass(frozen=True)
class LatencyProbe:
    scheme: str  # tcp or http
    host: str
    port: int
    path: str  # http only
    target_seconds: float

    @property
    def timeout(self) -> float:
        return self.target_seconds * FAILED_PROBE_FACTOR


def parse_probe(annotations: Mapping[str, Any]) -> LatencyProbe | None:
    """The pod's probe, None when it declares none; ValueError naming the annotation when bad."""
    address, target = annotations.get(PROBE_ANNOTATION), annotations.get(TARGET_ANNOTATION)
    if address is None and (target is None or HISTOGRAM_ANNOTATION in annotations):
        return None  # no probe (a target beside a latency histogram is the histogram's)
    if not isinstance(address, str) or not isinstance(target, str):
        raise ValueError(f"{PROBE_ANNOTATION} and {TARGET_ANNOTATION} must be given together")
    try:
        seconds = parse_duration(target)
    except ValueError as exc:
        raise ValueError(f"{TARGET_ANNOTATION}: {exc}") from exc
    if not 0 < seconds <= MAX_TARGET_SECONDS:
        raise ValueError(f"{TARGET_ANNOTATION}: must be in (0, {MAX_TARGET_SECONDS:g}s], got {target!r}")
    parts = urlsplit(address)
    if parts.scheme not in ("tcp", "http") or not parts.hostname:
        raise ValueError(f'{PROBE_ANNOTATION}: expected "tcp://HOST:PORT" or "http://HOST:PORT/PATH", got {address!r}')
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{PROBE_ANNOTATION}: {exc}") from exc
    if port is None:
        raise ValueError(f"{PROBE_ANNOTATION}: a port is required, got {address!r}")
    return LatencyProbe(parts.scheme, parts.hostname, port, parts.path or "/", seconds)


def time_probe(probe: LatencyProbe, clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds one probe took; the failure cost (twice the target) when it failed or timed out."""
    started = clock()
    try:
        with socket.create_connection((probe.host, probe.port), timeout=probe.timeout) as connection:
            if probe.scheme == "http":
                request = f"GET {probe.path} HTTP/1.1\r\nHost: {probe.host}\r\nConnection: close\r\n\r\n"
                connection.sendall(request.encode())
                received = b""
                while b"\r\n\r\n" not in received:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    received += chunk
                if not received.startswith(b"HTTP/"):
                    return probe.timeout
    except OSError:
        return probe.timeout
    return min(clock() - started, probe.timeout)


def slack(latencies: Sequence[float], target: float) -> float | None:
    """1 - p90/target of the samples (nearest rank); None without samples."""
    if not latencies:
        return None
    ordered = sorted(latencies)
    p90 = ordered[min(len(ordered) - 1, max(0, math.ceil(0.9 * len(ordered)) - 1))]
    return 1.0 - p90 / target


class LatencyProber:
    """Probes every declared pod in a thread of its own; `slack()` is the worst pod's slack."""

    def __init__(self, probe: Callable[[LatencyProbe], float] = time_probe) -> None:
        self.probe = probe
        self._probes: dict[str, LatencyProbe] = {}  # pod uid -> its probe
        self._samples: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_probes(self, probes: Mapping[str, LatencyProbe]) -> None:
        """The pods to probe now (a tick's view); samples of a pod whose probe changed start over."""
        with self._lock:
            for uid in list(self._samples):
                if probes.get(uid) != self._probes.get(uid):
                    del self._samples[uid]
            self._probes = dict(probes)
        if probes and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="qos-latency-probe", daemon=True)
            self._thread.start()

    def step(self) -> None:
        with self._lock:
            probes = dict(self._probes)
        for uid, probe in probes.items():
            seconds = self.probe(probe)
            with self._lock:
                if self._probes.get(uid) == probe:
                    self._samples.setdefault(uid, deque(maxlen=WINDOW_SAMPLES)).append(seconds)

    def slack(self) -> float | None:
        """The smallest slack over the probed pods; None when no pod declares a probe."""
        with self._lock:
            found = [
                value
                for uid, probe in self._probes.items()
                if (value := slack(list(self._samples.get(uid, ())), probe.target_seconds)) is not None
            ]
        return min(found) if found else None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.step()
            except Exception:  # probing is a bonus: the wait signal still runs the controller
                log.exception("latency probes failed")
            self._stop.wait(max(PROBE_INTERVAL_SECONDS - (time.monotonic() - started), 0.0))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
