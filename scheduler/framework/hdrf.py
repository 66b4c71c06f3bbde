"""Hierarchical DRF (Volcano's drf plugin with `enableHierarchy: true`): queues placed in a tree by
their annotations `volcano.sh/hierarchy` (`root/eng/prod`) and `volcano.sh/hierarchy-weights`
(`1/2/8`, one weight per level, below 1 counting as 1), jobs as the leaves. A plain function of
the jobs' allocations and requests, so the drf plugin rebuilds it whenever they change.

Volcano's rules, kept: a leaf (job) is saturated when it holds all it asks for of some resource,
or asks for a resource no longer in demand (the cluster has none of it left); an inner node's
allocation is its children's, each unsaturated child scaled to the smallest dominant share among
them (so a node's share says how much its least-served demanding child holds), and it is
saturated when all its children are. Queues compare down their paths: at each level an
unsaturated node goes before a saturated one, then the smaller share / weight; `order_key` is
that comparison as a sort key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

HIERARCHY = "volcano.sh/hierarchy"
HIERARCHY_WEIGHTS = "volcano.sh/hierarchy-weights"


@dataclass
class Node:
    name: str
    weight: float = 1.0
    allocated: np.ndarray | None = None
    request: np.ndarray | None = None  # leaves only
    share: float = 0.0
    saturated: bool = False
    children: dict[str, Node] = field(default_factory=dict)


def queue_path(annotations: Mapping[str, str]) -> list[tuple[str, float]]:
    """The levels below the root a queue hangs at, with their weights; [] when it says none."""
    names = (annotations.get(HIERARCHY) or "").split("/")
    weights = (annotations.get(HIERARCHY_WEIGHTS) or "").split("/")
    path = []
    for i in range(1, len(names)):
        try:
            weight = float(weights[i]) if i < len(weights) else 1.0
        except ValueError:
            weight = 1.0
        path.append((names[i], max(weight, 1.0)))
    return path


@dataclass
class Leaf:
    """A job for the tree: its queue's path, what it holds and what all its tasks ask for."""

    key: str
    path: list[tuple[str, float]]
    allocated: np.ndarray
    request: np.ndarray


def _share(allocated: np.ndarray, total: np.ndarray) -> float:
    counted = total > 0
    return float((allocated[counted] / total[counted]).max(initial=0.0))


def build(leaves: Iterable[Leaf], total: np.ndarray) -> Node:
    """The tree with every node's allocation, share and saturation filled in."""
    root = Node("root")
    listed = list(leaves)
    all_allocated = sum((leaf.allocated for leaf in listed), np.zeros_like(total))
    demanding = all_allocated < total
    for leaf in listed:
        node = root
        for name, weight in leaf.path:
            node = node.children.setdefault(name, Node(name, weight))
        node.children[leaf.key] = Node(leaf.key, 1.0, leaf.allocated.astype(np.float64), leaf.request)
    _fill(root, total, demanding)
    return root


def _fill(node: Node, total: np.ndarray, demanding: np.ndarray) -> None:
    if node.request is not None:  # a job
        assert node.allocated is not None
        asked = node.request > 0
        node.saturated = bool(
            ((node.allocated > 0) & asked & (node.allocated >= node.request)).any() or (asked & ~demanding).any()
        )
        node.share = _share(node.allocated, total)
        return
    smallest = 1.0
    for child in node.children.values():
        _fill(child, total, demanding)
        if child.share != 0 and not child.saturated:
            smallest = min(smallest, child.share)
    allocated = np.zeros(len(total), dtype=np.float64)
    for child in node.children.values():
        if child.share != 0:
            assert child.allocated is not None
            allocated += child.allocated if child.saturated else child.allocated * (smallest / child.share)
    node.allocated = allocated
    node.share = _share(allocated, total)
    node.saturated = bool(node.children) and all(child.saturated for child in node.children.values())


def order_key(root: Node, path: list[tuple[str, float]]) -> tuple[tuple[bool, float], ...]:
    """A queue's sort key: (saturated, share / weight) of each node down its path."""
    key = [(root.saturated, root.share / root.weight)]
    node = root
    for name, _ in path:
        node = node.children.get(name) or Node(name)
        key.append((node.saturated, node.share / node.weight))
    return tuple(key)


def compare(root: Node, left: list[tuple[str, float]], right: list[tuple[str, float]]) -> float:
    """Volcano's compareQueues: down both paths while the nodes tie, an unsaturated node before a
    saturated one (-1 / 1), else the difference of share / weight; 0 when the common levels tie.
    Negative when the left queue goes first."""
    for (left_saturated, left_share), (right_saturated, right_share) in zip(
        order_key(root, left), order_key(root, right), strict=False
    ):
        if left_saturated != right_saturated:
            return 1.0 if left_saturated else -1.0
        if left_share != right_share:
            return left_share - right_share
    return 0.0
