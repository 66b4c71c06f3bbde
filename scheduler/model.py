"""What a scheduling session works on: tasks (pods), jobs (gangs), queues and the node table.

The cache builds these from the API objects; a session works on a snapshot and its statements
change them in place. A snapshot is either a deep copy (`Snapshot.clone()`) or, as the cache
takes them, shares what its session will not change (`Snapshot.sharing`): the jobs with nothing
to place and the node rows' task dicts stay the cache's (which copies them before changing them
itself), and the session clones one on its first change (`Session._own`).

Resource amounts are int64 vectors over the snapshot's resource axis (`Resources`), in the base
units of `lahar.api.resources` (cpu in millicores, memory in bytes, everything else a count).
Nodes are rows of arrays (`NodeTable`), so a predicate or a score over every node is a few numpy
operations.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from lahar.api.node import Node, Taint
from lahar.api.pod import PREEMPTABLE_KEY, Pod, Toleration, preemptable_flag
from lahar.api.podgroup import PodGroup, PodGroupPhase
from lahar.api.qos import QoSClass
from lahar.api.queue import DEFAULT_QUEUE, Queue, QueueState
from lahar.api.resources import ResourceList
from lahar.scheduler.shards import ShardScope

# Volcano's task-name annotation (the controller sets it; Spark/Kubeflow pods may not have it).
TASK_SPEC_ANNOTATION = "volcano.sh/task-spec"
CPU, MEMORY, PODS = "cpu", "memory", "pods"
BASE_RESOURCES = (CPU, MEMORY, PODS)
LENT_COLUMNS = (CPU, MEMORY)  # what agents report as reclaimable; the first columns of every axis

Rows = slice | np.ndarray  # which node rows a predicate or score is asked about


class Resources:
    """The resource axis of a snapshot: names in column order (cpu, memory, pods first)."""

    __slots__ = ("column", "names", "quota_columns")

    def __init__(self, names: Iterable[str] = ()) -> None:
        ordered = list(BASE_RESOURCES) + sorted(set(names) - set(BASE_RESOURCES))
        self.names: tuple[str, ...] = tuple(ordered)
        self.column: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        # The columns queue quotas and fair shares count: every resource but pod slots (Volcano's
        # Resource keeps the pod count apart too), so a queue's share is never its pod count.
        self.quota_columns: np.ndarray = np.array(
            [i for i, name in enumerate(self.names) if name != PODS], dtype=np.intp
        )

    def __len__(self) -> int:
        return len(self.names)

    def vector(self, resources: Mapping[str, int]) -> np.ndarray:
        """A resource list as an int64 vector over this axis (an unknown resource raises)."""
        vector = np.zeros(len(self.names), dtype=np.int64)
        for name, amount in resources.items():
            if amount:
                vector[self.column[name]] = amount
        return vector

    def to_list(self, vector: np.ndarray) -> ResourceList:
        return ResourceList.from_vector(self.names, vector).without_zeros()

    def describe(self, vector: np.ndarray) -> str:
        """`cpu=2, memory=4Gi` for messages."""
        listed = self.to_list(vector)
        return ", ".join(f"{name}={listed.quantity(name)}" for name in listed) or "nothing"


class TaskStatus(enum.Enum):
    """Volcano's task states; a session moves tasks between them, the cache maps pods to them."""

    PENDING = "Pending"
    ALLOCATED = "Allocated"  # placed in this session, not yet bound
    PIPELINED = "Pipelined"  # placed on resources that victims are releasing
    BINDING = "Binding"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"  # being evicted or deleted
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"

    # Members are singletons, so identity hashes them; Enum's own hashes the name in Python,
    # and the by-status dicts are looked up per task on the hot path.
    __hash__ = object.__hash__


# Tasks that hold resources on their node.
OCCUPYING = frozenset(
    {
        TaskStatus.ALLOCATED,
        TaskStatus.PIPELINED,
        TaskStatus.BINDING,
        TaskStatus.BOUND,
        TaskStatus.RUNNING,
        TaskStatus.RELEASING,
    }
)
# Tasks that count towards a gang being ready (Volcano's ReadyTaskNum).
READY = frozenset(
    {TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING, TaskStatus.SUCCEEDED}
)
# Tasks charged to their job's and queue's share: occupying and not being given back. The
# session's allocate/deallocate handlers move a task in and out of exactly this set.
CHARGED = OCCUPYING - {TaskStatus.RELEASING}
PODS_COLUMN = BASE_RESOURCES.index(PODS)


CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
SYSTEM_NAMESPACE = "kube-system"


def is_critical(pod: Pod) -> bool:
    """A pod the cluster cannot do without (Volcano's conformance rule): a system-critical
    PriorityClass, or the kube-system namespace."""
    return pod.priority_class_name in CRITICAL_PRIORITY_CLASSES or pod.namespace == SYSTEM_NAMESPACE


def never_a_victim(pod: Pod) -> bool:
    """Whether no action may evict the pod for another, whatever the plugins: it says
    `volcano.sh/preemptable: "false"`, or it is critical (`is_critical`). Its PodGroup may say so
    too (`JobInfo.preemptable`)."""
    meta = pod.meta
    return preemptable_flag(meta.annotations, meta.labels) is False or is_critical(pod)


def status_of(pod: Pod) -> TaskStatus:
    """A pod's task state as the cache sees it."""
    phase = pod.phase
    if phase == "Succeeded":
        return TaskStatus.SUCCEEDED
    if phase == "Failed":
        return TaskStatus.FAILED
    if pod.is_deleting:
        return TaskStatus.RELEASING
    if phase == "Running":
        return TaskStatus.RUNNING
    if pod.is_assigned:
        return TaskStatus.BOUND
    if phase == "Pending":
        return TaskStatus.PENDING
    return TaskStatus.UNKNOWN


# The hard constraints a pod may carry, by the name plugins declare they enforce (`Plugin.enforces`).
NODE_SELECTOR, NODE_AFFINITY = "nodeSelector", "nodeAffinity"
POD_AFFINITY, POD_ANTI_AFFINITY = "podAffinity", "podAntiAffinity"
TOPOLOGY_SPREAD, HOST_PORTS, RESOURCE_CLAIMS = "topologySpreadConstraints", "hostPorts", "resourceClaims"
# Selecting namespaces by label needs the Namespace objects, which the scheduler does not watch.
NAMESPACE_SELECTOR = "namespaceSelector in pod (anti-)affinity"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def hard_constraints(pod: Pod) -> tuple[str, ...]:
    """The constraints the pod carries that a placement could violate."""
    spec = pod.spec
    affinity = spec.get("affinity") or {}
    carried = []
    if spec.get("nodeSelector"):
        carried.append(NODE_SELECTOR)
    if (affinity.get("nodeAffinity") or {}).get(REQUIRED):
        carried.append(NODE_AFFINITY)
    if (affinity.get("podAffinity") or {}).get(REQUIRED):
        carried.append(POD_AFFINITY)
    if (affinity.get("podAntiAffinity") or {}).get(REQUIRED):
        carried.append(POD_ANTI_AFFINITY)
    if any(c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule" for c in spec.get(TOPOLOGY_SPREAD) or ()):
        carried.append(TOPOLOGY_SPREAD)
    if any(p.get("hostPort") for c in spec.get("containers") or () for p in c.get("ports") or ()):
        carried.append(HOST_PORTS)
    if spec.get(RESOURCE_CLAIMS):
        carried.append(RESOURCE_CLAIMS)
    if any(
        term.get("namespaceSelector") not in (None, {})
        for kind in ("podAffinity", "podAntiAffinity")
        for term in _pod_affinity_terms(affinity.get(kind))
    ):
        carried.append(NAMESPACE_SELECTOR)
    return tuple(carried)


def _pod_affinity_terms(section: Mapping[str, object] | None) -> Iterator[Mapping[str, object]]:
    """The terms of a pod (anti-)affinity section, required and preferred alike."""
    if not isinstance(section, Mapping):
        return
    for term in cast("list[object]", section.get(REQUIRED) or []):
        if isinstance(term, Mapping):
            yield term
    for weighted in cast("list[object]", section.get(PREFERRED) or []):
        if isinstance(weighted, Mapping) and isinstance(weighted.get("podAffinityTerm"), Mapping):
            yield weighted["podAffinityTerm"]


def has_pod_terms(pod: Pod) -> bool:
    """Whether the pod asks anything of the pods around it: pod (anti-)affinity, topology spread
    or host ports (`framework.pod_topology` reads them; a cheap flag for every task)."""
    spec = pod.spec
    affinity = spec.get("affinity") or {}
    if isinstance(affinity, Mapping) and (affinity.get("podAffinity") or affinity.get("podAntiAffinity")):
        return True
    return bool(spec.get(TOPOLOGY_SPREAD)) or bool(host_ports(pod))


def host_ports(pod: Pod) -> list[object]:
    """The container ports that ask for a port on the node."""
    return [
        port
        for container in [*(pod.spec.get("containers") or ()), *(pod.spec.get("initContainers") or ())]
        for port in container.get("ports") or ()
        if port.get("hostPort")
    ]


def soft_constraints(pod: Pod) -> tuple[str, ...]:
    """The preferences the pod carries (a placement that ignores them violates nothing)."""
    spec = pod.spec
    affinity = spec.get("affinity") or {}
    carried = [
        f"{name} (preferred)"
        for name in ("nodeAffinity", "podAffinity", "podAntiAffinity")
        if (affinity.get(name) or {}).get(PREFERRED)
    ]
    if any(c.get("whenUnsatisfiable") == "ScheduleAnyway" for c in spec.get(TOPOLOGY_SPREAD) or ()):
        carried.append(f"{TOPOLOGY_SPREAD} (ScheduleAnyway)")
    return tuple(carried)


def placement_class(pod: Pod) -> str:
    """Pods with equal keys pass the same predicates and get the same scores on every node, so
    the session decides them as one class. Built from everything a predicate or score reads."""
    spec = pod.spec
    relevant = (
        sorted(pod.requests.without_zeros().items()),
        spec.get("nodeSelector") or {},
        spec.get("affinity") or {},
        spec.get("tolerations") or [],
        str(pod.qos_class),
        pod.k8s_qos_class,  # numa-aware pins only Guaranteed pods: same requests, different limits
        pod.meta.annotations.get("lahar.dev/numa-policy", ""),
        pod.meta.annotations.get("volcano.sh/numa-topology-policy", ""),
        hard_constraints(pod),  # what the pod asks that the configuration may not enforce
        spec.get(TOPOLOGY_SPREAD) or [],
        host_ports(pod),  # in the containers: the rest of them does not matter here
    )
    return hashlib.blake2b(json.dumps(relevant, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


@dataclass(slots=True, eq=False)
class TaskInfo:
    """One pod as the scheduler sees it. `request` is an int64 vector over the snapshot's axis."""

    uid: str
    namespace: str
    name: str
    job: str  # JobInfo.key
    task_name: str  # the Volcano task ("worker"), "" when the pod does not say
    priority: int
    request: np.ndarray
    status: TaskStatus
    node: str  # "" when not placed
    qos: QoSClass
    pod: Pod
    placement: str  # placement_class(pod)
    creation: str = ""  # RFC 3339, for FIFO order
    index: int = 0  # the pod's index within its task, from the pod name's suffix when it has one
    pod_terms: bool = False  # has_pod_terms(pod): pod (anti-)affinity, topology spread or host ports
    # asks_for_nothing(request), kept: gang and allocate ask it of every task, per placement.
    no_request: bool = False
    # never_a_victim(pod), kept: the victim pool of preempt and reclaim asks it of every running
    # task, every cycle.
    spared: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def best_effort(self) -> bool:
        return self.qos is QoSClass.BE

    @property
    def preemptable(self) -> bool:
        """Whether the pod may be evicted for another (not `volcano.sh/preemptable: "false"`)."""
        meta = self.pod.meta
        return preemptable_flag(meta.annotations, meta.labels) is not False

    @property
    def never_preempts(self) -> bool:
        """`preemptionPolicy: Never` (the API copies it from the PriorityClass into the pod)."""
        return self.pod.spec.get("preemptionPolicy") == "Never"

    @property
    def gated(self) -> bool:
        """The pod has scheduling gates left: nothing may place it until they are removed."""
        return bool(self.pod.spec.get("schedulingGates"))

    def clone(self) -> TaskInfo:
        # The request vector and the pod view are never mutated, so a snapshot shares them.
        return TaskInfo(
            self.uid,
            self.namespace,
            self.name,
            self.job,
            self.task_name,
            self.priority,
            self.request,
            self.status,
            self.node,
            self.qos,
            self.pod,
            self.placement,
            self.creation,
            self.index,
            self.pod_terms,
            self.no_request,
            self.spared,
        )

    def __repr__(self) -> str:
        return f"TaskInfo({self.key}, {self.status.value}, node={self.node or '-'})"


# JobInfo.totals: the row of each status (the next row holds its best-effort tasks).
_TOTALS_ROW = {status: 2 * i for i, status in enumerate(TaskStatus)}
_ROWS: dict[tuple[Collection[TaskStatus], bool | None], np.ndarray] = {}


def _totals_rows(statuses: Collection[TaskStatus], best_effort: bool | None) -> np.ndarray:
    """Which rows of JobInfo.totals hold `statuses` (all tasks, or only BE ones, or only the
    others), as 0/1 weights: summing them is one dot product."""
    key = (statuses, best_effort)
    rows = _ROWS.get(key)
    if rows is None:
        offsets = (0, 1) if best_effort is None else (int(best_effort),)
        rows = _ROWS[key] = np.zeros(len(_TOTALS_ROW) * 2, dtype=np.int64)
        rows[[_TOTALS_ROW[s] + o for s in statuses for o in offsets]] = 1
    return rows


def requested_in(totals: np.ndarray, statuses: Collection[TaskStatus], best_effort: bool | None = None) -> np.ndarray:
    """`JobInfo.requested` of a `totals` array: one job's, or several jobs' summed (a queue's)."""
    return np.dot(_totals_rows(statuses, best_effort), totals)


@dataclass(slots=True, eq=False)
class JobInfo:
    """A gang: a PodGroup and its pods, or a lone pod (a gang of one, `podgroup` None)."""

    key: str  # "<namespace>/<podgroup name>", or "<namespace>/<pod name>" for a lone pod
    namespace: str
    name: str
    queue: str
    priority: int
    min_member: int
    min_task_member: dict[str, int]
    min_resources: np.ndarray
    podgroup: PodGroup | None
    phase: PodGroupPhase
    creation: str = ""
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    by_status: dict[TaskStatus, dict[str, TaskInfo]] = field(default_factory=dict)
    # The summed requests of the tasks by status and best effort, a row each (`_TOTALS_ROW`):
    # every session asks what every job holds (queue shares, admission), too often to walk the
    # tasks of thousands of jobs. One array, not a dict of them: the collector never scans it.
    totals: np.ndarray | None = None
    # Set by the session for the status writer: why the gang did not fit this cycle.
    unschedulable_message: str = ""
    # Pending tasks that ask for nothing (`TaskInfo.no_request`): a gang counts them as ready,
    # and asks after every placement, so they are counted as tasks come, go and change state.
    pending_no_request: int = 0

    @property
    def preemptable(self) -> bool:
        """False when the PodGroup says `volcano.sh/preemptable: "false"`: none of its pods is a victim."""
        group = self.podgroup
        if group is None:
            return True
        return preemptable_flag(group.meta.annotations, group.meta.labels) is not False

    def _count_in(self, task: TaskInfo, sign: int) -> None:
        if task.no_request and task.status is TaskStatus.PENDING:
            self.pending_no_request += sign
        if self.totals is None:
            self.totals = np.zeros((len(_TOTALS_ROW) * 2, len(task.request)), dtype=np.int64)
        row = self.totals[_TOTALS_ROW[task.status] + task.best_effort]
        if sign > 0:
            row += task.request
        else:
            row -= task.request

    def add(self, task: TaskInfo) -> None:
        self.tasks[task.uid] = task
        self.by_status.setdefault(task.status, {})[task.uid] = task
        self._count_in(task, 1)

    def remove(self, uid: str) -> TaskInfo | None:
        task = self.tasks.pop(uid, None)
        if task is not None:
            self.by_status.get(task.status, {}).pop(uid, None)
            self._count_in(task, -1)
        return task

    def set_status(self, task: TaskInfo, status: TaskStatus) -> None:
        """The one way to change a task's state: keeps `by_status` and `totals` right."""
        self.by_status.get(task.status, {}).pop(task.uid, None)
        self._count_in(task, -1)
        task.status = status
        self._count_in(task, 1)
        self.by_status.setdefault(status, {})[task.uid] = task

    def with_status(self, *statuses: TaskStatus) -> Iterator[TaskInfo]:
        for status in statuses:
            yield from self.by_status.get(status, {}).values()

    def count(self, statuses: Iterable[TaskStatus]) -> int:
        # A plain loop: asked several times per task placed (gang, allocate), where a
        # generator inside sum() cost a tenth of the basic bench's session (cProfile).
        by_status = self.by_status
        total = 0
        for status in statuses:
            tasks = by_status.get(status)
            if tasks:
                total += len(tasks)
        return total

    @property
    def pending(self) -> list[TaskInfo]:
        return list(self.by_status.get(TaskStatus.PENDING, {}).values())

    @property
    def ready_count(self) -> int:
        return self.count(READY)

    def set_unschedulable(self, unready: int, why: str) -> None:
        """Volcano's gang condition message: how many more tasks the gang needs, and why."""
        self.unschedulable_message = f"{unready}/{len(self.tasks)} tasks in gang unschedulable: {why}"

    @property
    def inqueue_request(self) -> np.ndarray:
        """What this admitted job holds back from admitting others (Volcano's inqueue resource):
        an Inqueue PodGroup's minResources less what its tasks already hold (a gang bound this
        cycle is Inqueue until its status is written: its Binding tasks count in the queue's
        allocated, so they must not count here again); a Running one's minResources not yet
        allocated, once its allocated tasks reach minMember; nothing otherwise."""
        if self.phase is PodGroupPhase.INQUEUE:
            return np.maximum(self.min_resources - self.requested(CHARGED), 0)
        if self.phase is PodGroupPhase.RUNNING and self.count(CHARGED) >= self.min_member:
            return np.maximum(self.min_resources - self.allocated, 0)
        return np.zeros_like(self.min_resources)

    def requested(self, statuses: Collection[TaskStatus], best_effort: bool | None = None) -> np.ndarray:
        """The summed requests of this job's tasks in `statuses` (only BE ones, or only the
        others, when `best_effort` says)."""
        if self.totals is None:
            return np.zeros(len(self.min_resources), dtype=np.int64)
        return requested_in(self.totals, statuses, best_effort)

    @property
    def allocated(self) -> np.ndarray:
        """Resources this job's tasks hold (or were given this session)."""
        return self.requested(OCCUPYING)

    def _empty_copy(self) -> JobInfo:
        # min_task_member and min_resources are never changed in place: shared.
        return JobInfo(
            self.key,
            self.namespace,
            self.name,
            self.queue,
            self.priority,
            self.min_member,
            self.min_task_member,
            self.min_resources,
            self.podgroup,
            self.phase,
            self.creation,
        )

    def clone(self) -> JobInfo:
        """A copy whose tasks are copies too (a session changes task states)."""
        job = self._empty_copy()
        for task in self.tasks.values():
            clone = job.tasks[task.uid] = task.clone()
            job.by_status.setdefault(clone.status, {})[clone.uid] = clone
        job.totals = None if self.totals is None else self.totals.copy()  # the same requests and states
        job.pending_no_request = self.pending_no_request
        return job

    def copy(self) -> JobInfo:
        """A copy with dicts of its own that shares the TaskInfo objects (for the cache, which
        never changes a task in place but replaces it)."""
        job = self._empty_copy()
        job.tasks = dict(self.tasks)
        job.by_status = {status: dict(tasks) for status, tasks in self.by_status.items() if tasks}
        job.totals = None if self.totals is None else self.totals.copy()
        job.unschedulable_message = self.unschedulable_message
        job.pending_no_request = self.pending_no_request
        return job

    def __repr__(self) -> str:
        return f"JobInfo({self.key}, {len(self.tasks)} tasks, min={self.min_member}, {self.phase.value})"


@dataclass(slots=True, eq=False)
class QueueInfo:
    """A queue's spec as vectors (capability: -1 where unbounded), and what the session computes."""

    name: str
    weight: int
    capability: np.ndarray  # -1 = no bound on that resource
    guarantee: np.ndarray
    deserved_spec: np.ndarray  # spec.deserved (0 = not set)
    reclaimable: bool
    state: QueueState
    priority: int
    parent: str
    queue: Queue | None  # None for the implicit default queue before the API has one
    # Filled in by plugins (proportion) during a session:
    allocated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    request: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    deserved: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def is_open(self) -> bool:
        return self.state is QueueState.OPEN

    def clone(self) -> QueueInfo:
        return QueueInfo(
            self.name,
            self.weight,
            self.capability,
            self.guarantee,
            self.deserved_spec,
            self.reclaimable,
            self.state,
            self.priority,
            self.parent,
            self.queue,
            self.allocated.copy(),
            self.request.copy(),
            self.deserved.copy(),
        )


def queue_info(queue: Queue, resources: Resources) -> QueueInfo:
    capability = np.full(len(resources), -1, dtype=np.int64)
    for name, amount in queue.capability.items():
        capability[resources.column[name]] = amount
    zeros = np.zeros(len(resources), dtype=np.int64)
    return QueueInfo(
        queue.name,
        queue.weight,
        capability,
        resources.vector(queue.guarantee),
        resources.vector(queue.deserved),
        queue.reclaimable,
        queue.state,
        queue.priority,
        queue.parent,
        queue,
        zeros.copy(),
        zeros.copy(),
        zeros.copy(),
    )


def default_queue_info(resources: Resources) -> QueueInfo:
    zeros = np.zeros(len(resources), dtype=np.int64)
    return QueueInfo(
        DEFAULT_QUEUE,
        1,
        np.full(len(resources), -1, dtype=np.int64),
        zeros.copy(),
        zeros.copy(),
        True,
        QueueState.OPEN,
        0,
        "",
        None,
        zeros.copy(),
        zeros.copy(),
        zeros.copy(),
    )


class NodeTable:
    """Every node as one row of arrays. `used` holds the requests of non-BE tasks on the node,
    `be_used` those of BE tasks (they may borrow against the agents' reclaimable capacity when
    the oversubscription plugin is on; otherwise predicates count both against allocatable)."""

    def __init__(self, resources: Resources, nodes: Sequence[Node]) -> None:
        n, r = len(nodes), len(resources)
        self.resources = resources
        self.nodes = list(nodes)
        self.names = [node.name for node in nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.allocatable = np.zeros((n, r), dtype=np.int64)
        self.used = np.zeros((n, r), dtype=np.int64)
        self.be_used = np.zeros((n, r), dtype=np.int64)
        # The part of used / be_used that tasks being evicted are freeing.
        self.releasing = np.zeros((n, r), dtype=np.int64)
        self.be_releasing = np.zeros((n, r), dtype=np.int64)
        self.schedulable = np.zeros(n, dtype=bool)
        # None on a session's table; on a what-if view (`what_if`), the rows whose usage was lowered
        # beyond what releasing tasks free.
        self.assumed_free: np.ndarray | None = None
        # A what-if view's source table and the extra amounts it assumes freed (see `refresh`).
        self._base: NodeTable | None = None
        self._freed: np.ndarray | None = None
        self._be_freed: np.ndarray | None = None
        self.labels: list[Mapping[str, str]] = []
        self.taints: list[tuple[Taint, ...]] = []
        self.tasks: list[dict[str, TaskInfo]] = [{} for _ in range(n)]
        # The rows whose task dict is this table's own; None: all of them. A snapshot's table
        # shares the cache's dicts until it changes one (`own_row`).
        self.owned_rows: set[int] | None = None
        for i, node in enumerate(nodes):
            self.allocatable[i] = resources.vector(node.allocatable)
            self.schedulable[i] = node.ready and not node.unschedulable
            self.labels.append(node.labels)
            self.taints.append(node.taints)

    def __len__(self) -> int:
        return len(self.names)

    def own_row(self, row: int) -> dict[str, TaskInfo]:
        """The row's task dict, copied first if it is still shared (see `owned_rows`)."""
        owned = self.owned_rows
        if owned is not None and row not in owned:
            self.tasks[row] = dict(self.tasks[row])
            owned.add(row)
        return self.tasks[row]

    def add_task(self, row: int, task: TaskInfo) -> None:
        (self.be_used if task.best_effort else self.used)[row] += task.request
        if task.status is TaskStatus.RELEASING:
            (self.be_releasing if task.best_effort else self.releasing)[row] += task.request
        self.own_row(row)[task.uid] = task

    def remove_task(self, row: int, task: TaskInfo) -> None:
        (self.be_used if task.best_effort else self.used)[row] -= task.request
        if task.status is TaskStatus.RELEASING:
            (self.be_releasing if task.best_effort else self.releasing)[row] -= task.request
        self.own_row(row).pop(task.uid, None)

    @property
    def idle(self) -> np.ndarray:
        """allocatable − everything requested, per node (may be negative when over-committed)."""
        return self.allocatable - self.used - self.be_used

    def free(
        self, task: TaskInfo, rows: Rows = slice(None), be_capacity: np.ndarray | None = None, future: bool = False
    ) -> np.ndarray:
        """What the task may still take on each of `rows`, per resource: the one resource-fit
        rule (`fits` is `request <= free` in every column), also used to count how many copies
        of a task a node holds and which resources fall short.

        Without `be_capacity` every task counts against allocatable. With it (the
        oversubscription plugin lends the agents' reclaimable cpu and memory, shape (nodes, 2)),
        BE tasks are placed against `be_capacity − be_used` for cpu and memory and online tasks
        against `allocatable − used`: BE borrows what online tasks reserved and the agent takes
        it back. Every other resource (pod slots, GPUs) counts every task against allocatable.
        `future` counts what tasks being evicted will free (for pipelining)."""
        used, be_used = self.used[rows], self.be_used[rows]
        if future:
            used, be_used = used - self.releasing[rows], be_used - self.be_releasing[rows]
        free = self.allocatable[rows] - used
        if be_capacity is None:
            free -= be_used
            return free
        lent = len(LENT_COLUMNS)
        free[:, lent:] -= be_used[:, lent:]  # on the lent columns online tasks ignore BE usage
        if task.best_effort:
            free[:, :lent] = be_capacity[rows] - be_used[:, :lent]
        return free

    def fits(
        self, task: TaskInfo, rows: Rows = slice(None), be_capacity: np.ndarray | None = None, future: bool = False
    ) -> np.ndarray:
        """Whether the task's request fits on each of `rows` (the rule is `free`'s)."""
        # The ufunc's reduce: .all(axis=1) goes through numpy's Python wrappers, once per placement.
        return cast(
            "np.ndarray", np.logical_and.reduce(task.request <= self.free(task, rows, be_capacity, future), axis=1)
        )

    def fits_row(self, task: TaskInfo, row: int, be_capacity: np.ndarray | None = None) -> bool:
        """`fits` for one row, in plain Python: the session brings a class up to date row by row
        after each placement, where numpy's per-call cost dominates. `free`'s rule, column by
        column (tests/scheduler/test_row_forms.py holds the two to the same answers)."""
        request = task.request.tolist()
        allocatable, used, be_used = self.allocatable[row].tolist(), self.used[row].tolist(), self.be_used[row].tolist()
        lent = 0 if be_capacity is None else len(LENT_COLUMNS)
        borrowed = be_capacity[row].tolist() if be_capacity is not None and task.best_effort else None
        for column, asked in enumerate(request):
            if column >= lent:
                free = allocatable[column] - used[column] - be_used[column]
            elif borrowed is not None:  # a BE task on what the agent lends
                free = borrowed[column] - be_used[column]
            else:  # an online task ignores BE usage on the lent columns
                free = allocatable[column] - used[column]
            if asked > free:
                return False
        return True

    def copies(self, task: TaskInfo, rows: Rows = slice(None), be_capacity: np.ndarray | None = None) -> np.ndarray:
        """How many more copies of the task each of `rows` holds (0 where none fits)."""
        free = self.free(task, rows, be_capacity)
        asked = task.request > 0  # every task asks for a pod slot, so never empty
        return np.maximum(free[:, asked] // task.request[asked], 0).min(axis=1)

    def shortfall(self, task: TaskInfo, free: np.ndarray) -> Counter[str]:
        """Kube-scheduler's reasons for the rows of `free` (from `free()`) that cannot take the
        task: one "Insufficient <resource>" ("Too many pods" for pod slots) per short resource."""
        short = (task.request > free).sum(axis=0)
        return Counter(
            {
                ("Too many pods" if name == PODS else f"Insufficient {name}"): int(count)
                for name, count in zip(self.resources.names, short, strict=True)
                if count
            }
        )

    def _shell(self) -> NodeTable:
        """A table sharing what never changes within a session; the caller sets the usage."""
        table = NodeTable.__new__(NodeTable)
        table.resources = self.resources
        table.nodes, table.names, table.index = self.nodes, self.names, self.index
        table.allocatable = self.allocatable  # allocatable never changes within a session
        table.schedulable = self.schedulable
        table.assumed_free = None
        table._base = table._freed = table._be_freed = None
        table.labels, table.taints = self.labels, self.taints
        table.tasks = self.tasks
        table.owned_rows = None  # a view never changes its rows
        return table

    def clone(self, share_rows: bool = False) -> NodeTable:
        """The table with its own usage arrays and task dicts (re-pointed at cloned tasks by
        Snapshot), or, with `share_rows`, dicts shared until changed (`own_row`)."""
        table = self._shell()
        table.used, table.be_used = self.used.copy(), self.be_used.copy()
        table.releasing, table.be_releasing = self.releasing.copy(), self.be_releasing.copy()
        if share_rows:
            table.tasks, table.owned_rows = list(self.tasks), set()
        else:
            table.tasks = [dict(tasks) for tasks in self.tasks]
        return table

    def what_if(
        self, freed: np.ndarray | None = None, be_freed: np.ndarray | None = None, empty: bool = False
    ) -> NodeTable:
        """A read-only view of this table as it would be once the tasks being evicted are gone
        and, beyond them, `freed` / `be_freed` (per-row requests of non-BE / BE tasks that a
        preemption could evict) too; with `empty`, as if no task held anything. Preempt and
        reclaim ask the predicates about such a view (`Session.predicate(..., nodes=view)`), so
        a predicate that reads usage from the table it is given answers "would the task fit
        then" through the one fit rule. Plugins that keep their own per-node state (devices,
        NUMA) treat a view as the future (releasing tasks gone) and answer optimistically on
        the rows `assumed_free` marks: they cannot know what unnamed victims would free."""
        table = self._shell()
        table.releasing, table.be_releasing = np.zeros_like(self.releasing), np.zeros_like(self.be_releasing)
        table.used, table.be_used = np.zeros_like(self.used), np.zeros_like(self.be_used)
        table.assumed_free = np.ones(len(self), dtype=bool)
        if not empty:
            table._base, table._freed, table._be_freed = self, freed, be_freed
            table.refresh(slice(None))
        return table

    def refresh(self, rows: Rows) -> None:
        """Bring `rows` of a what-if view up to date with the table it was made from and its
        `freed` arrays (a caller that keeps a view across changes refreshes the changed rows)."""
        base = self._base
        if base is None:
            return  # the session's own table, or an empty view: nothing to follow
        self.used[rows] = base.used[rows] - base.releasing[rows]
        self.be_used[rows] = base.be_used[rows] - base.be_releasing[rows]
        assumed_free = self.assumed_free
        assert assumed_free is not None, "a what-if view always marks rows"
        assumed_free[rows] = False
        for lowered, extra in ((self.used, self._freed), (self.be_used, self._be_freed)):
            if extra is not None:
                lowered[rows] -= extra[rows]
                assumed_free[rows] |= (extra[rows] > 0).any(axis=1)


@dataclass
class BindBatch:
    """Tasks committed together: a gang's binds succeed or fail as one (the session makes them,
    the cache assumes them, the binder sends them)."""

    job: JobInfo
    tasks: list[TaskInfo]


@dataclass(slots=True)
class Snapshot:
    """One consistent view of the cluster for one session."""

    resources: Resources
    nodes: NodeTable
    jobs: dict[str, JobInfo]
    queues: dict[str, QueueInfo]
    priority_classes: dict[str, int] = field(default_factory=dict)
    # PodDisruptionBudgets as the API has them (the pdb plugin reads them; never changed here).
    disruption_budgets: tuple[Mapping[str, object], ...] = ()
    hypernodes: tuple[Mapping[str, object], ...] = ()  # HyperNodes as the API has them
    # The keys of the jobs that are this snapshot's own; None: all of them. The others are
    # shared with the cache and cloned by the session before it changes them (`Session._own`).
    owned: set[str] | None = None
    # ResourceQuotas as the API has them (the resourcequota plugin reads them; never changed here).
    resource_quotas: tuple[Mapping[str, object], ...] = ()
    # A sharded scheduler's node shard (scheduler/shards.py); None: not sharded.
    shard: ShardScope | None = None
    # Volcano's Numatopologies as the API has them (the numa-aware plugin reads them; never changed here).
    numatopologies: tuple[Mapping[str, object], ...] = ()
    # Pending tasks lined up last cycle for room their victims are still freeing: task uid ->
    # (job key, node name), kube-scheduler's nominatedNodeName (`Session.reserve_nominated`).
    nominated: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def sharing(
        cls,
        resources: Resources,
        nodes: NodeTable,
        jobs: dict[str, JobInfo],
        queues: dict[str, QueueInfo],
        priority_classes: dict[str, int],
        disruption_budgets: tuple[Mapping[str, object], ...] = (),
        hypernodes: tuple[Mapping[str, object], ...] = (),
        resource_quotas: tuple[Mapping[str, object], ...] = (),
        shard: ShardScope | None = None,
        numatopologies: tuple[Mapping[str, object], ...] = (),
    ) -> Snapshot:
        """A snapshot that shares jobs and node rows with their owner, which must not change
        them afterwards (the cache copies before it writes). Cloned at once: the jobs a session
        may change other than through its statements (tasks to place, admission pending, maybe
        not ready: actions and plugins set their phase and messages); the others only when a
        statement changes one of their tasks (an eviction). A job with per-task minimums is no
        exception: what reads them (gang's readiness, its close) changes only jobs with tasks
        to place or waiting for admission, so a running gang is not cloned every cycle."""
        table = nodes.clone(share_rows=True)
        snapshot = cls(
            resources,
            table,
            dict(jobs),
            {name: q.clone() for name, q in queues.items()},
            dict(priority_classes),
            disruption_budgets,
            hypernodes,
            set(),
            resource_quotas,
            shard,
            numatopologies,
        )
        for job in jobs.values():
            if (
                job.by_status.get(TaskStatus.PENDING)
                or job.phase is PodGroupPhase.PENDING
                or job.count(READY) < job.min_member
            ):
                snapshot.own(job.key)
        return snapshot

    def own(self, key: str) -> JobInfo:
        """The snapshot's own copy of a job (cloned on the first call for a shared one), its
        placed tasks re-pointed on their node rows."""
        owned = self.owned
        if owned is None or key in owned:
            return self.jobs[key]
        job = self.jobs[key] = self.jobs[key].clone()
        owned.add(key)
        nodes = self.nodes
        for task in job.tasks.values():
            row = nodes.index.get(task.node) if task.node else None
            if row is not None and task.uid in nodes.tasks[row]:
                nodes.own_row(row)[task.uid] = task
        return job

    def clone(self) -> Snapshot:
        """Deep enough that a session may change task states and node usage freely."""
        jobs = {key: job.clone() for key, job in self.jobs.items()}
        nodes = self.nodes.clone()
        for row, tasks in enumerate(nodes.tasks):
            nodes.tasks[row] = {
                uid: jobs[task.job].tasks[uid]
                for uid, task in tasks.items()
                if task.job in jobs and uid in jobs[task.job].tasks
            }
        return Snapshot(
            self.resources,
            nodes,
            jobs,
            {name: q.clone() for name, q in self.queues.items()},
            dict(self.priority_classes),
            self.disruption_budgets,
            self.hypernodes,
            resource_quotas=self.resource_quotas,
            shard=self.shard,
            numatopologies=self.numatopologies,
        )


def asks_for_nothing(request: np.ndarray) -> bool:
    """Volcano's "BestEffort" task (`TaskInfo.no_request`): it asks for nothing but a pod slot,
    so allocate leaves it to backfill and a gang counts it as ready while pending."""
    return bool(np.count_nonzero(request) == (request[PODS_COLUMN] != 0))


def task_info(pod: Pod, job_key: str, resources: Resources) -> TaskInfo:
    """A pod as a task; `resources` must already hold every resource the pod requests."""
    annotations = pod.meta.annotations
    task_name = annotations.get(TASK_SPEC_ANNOTATION) or pod.meta.labels.get(TASK_SPEC_ANNOTATION, "")
    request = resources.vector(pod.requests)
    request[resources.column[PODS]] = 1  # every pod takes one of the node's pod slots
    name = pod.name
    suffix = name.rsplit("-", 1)[-1]
    return TaskInfo(
        pod.uid,
        pod.namespace,
        name,
        job_key,
        task_name,
        pod.priority,
        request,
        status_of(pod),
        pod.node_name,
        pod.qos_class,
        pod,
        placement_class(pod),
        pod.meta.creation_timestamp or "",
        int(suffix) if suffix.isdigit() else 0,
        has_pod_terms(pod),
        asks_for_nothing(request),
        never_a_victim(pod),
    )


def job_info(
    key: str,
    namespace: str,
    name: str,
    podgroup: PodGroup | None,
    priority: int,
    resources: Resources,
    creation: str = "",
) -> JobInfo:
    """A job for a PodGroup (or, with `podgroup` None, for a lone pod: a gang of one)."""
    if podgroup is None:
        return JobInfo(
            key,
            namespace,
            name,
            DEFAULT_QUEUE,
            priority,
            1,
            {},
            np.zeros(len(resources), dtype=np.int64),
            None,
            PodGroupPhase.INQUEUE,
            creation,
        )
    return JobInfo(
        key,
        namespace,
        name,
        podgroup.queue or DEFAULT_QUEUE,
        priority,
        podgroup.min_member,
        dict(podgroup.min_task_member),
        resources.vector(podgroup.min_resources),
        podgroup,
        podgroup.phase,
        podgroup.meta.creation_timestamp or creation,
    )


__all__ = [
    "BASE_RESOURCES",
    "CHARGED",
    "CPU",
    "MEMORY",
    "OCCUPYING",
    "PODS",
    "PODS_COLUMN",
    "PREEMPTABLE_KEY",
    "READY",
    "BindBatch",
    "JobInfo",
    "NodeTable",
    "QueueInfo",
    "Resources",
    "Rows",
    "Snapshot",
    "TaskInfo",
    "TaskStatus",
    "Toleration",
    "asks_for_nothing",
    "default_queue_info",
    "hard_constraints",
    "has_pod_terms",
    "host_ports",
    "is_critical",
    "job_info",
    "never_a_victim",
    "placement_class",
    "preemptable_flag",
    "queue_info",
    "requested_in",
    "soft_constraints",
    "status_of",
    "task_info",
]
