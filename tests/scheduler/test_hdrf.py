"""Hierarchical DRF (drf with enableHierarchy): queues ordered down the tree of their
`volcano.sh/hierarchy` annotations, a subtree's share being its least-served demanding child's,
saturated subtrees last; without the switch drf orders no queues."""

from __future__ import annotations

from typing import Any

import numpy as np

from lahar.scheduler.framework import hdrf
from lahar.scheduler.framework.session import open_session
from tests.scheduler import cluster_fixtures as fx

Obj = dict[str, Any]


def queue(name: str, hierarchy: str, weights: str) -> Obj:
    obj = fx.queue(name)
    obj["metadata"]["annotations"] = {hdrf.HIERARCHY: hierarchy, hdrf.HIERARCHY_WEIGHTS: weights}
    return obj


def job(name: str, queue_name: str, running: int, pending: int) -> list[Obj]:
    pods = [fx.pod(f"{name}-{i}", "1", group=name, node_name="n1", phase="Running") for i in range(running)]
    pods += [fx.pod(f"{name}-{running + i}", "1", group=name) for i in range(pending)]
    return [fx.podgroup(name, 1, queue=queue_name), *pods]


OBJECTS = [
    fx.node("n1", cpu="10", memory="100Gi"),
    queue("a", "root/eng/a", "1/1/1"),
    queue("b", "root/eng/b", "1/1/1"),
    queue("c", "root/sci", "1/1"),
    *job("ja", "a", 2, 2),
    *job("jb", "b", 0, 2),
    *job("jc", "c", 1, 2),
]


def order(hierarchy: bool) -> list[str]:
    drf: Any = {"name": "drf", "enableHierarchy": True} if hierarchy else "drf"
    session = open_session(fx.snapshot(OBJECTS), fx.conf("allocate", [drf]))
    return [q.name for q in sorted((session.queues[n] for n in "abc"), key=session.queue_order_key)]


def test_queues_go_down_the_tree_by_share_over_weight() -> None:
    # eng's share is a's (b holds nothing yet): 2 of 10 CPUs against sci's 1, so sci first;
    # within eng, b (nothing) before a.
    assert order(hierarchy=True) == ["c", "b", "a"]
    assert order(hierarchy=False) == ["a", "b", "c"]  # no queue order from drf: by name


def test_a_saturated_subtree_goes_last_and_weights_divide_shares() -> None:
    total = np.array([10.0, 10.0])
    leaves = [
        hdrf.Leaf("full", [("x", 1.0)], np.array([1.0, 0.0]), np.array([1.0, 0.0])),  # has all it asks
        hdrf.Leaf("wants", [("y", 4.0)], np.array([4.0, 0.0]), np.array([9.0, 0.0])),
    ]
    root = hdrf.build(leaves, total)
    full, wants = hdrf.order_key(root, [("x", 1.0)]), hdrf.order_key(root, [("y", 4.0)])
    assert root.children["x"].saturated and not root.children["y"].saturated
    assert wants < full
    assert root.children["y"].share / root.children["y"].weight == 0.1  # 4/10 over weight 4


def test_paths_and_weights_from_annotations() -> None:
    assert hdrf.queue_path({hdrf.HIERARCHY: "root/eng/prod", hdrf.HIERARCHY_WEIGHTS: "1/2/0.5"}) == [
        ("eng", 2.0),
        ("prod", 1.0),  # below 1 counts as 1, as in Volcano
    ]
    assert hdrf.queue_path({}) == []
