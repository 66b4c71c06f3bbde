"""Volcano's numa-aware tests as conformance cases (issue 17; docs/scheduler-conformance.md tallies
them): `pkg/scheduler/plugins/numaaware/policy/*_test.go` (the Topology Manager policies merging
providers' hints), `provider/cpumanager/cpu_mng_test.go` (the CPU Manager's hints and the CPUs it
pins) and `numaaware_test.go` (what a session leaves held for pods bound but not yet pinned),
then Lahar's own checks of the plugin reading Volcano's Numatopology objects through whole
sessions. Inputs and expectations are Volcano's (volcano-sh/volcano ed72c7c), carried over as
facts; Lahar's functions are scheduler/framework/numa.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lahar.api import admission, kinds
from lahar.api.errors import ValidationError
from lahar.api.numatopology import BEST_EFFORT, NONE, RESTRICTED, SINGLE_NUMA_NODE, CpuInfo, validate
from lahar.scheduler.cache import Cache, SchedulerCache
from lahar.scheduler.framework.numa import TopologyHint, admit, allocate_cpus, cpu_hints, whole_cpus
from lahar.scheduler.framework.session import Session
from lahar.scheduler.plugins.numa_aware import NumaAware
from tests.scheduler.cluster_fixtures import pod
from tests.scheduler.preempt_builders import (
    Clock,
    annotate,
    cluster,
    conf,
    guaranteed,
    opened,
    report,
    run,
    store,
    task,
)
from tests.scheduler.test_numa_aware_plugin import numa
from tests.scheduler.volcano_cases import Obj, quantities, vc_node, vc_numatopology, vc_pod, vc_podgroup, vc_queue


def hint(*numa_nodes: int, preferred: bool) -> TopologyHint:
    """bitmask.NewBitMask(numa_nodes...) with Preferred; no nodes: a nil mask (TopologyHint{})."""
    return TopologyHint(frozenset(numa_nodes) if numa_nodes else None, preferred)


BOTH_F, N0_T, N1_T, BOTH_T = (
    hint(0, 1, preferred=False),
    hint(0, preferred=True),
    hint(1, preferred=True),
    hint(0, 1, preferred=True),
)

# -- policy/*_test.go: the same providers' hints (a "cpu" and a "gpu" provider) in every table ----------

PROVIDERS_HINTS = {
    "test-1": [{"cpu": [BOTH_F, N0_T]}, {"gpu": [BOTH_F, N0_T]}],
    "test-2": [{"cpu": [BOTH_F, N1_T]}, {"gpu": [BOTH_F, N1_T]}],
    "test-3": [{"cpu": [BOTH_F, N0_T, N1_T]}, {"gpu": [BOTH_F, N0_T, N1_T]}],
    "test-4": [{"cpu": [BOTH_F, N0_T]}, {"gpu": [BOTH_F, N1_T]}],
    "test-5": [{"cpu": [BOTH_F, N0_T]}, {"gpu": [BOTH_T]}],
    "test-6": [{"cpu": [BOTH_T]}, {"gpu": [BOTH_T]}],
}
# (Go file, policy, row, the bestHit it expects), NewPolicy*([]int{0, 1}) in every table.
POLICY_ROWS = [
    *(
        (source, policy, row, expected)
        for source, policy in (
            ("policy_best_effort_test.go Test_best_effort_predicate", BEST_EFFORT),
            ("policy_restricted_test.go Test_restricted_predicate", RESTRICTED),
        )
        for row, expected in (
            ("test-1", N0_T),
            ("test-2", N1_T),
            ("test-3", N0_T),
            ("test-4", hint(0, preferred=False)),
            ("test-5", N0_T),
            ("test-6", BOTH_T),
        )
    ),
    *(
        ("policy_single_numa_node_test.go Test_single_numa_node_predicate", SINGLE_NUMA_NODE, row, expected)
        for row, expected in (
            ("test-1", N0_T),
            ("test-2", N1_T),
            ("test-3", N0_T),
            ("test-4", BOTH_F),
            ("test-5", BOTH_F),
        )
    ),
]


@pytest.mark.parametrize(
    ("source", "policy", "row", "expected"), POLICY_ROWS, ids=lambda v: v if isinstance(v, str) else ""
)
def test_policy_merges_the_providers_hints(source: str, policy: str, row: str, expected: TopologyHint) -> None:
    best, admitted = admit(policy, [0, 1], PROVIDERS_HINTS[row])
    assert best == expected, f"{source} {row}"
    # Not in the Go rows, which ignore it: best-effort admits anything, the others a preferred hint.
    assert admitted == (policy == BEST_EFFORT or expected.preferred)


def test_policy_none_merges_nothing() -> None:
    """policy_none_test.go Test_none_predicate "test-1": no providers, TopologyHint{}; admitted."""
    assert admit(NONE, [0, 1], []) == (TopologyHint(None, False), True)


def test_an_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown Topology Manager policy 'single'"):
        admit("single", [0, 1], [])


# -- provider/cpumanager/cpu_mng_test.go -----------------------------------------------------------

# numaInfo.CPUDetail: two sockets of two cores of two threads, one NUMA node per socket.
CPUS = {cpu: CpuInfo(numa=cpu // 4, socket=cpu // 4, core=cpu // 2) for cpu in range(8)}
ALL = set(range(8))

GET_TOPOLOGY_HINTS = [
    ("test-1", 4, ALL, [N0_T, N1_T, BOTH_F]),
    ("test-2", 4, ALL - {0}, [N1_T, BOTH_F]),
    ("test-3", 5, ALL, [BOTH_T]),
    ("test-4", 8, ALL, [BOTH_T]),
    ("test-5", 9, ALL, []),
    ("test-6", 4, {2, 3, 4, 5}, [BOTH_F]),
]


@pytest.mark.parametrize(
    ("row", "request_cpus", "available", "expected"), GET_TOPOLOGY_HINTS, ids=lambda v: v if isinstance(v, str) else ""
)
def test_cpu_manager_hints(row: str, request_cpus: int, available: set[int], expected: list[TopologyHint]) -> None:
    """Test_GetTopologyHints: a container asking for `request_cpus` CPUs, `available` free."""
    assert cpu_hints(CPUS, available, whole_cpus(request_cpus * 1000)) == expected


ALLOCATE = [
    ("test-1", 4, ALL, N0_T, {0, 1, 2, 3}),
    ("test-2", 4, ALL - {0}, N1_T, {4, 5, 6, 7}),
    ("test-3", 5, ALL, BOTH_T, {0, 1, 2, 3, 4}),
    ("test-4", 5, ALL - {0}, BOTH_T, {1, 4, 5, 6, 7}),
    ("test-5", 8, ALL - {0}, BOTH_T, set()),
]


@pytest.mark.parametrize(
    ("row", "request_cpus", "available", "best", "expected"), ALLOCATE, ids=lambda v: v if isinstance(v, str) else ""
)
def test_cpu_manager_allocates(
    row: str, request_cpus: int, available: set[int], best: TopologyHint, expected: set[int]
) -> None:
    """Test_Allocate: the CPUs pinned for the admitted hint (none when too few are free)."""
    assert allocate_cpus(CPUS, available, request_cpus, best) == expected


def test_a_fractional_cpu_request_pins_nothing() -> None:
    """The CPU Manager pins only whole CPUs: a container asking 1500m shares the pool, no hints."""
    assert whole_cpus(1500) == 0 and whole_cpus(2000) == 2 and whole_cpus(0) == 0


# -- numaaware_test.go: what a session leaves held for pods bound but not yet pinned -----------------------
#
# Volcano keeps, across sessions, the CPUs it gave each pod it bound (`UnassignedNumaPods`) until
# the Numatopology's podAllocations reports the pod; Lahar derives the same holding each session
# from its inputs: a pod bound to a node with a Numatopology that does not list it holds the CPUs
# the CPU Manager would pin for it. The Go rows set the plugin's internal maps by hand; here the
# pods are bound (or not) and the nodes carry Volcano's CPU layout (n1: 2 CPUs, n2: 4 in two NUMA
# nodes, static, best-effort), and the held CPUs are asked of the plugin (`NumaAware.held`).

SESSION_CLOSE_NOT_EXPRESSIBLE = {
    # The plugin's internal maps disagreeing with each other: Lahar keeps no such maps.
    "assignRes missing taskID, skip adding unassigned numa pods",
    "assignRes has taskID but missing nodeName, skip adding unassigned numa pods",
    "taskPodMetaMap missing taskID, skip adding unassigned numa pods",
    # TestNuma_OnSessionClose_VerifiesContent: a CPU set written by hand ({7, 8}, CPUs n2 lacks)
    # into the plugin's map comes back unchanged; Lahar's held CPUs are the CPU Manager's choice.
    "TestNuma_OnSessionClose_VerifiesContent",
}
ONE_NUMA_NODE = {0: (0, 0, 0), 1: (0, 0, 0)}
TWO_NUMA_NODES = {0: (0, 0, 0), 1: (0, 0, 0), 2: (1, 1, 1), 3: (1, 1, 1)}


def close_session_cluster(*pods: Obj, pinned_on_n1: tuple[tuple[str, str], ...] = ()) -> Session:
    objects = [
        vc_node("n1", "4", "8Gi"),
        vc_node("n2", "4", "8Gi"),
        vc_numatopology("n1", {**ONE_NUMA_NODE, 2: (0, 0, 1), 3: (0, 0, 1)}, "0-3", BEST_EFFORT, pinned=pinned_on_n1),
        vc_numatopology("n2", TWO_NUMA_NODES, "0-3", BEST_EFFORT),
        vc_podgroup("pg1", "c1", "c1", 1, None, "Running"),
        vc_queue("c1"),
        *(guaranteed(p) for p in pods),
    ]
    return opened(cluster(*objects), conf("allocate", ["numa-aware"]))


def held_per_node(session: Session) -> dict[str, int]:
    plugin = session.plugins["numa-aware"]
    assert isinstance(plugin, NumaAware)
    held = plugin.held()
    return {node: sum(1 for key in held if key.startswith(f"{node}/")) for node in ("n1", "n2")}


def c1_pod(name: str, node: str) -> Obj:
    return vc_pod("c1", name, node, "Running" if node else "Pending", quantities("2", "1Gi"), "pg1")


def test_session_close_nothing_bound_holds_nothing() -> None:
    """TestNuma_OnSessionClose "taskBindNodeMap is empty, no unassigned numa pods"."""
    assert held_per_node(close_session_cluster(c1_pod("p1", ""))) == {"n1": 0, "n2": 0}


def test_session_close_a_bound_pod_holds_its_cpus_on_its_node() -> None:
    """TestNuma_OnSessionClose "normal case, successfully add unassigned numa pods": p1 bound to
    n2 holds CPUs there (two, on one NUMA node: the best-effort hint), none on n1."""
    session = close_session_cluster(c1_pod("p1", "n2"))
    assert held_per_node(session) == {"n1": 0, "n2": 1}
    plugin = session.plugins["numa-aware"]
    assert isinstance(plugin, NumaAware)
    assert plugin.held() == {"n2/c1/p1": frozenset({0, 1})}


def test_session_close_accumulates_on_the_right_nodes() -> None:
    """TestNuma_OnSessionClose_MultipleTasksAccumulate: p1 on n2 and p2 on n1 are held, each on
    its node; p3, also on n1, is skipped. In Go p3 is skipped for a missing entry in an internal
    map; here because n1's kubelet reports it pinned already (its CPUs are out of allocatable)."""
    session = close_session_cluster(
        c1_pod("p1", "n2"), c1_pod("p2", "n1"), c1_pod("p3", "n1"), pinned_on_n1=(("c1", "p3"),)
    )
    assert held_per_node(session) == {"n1": 1, "n2": 1}


def test_a_held_pod_gives_way_once_the_kubelet_reports_it() -> None:
    """Lahar's own: held CPUs keep another pinned pod off them until the Numatopology lists the
    pod (its CPUs then leave `allocatable` instead)."""
    big = annotate(c1_pod("big", ""), **{"volcano.sh/numa-topology-policy": BEST_EFFORT})
    session = close_session_cluster(c1_pod("p1", "n2"), big)
    plugin = session.plugins["numa-aware"]
    assert isinstance(plugin, NumaAware)
    assert plugin.held()["n2/c1/p1"] == {0, 1}
    reported = opened(
        cluster(
            vc_node("n2", "4", "8Gi"),
            vc_numatopology("n2", TWO_NUMA_NODES, "2-3", BEST_EFFORT, pinned=(("c1", "p1"),)),
            vc_podgroup("pg1", "c1", "c1", 1, None, "Running"),
            vc_queue("c1"),
            guaranteed(c1_pod("p1", "n2")),
        ),
        conf("allocate", ["numa-aware"]),
    )
    reported_plugin = reported.plugins["numa-aware"]
    assert isinstance(reported_plugin, NumaAware)
    assert reported_plugin.held() == {}


# -- Lahar's own: Numatopology nodes through whole sessions -----------------------------------------------

SINGLE = {"volcano.sh/numa-topology-policy": SINGLE_NUMA_NODE}
EIGHT_CPUS = {cpu: (cpu // 4, cpu // 4, cpu // 2) for cpu in range(8)}  # the Go tests' numaInfo


def pinned_pod(name: str, cpu: str, annotations: dict[str, str] | None = None, **kwargs: Any) -> Obj:
    return guaranteed(pod(name, cpu=cpu, memory="1Gi", annotations=annotations, **kwargs))


def numa_session(*objects: Obj, node_names: tuple[str, ...] = ("roomy", "split")) -> Session:
    """roomy: all 8 CPUs free; split: CPUs 2-5 free (two on each NUMA node)."""
    topologies = {"roomy": "0-7", "split": "2-5"}
    return opened(
        cluster(
            *(vc_node(name, "8", "16Gi") for name in node_names),
            *(vc_numatopology(name, EIGHT_CPUS, topologies[name]) for name in node_names if name in topologies),
            *objects,
        ),
        conf("allocate", ["numa-aware"]),
    )


def passing(session: Session, name: str) -> list[bool]:
    return session.predicate(task(session, name)).tolist()


def test_single_numa_node_needs_the_cpus_on_one_numa_node() -> None:
    session = numa_session(pinned_pod("p", "4", SINGLE), pinned_pod("two", "2", SINGLE))
    assert passing(session, "p") == [True, False]  # split has 4 free CPUs, 2 per NUMA node
    assert passing(session, "two") == [True, True]
    assert session.explain(task(session, "p")) == {
        "node(s) where container 'main' cannot be pinned (single-numa-node)": 1
    }


def test_the_pod_policy_must_be_the_nodes_and_the_cpu_manager_static() -> None:
    objects = (
        vc_node("other", "8", "16Gi"),
        vc_numatopology("other", EIGHT_CPUS, "0-7", RESTRICTED),
        vc_node("shared", "8", "16Gi"),
        vc_numatopology("shared", EIGHT_CPUS, "0-7", SINGLE_NUMA_NODE, cpu_manager_policy="none"),
        pinned_pod("p", "2", SINGLE),
    )
    session = numa_session(*objects, node_names=("roomy",))
    assert passing(session, "p") == [True, False, False]
    assert session.explain(task(session, "p")) == {
        "node(s) whose Topology Manager policy is not single-numa-node": 1,
        "node(s) whose CPU Manager policy is not static": 1,
    }


def test_the_node_policy_applies_to_guaranteed_pods_without_one() -> None:
    """The kubelet enforces its policy on every pod it pins: a Guaranteed pod without annotation
    is refused where its CPUs would span NUMA nodes; a Burstable one is not pinned at all."""
    burstable = pod("burstable", cpu="4", memory="1Gi")
    session = numa_session(pinned_pod("plain", "4"), burstable)
    assert passing(session, "plain") == [True, False]
    assert passing(session, "burstable") == [True, True]


def test_reserved_cpus_are_not_pinned() -> None:
    """resReserved cpu 3 (rounded up from 2500m): the kubelet keeps CPUs 0-2 (whole cores first,
    then a thread), leaving one CPU of NUMA node 0."""
    session = opened(
        cluster(
            vc_node("n", "8", "16Gi"),
            vc_numatopology("n", EIGHT_CPUS, "0-7", reserved="2500m"),
            pinned_pod("two", "2", SINGLE),
            pinned_pod("five", "5", {"volcano.sh/numa-topology-policy": SINGLE_NUMA_NODE}),
        ),
        conf("allocate", ["numa-aware"]),
    )
    assert passing(session, "two") == [True]
    assert passing(session, "five") == [False]


def test_placements_of_the_session_take_their_cpus() -> None:
    session = numa_session(pinned_pod("first", "4", SINGLE), pinned_pod("second", "4", SINGLE), node_names=("roomy",))
    statement = session.statement()
    statement.allocate(task(session, "first"), 0)
    plugin = session.plugins["numa-aware"]
    assert isinstance(plugin, NumaAware)
    assert plugin.held() == {"roomy/default/first": frozenset({0, 1, 2, 3})}
    assert passing(session, "second") == [True]  # NUMA node 1 is still whole
    statement.allocate(task(session, "second"), 0)
    statement.discard()
    assert plugin.held() == {}


def test_a_cycle_places_pinned_pods_where_the_kubelet_admits_them() -> None:
    pods = [pinned_pod(f"p{i}", "4", SINGLE, created=f"2024-01-01T00:00:0{i}Z") for i in range(3)]
    session = run(
        cluster(
            vc_node("roomy", "8", "16Gi"),
            vc_numatopology("roomy", EIGHT_CPUS, "0-7"),
            vc_node("split", "8", "16Gi"),
            vc_numatopology("split", EIGHT_CPUS, "2-5"),
            *pods,
        ),
        conf("allocate", ["numa-aware"]),
    )
    placed = sorted((t.name, t.node) for batch in session.binds for t in batch.tasks)
    assert placed == [("p0", "roomy"), ("p1", "roomy")]  # split's CPUs span NUMA nodes; p2 waits


def test_the_score_prefers_fewer_numa_nodes() -> None:
    best_effort = {"volcano.sh/numa-topology-policy": BEST_EFFORT}
    session = opened(
        cluster(
            vc_node("roomy", "8", "16Gi"),
            vc_numatopology("roomy", EIGHT_CPUS, "0-7", BEST_EFFORT),
            vc_node("split", "8", "16Gi"),
            vc_numatopology("split", EIGHT_CPUS, "2-5", BEST_EFFORT),
            pinned_pod("p", "4", best_effort),
        ),
        conf("allocate", ["numa-aware"]),
    )
    assert passing(session, "p") == [True, True]
    assert session.score(task(session, "p")).tolist() == [100.0, 50.0]


def test_containers_are_pinned_one_by_one() -> None:
    """Two containers of 2 CPUs fit split's NUMA nodes one each; one container of 4 does not."""
    two = pinned_pod("two", "2", SINGLE)
    two["spec"]["containers"].append({**two["spec"]["containers"][0], "name": "side"})
    session = numa_session(two, pinned_pod("one", "4", SINGLE))
    assert passing(session, "two") == [True, True]
    assert passing(session, "one") == [True, False]


def test_the_agents_report_wins_over_the_numatopology() -> None:
    """split's agent reports NUMA topology (one NUMA node with 4 idle CPUs): the report is read,
    the Numatopology (CPUs split across NUMA nodes) is not."""
    clock = Clock()
    reports = store(clock, report("split", cores=8, numa=[numa(0, 0.0), numa(1, 4.0)]))
    objects = (
        vc_node("split", "8", "16Gi"),
        vc_numatopology("split", EIGHT_CPUS, "2-5"),
        annotate(pinned_pod("p", "4"), **{"lahar.dev/numa-policy": SINGLE_NUMA_NODE}),
    )
    session = opened(cluster(*objects), conf("allocate", ["numa-aware"]), reports)
    assert passing(session, "p") == [True]


def test_a_what_if_view_counts_every_pinnable_cpu() -> None:
    session = numa_session(pinned_pod("p", "4", SINGLE))
    view = session.nodes.what_if(empty=True)
    assert session.predicate(task(session, "p"), nodes=view).tolist() == [True, True]
    assert session.predicate(task(session, "p"), np.array([1]), session.nodes.what_if()).tolist() == [False]


# -- bad input: a clear message, everything else still scheduled ---------------------------------------


def test_a_malformed_numatopology_is_reported_and_keeps_pinned_pods_off_its_node() -> None:
    broken = vc_numatopology("broken", EIGHT_CPUS, "0-3,x", "single")
    session = run(
        cluster(
            vc_node("broken", "8", "16Gi"),
            broken,
            pinned_pod("pinned", "2", SINGLE),
            pod("plain", cpu="1", memory="1Gi"),
        ),
        conf("allocate", ["numa-aware"]),
    )
    [event] = [e for e in session.events if e.reason == "InvalidNumatopology"]
    assert event.kind == "Numatopology" and event.name == "broken" and event.type == "Warning"
    assert 'spec.policies.TopologyManagerPolicy: unsupported Topology Manager policy "single"' in event.message
    assert "'0-3,x' is not a CPU list" in event.message
    assert {t.name: t.node for batch in session.binds for t in batch.tasks} == {"plain": "broken"}


def test_an_unknown_pod_policy_is_refused_naming_it() -> None:
    session = numa_session(pinned_pod("odd", "2", {"volcano.sh/numa-topology-policy": "single"}))
    assert passing(session, "odd") == [False, False]
    [reason] = session.explain(task(session, "odd"))
    assert "unknown NUMA policy 'single'" in reason and "single-numa-node" in reason


def test_the_cache_keeps_numatopologies_for_the_snapshot() -> None:
    cache = Cache()
    topology = vc_numatopology("n1", ONE_NUMA_NODE, "0-1")
    cache.add_numatopology(topology)
    assert cache.snapshot().numatopologies == (topology,)
    cache.delete_numatopology(topology)
    assert cache.snapshot().numatopologies == ()


def test_numatopologies_are_watched_only_with_the_plugin_and_never_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = SchedulerCache(api=None)
    started: list[str] = []
    for informer in cache.informers:
        monkeypatch.setattr(informer, "start", lambda kind=informer.kind.kind: started.append(kind))
    cache.start_informers(["priority", "gang"])
    assert "Numatopology" not in started
    cache.start_informers(["numa-aware"])
    assert "Numatopology" in started
    assert all(informer.kind.kind != "Numatopology" for informer in cache.required)


def test_the_api_refuses_a_malformed_numatopology() -> None:
    errors = validate(vc_numatopology("n1", {0: (0, 0, 0)}, "0-1", "single"))
    assert [str(error) for error in errors] == [
        'spec.policies.TopologyManagerPolicy: unsupported Topology Manager policy "single" '
        '(supported: "none", "best-effort", "restricted", "single-numa-node")',
        "spec.numares.cpu.allocatable: CPUs [1] are not in spec.cpuDetail",
    ]
    assert validate(vc_numatopology("n1", EIGHT_CPUS, "0-7", reserved="1")) == []
    with pytest.raises(ValidationError, match="unsupported Topology Manager policy"):  # the embedded API server's check
        admission.validate(kinds.NUMATOPOLOGY, vc_numatopology("n1", {0: (0, 0, 0)}, "0", "single"))
