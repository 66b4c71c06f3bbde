"""The loop skips a cycle that could only repeat the last, quiet one (scheduler.py): nothing in the
cache changed that a cycle reads, the configuration and the status writer's failures stand still,
and, with work pending, neither reports (when the session read them) nor bind confirmations moved.

The scheduler runs on a recording API stand-in: no informers are started; the cache is fed
directly, as informers would, and cycles are run with `run_once()`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lahar.api.kinds import Kind
from lahar.client.errors import KubeError
from lahar.scheduler.conf import DEFAULT_CONF
from lahar.scheduler.scheduler import Scheduler
from tests.scheduler.test_cache import a_pod, node
from tests.support import wait_for

Obj = dict[str, Any]
# The default configuration without its report-based tier (usage, oversubscription, numa-aware,
# deviceshare): its sessions read no agent reports.
NO_REPORTS_CONF = DEFAULT_CONF.split("- plugins:\n  - name: usage")[0]


class RecordingApi:
    """Binds, status patches and events succeed (a patch fails while `refuse` is set)."""

    def __init__(self) -> None:
        self.binds: list[tuple[str, str]] = []
        self.refuse = False
        self._lock = threading.Lock()

    def bind(self, namespace: str, name: str, node_name: str, uid: str = "") -> None:
        with self._lock:
            self.binds.append((name, node_name))

    def patch(self, kind: Kind, name: str, body: Obj, namespace: str | None = None, **_: Any) -> Obj:
        if self.refuse:
            raise KubeError("refused")
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "2"}, **body}

    def create(self, kind: Kind, obj: Obj, namespace: str | None = None) -> Obj:
        return obj


@contextmanager
def scheduler(tmp_path: Path, conf: str = DEFAULT_CONF) -> Iterator[Scheduler]:
    path = tmp_path / "scheduler.conf"
    path.write_text(conf)
    s = Scheduler(RecordingApi(), path, period=0.1, bind_workers=2)
    try:
        yield s
    finally:
        s.binder.wait_idle(10)
        s.binder.close()
        s.status.close()


def settle_on_an_unfit_pod(s: Scheduler) -> None:
    """A 1-CPU node and a 2-CPU pod that never fits; two cycles (the first records why)."""
    s.cache.add_node(node("n1", cpu="1"))
    s.cache.add_pod(a_pod("big", cpu="2"))
    s.run_once()
    s.run_once()


def confirmed(obj: Obj, node_name: str) -> Obj:
    """The pod as its watch event shows it once bound (no kubelet yet: still Pending)."""
    return {
        **obj,
        "metadata": {**obj["metadata"], "resourceVersion": "2"},
        "spec": {**obj["spec"], "nodeName": node_name},
        "status": {"phase": "Pending"},
    }


def test_a_quiet_cluster_skips_cycles_until_something_changes(tmp_path: Path) -> None:
    with scheduler(tmp_path) as s:
        s.cache.add_node(node("n1"))
        s.cache.add_pod(a_pod("p1"))
        assert not s.idle()  # nothing ran yet
        session = s.run_once()
        assert [t.name for batch in session.binds for t in batch.tasks] == ["p1"]
        assert s.idle()  # it bound everything pending: once assumed, nothing is left to decide

        # The bind lands and the pod comes back bound: a confirmation, nothing pending.
        s.binder.wait_idle(10)
        s.cache.update_pod(None, confirmed(a_pod("p1"), "n1"))
        assert s.idle()
        # A node's heartbeat (same allocatable, labels, taints) changes nothing either.
        s.cache.update_node(None, {**node("n1"), "metadata": {"name": "n1", "labels": {}, "resourceVersion": "9"}})
        assert s.idle()
        # A node that grows does.
        s.cache.update_node(None, node("n1", cpu="8"))
        assert not s.idle()
        s.run_once()
        assert s.idle()
        # So does a new pod.
        s.cache.add_pod(a_pod("p2"))
        assert not s.idle()


def test_with_work_pending_a_session_that_read_reports_always_runs(tmp_path: Path) -> None:
    with scheduler(tmp_path) as s:  # the default configuration reads agent reports
        settle_on_an_unfit_pod(s)
        assert s.last_session is not None and s.last_session.read_reports
        assert not s.idle()  # a report arriving could make room for it


def test_with_work_pending_and_no_reports_only_changes_and_confirmations_count(tmp_path: Path) -> None:
    with scheduler(tmp_path, NO_REPORTS_CONF) as s:
        s.cache.add_node(node("n1", cpu="2"))
        s.cache.add_pod(a_pod("small", cpu="1"))
        s.cache.add_pod(a_pod("big", cpu="2"))
        s.run_once()  # binds `small`; `big` does not fit (a FailedScheduling event): not quiet
        assert not s.idle()
        s.run_once()  # the same again, the event no longer news: quiet
        assert not s.last_session.read_reports
        assert s.idle()  # the same cycle again would fail the same way
        # `small`'s bind is confirmed: a Bound task may be a victim where a Binding one may not.
        s.binder.wait_idle(10)
        s.cache.update_pod(None, confirmed(a_pod("small", cpu="1"), "n1"))
        assert not s.idle()


def test_a_refused_status_write_and_the_resync_period_bring_a_cycle_back(tmp_path: Path) -> None:
    with scheduler(tmp_path, NO_REPORTS_CONF) as s:
        settle_on_an_unfit_pod(s)
        assert s.idle()
        s.status.failures += 1  # a status write the API refused: compare again
        assert not s.idle()
        s.run_once()
        assert s.idle()
        s.resync_period = 0.0  # the safety net: a cycle every resync period whatever happens
        assert not s.idle()


def test_the_loop_counts_skipped_turns_and_stays_healthy(tmp_path: Path) -> None:
    with scheduler(tmp_path) as s:
        s.cache.add_node(node("n1"))
        s.run_once()
        assert s.idle()
        s.cache.wait_for_sync = lambda timeout=None: True  # type: ignore[method-assign]
        s.cache.informers = []
        s.start()
        wait_for(lambda: s.skipped >= 3, 10, "turns of the loop with nothing to do")
        assert s.healthy()[0] and s.cycles == 1
        s.stop()


def test_failing_cycles_keep_the_loop_live_but_not_healthy(tmp_path: Path) -> None:
    """An outage fails every cycle: /readyz says so, /livez does not (a restart would not help)."""
    with scheduler(tmp_path) as s:
        s.cache.add_node(node("n1"))
        s.cache.wait_for_sync = lambda timeout=None: True  # type: ignore[method-assign]
        s.cache.informers = []
        assert s.live() == (True, "starting: waiting for the API")

        def outage() -> None:
            raise KubeError("connection refused")

        s.run_once = outage  # type: ignore[method-assign]
        s.start()
        wait_for(lambda: s.metrics.cycle_failures._value.get() >= 2, 10, "failed cycles")
        assert s.live()[0]
        assert not s.healthy()[0]
        s.stop()
