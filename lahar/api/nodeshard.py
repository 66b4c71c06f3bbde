"""NodeShard (`shard.volcano.sh/v1alpha1`, cluster-scoped): the nodes one scheduler instance of a
sharded deployment may use, Volcano's scheduler sharding. A view and the validation the API
server runs; the scheduler reads them (`scheduler/framework/shards.py`).

```yaml
apiVersion: shard.volcano.sh/v1alpha1
kind: NodeShard
metadata: {name: volcano}          # the scheduler's --scheduler-sharding-name
spec:
  nodesDesired: [node-1, node-2]   # written by whoever divides the cluster (Volcano's sharding controller)
status:                            # written by the scheduler that owns the shard
  nodesInUse: [node-1]             # what it schedules on: desired less what other shards still use
  nodesToAdd: [node-2]             # desired but still in use by another shard
  nodesToRemove: []                # in use but no longer desired
  lastUpdateTime: "2026-11-27T03:00:00Z"
```
"""

from __future__ import annotations

from typing import Any

from lahar.api.errors import Field, FieldError
from lahar.api.meta import ObjectView

STATUS_LISTS = ("nodesInUse", "nodesToRemove", "nodesToAdd")


def _names(value: Any) -> frozenset[str]:
    """A list of node names as a set; anything else (validation refuses it) is no names."""
    return frozenset(v for v in value if isinstance(v, str) and v) if isinstance(value, list) else frozenset()


class NodeShard(ObjectView):
    """A read-only view over a NodeShard dict."""

    __slots__ = ()

    @property
    def nodes_desired(self) -> frozenset[str]:
        return _names(self.spec.get("nodesDesired"))

    @property
    def nodes_in_use(self) -> frozenset[str]:
        return _names(self.status.get("nodesInUse"))

    @property
    def nodes_to_add(self) -> frozenset[str]:
        return _names(self.status.get("nodesToAdd"))

    @property
    def nodes_to_remove(self) -> frozenset[str]:
        return _names(self.status.get("nodesToRemove"))


def _validate_names(field: Field) -> None:
    names = field.as_str_list()
    if names is None:
        return
    seen: set[str] = set()
    for element, name in zip(field.elements(), names, strict=True):
        if not name:
            element.report("a node name must not be empty")
        elif name in seen:
            element.report(f"node {name!r} is listed twice")
        seen.add(name)


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    spec = root.child("spec")
    if not spec.require_present() or spec.as_mapping() is None:
        return root.errors
    desired = spec.child("nodesDesired")
    if desired.require_present():
        _validate_names(desired)
    status = root.child("status")
    if status.present and status.as_mapping() is not None:
        for name in STATUS_LISTS:
            _validate_names(status.child(name))
        status.child("lastUpdateTime").as_str()
    return root.errors
