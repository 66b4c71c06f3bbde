"""The session: one scheduling cycle's shared state and the callbacks plugins registered on it.

Actions drive, plugins decide, the session is the only shared state (Volcano's split). Plugins
register callbacks by kind; the session combines them across tiers the way Volcano does:

- order keys (`job_order`, `queue_order`, `task_order`): each callback returns a sort key; keys
  compare in tier/plugin order, so the first plugin that tells two items apart decides, with
  creation time and name as the last resort;
- `predicate`: every callback must pass; `node_order`: scores add up;
- `job_ready`, `job_pipelined`, `allocatable`, `preemptive`: every callback must agree;
  `overused`: any callback suffices; `job_valid`: the first reason given wins;
- `job_enqueueable`: tier by tier, a reject (< 0) in the tier rejects and a permit (> 0) admits;
  a tier of abstentions defers to the next; with only abstentions the job is admitted;
- `preemptable` / `reclaimable`: within a tier the victims are the intersection of the
  callbacks' answers; the first tier whose intersection is not empty decides (an empty one
  leaves the decision to the next tier, as in Volcano); then every `eviction_filter` (pdb's
  budgets) keeps what it allows, whatever tier decided.

Predicates and scores are vectorised: `fn(task, nodes, rows)` answers for the node rows `rows`
(a slice or an index array) at once. They must depend only on the task's class (`class_key`:
its placement class, see `model.placement_class`, and what the plugins declared with
`add_class_key_fn`, such as the task's job or the labels other pods select on) and on state that
changes only through the session's node updates: that lets the session decide identical tasks as
one class, re-evaluating only the nodes that changed since the class was last scored. A plugin
whose answer for a class moves with placements on other nodes (a spread's minimum, a zone's
pods) declares those classes volatile: they are re-evaluated on every node whenever any changed.
A predicate reads node usage from the `nodes` it is
given, which may be a what-if view (`NodeTable.what_if`): that is how preempt and reclaim ask
whether a task would fit once victims are gone.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lahar.api.selectors import SelectorError, label_selector_from_dict
from lahar.scheduler.framework.node_index import NodeIndex
from lahar.scheduler.framework.options import PluginOption, SchedulerConf
from lahar.scheduler.framework.plugin import Plugin, action_class, plugin_class
from lahar.scheduler.framework.pod_topology import PodTopology
from lahar.scheduler.framework.subjobs import Partition, SubJob, partition
from lahar.scheduler.model import (
    HOST_PORTS,
    POD_ANTI_AFFINITY,
    BindBatch,
    JobInfo,
    NodeTable,
    QueueInfo,
    Rows,
    Snapshot,
    TaskInfo,
    TaskStatus,
    hard_constraints,
    soft_constraints,
)
from lahar.scheduler.shards import HARD, OUT_OF_SHARD, SOFT

if TYPE_CHECKING:
    from lahar.rpc.report import NodeReport

log = logging.getLogger("lahar.scheduler.session")

Predicate = Callable[[TaskInfo, NodeTable, Rows], np.ndarray]
Score = Callable[[TaskInfo, NodeTable, Rows], np.ndarray]
# A predicate's or score's answer for one row, as a plain Python value (see `add_predicate_fn`).
RowPredicate = Callable[[TaskInfo, NodeTable, int], bool]
RowScore = Callable[[TaskInfo, NodeTable, int], float]
Explain = Callable[[TaskInfo, NodeTable], Counter[str]]
VictimFilter = Callable[[TaskInfo, list[TaskInfo]], list[TaskInfo] | None]

PERMIT, ABSTAIN, REJECT = 1, 0, -1
# Up to this many changed rows a class brings its cached answers up to date row by row in plain
# Python (when every callback that applies has a row form): a numpy call costs about a
# microsecond whatever its size, and one row through the array forms takes a few dozen.
ROW_BY_ROW = 8
# How old an agent report may be before report-based plugins ignore it (their `staleness` default).
REPORT_STALENESS_SECONDS = 10.0
NO_NODE = -1
# What a node outside a soft shard loses from its score: more than any score a node may have, so
# every feasible node of the shard comes first (Volcano's in-shard candidate gradient).
SOFT_SHARD_PENALTY = float(2**40)


@dataclass
class SessionEvent:
    """An Event the status writer records on a Pod or PodGroup."""

    kind: str  # "Pod", "PodGroup", "Queue", "Node", "ResourceQuota" or "Numatopology" (status.EVENT_KINDS)
    namespace: str
    name: str
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass
class Eviction:
    task: TaskInfo
    reason: str  # "preempt" or "reclaim"
    preemptor: TaskInfo | None = None
    # Whether a PodDisruptionBudget of the snapshot may cover the victim as the API server reads
    # budgets (`budget_may_cover`): the binder then evicts it through the Eviction API, which
    # checks the budget; a victim no budget covers is deleted directly (binder module docstring).
    guarded: bool = True


def budget_may_cover(budget: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether the PodDisruptionBudget object may protect a pod of `namespace` with `labels`, as
    the API server's Eviction API reads budgets (policy/v1: an empty selector covers every pod of
    its namespace, a missing one none), and, unlike it, a selector this code cannot read covers
    the pod (the Eviction API then decides)."""
    metadata, spec = budget.get("metadata") or {}, budget.get("spec") or {}
    if metadata.get("namespace", "") != namespace:
        return False
    try:
        selector = label_selector_from_dict(spec.get("selector"))
    except SelectorError:
        return True
    return selector.matches(labels)


@dataclass
class _Registered:
    plugin: str
    fn: Any
    extra: Any = None
    # For predicates and scores: whether the callback has anything to say about a task (None:
    # always). Asked once per class (`Session.class_key`), so a plugin with nothing to check for
    # a pod costs nothing per node or per placement.
    applies: Callable[[TaskInfo], bool] | None = None
    # For predicates and scores: the same answer for one row as a Python value, when given.
    row: Any = None


@dataclass
class _ClassState:
    masked: np.ndarray  # score where feasible, -inf elsewhere
    synced: int  # position in the node change log it reflects
    volatile: bool = False  # re-evaluated on every node when any node changed


@dataclass
class Session:
    snapshot: Snapshot
    conf: SchedulerConf
    reports: Any = None  # lahar.scheduler.node_reports.NodeReportStore, for usage-aware plugins
    now: float = field(default_factory=time.time)
    plugins: dict[str, Plugin] = field(default_factory=dict)
    # Results for the I/O side.
    binds: list[BindBatch] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    pipelined: list[TaskInfo] = field(default_factory=list)
    events: list[SessionEvent] = field(default_factory=list)
    action_seconds: dict[str, float] = field(default_factory=dict)
    # (plugin, "OnSessionOpen" | "OnSessionClose") -> seconds, and the open's own, for the metrics.
    plugin_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    open_seconds: float = 0.0
    # What the proportion plugin computed per queue (share, deserved, allocated, ...), for the
    # metrics and the Queue status; empty without it.
    queue_figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    # BE capacity per node (N, R) when the oversubscription plugin lends reclaimable capacity.
    be_capacity: np.ndarray | None = None
    # Annotations a plugin wants on a placed pod before its bind (task uid -> key -> value): the
    # device chosen (`lahar.dev/gpu-index`, Volcano's `volcano.sh/gpu-index`, a vGPU or vNPU
    # assignment), which the binder patches onto the pod.
    pod_annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    # Calls plugins made to services outside the scheduler (the extender's HTTP verbs), by
    # (plugin, call), and those of them that failed: for the metrics and the loop's idle check
    # (an outside answer may change with nothing in the cluster changed).
    outside_calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    outside_failures: Counter[tuple[str, str]] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.resources = self.snapshot.resources
        self.nodes = self.snapshot.nodes
        self.jobs = self.snapshot.jobs
        self.queues = self.snapshot.queues
        self._callbacks: dict[str, list[list[_Registered]]] = {}
        self._flat: dict[str, list[_Registered]] = {}
        self._handlers: list[tuple[Callable[[TaskInfo], None] | None, Callable[[TaskInfo], None] | None]] = []
        self._placement_checks: list[Callable[[TaskInfo], str | None]] = []
        self._change_log: list[int] = []
        self._classes: dict[Hashable, _ClassState] = {}
        self._fresh: dict[float, list[NodeReport | None]] = {}
        self._current: PluginOption | None = None
        self._node_index: NodeIndex | None = None
        self.reserved: dict[str, int] = {}  # task uid -> row it holds room on (`reserve_nominated`)
        self._pod_topology: PodTopology | None = None
        self._left: dict[str, int] = {}  # task uid -> the row an undone placement left (row_of)
        self._partitions: dict[str, Partition | None] = {}  # job key -> its sub-jobs (sub_jobs)
        # What a class's answers depend on beyond the placement class, and which classes are
        # volatile (`add_class_key_fn`); empty for most sessions, so the key is the placement.
        self._class_key_fns: list[Callable[[TaskInfo], Hashable]] = []
        # Per (callback kind, class key): the predicates or scores that apply to the class.
        self._applying: dict[tuple[str, Hashable], tuple[Any, ...]] = {}
        # Per class key: the row forms of the predicates and scores that apply (`_row_forms`).
        self._row_forms: dict[Hashable, tuple[tuple[RowPredicate, ...], tuple[RowScore, ...]] | None] = {}
        self._volatile_fns: list[Callable[[TaskInfo], bool]] = []
        self._enforced: set[str] = set()  # hard constraints some configured predicate enforces
        self._scored: set[str] = set()  # preferences some configured node order scores
        self._unsupported: dict[str, tuple[str, ...]] = {}  # per placement class
        self._unscored: dict[str, tuple[str, ...]] = {}  # per placement class
        # BE tasks borrow the agents' reclaimable cpu/memory instead of queue quota when
        # a plugin that lends is configured (Plugin.LENDS_TO_BE: known before any plugin opens).
        self.lends_to_be = any(plugin_class(name).LENDS_TO_BE for name in self.conf.plugin_names)
        self._tier = 0
        # A sharded scheduler's node shard (scheduler/shards.py): hard, rows the predicates pass
        # only inside it; soft, what each row loses from its score outside it.
        self._in_hard_shard: np.ndarray | None = None
        self._soft_penalty: np.ndarray | None = None
        shard = self.snapshot.shard
        if shard is not None and shard.mode in (HARD, SOFT):
            inside = np.fromiter((name in shard.nodes for name in self.nodes.names), bool, len(self.nodes))
            if shard.mode == HARD:
                self._in_hard_shard = inside
            else:
                self._soft_penalty = np.where(inside, 0.0, SOFT_SHARD_PENALTY)

    @property
    def node_index(self) -> NodeIndex:
        """Label and taint indexes over this session's nodes, built on first use."""
        if self._node_index is None:
            self._node_index = NodeIndex(self.nodes)
        return self._node_index

    @property
    def pod_topology(self) -> PodTopology:
        """Pods by topology domain, for pod (anti-)affinity, topology spread and host ports; made
        on first use (by the plugins that filter or score with them, when they open)."""
        if self._pod_topology is None:
            self._pod_topology = PodTopology(self)
        return self._pod_topology

    @property
    def soft_sharded(self) -> bool:
        """Whether nodes outside this scheduler's soft node shard lose SOFT_SHARD_PENALTY."""
        return self._soft_penalty is not None

    def queue_of(self, task: TaskInfo) -> QueueInfo | None:
        """The queue of the task's job, None when the session does not know it."""
        return self.queues.get(self.jobs[task.job].queue)

    def guarded(self, task: TaskInfo) -> bool:
        """Whether a PodDisruptionBudget of the snapshot may cover the task's pod
        (`budget_may_cover`): its eviction must then go through the Eviction API."""
        labels = task.pod.meta.labels
        return any(budget_may_cover(budget, task.namespace, labels) for budget in self.snapshot.disruption_budgets)

    def blocking(self, task: TaskInfo, row: int) -> set[str]:
        """The uids of the tasks on `row` that must be evicted before `task` may go there, by the
        pod constraints a configured predicate enforces (required pod anti-affinity either way,
        host ports: `PodTopology.blocking`); empty when no plugin asks about the pods around."""
        topology = self._pod_topology
        if topology is None:
            return set()
        return topology.blocking(task, row, POD_ANTI_AFFINITY in self._enforced, HOST_PORTS in self._enforced)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def total(self) -> np.ndarray:
        """Allocatable summed over schedulable nodes."""
        nodes = self.nodes
        return (
            nodes.allocatable[nodes.schedulable].sum(axis=0)
            if len(nodes)
            else np.zeros(len(self.resources), dtype=np.int64)
        )

    def open(self) -> Session:
        opened = time.perf_counter()
        for tier_number, tier in enumerate(self.conf.tiers):
            for option in tier:
                plugin = plugin_class(option.name)(option.arguments)
                plugin.switches_on = option.switches
                self.plugins[option.name] = plugin
                self._current, self._tier = option, tier_number
                started = time.perf_counter()
                plugin.on_session_open(self)
                self.plugin_seconds[(option.name, "OnSessionOpen")] = time.perf_counter() - started
                if option.enabled("predicate"):
                    self._enforced |= plugin.enforces()
                if option.enabled("node_order"):
                    self._scored |= plugin.scores()
        self._current = None
        self.reserve_nominated()
        self.open_seconds = time.perf_counter() - opened
        return self

    def reserve_nominated(self) -> None:
        """Keep the room freed for a preemptor reserved for it across cycles (kube-scheduler's
        and Volcano's nominated node): each pending task nominated last cycle is pipelined again
        on its node while that node, with what its victims still release, holds it. Other tasks
        then neither take that room nor evict again for it, and its gang, pipelined, does not
        starve: a gang bound on room another gang's victims freed no longer leaves that gang to
        evict a second time. `release_reserved` hands the room to allocate once it is free.

        Asked every cycle of every task still nominated (a wave of gangs keeps hundreds lined
        up while their victims go), so the fit is asked once for all: the nodes whose nominated
        tasks fit together on their future state take them all; only on the others is each
        task asked in turn, as it comes (`_fit_together`)."""
        nodes = self.nodes
        wanted: list[tuple[TaskInfo, int]] = []
        for uid, (job_key, node) in self.snapshot.nominated.items():
            job, row = self.jobs.get(job_key), nodes.index.get(node)
            task = job.tasks.get(uid) if job is not None else None
            if task is None or row is None or task.status is not TaskStatus.PENDING or not nodes.schedulable[row]:
                continue
            wanted.append((task, row))
        if not wanted:
            return
        together = self._fit_together(wanted)
        for task, row in wanted:
            if together[row] or nodes.fits(task, np.array([row]), self.be_capacity, future=True)[0]:
                self.reserved[task.uid] = row
                self._place(task, row, TaskStatus.PIPELINED)

    def _fit_together(self, wanted: list[tuple[TaskInfo, int]]) -> np.ndarray:
        """Per node, whether every task of `wanted` (task, row) on it fits there at once on its
        future state (what its victims release counted free): one vector check for them all.
        A node with a BE task among them is False (a BE task may borrow lent capacity: its rule
        differs, and each is asked in turn); an online task's rule is the same for all."""
        nodes = self.nodes
        rows = np.fromiter((row for _, row in wanted), dtype=np.intp, count=len(wanted))
        asked = np.zeros_like(nodes.allocatable)
        np.add.at(asked, rows, np.stack([task.request for task, _ in wanted]))
        online = next((task for task, _ in wanted if not task.best_effort), None)
        if online is None:
            return np.zeros(len(nodes), dtype=bool)
        together: np.ndarray = np.logical_and.reduce(
            asked <= nodes.free(online, slice(None), self.be_capacity, future=True), axis=1
        )
        together[[row for task, row in wanted if task.best_effort]] = False
        return together

    def release_reserved(self) -> None:
        """Make the reserved tasks on each node whose tasks, reservations included, all fit in
        its allocatable (their victims are gone) pending again, for allocate to bind; the
        others stay reserved."""
        idle = self.nodes.idle
        for uid, row in list(self.reserved.items()):
            if (idle[row] >= 0).all():
                self._unplace(self.jobs[self.snapshot.nominated[uid][0]].tasks[uid])
                del self.reserved[uid]

    def unsupported(self, task: TaskInfo) -> tuple[str, ...]:
        """The hard constraints the task's pod carries that no configured plugin enforces: such a
        pod is not placed (a placement could violate them), and says why (`refuse_unsupported`)."""
        found = self._unsupported.get(task.placement)
        if found is None:
            found = self._unsupported[task.placement] = tuple(
                name for name in hard_constraints(task.pod) if name not in self._enforced
            )
        return found

    def refuse_unsupported(self, job: JobInfo, tasks: list[TaskInfo]) -> list[TaskInfo]:
        """`tasks` less those with unsupported constraints, each refused with a Warning event
        (and its job's message); preferences no plugin scores get a Normal event instead, once."""
        kept = []
        for task in tasks:
            missing = self.unsupported(task)
            if missing:
                message = (
                    f"pod carries constraints this scheduler's configuration does not enforce: "
                    f"{', '.join(missing)}; not placed rather than placed in violation"
                )
                self.record_event("Pod", task.namespace, task.name, "Warning", "UnsupportedConstraint", message)
                job.set_unschedulable(1, message)
                continue
            unscored = self._unscored.get(task.placement)
            if unscored is None:
                unscored = self._unscored[task.placement] = tuple(
                    name for name in soft_constraints(task.pod) if name not in self._scored
                )
            if unscored:
                self.record_event(
                    "Pod",
                    task.namespace,
                    task.name,
                    "Normal",
                    "PreferenceIgnored",
                    f"preferences this scheduler's configuration does not score: {', '.join(unscored)}",
                )
            kept.append(task)
        return kept

    def run_actions(self) -> None:
        for name in self.conf.actions:
            action = action_class(name)(self.conf.action_arguments.get(name, {}))
            started = time.perf_counter()
            action.execute(self)
            self.action_seconds[name] = time.perf_counter() - started

    def close(self) -> None:
        for name, plugin in self.plugins.items():
            started = time.perf_counter()
            plugin.on_session_close(self)
            self.plugin_seconds[(name, "OnSessionClose")] = time.perf_counter() - started

    # -- registration ------------------------------------------------------------------------

    def _add(
        self,
        kind: str,
        fn: Any,
        extra: Any = None,
        applies: Callable[[TaskInfo], bool] | None = None,
        row: Any = None,
    ) -> None:
        option = self._current
        if option is None:
            raise RuntimeError("callbacks are registered from Plugin.on_session_open")
        if not option.enabled(kind):
            return
        tiers = self._callbacks.setdefault(kind, [])
        while len(tiers) <= self._tier:
            tiers.append([])
        tiers[self._tier].append(_Registered(option.name, fn, extra, applies, row))
        self._flat.pop(kind, None)
        self._applying.clear()
        self._row_forms.clear()

    def add_job_order_fn(self, fn: Callable[[JobInfo], Any]) -> None:
        self._add("job_order", fn)

    def add_queue_order_fn(
        self, fn: Callable[[QueueInfo], Any], admission: Callable[[QueueInfo], Any] | None = None
    ) -> None:
        """`fn` orders queues for placement; `admission`, when given, replaces it in the turns
        `enqueue` gives (`admission_order_key`): a share that counts what queues wait to have
        admitted, which the placement share (of admitted demand only) cannot see."""
        self._add("queue_order", fn, admission)

    def add_task_order_fn(self, fn: Callable[[TaskInfo], Any]) -> None:
        self._add("task_order", fn)

    def add_predicate_fn(
        self,
        fn: Predicate,
        explain: Explain | None = None,
        applies: Callable[[TaskInfo], bool] | None = None,
        row: RowPredicate | None = None,
    ) -> None:
        """`applies(task)`, when given, says whether the predicate checks anything for the task;
        it must depend only on what the task's class key covers (its placement class and what
        the plugins declared), since it is asked once per class. `row(task, nodes, r)`, when
        given, is `fn`'s answer for the one row `r` as a Python bool: bringing a class up to
        date after a placement asks one row, where numpy's per-call cost dominates. It must
        give exactly `fn`'s answer (tests/scheduler/test_row_forms.py checks the built-in ones)."""
        self._add("predicate", fn, explain, applies, row)

    def add_node_order_fn(
        self, fn: Score, applies: Callable[[TaskInfo], bool] | None = None, row: RowScore | None = None
    ) -> None:
        """`applies` as for `add_predicate_fn`: a score that does not apply adds nothing. `row`:
        the score of one row as a Python float, bit for bit `fn`'s (see `add_predicate_fn`)."""
        self._add("node_order", fn, None, applies, row)

    def add_job_ready_fn(self, fn: Callable[[JobInfo], bool]) -> None:
        self._add("job_ready", fn)

    def add_job_pipelined_fn(self, fn: Callable[[JobInfo], bool]) -> None:
        self._add("job_pipelined", fn)

    def add_job_valid_fn(self, fn: Callable[[JobInfo], str | None]) -> None:
        self._add("job_valid", fn)

    def add_job_enqueueable_fn(self, fn: Callable[[JobInfo], int]) -> None:
        self._add("job_enqueueable", fn)

    def add_job_enqueued_fn(self, fn: Callable[[JobInfo], None]) -> None:
        self._add("job_enqueued", fn)

    def add_job_starving_fn(self, fn: Callable[[JobInfo], bool]) -> None:
        self._add("job_starving", fn)

    def add_preemptable_fn(self, fn: VictimFilter) -> None:
        self._add("preemptable", fn)

    def add_reclaimable_fn(self, fn: VictimFilter) -> None:
        self._add("reclaimable", fn)

    def add_preemptive_fn(self, fn: Callable[[QueueInfo, TaskInfo], bool]) -> None:
        self._add("preemptive", fn)

    def add_victim_tasks_fn(self, fn: Callable[[], list[TaskInfo]]) -> None:
        """Tasks a plugin wants evicted whatever is pending (tdm's revocable nodes out of their
        window); the `shuffle` action evicts them."""
        self._add("victim_tasks", fn)

    def add_job_domains_fn(
        self,
        domains: Callable[[JobInfo, bool], list[Hashable] | None],
        enter: Callable[[JobInfo, Hashable], None],
    ) -> None:
        """A plugin that keeps a job within one of several node groups (network-topology-aware's
        HyperNodes): `domains(job, evicting)` lists the groups to try, best first (None: the job
        is free, []: no group can take it; `evicting`: for preempt and reclaim, which may free
        room, rather than allocate); `enter(job, domain)` makes the plugin's predicate keep the
        job's tasks to `domain` while an action tries it."""
        self._add("job_domains", domains, enter)

    def job_domains(self, job: JobInfo, evicting: bool = False) -> list[Hashable] | None:
        for registered in self._all("job_domains"):
            found = registered.fn(job, evicting)
            if found is not None:
                return list(found)
        return None

    def enter_domain(self, job: JobInfo, domain: Hashable) -> None:
        for registered in self._all("job_domains"):
            registered.extra(job, domain)

    def sub_jobs(self, job: JobInfo) -> Partition | None:
        """The job's sub-jobs (its PodGroup's `subGroupPolicy`, framework/subjobs.py), computed
        once per session; None for a job without sub-group policies."""
        key = job.key
        if key not in self._partitions:
            self._partitions[key] = partition(job)
        return self._partitions[key]

    def add_sub_job_domains_fn(
        self,
        domains: Callable[[JobInfo, SubJob, Hashable, bool], list[Hashable] | None],
        enter: Callable[[JobInfo, SubJob, Hashable], None],
    ) -> None:
        """As `add_job_domains_fn`, for a sub-job within the node group its job is in:
        `domains(job, sub_job, job_domain, evicting)` lists the groups to try, best first (None:
        free within the job's group, []: none can take it; `evicting` as for jobs);
        `enter(job, sub_job, domain)` keeps the sub-job's tasks to `domain` (None: back to the
        job's group)."""
        self._add("sub_job_domains", domains, enter)

    def sub_job_domains(
        self, job: JobInfo, sub_job: SubJob, job_domain: Hashable, evicting: bool = False
    ) -> list[Hashable] | None:
        for registered in self._all("sub_job_domains"):
            found = registered.fn(job, sub_job, job_domain, evicting)
            if found is not None:
                return list(found)
        return None

    def enter_sub_domain(self, job: JobInfo, sub_job: SubJob, domain: Hashable) -> None:
        for registered in self._all("sub_job_domains"):
            registered.extra(job, sub_job, domain)

    def add_hypernode_order_fn(self, fn: Callable[[JobInfo, Sequence[str]], Mapping[str, float]]) -> None:
        """Score candidate HyperNodes for a job (Volcano's `HyperNodeOrderFn`, switch
        `enabledHyperNodeOrder`): `fn(job, names)` maps each name to a score, higher is better."""
        self._add("hypernode_order", fn)

    def hypernode_order(self, job: JobInfo, names: Sequence[str]) -> dict[str, float]:
        """The summed HyperNode scores of every plugin that scores them (0 where none does)."""
        total = dict.fromkeys(names, 0.0)
        for registered in self._all("hypernode_order"):
            for name, value in registered.fn(job, names).items():
                total[name] += value
        return total

    def add_eviction_filter_fn(self, fn: Callable[[list[TaskInfo]], list[TaskInfo]]) -> None:
        """Which of the given victims may go (pdb's budgets), whatever the tiers decided: every
        such filter, in turn, has the last word on preempt's, reclaim's and shuffle's victims."""
        self._add("eviction_filter", fn)

    def add_overused_fn(self, fn: Callable[[QueueInfo], bool]) -> None:
        self._add("overused", fn)

    def add_allocatable_fn(self, fn: Callable[[QueueInfo, TaskInfo], bool]) -> None:
        self._add("allocatable", fn)

    def add_class_key_fn(
        self, fn: Callable[[TaskInfo], Hashable], volatile: Callable[[TaskInfo], bool] | None = None
    ) -> None:
        """Declare what a plugin's predicate or score depends on beyond the placement class
        (`fn(task)`: the task's job for per-job scores, the labels other pods select on), and,
        with `volatile`, which classes must be re-evaluated on every node whenever any changed.
        Not a tier callback: switches do not turn it off, since answers cached under too coarse
        a key would be given to the wrong tasks."""
        self._class_key_fns.append(fn)
        if volatile is not None:
            self._volatile_fns.append(volatile)

    def class_key(self, task: TaskInfo) -> Hashable:
        """The key under which the session caches a task's node answers (`candidate_scores`) and
        actions group tasks that the nodes answer alike."""
        fns = self._class_key_fns
        if not fns:
            return task.placement
        return (task.placement, *(fn(task) for fn in fns))

    def add_placement_check_fn(self, fn: Callable[[TaskInfo], str | None]) -> None:
        """Asked after a task is allocated or pipelined (its event handlers have run): a reason
        undoes the placement, and the action goes on without it (Volcano's event handler error:
        the extender's `allocateFuncVerb` refusing). Not a tier callback: no switch turns it off."""
        self._placement_checks.append(fn)

    def add_event_handler(
        self,
        on_allocate: Callable[[TaskInfo], None] | None = None,
        on_deallocate: Callable[[TaskInfo], None] | None = None,
    ) -> None:
        """Called when a task takes or gives back resources in this session (allocate, pipeline,
        evict and their rollbacks): plugins keep shares and device state current with these."""
        self._handlers.append((on_allocate, on_deallocate))

    def _all(self, kind: str) -> list[_Registered]:
        # Dispatch runs per task on the hot path: flatten the tiers once per kind.
        flat = self._flat.get(kind)
        if flat is None:
            flat = self._flat[kind] = [r for tier in self._callbacks.get(kind, ()) for r in tier]
        return flat

    def _applying_to(self, kind: str, task: TaskInfo) -> tuple[Any, ...]:
        """The callbacks of `kind` (predicate, node_order) that apply to the task's class."""
        key = (kind, self.class_key(task))
        found = self._applying.get(key)
        if found is None:
            found = self._applying[key] = tuple(r.fn for r in self._all(kind) if r.applies is None or r.applies(task))
        return found

    def _row_forms_of(self, task: TaskInfo) -> tuple[tuple[RowPredicate, ...], tuple[RowScore, ...]] | None:
        """The row forms of the predicates and scores that apply to the task's class, None when
        one of them has none (the class is then brought up to date through the array forms)."""
        key = self.class_key(task)
        if key in self._row_forms:
            return self._row_forms[key]
        forms: list[tuple[Any, ...]] = []
        for kind in ("predicate", "node_order"):
            applying = [r for r in self._all(kind) if r.applies is None or r.applies(task)]
            if any(r.row is None for r in applying):
                self._row_forms[key] = None
                return None
            forms.append(tuple(r.row for r in applying))
        found = self._row_forms[key] = (forms[0], forms[1])
        return found

    def has(self, kind: str) -> bool:
        return any(True for _ in self._all(kind))

    # -- dispatch ----------------------------------------------------------------------------

    def job_order_key(self, job: JobInfo) -> tuple[Any, ...]:
        return (*(r.fn(job) for r in self._all("job_order")), job.creation, job.key)

    def queue_order_key(self, queue: QueueInfo) -> tuple[Any, ...]:
        return (*(r.fn(queue) for r in self._all("queue_order")), queue.name)

    def admission_order_key(self, queue: QueueInfo) -> tuple[Any, ...]:
        """The queue order for admission turns: each plugin's admission key where it gave one."""
        return (*((r.extra or r.fn)(queue) for r in self._all("queue_order")), queue.name)

    def task_order_key(self, task: TaskInfo) -> tuple[Any, ...]:
        return (*(r.fn(task) for r in self._all("task_order")), task.creation, task.task_name, task.index, task.name)

    def _every(self, kind: str, *args: Any) -> bool:
        """Whether every callback of `kind` agrees (a plain loop: some run per placement)."""
        for registered in self._all(kind):  # noqa: SIM110 - all() over a generator costs more per placement
            if not registered.fn(*args):
                return False
        return True

    def job_ready(self, job: JobInfo) -> bool:
        return self._every("job_ready", job)

    def job_pipelined(self, job: JobInfo) -> bool:
        return self._every("job_pipelined", job)

    def job_valid(self, job: JobInfo) -> str | None:
        """None when the job may be scheduled this session, else why not."""
        for registered in self._all("job_valid"):
            reason = registered.fn(job)
            if reason:
                return str(reason)
        return None

    def gangs_wait(self) -> bool:
        """Whether a PodGroup's job with fewer pods than its minMember is invalid this session
        (the gang plugin's job_valid is on): adding one member short of that changes nothing."""
        return any(registered.plugin == "gang" for registered in self._all("job_valid"))

    def job_starving(self, job: JobInfo) -> bool:
        return self.has("job_starving") and self._every("job_starving", job)

    def job_enqueueable(self, job: JobInfo) -> bool:
        for tier in self._callbacks.get("job_enqueueable", ()):
            votes = [r.fn(job) for r in tier]
            if any(vote < 0 for vote in votes):
                return False
            if any(vote > 0 for vote in votes):
                return True
        return True

    def job_enqueued(self, job: JobInfo) -> None:
        for registered in self._all("job_enqueued"):
            registered.fn(job)

    def victim_tasks(self) -> list[TaskInfo]:
        """Every plugin's `add_victim_tasks_fn` answers together, each task once."""
        found: dict[str, TaskInfo] = {}
        for registered in self._all("victim_tasks"):
            for task in registered.fn():
                found.setdefault(task.uid, task)
        return list(found.values())

    def eviction_filter(self, tasks: list[TaskInfo]) -> list[TaskInfo]:
        for registered in self._all("eviction_filter"):
            tasks = registered.fn(tasks)
        return tasks

    def overused(self, queue: QueueInfo) -> bool:
        return any(r.fn(queue) for r in self._all("overused"))

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        return self._every("allocatable", queue, task)

    def preemptive(self, queue: QueueInfo, task: TaskInfo) -> bool:
        return self._every("preemptive", queue, task)

    def _victims(self, kind: str, preemptor: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        # Volcano's rule: an empty answer (or an empty intersection) leaves the tier without a
        # decision and the next tier decides. What no plugin may allow (a pod that opted out,
        # a gang broken below its minimum) the actions hold back themselves.
        for tier in self._callbacks.get(kind, ()):
            chosen: set[str] | None = None
            for registered in tier:
                answer = registered.fn(preemptor, candidates)
                if answer is None:
                    continue
                uids = {task.uid for task in answer}
                chosen = uids if chosen is None else chosen & uids
                if not chosen:
                    break
            if chosen:
                return self.eviction_filter([task for task in candidates if task.uid in chosen])
        return []

    def preemptable(self, preemptor: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        return self._victims("preemptable", preemptor, candidates)

    def reclaimable(self, reclaimer: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        return self._victims("reclaimable", reclaimer, candidates)

    @property
    def read_reports(self) -> bool:
        """Whether a plugin read agent reports or asked a service outside the scheduler this
        session (its decisions may then change as reports arrive or age, or as the outside
        answers change, with nothing else changed)."""
        return bool(self._fresh) or bool(self.outside_calls)

    def fresh_reports(self, staleness_seconds: float) -> list[NodeReport | None]:
        """Each node's latest agent report, by row, where it arrived at most `staleness_seconds`
        ago (on the report store's clock), else None. Read once per session and staleness: the
        report-based plugins (usage, oversubscription, numa-aware, deviceshare) share it."""
        reports = self._fresh.get(staleness_seconds)
        if reports is None:
            store = self.reports
            names = self.nodes.names
            reports = [None] * len(names) if store is None else [store.fresh(name, staleness_seconds) for name in names]
            self._fresh[staleness_seconds] = reports
        return reports

    # -- nodes -------------------------------------------------------------------------------

    def predicate(self, task: TaskInfo, rows: Rows = slice(None), nodes: NodeTable | None = None) -> np.ndarray:
        """Which of `rows` pass every predicate; asked about `nodes`, a what-if view of the
        session's table (NodeTable.what_if: preempt and reclaim ask whether a task would fit once
        victims are gone), instead of the table itself when given."""
        nodes = self.nodes if nodes is None else nodes
        # Resource fit is the session's, not a plugin's: whatever the configuration, no node
        # takes more than it has (pod slots included).
        mask = nodes.fits(task, rows, self.be_capacity)
        mask &= nodes.schedulable[rows]
        if self._in_hard_shard is not None:
            mask &= self._in_hard_shard[rows]
        for fn in self._applying_to("predicate", task):
            mask &= fn(task, nodes, rows)
        return mask

    def score(self, task: TaskInfo, rows: Rows = slice(None)) -> np.ndarray:
        nodes = self.nodes
        total: np.ndarray | None = None
        for fn in self._applying_to("node_order", task):
            part = fn(task, nodes, rows)
            total = part if total is None else total + part  # never in place: a part may be a view
        return np.zeros(len(nodes.schedulable[rows]), dtype=np.float64) if total is None else total

    def _evaluate(self, task: TaskInfo, rows: Rows, view: NodeTable | None = None) -> np.ndarray:
        mask = self.predicate(task, rows, view)
        scores = self.score(task, rows)
        if self._soft_penalty is not None:
            scores = scores - self._soft_penalty[rows]
        return np.where(mask, scores, -np.inf)

    def _evaluate_row(
        self,
        task: TaskInfo,
        row: int,
        forms: tuple[tuple[RowPredicate, ...], tuple[RowScore, ...]],
        view: NodeTable | None = None,
    ) -> float:
        """`_evaluate` for one row through the callbacks' row forms: the same checks (the fit,
        schedulable, every predicate against `view` when given) and the scores summed in the
        same order, so the value is bit for bit the array form's."""
        nodes = self.nodes if view is None else view
        if not (nodes.schedulable[row] and nodes.fits_row(task, row, self.be_capacity)):
            return -np.inf
        if self._in_hard_shard is not None and not self._in_hard_shard[row]:
            return -np.inf
        predicates, scores = forms
        for predicate in predicates:
            if not predicate(task, nodes, row):
                return -np.inf
        total: Any = 0.0
        if scores:
            own = self.nodes
            total = scores[0](task, own, row)
            for score in scores[1:]:
                total = total + score(task, own, row)
        if self._soft_penalty is not None:
            total = total - self._soft_penalty[row]
        return total

    def node_changed(self, row: int) -> None:
        """Record that a node's usage changed, so cached class scores re-evaluate it."""
        self._change_log.append(row)

    def changed_since(self, mark: int) -> tuple[np.ndarray, int]:
        """The rows whose usage changed since `mark` (0, or the mark an earlier call returned),
        and the mark to ask from next time: for actions that keep per-node figures of their own."""
        changed = self._change_log[mark:]
        return np.unique(np.fromiter(changed, dtype=np.intp, count=len(changed))), len(self._change_log)

    def candidate_scores(self, task: TaskInfo, view: NodeTable | None = None, key: Hashable = None) -> np.ndarray:
        """Every node's score for the task, -inf where a predicate fails; cached per placement
        class and brought up to date with the nodes changed since. Do not modify the result.
        With `view` the predicates are asked about that what-if table (scores stay about the
        session's own), cached under `key`: the view must stay true as the session changes
        (an `empty` one does), since only changed rows are asked again."""
        key = self.class_key(task) if key is None else key
        state = self._classes.get(key)
        log_length = len(self._change_log)
        if state is None:
            volatile = any(fn(task) for fn in self._volatile_fns)
            state = self._classes[key] = _ClassState(self._evaluate(task, slice(None), view), log_length, volatile)
        elif state.synced < log_length:
            changed = self._change_log[state.synced :]
            forms = self._row_forms_of(task) if len(changed) <= ROW_BY_ROW and not state.volatile else None
            if forms is not None:
                masked = state.masked
                for row in changed if len(changed) == 1 else set(changed):
                    masked[row] = self._evaluate_row(task, row, forms, view)
            elif state.volatile or len(changed) * 4 > len(self.nodes):
                state.masked = self._evaluate(task, slice(None), view)
            else:
                # One placement between two tasks of a class is the common case: a slice keeps
                # the plugins' row reads views instead of copies.
                rows = (
                    slice(changed[0], changed[0] + 1)
                    if len(changed) == 1
                    else np.unique(np.fromiter(changed, dtype=np.intp, count=len(changed)))
                )
                state.masked[rows] = self._evaluate(task, rows, view)
            state.synced = log_length
        return state.masked

    def best_node(self, task: TaskInfo) -> int:
        """The row of the best feasible node for the task, or NO_NODE."""
        scores = self.candidate_scores(task)
        if not len(scores):
            return NO_NODE
        row = int(scores.argmax())
        return row if scores[row] > -np.inf else NO_NODE

    def explain(self, task: TaskInfo) -> Counter[str]:
        """Why the task fits no node: reason -> number of nodes (for Unschedulable messages)."""
        nodes = self.nodes
        reasons: Counter[str] = Counter()
        unschedulable = int((~nodes.schedulable).sum())
        if unschedulable:
            reasons["node(s) not ready or unschedulable"] += unschedulable
        # Each node by the first check that refuses it: the shard, the plugins' filters, then resources.
        left = nodes.schedulable.copy()
        if self._in_hard_shard is not None:
            outside = int((left & ~self._in_hard_shard).sum())
            if outside:
                reasons[OUT_OF_SHARD] += outside
            left &= self._in_hard_shard
        for registered in self._all("predicate"):
            if registered.applies is not None and not registered.applies(task):
                continue  # checks nothing for this task: every node passes it
            passed = registered.fn(task, nodes, slice(None))
            if registered.extra is not None:
                reasons.update(registered.extra(task, nodes))
            else:
                failed = int((~passed & left).sum())
                if failed:
                    reasons[f"node(s) refused by {registered.plugin}"] += failed
            left &= passed
        rows = np.flatnonzero(left)
        reasons.update(nodes.shortfall(task, nodes.free(task, rows, self.be_capacity)))
        return +reasons

    # -- state changes (through Statement) ---------------------------------------------------

    def _own(self, task: TaskInfo) -> TaskInfo:
        """The session's own TaskInfo for `task`: a job the snapshot still shares with the cache
        (a victim's) is cloned on its first change (`Snapshot.own`); a caller may hold the
        shared object, so the task is looked up again by uid."""
        return self.snapshot.own(task.job).tasks[task.uid]

    def _place(self, task: TaskInfo, row: int, status: TaskStatus) -> TaskInfo:
        task = self._own(task)
        job = self.jobs[task.job]
        job.set_status(task, status)
        task.node = self.nodes.names[row]
        self.nodes.add_task(row, task)
        self.node_changed(row)
        for on_allocate, _ in self._handlers:
            if on_allocate is not None:
                on_allocate(task)
        return task

    def _refusal(self, task: TaskInfo) -> str | None:
        """Why a plugin will not have the placement just made (`add_placement_check_fn`), or None.
        Every check is asked, as every handler ran, and the first reason wins."""
        refusal = None
        for check in self._placement_checks:
            reason = check(task)
            if reason and refusal is None:
                refusal = reason
        return refusal

    def _unplace(self, task: TaskInfo) -> None:
        task = self._own(task)
        row = self.nodes.index[task.node]
        self.nodes.remove_task(row, task)
        self._left[task.uid] = row
        task.node = ""
        self.jobs[task.job].set_status(task, TaskStatus.PENDING)
        self.node_changed(row)
        for _, on_deallocate in self._handlers:
            if on_deallocate is not None:
                on_deallocate(task)

    def row_of(self, task: TaskInfo) -> int | None:
        """The node row a task is on, or, in a deallocate handler of an undone placement (its
        node already cleared), the row it just left; None for a task on no known node."""
        if task.node:
            return self.nodes.index.get(task.node)
        return self._left.get(task.uid)

    def _release(self, task: TaskInfo) -> tuple[TaskInfo, TaskStatus]:
        """Mark a placed task as being evicted; its resources become future-idle. Returns the
        session's own task and its status before."""
        task = self._own(task)
        row = self.nodes.index[task.node]
        previous = task.status
        self.nodes.remove_task(row, task)
        self.jobs[task.job].set_status(task, TaskStatus.RELEASING)
        self.nodes.add_task(row, task)
        self.node_changed(row)
        for _, on_deallocate in self._handlers:
            if on_deallocate is not None:
                on_deallocate(task)
        return task, previous

    def _unrelease(self, task: TaskInfo, previous: TaskStatus) -> None:
        task = self._own(task)
        row = self.nodes.index[task.node]
        self.nodes.remove_task(row, task)
        self.jobs[task.job].set_status(task, previous)
        self.nodes.add_task(row, task)
        self.node_changed(row)
        for on_allocate, _ in self._handlers:
            if on_allocate is not None:
                on_allocate(task)

    def statement(self) -> Statement:
        return Statement(self)

    def record_event(self, kind: str, namespace: str, name: str, type_: str, reason: str, message: str) -> None:
        self.events.append(SessionEvent(kind, namespace, name, type_, reason, message))


class Statement:
    """Staged operations that become real only on `commit()`; `discard()` undoes them in reverse.
    Actions use one per gang so that a gang places all of its tasks or none."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._ops: list[tuple[str, TaskInfo, Any]] = []

    def allocate(self, task: TaskInfo, row: int) -> str | None:
        """Place a task; None, or why a plugin refused the placement (it is then undone)."""
        return self._stage("allocate", task, row, TaskStatus.ALLOCATED)

    def pipeline(self, task: TaskInfo, row: int) -> str | None:
        """Place a task on resources that victims are still releasing; it binds in a later cycle.
        None, or why a plugin refused the placement (it is then undone)."""
        return self._stage("pipeline", task, row, TaskStatus.PIPELINED)

    def _stage(self, kind: str, task: TaskInfo, row: int, status: TaskStatus) -> str | None:
        session = self.session
        placed = session._place(task, row, status)
        refusal = session._refusal(placed) if session._placement_checks else None
        if refusal is not None:
            session._unplace(placed)
            return refusal
        self._ops.append((kind, placed, None))
        return None

    def evict(self, task: TaskInfo, reason: str, preemptor: TaskInfo | None = None) -> None:
        task, previous = self.session._release(task)
        self._ops.append(("evict", task, (previous, reason, preemptor)))

    @property
    def empty(self) -> bool:
        return not self._ops

    def absorb(self, other: Statement) -> None:
        """Take over `other`'s staged operations (a sub-job's, once it is placed whole)."""
        self._ops.extend(other._ops)
        other._ops.clear()

    def discard(self) -> None:
        for kind, task, extra in reversed(self._ops):
            if kind == "evict":
                self.session._unrelease(task, extra[0])
            else:
                self.session._unplace(task)
        self._ops.clear()

    def commit(self) -> None:
        session = self.session
        allocated: dict[str, list[TaskInfo]] = {}
        for kind, task, extra in self._ops:
            if kind == "allocate":
                allocated.setdefault(task.job, []).append(task)
            elif kind == "pipeline":
                session.pipelined.append(task)
            else:
                session.evictions.append(Eviction(task, extra[1], extra[2], session.guarded(task)))
        for job_key, tasks in allocated.items():
            session.binds.append(BindBatch(session.jobs[job_key], tasks))
        self._ops.clear()


def open_session(snapshot: Snapshot, conf: SchedulerConf, reports: Any = None, now: float | None = None) -> Session:
    return Session(snapshot, conf, reports, time.time() if now is None else now).open()


@contextmanager
def paused_collector() -> Iterator[None]:
    """Python's cyclic garbage collector paused for one decision cycle (snapshot, session, the
    binds assumed), then the young objects collected once, within the cycle. A cycle allocates
    per pod (task clones, statements, bind batches): collections every few hundred allocations
    walked the young objects hundreds of times a cycle and the whole heap (the cache's every pod)
    once or twice. Reference counting frees almost everything as usual meanwhile; what only the
    collector frees (a session and its plugins refer to each other) waits for the end of the
    cycle."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


def run_cycle(snapshot: Snapshot, conf: SchedulerConf, reports: Any = None, now: float | None = None) -> Session:
    """One scheduling cycle on a snapshot the caller owns: open, run the actions, close."""
    session = open_session(snapshot, conf, reports, now)
    session.run_actions()
    session.close()
    return session
