"""numa-aware: pods that ask for a NUMA policy go where their CPUs and memory can come from as
few NUMA nodes as the policy demands (Volcano's numa-aware plugin, with the topology from Lahar's
agent reports instead of the Numatopology CRD).

A pod opts in with the annotation `lahar.dev/numa-policy` (kubelet Topology Manager's names):
- `single-numa-node`: its CPU and memory requests must both fit in the free part of ONE NUMA node;
- `restricted`: they must fit in the free part of as few NUMA nodes as could hold them at all
  (one, unless the request is larger than any NUMA node);
- `best-effort`: no filter; the score prefers nodes where fewer NUMA nodes would do.
Only Guaranteed pods with a whole number of CPUs get pinned CPUs from the kubelet, so the
annotation is ignored on any other pod.

A NUMA node's free part is what its latest fresh report (`NodeReport.numa`: its CPUs, memory
total and used, CPU usage) shows free: CPUs × 1000 − live usage in millicores, and memory total
− used, less what this session placed there: each pinned placement is assigned to the NUMA nodes
it would use (best fit on one node, else the freest first) through the session's event
handlers, and given back when undone. The reports are live usage, not the kubelet's CPU
assignments, so a pinned pod that idles makes its NUMA node look freer than the kubelet sees it.

A node without a fresh report with NUMA topology is treated as one NUMA node of its
allocatable size: the policies then refuse only requests larger than the node (the kubelet on a
single-NUMA machine does the same), and the score gives it nothing, so known nodes come first.
With no topology anywhere the plugin registers nothing: the fit rule already says as much.
On a what-if view (preempt/reclaim) rows marked `assumed_free` are checked against the NUMA
nodes' sizes, since what the victims would free on each NUMA node is unknown.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from lahar.api.qos import GUARANTEED
from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.session import REPORT_STALENESS_SECONDS, Session
from lahar.scheduler.model import CPU, MEMORY, NodeTable, Rows, TaskInfo, TaskStatus

POLICY_ANNOTATION = "lahar.dev/numa-policy"
SINGLE_NUMA_NODE, RESTRICTED, BEST_EFFORT = "single-numa-node", "restricted", "best-effort"
POLICIES = (SINGLE_NUMA_NODE, RESTRICTED, BEST_EFFORT)
MAX_SCORE = 100.0


def numa_nodes_needed(cpu: np.ndarray, memory: np.ndarray, request_cpu: int, request_memory: int) -> np.ndarray:
    """Per row, the fewest NUMA nodes whose `cpu` and `memory` (rows × NUMA nodes) cover the
    request, taking the largest first; the NUMA node count + 1 where even all of them cannot."""
    needed = np.zeros(len(cpu), dtype=np.int64)
    for amounts, request in ((cpu, request_cpu), (memory, request_memory)):
        largest_first = np.cumsum(-np.sort(-amounts, axis=1), axis=1)
        needed = np.maximum(needed, (largest_first < request).sum(axis=1) + 1)
    return needed


@dataclass
class _Pinned:
    row: int
    cpu: np.ndarray  # per NUMA node, millicores
    memory: np.ndarray  # per NUMA node, bytes


@register_plugin
class NumaAware(Plugin):
    name = "numa-aware"
    ARGUMENTS: ClassVar[Arguments] = {"staleness": number(minimum=0), "weight": number(minimum=0)}

    def on_session_open(self, session: Session) -> None:
        reports = session.fresh_reports(float(self.argument("staleness", REPORT_STALENESS_SECONDS)))
        width = max((len(report.numa) for report in reports if report is not None), default=0) or 1
        n = len(reports)
        # Per node and NUMA node (padding columns stay 0): size and what is free of it.
        self._size_cpu, self._size_memory = np.zeros((n, width), dtype=np.int64), np.zeros((n, width), dtype=np.int64)
        self._free_cpu, self._free_memory = np.zeros((n, width), dtype=np.int64), np.zeros((n, width), dtype=np.int64)
        self._known = np.zeros(n, dtype=bool)
        for row, report in enumerate(reports):
            if report is None or not report.numa:
                continue
            self._known[row] = True
            for column, numa in enumerate(sorted(report.numa, key=lambda numa: numa.id)):
                self._size_cpu[row, column] = len(numa.cpus) * 1000
                self._size_memory[row, column] = numa.memory_total_bytes
                self._free_cpu[row, column] = max(0, len(numa.cpus) * 1000 - round(numa.cpu_usage_cores * 1000))
                self._free_memory[row, column] = max(0, numa.memory_total_bytes - numa.memory_used_bytes)
        columns = session.resources.column
        self._cpu, self._memory = columns[CPU], columns[MEMORY]
        self._rows = session.nodes.index
        self._policies: dict[str, str | None] = {}  # by placement class
        self._pinned: dict[str, _Pinned] = {}  # by task uid
        self._weight = float(self.argument("weight", 1.0))
        if not self._known.any():
            return  # no topology anywhere: every node is one NUMA node, which the fit rule covers
        session.add_predicate_fn(self._predicate, self._explain)
        if self._weight:
            session.add_node_order_fn(self._score)
        session.add_event_handler(self._on_allocate, self._on_deallocate)

    def policy(self, task: TaskInfo) -> str | None:
        """The task's NUMA policy, None when it has none the kubelet would apply."""
        if task.placement not in self._policies:
            policy = task.pod.meta.annotations.get(POLICY_ANNOTATION)
            cpu = int(task.request[self._cpu])
            pinned = task.pod.k8s_qos_class == GUARANTEED and cpu > 0 and cpu % 1000 == 0
            self._policies[task.placement] = policy if policy in POLICIES and pinned else None
        return self._policies[task.placement]

    def _needed(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        """Per row, NUMA nodes the task would need from what is free (the sizes on assumed-free rows)."""
        free_cpu, free_memory = self._free_cpu[rows], self._free_memory[rows]
        if nodes.assumed_free is not None:
            assumed = nodes.assumed_free[rows][:, None]
            free_cpu = np.where(assumed, self._size_cpu[rows], free_cpu)
            free_memory = np.where(assumed, self._size_memory[rows], free_memory)
        return numa_nodes_needed(free_cpu, free_memory, int(task.request[self._cpu]), int(task.request[self._memory]))

    def _predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        policy = self.policy(task)
        known = self._known[rows]
        if policy is None or policy == BEST_EFFORT:
            return np.ones(len(known), dtype=bool)
        needed = self._needed(task, nodes, rows)
        if policy == SINGLE_NUMA_NODE:
            fits_numa = needed == 1
        else:
            cpu, memory = int(task.request[self._cpu]), int(task.request[self._memory])
            fits_numa = needed <= numa_nodes_needed(self._size_cpu[rows], self._size_memory[rows], cpu, memory)
        fits_node = (
            task.request[[self._cpu, self._memory]] <= nodes.allocatable[rows][:, [self._cpu, self._memory]]
        ).all(axis=1)
        return np.where(known, fits_numa, fits_node)

    def _explain(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        refused = int((~self._predicate(task, nodes, slice(None)) & nodes.schedulable).sum())
        return Counter({f"node(s) cannot satisfy NUMA policy {self.policy(task)}": refused} if refused else {})

    def _score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        known = self._known[rows]
        if self.policy(task) is None:
            return np.zeros(len(known))
        needed = self._needed(task, nodes, rows)
        fits = known & (needed <= self._free_cpu.shape[1])
        return np.where(fits, MAX_SCORE * self._weight / np.maximum(needed, 1), 0.0)

    def _on_allocate(self, task: TaskInfo) -> None:
        if task.status not in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED) or task.uid in self._pinned:
            return  # a restored eviction, or already assigned
        row = self._rows[task.node]
        if not self._known[row] or self.policy(task) is None:
            return
        cpu, memory = self._assign(row, int(task.request[self._cpu]), int(task.request[self._memory]))
        self._pinned[task.uid] = _Pinned(row, cpu, memory)
        self._free_cpu[row] -= cpu
        self._free_memory[row] -= memory

    def _on_deallocate(self, task: TaskInfo) -> None:
        if task.status is TaskStatus.PENDING and task.uid in self._pinned:  # a placement undone
            pinned = self._pinned.pop(task.uid)
            self._free_cpu[pinned.row] += pinned.cpu
            self._free_memory[pinned.row] += pinned.memory

    def _assign(self, row: int, cpu: int, memory: int) -> tuple[np.ndarray, np.ndarray]:
        """Which NUMA nodes a placement uses: the fullest one it fits on, else the freest first."""
        free_cpu, free_memory = self._free_cpu[row], self._free_memory[row]
        fitting = np.flatnonzero((free_cpu >= cpu) & (free_memory >= memory))
        cpu_taken, memory_taken = np.zeros_like(free_cpu), np.zeros_like(free_memory)
        if len(fitting):
            best = fitting[np.argmin(free_cpu[fitting])]
            cpu_taken[best], memory_taken[best] = cpu, memory
            return cpu_taken, memory_taken
        for taken, free, request in ((cpu_taken, free_cpu, cpu), (memory_taken, free_memory, memory)):
            for column in np.argsort(-free, kind="stable"):
                taken[column] = min(max(int(free[column]), 0), request)
                request -= int(taken[column])
            taken[np.argmax(free)] += request  # more than is free: the rest overdraws the freest
        return cpu_taken, memory_taken
