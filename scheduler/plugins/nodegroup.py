"""nodegroup: queues bound to groups of nodes (Volcano's nodegroup plugin).

A node's group is its label `volcano.sh/nodegroup-name`. A queue names groups in its
`spec.affinity`, as Volcano's Queue API has it:

    affinity:
      nodeGroupAffinity:     {requiredDuringSchedulingIgnoredDuringExecution: [g1, g3],
                              preferredDuringSchedulingIgnoredDuringExecution: [g3]}
      nodeGroupAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [g2],
                              preferredDuringSchedulingIgnoredDuringExecution: [g4]}

- predicate (Volcano's rules, in its order): a node of a group takes the queue's pods when the
  group is required or preferred by the affinity and not required by the anti-affinity, or is
  preferred by the anti-affinity (a soft "avoid" still allows); a queue with no affinity takes no
  node of any group. A node without the label takes none either, unless the argument `strict` is
  false and the queue has no affinity. With the queue annotation
  `volcano.sh/nodegroup-resource-limits` (JSON, group -> resource list), the queue's pods on a
  group's nodes (allocated, binding, bound, running; kept current as this session places and
  evicts) may not exceed the resources it names for that group (a resource it omits is
  unbounded);
- node order: 100 on a group the affinity requires, + 50 on one it prefers (with
  `enablePreferredOrder`, 50 × (n − i)/n for the i-th of its n preferred groups instead), and −1
  on a group the anti-affinity prefers to avoid; 0 elsewhere.

With `enableHierarchy: true` on the plugin's entry, a queue without an affinity of its own takes
its nearest ancestor's (by `spec.parent`, "root" when unset). A queue whose affinity or
resource-limit annotation cannot be read gets a Warning event and its pods take no node (Volcano
does the same for the annotation; a malformed affinity there fails to decode the whole Queue).
Bad arguments refuse the configuration.

The predicate depends on the task's queue (declared to the session as part of its class key);
a queue with resource limits has volatile classes, since each placement changes its usage.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from lahar.api.quantity import QuantityError
from lahar.api.resources import ResourceList
from lahar.scheduler.framework.plugin import Arguments, Plugin, boolean, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import NodeTable, Rows, TaskInfo, TaskStatus

GROUP_LABEL = "volcano.sh/nodegroup-name"
RESOURCE_LIMITS = "volcano.sh/nodegroup-resource-limits"
ROOT_QUEUE = "root"
BASE_SCORE = 100.0
REQUIRED, PREFERRED = (
    "requiredDuringSchedulingIgnoredDuringExecution",
    "preferredDuringSchedulingIgnoredDuringExecution",
)
# Volcano's api.AllocatedStatus: what a queue holds on a group when the session opens.
HOLDING = frozenset({TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING})

# Volcano's fit-error reasons (plugins/nodegroup/errors.go).
NO_AFFINITY = "node group affinity not specified"
NO_LABEL = "node group label not found"
UNSATISFIED = "node does not satisfy the node group affinity"
LIMIT_INVALID = "node group resource limit annotation invalid"
LIMIT_EXCEEDED = "node group resource limit exceeded"


class NodeGroupError(ValueError):
    """A queue's node-group affinity or resource limits that cannot be read."""


@dataclass(frozen=True)
class GroupAffinity:
    required: frozenset[str] = frozenset()
    preferred: tuple[str, ...] = ()  # in the queue's order (enablePreferredOrder scores by it)
    anti_required: frozenset[str] = frozenset()
    anti_preferred: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.required or self.preferred or self.anti_required or self.anti_preferred)

    def allows(self, group: str) -> bool:
        # Anti-affinity outranks affinity, and a soft anti-affinity still allows the group.
        allowed = group in self.required or group in self.preferred
        if group in self.anti_required:
            allowed = False
        return allowed or group in self.anti_preferred

    def score(self, group: str, preferred_order: bool) -> float:
        score = BASE_SCORE if group in self.required else 0.0
        if group in self.preferred:
            if preferred_order:
                # The first of n preferred groups scores 50, the last 50/n (a repeated name: its last place).
                places = {name: i for i, name in enumerate(self.preferred)}
                score += 0.5 * BASE_SCORE * (len(places) - places[group]) / len(places)
            else:
                score += 0.5 * BASE_SCORE
        return -1.0 if group in self.anti_preferred else score


def _names(terms: Any, key: str, where: str) -> list[str]:
    if terms is None:
        return []
    if not isinstance(terms, Mapping):
        raise NodeGroupError(f"{where}: must be a map, not {terms!r}")
    names = terms.get(key)
    if names is None:
        return []
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise NodeGroupError(f"{where}.{key}: must be a list of node group names, not {names!r}")
    return names


def read_affinity(spec: Mapping[str, Any]) -> GroupAffinity | None:
    """A queue spec's node-group affinity; None when it has none. Raises NodeGroupError (the API
    server refuses such a queue; one written before that check, or through kube-apiserver without
    Volcano's CRD schema, can still arrive). Unknown keys are ignored, as Volcano's decoder does."""
    affinity = spec.get("affinity")
    if affinity is None:
        return None
    if not isinstance(affinity, Mapping):
        raise NodeGroupError(f"spec.affinity: must be a map, not {affinity!r}")
    near = affinity.get("nodeGroupAffinity")
    far = affinity.get("nodeGroupAntiAffinity")
    return GroupAffinity(
        required=frozenset(_names(near, REQUIRED, "spec.affinity.nodeGroupAffinity")),
        preferred=tuple(_names(near, PREFERRED, "spec.affinity.nodeGroupAffinity")),
        anti_required=frozenset(_names(far, REQUIRED, "spec.affinity.nodeGroupAntiAffinity")),
        anti_preferred=frozenset(_names(far, PREFERRED, "spec.affinity.nodeGroupAntiAffinity")),
    )


def read_limits(annotations: Mapping[str, str]) -> dict[str, ResourceList]:
    """The queue's per-group resource limits (annotation absent or empty: none). Raises NodeGroupError."""
    raw = annotations.get(RESOURCE_LIMITS)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise NodeGroupError(f"annotation {RESOURCE_LIMITS}: not JSON ({exc})") from None
    if not isinstance(parsed, Mapping):
        raise NodeGroupError(f"annotation {RESOURCE_LIMITS}: must map node group names to resource lists")
    try:
        return {
            str(group): ResourceList.from_k8s(limit, f"{RESOURCE_LIMITS}.{group}") for group, limit in parsed.items()
        }
    except QuantityError as exc:
        raise NodeGroupError(f"annotation {exc}") from None


@dataclass
class QueueGroups:
    """What the plugin knows of one queue this session."""

    affinity: GroupAffinity | None = None
    error: str | None = None  # the affinity or limits could not be read: the queue's pods fit nowhere
    limit_invalid: bool = False
    limits: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # group -> (limit, named)
    held: dict[str, np.ndarray] = field(default_factory=dict)  # group -> what the queue holds there

    @property
    def unset(self) -> bool:
        return self.affinity is None or self.affinity.empty


@register_plugin
class NodeGroupPlugin(Plugin):
    name = "nodegroup"
    ARGUMENTS: ClassVar[Arguments] = {"strict": boolean, "enablePreferredOrder": boolean}
    SWITCHES_HONOURED = frozenset({"enableHierarchy", "enabledHierarchy"})

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.strict: bool = self.argument("strict", True)
        self.preferred_order: bool = self.argument("enablePreferredOrder", False)
        self.groups: list[str | None] = [labels.get(GROUP_LABEL) for labels in session.nodes.labels]
        self.queues: dict[str, QueueGroups] = {name: self._read(name) for name in session.queues}
        if self.switches_on & self.SWITCHES_HONOURED:
            for name, state in self.queues.items():
                if state.affinity is None and state.error is None:
                    state.affinity = self._inherited(name)
        self._reasons: dict[str, list[str | None]] = {}
        self._masks: dict[str, np.ndarray] = {}
        self._group_rows: dict[str, np.ndarray] = {}  # which node rows each group holds
        self._scores: dict[str, np.ndarray] = {}
        self._count_held()
        session.add_predicate_fn(self.predicate, self.explain)
        session.add_node_order_fn(self.score)
        session.add_class_key_fn(self.queue_name, self.volatile)
        session.add_event_handler(self._placed, self._removed)

    def _read(self, name: str) -> QueueGroups:
        queue = self.session.queues[name].queue
        state = QueueGroups()
        if queue is None:
            return state
        try:
            state.affinity = read_affinity(queue.spec)
        except NodeGroupError as exc:
            state.error = UNSATISFIED
            self.session.record_event("Queue", "", name, "Warning", "InvalidNodeGroupAffinity", str(exc))
        try:
            limits = read_limits(queue.meta.annotations)
        except NodeGroupError as exc:
            state.error, state.limit_invalid = LIMIT_INVALID, True
            self.session.record_event("Queue", "", name, "Warning", "InvalidNodeGroupResourceLimits", str(exc))
            return state
        resources = self.session.snapshot.resources
        for group, limit in limits.items():
            named = np.array([resource in limit for resource in resources.names], dtype=bool)
            # A resource no node has cannot be used, so its limit is never reached: left out.
            known = {resource: amount for resource, amount in limit.items() if resource in resources.column}
            state.limits[group] = (resources.vector(known), named)
        return state

    def _inherited(self, name: str) -> GroupAffinity | None:
        """The nearest ancestor's affinity (Volcano's hierarchy: an unset parent is root)."""
        seen = {name}
        current = name
        while current != ROOT_QUEUE:
            info = self.session.queues.get(current)
            parent = (info.parent if info is not None else "") or ROOT_QUEUE
            if parent in seen or parent not in self.queues:
                return None  # a loop, or a parent the session does not know
            seen.add(parent)
            if self.queues[parent].affinity is not None:
                return self.queues[parent].affinity
            current = parent
        return None

    def _count_held(self) -> None:
        for job in self.session.jobs.values():
            state = self.queues.get(job.queue)
            if state is None or not state.limits:
                continue
            for task in job.tasks.values():
                if task.status in HOLDING:
                    self._hold(state, task, 1)

    def _hold(self, state: QueueGroups, task: TaskInfo, sign: int) -> None:
        row = self.session.row_of(task)  # an undone placement has already left its node
        group = None if row is None else self.groups[row]
        if group is None:
            return
        held = state.held.setdefault(group, np.zeros(len(self.session.snapshot.resources), dtype=np.int64))
        held += sign * task.request

    def _limited(self, task: TaskInfo) -> QueueGroups | None:
        job = self.session.jobs.get(task.job)
        state = None if job is None else self.queues.get(job.queue)
        return state if state is not None and state.limits else None

    def _placed(self, task: TaskInfo) -> None:
        state = self._limited(task)
        if state is not None:
            self._hold(state, task, 1)

    def _removed(self, task: TaskInfo) -> None:
        state = self._limited(task)
        if state is not None:
            self._hold(state, task, -1)

    def queue_name(self, task: TaskInfo) -> str | None:
        job = self.session.jobs.get(task.job)
        return None if job is None else job.queue

    def volatile(self, task: TaskInfo) -> bool:
        return self._limited(task) is not None

    def _static_reasons(self, queue: str | None) -> list[str | None]:
        """Per node row, why the queue's pods may not go there whatever is placed (None: they may)."""
        key = queue or ""
        if key not in self._reasons:
            state = self.queues.get(key)
            reasons: list[str | None] = []
            for group in self.groups:
                if state is None:
                    reasons.append(UNSATISFIED)  # a task whose job or queue the session lacks
                elif state.error is not None:
                    reasons.append(state.error)
                elif group is None:
                    reasons.append(None if not self.strict and state.unset else NO_LABEL)
                elif state.unset:
                    reasons.append(NO_AFFINITY)
                else:
                    assert state.affinity is not None
                    reasons.append(None if state.affinity.allows(group) else UNSATISFIED)
            self._reasons[key] = reasons
        return self._reasons[key]

    def _over_limit(self, task: TaskInfo, state: QueueGroups) -> set[str]:
        """The groups where placing the task would take its queue past a limit."""
        over = set()
        for group, (limit, named) in state.limits.items():
            held = state.held.get(group)
            used = task.request if held is None else held + task.request
            if np.any(named & (used > limit)):
                over.add(group)
        return over

    def _reason(self, task: TaskInfo, row: int, over: set[str]) -> str | None:
        reason = self._static_reasons(self.queue_name(task))[row]
        if reason is None and self.groups[row] in over:
            return LIMIT_EXCEEDED
        return reason

    def _rows_of(self, group: str) -> np.ndarray:
        rows = self._group_rows.get(group)
        if rows is None:
            rows = self._group_rows[group] = np.array([each == group for each in self.groups], dtype=bool)
        return rows

    def _static_mask(self, queue: str | None) -> np.ndarray:
        key = queue or ""
        if key not in self._masks:
            self._masks[key] = np.array([reason is None for reason in self._static_reasons(queue)], dtype=bool)
        return self._masks[key]

    def predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        mask = self._static_mask(self.queue_name(task))
        state = self._limited(task)
        if state is not None:
            over = self._over_limit(task, state)
            if over:
                mask = mask & ~np.logical_or.reduce([self._rows_of(group) for group in over])
        return mask[rows]

    def explain(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        state = self._limited(task)
        over = set() if state is None else self._over_limit(task, state)
        reasons: Counter[str] = Counter()
        for row in np.flatnonzero(nodes.schedulable):
            reason = self._reason(task, int(row), over)
            if reason is not None:
                reasons[reason] += 1
        return reasons

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        queue = self.queue_name(task) or ""
        if queue not in self._scores:
            state = self.queues.get(queue)
            affinity = None if state is None else state.affinity
            self._scores[queue] = np.array(
                [
                    0.0 if group is None or affinity is None else affinity.score(group, self.preferred_order)
                    for group in self.groups
                ],
                dtype=np.float64,
            )
        return self._scores[queue][rows]
