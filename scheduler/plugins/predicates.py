"""predicates: which nodes may take a pod (kube-scheduler's filters, vectorised over the node table).

One predicate per pod (the resource fit is the session's own, `Session.predicate`): nodeSelector,
required node affinity (matchExpressions In/NotIn/Exists/DoesNotExist/Gt/Lt, matchFields on
`metadata.name`) and NoSchedule/NoExecute taints; and a second one, only in a session where some
pod asks anything of the pods around it, for required pod affinity and anti-affinity (existing
pods' anti-affinity included), DoNotSchedule topology spread constraints and host ports
(`framework.pod_topology`, which says how they are counted). Unschedulable and not-ready nodes the session
leaves out itself. Labels and taints do not change within a session, so the selector, affinity
and taint part is one boolean mask per placement class, built from per-session indexes
(`NodeIndex`: label values as integer codes per key, rows per taint); only the resource fit is
asked again as nodes fill, and the session asks that whatever the plugins. `explain` words the
failures as kube-scheduler does.

`predicate.NodePortsEnable`, `predicate.PodAffinityEnable` and `predicate.PodTopologySpreadEnable`
(true by default) turn those filters off; a pod that then carries such a constraint is refused by
the session as unsupported. Volcano's switches for filters Lahar does not have (volumes, DRA,
Volcano's predicate cache) are accepted so that Volcano configurations load, and change nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import numpy as np

from lahar.scheduler.framework.node_index import NodeIndex
from lahar.scheduler.framework.plugin import Arguments, Plugin, boolean, register_plugin
from lahar.scheduler.framework.pod_topology import PodTopology
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import (
    HOST_PORTS,
    NODE_AFFINITY,
    NODE_SELECTOR,
    POD_AFFINITY,
    POD_ANTI_AFFINITY,
    TOPOLOGY_SPREAD,
    NodeTable,
    Rows,
    TaskInfo,
)

MISMATCH = "node(s) didn't match Pod's node affinity/selector"
FILTERED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@register_plugin
class PredicatesPlugin(Plugin):
    name = "predicates"
    ARGUMENTS: ClassVar[Arguments] = {
        "predicate.NodeAffinityEnable": boolean,
        "predicate.TaintTolerationEnable": boolean,
        "predicate.NodePortsEnable": boolean,
        "predicate.PodAffinityEnable": boolean,
        "predicate.PodTopologySpreadEnable": boolean,
        # Accepted for Volcano configurations; Lahar has no such filters.
        **{
            f"predicate.{name}Enable": boolean
            for name in (
                "NodeVolumeLimits",
                "VolumeZone",
                "VolumeBinding",
                "DynamicResourceAllocation",
                "Cache",
            )
        },
    }

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.index = NodeIndex.of(session)
        self.affinity = self.argument("predicate.NodeAffinityEnable", True)
        self.taints = self.argument("predicate.TaintTolerationEnable", True)
        self._static: dict[str, np.ndarray | None] = {}
        self._everywhere = np.ones(len(session.nodes), dtype=bool)
        session.add_predicate_fn(self.predicate, self.explain, row=self.predicate_row)
        self.pod_affinity = self.argument("predicate.PodAffinityEnable", True)
        self.spread = self.argument("predicate.PodTopologySpreadEnable", True)
        self.ports = self.argument("predicate.NodePortsEnable", True)
        if self.pod_affinity or self.spread or self.ports:
            self.topology = PodTopology.of(session)
            if self.topology.active:
                session.add_predicate_fn(self.pods_around, self.explain_pods_around)

    def enforces(self) -> frozenset[str]:
        enforced = set()
        if self.argument("predicate.NodeAffinityEnable", True):
            enforced |= {NODE_SELECTOR, NODE_AFFINITY}
        if self.argument("predicate.PodAffinityEnable", True):
            enforced |= {POD_AFFINITY, POD_ANTI_AFFINITY}
        if self.argument("predicate.PodTopologySpreadEnable", True):
            enforced.add(TOPOLOGY_SPREAD)
        if self.argument("predicate.NodePortsEnable", True):
            enforced.add(HOST_PORTS)
        return frozenset(enforced)

    def pods_around(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        """Pod (anti-)affinity, spread and host ports: asked of the session's pods; on a what-if
        view the pods of its `assumed_free` rows may be evicted (see framework.pod_topology)."""
        mask, _ = self.topology.feasible(task, self.pod_affinity, self.spread, self.ports, nodes.assumed_free)
        return mask[rows]

    def explain_pods_around(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        _, reasons = self.topology.feasible(task, self.pod_affinity, self.spread, self.ports)
        return reasons

    def _required(self, task: TaskInfo) -> np.ndarray | None:
        return self.index.required(task.pod) if self.affinity else None

    def _untolerated(self, task: TaskInfo) -> np.ndarray | None:
        return self.index.untolerated(task.pod, FILTERED_EFFECTS) if self.taints else None

    def _static_mask(self, task: TaskInfo) -> np.ndarray | None:
        """Selector, affinity and taints for the task's placement class; None when all pass."""
        if task.placement not in self._static:
            mask = self._required(task)
            untolerated = self._untolerated(task)
            if untolerated is not None:
                mask = (untolerated == 0) if mask is None else mask & (untolerated == 0)
            self._static[task.placement] = mask
        return self._static[task.placement]

    def predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        # Resource fit is the session's own check (Session.predicate), whatever the plugins.
        static = self._static_mask(task)
        return (self._everywhere if static is None else static)[rows]

    def predicate_row(self, task: TaskInfo, nodes: NodeTable, row: int) -> bool:
        static = self._static_mask(task)
        return static is None or bool(static[row])

    def explain(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        """Each schedulable node that refuses the task, by the first filter that refuses it
        (taints, then affinity/selector, kube-scheduler's order; the session words resources)."""
        reasons: Counter[str] = Counter()
        left = nodes.schedulable.copy()
        untolerated = self._untolerated(task)
        if untolerated is not None:
            for row in np.flatnonzero(left & (untolerated > 0)):
                taint = self.index.first_untolerated(task.pod, int(row), FILTERED_EFFECTS)
                if taint is not None:
                    reasons[f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"] += 1
            left &= untolerated == 0
        required = self._required(task)
        if required is not None:
            reasons[MISMATCH] += int((left & ~required).sum())
            left &= required
        return +reasons
