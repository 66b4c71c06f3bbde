"""numa-aware: pods that ask for a NUMA policy go where their CPUs and memory can come from as
few NUMA nodes as the policy demands (Volcano's numa-aware plugin). A node's NUMA layout comes from
its Lahar agent's reports or, where those show none, from Volcano's Numatopology object
(`nodeinfo.volcano.sh/v1alpha1`, written by Volcano's resource-exporter): a Volcano cluster running
the exporter keeps working unchanged. A node with both is read from the agent's report.

A pod opts in with the annotation `lahar.dev/numa-policy` or Volcano's
`volcano.sh/numa-topology-policy` (kubelet Topology Manager's names; Lahar's wins if both):
- `single-numa-node`: its CPU and memory requests must both fit in the free part of ONE NUMA node;
- `restricted`: they must fit in the free part of as few NUMA nodes as could hold them at all
  (one, unless the request is larger than any NUMA node);
- `best-effort`: no filter; the score prefers nodes where fewer NUMA nodes would do;
- `none` (or no annotation): no request of its own.
Only Guaranteed pods with a whole number of CPUs get pinned CPUs from the kubelet, so the
annotation is ignored on any other pod. Any other value is refused on every node, naming it.

Nodes with an agent report: a NUMA node's free part is what its latest fresh report
(`NodeReport.numa`: its CPUs, memory total and used, CPU usage) shows free: CPUs × 1000 − live usage
in millicores, and memory total − used, less what this session placed there: each pinned placement
is assigned to the NUMA nodes it would use (best fit on one node, else the freest first) through
the session's event handlers, and given back when undone. The reports are live usage, not the
kubelet's CPU assignments, so a pinned pod that idles makes its NUMA node look freer than the
kubelet sees it. The report carries no kubelet policy: the pod's annotation is the policy.

Nodes with a Numatopology (Volcano's rules, scheduler/framework/numa.py): the kubelet's policies
are the node's. A pod with a policy fits only a node whose CPU Manager policy is `static` and
whose Topology Manager policy is the pod's; a Guaranteed pod without one is still checked against
the node's policy (the kubelet enforces it on every pod). Container by container, the CPU
Manager's hints over the CPUs free to pin (`numares.cpu.allocatable` less the kubelet's reserved
CPUs and what this session and earlier bindings hold) are merged under the node's policy, and
the CPUs the kubelet would pin are taken. A pod bound to the node but not yet in the object's
`podAllocations` holds the CPUs it would be given (Volcano keeps them across sessions; Lahar
derives them again each session from the same inputs). A malformed Numatopology (bad CPU list,
unknown policy name) is reported once per session (an `InvalidNumatopology` Warning event naming
the fields); pods that would be pinned there are not placed on that node, all others are.

A node with neither is treated as one NUMA node of its allocatable size: the policies then
refuse only requests larger than the node (the kubelet on a single-NUMA machine does the same),
and the score gives it nothing, so known nodes come first. With no topology anywhere the plugin
registers nothing: the fit rule already says as much. On a what-if view (preempt/reclaim) rows
marked `assumed_free` are checked against the NUMA nodes' sizes (a Numatopology's CPUs less the
reserved), since what the victims would free on each NUMA node is unknown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from lahar.api.errors import ValidationError
from lahar.api.numatopology import (
    BEST_EFFORT,
    NONE,
    RESTRICTED,
    SINGLE_NUMA_NODE,
    TOPOLOGY_POLICIES,
    NodeNumaInfo,
    numa_info,
)
from lahar.api.qos import GUARANTEED
from lahar.api.quantity import QuantityError, parse_quantity
from lahar.scheduler.framework.numa import admit, allocate_cpus, cpu_hints, numa_nodes_of, reserved_cpus, whole_cpus
from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.session import REPORT_STALENESS_SECONDS, Session
from lahar.scheduler.model import CPU, MEMORY, NodeTable, Rows, TaskInfo, TaskStatus

POLICY_ANNOTATION = "lahar.dev/numa-policy"
VOLCANO_POLICY_ANNOTATION = "volcano.sh/numa-topology-policy"  # Volcano's job controller writes it
POLICIES = (SINGLE_NUMA_NODE, RESTRICTED, BEST_EFFORT)
MAX_SCORE = 100.0
STATIC = "static"  # the CPU Manager policy that pins CPUs


def numa_nodes_needed(cpu: np.ndarray, memory: np.ndarray, request_cpu: int, request_memory: int) -> np.ndarray:
    """Per row, the fewest NUMA nodes whose `cpu` and `memory` (rows × NUMA nodes) cover the
    request, taking the largest first; the NUMA node count + 1 where even all of them cannot."""
    needed = np.zeros(len(cpu), dtype=np.int64)
    for amounts, request in ((cpu, request_cpu), (memory, request_memory)):
        largest_first = np.cumsum(-np.sort(-amounts, axis=1), axis=1)
        needed = np.maximum(needed, (largest_first < request).sum(axis=1) + 1)
    return needed


def requested_policy(annotations: Mapping[str, str]) -> str:
    """The NUMA policy a pod's annotations ask for, "" for none."""
    value = annotations.get(POLICY_ANNOTATION) or annotations.get(VOLCANO_POLICY_ANNOTATION) or ""
    return "" if value == NONE else value


def container_cpus(task: TaskInfo) -> tuple[tuple[str, int], ...]:
    """Each container's CPU request in millicores (the CPU Manager pins per container); a
    malformed quantity counts as none (the API server refuses such pods)."""
    result = []
    for container in task.pod.spec.get("containers") or ():
        requested = ((container.get("resources") or {}).get("requests") or {}).get("cpu")
        try:
            millis = parse_quantity(requested).milli_value() if requested is not None else 0
        except QuantityError:
            millis = 0
        result.append((str(container.get("name") or ""), millis))
    return tuple(result)


@dataclass
class _Pinned:
    row: int
    cpu: np.ndarray  # per NUMA node, millicores
    memory: np.ndarray  # per NUMA node, bytes


@dataclass
class _Numatopology:
    """A node's Numatopology, read, and its CPUs free to pin in this session."""

    info: NodeNumaInfo
    numa_nodes: list[int]
    pinnable: frozenset[int]  # every CPU less the kubelet's reserved ones (a what-if's answer)
    free: set[int]


@dataclass(frozen=True)
class _Held:
    row: int
    pod: str  # namespace/name
    cpus: frozenset[int]


@dataclass(frozen=True)
class _Decision:
    fits: bool
    cpus: frozenset[int] = frozenset()  # the CPUs the kubelet would pin
    numa_nodes: int = 0  # how many NUMA nodes they span
    reason: str = ""


_PASS = _Decision(True)


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
        self._rows, self._names = session.nodes.index, session.nodes.names
        self._row_ids = np.arange(n)
        self._policies: dict[str, str | None] = {}  # by placement class
        self._pinned: dict[str, _Pinned] = {}  # by task uid, on nodes with reports
        self._held: dict[str, _Held] = {}  # by task uid, on nodes with a Numatopology
        self._weight = float(self.argument("weight", 1.0))
        self._topologies: dict[int, _Numatopology | str] = {}  # by row: read, or why it cannot be
        self._read_numatopologies(session)
        self._is_crd = np.zeros(n, dtype=bool)
        self._is_crd[list(self._topologies)] = True
        if not self._known.any() and not self._topologies:
            return  # no topology anywhere: every node is one NUMA node, which the fit rule covers
        session.add_predicate_fn(self._predicate, self._explain)
        if self._weight:
            session.add_node_order_fn(self._score)
        session.add_event_handler(self._on_allocate, self._on_deallocate)
        if self._topologies:  # the CPU Manager pins per container: two splits of one total differ
            session.add_class_key_fn(container_cpus)

    # -- Numatopology objects ---------------------------------------------------------------------

    def _read_numatopologies(self, session: Session) -> None:
        """Each node's Numatopology, where its agent reports no NUMA topology; then the CPUs that
        pods bound there but not yet pinned by the kubelet would take (Volcano's unassigned pods)."""
        for obj in session.snapshot.numatopologies:
            metadata = obj.get("metadata")
            name = str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""
            row = self._rows.get(name)
            if row is None or self._known[row]:
                continue  # no such node, or its agent's report wins
            try:
                info = numa_info(obj)
            except ValidationError as error:
                why = f"Numatopology {name} is invalid ({error}): pods pinned by its kubelet are not placed there"
                session.record_event("Numatopology", "", name, "Warning", "InvalidNumatopology", why)
                self._topologies[row] = "node(s) with an invalid Numatopology"
                continue
            pinnable = frozenset(info.cpus) - reserved_cpus(info.cpus, info.reserved_cpus)
            numa_nodes = sorted({cpu.numa for cpu in info.cpus.values()})
            self._topologies[row] = _Numatopology(info, numa_nodes, pinnable, set(info.allocatable & pinnable))
        for row, topology in self._topologies.items():
            if isinstance(topology, str):
                continue
            for task in sorted(session.nodes.tasks[row].values(), key=lambda task: task.uid):
                if not topology.info.has_pinned(task.uid, task.namespace, task.name):
                    self._hold(task, row, topology)

    def held(self) -> dict[str, frozenset[int]]:
        """The CPUs held on nodes with a Numatopology, by "node/namespace/pod": pods bound there
        that the kubelet has not reported pinned yet, and this session's placements."""
        return {f"{self._names[held.row]}/{held.pod}": held.cpus for held in self._held.values()}

    def _hold(self, task: TaskInfo, row: int, topology: _Numatopology) -> None:
        decision = self._decide(task, topology, topology.free)
        if decision.fits and decision.cpus:
            self._held[task.uid] = _Held(row, f"{task.namespace}/{task.name}", decision.cpus)
            topology.free -= decision.cpus

    def _decide(self, task: TaskInfo, topology: _Numatopology | str, free: Collection[int]) -> _Decision:
        """Whether the node's kubelet would admit the task, and the CPUs it would pin (Volcano's
        numa-aware predicate: filterNodeByPolicy, then the node's policy container by container)."""
        if task.pod.k8s_qos_class != GUARANTEED:
            return _PASS
        wanted = requested_policy(task.pod.meta.annotations)
        if isinstance(topology, str):
            return _Decision(False, reason=topology) if wanted else _PASS
        info = topology.info
        node_policy = info.topology_policy or NONE
        if wanted:
            if info.cpu_manager_policy != STATIC:
                return _Decision(False, reason="node(s) whose CPU Manager policy is not static")
            if node_policy != wanted:
                return _Decision(False, reason=f"node(s) whose Topology Manager policy is not {wanted}")
            if not free:
                return _Decision(False, reason="node(s) with no CPUs free to pin")
        elif info.cpu_manager_policy != STATIC or node_policy == NONE:
            return _PASS
        remaining = set(free)
        for container, millis in container_cpus(task):
            request = whole_cpus(millis)
            hints = [{"cpu": cpu_hints(info.cpus, remaining, request)}] if request else [{}]
            best, admitted = admit(node_policy, topology.numa_nodes, hints)
            if not admitted:
                return _Decision(
                    False, reason=f"node(s) where container {container!r} cannot be pinned ({node_policy})"
                )
            if request:
                remaining -= allocate_cpus(info.cpus, remaining, request, best)
        cpus = frozenset(free) - remaining
        return _Decision(True, cpus, numa_nodes_of(info.cpus, cpus))

    def _free_on(self, row: int, topology: _Numatopology, nodes: NodeTable) -> Collection[int]:
        assumed = nodes.assumed_free is not None and bool(nodes.assumed_free[row])
        return topology.pinnable if assumed else topology.free

    def _decisions(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> list[tuple[int, _Decision]]:
        """(position in `rows`, decision) for the rows with a Numatopology."""
        ids = self._row_ids[rows]
        result = []
        for position in np.flatnonzero(self._is_crd[ids]):
            row = int(ids[position])
            topology = self._topologies[row]
            free = self._free_on(row, topology, nodes) if isinstance(topology, _Numatopology) else ()
            result.append((int(position), self._decide(task, topology, free)))
        return result

    # -- the session's callbacks ----------------------------------------------------------------

    def policy(self, task: TaskInfo) -> str | None:
        """The task's NUMA policy on nodes with reports, None when it has none the kubelet would
        apply (or one no kubelet has: `_unknown_policy`)."""
        if task.placement not in self._policies:
            policy = requested_policy(task.pod.meta.annotations)
            cpu = int(task.request[self._cpu])
            pinned = task.pod.k8s_qos_class == GUARANTEED and cpu > 0 and cpu % 1000 == 0
            self._policies[task.placement] = policy if policy in POLICIES and pinned else None
        return self._policies[task.placement]

    def _unknown_policy(self, task: TaskInfo) -> str:
        """The task's policy when no kubelet knows it (a Guaranteed pod's), else ""."""
        wanted = requested_policy(task.pod.meta.annotations)
        unknown = wanted and wanted not in TOPOLOGY_POLICIES and task.pod.k8s_qos_class == GUARANTEED
        return wanted if unknown else ""

    def _needed(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        """Per row, NUMA nodes the task would need from what is free (the sizes on assumed-free rows)."""
        free_cpu, free_memory = self._free_cpu[rows], self._free_memory[rows]
        if nodes.assumed_free is not None:
            assumed = nodes.assumed_free[rows][:, None]
            free_cpu = np.where(assumed, self._size_cpu[rows], free_cpu)
            free_memory = np.where(assumed, self._size_memory[rows], free_memory)
        return numa_nodes_needed(free_cpu, free_memory, int(task.request[self._cpu]), int(task.request[self._memory]))

    def _report_predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
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

    def _predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        if self._unknown_policy(task):
            return np.zeros(len(self._row_ids[rows]), dtype=bool)
        result = self._report_predicate(task, nodes, rows)
        for position, decision in self._decisions(task, nodes, rows):
            result[position] = decision.fits
        return result

    def _explain(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        schedulable = nodes.schedulable
        unknown = self._unknown_policy(task)
        if unknown:
            supported = ", ".join(TOPOLOGY_POLICIES)
            return Counter(
                {
                    f"node(s) cannot apply unknown NUMA policy {unknown!r} (supported: {supported})": int(
                        schedulable.sum()
                    )
                }
            )
        reasons: Counter[str] = Counter()
        refused = ~self._report_predicate(task, nodes, slice(None)) & schedulable & ~self._is_crd
        if refused.any():
            reasons[f"node(s) cannot satisfy NUMA policy {self.policy(task)}"] = int(refused.sum())
        for position, decision in self._decisions(task, nodes, slice(None)):
            if not decision.fits and schedulable[position]:
                reasons[decision.reason] += 1
        return reasons

    def _score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        known = self._known[rows]
        if self.policy(task) is None:
            scores = np.zeros(len(known))
        else:
            needed = self._needed(task, nodes, rows)
            fits = known & (needed <= self._free_cpu.shape[1])
            scores = np.where(fits, MAX_SCORE * self._weight / np.maximum(needed, 1), 0.0)
        if requested_policy(task.pod.meta.annotations):  # as Volcano: a score only for a pod with a policy
            for position, decision in self._decisions(task, nodes, rows):
                spanned = decision.numa_nodes
                scores[position] = MAX_SCORE * self._weight / spanned if decision.fits and spanned else 0.0
        return scores

    def _on_allocate(self, task: TaskInfo) -> None:
        if task.status not in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED) or task.uid in self._pinned:
            return  # a restored eviction, or already assigned
        if task.uid in self._held:
            return
        row = self._rows[task.node]
        topology = self._topologies.get(row)
        if isinstance(topology, _Numatopology):
            self._hold(task, row, topology)
            return
        if not self._known[row] or self.policy(task) is None:
            return
        cpu, memory = self._assign(row, int(task.request[self._cpu]), int(task.request[self._memory]))
        self._pinned[task.uid] = _Pinned(row, cpu, memory)
        self._free_cpu[row] -= cpu
        self._free_memory[row] -= memory

    def _on_deallocate(self, task: TaskInfo) -> None:
        if task.status is not TaskStatus.PENDING:
            return  # only a placement undone gives its NUMA share back
        if task.uid in self._pinned:
            pinned = self._pinned.pop(task.uid)
            self._free_cpu[pinned.row] += pinned.cpu
            self._free_memory[pinned.row] += pinned.memory
        elif task.uid in self._held:
            held = self._held.pop(task.uid)
            topology = self._topologies[held.row]
            assert isinstance(topology, _Numatopology)
            topology.free |= held.cpus

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
