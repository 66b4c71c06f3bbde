"""The scheduler's loop: cache -> snapshot -> session -> binder and status writer, once a period
and on demand.

A cycle runs every `period` seconds, and sooner when work arrives (a pending pod of ours, a
PodGroup, a Queue, a node, the last victim gone of a gang nominated to the room they held,
`Cache._room_freed`): the cache wakes the loop, which waits `debounce` seconds so that a
burst of arrivals (a 1000-pod job) is decided in one cycle. A pod of a PodGroup that still has
fewer pods than minMember does not wake it while the gang plugin holds such a job back
(`Cache.gangs_wait`): the pod that completes the gang does. Each cycle:

1. takes the configuration in force (ConfWatcher: a changed file is reloaded; a refused one is
   logged and counted, and the last good one stays);
2. snapshots the cache and runs the session's actions on the snapshot (pure: no I/O);
3. assumes the committed binds and evictions in the cache at once (the next cycle sees them),
   then hands them to the binder, which works while the next cycles run;
4. sends what changed of PodGroup and Queue statuses, and Events, to the status writer (which
   does not hold the loop either); records metrics.

Idle cycles are skipped: a cycle is a function of the cache, the configuration and, through the
report-based plugins, the agents' reports and the clock. After a quiet cycle (no eviction, no
pipelined task, no status write or new Event, and no bind or none left pending) the next one
would be quiet too while none of these moved: the cache's change counter (`Cache.changes`), the
configuration, the status writer's failures (a refused write is retried by a later cycle) and,
with work pending, reports and bind confirmations (a session that read reports places pending
tasks with them; a confirmed bind is a possible victim). Such a turn of the loop costs a few
comparisons, so binds and informers keep the CPU a full cycle over thousands of nodes would
take; a cycle still runs every `resync_period` seconds whatever happens, as a safety net.

Faults: informers retry an unreachable API with backoff and re-list after a watch expires, keeping
what they have; a cycle that raises is logged and counted and the next one waits with capped
backoff; the binder and status writer log refusals and leave the rest to later cycles. The first
cycle waits until every informer has listed (a node listed before its pods would look empty). A
restarted scheduler binds nothing twice: the cache only places pods without `spec.nodeName`, and
a bind the API says is already done on the same node counts as done.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lahar.api import kinds
from lahar.api.kinds import Kind
from lahar.client.events import QueuedEventRecorder, rfc3339
from lahar.client.informer import Backoff
from lahar.scheduler.binder import Binder
from lahar.scheduler.cache import DEFAULT_SCHEDULER_NAMES, SchedulerCache
from lahar.scheduler.conf import ConfWatcher
from lahar.scheduler.framework.options import SchedulerConf
from lahar.scheduler.framework.session import REPORT_STALENESS_SECONDS, Session, paused_collector, run_cycle
from lahar.scheduler.metrics import SchedulerMetrics
from lahar.scheduler.node_reports import NodeReportStore
from lahar.scheduler.shards import NOT_SHARDED, Sharding
from lahar.scheduler.status import COMPONENT, StatusWriter, summarize

log = logging.getLogger("lahar.scheduler")

DEFAULT_PERIOD = 1.0
DEFAULT_DEBOUNCE = 0.02
DEFAULT_RESYNC_PERIOD = 30.0  # the longest a quiet scheduler goes without a cycle
DEFAULT_REPORT_STALENESS = REPORT_STALENESS_SECONDS  # the plugins' default `staleness`, for the metrics


@dataclass(frozen=True)
class _Quiet:
    """What a quiet cycle ran on (see the module docstring)."""

    ended: float  # monotonic
    changes: int  # Cache.changes when its snapshot was taken
    confirmations: int
    conf: SchedulerConf
    status_failures: int
    read_reports: bool


class Scheduler:
    """The scheduler (see the module docstring). `start()`/`stop()` run it on a thread of its own;
    `run()` runs it on the caller's thread until `stop()`. `conf_path` None: the default
    configuration. A bad configuration file at construction raises ConfError."""

    def __init__(
        self,
        api: Any,
        conf_path: str | Path | None = None,
        scheduler_names: Sequence[str] = DEFAULT_SCHEDULER_NAMES,
        period: float = DEFAULT_PERIOD,
        reports: NodeReportStore | None = None,
        *,
        metrics: SchedulerMetrics | None = None,
        debounce: float = DEFAULT_DEBOUNCE,
        report_staleness: float = DEFAULT_REPORT_STALENESS,
        bind_workers: int = 32,
        evict_workers: int = 32,
        resync_period: float = DEFAULT_RESYNC_PERIOD,
        sharding: Sharding = NOT_SHARDED,
    ) -> None:
        if period <= 0:
            raise ValueError(f"the scheduling period must be positive, not {period}")
        self.api = api
        self.period = period
        self.debounce = debounce
        self.resync_period = resync_period
        self.reports = reports if reports is not None else NodeReportStore()
        self.conf = ConfWatcher(Path(conf_path) if conf_path is not None else None)
        self._work = threading.Event()
        self._stopping = threading.Event()
        self._informing = False  # run() started the informers (a test may feed the cache itself)
        self.cache = SchedulerCache(api, scheduler_names, on_work=self._work.set, sharding=sharding)
        self.metrics = metrics or SchedulerMetrics(self.reports, self.cache.node_names, report_staleness)
        # Events are written by threads of their own: a bind worker is free for the next bind as
        # soon as its pod is bound, not once the pod's "Scheduled" Event is stored too.
        self.events = QueuedEventRecorder(api, COMPONENT)
        self.binder = Binder(
            api, self.cache, self.metrics, self.events, workers=bind_workers, evict_workers=evict_workers
        )
        self.status = StatusWriter(api, self.events, on_written=self._written)
        self.cycles = 0
        self.skipped = 0  # turns of the loop that had nothing to do (see the module docstring)
        self.last_cycle_at: float | None = None  # monotonic end of the last cycle completed or skipped
        self.last_turn_at: float | None = None  # monotonic end of the last pass of the loop, failed ones too
        self._quiet: _Quiet | None = None  # the last cycle, when it was quiet
        self.last_session: Session | None = None
        self._reload_failures_seen = self.conf.failures
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Run on a thread of its own (informers start there too)."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("the scheduler is already running")
        self._stopping.clear()
        self._thread = threading.Thread(target=self.run, name="lahar-scheduler", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """Start the informers, wait for their first lists, then cycle until stop()."""
        self.cache.start_informers(self.conf.current().plugin_names)
        self._informing = True
        waiting_since, told = time.monotonic(), False
        while not self.cache.wait_for_sync(0.5):
            if self._stopping.is_set():
                return
            if not told and time.monotonic() - waiting_since > 5:
                log.warning("waiting for the API: not every informer has listed yet (no cycle before they have)")
                told = True
        log.info("scheduler cache synced: %d nodes; cycling every %gs", len(self.cache.node_names()), self.period)
        self._loop()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop cycling, stop the informers, let binds and evictions in flight finish."""
        self._stopping.set()
        self._work.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self.cache.stop()
        if not self.binder.wait_idle(timeout):
            log.warning("binds still in flight after %.0fs at shutdown", timeout)
        self.binder.close()
        self.status.close()
        self.events.close(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def live(self) -> tuple[bool, str]:
        """For /livez: the loop keeps turning, whether its cycles succeed or not (an API outage
        fails cycles, and restarting the scheduler would not end it)."""
        if self._thread is not None and not self._thread.is_alive() and not self._stopping.is_set():
            return False, "the scheduling loop has ended"
        if self.last_turn_at is None:
            return True, "starting: waiting for the API"
        age = time.monotonic() - self.last_turn_at
        limit = max(10 * self.period, 60.0)
        if age > limit:
            return False, f"the scheduling loop is stuck: no pass ended for {age:.0f}s (limit {limit:.0f}s)"
        return True, "ok"

    def healthy(self) -> tuple[bool, str]:
        """For /healthz: synced with the API and cycling."""
        if not self.cache.synced:
            return False, "waiting for the API (informers not synced)"
        if self.last_cycle_at is None:
            return False, "no scheduling cycle finished yet"
        age = time.monotonic() - self.last_cycle_at
        limit = max(3 * self.period, 10.0)
        if age > limit:
            return False, f"the last cycle finished {age:.0f}s ago (limit {limit:.0f}s)"
        return True, f"ok: {self.cycles} cycles, the last {age:.1f}s ago"

    # -- the loop --------------------------------------------------------------------------------

    def _loop(self) -> None:
        backoff = Backoff(initial=min(self.period, 1.0), cap=max(self.period * 5, 5.0))
        due = time.monotonic()
        while not self._stopping.is_set():
            woken = self._work.wait(max(due - time.monotonic(), 0.0))
            if self._stopping.is_set():
                break
            if woken and self.debounce > 0:
                self._stopping.wait(self.debounce)  # let a burst of arrivals land in this cycle
            self._work.clear()
            due = time.monotonic() + self.period
            self.last_turn_at = time.monotonic()
            if self.idle():
                self.skipped += 1
                self.last_cycle_at = time.monotonic()  # the loop is alive: it found nothing to do
                continue
            try:
                self.run_once()
                backoff.reset()
            except Exception:  # a bug or an outage must not end the scheduler: the next cycle retries
                self.metrics.cycle_failures.inc()
                delay = backoff.next_delay()
                self._quiet = None
                log.exception("scheduling cycle failed; the next one in %.2fs", delay)
                due = time.monotonic() + delay
                self._work.clear()

    def idle(self) -> bool:
        """Whether a cycle now would only repeat the last one, a quiet one (module docstring)."""
        quiet, cache = self._quiet, self.cache
        if quiet is None or time.monotonic() - quiet.ended >= self.resync_period:
            return False
        if (
            cache.changes != quiet.changes
            or self.conf.current() is not quiet.conf
            or self.conf.failures != self._reload_failures_seen
            or self.status.failures != quiet.status_failures
        ):
            return False
        if quiet.read_reports or cache.confirmations != quiet.confirmations:
            return not cache.pending_work()
        return True

    def run_once(self) -> Session:
        """One cycle (see the module docstring); the session it ran."""
        started = time.perf_counter()
        conf = self.conf.current()
        if self.conf.failures != self._reload_failures_seen:
            self.metrics.conf_reload_failures.inc(self.conf.failures - self._reload_failures_seen)
            self._reload_failures_seen = self.conf.failures
        self.metrics.conf_warnings.set(len(conf.warnings))
        if self._informing:  # a reload may name a plugin that reads one more kind
            self.cache.start_informers(conf.plugin_names)
        # Read before the snapshot: a change in between only costs one more cycle.
        changes, confirmations, status_failures = self.cache.changes, self.cache.confirmations, self.status.failures
        with paused_collector():
            snapshot = self.cache.snapshot()
            snapshot_seconds = time.perf_counter() - started
            session = run_cycle(snapshot, conf, self.reports)
            for batch in session.binds:
                self.cache.assume(batch, session.pod_annotations)
            self.cache.assume_evicted([eviction.task for eviction in session.evictions])
            self.cache.nominate(session.pipelined)
            self.cache.gangs_wait = session.gangs_wait()
        self.binder.submit(session.binds, session.pod_annotations)
        self.binder.evict(session.evictions)
        figures = summarize(session)
        written = self.status.write(session, figures, self.cache.nodeshard_status(rfc3339(self.status.clock())))
        self.metrics.observe_cycle(time.perf_counter() - started, session.action_seconds, figures)
        self.metrics.observe_session(time.perf_counter() - started, snapshot_seconds, session)
        self.cycles += 1
        self.last_cycle_at = time.monotonic()
        self.last_session = session
        # Binds that leave nothing pending are quiet too: once assumed, the cache is the state the
        # session ended on, with nothing left to place (the statuses they change are written by
        # this cycle, which is then not quiet: the next one compares again).
        quiet = not (session.evictions or session.pipelined or written) and (
            not session.binds or not self.cache.pending_work()
        )
        self._quiet = (
            _Quiet(self.last_cycle_at, changes, confirmations, conf, status_failures, session.read_reports)
            if quiet
            else None
        )
        return session

    def _written(self, kind: Kind, obj: dict[str, Any]) -> None:
        if kind is kinds.PODGROUP:
            self.cache.update_podgroup(None, obj, written=True)
        elif kind is kinds.QUEUE:
            self.cache.update_queue(None, obj, written=True)
        elif kind is kinds.NODESHARD:
            self.cache.update_nodeshard(None, obj)
