"""Volcano's scheduler sharding: several scheduler instances share a cluster, each on the nodes of
its NodeShard (`shard.volcano.sh/v1alpha1`, lahar/api/nodeshard.py), chosen by the flags
`--scheduler-sharding-mode` (`none`, `hard`, `soft`) and `--scheduler-sharding-name`.

- *The shard's nodes* (`shard_nodes`): its `spec.nodesDesired` less the nodes another shard still
  has in use (`status.nodesInUse`), so a node moved between shards is taken by its new owner only
  once the old one has let it go.
- *hard*: the scheduler places, preempts, reclaims and backfills only on its shard's nodes; the
  others fail its predicates ("node(s) not in this scheduler's node shard").
- *soft*: every node may be used, but a node of the shard always comes before one outside it,
  whatever the scores (Volcano's candidate gradients: in-shard nodes first, then the others).
- *Status* (`shard_status_patch`): the scheduler writes what it uses into its NodeShard's status,
  `nodesInUse`, and what is still to move, `nodesToAdd` (desired, not in use) and
  `nodesToRemove` (in use, not desired), when that changes.

A shard that does not exist (yet) leaves the scheduler on the nodes it had (none at start), as
Volcano's cache keeps them; the loop logs it. Plain functions of their inputs; the cache calls
them on each NodeShard event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lahar.api.nodeshard import NodeShard

NONE, HARD, SOFT = "none", "hard", "soft"
MODES = (NONE, HARD, SOFT)
DEFAULT_SHARD_NAME = "volcano"  # Volcano's --scheduler-sharding-name default
OUT_OF_SHARD = "node(s) not in this scheduler's node shard"


@dataclass(frozen=True)
class Sharding:
    """How this scheduler instance shards: its mode and its NodeShard's name."""

    mode: str = NONE
    name: str = DEFAULT_SHARD_NAME

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"sharding mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.enabled and not self.name:
            raise ValueError("a sharded scheduler needs its NodeShard's name")

    @property
    def enabled(self) -> bool:
        return self.mode != NONE


NOT_SHARDED = Sharding()


@dataclass(frozen=True)
class ShardScope:
    """What a session needs: the mode and the nodes of the shard."""

    mode: str
    nodes: frozenset[str]


def shard_nodes(shards: Mapping[str, NodeShard], name: str) -> frozenset[str] | None:
    """The nodes shard `name` may use now: desired, less those another shard has in use. None
    when there is no such shard."""
    own = shards.get(name)
    if own is None:
        return None
    taken: set[str] = set()
    for other, shard in shards.items():
        if other != name:
            taken |= shard.nodes_in_use
    return own.nodes_desired - taken


def _listed(names: Iterable[str]) -> list[str]:
    return sorted(names)


def shard_status_patch(shard: NodeShard, in_use: frozenset[str], now: str) -> dict[str, Any] | None:
    """The status the owning scheduler writes on its NodeShard when it uses `in_use`, or None when
    the status already says so (`lastUpdateTime` moves only with a change)."""
    desired = shard.nodes_desired
    to_remove, to_add = in_use - desired, desired - in_use
    if (shard.nodes_in_use, shard.nodes_to_remove, shard.nodes_to_add) == (in_use, to_remove, to_add):
        return None
    return {
        "nodesInUse": _listed(in_use),
        "nodesToRemove": _listed(to_remove),
        "nodesToAdd": _listed(to_add),
        "lastUpdateTime": now,
    }
