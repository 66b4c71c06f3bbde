"""network-topology-aware: keep a job within the network tiers its PodGroup asks for, over Volcano's
HyperNodes (`topology.volcano.sh/v1alpha1`, `framework.hypernodes`) (Volcano's plugin of the name,
and the PodGroup's `spec.networkTopology`).

A PodGroup says `networkTopology: {mode: hard|soft, highestTierAllowed: N}` (N defaults to 1).

- hard: all of the job's tasks go under one HyperNode of tier at most N. Allocate tries the
  candidate HyperNodes in turn (`Session.add_job_domains_fn`): lowest tier first, then the one
  with the fewest nodes, a job already holding nodes only in those that contain them; the first
  where the gang becomes ready keeps it (a job ready already: the first where more of it is
  placed). With no HyperNode that qualifies the job waits, its message saying so. Nodes under no
  HyperNode never take such a job.
- soft: a preference: each node scores `100 × (T − t + 1) / T` where t is the lowest tier of a
  HyperNode holding both the node and one of the job's placed tasks and T the highest tier in the
  cluster (0 where it shares none), × `weight`; the job's first task goes where the plugin's other
  scores say.

Scores and feasibility are per job, declared to the session (`add_class_key_fn`); soft jobs'
classes are volatile (each placement moves every node's score). A HyperNode whose members loop or
name a HyperNode that does not exist is reported once per session (an `InvalidHyperNode` Warning
event) and holds no nodes; everything else is scheduled.

Preempt and reclaim use the same domains: a hard job makes its room within one HyperNode at a
time (victims and pipelined tasks alike, `actions.preempt.in_one_domain`), so a gang is never
pipelined across HyperNodes nor evicts where it could not run.

Not implemented: Volcano's hypernode-binpack scoring weights, the `enabledHyperNodeOrder` /
`HyperNodeGradient` callbacks.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

import numpy as np

from lahar.scheduler.framework.hypernodes import HyperNodeTree, hypernode_tree
from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import CHARGED, JobInfo, NodeTable, Rows, TaskInfo, TaskStatus

MAX_SCORE = 100.0
HARD, SOFT = "hard", "soft"


def network_topology(job: JobInfo) -> tuple[str, int] | None:
    """The job's (mode, highestTierAllowed), None when its PodGroup asks for none."""
    if job.podgroup is None:
        return None
    spec: Any = job.podgroup.raw.get("spec") or {}
    wanted = spec.get("networkTopology")
    if not isinstance(wanted, dict):
        return None
    mode = wanted.get("mode", HARD)
    tier = wanted.get("highestTierAllowed", 1)
    if mode not in (HARD, SOFT) or not isinstance(tier, int) or isinstance(tier, bool):
        return None
    return str(mode), tier


@register_plugin
class NetworkTopologyAwarePlugin(Plugin):
    name = "network-topology-aware"
    ARGUMENTS: ClassVar[Arguments] = {"weight": number(minimum=0)}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.weight = self.argument("weight", 1.0)
        self.wants: dict[str, tuple[str, int]] = {}
        for job in session.jobs.values():
            wanted = network_topology(job)
            if wanted is not None and job.by_status.get(TaskStatus.PENDING):
                self.wants[job.key] = wanted
        if not self.wants:
            return  # nothing asks: no tree, no callback
        self.tree: HyperNodeTree = hypernode_tree(session.snapshot.hypernodes, session.nodes)
        for name, why in self.tree.faults.items():
            session.record_event("HyperNode", "", name, "Warning", "InvalidHyperNode", f"HyperNode {name}: {why}")
        self.top = max(self.tree.tiers.values(), default=1) or 1
        self.current: dict[str, str] = {}  # hard job -> the HyperNode allocate is trying
        self._union: dict[str, np.ndarray] = {}
        self._placed: dict[str, np.ndarray] = {}
        session.add_job_domains_fn(self.domains, self.enter)
        session.add_predicate_fn(self.predicate)
        if self.weight:
            session.add_node_order_fn(self.score)
        session.add_class_key_fn(self.class_key, self.volatile)
        session.add_event_handler(self._moved_in, self._moved_out)

    # -- per job --------------------------------------------------------------------------------

    def class_key(self, task: TaskInfo) -> Hashable:
        if task.job not in self.wants:
            return None
        return (task.job, self.current.get(task.job))

    def volatile(self, task: TaskInfo) -> bool:
        wanted = self.wants.get(task.job)
        return wanted is not None and wanted[0] == SOFT

    def placed(self, job: JobInfo) -> np.ndarray:
        """The node rows holding the job's tasks (kept current by the event handlers)."""
        rows = self._placed.get(job.key)
        if rows is None:
            rows = np.zeros(len(self.session.nodes), dtype=np.int64)
            index = self.session.nodes.index
            for task in job.tasks.values():
                if task.status in CHARGED and task.node in index:
                    rows[index[task.node]] += 1
            self._placed[job.key] = rows
        return rows

    def _moved(self, task: TaskInfo, sign: int) -> None:
        rows = self._placed.get(task.job)
        row = self.session.row_of(task)
        if rows is not None and row is not None:
            rows[row] += sign

    def _moved_in(self, task: TaskInfo) -> None:
        self._moved(task, 1)

    def _moved_out(self, task: TaskInfo) -> None:
        self._moved(task, -1)

    # -- hard: domains --------------------------------------------------------------------------

    def domains(self, job: JobInfo) -> list[Hashable] | None:
        wanted = self.wants.get(job.key)
        if wanted is None or wanted[0] != HARD:
            return None
        holding = self.placed(job) > 0
        found: list[Hashable] = [
            name for name in self.tree.within(wanted[1]) if not (holding & ~self.tree.nodes[name]).any()
        ]
        if not found:
            job.unschedulable_message = f"no HyperNode of tier at most {wanted[1]} can hold the job" + (
                " with the nodes it already runs on" if holding.any() else ""
            )
        return found

    def enter(self, job: JobInfo, domain: Hashable) -> None:
        if domain is None:
            self.current.pop(job.key, None)
        else:
            self.current[job.key] = str(domain)

    def _allowed(self, job_key: str) -> np.ndarray | None:
        wanted = self.wants.get(job_key)
        if wanted is None or wanted[0] != HARD:
            return None
        chosen = self.current.get(job_key)
        if chosen is not None:
            return self.tree.nodes[chosen]
        union = self._union.get(job_key)
        if union is None:
            union = np.zeros(len(self.session.nodes), dtype=bool)
            for name in self.tree.within(wanted[1]):
                union |= self.tree.nodes[name]
            self._union[job_key] = union
        return union

    def predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        allowed = self._allowed(task.job)
        if allowed is None:
            return np.ones(len(nodes.schedulable[rows]), dtype=bool)
        return allowed[rows]

    # -- soft: score ----------------------------------------------------------------------------

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        wanted = self.wants.get(task.job)
        size = len(nodes.schedulable[rows])
        if wanted is None or wanted[0] != SOFT:
            return np.zeros(size, dtype=np.float64)
        holding = self.placed(self.session.jobs[task.job]) > 0
        best = np.zeros(len(nodes), dtype=np.float64)
        if holding.any():
            for name, tier in self.tree.tiers.items():
                under = self.tree.nodes[name]
                if (under & holding).any():
                    value = MAX_SCORE * (self.top - tier + 1) / self.top
                    best[under] = np.maximum(best[under], value)
        return self.weight * best[rows]
