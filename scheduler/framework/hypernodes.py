"""The HyperNode tree (`topology.volcano.sh/v1alpha1`) over a session's node rows: each HyperNode's
tier and the nodes under it (its node members, and the nodes under its HyperNode members, at any
depth). Node members are chosen as Volcano chooses them: `exactMatch` by name, `regexMatch` by a
regular expression found in the name, `labelMatch` by a label selector. A HyperNode in a loop of
members, or naming a member HyperNode that does not exist, is a fault: it is left out (no nodes)
and the plugin reports it. A HyperNode's `tierName` names its tier (a PodGroup's
`highestTierName` refers to it)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lahar.api.hypernode import HyperNode
from lahar.api.selectors import SelectorError, label_selector_from_dict
from lahar.scheduler.model import NodeTable


@dataclass
class HyperNodeTree:
    tiers: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, np.ndarray] = field(default_factory=dict)  # name -> mask over node rows
    faults: dict[str, str] = field(default_factory=dict)
    tier_names: dict[str, set[int]] = field(default_factory=dict)  # spec.tierName -> the tiers it names

    def within(self, highest_tier: int) -> list[str]:
        """HyperNodes of tier at most `highest_tier` that hold nodes: lowest tier first, then the
        fewest nodes (the tightest group), then by name."""
        found = [name for name, tier in self.tiers.items() if tier <= highest_tier and self.nodes[name].any()]
        return sorted(found, key=lambda name: (self.tiers[name], int(self.nodes[name].sum()), name))


def _node_rows(member: Mapping[str, Any], nodes: NodeTable) -> np.ndarray:
    selector = member.get("selector") or {}
    rows = np.zeros(len(nodes), dtype=bool)
    if "exactMatch" in selector:
        row = nodes.index.get(str((selector["exactMatch"] or {}).get("name", "")))
        if row is not None:
            rows[row] = True
    elif "regexMatch" in selector:
        try:
            pattern = re.compile(str((selector["regexMatch"] or {}).get("pattern", "")))
        except re.error:
            return rows
        rows[[i for i, name in enumerate(nodes.names) if pattern.search(name)]] = True
    elif "labelMatch" in selector:
        try:
            wanted = label_selector_from_dict(selector["labelMatch"])
        except SelectorError:
            return rows
        rows[[i for i, labels in enumerate(nodes.labels) if wanted.matches(labels)]] = True
    return rows


def hypernode_tree(objects: Sequence[Mapping[str, Any]], nodes: NodeTable) -> HyperNodeTree:
    views = {view.name: view for view in (HyperNode(obj) for obj in objects)}
    tree = HyperNodeTree()
    done: dict[str, np.ndarray] = {}

    def resolve(name: str, path: list[str]) -> np.ndarray | None:
        if name in done:
            return done[name]
        if name in path:
            loop = " -> ".join([*path[path.index(name) :], name])
            for looping in path[path.index(name) :]:
                tree.faults.setdefault(looping, f"its members loop ({loop})")
            return None
        view = views[name]
        rows = np.zeros(len(nodes), dtype=bool)
        for member in view.members:
            if member.get("type") == "HyperNode":
                child = str(((member.get("selector") or {}).get("exactMatch") or {}).get("name", ""))
                if child not in views:
                    tree.faults.setdefault(name, f"its member HyperNode {child} does not exist")
                    continue
                below = resolve(child, [*path, name])
                if below is None:
                    tree.faults.setdefault(name, f"its member {child} is in a loop")
                    continue
                rows |= below
            else:
                rows |= _node_rows(member, nodes)
        done[name] = rows
        return rows

    for name, view in views.items():
        rows = resolve(name, [])
        tree.tiers[name] = view.tier
        if view.tier_name:
            tree.tier_names.setdefault(view.tier_name, set()).add(view.tier)
        tree.nodes[name] = rows if rows is not None and name not in tree.faults else np.zeros(len(nodes), dtype=bool)
    return tree
