"""network-topology-aware with Volcano's HyperNodes: hard mode keeps a gang under one HyperNode of
an allowed tier (trying the next when the first cannot hold it), soft mode prefers the job's own
HyperNodes, a looping tree is reported and left out, and the API refuses malformed HyperNodes."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from lahar.api import hypernode, queue
from lahar.api.node import Node
from lahar.scheduler.conf import parse_conf
from lahar.scheduler.framework.hypernodes import hypernode_tree
from lahar.scheduler.framework.plugin import ConfError
from lahar.scheduler.model import NodeTable, Resources
from tests.scheduler import cluster_fixtures as fx
from tests.scheduler.preempt_builders import cluster, conf, priority_class, run

Obj = dict[str, Any]
TIERS = (["priority", "gang"], ["predicates", "proportion", "nodeorder", "network-topology-aware"])


def hyper(name: str, tier: int, *members: str, kind: str = "Node") -> Obj:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": tier, "members": [{"type": kind, "selector": {"exactMatch": {"name": m}}} for m in members]},
    }


def topology_gang(name: str, size: int, mode: str, tier: int, cpu: str = "1") -> list[Obj]:
    group = fx.podgroup(name, size)
    group["spec"]["networkTopology"] = {"mode": mode, "highestTierAllowed": tier}
    return [group, *(fx.pod(f"{name}-{i}", cpu, group=name) for i in range(size))]


NODES = [fx.node(f"n{i}", cpu="2") for i in range(4)]
TREE = [hyper("s0", 1, "n0", "n1"), hyper("s1", 1, "n2", "n3"), hyper("top", 2, "s0", "s1", kind="HyperNode")]


def cycle(objects: list[Any]) -> Any:
    flat: list[Obj] = []
    for obj in objects:
        flat.extend(obj if isinstance(obj, list) else [obj])
    return run(cluster(*flat), conf("allocate", *TIERS))


def nodes_of(session: Any) -> set[str]:
    return {task.node for batch in session.binds for task in batch.tasks}


def test_hard_mode_keeps_a_gang_under_one_hypernode_of_an_allowed_tier() -> None:
    session = cycle([*NODES, *TREE, topology_gang("g", 4, "hard", 1)])
    assert nodes_of(session) in ({"n0", "n1"}, {"n2", "n3"})
    too_big = cycle([*NODES, *TREE, topology_gang("g", 5, "hard", 1)])
    assert nodes_of(too_big) == set()
    assert "refused by network-topology-aware" in too_big.jobs["default/g"].unschedulable_message
    allowed_higher = cycle([*NODES, *TREE, topology_gang("g", 5, "hard", 2)])
    assert len(nodes_of(allowed_higher)) >= 3


def test_hard_mode_tries_the_next_hypernode_when_the_first_cannot_hold_the_gang() -> None:
    busy = fx.pod("busy", "2", node_name="n0", phase="Running")
    session = cycle([*NODES, *TREE, busy, topology_gang("g", 4, "hard", 1)])
    assert nodes_of(session) == {"n2", "n3"}


def test_nodes_under_no_hypernode_never_take_a_hard_job() -> None:
    session = cycle([*NODES, fx.node("loose", cpu="64"), *TREE, topology_gang("g", 2, "hard", 2)])
    assert "loose" not in nodes_of(session) and len(nodes_of(session)) >= 1


def test_soft_mode_prefers_the_jobs_own_hypernode() -> None:
    group = fx.podgroup("s", 1)
    group["spec"]["networkTopology"] = {"mode": "soft", "highestTierAllowed": 1}
    running = fx.pod("s-0", "1", group="s", node_name="n2", phase="Running")
    pending = fx.pod("s-1", "1", group="s")
    emptier = [fx.node("n0", cpu="64"), fx.node("n1", cpu="64"), fx.node("n2", cpu="2"), fx.node("n3", cpu="2")]
    session = cycle([*emptier, *TREE, group, running, pending])
    assert nodes_of(session) in ({"n2"}, {"n3"})


def test_a_looping_tree_is_reported_and_the_rest_scheduled() -> None:
    loop = [hyper("a", 2, "b", kind="HyperNode"), hyper("b", 2, "a", kind="HyperNode")]
    session = cycle([*NODES, *TREE, *loop, topology_gang("g", 2, "hard", 1), fx.pod("free")])
    assert {e.name for e in session.events if e.reason == "InvalidHyperNode"} == {"a", "b"}
    assert len(nodes_of(session)) >= 1 and "free" in {t.name for b in session.binds for t in b.tasks}


def test_the_tree_resolves_nested_members_regex_and_labels() -> None:
    nodes = [Node(fx.node(f"n{i}", labels={"rack": "r1" if i < 2 else "r2"})) for i in range(4)]
    table = NodeTable(Resources(), nodes)
    by_regex = hyper("re", 1)
    by_regex["spec"]["members"] = [{"type": "Node", "selector": {"regexMatch": {"pattern": "n[23]"}}}]
    by_label = hyper("lab", 1)
    by_label["spec"]["members"] = [{"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "r1"}}}}]
    tree = hypernode_tree([by_regex, by_label, hyper("all", 2, "re", "lab", kind="HyperNode")], table)
    assert list(tree.nodes["re"]) == [False, False, True, True]
    assert list(tree.nodes["lab"]) == [True, True, False, False]
    assert tree.nodes["all"].all() and tree.within(1) == ["lab", "re"] and tree.faults == {}


def test_the_api_refuses_malformed_hypernodes() -> None:
    def problems(obj: Obj) -> list[str]:
        return [str(error) for error in hypernode.validate(obj)]

    assert problems(hyper("ok", 1, "n0")) == []
    assert any("at least one member" in p for p in problems(hyper("empty", 1)))
    own = hyper("self", 2, "self", kind="HyperNode")
    assert any("cannot be its own member" in p for p in problems(own))
    two = hyper("two", 1, "n0")
    two["spec"]["members"][0]["selector"]["regexMatch"] = {"pattern": "n.*"}
    assert any("exactly one of" in p for p in problems(two))
    bad = hyper("bad", 1)
    bad["spec"]["members"] = [{"type": "Node", "selector": {"regexMatch": {"pattern": "n[("}}}]
    assert any("not a regular expression" in p for p in problems(bad))
    by_label = hyper("hl", 2)
    by_label["spec"]["members"] = [{"type": "HyperNode", "selector": {"labelMatch": {"matchLabels": {"a": "b"}}}}]
    assert any("exactMatch only" in p for p in problems(by_label))
    named = hyper("named", 1, "n0")
    named["spec"]["tierName"] = 7
    assert any("tierName" in p for p in problems(named))


def named_tree(*names: tuple[str, str]) -> list[Obj]:
    """TREE with each HyperNode's spec.tierName given as (hypernode, name)."""
    given = dict(names)
    tree = [dict(obj, spec=dict(obj["spec"])) for obj in TREE]
    for obj in tree:
        if obj["metadata"]["name"] in given:
            obj["spec"]["tierName"] = given[obj["metadata"]["name"]]
    return tree


def named_gang(name: str, size: int, tier_name: str) -> list[Obj]:
    group, *pods = topology_gang(name, size, "hard", 1)
    group["spec"]["networkTopology"] = {"mode": "hard", "highestTierName": tier_name}
    return [group, *pods]


def test_highest_tier_name_is_the_tier_its_hypernodes_carry() -> None:
    tree = named_tree(("s0", "leaf"), ("s1", "leaf"), ("top", "spine"))
    assert len(nodes_of(cycle([*NODES, *tree, named_gang("g", 5, "leaf")]))) == 0  # tier 1 holds 4
    assert len(nodes_of(cycle([*NODES, *tree, named_gang("g", 5, "spine")]))) >= 3


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ((("s0", "leaf"),), "no HyperNode has tierName rack"),
        ((("s0", "rack"), ("top", "rack")), "tierName rack names HyperNodes of tiers 1, 2"),
    ],
)
def test_a_tier_name_that_names_no_tier_keeps_a_hard_job_waiting(
    names: tuple[tuple[str, str], ...], message: str
) -> None:
    session = cycle([*NODES, *named_tree(*names), named_gang("g", 2, "rack")])
    assert nodes_of(session) == set()
    assert message in session.jobs["default/g"].unschedulable_message


def test_hypernode_order_prefers_the_fuller_hypernode_unless_switched_off() -> None:
    # n2 runs a 1-CPU pod: s1 is the fuller HyperNode and takes the 2-task gang; with
    # enabledHyperNodeOrder off, s0 and s1 are tried by size, then name: s0.
    busy = fx.pod("busy", "1", node_name="n2", phase="Running")
    objects = [*NODES, *TREE, busy, topology_gang("g", 2, "hard", 1)]
    assert nodes_of(cycle(objects)) <= {"n2", "n3"}
    plugins = ["predicates", {"name": "network-topology-aware", "enabledHyperNodeOrder": False}]
    session = run(
        cluster(*[o for obj in objects for o in (obj if isinstance(obj, list) else [obj])]),
        conf("allocate", ["priority", "gang"], plugins),
    )
    assert nodes_of(session) <= {"n0", "n1"}


def test_pods_without_topology_pack_into_the_fuller_hypernode() -> None:
    busy = fx.pod("busy", "1", node_name="n3", phase="Running")
    session = cycle([*NODES, *TREE, busy, fx.podgroup("free", 1), fx.pod("free-0", "1", group="free")])
    assert nodes_of(session) <= {"n2", "n3"}


def test_the_cache_keeps_hypernodes_for_the_sessions() -> None:
    cache = cluster(*TREE)
    assert sorted(h["metadata"]["name"] for h in cache.snapshot().hypernodes) == ["s0", "s1", "top"]
    cache.delete_hypernode(TREE[0])
    assert len(cache.snapshot().hypernodes) == 2


def test_the_loop_a_write_would_close_is_found_across_objects() -> None:
    members_of = {"x": ["y"], "y": ["z"], "w": ["w2"], "w2": ["w"]}
    assert hypernode.member_loop("z", ["x"], members_of) == ["z", "x", "y", "z"]
    assert hypernode.member_loop("z", ["w"], members_of) is None  # a loop z only hangs above
    assert hypernode.member_loop("z", [], members_of) is None
    assert hypernode.member_hypernodes(hyper("all", 2, "s0", "s1", kind="HyperNode")) == ["s0", "s1"]
    assert hypernode.member_hypernodes({"spec": ["not", "a", "mapping"]}) == []
    parents = {"b": "a", "c": "b", "x": "y", "y": "x"}
    assert queue.parent_loop("a", "c", parents) == ["a", "c", "b", "a"]
    assert queue.parent_loop("n", "x", parents) is None  # under a loop of others, not closing one
    assert queue.parent_loop("a", "root", parents) is None and queue.parent_loop("a", "gone", parents) is None


# -- preempt and reclaim for a hard job: room is made within one HyperNode ---------------------------

# As Volcano's default tiers: gang decides no victims (the actions keep gangs at their minimum).
UNFILTERING_GANG = {"name": "gang", "enablePreemptable": False, "enableReclaimable": False}
EVICTING: tuple[list[Any], ...] = (
    ["priority", UNFILTERING_GANG, "conformance"],
    ["predicates", "proportion", "nodeorder", "network-topology-aware"],
)


def low(where: dict[str, str], anchor: str, queue_name: str = "default", min_member: int = 1) -> list[Obj]:
    """Running 2-CPU pods of priority 1 (name -> node) in one gang (minMember 1: each of them may
    go), and its member asking no CPU on `anchor`."""
    podgroup = fx.podgroup("low", min_member, queue=queue_name, phase="Running")
    podgroup["spec"]["priorityClassName"] = "low"
    members = [fx.pod(n, "2", group="low", node_name=node, phase="Running", priority=1) for n, node in where.items()]
    members.append(fx.pod("anchor", None, group="low", node_name=anchor, phase="Running", priority=1))
    return [podgroup, *members]


def urgent_gang(name: str, size: int, queue_name: str = "default") -> list[Obj]:
    group, *pods = topology_gang(name, size, "hard", 1, cpu="2")
    group["spec"]["priorityClassName"] = "high"
    group["spec"]["queue"] = queue_name
    for pod in pods:
        pod["spec"]["priority"] = 100
    return [group, *pods]


CLASSES = [priority_class("low", 1), priority_class("high", 100)]


def evicting(action: str, objects: list[Any], arguments: dict[str, Any] | None = None) -> Any:
    flat: list[Obj] = []
    for obj in objects:
        flat.extend(obj if isinstance(obj, list) else [obj])
    document = {
        "actions": action,
        "tiers": [{"plugins": [{"name": p} if isinstance(p, str) else p for p in tier]} for tier in EVICTING],
        "configurations": [{"name": action, "arguments": arguments or {}}],
    }
    return run(cluster(*flat), parse_conf(yaml.safe_dump(document)))


def evicted_pods(session: Any) -> set[str]:
    return {e.task.name for e in session.evictions}


def pipelined_nodes(session: Any) -> set[str]:
    return {t.node for t in session.jobs["default/g"].tasks.values() if t.status.name == "PIPELINED"}


def test_preempt_for_a_hard_gang_evicts_within_one_hypernode() -> None:
    # n0, n1 (s0) and n2 (s1) hold victims; n3 holds a pod the gang may not take. Only s0 can
    # make room for both members: preempt evicts there and nowhere else.
    keeper = fx.pod("keeper", "2", node_name="n3", phase="Running", priority=1000)
    objects = [*NODES, *TREE, *CLASSES, *low({"v0": "n0", "v1": "n1", "v2": "n2"}, "n3"), keeper]
    session = evicting("preempt", [*objects, urgent_gang("g", 2)])
    assert evicted_pods(session) == {"v0", "v1"}
    assert pipelined_nodes(session) == {"n0", "n1"}


def test_preempt_evicts_nothing_when_no_one_hypernode_can_hold_the_gang() -> None:
    # Without the HyperNodes the gang would take n0 and n2; across s0 and s1 it may not.
    keepers = [fx.pod(f"keeper{i}", "2", node_name=f"n{i}", phase="Running", priority=1000) for i in (1, 3)]
    objects = [*NODES, *TREE, *CLASSES, *low({"v0": "n0", "v2": "n2"}, "n3"), *keepers]
    assert evicted_pods(evicting("preempt", [*objects, urgent_gang("g", 2)])) == set()
    flat = [o for o in objects if o.get("kind") != "HyperNode"]
    free_gang = [o for o in urgent_gang("g", 2)]
    del free_gang[0]["spec"]["networkTopology"]
    assert evicted_pods(evicting("preempt", [*flat, free_gang])) == {"v0", "v2"}


def test_reclaim_for_a_hard_gang_takes_from_one_hypernode() -> None:
    queues = [fx.queue("mine", weight=3), fx.queue("theirs", weight=1)]  # mine deserves the 4 CPUs it asks
    keeper = fx.pod("keeper", "2", node_name="n0", phase="Running", annotations={"volcano.sh/preemptable": "false"})
    victims = low({"v1": "n1", "v2": "n2", "v3": "n3"}, "n0", queue_name="theirs")
    objects = [*NODES, *TREE, *CLASSES, *queues, keeper, *victims]
    session = evicting("reclaim", [*objects, urgent_gang("g", 2, queue_name="mine")])
    assert evicted_pods(session) == {"v2", "v3"}
    assert pipelined_nodes(session) == {"n2", "n3"}


# -- gangpreempt and gangreclaim: Volcano's action names and arguments ------------------------------


def test_gangpreempt_tries_at_most_max_domains_hypernodes() -> None:
    # s0 (tried first) cannot make room: its n0 runs a pod the gang may not take; s1 can.
    keeper = fx.pod("keeper", "2", node_name="n0", phase="Running", priority=1000)
    objects = [*NODES, *TREE, *CLASSES, *low({"v1": "n1", "v2": "n2", "v3": "n3"}, "n0"), keeper]
    session = evicting("gangpreempt", [*objects, urgent_gang("g", 2)])
    assert evicted_pods(session) == {"v2", "v3"}
    # Evictions carry the action's name: volcano_eviction_transactions_total{action="gangpreempt"}.
    assert {e.reason for e in session.evictions} == {"gangpreempt"}
    one = evicting("gangpreempt", [*objects, urgent_gang("g", 2)], {"maxDomains": 1})
    assert evicted_pods(one) == set()


@pytest.mark.parametrize("action", ["gangpreempt", "gangreclaim", "preempt"])
def test_allow_whole_bundle_false_keeps_victim_gangs_at_their_minimum(action: str) -> None:
    # The victim gang runs at its minimum (3): the gang of 2 takes it whole, or nothing.
    queue_name = "default" if action != "gangreclaim" else "theirs"
    keepers = [fx.pod(f"keeper{i}", "2", node_name=f"n{i}", phase="Running", priority=1000) for i in (2, 3)]
    victims = low({"v0": "n0", "v1": "n1"}, "n2", queue_name=queue_name, min_member=3)
    queues = [fx.queue("mine", weight=3), fx.queue("theirs", weight=1)]
    objects = [*NODES, *CLASSES, *queues, *victims, *keepers]
    gang_ = urgent_gang("g", 2, queue_name="default" if action != "gangreclaim" else "mine")
    del gang_[0]["spec"]["networkTopology"]
    assert evicted_pods(evicting(action, [*objects, gang_])) == {"v0", "v1", "anchor"}
    if action != "preempt":
        assert evicted_pods(evicting(action, [*objects, gang_], {"allowWholeBundle": False})) == set()


def test_volcanos_gang_eviction_configuration_is_accepted() -> None:
    text = (
        'actions: "enqueue, allocate, gangpreempt, gangreclaim, backfill"\n'
        "configurations:\n- name: gangpreempt\n  arguments: {maxDomains: 4, allowWholeBundle: false}\n"
    )
    assert not parse_conf(text).warnings
    with pytest.raises(ConfError, match="maxDomains"):
        parse_conf('actions: "gangreclaim"\nconfigurations:\n- name: gangreclaim\n  arguments: {maxDomains: 0}\n')


def test_a_hard_job_skips_hypernodes_without_room_for_its_minimum() -> None:
    gang = topology_gang("g", 2, "hard", 1)
    gang[0]["spec"]["minResources"] = {"cpu": "5"}  # each tier-1 HyperNode has 4 CPUs
    session = cycle([*NODES, *TREE, gang])
    assert nodes_of(session) == set()
    assert "no HyperNode of tier at most 1 has room for the job's minimum resources" in (
        session.jobs["default/g"].unschedulable_message
    )
    busy = fx.pod("busy", "2", node_name="n0", phase="Running")  # s0 has 2 CPUs idle, s1 4
    gang[0]["spec"]["minResources"] = {"cpu": "3"}
    assert nodes_of(cycle([*NODES, *TREE, busy, gang])) <= {"n2", "n3"}


def test_soft_mode_tries_each_hypernode_then_the_whole_cluster() -> None:
    # Volcano runs a soft job as a hard one whose highest tier is the whole cluster: the gang goes
    # into one HyperNode where one can hold it, and anywhere (nodes under none included) otherwise.
    spread = cycle([*NODES, *TREE, topology_gang("g", 2, "soft", 1)])
    assert nodes_of(spread) <= {"n0", "n1"} or nodes_of(spread) <= {"n2", "n3"}
    too_big = cycle([*NODES, fx.node("loose", cpu="2"), *TREE, topology_gang("g", 10, "soft", 1)])
    assert len([t for b in too_big.binds for t in b.tasks]) == 10 and "loose" in nodes_of(too_big)
