"""The priority and drf plugins: job and task order, starving jobs, and the victims each allows."""

from __future__ import annotations

from lahar.scheduler.framework.session import Session, open_session
from tests.scheduler.cluster_fixtures import Obj, conf, gang, node, pod, podgroup, snapshot, task_named


def _session(objects: list[Obj], *plugins: str) -> Session:
    return open_session(snapshot(objects), conf("allocate", list(plugins)))


def test_priority_orders_jobs_and_tasks_higher_first() -> None:
    session = _session(
        [
            node("n1"),
            pod("low", priority=1),
            pod("high", priority=7),
            podgroup("g", 1),
            pod("g-a", group="g", priority=1),
            pod("g-b", group="g", priority=3),
        ],
        "priority",
    )
    jobs = sorted(session.jobs.values(), key=session.job_order_key)
    assert [job.name for job in jobs] == ["high", "low", "g"]  # the PodGroup carries priority 0
    tasks = sorted(session.jobs["default/g"].tasks.values(), key=session.task_order_key)
    assert [task.name for task in tasks] == ["g-b", "g-a"]


def test_priority_victims_rank_lower_than_the_preemptor() -> None:
    running = dict(node_name="n1", phase="Running")
    session = _session(
        [
            node("n1", cpu="16"),
            pod("v1", priority=1, **running),
            pod("v5", priority=5, **running),
            pod("v9", priority=9, **running),
            pod("p", priority=5),
            podgroup("g", 1),
            pod("g-lo", group="g", priority=1, **running),
            pod("g-hi", group="g", priority=8),
        ],
        "priority",
    )
    candidates = [task_named(session, name) for name in ("v1", "v5", "v9")]
    assert [t.name for t in session.preemptable(task_named(session, "p"), candidates)] == ["v1"]
    # Within one job the tasks' own priorities decide.
    assert [t.name for t in session.preemptable(task_named(session, "g-hi"), [task_named(session, "g-lo")])] == ["g-lo"]


def test_a_job_starves_while_tasks_wait() -> None:
    session = _session(
        [node("n1"), gang("g", 2, min_member=1), pod("done", node_name="n1", phase="Running")], "priority", "gang"
    )
    assert session.job_starving(session.jobs["default/g"])
    assert not session.job_starving(session.jobs["default/done"])


def test_drf_orders_jobs_by_dominant_share_and_follows_allocations() -> None:
    # 10 cpu, 100Gi. cpu-heavy holds 4 cpu (0.4), memory-heavy 50Gi (0.5), idle nothing until
    # its 30Gi pod is placed (0.3 is still the smallest), then its 40Gi one (0.7, the largest).
    objects = [
        node("n1", cpu="10", memory="100Gi"),
        podgroup("cpu-heavy", 1),
        pod("c", cpu="4", memory="1Gi", group="cpu-heavy", node_name="n1", phase="Running"),
        podgroup("mem-heavy", 1),
        pod("m", cpu="1", memory="50Gi", group="mem-heavy", node_name="n1", phase="Running"),
        podgroup("idle", 1),
        pod("i", cpu="1", memory="30Gi", group="idle"),
        pod("j", cpu="1", memory="40Gi", group="idle"),
    ]
    session = _session(objects, "drf")
    order = lambda: [job.name for job in sorted(session.jobs.values(), key=session.job_order_key)]  # noqa: E731
    assert order() == ["idle", "cpu-heavy", "mem-heavy"]
    statement = session.statement()
    statement.allocate(task_named(session, "i"), 0)
    assert order() == ["idle", "cpu-heavy", "mem-heavy"]
    statement.allocate(task_named(session, "j"), 0)
    assert order() == ["cpu-heavy", "mem-heavy", "idle"]
    statement.discard()
    assert order() == ["idle", "cpu-heavy", "mem-heavy"]


def test_drf_victims_are_those_whose_job_share_stays_at_least_the_preemptors() -> None:
    # 10 cpu. "big" runs 3 x 2 cpu (share 0.6); "small" runs 1 cpu (0.1); "p" asks for 2 cpu
    # and would hold 0.2. big after one eviction: 0.4, after two 0.2 (equal counts), after three
    # 0.0; small after its one: 0.0.
    running = dict(node_name="n1", phase="Running")
    objects = [
        node("n1", cpu="10", memory="100Gi"),
        podgroup("big", 1),
        *[pod(f"big-{i}", cpu="2", group="big", **running) for i in range(3)],
        pod("small", cpu="1", **running),
        pod("p", cpu="2"),
    ]
    session = _session(objects, "drf")
    candidates = [task_named(session, name) for name in ("big-0", "big-1", "big-2", "small")]
    assert [t.name for t in session.preemptable(task_named(session, "p"), candidates)] == ["big-0", "big-1"]
