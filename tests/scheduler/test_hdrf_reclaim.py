"""drf with `enableHierarchy: true` in reclaim (Volcano's hdrf reclaim filter): a queue takes back
from another only while, with the reclaimer's task placed and the victim's evicted, it still comes
first in hierarchical DRF, so the evictions stop where the weighted shares meet."""

from __future__ import annotations

from typing import Any

import numpy as np

from lahar.scheduler.framework import hdrf
from tests.scheduler.volcano_cases import evicted, outcome, vc_node, vc_pod, vc_podgroup, vc_queue

# priority: a job starves while it has pending tasks; conformance: any non-critical pod may go.
HIERARCHICAL = ([{"name": "drf", "enableHierarchy": True}, "priority", "conformance"],)


def queue(name: str, weight: str) -> dict[str, Any]:
    obj = vc_queue(name)
    obj["metadata"]["annotations"] = {
        "volcano.sh/hierarchy": f"root/{name}",
        "volcano.sh/hierarchy-weights": f"1/{weight}",
    }
    return obj


def objects(weight_a: str) -> list[dict[str, Any]]:
    """A 4-CPU node held by qb's job (4 running 1-CPU pods); qa's job asks for 4 such pods."""
    return [
        vc_node("n1", "4", "4G"),
        queue("qa", weight_a),
        queue("qb", "1"),
        vc_podgroup("pa", "ns", "qa", 1, None, "Inqueue"),
        vc_podgroup("pb", "ns", "qb", 1, None, "Running"),
        *(vc_pod("ns", f"a{i}", "", "Pending", {"cpu": "1", "memory": "1G"}, "pa") for i in range(4)),
        *(vc_pod("ns", f"b{i}", "n1", "Running", {"cpu": "1", "memory": "1G"}, "pb") for i in range(4)),
    ]


def test_equal_weights_reclaim_until_the_shares_meet() -> None:
    # a0 makes qa 1/4 against qb's 3/4: b goes. a1 would make 2/4 against 2/4: a tie, no victim.
    assert len(evicted(outcome(objects("1"), "reclaim", HIERARCHICAL))) == 1


def test_a_heavier_queue_reclaims_further() -> None:
    # Weight 3: 2/4 / 3 still comes before 2/4, 3/4 / 3 ties with 1/4: two evictions.
    assert len(evicted(outcome(objects("3"), "reclaim", HIERARCHICAL))) == 2


def test_without_hierarchy_drf_does_not_filter_reclaim() -> None:
    flat = ([{"name": "drf"}, "priority", "conformance"],)
    assert len(evicted(outcome(objects("1"), "reclaim", flat))) == 4


def test_compare_is_volcanos_compare_queues() -> None:
    total = np.array([8.0])
    leaves = [
        hdrf.Leaf("ja", [("a", 1.0)], np.array([1.0]), np.array([4.0])),
        hdrf.Leaf("jb", [("b", 1.0)], np.array([2.0]), np.array([4.0])),
        hdrf.Leaf("jc", [("c", 1.0)], np.array([4.0]), np.array([4.0])),
    ]
    tree = hdrf.build(leaves, total)
    assert hdrf.compare(tree, [("a", 1.0)], [("b", 1.0)]) == -0.125
    assert hdrf.compare(tree, [("b", 1.0)], [("a", 1.0)]) == 0.125
    assert hdrf.compare(tree, [("c", 1.0)], [("a", 1.0)]) == 1.0  # saturated goes last
    assert hdrf.compare(tree, [("a", 1.0)], [("a", 1.0)]) == 0.0
