"""Reclaimable capacity in the Node's status, for schedulers that read extended resources
(Koordinator's convention): `status.allocatable` and `status.capacity` carry
`kubernetes.io/batch-cpu` (integer millicores) and `kubernetes.io/batch-memory` (bytes).

Every Node write wakes every watcher of nodes (schedulers, controllers), so the value is written
only when it moved meaningfully: by more than `min_change` of the value the node carries and more
than a floor per resource. The caller keeps what the node carries (this function's answer) and
passes it back, so the steady state costs no request at all."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lahar.agent.qos.eviction import CPU, MEMORY
from lahar.api import kinds
from lahar.api.quantity import QuantityError, parse_quantity
from lahar.client.errors import KubeError

if TYPE_CHECKING:
    from lahar.client.api import KubeApi

log = logging.getLogger("lahar.agent.allocatable")

BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
NODE_RESOURCES = {CPU: BATCH_CPU, MEMORY: BATCH_MEMORY}
MIN_CHANGE = 0.10  # Koordinator's resourceDiffThreshold
# Changes below these never matter to placement (a tenth of a core, a small pod's memory).
CHANGE_FLOORS = {CPU: 100, MEMORY: 64 << 20}


def batch_resources_of(node: Mapping[str, Any]) -> dict[str, int]:
    """The batch resources a Node object's status.allocatable carries, as {"cpu", "memory"}."""
    allocatable = ((node.get("status") or {}).get("allocatable")) or {}
    found = {}
    for resource, name in NODE_RESOURCES.items():
        if name in allocatable:
            try:
                found[resource] = parse_quantity(allocatable[name]).value()
            except QuantityError:
                continue  # a value someone else wrote badly: ours replaces it
    return found


def changed_meaningfully(carried: Mapping[str, int], wanted: Mapping[str, int], min_change: float = MIN_CHANGE) -> bool:
    """True when a resource is missing from the node or moved by more than both `min_change` of
    its carried value and its floor."""
    for resource, value in wanted.items():
        if resource not in carried:
            return True
        old = carried[resource]
        if abs(value - old) > max(min_change * old, CHANGE_FLOORS.get(resource, 0)):
            return True
    return False


def batch_status_patch(reclaimable: Mapping[str, int]) -> dict[str, Any]:
    quantities = {
        NODE_RESOURCES[resource]: str(max(0, int(value)))
        for resource, value in reclaimable.items()
        if resource in NODE_RESOURCES
    }
    return {"status": {"capacity": quantities, "allocatable": quantities}}


def patch_batch_allocatable(
    api: KubeApi,
    node: str,
    reclaimable: Mapping[str, int],
    carried: Mapping[str, int] | None = None,
    min_change: float = MIN_CHANGE,
) -> dict[str, int]:
    """Write the reclaimable capacity into the Node's status (the status subresource, a merge
    patch) when it moved meaningfully from what the node carries; answer what the node carries
    afterwards. `carried` None (the first call, or a periodic resync) reads the Node first, so a
    restarted agent does not rewrite an unchanged value. API failures are logged and answered
    with the old value, so the next call tries again."""
    wanted = {resource: max(0, int(value)) for resource, value in reclaimable.items() if resource in NODE_RESOURCES}
    try:
        if carried is None:
            carried = batch_resources_of(api.get(kinds.NODE, node))
        if not changed_meaningfully(carried, wanted, min_change):
            return dict(carried)
        api.patch(kinds.NODE, node, batch_status_patch(wanted), subresource="status")
    except KubeError as exc:
        log.warning("batch resources of node %s not written: %s", node, exc)
        return dict(carried or {})
    log.info("node %s batch resources: cpu %dm, memory %d bytes", node, wanted.get(CPU, 0), wanted.get(MEMORY, 0))
    return wanted
