"""Volcano's scheduler sharding tables (volcano-sh/volcano ed72c7c) run through Lahar:
`pkg/scheduler/actions/*/*_shard_test.go` (allocate, backfill, preempt and reclaim with a hard or
soft node shard) and `pkg/scheduler/cache/shard_coordinator_test.go` (the shard's nodes, the
NodeShard status the scheduler writes). The Go tests set the session's shard by hand
(`ssn.NodesInShard`); here the shard is a NodeShard object fed through the cache of a scheduler
sharded as the row says, as a running scheduler gets it (docs/scheduler-conformance.md)."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.api.kinds import Kind
from lahar.api.nodeshard import NodeShard
from lahar.scheduler.cache import Cache
from lahar.scheduler.framework.options import SchedulerConf
from lahar.scheduler.framework.session import Session
from lahar.scheduler.metrics import CycleFigures
from lahar.scheduler.shards import HARD, OUT_OF_SHARD, SOFT, Sharding, shard_status_patch
from lahar.scheduler.status import StatusWriter
from tests.scheduler.volcano_cases import (
    PREEMPTABLE,
    Case,
    binds,
    evicted,
    only,
    outcome,
    quantities,
    vc_node,
    vc_nodeshard,
    vc_pod,
    vc_podgroup,
    vc_priority_class,
    vc_queue,
)

R = quantities
P_TRUE = {PREEMPTABLE: "true"}
RUNNING, PENDING, INQUEUE = "Running", "Pending", "Inqueue"
SHARD = "test-shard"
T0 = "2026-11-27T03:00:00Z"
NO_ACTIONS = SchedulerConf(actions=(), tiers=())

# -- actions/*/*_shard_test.go --------------------------------------------------------------------

ALLOCATE_TIERS = (
    [
        only("gang", "job_ready"),
        only("predicates", "predicate"),
        {
            **only("nodeorder", "node_order"),
            "arguments": {"leastrequested.weight": 1, "mostrequested.weight": 0},
        },
    ],
)
BACKFILL_TIERS = ([only("gang", "job_ready"), only("predicates", "predicate")],)
PREEMPT_TIERS = (
    [
        only("conformance", "preemptable"),
        only("gang", "preemptable", "job_starving"),
        only("priority", "preemptable", "job_starving"),
        only("predicates", "predicate"),
    ],
)
RECLAIM_TIERS = (
    [
        only("conformance", "reclaimable"),
        only("gang", "reclaimable", "job_starving"),
        only("proportion", "reclaimable", "queue_order", "preemptive"),
        only("priority", "reclaimable", "job_order", "task_order"),
        only("predicates", "predicate"),
    ],
)
CLASSES = [vc_priority_class("high-priority", 100000), vc_priority_class("low-priority", 10)]


def four_nodes() -> list[dict[str, Any]]:
    """n3 has the most room but is never in the shard."""
    return [
        vc_node("n1", "10", "20Gi", 10),
        vc_node("n2", "2", "4Gi", 10),
        vc_node("n3", "20", "40Gi", 10),
        vc_node("n4", "5", "10Gi", 10),
    ]


def one_pod(request: dict[str, str]) -> list[dict[str, Any]]:
    return [
        vc_podgroup("pg1", "c1", "c1", 0, None, INQUEUE),
        vc_pod("c1", "p1", "", PENDING, request, "pg1"),
        vc_queue("c1"),
    ]


def placement_cases(source: str, request: dict[str, str], shard_of_four: list[str]) -> list[Case]:
    """allocate's and backfill's three rows (the same but for the pod's request and the hard row's shard)."""
    return [
        Case(
            source,
            "hard sharding mode - allocate to node in shard"
            if "allocate" in source
            else "hard sharding mode - backfill to node in shard",
            [*one_pod(request), *four_nodes(), vc_nodeshard(SHARD, shard_of_four)],
            expect_binds={"c1/p1": "n1"},
            expect_bind_count=1,
            extra={"mode": HARD},
        ),
        Case(
            source,
            "soft sharding mode - prefer node in shard",
            [*one_pod(request), *four_nodes(), vc_nodeshard(SHARD, shard_of_four)],
            expect_binds={"c1/p1": "n1"},
            expect_bind_count=1,
            extra={"mode": SOFT},
        ),
        Case(
            source,
            "soft sharding mode - identical nodes prefer shard node",
            [
                *one_pod(request),
                vc_node("n1", "10", "20Gi", 10),
                vc_node("n2", "10", "20Gi", 10),
                vc_nodeshard(SHARD, ["n1"]),
            ],
            expect_binds={"c1/p1": "n1"},
            expect_bind_count=1,
            extra={"mode": SOFT},
        ),
    ]


def eviction_case(source: str, name: str, mode: str, reclaim: bool) -> Case:
    """preempt's and reclaim's rows: a preemptable pod on each of two nodes, n1 in the shard; the
    high-priority pod takes room on n1 (reclaim: from another queue, nodes of 2 cpu)."""
    size, request = ("2", "2Gi") if reclaim else ("1", "1G")
    preemptor_queue = "q2" if reclaim else "q1"
    return Case(
        source,
        name,
        [
            vc_podgroup("pg1", "c1", "q1", 1, None, INQUEUE, "low-priority"),
            vc_podgroup("pg2", "c1", preemptor_queue, 1, None, INQUEUE, "high-priority"),
            vc_pod("c1", "preemptee1", "n1", RUNNING, R(size, request), "pg1", P_TRUE),
            vc_pod("c1", "preemptee2", "n2", RUNNING, R(size, request), "pg1", P_TRUE),
            vc_pod("c1", "preemptor1", "", PENDING, R("1", "1G"), "pg2"),
            vc_node("n1", size, request, 10),
            vc_node("n2", size, request, 10),
            *([vc_queue("q1"), vc_queue("q2")] if reclaim else [vc_queue("q1")]),
            *CLASSES,
            vc_nodeshard(SHARD, ["n1"]),
        ],
        expect_evicted=["c1/preemptee1"],
        expect_evict_count=1,
        extra={"mode": mode},
    )


ALLOCATE = "allocate/allocate_shard_test.go TestAllocateWithShard"
BACKFILL = "backfill/backfill_shard_test.go TestBackfillWithShard"
PREEMPT = "preempt/preempt_shard_test.go TestPreemptWithShard"
RECLAIM = "reclaim/reclaim_shard_test.go TestReclaimWithShard"

ACTION_CASES = [
    *((case, "allocate", ALLOCATE_TIERS) for case in placement_cases(ALLOCATE, R("1", "1G"), ["n1", "n4"])),
    *((case, "backfill", BACKFILL_TIERS) for case in placement_cases(BACKFILL, R("0", "0"), ["n1"])),
    (eviction_case(PREEMPT, "hard sharding mode - preempt from node in shard", HARD, False), "preempt", PREEMPT_TIERS),
    (
        eviction_case(PREEMPT, "soft sharding mode - prefer preempting from node in shard", SOFT, False),
        "preempt",
        PREEMPT_TIERS,
    ),
    (
        eviction_case(RECLAIM, "hard sharding mode - only reclaim from nodes in shard", HARD, True),
        "reclaim",
        RECLAIM_TIERS,
    ),
    (
        eviction_case(RECLAIM, "soft sharding mode - prefer reclaiming from node in shard", SOFT, True),
        "reclaim",
        RECLAIM_TIERS,
    ),
]


def sharded(case: Case, action: str, tiers: Any, shard: str = SHARD) -> Session:
    return outcome(case.objects, action, tiers, Sharding(case.extra["mode"], shard))


@pytest.mark.parametrize(
    ("case", "action", "tiers"), ACTION_CASES, ids=[f"{c.source}: {c.name}" for c, _, _ in ACTION_CASES]
)
def test_volcano_shard_case(case: Case, action: str, tiers: Any) -> None:
    session = sharded(case, action, tiers)
    placed, gone = binds(session), evicted(session)
    if case.expect_binds is not None:
        assert placed == dict(case.expect_binds) and len(placed) == case.expect_bind_count
    if case.expect_evicted is not None:
        assert gone == sorted(case.expect_evicted) and len(gone) == case.expect_evict_count


def swapped(case: Case) -> list[dict[str, Any]]:
    """The row's objects with the shard holding the nodes it left out and none of those it held."""
    names = [obj["metadata"]["name"] for obj in case.objects if obj["kind"] == "Node"]
    shard = next(obj for obj in case.objects if obj["kind"] == "NodeShard")
    held = set(shard["spec"]["nodesDesired"])
    others = [obj for obj in case.objects if obj["kind"] != "NodeShard"]
    return [*others, vc_nodeshard(SHARD, [name for name in names if name not in held])]


@pytest.mark.parametrize(
    ("case", "action", "tiers"), ACTION_CASES, ids=[f"{c.source}: {c.name}" for c, _, _ in ACTION_CASES]
)
def test_the_shard_decides_in_each_row(case: Case, action: str, tiers: Any) -> None:
    """Not Volcano's rows: the same inputs with the complementary shard land (or evict) elsewhere,
    so each row's answer comes from the shard, not from the nodes' order or scores."""
    session = outcome(swapped(case), action, tiers, Sharding(case.extra["mode"], SHARD))
    touched = set(binds(session).values()) | {e.task.node for e in session.evictions}
    assert touched and "n1" not in touched


def test_without_the_rows_shard_nothing_or_anything_goes() -> None:
    """A hard scheduler whose NodeShard does not exist has no nodes (nothing placed, and the
    reason says why); a soft one uses every node."""
    case = placement_cases(ALLOCATE, R("1", "1G"), ["n1", "n4"])[0]
    hard = sharded(case, "allocate", ALLOCATE_TIERS, shard="missing")
    assert binds(hard) == {}
    (task,) = hard.jobs["c1/pg1"].tasks.values()
    assert hard.explain(task) == {OUT_OF_SHARD: 4}  # why it fits nowhere, for its gang's message
    soft = outcome(case.objects, "allocate", ALLOCATE_TIERS, Sharding(SOFT, "missing"))
    assert binds(soft) == {"c1/p1": "n3"}  # the emptiest node, as without sharding


# -- cache/shard_coordinator_test.go ----------------------------------------------------------------

COORDINATOR = "cache/shard_coordinator_test.go"
SHARDS = [
    vc_nodeshard("test-shard", ["node-1", "node-2", "node-3", "node-4"], ["node-1", "node-2"]),
    vc_nodeshard("other-shard-1", ["node-2", "node-3"], ["node-2"]),
    vc_nodeshard("other-shard-2", ["node-3", "node-4"], ["node-3", "node-4"]),
]


def shard_cache(mode: str, name: str, shards: list[dict[str, Any]]) -> Cache:
    cache = Cache(sharding=Sharding(mode, name))
    for shard in shards:
        cache.add_nodeshard(shard)
    return cache


@pytest.mark.parametrize(
    ("name", "shard", "expected"),
    [
        ("basic calculation", "test-shard", {"node-1"}),
        ("no overlapping usage", "other-shard-1", set()),
        ("all nodes used by others", "other-shard-2", {"node-3", "node-4"}),
    ],
)
def test_volcano_available_nodes_from_shard(name: str, shard: str, expected: set[str]) -> None:
    """TestGetAvailableNodesFromShard: desired less what the other shards have in use."""
    assert shard_cache(HARD, shard, SHARDS).shard_nodes == expected


class ShardApi:
    """Holds NodeShards, records status patches and answers with the whole object as written."""

    def __init__(self, shards: list[dict[str, Any]]) -> None:
        self.shards = {shard["metadata"]["name"]: shard for shard in shards}
        self.written: list[tuple[str, dict[str, Any]]] = []

    def patch(self, kind: Kind, name: str, body: dict[str, Any], namespace: str | None = None, **_: Any) -> Any:
        self.written.append((name, body["status"]))
        shard = self.shards[name]
        metadata = {**shard["metadata"], "resourceVersion": str(len(self.written))}
        self.shards[name] = {**shard, "metadata": metadata, "status": body["status"]}
        return self.shards[name]


# TestRefreshNodeShards_AvailableNodesCalculation: NodeShard events (refreshes) arrive while a
# session runs or between sessions; Volcano defers its status updates to the session's end and
# coalesces them while one runs. Lahar writes the status from the cycle, only when it changes: one
# write in every row. The last row is a deliberate difference: three refreshes between cycles that
# compute the same status write it once, not three times (Volcano's test counts 3 because its fake
# updater never feeds the written status back, so each refresh finds it unwritten).
REFRESH_ROWS = [
    ("session running - single call", True, 1, 1),
    ("session running - multiple calls", True, 3, 1),
    ("session not running - single call", False, 1, 1),
    ("session not running - multiple calls", False, 3, 3),
]


@pytest.mark.parametrize(("name", "running", "calls", "go_updates"), REFRESH_ROWS, ids=[r[0] for r in REFRESH_ROWS])
def test_volcano_refresh_node_shards(name: str, running: bool, calls: int, go_updates: int) -> None:
    shards = [
        vc_nodeshard("test-shard", ["node-1", "node-2", "node-3"], ["node-1"]),
        vc_nodeshard("other-shard", ["node-2", "node-3"], ["node-2"]),
    ]
    cache = shard_cache(HARD, "test-shard", shards)
    api = ShardApi(shards)
    writer = StatusWriter(api, on_written=lambda kind, obj: cache.update_nodeshard(None, obj), workers=1)
    session = Session(cache.snapshot(), NO_ACTIONS)
    try:

        def cycle() -> None:
            writer.write(session, CycleFigures(), cache.nodeshard_status(T0))
            assert writer.wait_idle(10)

        for _ in range(calls):
            # A refresh: an event carrying the NodeShard as the API holds it now.
            cache.update_nodeshard(None, api.shards["test-shard"])
            if not running:
                cycle()  # between sessions: each refresh is followed by a cycle
        if running:
            cycle()  # the session ends: its cycle writes
        assert cache.shard_nodes == {"node-1", "node-3"}
        # Lahar: one write, of the shard's own status (Volcano: `go_updates`).
        assert [
            (name, status["nodesInUse"], status["nodesToAdd"], status["nodesToRemove"]) for name, status in api.written
        ] == [("test-shard", ["node-1", "node-3"], ["node-2"], [])]
        assert go_updates in (1, calls)
    finally:
        writer.close()


def test_volcano_generate_node_shard_status_records_transition_nodes() -> None:
    """TestGenerateNodeShardWithStatusRecordsTransitionNodes: a shard that desires node-new while its
    scheduler uses node-old: in use node-old, to add node-new, to remove node-old."""
    shard = NodeShard(vc_nodeshard("test-shard", ["node-new"], ["node-old"]))
    status = shard_status_patch(shard, frozenset({"node-old"}), T0)
    assert status == {
        "nodesInUse": ["node-old"],
        "nodesToRemove": ["node-old"],
        "nodesToAdd": ["node-new"],
        "lastUpdateTime": T0,
    }
    # Written once: the same status again is no change.
    written = NodeShard(vc_nodeshard("test-shard", ["node-new"]) | {"status": status})
    assert shard_status_patch(written, frozenset({"node-old"}), "later") is None


def test_volcano_refresh_node_shards_shard_not_found() -> None:
    """TestRefreshNodeShards_ShardNotFound: without its NodeShard the scheduler keeps the nodes it
    had (the Go test sets them by hand; here the shard existed, then went)."""
    cache = shard_cache(
        HARD, "gone", [vc_nodeshard("gone", ["node-1"]), vc_nodeshard("test-shard", ["node-1", "node-2"])]
    )
    assert cache.shard_nodes == {"node-1"}
    cache.delete_nodeshard(vc_nodeshard("gone", ["node-1"]))
    assert cache.shard_nodes == {"node-1"}
    assert cache.nodeshard_status(T0) is None  # no NodeShard to write


def test_soft_preempt_takes_victims_in_the_shard_before_room_being_freed_outside_it() -> None:
    """Not a Volcano row: outside the soft shard (n2) a pod is already leaving, so the preemptor
    would fit there without new victims; the shard's node (n1) still comes first, as Volcano tries
    its in-shard nodes before the others."""
    case = eviction_case(PREEMPT, "soft", SOFT, False)
    leaving = next(obj for obj in case.objects if obj["metadata"].get("name") == "preemptee2")
    leaving["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:01Z"
    # pg1 without a minimum: its last running pod may go (the gang rule holds it otherwise).
    pg1 = vc_podgroup("pg1", "c1", "q1", 0, None, INQUEUE, "low-priority")
    case.objects = [pg1 if obj["metadata"]["name"] == "pg1" else obj for obj in case.objects]
    session = sharded(case, "preempt", PREEMPT_TIERS)
    assert evicted(session) == ["c1/preemptee1"]
    assert [(task.name, task.node) for task in session.pipelined] == [("preemptor1", "n1")]
