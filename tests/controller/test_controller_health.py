"""The controller's /livez and /readyz tell the truth (issue 15): a reconcile stuck past the stall
limit makes it not live (a restart cures that); reconciles that all keep failing make it not
ready but still live (a restart would not help); an idle loop stays live."""

from __future__ import annotations

import threading
from typing import Any

from lahar.controller.controller import JobController
from lahar.loop_health import LoopHealth
from tests.support import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_loop_health_verdicts() -> None:
    clock = Clock()
    health = LoopHealth("loop", stall_seconds=30, failing_seconds=60, clock=clock)
    assert not health.live()[0]  # never turned
    health.turned("ns/job")
    assert health.live() == (True, "ok")
    clock.now += 31
    alive, why = health.live()
    assert not alive and "ns/job" in why and "31s" in why
    health.failed("connection refused")
    assert health.live()[0] and health.ready()[0]  # failing, but not for long
    clock.now += 61
    health.turned()
    health.failed("connection refused")
    ready, why = health.ready()
    assert health.live()[0] and not ready and "connection refused" in why
    health.succeeded()
    assert health.ready() == (True, "ok")


def controller_with(reconcile: Any, stall: float, failing: float = 60.0) -> JobController:
    controller = JobController(None)  # no API: the informers are never started here
    controller.loop_health = LoopHealth("reconcile loop", stall_seconds=stall, failing_seconds=failing)
    controller.reconcile = reconcile  # type: ignore[method-assign]
    controller.start_workers()
    return controller


def test_a_wedged_reconcile_makes_the_controller_not_live() -> None:
    release = threading.Event()
    controller = controller_with(lambda key: release.wait(30), stall=1.0)
    try:
        wait_for(lambda: controller.live()[0], timeout=5, what="the idle loop to be live")
        controller.queue.add(("team", "huge-job"))
        verdict = wait_for(lambda: not controller.live()[0] and controller.live(), timeout=5, what="not live")
        assert "team/huge-job" in verdict[1]
    finally:
        release.set()
        controller._stop.set()
        controller.queue.close()
    wait_for(
        lambda: controller.live()[0] or not any(w.is_alive() for w in controller._workers), timeout=5, what="recovery"
    )


def test_failing_reconciles_are_not_ready_but_live() -> None:
    def fail(key: Any) -> None:
        raise RuntimeError("the API is gone")

    controller = controller_with(fail, stall=5.0, failing=0.3)
    try:
        for _ in range(3):
            controller.queue.add(("team", "job"))
        wait_for(lambda: any(h.failures for h in controller.worker_health), timeout=5, what="a failure")
        wait_for(lambda: not controller.workers_ready()[0], timeout=5, what="not ready")
        assert "the API is gone" in controller.workers_ready()[1]
        assert controller.live()[0]
    finally:
        controller._stop.set()
        controller.queue.close()
