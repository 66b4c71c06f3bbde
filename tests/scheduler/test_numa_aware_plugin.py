"""The numa-aware plugin: Guaranteed pods with a NUMA policy go where their CPUs (and memory) fit
in one NUMA node's free part per the latest report (single-numa-node), in as few as could hold
them (restricted), or anywhere with a preference (best-effort); placements of the session count."""

from __future__ import annotations

import numpy as np

from lahar.rpc.report import NumaNode
from lahar.scheduler.conf import parse_conf
from lahar.scheduler.framework.session import Session
from tests.scheduler.preempt_builders import (
    GIB,
    Clock,
    a_pod,
    annotate,
    cluster,
    conf,
    guaranteed,
    node,
    opened,
    report,
    store,
    task,
)

NUMA = conf("allocate", ["numa-aware"])


def numa(node_id: int, busy_cores: float, cpus: int = 4, memory_used: int = 0) -> NumaNode:
    return NumaNode(node_id, list(range(node_id * cpus, (node_id + 1) * cpus)), 16 * GIB, memory_used, busy_cores)


def pinned(name: str, cpu: str, policy: str, memory: str = "1Gi") -> dict:
    return guaranteed(annotate(a_pod(name, cpu=cpu, memory=memory), **{"lahar.dev/numa-policy": policy}))


# Eight CPUs each, in two NUMA nodes of four:
# split: 2.5 CPUs free on each NUMA node (5 in all); roomy: one NUMA node idle; busy: 1 + 1 free.
TOPOLOGY = {
    "split": [numa(0, 1.5), numa(1, 1.5)],
    "roomy": [numa(0, 0.0), numa(1, 3.0)],
    "busy": [numa(0, 3.0), numa(1, 3.0)],
}
NODES = (*TOPOLOGY, "unknown")


def session_for(*pods: dict) -> Session:
    reports = store(Clock(), *(report(name, cores=8, numa=zones) for name, zones in TOPOLOGY.items()))
    return opened(cluster(*(node(name, cpu="8", memory="32Gi") for name in NODES), *pods), NUMA, reports)


def passing(session: Session, name: str) -> dict[str, bool]:
    return dict(zip(NODES, session.predicate(task(session, name)).tolist(), strict=True))


def test_single_numa_node_needs_one_numa_node_with_room() -> None:
    session = session_for(pinned("p", "4", "single-numa-node"))
    # split has five free CPUs, but not four on one NUMA node; unknown nodes pass (8 CPUs > 4).
    assert passing(session, "p") == {"split": False, "roomy": True, "busy": False, "unknown": True}
    assert session.explain(task(session, "p")) == {"node(s) cannot satisfy NUMA policy single-numa-node": 2}


def test_memory_must_fit_on_the_same_numa_node() -> None:
    session = session_for(pinned("p", "2", "single-numa-node", memory="17Gi"))
    assert passing(session, "p") == {"split": False, "roomy": False, "busy": False, "unknown": True}


def test_restricted_allows_spanning_only_what_the_request_must_span() -> None:
    session = session_for(
        pinned("small", "3", "restricted"), pinned("wide", "5", "restricted"), pinned("huge", "9", "single-numa-node")
    )
    assert passing(session, "small") == {"split": False, "roomy": True, "busy": False, "unknown": True}
    # Five CPUs need two NUMA nodes anywhere; split has 2.5 + 2.5 free, roomy 4 + 1.
    assert passing(session, "wide") == {"split": True, "roomy": True, "busy": False, "unknown": True}
    # More than a whole node fails everywhere, known topology or not.
    assert not session.predicate(task(session, "huge")).any()


def test_best_effort_only_scores() -> None:
    session = session_for(pinned("p", "4", "best-effort"))
    pod = task(session, "p")
    assert session.predicate(pod).all()
    scores = dict(zip(NODES, session.score(pod).tolist(), strict=True))
    assert scores["roomy"] == 100.0 and scores["split"] == 50.0 and scores["busy"] == scores["unknown"] == 0.0


def test_only_guaranteed_integer_cpu_pods_are_pinned() -> None:
    burstable = annotate(a_pod("burstable", cpu="4"), **{"lahar.dev/numa-policy": "single-numa-node"})
    fractional = pinned("fractional", "3500m", "single-numa-node")
    session = session_for(burstable, fractional)
    assert session.predicate(task(session, "burstable")).all()
    assert session.predicate(task(session, "fractional")).all()
    assert not session.score(task(session, "burstable")).any()


def test_placements_of_the_session_take_their_numa_node() -> None:
    session = session_for(pinned("first", "3", "single-numa-node"), pinned("second", "3", "single-numa-node"))
    roomy = NODES.index("roomy")
    statement = session.statement()
    statement.allocate(task(session, "first"), roomy)
    assert passing(session, "second")["roomy"] is False
    statement.discard()
    assert passing(session, "second")["roomy"] is True


def test_a_stale_report_is_no_topology() -> None:
    clock = Clock()
    reports = store(clock)
    reports.submit(report("split", cores=8, numa=TOPOLOGY["split"]), received_at=clock.now - 11)
    session = opened(
        cluster(node("split", cpu="8", memory="32Gi"), pinned("p", "4", "single-numa-node")), NUMA, reports
    )
    assert session.predicate(task(session, "p")).all()


def test_a_what_if_view_assumes_the_numa_nodes_can_be_freed() -> None:
    session = session_for(pinned("p", "4", "single-numa-node"))
    view = session.nodes.what_if(empty=True)
    assert session.predicate(task(session, "p"), nodes=view).tolist() == [True, True, True, True]
    assert session.predicate(task(session, "p"), np.array([0]), session.nodes.what_if()).tolist() == [False]


def test_bad_arguments_are_refused() -> None:
    parsed = parse_conf('actions: "allocate"\ntiers:\n- plugins:\n  - name: numa-aware\n    arguments: {policy: x}\n')
    assert "plugin numa-aware: unknown argument 'policy' ignored" in parsed.warnings[0]
