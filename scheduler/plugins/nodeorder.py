"""nodeorder: kube-scheduler's node scores, weighted as Volcano's nodeorder plugin weighs them.

- `leastrequested` (weight 1): mean over cpu and memory of (allocatable − requested) / allocatable;
- `mostrequested` (weight 0): mean of requested / allocatable;
- `balancedresource` (weight 1): 1 − the standard deviation of the cpu and memory fractions;
- `nodeaffinity` (weight 2): the summed weights of the preferred node affinity terms a node
  matches, normalised so the best node scores 100;
- `tainttoleration` (weight 3): fewer untolerated PreferNoSchedule taints score higher;
- `podaffinity` (weight 2): preferred pod affinity and anti-affinity, the summed weights of the
  matching pods in each node's domain, normalised between the lowest and highest node;
- `podtopologyspread` (weight 2): ScheduleAnyway spread constraints, fewer matching pods in the
  node's domains score higher (`framework.pod_topology` counts for both).

Each score is 0–100 before its weight; "requested" includes the pod, counted as kube-scheduler
does with 100m cpu / 200Mi memory where it asks for none. The two label/taint scores do not
change within a session, so they are one array per placement class. The `imagelocality` weight
is accepted for Volcano configurations and scores nothing (Lahar does not know nodes' images).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from lahar.scheduler.framework.node_index import NodeIndex
from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.pod_topology import PodTopology
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import TOPOLOGY_SPREAD, NodeTable, Rows, TaskInfo

MAX_SCORE = 100.0
# kube-scheduler's non-zero defaults for a pod that requests no cpu / memory (for scoring only).
DEFAULT_CPU_MILLI = 100
DEFAULT_MEMORY_BYTES = 200 * 1024 * 1024
SCORED = 2  # cpu and memory: the first columns of every resource axis
WEIGHTS = {
    "leastrequested": 1.0,
    "mostrequested": 0.0,
    "balancedresource": 1.0,
    "nodeaffinity": 2.0,
    "tainttoleration": 3.0,
    "podaffinity": 2.0,
    "imagelocality": 1.0,
    "podtopologyspread": 2.0,
}


@register_plugin
class NodeOrderPlugin(Plugin):
    name = "nodeorder"
    ARGUMENTS: ClassVar[Arguments] = {f"{name}.weight": number(minimum=0) for name in WEIGHTS}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        weight = {name: self.argument(f"{name}.weight", default) for name, default in WEIGHTS.items()}
        self.least, self.most = weight["leastrequested"], weight["mostrequested"]
        self.balanced = weight["balancedresource"]
        self.affinity, self.taints = weight["nodeaffinity"], weight["tainttoleration"]
        self._static: dict[str, np.ndarray | None] = {}
        self._pod_requests: dict[str, tuple[np.ndarray, list[int]]] = {}
        # Allocatable does not change within a session (what-if views share it): keep its
        # inverse, so a fraction is one multiplication; a node without cpu or memory counts as full.
        allocatable = session.nodes.allocatable[:, :SCORED].astype(np.float64)
        self._inverse = np.divide(1.0, allocatable, out=np.zeros_like(allocatable), where=allocatable > 0)
        self._absent = allocatable <= 0 if (allocatable <= 0).any() else None
        self._mean_weight = (self.most - self.least) * MAX_SCORE / 2
        self._balance_weight = self.balanced * MAX_SCORE / 2
        self._constant = (self.least + self.balanced) * MAX_SCORE
        if self.least or self.most or self.balanced or self.affinity or self.taints:
            session.add_node_order_fn(self.score, row=self.score_row)
        self.pod_affinity, self.spread = weight["podaffinity"], weight["podtopologyspread"]
        if self.pod_affinity or self.spread:
            self.topology = PodTopology.of(session)
            if self.topology.pending_terms:
                session.add_node_order_fn(self.score_pods_around, applies=lambda task: task.pod_terms)

    def scores(self) -> frozenset[str]:
        scored = set()
        if self.argument("nodeaffinity.weight", WEIGHTS["nodeaffinity"]):
            scored.add("nodeAffinity (preferred)")
        if self.argument("podaffinity.weight", WEIGHTS["podaffinity"]):
            scored |= {"podAffinity (preferred)", "podAntiAffinity (preferred)"}
        if self.argument("podtopologyspread.weight", WEIGHTS["podtopologyspread"]):
            scored.add(f"{TOPOLOGY_SPREAD} (ScheduleAnyway)")
        return frozenset(scored)

    def score_pods_around(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        """Preferred pod (anti-)affinity and ScheduleAnyway spread (0 for pods without them)."""
        total = np.zeros(len(nodes.schedulable[rows]), dtype=np.float64)
        if not task.pod_terms:
            return total
        if self.pod_affinity and (affinity := self.topology.affinity_score(task)) is not None:
            total += self.pod_affinity * affinity[rows]
        if self.spread and (spread := self.topology.spread_score(task)) is not None:
            total += self.spread * spread[rows]
        return total

    def _static_score(self, task: TaskInfo) -> np.ndarray | None:
        """nodeaffinity and tainttoleration for the task's placement class (None when both are 0
        everywhere)."""
        if task.placement in self._static:
            return self._static[task.placement]
        index = NodeIndex.of(self.session)
        total: np.ndarray | None = None
        preferred = (task.pod.affinity.get("nodeAffinity") or {}).get(
            "preferredDuringSchedulingIgnoredDuringExecution"
        ) or ()
        if self.affinity and preferred:
            raw = np.zeros(index.size)
            for term in preferred:
                raw += (term.get("weight") or 0) * index.term(term.get("preference") or {})
            best = raw.max(initial=0.0)
            total = self.affinity * (raw * (MAX_SCORE / best) if best > 0 else raw)
        untolerated = index.untolerated(task.pod, frozenset({"PreferNoSchedule"})) if self.taints else None
        if untolerated is not None:
            worst = untolerated.max()
            score = self.taints * MAX_SCORE * (1.0 - untolerated / worst)
            total = score if total is None else total + score
        self._static[task.placement] = total
        return total

    def _pod_request(self, task: TaskInfo) -> tuple[np.ndarray, list[int]]:
        """The pod's cpu and memory for scoring (kube-scheduler's defaults where it asks for
        none), as an array and as Python ints."""
        pod = self._pod_requests.get(task.placement)
        if pod is None:
            request = task.request
            array = np.array([request[0] or DEFAULT_CPU_MILLI, request[1] or DEFAULT_MEMORY_BYTES], dtype=np.int64)
            pod = self._pod_requests[task.placement] = (array, array.tolist())
        return pod

    def fractions(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        """(requested on the node + the pod's non-zero request) / allocatable for cpu and memory,
        capped at 1, per row."""
        pod, _ = self._pod_request(task)
        fractions = (nodes.used[rows, :SCORED] + nodes.be_used[rows, :SCORED] + pod) * self._inverse[rows]
        if self._absent is not None:
            fractions[self._absent[rows]] = 1.0
        return np.minimum(fractions, 1.0, out=fractions)

    def _combine(self, cpu: Any, memory: Any) -> Any:
        """With fractions a (cpu) and b (memory): least·100·(1 − (a+b)/2) + most·100·(a+b)/2 +
        balanced·100·(1 − |a−b|/2), the std of two values being |a−b|/2. For arrays (one value
        per row) or floats alike: the same operations in the same order, so a row's score
        (`score_row`) is bit for bit the array form's."""
        total = (cpu + memory) * self._mean_weight + self._constant
        if self.balanced:
            total = total - abs(cpu - memory) * self._balance_weight
        return total

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        fractions = self.fractions(task, nodes, rows)
        total: np.ndarray = self._combine(fractions[:, 0], fractions[:, 1])
        static = self._static_score(task)
        return total if static is None else total + static[rows]

    def score_row(self, task: TaskInfo, nodes: NodeTable, row: int) -> float:
        """`score` for one row, in plain Python (cpu and memory written out: this runs once per
        placement)."""
        _, (pod_cpu, pod_memory) = self._pod_request(task)
        used, be_used = nodes.used[row].tolist(), nodes.be_used[row].tolist()
        inverse_cpu, inverse_memory = self._inverse[row].tolist()
        cpu = (used[0] + be_used[0] + pod_cpu) * inverse_cpu
        memory = (used[1] + be_used[1] + pod_memory) * inverse_memory
        if self._absent is not None:
            absent_cpu, absent_memory = self._absent[row].tolist()
            cpu, memory = 1.0 if absent_cpu else cpu, 1.0 if absent_memory else memory
        total: float = self._combine(min(cpu, 1.0), min(memory, 1.0))
        static = self._static_score(task)
        return total if static is None else total + float(static[row])
