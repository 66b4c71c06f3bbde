"""The scheduler's cache: what the API says about pods, nodes, PodGroups, Queues, PriorityClasses (and PDBs),
kept as the model the sessions work on (scheduler/model.py), updated one event at a time.

Two layers:

- `Cache`, the pure core: `add_*/update_*/delete_*` per kind take API dicts (as an informer hands
  them over), `snapshot()` returns a clone a session may change freely, and `assume()` /
  `confirm()` / `forget()` track binds between a session's commit and the API's answer. No I/O,
  so tests and the benchmark feed it directly.
- `SchedulerCache`, the informer wiring: one Informer per kind whose handlers call the core.

The rules it keeps:

- A pod event changes one task, one job and at most two node rows (old and new node): the node
  table is a `NodeTable` whose arrays are views of larger buffers, so a node joining costs
  amortised O(1) and one leaving moves only the last row into its place.
- Pods whose `schedulerName` is one of ours are tasks. A pod naming a PodGroup
  (`scheduling.k8s.io/group-name`) joins that group's job; until the PodGroup exists it waits
  outside the snapshot (not scheduled). A pod naming none is a gang of one in the queue of its
  `scheduling.volcano.sh/queue-name` annotation (`default` when absent).
- Pods of other schedulers are not tasks of any job, but while bound and not finished they hold
  their node's resources all the same.
- Finished pods (Succeeded/Failed) hold nothing; our finished pods stay in their job (PodGroup
  status counts them). Only pods without `spec.nodeName` are ever placed, so a restarted
  scheduler never binds a pod twice.
- The resource axis grows when a node, pod, PodGroup or Queue names a resource not seen yet;
  every vector is then re-laid on the new axis (rare: once per new extended resource).
- A committed placement is assumed at once (Binding on its node) so the next cycle neither places
  it again nor gives its room away; the pod's own update (nodeName set) confirms it, and a
  failed bind is forgotten, which puts the task back to what its latest pod object says. Until
  then the task's pod shows the annotations the binder writes before the bind (a device
  chosen), so the next cycle counts that device taken.
- A pod update that leaves everything a task derives from its pod but its state alone (a bind,
  a kubelet status: spec, labels and annotations unchanged but `nodeName`) re-uses the derived
  fields (requests, placement class, QoS) instead of parsing the pod again.
- `changes` counts what could make a cycle decide or write something different; the loop skips
  cycles while it stands still after a quiet one (scheduler.py).

Thread-safety: one re-entrant lock around every method; informer threads write, the scheduling
loop snapshots, binder threads confirm and forget. A snapshot shares the cache's jobs, tasks and
node rows' task dicts (`Snapshot.sharing`) and is read without the lock, so the cache never
changes one of those after a snapshot: it copies a job or a node's dict before its first change
since the last snapshot (`_own_job`, `_own_node`), and replaces tasks instead of changing them.
A snapshot stays true until the next one is taken (the loop takes them one at a time, and
nothing reads a session's jobs once the next cycle starts).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from lahar.api import kinds
from lahar.api.node import Node
from lahar.api.nodeshard import NodeShard
from lahar.api.pod import Pod
from lahar.api.podgroup import PodGroup
from lahar.api.quantity import QuantityError
from lahar.api.queue import DEFAULT_QUEUE, Queue
from lahar.client.informer import Informer
from lahar.scheduler.model import (
    OCCUPYING,
    BindBatch,
    JobInfo,
    NodeTable,
    QueueInfo,
    Resources,
    Snapshot,
    TaskInfo,
    TaskStatus,
    default_queue_info,
    job_info,
    queue_info,
    status_of,
    task_info,
)
from lahar.scheduler.shards import NOT_SHARDED, Sharding, ShardScope, shard_nodes, shard_status_patch

log = logging.getLogger("lahar.scheduler.cache")

Obj = Mapping[str, Any]
DEFAULT_SCHEDULER_NAMES = ("lahar", "volcano")
QUEUE_NAME_ANNOTATION = "scheduling.volcano.sh/queue-name"
FOREIGN = ""  # the job key of other schedulers' pods: in no job, only on their node
# Kinds a cluster may not serve (Volcano's topology CRD): their informers do not gate the first cycle.
OPTIONAL_KINDS = frozenset({kinds.HYPERNODE, kinds.RESOURCE_QUOTA, kinds.NODESHARD, kinds.NUMATOPOLOGY})
# Kinds watched only once the configuration names the plugin that reads them: Lahar's embedded
# API server serves no ResourceQuotas, and an informer on them would retry there for ever. Numatopologies
# (Volcano's CRD; the embedded server serves them) are read by numa-aware only.
WATCHED_FOR_PLUGIN = {kinds.RESOURCE_QUOTA: "resourcequota", kinds.NUMATOPOLOGY: "numa-aware"}
_NODE_ARRAYS = ("allocatable", "used", "be_used", "releasing", "be_releasing")
_INITIAL_ROWS = 64


def _remap(vector: np.ndarray, columns: np.ndarray, width: int) -> np.ndarray:
    """A vector (or the rows of a matrix) laid on a wider resource axis: old column i goes to columns[i]."""
    wider = np.zeros((*vector.shape[:-1], width), dtype=np.int64)
    wider[..., columns] = vector
    return wider


class _NodeRows:
    """The cache's node table. `table` is a real NodeTable (exactly one row per node) whose arrays
    are views of buffers with spare rows; each row's task dict is the cache's dict of the tasks on
    that node, shared, so a snapshot's clone sees them."""

    def __init__(self, resources: Resources) -> None:
        self.table = NodeTable(resources, [])
        self._buffers = {name: np.zeros((_INITIAL_ROWS, len(resources)), dtype=np.int64) for name in _NODE_ARRAYS}
        self._schedulable = np.zeros(_INITIAL_ROWS, dtype=bool)
        self._point()

    def _point(self) -> None:
        n = len(self.table.names)
        for name, buffer in self._buffers.items():
            setattr(self.table, name, buffer[:n])
        self.table.schedulable = self._schedulable[:n]

    def _reserve(self, rows: int) -> None:
        capacity = len(self._schedulable)
        if rows <= capacity:
            return
        capacity = max(rows, capacity * 2)
        for name, buffer in self._buffers.items():
            grown = np.zeros((capacity, buffer.shape[1]), dtype=np.int64)
            grown[: len(buffer)] = buffer
            self._buffers[name] = grown
        schedulable = np.zeros(capacity, dtype=bool)
        schedulable[: len(self._schedulable)] = self._schedulable
        self._schedulable = schedulable

    def regrid(self, resources: Resources, columns: np.ndarray) -> None:
        self._buffers = {name: _remap(buffer, columns, len(resources)) for name, buffer in self._buffers.items()}
        self.table.resources = resources
        self._point()

    def upsert(self, node: Node, tasks: dict[str, TaskInfo]) -> bool:
        """Add or refresh a node's row; True if it is new. A new row adds up the tasks already
        known to be on the node (pods may be listed before their node)."""
        table = self.table
        row = table.index.get(node.name)
        new = row is None
        if row is None:
            row = len(table.names)
            self._reserve(row + 1)
            table.index[node.name] = row
            table.names.append(node.name)
            table.nodes.append(node)
            table.labels.append(node.labels)
            table.taints.append(node.taints)
            table.tasks.append(tasks)
            for name in _NODE_ARRAYS:
                self._buffers[name][row] = 0
            self._point()
            for task in tasks.values():
                table.add_task(row, task)
        else:
            table.nodes[row], table.labels[row], table.taints[row] = node, node.labels, node.taints
        table.allocatable[row] = table.resources.vector(node.allocatable)
        table.schedulable[row] = node.ready and not node.unschedulable
        return new

    def remove(self, name: str) -> None:
        table = self.table
        row = table.index.pop(name, None)
        if row is None:
            return
        last = len(table.names) - 1
        columns: tuple[list[Any], ...] = (table.names, table.nodes, table.labels, table.taints, table.tasks)
        if row != last:  # the last row moves into the hole: one row copied, one index entry changed
            for buffer in (*self._buffers.values(), self._schedulable):
                buffer[row] = buffer[last]
            for column in columns:
                column[row] = column[last]
            table.index[table.names[row]] = row
        for column in columns:
            column.pop()
        self._point()

    def row_of(self, name: str) -> int | None:
        return self.table.index.get(name)

    def scheduling_view(self, row: int) -> tuple[Any, ...]:
        """What a session reads of a node row besides its tasks: allocatable, schedulable, labels,
        taints (compared before and after a node event)."""
        table = self.table
        return table.allocatable[row].tobytes(), bool(table.schedulable[row]), table.labels[row], table.taints[row]


def _detach(nodes: NodeTable) -> None:
    """NodeTable.clone shares what a session never changes; the cache does change it (node
    updates), so a snapshot gets its own copies."""
    nodes.allocatable, nodes.schedulable = nodes.allocatable.copy(), nodes.schedulable.copy()
    nodes.nodes, nodes.names, nodes.index = list(nodes.nodes), list(nodes.names), dict(nodes.index)
    nodes.labels, nodes.taints = list(nodes.labels), list(nodes.taints)


def _superseded(incoming: Any, held: Any | None) -> bool:
    """Whether an object (a view) is older than the one held. The status writer feeds its own
    writes back before the informer delivers them, so the informer's earlier events must not undo
    them. Only numeric versions compare (etcd's and the embedded server's); opaque ones never do."""
    if held is None:
        return False
    try:
        return int(incoming.meta.resource_version) < int(held.meta.resource_version)
    except ValueError:
        return False


def _news(incoming: Any, held: Any | None, written: bool) -> bool | None:
    """How a PodGroup or Queue event counts: None to ignore it (older than the one held, or the
    same: an informer's echo of a write already fed back), False to keep it without counting a
    change (the status writer's own write coming back with nothing else changed: the cycle that
    wrote it decided that status, and was not quiet, so a cycle follows anyway), True otherwise."""
    if held is None:
        return True
    if _superseded(incoming, held) or incoming.raw == held.raw:
        return None
    return not (written and _without_status(incoming.raw) == _without_status(held.raw))


def _without_status(obj: Obj) -> Obj:
    return {**obj, "status": None, "metadata": {**(obj.get("metadata") or {}), "resourceVersion": None}}


def _resource_names(what: str, read: Callable[[], Iterable[str]]) -> list[str] | None:
    """The resources an object's quantities name; None (logged) when they cannot be read. The API
    validates quantities, so such an object is left out rather than failing its informer."""
    try:
        return list(read())
    except QuantityError as exc:
        log.error("%s: unreadable resources, left out: %s", what, exc)
        return None


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _same_inputs(old: Pod, new: Pod) -> bool:
    """Whether two versions of a pod give the same task but for its state (status, node): the same
    spec but `nodeName`, labels, annotations and API QoS class. True of the updates a bind and the
    kubelet's status reports make, the bulk of pod events."""
    if old.meta.labels != new.meta.labels or old.meta.annotations != new.meta.annotations:
        return False
    if old.status.get("qosClass") != new.status.get("qosClass"):
        return False
    return {**old.spec, "nodeName": None} == {**new.spec, "nodeName": None}


def _restated(task: TaskInfo, pod: Pod) -> TaskInfo:
    """`task` as a new version of its pod states it, keeping what it derived from the pod (only
    valid when `_same_inputs(task.pod, pod)`). A new object: snapshots may still hold the old one."""
    fresh = task.clone()
    fresh.pod, fresh.status, fresh.node = pod, status_of(pod), pod.node_name
    return fresh


def with_annotations(pod: Pod, wanted: Mapping[str, str]) -> Pod:
    """The pod as it will read once `wanted` is written on it: a new view over a copy of its
    object (the informer's object is not changed), or the pod itself if it shows them already."""
    current = pod.meta.annotations
    if all(current.get(key) == value for key, value in wanted.items()):
        return pod
    metadata = {**(pod.raw.get("metadata") or {}), "annotations": {**current, **wanted}}
    return Pod({**pod.raw, "metadata": metadata})


class Cache:
    """The pure core (see the module docstring). `on_work` is called, outside the lock and on the
    caller's thread (keep it short: set an event), when something arrives that a cycle may
    place: a pending pod of ours, a PodGroup, a Queue, a node, or room a nominated gang waits
    for (`_room_freed`)."""

    def __init__(
        self,
        scheduler_names: Sequence[str] = DEFAULT_SCHEDULER_NAMES,
        on_work: Callable[[], None] | None = None,
        sharding: Sharding = NOT_SHARDED,
    ) -> None:
        self.scheduler_names = frozenset(scheduler_names)
        self.on_work = on_work
        # Whether a PodGroup short of minMember pods is left out of the session (the gang
        # plugin's job_valid; the scheduler sets it from each cycle's session): `_short_gang`.
        self.gangs_wait = False
        self.sharding = sharding
        self._lock = threading.RLock()
        self.resources = Resources()
        self._rows = _NodeRows(self.resources)
        self._tasks: dict[str, TaskInfo] = {}  # every pod the cache tracks, by uid
        self._on_node: dict[str, dict[str, TaskInfo]] = {}  # node name -> tasks holding resources there
        self._jobs: dict[str, JobInfo] = {}
        self._waiting: dict[str, dict[str, TaskInfo]] = {}  # group key -> tasks whose PodGroup is not here yet
        self._podgroups: dict[str, PodGroup] = {}
        self._queues: dict[str, QueueInfo] = {}
        self._queue_views: dict[str, Queue] = {}
        self._priority_classes: dict[str, Obj] = {}
        self._budgets: dict[str, Obj] = {}  # PodDisruptionBudgets by namespace/name, for the pdb plugin
        self._hypernodes: dict[str, Obj] = {}  # HyperNodes by name, for network-topology-aware
        self._quotas: dict[str, Obj] = {}  # ResourceQuotas by namespace/name, for the resourcequota plugin
        self._shards: dict[str, NodeShard] = {}  # NodeShards by name, for a sharded scheduler
        # Pending tasks lined up for room their victims are freeing: uid -> (job key, node name).
        self._nominated: dict[str, tuple[str, str]] = {}
        # As `nominate` last saw them: job key -> its nominated nodes; node -> the jobs nominated there.
        self._nominated_nodes: dict[str, set[str]] = {}
        self._nominated_jobs: dict[str, set[str]] = {}
        # The nodes of this scheduler's shard (scheduler/shards.py), kept while its NodeShard is gone.
        self._shard_nodes: frozenset[str] = frozenset()
        self._numatopologies: dict[str, Obj] = {}  # Numatopologies by "/name", for the numa-aware plugin
        self._assumed: dict[str, str] = {}  # uid -> node of a bind in flight
        # uid -> the annotations the binder writes on the pod before that bind (a device chosen):
        # the pod shows them from the assumption on, so the next cycle counts the device taken.
        self._assumed_annotations: dict[str, Mapping[str, str]] = {}
        self._evicting: set[str] = set()  # uids whose eviction is in flight
        # The jobs and nodes' task dicts copied since the last snapshot (the others are shared).
        self._owned_jobs: set[str] = set()
        self._owned_nodes: set[str] = set()
        self._changes = 0  # see `changes`
        self._confirmations = 0  # see `confirmations`

    # -- reads -----------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """A clone of the cluster for one session (it may change task states and node usage)."""
        with self._lock:
            queues = dict(self._queues)
            if DEFAULT_QUEUE not in queues:  # Volcano creates it; a session must always have it
                queues[DEFAULT_QUEUE] = default_queue_info(self.resources)
            snapshot = Snapshot.sharing(
                self.resources,
                self._rows.table,
                self._jobs,
                queues,
                self._priority_values(),
                tuple(self._budgets.values()),
                tuple(self._hypernodes.values()),
                tuple(self._quotas.values()),
                ShardScope(self.sharding.mode, self._shard_nodes) if self.sharding.enabled else None,
                tuple(self._numatopologies.values()),
            )
            snapshot.nominated = self._still_nominated()
            _detach(snapshot.nodes)
            # Shared from now on, but for the jobs the snapshot cloned: their objects here are no
            # longer its. The set is the snapshot's own, so the jobs its session clones later
            # (victims) join it too: from then on the session reads only its clone of the job
            # (tasks are never changed in place, so a task it still holds stays as it was).
            assert snapshot.owned is not None  # a sharing snapshot keeps the set
            self._owned_jobs, self._owned_nodes = snapshot.owned, set()
        return snapshot

    def nominate(self, pipelined: Iterable[TaskInfo]) -> None:
        """Remember the node each task a session pipelined was lined up for, until it leaves
        Pending (bound or deleted) or is lined up elsewhere: the next sessions keep that room
        reserved for it (`Session.reserve_nominated`)."""
        with self._lock:
            for task in pipelined:
                self._nominated[task.uid] = (task.job, task.node)
            self._nominated = self._still_nominated()
            self._nominated_nodes = {}
            self._nominated_jobs = {}
            for job, node in self._nominated.values():
                self._nominated_nodes.setdefault(job, set()).add(node)
                self._nominated_jobs.setdefault(node, set()).add(job)

    def _still_nominated(self) -> dict[str, tuple[str, str]]:
        """The nominations whose task is still pending and whose node is still here."""
        index = self._rows.table.index
        return {
            uid: (job, node)
            for uid, (job, node) in self._nominated.items()
            if node in index
            and (task := self._tasks.get(uid)) is not None
            and task.status is TaskStatus.PENDING
            and not task.node
        }

    def node_names(self) -> list[str]:
        with self._lock:
            return list(self._rows.table.names)

    def task(self, uid: str) -> TaskInfo | None:
        with self._lock:
            return self._tasks.get(uid)

    def job(self, key: str) -> JobInfo | None:
        with self._lock:
            return self._jobs.get(key)

    def podgroup(self, key: str) -> PodGroup | None:
        with self._lock:
            return self._podgroups.get(key)

    def queue(self, name: str) -> Queue | None:
        with self._lock:
            return self._queue_views.get(name)

    def waiting(self) -> int:
        """Pods of ours waiting for their PodGroup to be created."""
        with self._lock:
            return sum(len(tasks) for tasks in self._waiting.values())

    @property
    def changes(self) -> int:
        """How many times what a cycle reads has changed: every event that changes a task, a node,
        a PodGroup, a Queue or a PriorityClass as the cache holds them, and every bind or eviction
        that failed. Not moved by what a cycle decided itself (`assume`, `assume_evicted`: its
        session counted those already), by updates that change nothing the cache keeps (an
        object as it was, a pod's status conditions), nor by confirmations (`confirmations`).
        While it stands still after a quiet cycle, the next one would decide nothing new."""
        return self._changes

    @property
    def confirmations(self) -> int:
        """How many assumed binds the API has confirmed (a Binding task now Bound on the same
        node). Apart from `changes` because it matters only with work pending: a confirmed task
        becomes a possible victim for preempt and reclaim, nothing else reads the difference."""
        return self._confirmations

    def pending_work(self) -> bool:
        """Whether any job has a task waiting to be placed (admitted or not)."""
        with self._lock:
            return any(job.by_status.get(TaskStatus.PENDING) for job in self._jobs.values())

    # -- pods ------------------------------------------------------------------------------------

    def add_pod(self, obj: Obj) -> None:
        self._upsert_pod(obj)

    def update_pod(self, old: Obj | None, new: Obj) -> None:
        self._upsert_pod(new)

    def delete_pod(self, obj: Obj) -> None:
        uid = Pod(obj).uid
        work = False
        with self._lock:
            self._assumed.pop(uid, None)
            self._assumed_annotations.pop(uid, None)
            self._evicting.discard(uid)
            task = self._tasks.get(uid)
            if task is not None:
                self._remove(task)
                self._changes += 1
                work = self._room_freed(task.node)
        if work:
            self._notify()

    def _room_freed(self, node: str) -> bool:
        """Whether a pod gone from `node` completed the room a nominated job waits for: a job
        with a task nominated there now has nothing left releasing on any of its nominated
        nodes (its last victim is gone), so the next cycle may bind it. A gang binds whole, so
        a victim gone while others of its gang's victims still go wakes nothing: the job's
        last one does (a wave of 50 gangs wakes 50 cycles, not one per victim). The periodic
        cycle would find it too, up to a period later; the wave's gangs would then bind a
        period apart."""
        jobs = self._nominated_jobs.get(node)
        if not jobs:
            return False
        table, index = self._rows.table, self._rows.table.index
        for job in jobs:
            rows = [index.get(name) for name in self._nominated_nodes[job]]
            if all(row is None or not (table.releasing[row].any() or table.be_releasing[row].any()) for row in rows):
                return True
        return False

    def _upsert_pod(self, obj: Obj) -> None:
        pod = Pod(obj)
        ours = pod.scheduler_name in self.scheduler_names
        with self._lock:
            old = self._tasks.get(pod.uid)
            if not ours and not (pod.is_assigned and not pod.is_terminal):
                if old is not None:
                    self._remove(old)  # another scheduler's pod finished: its room is free
                    self._changes += 1
                return
            same = old is not None and _same_inputs(old.pod, pod)
            if same and old is not None:
                task = _restated(old, pod)
            else:
                self._cover(pod.requests)
                task = task_info(pod, self._job_key(pod) if ours else FOREIGN, self.resources)
            self._apply_assumptions(task)
            if old is not None:
                self._remove(old, keep_job=old.job == task.job)
            self._add(task)
            if old is None or not same or (old.status, old.node) != (task.status, task.node):
                if same and old is not None and old.status is TaskStatus.BINDING and task.status is TaskStatus.BOUND:
                    self._confirmations += 1  # on the node assumed: nodes and gangs hold what they held
                else:
                    self._changes += 1
            work = (
                ours
                and task.status is TaskStatus.PENDING
                and (old is None or old.status is not TaskStatus.PENDING)
                and not self._short_gang(task.job)
            )
        if work:
            self._notify()

    def _short_gang(self, key: str) -> bool:
        """Whether the job is a PodGroup's with fewer pods than its minMember while the gang
        plugin holds such a job back (`gangs_wait`): nothing of it can be placed, so a member's
        arrival does not wake the loop; the arrival that completes it does. A gang created pod by
        pod (a 20-pod job) then costs one cycle, not one per arrival; the periodic cycle still
        sees every change."""
        if not self.gangs_wait:
            return False
        job = self._jobs.get(key)
        return job is not None and job.podgroup is not None and len(job.tasks) < job.min_member

    @staticmethod
    def _job_key(pod: Pod) -> str:
        # A lone pod's job is keyed by its own name (the model's convention), in the PodGroups'
        # key space: a lone pod named like a PodGroup of its namespace would count in that gang.
        return _key(pod.namespace, pod.group_name or pod.name)

    def _apply_assumptions(self, task: TaskInfo) -> None:
        """A bind or eviction in flight outlives pod updates that do not show its outcome yet."""
        node = self._assumed.get(task.uid)
        if node is not None:
            if task.status is TaskStatus.PENDING:
                task.status, task.node = TaskStatus.BINDING, node
                wanted = self._assumed_annotations.get(task.uid)
                if wanted:
                    task.pod = with_annotations(task.pod, wanted)
            else:  # bound (the bind landed), deleting or finished: the API has the last word now
                del self._assumed[task.uid]
                self._assumed_annotations.pop(task.uid, None)
        if task.uid in self._evicting:
            if task.status in (TaskStatus.BOUND, TaskStatus.RUNNING):
                task.status = TaskStatus.RELEASING
            else:
                self._evicting.discard(task.uid)

    # -- copy on write (see the module docstring) ----------------------------------------------------

    def _own_job(self, key: str) -> JobInfo:
        """The job, copied first if a snapshot may share it."""
        job = self._jobs[key]
        if key not in self._owned_jobs:
            job = self._jobs[key] = job.copy()
            self._owned_jobs.add(key)
        return job

    def _new_job(self, job: JobInfo) -> JobInfo:
        self._jobs[job.key] = job
        self._owned_jobs.add(job.key)
        return job

    def _own_node(self, name: str) -> dict[str, TaskInfo]:
        """The node's task dict (its table row's), copied first if a snapshot may share it."""
        tasks = self._on_node.get(name)
        if tasks is None or name not in self._owned_nodes:
            tasks = self._on_node[name] = dict(tasks or {})
            row = self._rows.row_of(name)
            if row is not None:
                self._rows.table.tasks[row] = tasks
            self._owned_nodes.add(name)
        return tasks

    def _add(self, task: TaskInfo) -> None:
        self._tasks[task.uid] = task
        if task.node and task.status in OCCUPYING:
            self._own_node(task.node)[task.uid] = task
            row = self._rows.row_of(task.node)
            if row is not None:
                self._rows.table.add_task(row, task)
        if task.job == FOREIGN:
            return
        if task.job in self._jobs:
            self._own_job(task.job).add(task)
        elif task.pod.group_name is None:
            self._new_job(self._lone_job(task)).add(task)
        else:
            self._waiting.setdefault(task.job, {})[task.uid] = task

    def _remove(self, task: TaskInfo, keep_job: bool = False) -> None:
        """Take a task out of every index; `keep_job`: its lone job stays even when empty (the
        task's next version goes back into it)."""
        del self._tasks[task.uid]
        if task.uid in self._on_node.get(task.node, ()):
            on_node = self._own_node(task.node)
            del on_node[task.uid]
            row = self._rows.row_of(task.node)
            if row is not None:
                self._rows.table.remove_task(row, task)
            elif not on_node:
                del self._on_node[task.node]
        if task.job == FOREIGN:
            return
        job = self._jobs.get(task.job)
        if job is not None:
            job = self._own_job(task.job)
            job.remove(task.uid)
            if job.podgroup is None and not job.tasks and not keep_job:
                del self._jobs[task.job]
            return
        waiting = self._waiting.get(task.job)
        if waiting is not None:
            waiting.pop(task.uid, None)
            if not waiting:
                del self._waiting[task.job]

    def _lone_job(self, task: TaskInfo) -> JobInfo:
        """A pod without a PodGroup: a gang of one, in the queue its annotation names."""
        pod = task.pod
        job = job_info(task.job, pod.namespace, pod.name, None, pod.priority, self.resources, task.creation)
        job.queue = pod.meta.annotations.get(QUEUE_NAME_ANNOTATION) or DEFAULT_QUEUE
        return job

    # -- binds and evictions in flight -------------------------------------------------------------

    def assume(self, batch: BindBatch, annotations: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """Mark a committed batch's tasks Binding on the nodes the session chose (before the binds
        are sent), so the next snapshot counts them where they are going, their pods showing the
        `annotations` (task uid -> key -> value) the binder writes before each bind."""
        with self._lock:
            for placed in batch.tasks:
                task = self._tasks.get(placed.uid)
                if task is None or task.status is not TaskStatus.PENDING or not placed.node:
                    continue  # deleted, or already bound meanwhile: the bind will tell
                self._assumed[task.uid] = placed.node
                wanted = annotations.get(task.uid) if annotations else None
                if wanted:
                    self._assumed_annotations[task.uid] = wanted
                self._move(task, TaskStatus.BINDING, placed.node, wanted)

    def assume_evicted(self, tasks: Iterable[TaskInfo]) -> None:
        """Mark victims Releasing at once, so the next cycle neither evicts them again nor counts
        their room as theirs to keep."""
        with self._lock:
            for victim in tasks:
                task = self._tasks.get(victim.uid)
                if task is not None and task.status in (TaskStatus.BOUND, TaskStatus.RUNNING):
                    self._evicting.add(task.uid)
                    self._move(task, TaskStatus.RELEASING, task.node)

    def confirm(self, uid: str) -> None:
        """The bind was accepted. The task stays Binding until its pod update shows the node (the
        informer's view must catch up before a cycle may trust it)."""

    def forget(self, uid: str) -> None:
        """A bind or eviction failed: the task goes back to what its latest pod object says (a
        failed bind is placed again by a later cycle)."""
        with self._lock:
            self._assumed.pop(uid, None)
            self._assumed_annotations.pop(uid, None)
            self._evicting.discard(uid)
            task = self._tasks.get(uid)
            if task is not None:
                self._refresh(task)
            self._changes += 1

    def assumed(self) -> dict[str, str]:
        with self._lock:
            return dict(self._assumed)

    def _move(
        self, task: TaskInfo, status: TaskStatus, node: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        """Put a task in another state or place, as an assumption does (what `_refresh` would
        derive, without reading the pod again)."""
        moved = task.clone()
        moved.status, moved.node = status, node
        if annotations:
            moved.pod = with_annotations(moved.pod, annotations)
        self._remove(task, keep_job=True)
        self._add(moved)

    def _refresh(self, task: TaskInfo) -> None:
        """Re-state a task from its pod object and the assumptions, and put it back in place."""
        fresh = _restated(task, task.pod)
        self._apply_assumptions(fresh)
        self._remove(task, keep_job=True)
        self._add(fresh)

    # -- nodes -----------------------------------------------------------------------------------

    def add_node(self, obj: Obj) -> None:
        self._upsert_node(obj)

    def update_node(self, old: Obj | None, new: Obj) -> None:
        self._upsert_node(new)

    def delete_node(self, obj: Obj) -> None:
        name = Node(obj).name
        with self._lock:
            self._changes += 1
            self._rows.remove(name)
            if name in self._on_node and not self._on_node[name]:
                del self._on_node[name]  # pods still on a vanished node keep their entry

    def _upsert_node(self, obj: Obj) -> None:
        node = Node(obj)
        allocatable = _resource_names(f"node {node.name}", lambda: node.allocatable)
        if allocatable is None:
            return
        with self._lock:
            table = self._rows.table
            row = self._rows.row_of(node.name)
            was = None if row is None else self._rows.scheduling_view(row)
            self._cover(allocatable)
            new = self._rows.upsert(node, self._on_node.setdefault(node.name, {}))
            row = self._rows.row_of(node.name)
            assert row is not None, "upsert placed it"
            if was != self._rows.scheduling_view(row):  # heartbeats and conditions change nothing
                self._changes += 1
            work = new or (bool(table.schedulable[row]) and not (was is not None and was[1]))
        if work:
            self._notify()

    # -- PodGroups -------------------------------------------------------------------------------

    def add_podgroup(self, obj: Obj) -> None:
        self._upsert_podgroup(obj)

    def update_podgroup(self, old: Obj | None, new: Obj, *, written: bool = False) -> None:
        """`written`: the status writer's own write, as the API answered it."""
        self._upsert_podgroup(new, written)

    def delete_podgroup(self, obj: Obj) -> None:
        group = PodGroup(obj)
        with self._lock:
            self._changes += 1
            self._podgroups.pop(group.key, None)
            job = self._jobs.pop(group.key, None)
            if job is not None and job.tasks:
                self._waiting[group.key] = dict(job.tasks)  # its pods wait for a PodGroup again

    def _upsert_podgroup(self, obj: Obj, written: bool = False) -> None:
        group = PodGroup(obj)
        key = group.key
        min_resources = _resource_names(f"PodGroup {key}", lambda: group.min_resources)
        if min_resources is None:
            return
        with self._lock:
            known = self._podgroups.get(key)
            news = _news(group, known, written)
            if news is None:
                return
            if news:
                self._changes += 1
            self._podgroups[key] = group
            self._cover(min_resources)
            old = self._jobs.get(key)
            job = job_info(key, group.namespace, group.name, group, self._podgroup_priority(group), self.resources)
            members = old.tasks.values() if old is not None else self._waiting.pop(key, {}).values()
            for task in members:
                job.add(task)
            self._new_job(job)
        if known is None:
            self._notify()

    # -- Queues and PriorityClasses ---------------------------------------------------------------

    def add_queue(self, obj: Obj) -> None:
        self._upsert_queue(obj)

    def update_queue(self, old: Obj | None, new: Obj, *, written: bool = False) -> None:
        """`written`: the status writer's own write, as the API answered it."""
        self._upsert_queue(new, written)

    def delete_queue(self, obj: Obj) -> None:
        with self._lock:
            self._changes += 1
            name = Queue(obj).name
            self._queues.pop(name, None)
            self._queue_views.pop(name, None)

    def _upsert_queue(self, obj: Obj, written: bool = False) -> None:
        queue = Queue(obj)
        named = _resource_names(f"queue {queue.name}", lambda: [*queue.capability, *queue.guarantee, *queue.deserved])
        if named is None:
            return
        with self._lock:
            known = self._queue_views.get(queue.name)
            news = _news(queue, known, written)
            if news is None:
                return
            if news:
                self._changes += 1
            self._cover(named)
            self._queue_views[queue.name] = queue
            self._queues[queue.name] = queue_info(queue, self.resources)
        if known is None:
            self._notify()

    def add_priority_class(self, obj: Obj) -> None:
        self._upsert_priority_class(obj)

    def update_priority_class(self, old: Obj | None, new: Obj) -> None:
        self._upsert_priority_class(new)

    def delete_priority_class(self, obj: Obj) -> None:
        with self._lock:
            self._changes += 1
            self._priority_classes.pop((obj.get("metadata") or {}).get("name", ""), None)
            self._reprioritise()

    def _upsert_priority_class(self, obj: Obj) -> None:
        with self._lock:
            self._changes += 1
            self._priority_classes[(obj.get("metadata") or {}).get("name", "")] = obj
            self._reprioritise()

    def add_disruption_budget(self, obj: Obj) -> None:
        self._keep(self._budgets, obj)

    def update_disruption_budget(self, old: Obj | None, new: Obj) -> None:
        self._keep(self._budgets, new)

    def delete_disruption_budget(self, obj: Obj) -> None:
        self._keep(self._budgets, obj, deleted=True)

    def add_resource_quota(self, obj: Obj) -> None:
        self._keep(self._quotas, obj)
        self._notify()  # a quota raised may admit a waiting PodGroup

    def update_resource_quota(self, old: Obj | None, new: Obj) -> None:
        self._keep(self._quotas, new)
        self._notify()

    def delete_resource_quota(self, obj: Obj) -> None:
        self._keep(self._quotas, obj, deleted=True)

    def add_numatopology(self, obj: Obj) -> None:
        self._keep(self._numatopologies, obj)
        self._notify()  # a node's NUMA report may make room for a pinned pod

    def update_numatopology(self, old: Obj | None, new: Obj) -> None:
        self.add_numatopology(new)

    def delete_numatopology(self, obj: Obj) -> None:
        self._keep(self._numatopologies, obj, deleted=True)

    def _keep(self, store: dict[str, Obj], obj: Obj, deleted: bool = False) -> None:
        """Store (or drop) a namespaced object the plugins read as it is, by namespace/name."""
        metadata = obj.get("metadata") or {}
        key = _key(metadata.get("namespace", ""), metadata.get("name", ""))
        with self._lock:
            self._changes += 1
            if deleted:
                store.pop(key, None)
            else:
                store[key] = obj

    def add_hypernode(self, obj: Obj) -> None:
        self._upsert_hypernode(obj)

    def update_hypernode(self, old: Obj | None, new: Obj) -> None:
        self._upsert_hypernode(new)

    def delete_hypernode(self, obj: Obj) -> None:
        with self._lock:
            self._changes += 1
            self._hypernodes.pop((obj.get("metadata") or {}).get("name", ""), None)

    def _upsert_hypernode(self, obj: Obj) -> None:
        with self._lock:
            self._changes += 1
            self._hypernodes[(obj.get("metadata") or {}).get("name", "")] = obj

    def add_nodeshard(self, obj: Obj) -> None:
        self._upsert_nodeshard(obj)

    def update_nodeshard(self, old: Obj | None, new: Obj) -> None:
        self._upsert_nodeshard(new)

    def delete_nodeshard(self, obj: Obj) -> None:
        with self._lock:
            self._shards.pop((obj.get("metadata") or {}).get("name", ""), None)
            self._reshard()

    def _upsert_nodeshard(self, obj: Obj) -> None:
        with self._lock:
            self._shards[(obj.get("metadata") or {}).get("name", "")] = NodeShard(obj)
            self._reshard()

    def _reshard(self) -> None:
        """This scheduler's shard's nodes again, after a NodeShard event (ours or another's: a
        node another shard lets go becomes ours)."""
        if not self.sharding.enabled:
            return
        nodes = shard_nodes(self._shards, self.sharding.name)
        if nodes is None:
            log.warning("sharding is on but NodeShard %r does not exist: the shard keeps its nodes", self.sharding.name)
            return
        if nodes != self._shard_nodes:
            self._shard_nodes = nodes
            self._changes += 1
            self._notify()  # nodes joining the shard may take pending work

    @property
    def shard_nodes(self) -> frozenset[str]:
        with self._lock:
            return self._shard_nodes

    def nodeshard_status(self, now: str) -> tuple[str, str, dict[str, Any]] | None:
        """This scheduler's NodeShard status to write (`shard_status_patch`): its name, the
        resourceVersion the patch was computed against and the patch; None when sharding is off,
        the shard does not exist, or its status already says what the scheduler uses."""
        with self._lock:
            shard = self._shards.get(self.sharding.name) if self.sharding.enabled else None
            if shard is None:
                return None
            patch = shard_status_patch(shard, self._shard_nodes, now)
            return None if patch is None else (self.sharding.name, shard.meta.resource_version, patch)

    def _priority_values(self) -> dict[str, int]:
        return {name: int(obj.get("value") or 0) for name, obj in self._priority_classes.items()}

    def _podgroup_priority(self, group: PodGroup) -> int:
        """Volcano's rule: the PodGroup's PriorityClass, else the global default class, else 0.
        (Pods carry their own priority: the API's admission resolves it at creation.)"""
        named = self._priority_classes.get(group.priority_class_name) if group.priority_class_name else None
        if named is None and not group.priority_class_name:
            named = next((pc for pc in self._priority_classes.values() if pc.get("globalDefault")), None)
        return int(named.get("value") or 0) if named is not None else 0

    def _reprioritise(self) -> None:
        # Rare (PriorityClasses change seldom): every PodGroup's job priority again.
        for key, job in list(self._jobs.items()):
            if job.podgroup is not None:
                priority = self._podgroup_priority(job.podgroup)
                if priority != job.priority:
                    self._own_job(key).priority = priority

    # -- the resource axis -----------------------------------------------------------------------

    def _cover(self, names: Iterable[str]) -> None:
        """Grow the resource axis to hold `names`, re-laying every vector on it."""
        missing = set(names) - set(self.resources.column)
        if not missing:
            return
        old = self.resources
        new = Resources([*old.names, *missing])
        columns = np.array([new.column[name] for name in old.names], dtype=np.intp)
        width = len(new)
        self._rows.regrid(new, columns)
        for task in list(self._tasks.values()):
            wider = task.clone()  # a snapshot may hold the task: replace it, never change it
            wider.request = _remap(task.request, columns, width)
            self._replace(task, wider)
        for key in list(self._jobs):
            job = self._own_job(key)
            job.min_resources = _remap(job.min_resources, columns, width)
            if job.totals is not None:
                job.totals = _remap(job.totals, columns, width)
        self._queues = {name: queue_info(queue, new) for name, queue in self._queue_views.items()}
        self.resources = new
        log.info("resource axis now %s", ", ".join(new.names))

    def _replace(self, task: TaskInfo, same: TaskInfo) -> None:
        """Put `same` (the task with the same state and place) wherever `task` is, node usage
        aside (the caller keeps it right)."""
        self._tasks[task.uid] = same
        if task.uid in self._on_node.get(task.node, ()):
            self._own_node(task.node)[task.uid] = same
        if task.job in self._jobs:
            job = self._own_job(task.job)
            job.tasks[task.uid] = job.by_status[task.status][task.uid] = same
        elif task.uid in self._waiting.get(task.job, ()):
            self._waiting[task.job][task.uid] = same

    def _notify(self) -> None:
        if self.on_work is not None:
            self.on_work()


class SchedulerCache(Cache):
    """The core fed by informers on Pods, Nodes, PodGroups, Queues, PriorityClasses,
    PodDisruptionBudgets, HyperNodes and ResourceQuotas (the last two optional). Informers
    re-list on watch expiry and retry an unreachable API with backoff, keeping what they have."""

    def __init__(
        self,
        api: Any,
        scheduler_names: Sequence[str] = DEFAULT_SCHEDULER_NAMES,
        on_work: Callable[[], None] | None = None,
        sharding: Sharding = NOT_SHARDED,
    ) -> None:
        super().__init__(scheduler_names, on_work, sharding)
        self.api = api
        wiring = (
            (kinds.NODE, self.add_node, self.update_node, self.delete_node),
            (kinds.PRIORITY_CLASS, self.add_priority_class, self.update_priority_class, self.delete_priority_class),
            (kinds.PDB, self.add_disruption_budget, self.update_disruption_budget, self.delete_disruption_budget),
            (kinds.HYPERNODE, self.add_hypernode, self.update_hypernode, self.delete_hypernode),
            (kinds.RESOURCE_QUOTA, self.add_resource_quota, self.update_resource_quota, self.delete_resource_quota),
            (kinds.NODESHARD, self.add_nodeshard, self.update_nodeshard, self.delete_nodeshard),
            (kinds.NUMATOPOLOGY, self.add_numatopology, self.update_numatopology, self.delete_numatopology),
            (kinds.QUEUE, self.add_queue, self.update_queue, self.delete_queue),
            (kinds.PODGROUP, self.add_podgroup, self.update_podgroup, self.delete_podgroup),
            (kinds.POD, self.add_pod, self.update_pod, self.delete_pod),
        )
        self.informers = [
            Informer(kind, api, on_add=add, on_update=update, on_delete=delete) for kind, add, update, delete in wiring
        ]

    def start(self, sync_timeout: float = 30.0, plugin_names: Collection[str] = ()) -> bool:
        """Start the informers the configuration needs (`start_informers`); True once all have
        listed (False: the API is not reachable yet, they keep trying in the background)."""
        self.start_informers(plugin_names)
        return self.wait_for_sync(sync_timeout)

    def start_informers(self, plugin_names: Collection[str]) -> None:
        """Start each informer not running yet whose kind is always watched or read by one of
        `plugin_names` (WATCHED_FOR_PLUGIN); asked again as the configuration changes."""
        for informer in self.informers:
            reader = WATCHED_FOR_PLUGIN.get(informer.kind)
            if informer.kind is kinds.NODESHARD and not self.sharding.enabled:
                continue  # NodeShards matter only to a sharded scheduler
            if not informer.running and (reader is None or reader in plugin_names):
                informer.start()

    @property
    def required(self) -> list[Informer]:
        """The informers a cycle waits for: not the HyperNodes', whose kind a cluster without
        Volcano's topology CRD does not serve (NodeShards: only when sharding is on, so that a
        sharded scheduler's first cycle knows its shard) (its informer retries in the background; until it
        lists, sessions see no HyperNodes)."""
        return [
            informer
            for informer in self.informers
            if informer.kind not in OPTIONAL_KINDS or (informer.kind is kinds.NODESHARD and self.sharding.enabled)
        ]

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return all(informer.wait_for_sync(timeout) for informer in self.required)

    @property
    def synced(self) -> bool:
        return all(informer.has_synced for informer in self.required)

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()
