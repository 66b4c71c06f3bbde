"""The usage plugin: nodes whose fresh report shows CPU or memory usage over the thresholds are
filtered out (stale or missing reports pass), and the score prefers less loaded nodes, counting
what the session itself placed."""

from __future__ import annotations

import numpy as np
import pytest

from lahar.scheduler.conf import parse_conf
from lahar.scheduler.framework.plugin import ConfError
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import TaskInfo
from lahar.scheduler.node_reports import NodeReportStore
from tests.scheduler.preempt_builders import GIB, Clock, a_pod, cluster, conf, node, opened, report, store, task

NODES = ("hot-cpu", "hot-memory", "calm", "idle", "stale", "silent")


def reports(clock: Clock) -> NodeReportStore:
    reports_store = store(
        clock,
        report("hot-cpu", cpu_ratio=0.9),
        report("hot-memory", memory_used=28 * GIB),
        report("calm", cpu_ratio=0.5, memory_used=16 * GIB),
        report("idle", cpu_ratio=0.1),
    )
    reports_store.submit(report("stale", cpu_ratio=0.99), received_at=clock.now - 11)
    return reports_store


def usage(**arguments: object) -> tuple[Session, TaskInfo]:
    clock = Clock()
    objects = [node(name, cpu="4", memory="32Gi") for name in NODES] + [a_pod("p", cpu="1", memory="1Gi")]
    session = opened(cluster(*objects), conf("allocate", [{"name": "usage", "arguments": arguments}]), reports(clock))
    return session, task(session, "p")


def test_hot_nodes_are_filtered_and_unknown_ones_pass() -> None:
    session, pod = usage()
    assert dict(zip(NODES, session.predicate(pod).tolist(), strict=True)) == {
        "hot-cpu": False,
        "hot-memory": False,
        "calm": True,
        "idle": True,
        "stale": True,
        "silent": True,
    }
    assert session.explain(pod) == {"node(s) too busy (usage over cpu 80% or memory 80%)": 2}


def test_thresholds_as_a_mapping_or_flat_keys() -> None:
    session, pod = usage(thresholds={"cpu": 95, "mem": 90})
    assert session.predicate(pod).all()
    session, pod = usage(**{"thresholds.cpu": 95})
    assert session.predicate(pod).tolist() == [True, False, True, True, True, True]


def test_score_prefers_less_load_and_counts_this_sessions_placements() -> None:
    session, pod = usage()
    scores = dict(zip(NODES, session.score(pod).tolist(), strict=True))
    assert scores["idle"] > scores["hot-cpu"] > scores["calm"]  # 0.1+0, 0.9+0, 0.5+0.5 loaded
    # Unknown nodes score as half loaded: (0.5·1 + 0.5·1) / 2 × 100 × 5.
    assert scores["stale"] == scores["silent"] == pytest.approx(250.0)
    assert scores["idle"] == pytest.approx((0.9 + 1.0) / 2 * 500)
    idle = NODES.index("idle")
    statement = session.statement()
    statement.allocate(pod, idle)
    # 1 CPU of 4 placed: cpu usage 0.1 + 0.25, memory 1Gi of 32Gi.
    assert session.score(task(session, "p"), np.array([idle]))[0] == pytest.approx(
        ((1 - 0.35) + (1 - 1 / 32)) / 2 * 500
    )
    statement.discard()
    assert session.score(pod)[idle] == pytest.approx(scores["idle"])


def test_weights() -> None:
    session, pod = usage(**{"cpu.weight": 1, "memory.weight": 0, "usage.weight": 1})
    scores = dict(zip(NODES, session.score(pod).tolist(), strict=True))
    assert scores["hot-memory"] == pytest.approx(100.0) and scores["calm"] == pytest.approx(50.0)


def test_bad_arguments_are_refused() -> None:
    for arguments in (
        "{thresholds.cpu: 120}",
        "{thresholds: {gpu: 50}}",
        "{thresholds: 80}",
        "{usage.weight: -1}",
        "{staleness: never}",
    ):
        with pytest.raises(ConfError, match="plugin usage"):
            parse_conf(f'actions: "allocate"\ntiers:\n- plugins:\n  - name: usage\n    arguments: {arguments}\n')


def test_cpu_harvested_by_be_pods_does_not_make_a_node_busy() -> None:
    # 3.8 of 4 cores busy, 3.4 of them BE pods at the smallest weight: they give way to the next
    # pod at once, so the node is 10% busy to it; memory counts whole (BE pages are not given back).
    from lahar.rpc.report import PodUsage

    harvested = report("harvested", cpu_ratio=0.95, memory_used=4 * GIB)
    harvested.pods = [
        PodUsage("default", "be-a", "be-a", "BE", "BestEffort", "job", 1.7, GIB),
        PodUsage("default", "be-b", "be-b", "BE", "Burstable", "job", 1.7, GIB),
        PodUsage("default", "web", "web", "LS", "Burstable", "web", 0.2, GIB),
    ]
    clock = Clock()
    objects = [node("harvested", cpu="4", memory="32Gi"), a_pod("p", cpu="1", memory="1Gi")]
    session = opened(cluster(*objects), conf("allocate", [{"name": "usage"}]), store(clock, harvested))
    pod = task(session, "p")
    assert session.predicate(pod).tolist() == [True]
    assert session.score(pod)[0] == pytest.approx(((1 - 0.1) + (1 - 4 / 32)) / 2 * 500)
