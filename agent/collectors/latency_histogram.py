"""An online pod's own latency, from the Prometheus histogram it exports: the p99 an SRE puts next
to the BE CPU cap (docs/agent.md, "Online latency"; `lahar_pod_latency_p99_seconds`).

    metadata:
      annotations:
        lahar.dev/latency-metrics: http://10.1.2.3:8080/metrics      # where the pod serves it
        lahar.dev/latency-histogram: http_request_duration_seconds   # the histogram's name
        lahar.dev/latency-target: 20ms                               # optional: its target

The agent reads the pod's endpoint every `SCRAPE_SECONDS` (in a thread of its own, so a slow pod
never delays the control loop), sums the histogram's buckets over its series, and computes the
p99 of what was observed over the last `WINDOW_SECONDS` as Prometheus' histogram_quantile does
(linear within the bucket). With nothing observed in the window there is no p99 (an idle service
has no latency to show)."""

from __future__ import annotations

import logging
import math
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from lahar.agent.collectors.latency_probe import HISTOGRAM_ANNOTATION, MAX_TARGET_SECONDS, TARGET_ANNOTATION
from lahar.api.job import parse_duration

log = logging.getLogger("lahar.agent")

METRICS_ANNOTATION = "lahar.dev/latency-metrics"
SCRAPE_SECONDS = 5.0
WINDOW_SECONDS = 60.0
TIMEOUT_SECONDS = 2.0
QUANTILE = 0.99
MAX_BODY_BYTES = 8 << 20  # a pod's /metrics larger than this is not read

Buckets = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending, +Inf last


@dataclass(frozen=True)
class LatencySource:
    url: str
    metric: str
    target_seconds: float | None


@dataclass(frozen=True)
class PodLatency:
    namespace: str
    pod: str
    metric: str
    p99_seconds: float | None  # None: nothing observed in the window
    target_seconds: float | None


def parse_source(annotations: Mapping[str, Any]) -> LatencySource | None:
    """The pod's histogram, None when it names none; ValueError naming the annotation when bad."""
    url, metric = annotations.get(METRICS_ANNOTATION), annotations.get(HISTOGRAM_ANNOTATION)
    if url is None and metric is None:
        return None
    if not isinstance(url, str) or not isinstance(metric, str) or not metric:
        raise ValueError(f"{METRICS_ANNOTATION} and {HISTOGRAM_ANNOTATION} must be given together")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f'{METRICS_ANNOTATION}: expected "http://HOST:PORT/PATH", got {url!r}')
    target = annotations.get(TARGET_ANNOTATION)
    seconds = None
    if target is not None:
        try:
            seconds = parse_duration(str(target))
        except ValueError as exc:
            raise ValueError(f"{TARGET_ANNOTATION}: {exc}") from exc
        if not 0 < seconds <= MAX_TARGET_SECONDS:
            raise ValueError(f"{TARGET_ANNOTATION}: must be in (0, {MAX_TARGET_SECONDS:g}s], got {target!r}")
    return LatencySource(url, metric, seconds)


def histogram_buckets(text: str, metric: str) -> Buckets | None:
    """The histogram's cumulative buckets summed over all its series; None when the text has none."""
    summed: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != metric or family.type != "histogram":
            continue
        for sample in family.samples:
            if sample.name == f"{metric}_bucket":
                bound = float(sample.labels["le"])
                summed[bound] = summed.get(bound, 0.0) + sample.value
    if math.inf not in summed:
        return None
    return tuple(sorted(summed.items()))


def quantile(q: float, before: Buckets | None, after: Buckets) -> float | None:
    """The q-quantile of what was observed between two readings of a histogram, as Prometheus'
    histogram_quantile computes it: linear within the bucket, the highest finite bound when it
    falls in +Inf. None when nothing was observed (or the buckets changed, or the pod restarted)."""
    if before is not None and [b for b, _ in before] != [b for b, _ in after]:
        return None
    counts = [c - (before[i][1] if before else 0.0) for i, (_, c) in enumerate(after)]
    if any(c < 0 for c in counts) or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    lower_bound, lower_count = 0.0, 0.0
    for (bound, _), count in zip(after, counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return None


def fetch(url: str, timeout: float = TIMEOUT_SECONDS) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read(MAX_BODY_BYTES)).decode(errors="replace")


@dataclass
class _Watched:
    namespace: str
    pod: str
    source: LatencySource
    readings: deque[tuple[float, Buckets]]


class LatencyHistograms:
    """Reads the declared pods' histograms in a thread of its own; `latest()` gives their p99s."""

    def __init__(
        self,
        fetch_text: Callable[[str], str] = fetch,
        clock: Callable[[], float] = time.monotonic,
        window: float = WINDOW_SECONDS,
        background: bool = True,
    ) -> None:
        """`background`: read in a thread of its own (off: the caller calls `step`)."""
        self.background = background
        self.fetch_text = fetch_text
        self.clock = clock
        self.window = window
        self._watched: dict[str, _Watched] = {}  # pod uid ->
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()  # uids whose last read failed (said once, not every read)
        self._refused: set[str] = set()  # uids whose annotations were refused (said once)

    def watch(self, pods: list[dict[str, Any]]) -> None:
        """The pods to read now (the agent's view of its node's pods): those that name a histogram;
        a pod whose annotations are wrong is left out and said once. A changed source starts over."""
        wanted = {}
        for pod in pods:
            metadata = pod.get("metadata") or {}
            uid = str(metadata.get("uid", ""))
            try:
                source = parse_source(metadata.get("annotations") or {})
            except ValueError as exc:
                if uid not in self._refused:
                    log.warning(
                        "pod %s/%s: latency histogram ignored: %s", metadata.get("namespace"), metadata.get("name"), exc
                    )
                    self._refused.add(uid)
                continue
            self._refused.discard(uid)
            if source is not None:
                wanted[uid] = (str(metadata.get("namespace", "")), str(metadata.get("name", "")), source)
        with self._lock:
            for uid in list(self._watched):
                if uid not in wanted or wanted[uid][2] != self._watched[uid].source:
                    del self._watched[uid]
            for uid, (namespace, name, source) in wanted.items():
                if uid not in self._watched:
                    self._watched[uid] = _Watched(namespace, name, source, deque())
        if wanted and self.background and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="latency-histograms", daemon=True)
            self._thread.start()

    def step(self) -> None:
        with self._lock:
            watched = dict(self._watched)
        for uid, pod in watched.items():
            try:
                buckets = histogram_buckets(self.fetch_text(pod.source.url), pod.source.metric)
            except (OSError, ValueError) as exc:
                if uid not in self._failing:
                    log.warning("pod %s/%s: %s not read: %s", pod.namespace, pod.pod, pod.source.url, exc)
                    self._failing.add(uid)
                continue
            self._failing.discard(uid)
            if buckets is None:
                continue
            now = self.clock()
            with self._lock:
                readings = pod.readings
                readings.append((now, buckets))
                while len(readings) > 2 and now - readings[1][0] >= self.window:
                    readings.popleft()

    def latest(self) -> list[PodLatency]:
        with self._lock:
            watched = list(self._watched.values())
            found = []
            for pod in watched:
                p99 = None
                if len(pod.readings) >= 2:
                    p99 = quantile(QUANTILE, pod.readings[0][1], pod.readings[-1][1])
                found.append(PodLatency(pod.namespace, pod.pod, pod.source.metric, p99, pod.source.target_seconds))
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # a bonus figure: never the agent's end
                log.exception("reading latency histograms failed")
            self._stop.wait(SCRAPE_SECONDS)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
