"""network-topology-aware: keep a job within the network tiers its PodGroup asks for, over Volcano's
HyperNodes (`topology.volcano.sh/v1alpha1`, `framework.hypernodes`) (Volcano's plugin of the name,
and the PodGroup's `spec.networkTopology`), and pack pods into HyperNodes.

A PodGroup says `networkTopology: {mode: hard|soft, highestTierAllowed: N}` (N defaults to 1), or
names the tier, `highestTierName: <a HyperNode's spec.tierName>` (highestTierAllowed wins when
both are given). A tier name no HyperNode carries, or one carried by HyperNodes of different
tiers, cannot be honoured: a hard job then waits, its message saying so (Volcano drops the
limit).

- hard: all of the job's tasks go under one HyperNode of tier at most N. Allocate tries the
  candidate HyperNodes in turn (`Session.add_job_domains_fn`): lowest tier first; within a tier
  the best HyperNode score first (`enabledHyperNodeOrder`, below), then the one with the fewest
  nodes; a job already holding nodes only in those that contain them. The first where the gang
  becomes ready keeps it (a job ready already: the first where more of it is placed). With no
  HyperNode that qualifies the job waits, its message saying so. Nodes under no HyperNode never
  take such a job. With nothing placed yet, a HyperNode without room for the PodGroup's
  `minResources` (idle, or idle and releasing; for preempt and reclaim: allocatable) is not tried
  (Volcano's gradient pre-filter).
- soft: tried as Volcano tries it (as a hard job whose highest tier is a virtual HyperNode above
  all): each HyperNode in turn as above, then anywhere (nodes under no HyperNode included), so a
  soft gang lands in one HyperNode where one can hold it and is never refused for its topology.
- node score, hard and soft alike (Volcano's): with A the lowest HyperNode holding every node the
  job's placed tasks are on and L a node's lowest HyperNode, the node scores 1 when L is A, else
  `(T − t) / (T − m)` where t is the tier of the lowest HyperNode holding both, m the lowest tier
  and T the tier of a virtual HyperNode above all (the highest tier + 1), so 0 when only that one
  holds both; nothing placed yet: 0. Among the candidate nodes (those the task fits on, within
  the job's HyperNode) of the best score, each gains the share of the job's tasks placed under
  its L (so a job fills one HyperNode before the next).
  × 100 × `weight`.
- HyperNode score (for a hard job's candidates, switch `enabledHyperNodeOrder`): how full the
  HyperNode would be with the job's unplaced tasks, `Σ w_r (used_r + request_r) / allocatable_r
  / Σ w_r` over the weighted resources the tasks ask for (0 if any would overflow); ties at the
  top gain the share of the job's tasks under each; × 100 × `weight`.
- pods whose job asks for no network topology (`hypernode.binpack.normal-pod.enable`, on): each
  node scores the tier-weighted fill of the HyperNodes above it, `Σ_t f^(t−m) s_t / Σ_t f^(t−m)`
  for t from the lowest tier to the virtual top one, f the fading (0.8), s_t the fill above for
  the pod's request at its tier's HyperNode (1 where the node is under none of that tier: such
  nodes are preferred, as Volcano does), × 100 × `weight`.

Weights of the fill: `hypernode.binpack.cpu` (1), `hypernode.binpack.memory` (1),
`hypernode.binpack.resources` (other resources, comma-separated) with
`hypernode.binpack.resources.<name>` (1 each). Scores and feasibility are per job, declared to the
session (`add_class_key_fn`); the classes of the tasks these scores apply to are volatile (each
placement changes what every HyperNode holds), which costs a full re-evaluation per placement
while HyperNodes exist. A HyperNode whose members loop or name a HyperNode that does not exist is
reported once per session (an `InvalidHyperNode` Warning event) and holds no nodes; everything
else is scheduled.

Preempt and reclaim use the same domains: a hard job makes its room within one HyperNode at a
time (victims and pipelined tasks alike, `actions.preempt.in_one_domain`), so a gang is never
pipelined across HyperNodes nor evicts where it could not run.

Sub-jobs (a PodGroup's `subGroupPolicy`, framework/subjobs.py): each sub-job with a
`networkTopology` (the default sub-job carries the job's) is placed within one HyperNode of its
own, chosen as a job's is (`sub_domains`) but among those within the HyperNode its job is being
tried in, so the job's topology bounds all of its sub-jobs; its tasks are scored against where the
sub-job's own tasks are. A sub-job without a topology goes anywhere within its job's HyperNode.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lahar.scheduler.framework.hypernodes import HyperNodeTree, hypernode_tree
from lahar.scheduler.framework.plugin import Arguments, Plugin, boolean, number, register_plugin, text
from lahar.scheduler.framework.session import Session
from lahar.scheduler.framework.subjobs import SubJob, job_policies
from lahar.scheduler.model import CHARGED, CPU, MEMORY, JobInfo, NodeTable, Rows, TaskInfo, TaskStatus

MAX_SCORE = 100.0
HARD, SOFT = "hard", "soft"
RESOURCE_PREFIX = "hypernode.binpack.resources."
CLUSTER = ""  # a soft job's last domain: every node (Volcano's virtual cluster-top HyperNode)


@dataclass(frozen=True)
class Wanted:
    """A PodGroup's networkTopology: its mode, and its tier limit as given (a number, or the
    name of a tier to be looked up among the HyperNodes)."""

    mode: str
    tier: int | None
    tier_name: str = ""


def parse_topology(wanted: Any) -> Wanted | None:
    """A `networkTopology` as given (a PodGroup's, or a sub-group policy's), None when absent
    or malformed."""
    if not isinstance(wanted, dict):
        return None
    mode = wanted.get("mode", HARD)
    tier = wanted.get("highestTierAllowed")
    name = wanted.get("highestTierName")
    if mode not in (HARD, SOFT) or (tier is not None and (not isinstance(tier, int) or isinstance(tier, bool))):
        return None
    if tier is None and isinstance(name, str) and name:
        return Wanted(str(mode), None, name)
    return Wanted(str(mode), 1 if tier is None else tier)


def network_topology(job: JobInfo) -> Wanted | None:
    """The job's networkTopology, None when its PodGroup asks for none."""
    if job.podgroup is None:
        return None
    spec: Any = job.podgroup.raw.get("spec") or {}
    return parse_topology(spec.get("networkTopology"))


def fill(used: np.ndarray, allocatable: np.ndarray, request: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Volcano's HyperNode binpack score of each row (a HyperNode's used and allocatable): the
    weighted mean of (used + request) / allocatable over the weighted resources the request asks
    for; 0 where any of them would overflow, or where none is weighted."""
    columns = np.flatnonzero((request > 0) & (weights > 0))
    if not len(columns):
        return np.zeros(len(used))
    after = used[:, columns] + request[columns]
    total = allocatable[:, columns].astype(np.float64)
    fractions = np.divide(after, total, out=np.zeros_like(total), where=total > 0)
    score = fractions @ weights[columns] / weights[columns].sum()
    return np.where((after > total).any(axis=1), 0.0, score)


@register_plugin
class NetworkTopologyAwarePlugin(Plugin):
    name = "network-topology-aware"
    ARGUMENTS: ClassVar[Arguments] = {
        "weight": number(minimum=0),
        "hypernode.binpack.cpu": number(minimum=0),
        "hypernode.binpack.memory": number(minimum=0),
        "hypernode.binpack.resources": text,
        "hypernode.binpack.normal-pod.enable": boolean,
        "hypernode.binpack.normal-pod.fading": number(minimum=0),
    }
    ARGUMENT_PREFIXES: ClassVar[Arguments] = {RESOURCE_PREFIX: number(minimum=0)}

    def binpack_weights(self, column: dict[str, int], size: int) -> np.ndarray:
        """The fill's weight per resource column (0: not counted)."""
        weights = np.zeros(size)
        weights[column[CPU]] = self.argument("hypernode.binpack.cpu", 1.0)
        weights[column[MEMORY]] = self.argument("hypernode.binpack.memory", 1.0)
        for name in (part.strip() for part in self.argument("hypernode.binpack.resources", "").split(",")):
            if name and name in column:  # a resource no node or pod has scores nothing
                weights[column[name]] = self.argument(RESOURCE_PREFIX + name, 1.0)
        return weights

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.weight = self.argument("weight", 1.0)
        self.fading = self.argument("hypernode.binpack.normal-pod.fading", 0.8)
        packs_normal = bool(self.argument("hypernode.binpack.normal-pod.enable", True)) and self.weight > 0
        self.packs_normal = False  # until the layout shows HyperNodes to pack into
        self.wants: dict[str, Wanted] = {}
        # Jobs with sub-jobs (subGroupPolicy) and pending tasks, and each sub-job's topology.
        self.partitioned: set[str] = set()
        self.sub_wants: dict[tuple[str, str], Wanted] = {}
        for job in session.jobs.values():
            if not job.by_status.get(TaskStatus.PENDING):
                continue
            wanted = network_topology(job)
            if wanted is not None:
                self.wants[job.key] = wanted
            parts = session.sub_jobs(job) if job_policies(job) else None
            if parts is not None:
                self.partitioned.add(job.key)
                for sub_job in parts.sub_jobs.values():
                    sub_wanted = parse_topology(sub_job.topology)
                    if sub_wanted is not None:
                        self.sub_wants[(job.key, sub_job.key)] = sub_wanted
        if not self.wants and not self.sub_wants and not (packs_normal and session.snapshot.hypernodes):
            return  # nothing asks: no tree, no callback
        self.tree: HyperNodeTree = hypernode_tree(session.snapshot.hypernodes, session.nodes)
        for name, why in self.tree.faults.items():
            session.record_event("HyperNode", "", name, "Warning", "InvalidHyperNode", f"HyperNode {name}: {why}")
        self.current: dict[str, str] = {}  # hard job -> the HyperNode allocate is trying
        self.sub_current: dict[tuple[str, str], str] = {}  # (job, sub-job) -> the HyperNode tried
        self._union: dict[str, np.ndarray] = {}
        self._placed: dict[str, np.ndarray] = {}
        self._open_layout(session)
        self.packs_normal = packs_normal and bool(self.names)
        session.add_job_domains_fn(self.domains, self.enter)
        if self.sub_wants:
            session.add_sub_job_domains_fn(self.sub_domains, self.enter_sub)
        session.add_predicate_fn(self.predicate)
        if self.weight:
            session.add_node_order_fn(self.score, applies=self.scores_task)
            session.add_hypernode_order_fn(self.hypernode_scores)
        session.add_class_key_fn(self.class_key, self.volatile)
        session.add_event_handler(self._moved_in, self._moved_out)

    def _open_layout(self, session: Session) -> None:
        """Every HyperNode that holds nodes and a virtual one above all (Volcano's cluster top,
        tier = the highest + 1), with what each holds: the rows of `member`, `allocatable` and
        `used` (kept current by the event handlers)."""
        nodes = session.nodes
        names = sorted(name for name, rows in self.tree.nodes.items() if rows.any())
        self.names = names
        self.position = {name: i for i, name in enumerate(names)}
        tiers = [self.tree.tiers[name] for name in names]
        self.min_tier = min(tiers, default=1)
        self.top_tier = max(tiers, default=0) + 1
        member = np.zeros((len(names) + 1, len(nodes)), dtype=bool)
        for i, name in enumerate(names):
            member[i] = self.tree.nodes[name]
        member[-1] = True  # the virtual top
        self.member = member
        self.hn_tier = np.array([*tiers, self.top_tier])
        weights = member.astype(np.float64)
        self.allocatable = weights @ nodes.allocatable
        self.used = weights @ (nodes.used + nodes.be_used)
        # Each node's lowest HyperNode (index into names; -1: none), and per tier the HyperNode
        # of that tier above it (the first by name where several hold it).
        self.lowest = np.full(len(nodes), -1, dtype=np.int64)
        best = np.full(len(nodes), np.iinfo(np.int64).max)
        self.above: dict[int, np.ndarray] = {}
        for i in reversed(range(len(names))):  # reversed: the first by name wins ties
            rows = member[i]
            lower = rows & (tiers[i] <= best)
            self.lowest[lower] = i
            best[lower] = tiers[i]
            self.above.setdefault(tiers[i], np.full(len(nodes), -1, dtype=np.int64))[rows] = i
        self.above[self.top_tier] = np.full(len(nodes), len(names), dtype=np.int64)
        self.binpack = self.binpack_weights(session.resources.column, len(session.resources))

    def scores_task(self, task: TaskInfo) -> bool:
        return task.job in self.wants or task.job in self.partitioned or self.packs_normal

    # -- per job --------------------------------------------------------------------------------

    def class_key(self, task: TaskInfo) -> Hashable:
        if task.job in self.partitioned:
            sub_job = self._sub_job_of(task).key
            return (task.job, self.current.get(task.job), sub_job, self.sub_current.get((task.job, sub_job)))
        if task.job not in self.wants:
            return None
        return (task.job, self.current.get(task.job))

    def volatile(self, task: TaskInfo) -> bool:
        # Node scores follow what every HyperNode holds (or, for a job asking for topology, where
        # its tasks are): one placement changes them on nodes other than its own.
        return self.weight > 0 and (task.job in self.wants or task.job in self.partitioned or self.packs_normal)

    def _sub_job_of(self, task: TaskInfo) -> SubJob:
        parts = self.session.sub_jobs(self.session.jobs[task.job])
        assert parts is not None  # only asked for the tasks of partitioned jobs
        return parts.of(task)

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
        row = self.session.row_of(task)
        if row is None:
            return
        self.used[self.member[:, row]] += sign * task.request
        rows = self._placed.get(task.job)
        if rows is not None:
            rows[row] += sign

    def _moved_in(self, task: TaskInfo) -> None:
        self._moved(task, 1)

    def _moved_out(self, task: TaskInfo) -> None:
        self._moved(task, -1)

    # -- hard: domains --------------------------------------------------------------------------

    def highest_tier(self, job: JobInfo, wanted: Wanted) -> int | None:
        """The job's tier limit; a tier name that names no tier, or several: None, and the job's
        message says why."""
        if wanted.tier is not None:
            return wanted.tier
        tiers = self.tree.tier_names.get(wanted.tier_name, set())
        if len(tiers) == 1:
            return next(iter(tiers))
        job.unschedulable_message = (
            f"no HyperNode has tierName {wanted.tier_name}"
            if not tiers
            else f"tierName {wanted.tier_name} names HyperNodes of tiers {', '.join(map(str, sorted(tiers)))}"
        )
        return None

    def domains(self, job: JobInfo, evicting: bool = False) -> list[Hashable] | None:
        wanted = self.wants.get(job.key)
        if wanted is None:
            return None
        if wanted.mode == SOFT:
            return self.soft_domains(job, evicting)
        tier = self.highest_tier(job, wanted)
        if tier is None:
            return []
        holding = self.placed(job) > 0
        found: list[str] = [name for name in self.tree.within(tier) if not (holding & ~self.tree.nodes[name]).any()]
        if not holding.any():
            found = self.with_room(job, found, evicting)
        if not found:
            why = "can hold the job" + (" with the nodes it already runs on" if holding.any() else "")
            if not holding.any() and self.tree.within(tier):
                why = "has room for the job's minimum resources"
            job.unschedulable_message = f"no HyperNode of tier at most {tier} {why}"
            return []
        scores = self.session.hypernode_order(job, found)
        # Lowest tier first (Volcano's gradients); within a tier the best score, then the tightest.
        found.sort(key=lambda name: (self.tree.tiers[name], -scores[name], int(self.tree.nodes[name].sum())))
        return list(found)

    def soft_domains(self, job: JobInfo, evicting: bool) -> list[Hashable]:
        """A soft job is tried as Volcano tries it (a hard job whose highest tier is the virtual
        top one): in each HyperNode, lowest tier first, then anywhere (`CLUSTER`)."""
        holding = self.placed(job) > 0
        found = [name for name in self.tree.within(self.top_tier) if not (holding & ~self.tree.nodes[name]).any()]
        if not holding.any():
            found = self.with_room(job, found, evicting)
        scores = self.session.hypernode_order(job, found)
        found.sort(key=lambda name: (self.tree.tiers[name], -scores[name], int(self.tree.nodes[name].sum())))
        return [*found, CLUSTER]

    def with_room(self, job: JobInfo, names: list[str], evicting: bool) -> list[str]:
        """Volcano's gradient pre-filter, for a job with nothing placed yet: the HyperNodes whose
        idle resources, or idle and releasing together, hold the PodGroup's minResources (for
        preempt and reclaim, which free room: whose allocatable does)."""
        return self._with_room(job.min_resources, names, evicting)

    def _with_room(self, need: np.ndarray, names: list[str], evicting: bool = False) -> list[str]:
        if not need.any() or not names:
            return names
        index = np.array([self.position[name] for name in names], dtype=np.int64)
        room = self.allocatable[index]
        if not evicting:
            nodes = self.session.nodes
            releasing = self.member[index].astype(np.float64) @ (nodes.releasing + nodes.be_releasing)
            room = room - self.used[index] + releasing  # idle + releasing: never below idle
        fits = np.asarray((need <= room).all(axis=1))
        return [names[i] for i in np.flatnonzero(fits)]

    def enter(self, job: JobInfo, domain: Hashable) -> None:
        if domain is None:
            self.current.pop(job.key, None)
        else:
            self.current[job.key] = str(domain)

    # -- sub-jobs: domains within the job's ----------------------------------------------------

    def sub_domains(
        self, job: JobInfo, sub_job: SubJob, job_domain: Hashable, evicting: bool = False
    ) -> list[Hashable] | None:
        """The HyperNodes a sub-job with a topology may be placed in, best first, all within the
        job's HyperNode (`job_domain`; None or CLUSTER: anywhere), as for a job (`domains`): a
        hard sub-job in one of tier at most its highestTierAllowed, lowest tier first; a soft one
        in each in turn, then anywhere in the job's. Ones already holding some of the sub-job's
        tasks must hold them all; with none placed, one without room for the sub-job's pending
        tasks is not tried (Volcano's pre-filter for a sub-job; `evicting`, for preempt and
        reclaim: room by allocatable, as for a job)."""
        wanted = self.sub_wants.get((job.key, sub_job.key))
        if wanted is None:
            return None
        limit = self.top_tier if wanted.mode == SOFT else self.highest_tier(job, wanted)
        if limit is None:
            return []
        tier: int = limit
        bound = self.tree.nodes.get(str(job_domain)) if job_domain else None
        placed_rows = self.sub_placed(job, sub_job)
        holding = placed_rows > 0
        found = [
            name
            for name in self.tree.within(tier)
            if not (holding & ~self.tree.nodes[name]).any()
            and (bound is None or not (self.tree.nodes[name] & ~bound).any())
        ]
        need = sum((task.request for task in sub_job.pending(job)), np.zeros(len(self.binpack), dtype=np.int64))
        if not holding.any():
            found = self._with_room(need, found, evicting)
        scores = dict.fromkeys(found, 0.0)
        if self.weight and self.session.has("hypernode_order") and found:
            scores = self._fill_scores(need, placed_rows, len(sub_job.uids), found)
        found.sort(key=lambda name: (self.tree.tiers[name], -scores[name], int(self.tree.nodes[name].sum())))
        result: list[Hashable] = list(found)
        if wanted.mode == SOFT:
            last = job_domain if job_domain else CLUSTER  # never refused: anywhere in the job's
            return result if last in result else [*result, last]
        if not found:
            where = f" within HyperNode {job_domain}" if job_domain else ""
            job.unschedulable_message = f"sub-job {sub_job.key}: no HyperNode of tier at most {tier}{where} can hold it"
        return result

    def enter_sub(self, job: JobInfo, sub_job: SubJob, domain: Hashable) -> None:
        if domain is None:
            self.sub_current.pop((job.key, sub_job.key), None)
        else:
            self.sub_current[(job.key, sub_job.key)] = str(domain)

    def _allowed(self, job_key: str) -> np.ndarray | None:
        wanted = self.wants.get(job_key)
        if wanted is None:
            return None
        chosen = self.current.get(job_key)
        if wanted.mode == SOFT:
            return self.tree.nodes[chosen] if chosen else None  # None, CLUSTER: anywhere
        if chosen is not None:
            return self.tree.nodes[chosen]
        union = self._union.get(job_key)
        if union is None:
            union = np.zeros(len(self.session.nodes), dtype=bool)
            tier = self.highest_tier(self.session.jobs[job_key], wanted)
            for name in self.tree.within(tier) if tier is not None else ():
                union |= self.tree.nodes[name]
            self._union[job_key] = union
        return union

    def _allowed_for(self, task: TaskInfo) -> np.ndarray | None:
        """The nodes the task may go to: its sub-job's HyperNode while one is being tried, else
        its job's (None: anywhere)."""
        if task.job in self.partitioned:
            chosen = self.sub_current.get((task.job, self._sub_job_of(task).key))
            if chosen:
                return self.tree.nodes[chosen]
        return self._allowed(task.job)

    def predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        allowed = self._allowed_for(task)
        if allowed is None:
            return np.ones(len(nodes.schedulable[rows]), dtype=bool)
        return allowed[rows]

    # -- scores ---------------------------------------------------------------------------------

    def _task_share(self, placed: np.ndarray, task_count: int, hypernodes: np.ndarray) -> np.ndarray:
        """Per HyperNode index (-1: none), the share of a job's (or sub-job's) `task_count` tasks
        placed (`placed`: tasks per node row) under it."""
        counts = self.member[:, placed > 0].astype(np.int64) @ placed[placed > 0]
        shares = np.append(counts / max(task_count, 1), 0.0)  # index -1: under none
        return shares[hypernodes]

    def sub_placed(self, job: JobInfo, sub_job: SubJob) -> np.ndarray:
        """The node rows holding the sub-job's tasks (counted when asked: sub-jobs are small)."""
        rows = np.zeros(len(self.session.nodes), dtype=np.int64)
        index = self.session.nodes.index
        for task in sub_job.tasks(job):
            if task.status in CHARGED and task.node in index:
                rows[index[task.node]] += 1
        return rows

    def hypernode_scores(self, job: JobInfo, names: Sequence[str]) -> dict[str, float]:
        """Volcano's HyperNodeOrderFn for a job: how full each HyperNode would be with the job's
        unplaced tasks (their requests summed; `used` counts the placed ones); ties at the top
        gain the share of the job's tasks under each."""
        request = sum(
            (task.request for task in job.tasks.values() if task.status is TaskStatus.PENDING),
            np.zeros(len(self.binpack), dtype=np.int64),
        )
        return self._fill_scores(request, self.placed(job), len(job.tasks), names)

    def _fill_scores(
        self, request: np.ndarray, placed: np.ndarray, task_count: int, names: Sequence[str]
    ) -> dict[str, float]:
        index = np.array([self.position[name] for name in names], dtype=np.int64)
        scores = fill(self.used[index], self.allocatable[index], request, self.binpack)
        if len(scores) and (scores == scores.max()).sum() > 1:
            scores = scores + np.where(scores == scores.max(), self._task_share(placed, task_count, index), 0.0)
        return {name: float(MAX_SCORE * self.weight * value) for name, value in zip(names, scores, strict=True)}

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        job = self.session.jobs[task.job]
        if task.job in self.partitioned:
            # A sub-job with a topology is scored against where its own tasks are (Volcano's).
            sub_job = self._sub_job_of(task)
            if (task.job, sub_job.key) in self.sub_wants:
                values = self.topology_score(task, job, None, self.sub_placed(job, sub_job), len(sub_job.uids))
            else:
                values = self.packing_score(task)
        else:
            values = self.topology_score(task, job) if task.job in self.wants else self.packing_score(task)
        return MAX_SCORE * self.weight * values[rows]

    def topology_score(
        self,
        task: TaskInfo,
        job: JobInfo,
        candidates: np.ndarray | None = None,
        placed_rows: np.ndarray | None = None,
        task_count: int | None = None,
    ) -> np.ndarray:
        """Every node's score for a task of a job asking for topology (0–1, module docstring);
        ties are broken among `candidates` (default: the nodes the task fits on, the job's
        HyperNode allows and are schedulable). `placed_rows` and `task_count`: a sub-job's
        tasks per node and number (default: the job's)."""
        nodes = self.session.nodes
        values = np.zeros(len(nodes))
        if placed_rows is None:
            placed_rows, task_count = self.placed(job), len(job.tasks)
        placed = placed_rows > 0
        if not placed.any():
            return values
        holding = np.flatnonzero(self.member[:, placed].all(axis=1))  # the HyperNodes above every task
        job_node = int(holding[np.argmin(self.hn_tier[holding])]) if len(holding) else -1
        span = self.top_tier - self.min_tier
        for index in sorted(holding.tolist(), key=lambda i: -self.hn_tier[i]):  # lower tiers overwrite
            values[self.member[index]] = (self.top_tier - self.hn_tier[index]) / span if span else 1.0
        values[(self.lowest == job_node) & (self.lowest >= 0)] = 1.0
        values[self.lowest < 0] = 0.0
        # Among the candidates (Volcano's: the nodes it is handed, those the task fits on when it
        # allocates), nodes tied at the best score gain the share of the job's tasks under their
        # lowest HyperNode.
        if candidates is None:
            allowed = self._allowed_for(task)
            candidates = nodes.schedulable & nodes.fits(task, slice(None), self.session.be_capacity)
            if allowed is not None:
                candidates &= allowed
        tied = np.zeros(len(nodes), dtype=bool)
        if candidates.any():
            tied = candidates & (values == values[candidates].max())
        if tied.sum() > 1:
            values = values + np.where(tied, self._task_share(placed_rows, task_count or 0, self.lowest), 0.0)
        return values

    def packing_score(self, task: TaskInfo) -> np.ndarray:
        """Every node's score for a pod whose job asks for no topology (0–1, module docstring)."""
        total = np.zeros(len(self.session.nodes))
        weight_sum = 0.0
        # Per HyperNode (the virtual top last), then 1 for "under none of this tier" (index -1).
        filled = np.append(fill(self.used, self.allocatable, task.request, self.binpack), 1.0)
        for tier in range(self.min_tier, self.top_tier + 1):
            weight = self.fading ** (tier - self.min_tier)  # Volcano's f^(t-1), normalised alike
            above = self.above.get(tier)
            total += weight if above is None else weight * filled[above]
            weight_sum += weight
        return total / weight_sum if weight_sum else total
