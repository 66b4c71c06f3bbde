"""The agents' latest reports, as the scheduler sees them.

One store is shared by the gRPC server that writes it (its own thread) and the scheduler loop and
plugins that read it, so every method takes a lock. Each node keeps only its latest report and
when it arrived; the age is measured on the store's clock from arrival, not from the agent's
timestamp, so a node whose clock is off still ages correctly. Usage-based plugins ask `fresh()`
with their staleness limit and treat None as "no live data on this node" (no borrowing, no
usage-based scoring).

The server stores the validated report's bytes (a WireReport: it parsed only the report's
header, lahar.rpc.convert.parse_report_header) and the store decodes them on first read: decoding
a report into dataclasses costs about as much CPU as receiving it (`python -m bench.ingest
--read-interval 1` shows both), and a report superseded before anyone reads it is never decoded.
Readers that need every node each cycle pay one decode per node per new report."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import NamedTuple

from lahar.rpc.convert import report_from_proto
from lahar.rpc.report import NodeReport
from lahar.rpc.v1 import agent_pb2 as pb

log = logging.getLogger("lahar.scheduler.node_reports")

ACCEPTED = "accepted"

Listener = Callable[[str], None]  # called with the node name after its report changed


class WireReport(NamedTuple):
    """A received report as the server accepted it: its node and sequence, and its bytes, which
    validate_wire_reports passed (so they parse as a pb.NodeReport)."""

    node: str
    sequence: int
    wire: bytes


Report = NodeReport | pb.NodeReport | WireReport


class _Latest:
    """A node's latest report and when it arrived; a wire message or its bytes are decoded once,
    when first read."""

    __slots__ = ("_source", "received_at", "sequence")

    def __init__(self, source: Report, received_at: float) -> None:
        self.received_at = received_at
        self.sequence = source.sequence
        self._source = source

    def report(self) -> NodeReport:
        source = self._source
        if isinstance(source, NodeReport):
            return source
        message = pb.NodeReport.FromString(source.wire) if isinstance(source, WireReport) else source
        # Two readers may decode at once; both get equal reports and either one is kept.
        decoded = self._source = report_from_proto(message)
        return decoded


class NodeReportStore:
    """The latest report of each node, with its age; thread-safe. `clock` (monotonic seconds by
    default) stamps arrivals and measures ages."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: dict[str, _Latest] = {}
        self._counts: Counter[str] = Counter()
        self._listeners: tuple[Listener, ...] = ()  # replaced, never changed in place: read without the lock
        self.sequence_resets = 0  # reports whose sequence went back: agent restarts

    def submit(self, report: Report, received_at: float | None = None) -> None:
        """Keep `report` as its node's latest. A wire message must already have passed
        validate_report, a WireReport validate_wire_reports. A sequence lower than the previous
        one means the agent restarted: the report is still the newest thing the node said, so it
        replaces the previous one."""
        self.submit_many([report], received_at)

    def submit_many(self, reports: Sequence[Report], received_at: float | None = None) -> None:
        """submit() for reports that arrived together (a batch of the report server), in order."""
        if not reports:
            return
        at = self._clock() if received_at is None else received_at
        latest = self._latest
        with self._lock:
            for report in reports:
                previous = latest.get(report.node)
                if previous is not None and report.sequence < previous.sequence:
                    self.sequence_resets += 1
                latest[report.node] = _Latest(report, at)
            self._counts[ACCEPTED] += len(reports)
        if self._listeners:
            for report in reports:
                self._notify(report.node)

    def refuse(self, reason: str) -> None:
        """Count a report refused before it reached the store (malformed, invalid, ...)."""
        with self._lock:
            self._counts[reason] += 1

    def latest(self, node: str) -> NodeReport | None:
        with self._lock:
            latest = self._latest.get(node)
        return None if latest is None else latest.report()

    def age(self, node: str, now: float | None = None) -> float | None:
        """Seconds since the node's latest report arrived, on the store's clock; None if none did."""
        with self._lock:
            latest = self._latest.get(node)
        return None if latest is None else self._since(latest, now)

    def fresh(self, node: str, staleness_seconds: float, now: float | None = None) -> NodeReport | None:
        """The node's latest report if it arrived at most `staleness_seconds` ago, else None."""
        with self._lock:
            latest = self._latest.get(node)
        if latest is None or self._since(latest, now) > staleness_seconds:
            return None
        return latest.report()

    def _since(self, latest: _Latest, now: float | None) -> float:
        return (self._clock() if now is None else now) - latest.received_at

    def nodes(self) -> list[str]:
        with self._lock:
            return sorted(self._latest)

    def forget(self, node: str) -> bool:
        """Drop a node's report (the node left the cluster); True if there was one."""
        with self._lock:
            found = self._latest.pop(node, None) is not None
        if found:
            self._notify(node)
        return found

    def counts(self) -> dict[str, int]:
        """Reports by result: "accepted" and each refusal reason (lahar_scheduler_reports_total{result})."""
        with self._lock:
            return dict(self._counts)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(node)` after each change of a node's report (from the writer's thread:
        keep it short, e.g. set an event). Returns the function that unsubscribes it."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._lock:
                self._listeners = tuple(known for known in self._listeners if known is not listener)

        return unsubscribe

    def _notify(self, node: str) -> None:
        for listener in self._listeners:
            try:
                listener(node)
            except Exception:  # a listener's bug must not stop reports from being stored
                log.exception("node report listener %r failed for node %s", listener, node)
