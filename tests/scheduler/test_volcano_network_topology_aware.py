"""Volcano's network-topology-aware tables as facts (volcano-sh/volcano at the commit
docs/scheduler-conformance.md names): `pkg/scheduler/plugins/network-topology-aware/
network_topology_aware_test.go` (`TestNew`, `TestNetworkTopologyAwareNodeScore_Hard` and `_Soft`,
`TestBatchNodeOrderFn`, `TestHyperNodeOrderFn`) and, from `pkg/scheduler/actions/allocate/
allocate_test.go`, `TestNodeLevelScoreWithNetWorkTopologies` and
`TestHyperNodeBinpackWithNetWorkTopologies`.

The Go score tests open a session with the plugin alone and ask its batch node order (or HyperNode
order) for one pending task; here a session is opened with the plugin alone and asked the same
(`Session.score`; the plugin's `topology_score` with the Go test's nodes as the candidates, and its
`hypernode_scores`), compared within the Go test's tolerance (0.1).
HyperNodes are given as objects, HyperNode members by name as in the Go test's `HyperNodesMap`.
Where the Go test records the job's HyperNode on the PodGroup, Lahar reads it from the nodes the
job's tasks run on (the same HyperNode in every row ported).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from lahar.scheduler.conf import ConfError
from lahar.scheduler.framework.plugin import plugin_class
from lahar.scheduler.plugins.network_topology_aware import MAX_SCORE
from tests.scheduler.preempt_builders import cluster, opened
from tests.scheduler.volcano_cases import (
    binds,
    conf,
    outcome,
    quantities,
    vc_hypernode,
    vc_node,
    vc_pod,
    vc_podgroup,
    vc_queue,
)

PLUGIN = "network-topology-aware"
ROLE = "volcano.sh/task-spec"
EPS = 0.1  # the Go tests' tolerance
Obj = dict[str, Any]
Tree = Mapping[str, tuple[int, Sequence[str]]]  # HyperNode -> (tier, members: HyperNodes by their name, else nodes)


def busy_pods(nodes: Sequence[str], running: int, deleting: int) -> list[Obj]:
    """Pods of the running PodGroup "busy" over `nodes` in turn: `running` of them, then
    `deleting` more being deleted (their room is future idle)."""
    pods = []
    for i in range(running + deleting):
        pod = vc_pod("c1", f"b{i}", nodes[i % len(nodes)], "Running", quantities("1", "2Gi"), "busy")
        if i >= running:
            pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        pods.append(pod)
    return pods


def hypernodes(tree: Tree, tier_names: Mapping[int, str] | None = None) -> list[Obj]:
    names = tier_names or {}
    return [vc_hypernode(name, tier, members, tree, names.get(tier, "")) for name, (tier, members) in tree.items()]


def topology_group(
    name: str, min_member: int, mode: str = "", tier: int | None = None, tier_name: str = "", phase: str = "Inqueue"
) -> Obj:
    """BuildPodGroupWithNetWorkTopologies / BuildPodGroupUsingNetWorkTopologiesWithTierName."""
    group = vc_podgroup(name, "c1", "q1", min_member, None, phase)
    if mode:
        wanted: Obj = {"mode": mode}
        if tier is not None:
            wanted["highestTierAllowed"] = tier
        if tier_name:
            wanted["highestTierName"] = tier_name
        group["spec"]["networkTopology"] = wanted
    return group


# The three-tier tree most of the Go tables use: s0 over s1, s2; s1 over s3, s4; s2 over s5, s6;
# two nodes under each of s3..s6.
THREE_TIERS: dict[str, tuple[int, list[str]]] = {
    "s0": (3, ["s1", "s2"]),
    "s1": (2, ["s3", "s4"]),
    "s2": (2, ["s5", "s6"]),
    **{f"s{i}": (1, [f"s{i}-n1", f"s{i}-n2"]) for i in (3, 4, 5, 6)},
}
EIGHT_NODES = [f"s{i}-n{j}" for i in (3, 4, 5, 6) for j in (1, 2)]
TWO_TIERS = {"s0": (2, ["s1", "s2"]), "s1": (1, ["s1-n1", "s1-n2"]), "s2": (1, ["s2-n1", "s2-n2"])}
ONE_TIER = {"s1": (1, ["s1-n1", "s1-n2"]), "s2": (1, ["s2-n1", "s2-n2"])}
FOUR_NODES = ["s1-n1", "s1-n2", "s2-n1", "s2-n2"]


def scores_of(objects: Sequence[Obj], arguments: Mapping[str, Any], pending: str) -> dict[str, float]:
    """The plugin's node scores for the pending pod, the plugin alone in the session."""
    session = opened(cluster(*objects), conf("allocate", [{"name": PLUGIN, "arguments": dict(arguments)}]))
    task = next(t for job in session.jobs.values() for t in job.tasks.values() if t.name == pending)
    return dict(zip(session.nodes.names, session.score(task).tolist(), strict=True))


def assert_scores(actual: Mapping[str, float], expected: Mapping[str, float]) -> None:
    for name, value in expected.items():
        assert abs(actual[name] - value) <= EPS, (name, actual[name], value)


# -- TestNetworkTopologyAwareNodeScore_Hard / _Soft ---------------------------------------------

NODE_SCORE_ROWS: list[tuple[str, Tree, list[str], list[str], int, dict[str, float]]] = [
    # name, tree, nodes, pods ("p1@node" runs there), weight, expected scores
    (
        "Tasks in job first scheduler, score all nodes zero",
        THREE_TIERS,
        EIGHT_NODES,
        ["p4"],
        1,
        {"s3-n1": 0.0, "s4-n1": 0.0, "s5-n1": 0.0},
    ),
    (
        "Tasks in job rescheduled, score zero when the hyperNode of node has empty LCA hyperNode with"
        " jobAllocatedHyperNode",
        {**THREE_TIERS, "s0": (3, ["s1"])},
        EIGHT_NODES,
        ["p1@s3-n1", "p2@s3-n2", "p3"],
        1,
        {"s5-n1": 0.0, "s6-n1": 0.0},
    ),
    (
        "Tasks in job rescheduled, score nodes according to node hypernode LCA hyperNode tier",
        THREE_TIERS,
        EIGHT_NODES,
        ["p1@s3-n1", "p2@s3-n2", "p3"],
        1,
        {"s3-n1": 100.0, "s4-n1": 66.6, "s5-n1": 33.3},
    ),
    (
        "Tasks in job rescheduled, score hyperNodes according to node LCA hyperNode tier of the hyperNode and"
        " jobAllocatedHyperNode when hyperNodesInfo has two tier",
        TWO_TIERS,
        FOUR_NODES,
        ["p1@s1-n1", "p2"],
        1,
        {"s1-n1": 100.0, "s2-n1": 50.0},
    ),
    (
        "Tasks in job rescheduled, score hyperNodes according to node LCA hyperNode tier of the hyperNode and"
        " jobAllocatedHyperNode when hyperNodesInfo has one tier",
        ONE_TIER,
        FOUR_NODES,
        ["p1@s1-n1", "p2"],
        1,
        {"s1-n1": 100.0, "s2-n1": 0.0},
    ),
    (
        "Tasks in job rescheduled, score hyperNodes according to node LCA hyperNode tier of the hyperNode and"
        " jobAllocatedHyperNode with plugin weight 2",
        THREE_TIERS,
        EIGHT_NODES,
        ["p1@s3-n1", "p2@s3-n2", "p3"],
        2,
        {"s3-n1": 200.0, "s4-n1": 133.3, "s5-n1": 66.6},
    ),
    (
        "Tasks in job rescheduled, score hyperNodes according to node LCA hyperNode tier and task num of the"
        " hyperNode when there are at least two hyperNodes have max hyperNode tier score",
        THREE_TIERS,
        EIGHT_NODES,
        ["p1@s3-n1", "p2@s3-n2", "p3@s4-n1", "p4"],
        1,
        {"s3-n1": 116.6, "s4-n1": 91.6, "s5-n1": 33.3},
    ),
]


@pytest.mark.parametrize("mode", ["hard", "soft"])
@pytest.mark.parametrize(
    ("name", "tree", "nodes", "pods", "weight", "expected"), NODE_SCORE_ROWS, ids=[row[0] for row in NODE_SCORE_ROWS]
)
def test_volcano_node_score(
    mode: str, name: str, tree: Tree, nodes: list[str], pods: list[str], weight: int, expected: dict[str, float]
) -> None:
    # The last row's PodGroup asks for minMember 3, the others 1; highestTierAllowed 0 in all.
    objects: list[Obj] = [vc_queue("q1", 1), topology_group("pg1", 3 if len(pods) == 4 else 1, mode, 0)]
    objects += [vc_node(node, "2", "4Gi", 10) for node in nodes] + hypernodes(tree)
    for spec in pods:
        pod, _, node = spec.partition("@")
        role = "master" if pod == "p1" and len(pods) > 1 else "worker"
        objects.append(
            vc_pod("c1", pod, node, "Running" if node else "Pending", quantities("2", "4G"), "pg1", {ROLE: role})
        )
    pending = next(spec for spec in pods if "@" not in spec)
    # As the Go test hands BatchNodeOrderFn its scoreNodes (full ones included), the plugin's
    # score is asked with those nodes as the candidates its tie-break looks among.
    session = opened(cluster(*objects), conf("allocate", [{"name": PLUGIN, "arguments": {"weight": weight}}]))
    task = next(t for job in session.jobs.values() for t in job.tasks.values() if t.name == pending)
    candidates = np.array([name in expected for name in session.nodes.names])
    plugin = session.plugins[PLUGIN]
    values = plugin.topology_score(task, session.jobs[task.job], candidates)  # type: ignore[attr-defined]
    scores = dict(zip(session.nodes.names, (MAX_SCORE * weight * values).tolist(), strict=True))
    assert_scores(scores, expected)


# -- TestBatchNodeOrderFn -----------------------------------------------------------------------

SIZES = {"s3": ("2", "4G", "8"), "s4": ("4", "4G", "8"), "s5": ("2", "8G", "16"), "s6": ("4", "8G", "16")}
CUSTOM = {
    "weight": 10,
    "hypernode.binpack.cpu": 1,
    "hypernode.binpack.memory": 4,
    "hypernode.binpack.resources": "nvidia.com/gpu, example.com/foo",
    "hypernode.binpack.resources.nvidia.com/gpu": 2,
    "hypernode.binpack.resources.example.com/foo": 3,
    "hypernode.binpack.normal-pod.enable": True,
    "hypernode.binpack.normal-pod.fading": 0,
}


def batch_objects(foo: bool, running: Sequence[str] = ()) -> list[Obj]:
    """TestBatchNodeOrderFn's cluster: the three-tier tree, nodes sized per tier-1 HyperNode, a
    PodGroup without topology, p1 pending and `running` pods (2 CPUs, 4G, and 8 foo with `foo`)."""
    request = {**quantities("2", "4G"), **({"example.com/foo": "8"} if foo else {})}
    objects: list[Obj] = [vc_queue("q1", 1), vc_podgroup("pg1", "c1", "q1", 1, None, "Inqueue")]
    for node in EIGHT_NODES:
        cpu, memory, foos = SIZES[node[:2]]
        built = vc_node(node, cpu, memory, 10)
        if foo:
            built["status"]["allocatable"]["example.com/foo"] = built["status"]["capacity"]["example.com/foo"] = foos
        objects.append(built)
    objects += hypernodes(THREE_TIERS)
    objects.append(vc_pod("c1", "p1", "", "Pending", request, "pg1"))
    objects += [vc_pod("c1", f"p{i}", node, "Running", request, "pg1") for i, node in enumerate(running, 2)]
    return objects


def pairs(values: Mapping[str, float]) -> dict[str, float]:
    """Expected scores given per tier-1 HyperNode, for both of its nodes."""
    return {f"{hn}-n{j}": value for hn, value in values.items() for j in (1, 2)}


BATCH_ROWS = [
    (
        "score empty nodes for single task with no network topology and no hypernode-level binpacking",
        batch_objects(False),
        {"hypernode.binpack.normal-pod.enable": False},
        pairs({"s3": 0.0, "s4": 0.0, "s5": 0.0, "s6": 0.0}),  # Go: no score at all
    ),
    (
        "score empty nodes for single task with no network topology and default plugin arguments",
        batch_objects(False),
        {},
        pairs({"s3": 25.8, "s4": 21.6, "s5": 19.9, "s6": 15.7}),
    ),
    (
        "score empty nodes for single task with no network topology and customized plugin arguments",
        batch_objects(True),
        CUSTOM,
        pairs({"s3": 500.0, "s4": 468.75, "s5": 281.3, "s6": 250.0}),
    ),
    (
        "score non-empty nodes for single task with no network topology and customized plugin arguments",
        batch_objects(True, ["s3-n1", "s3-n2"]),
        CUSTOM,
        pairs({"s3": 0.0, "s4": 468.8, "s5": 281.3, "s6": 250.0}),
    ),
]


@pytest.mark.parametrize(("name", "objects", "arguments", "expected"), BATCH_ROWS, ids=[row[0] for row in BATCH_ROWS])
def test_volcano_batch_node_order(
    name: str, objects: list[Obj], arguments: dict[str, Any], expected: dict[str, float]
) -> None:
    assert_scores(scores_of(objects, arguments, "p1"), expected)


def test_volcano_batch_node_order_for_a_sub_job() -> None:
    """The row "score nodes for tasks with network topology": the PodGroup (hard, tier 2) has a
    SubGroupPolicy (hard, tier 2) grouping the workers, p1 pending and p2 running on s4-n1. As the
    Go test hands BatchNodeOrderFn every node, the tie-break looks among all of them (s4-n1 is
    full: the session's own candidates would leave it out).

    A deliberate disagreement in the figures, not the order: the Go row scores against the
    HyperNode recorded on the PodGroup (s1, which holds s3 and s4 alike), so s3's and s4's nodes
    tie at 66.7 and s4's gain the sub-job's task share (116.7). Lahar reads where the sub-job runs
    from its running pod (s4, as Volcano itself recovers it after a restart), so s4's nodes score
    the full 100 and the share (150), s3's 66.7, s5's and s6's 33.3 as in the Go row."""
    group = topology_group("pg1", 2, "hard", 2)
    group["spec"]["subGroupPolicy"] = [
        {"name": "task1", "matchLabelKeys": [ROLE], "networkTopology": {"mode": "hard", "highestTierAllowed": 2}}
    ]
    objects: list[Obj] = [vc_queue("q1", 1), group, *hypernodes(THREE_TIERS)]
    objects += [vc_node(node, SIZES[node[:2]][0], SIZES[node[:2]][1], 10) for node in EIGHT_NODES]
    objects.append(vc_pod("c1", "p1", "", "Pending", quantities("2", "4G"), "pg1", {ROLE: "worker"}))
    objects.append(vc_pod("c1", "p2", "s4-n1", "Running", quantities("2", "4G"), "pg1", {ROLE: "worker"}))
    session = opened(cluster(*objects), conf("allocate", [{"name": PLUGIN}]))
    task = next(t for job in session.jobs.values() for t in job.tasks.values() if t.name == "p1")
    job = session.jobs[task.job]
    parts = session.sub_jobs(job)
    assert parts is not None and parts.of(task).key == "task1-worker"
    sub_job = parts.of(task)
    plugin: Any = session.plugins[PLUGIN]
    every = np.ones(len(session.nodes), dtype=bool)
    values = plugin.topology_score(task, job, every, plugin.sub_placed(job, sub_job), len(sub_job.uids))
    expected = pairs({"s3": 66.7, "s4": 150.0, "s5": 33.3, "s6": 33.3})  # Go: s4 116.7
    assert_scores(dict(zip(session.nodes.names, (MAX_SCORE * values).tolist(), strict=True)), expected)
    # The session's own score routes the task to its sub-job's score (the nodes without ties).
    scored = dict(zip(session.nodes.names, session.score(task).tolist(), strict=True))
    assert_scores(scored, {name: expected[name] for name in expected if not name.startswith("s4")})


# -- TestHyperNodeOrderFn -----------------------------------------------------------------------
# The Go rows score a sub-job whose SubGroupPolicy selects every task of the job (both are
# workers, the policy itself asks for no topology): the job's own HyperNode scores. Their score
# for Volcano's virtual cluster-top HyperNode is not asserted (Lahar's candidates are real ones).

HYPERNODE_ROWS = [
    (
        "score hypernodes for a subjob with default plugin arguments",
        False,
        {},
        {"s0": 25.0, "s1": 58.3, "s2": 45.8, "s3": 0.0, "s4": 100.0, "s5": 0.0, "s6": 75.0},
    ),
    (
        "score hypernodes for a subjob with customized plugin arguments",
        True,
        {**CUSTOM, "hypernode.binpack.cpu": 3},
        {"s0": 266.7, "s1": 700.0, "s2": 450.0, "s3": 0.0, "s4": 0.0, "s5": 0.0, "s6": 800.0},
    ),
]


@pytest.mark.parametrize(("name", "foo", "arguments", "expected"), HYPERNODE_ROWS, ids=[r[0] for r in HYPERNODE_ROWS])
def test_volcano_hypernode_order(name: str, foo: bool, arguments: dict[str, Any], expected: dict[str, float]) -> None:
    request = {**quantities("4", "4G"), **({"example.com/foo": "8"} if foo else {})}
    objects: list[Obj] = [vc_queue("q1", 1), topology_group("pg1", 2, "hard", 2)]
    for node in EIGHT_NODES:
        cpu, memory, foos = SIZES[node[:2]]
        built = vc_node(node, cpu, memory, 10)
        if foo:  # only each HyperNode's first node has any
            amount = foos if node.endswith("-n1") else "0"
            built["status"]["allocatable"]["example.com/foo"] = built["status"]["capacity"]["example.com/foo"] = amount
        objects.append(built)
    objects += hypernodes(THREE_TIERS)
    objects += [vc_pod("c1", pod, "", "Pending", request, "pg1", {ROLE: "worker"}) for pod in ("p1", "p2")]
    session = opened(cluster(*objects), conf("allocate", [{"name": PLUGIN, "arguments": arguments}]))
    job = next(iter(session.jobs.values()))
    assert_scores(session.plugins[PLUGIN].hypernode_scores(job, sorted(expected)), expected)  # type: ignore[attr-defined]


# -- TestNew ------------------------------------------------------------------------------------


def test_volcano_new_defaults_and_custom_weights() -> None:
    """ "build plugin with no arguments" and "build plugin with customized valid arguments": the
    weights each resource gets (a `hypernode.binpack.resources.<name>` for a resource not listed
    is ignored, a listed one without its own key weighs 1)."""
    column = {"cpu": 0, "memory": 1, "pods": 2, "example.com/foo": 3, "nvidia.com/gpu": 4}
    default = plugin_class(PLUGIN)({})
    assert default.binpack_weights(column, 5).tolist() == [1, 1, 0, 0, 0]  # type: ignore[attr-defined]
    custom = plugin_class(PLUGIN)(
        {
            "weight": 2,
            "hypernode.binpack.cpu": 3,
            "hypernode.binpack.memory": 4,
            "hypernode.binpack.resources": "nvidia.com/gpu, example.com/foo",
            "hypernode.binpack.resources.nvidia.com/gpuxxx": 5,
            "hypernode.binpack.resources.example.com/foo": 6,
            "hypernode.binpack.normal-pod.enable": False,
            "hypernode.binpack.normal-pod.fading": 0,
        }
    )
    assert custom.binpack_weights(column, 5).tolist() == [3, 4, 0, 6, 1]  # type: ignore[attr-defined]
    assert custom.argument("weight", 1) == 2
    assert custom.argument("hypernode.binpack.normal-pod.enable", True) is False
    assert custom.argument("hypernode.binpack.normal-pod.fading", 0.8) == 0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("weight", -1),
        ("hypernode.binpack.cpu", -1),
        ("hypernode.binpack.memory", -1),
        ("hypernode.binpack.resources.example.com/foo", -1),
        ("hypernode.binpack.normal-pod.enable", "a"),
        ("hypernode.binpack.normal-pod.fading", -1),
    ],
)
def test_volcano_new_invalid_arguments_refused(key: str, value: Any) -> None:
    """A deliberate disagreement ("build plugin with customized invalid arguments"): Volcano
    replaces each bad value by its default without a word; Lahar refuses the configuration naming
    the argument (a refused reload keeps the last good one), as for every malformed argument."""
    with pytest.raises(ConfError, match=key.replace(".", r"\.")):
        plugin_class(PLUGIN)({key: value})


# -- allocate_test.go: TestNodeLevelScoreWithNetWorkTopologies, TestHyperNodeBinpack... ----------

PACKED_TIERS = (
    [
        {"name": "gang"},
        {"name": "predicates"},
        {"name": "binpack"},
        {"name": PLUGIN},
    ],
)


def test_volcano_node_level_score_with_network_topologies() -> None:
    """ "hard network topology constrain, allocate job to highest score hypeNode with node level
    binpack": s0's nodes run pg2's pods, so s0 is the fuller HyperNode and binpack the fuller node."""
    objects: list[Obj] = [
        vc_queue("q1", 1),
        topology_group("pg1", 2, "hard", 1),
        topology_group("pg2", 2, phase="Running"),
        *(vc_node(name, cpu, memory, 10) for name, cpu, memory in NODE_LEVEL_NODES),
        *hypernodes({"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0", "s1"])}),
        vc_pod("c1", "p1", "", "Pending", quantities("2", "4Gi"), "pg1", {ROLE: "master"}),
        vc_pod("c1", "p2", "", "Pending", quantities("4", "8Gi"), "pg1", {ROLE: "worker"}),
        vc_pod("c1", "p3", "s0-n1", "Running", quantities("2", "4Gi"), "pg2", {ROLE: "master"}),
        vc_pod("c1", "p4", "s0-n2", "Running", quantities("4", "8Gi"), "pg2", {ROLE: "worker"}),
    ]
    assert binds(outcome(objects, "allocate", PACKED_TIERS)) == {"c1/p1": "s0-n1", "c1/p2": "s0-n2"}


NODE_LEVEL_NODES = [("s0-n1", "4", "8Gi"), ("s0-n2", "8", "16Gi"), ("s1-n3", "4", "8Gi"), ("s1-n4", "8", "16Gi")]


def test_volcano_hypernode_binpack_with_network_topologies() -> None:
    """ "hard network topology constrain, allocate task to node under LCAHyperNode": four tasks of 4
    CPUs, two nodes of 4 CPUs under each of s0, s1, s2 (tier 1, under s3): the job lands two and two
    in two tier-1 HyperNodes (`ExpectBindNumsInHyperNode: [2, 2]`)."""
    tree = {
        "s0": (1, ["s0-n1", "s0-n2"]),
        "s1": (1, ["s1-n3", "s1-n4"]),
        "s2": (1, ["s2-n5", "s2-n6"]),
        "s3": (2, ["s0", "s1", "s2"]),
    }
    objects: list[Obj] = [vc_queue("q1", 1), topology_group("pg1", 4, "hard", 2)]
    objects += [vc_node(node, "4", "8Gi", 10) for _, members in list(tree.values())[:3] for node in members]
    objects += hypernodes(tree)
    objects += [
        vc_pod("c1", f"p{i}", "", "Pending", quantities("4", "8Gi"), "pg1", {ROLE: "master" if i == 1 else "worker"})
        for i in range(1, 5)
    ]
    placed = binds(outcome(objects, "allocate", ([{"name": "gang"}, {"name": "predicates"}, {"name": PLUGIN}],)))
    assert len(placed) == 4
    per_hypernode = sorted(n for n in (sum(node.startswith(hn) for node in placed.values()) for hn in tree) if n)
    assert per_hypernode == [2, 2]


# -- TestHyperNodeGradientPreFiltering ----------------------------------------------------------
# The Go rows build 100 tier-1 HyperNodes of 10 nodes (4 CPUs, 8Gi each) under one of tier 2, set
# the first one's idle and future-idle figures by hand and ask whether the gradient keeps it for
# a job of the given minimum resources. Here the tree is that first HyperNode, one more like it and
# the tier-2 one above both; its figures come from pods of 1 CPU and 2Gi (running ones make it
# less idle, deleting ones add to its future idle), the job's minimum is its PodGroup's
# minResources, and the question is whether the plugin's candidate HyperNodes include it.
# Not expressible: "Job - idle sufficient, futureIdle insufficient" and "SubJob - idle
# sufficient, futureIdle insufficient" (future idle below idle takes pipelined tasks, which exist
# only inside a session). The other "SubJob" rows (highestTierAllowed 1, the sub-job's minimum its
# pending tasks' requests: 10 CPUs, 20Gi) ask the plugin's sub-job candidates
# (`Session.sub_job_domains`) for a sub-job of five pending pods of 2 CPUs and 4Gi.

GRADIENT_ROWS = [
    # name, evicting, minimum (CPUs, Gi), running pods, deleting pods, kept
    ("Job - idle sufficient, futureIdle sufficient", False, (20, 40), 5, 5, True),
    ("Job - idle insufficient, futureIdle sufficient", False, (20, 40), 10, 15, True),
    ("Job - idle insufficient, futureIdle insufficient", False, (20, 40), 25, 0, False),
    ("Evict purpose - idle insufficient, futureIdle insufficient", True, (20, 40), 25, 0, True),
    ("Evict purpose - allocatable insufficient", True, (50, 100), 25, 0, False),
]


@pytest.mark.parametrize(
    ("name", "evicting", "minimum", "running", "deleting", "kept"), GRADIENT_ROWS, ids=[r[0] for r in GRADIENT_ROWS]
)
def test_volcano_hypernode_gradient_pre_filtering(
    name: str, evicting: bool, minimum: tuple[int, int], running: int, deleting: int, kept: bool
) -> None:
    nodes = [f"node-{i}" for i in range(20)]
    tree = {"hn-1-0": (1, nodes[:10]), "hn-1-1": (1, nodes[10:]), "hn-2-0": (2, ["hn-1-0", "hn-1-1"])}
    group = topology_group("pg1", 1, "hard", 2)
    group["spec"]["minResources"] = {"cpu": str(minimum[0]), "memory": f"{minimum[1]}Gi"}
    objects: list[Obj] = [vc_queue("q1", 1), group, vc_podgroup("busy", "c1", "q1", 1, None, "Running")]
    objects += [vc_node(node, "4", "8Gi", 110) for node in nodes] + hypernodes(tree)
    objects.append(vc_pod("c1", "p1", "", "Pending", quantities("1", "1Gi"), "pg1"))
    objects += busy_pods(nodes[:10], running, deleting)
    session = opened(cluster(*objects), conf("allocate", [{"name": PLUGIN}]))
    job = session.jobs["c1/pg1"]
    assert ("hn-1-0" in (session.job_domains(job, evicting) or [])) is kept


SUB_JOB_GRADIENT_ROWS = [
    # name, running pods, deleting pods, kept
    ("SubJob - idle sufficient, futureIdle sufficient", 5, 5, True),
    ("SubJob - idle insufficient, futureIdle sufficient", 25, 10, True),
    ("SubJob - idle insufficient, futureIdle insufficient", 35, 0, False),
]


@pytest.mark.parametrize(
    ("name", "running", "deleting", "kept"), SUB_JOB_GRADIENT_ROWS, ids=[r[0] for r in SUB_JOB_GRADIENT_ROWS]
)
def test_volcano_hypernode_gradient_pre_filtering_sub_job(name: str, running: int, deleting: int, kept: bool) -> None:
    nodes = [f"node-{i}" for i in range(20)]
    tree = {"hn-1-0": (1, nodes[:10]), "hn-1-1": (1, nodes[10:]), "hn-2-0": (2, ["hn-1-0", "hn-1-1"])}
    group = vc_podgroup("pg1", "c1", "q1", 1, None, "Inqueue")
    group["spec"]["subGroupPolicy"] = [
        {"name": "sub", "matchLabelKeys": [ROLE], "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}
    ]
    objects: list[Obj] = [vc_queue("q1", 1), group, vc_podgroup("busy", "c1", "q1", 1, None, "Running")]
    objects += [vc_node(node, "4", "8Gi", 110) for node in nodes] + hypernodes(tree)
    objects += [vc_pod("c1", f"p{i}", "", "Pending", quantities("2", "4Gi"), "pg1", {ROLE: "worker"}) for i in range(5)]
    objects += busy_pods(nodes[:10], running, deleting)
    session = opened(cluster(*objects), conf("allocate", [{"name": PLUGIN}]))
    job = session.jobs["c1/pg1"]
    parts = session.sub_jobs(job)
    assert parts is not None
    assert ("hn-1-0" in (session.sub_job_domains(job, parts.sub_jobs["sub-worker"], None) or [])) is kept


def test_volcano_hypernode_gradient_for_sub_job_no_sub_job_policy_respects_hard_topology() -> None:
    """`TestHyperNodeGradientForSubJobFn_NoSubJobPolicyRespectsHardTopology`: a job whose PodGroup
    asks for hard topology of tier 1 and has no SubGroupPolicy, zones of two 8-CPU nodes under a
    region (tier 2), and a pending task asking 20 CPUs; for eviction no tier-1 zone can hold it,
    and the candidates must not fall back to anything above (the region or the whole cluster).
    Volcano asks the job's default sub-job, whose minimum is its pending tasks' requests; Lahar
    places a job without sub-group policies as a whole, so the job's own candidates are asked
    (`Session.job_domains`), its minimum its PodGroup's minResources (given as those 20 CPUs)."""
    tree = {"zone-a": (1, ["node-a-1", "node-a-2"]), "zone-d": (1, ["node-d-1", "node-d-2"])}
    tree["region"] = (2, ["zone-a", "zone-d"])
    group = topology_group("pg1", 1, "hard", 1)
    group["spec"]["minResources"] = {"cpu": "20"}
    objects: list[Obj] = [vc_queue("q1", 1), group, *hypernodes(tree)]
    objects += [vc_node(node, "8", "16Gi", 110) for node in ("node-a-1", "node-a-2", "node-d-1", "node-d-2")]
    objects.append(vc_pod("c1", "pending-task", "", "Pending", quantities("20", None), "pg1"))
    session = opened(cluster(*objects), conf("allocate", [{"name": PLUGIN}]))
    job = session.jobs["c1/pg1"]
    assert session.sub_jobs(job) is None
    assert session.job_domains(job, True) == []
    assert session.job_domains(job, False) == []
