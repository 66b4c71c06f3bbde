"""NodeShard (shard.volcano.sh/v1alpha1): what admission accepts and refuses, and how the view reads
what validation would refuse (docs/scheduler.md "Sharding")."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.api import admission
from lahar.api.errors import ValidationError
from lahar.api.kinds import NODESHARD
from lahar.api.nodeshard import NodeShard


def shard(spec: Any, status: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "shard.volcano.sh/v1alpha1",
        "kind": "NodeShard",
        "metadata": {"name": "volcano"},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_a_shard_with_its_status_is_admitted() -> None:
    obj = shard({"nodesDesired": ["n1", "n2"]}, {"nodesInUse": ["n1"], "nodesToAdd": ["n2"], "nodesToRemove": []})
    admission.validate(NODESHARD, admission.apply_defaults(NODESHARD, obj), None)
    view = NodeShard(obj)
    assert (view.nodes_desired, view.nodes_in_use, view.nodes_to_add) == ({"n1", "n2"}, {"n1"}, {"n2"})


@pytest.mark.parametrize(
    ("obj", "field", "message"),
    [
        ({**shard({}), "spec": None}, "spec", "Required"),
        (shard({}), "spec.nodesDesired", "Required"),
        (shard({"nodesDesired": "n1"}), "spec.nodesDesired", "expected an array"),
        (shard({"nodesDesired": ["n1", 2]}), "spec.nodesDesired[1]", "expected a string"),
        (shard({"nodesDesired": ["n1", ""]}), "spec.nodesDesired[1]", "must not be empty"),
        (shard({"nodesDesired": ["n1", "n1"]}), "spec.nodesDesired[1]", "listed twice"),
        (shard({"nodesDesired": []}, {"nodesInUse": [3]}), "status.nodesInUse[0]", "expected a string"),
    ],
)
def test_bad_shards_are_refused_naming_the_field(obj: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        admission.validate(NODESHARD, admission.apply_defaults(NODESHARD, obj), None)
    found = [(e.field, str(e)) for e in caught.value.errors]
    assert any(f == field and message.lower() in text.lower() for f, text in found), found


def test_the_view_reads_no_nodes_from_what_validation_refuses() -> None:
    view = NodeShard(shard({"nodesDesired": "n1"}, {"nodesInUse": [1, "", "n2"]}))
    assert view.nodes_desired == frozenset() and view.nodes_in_use == {"n2"}
