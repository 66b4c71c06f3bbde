"""Level one: which member runs a Job. Pure functions of what the hub knows: the Job's pods, the
members' nodes and what is free on each, the Job's cluster affinity, the policy's weights.

A gang is never split: a member is a candidate only when every pod of the Job packs onto its nodes
at once (best fit, biggest pods first). A Job that packs onto no member's empty nodes never fits
anywhere, and says so."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lahar.api.job import Job
from lahar.api.resources import ResourceList, pod_requests
from lahar.api.selectors import LabelSelector, SelectorError, parse_label_selector
from lahar.federation.names import CLUSTER_SELECTOR_ANNOTATION


@dataclass(frozen=True)
class MemberView:
    """A member as the last heartbeat saw it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    cost: float = 0.0
    reachable: bool = False
    unschedulable: bool = False  # cordoned: running Jobs stay, new ones go elsewhere
    known: bool = False  # its nodes have been seen (since this federation started)
    node_allocatable: tuple[ResourceList, ...] = ()
    node_free: tuple[ResourceList, ...] = ()
    # The member queues' own capability (an absent queue or resource: unbounded there).
    queue_capability: Mapping[str, ResourceList] = field(default_factory=dict)
    # Seconds since the epoch of the last answer (None: never answered).
    last_heartbeat: float | None = None

    @property
    def capacity(self) -> ResourceList:
        return sum(self.node_allocatable, ResourceList())

    @property
    def accepts_new_jobs(self) -> bool:
        return self.reachable and self.known and not self.unschedulable


@dataclass(frozen=True)
class Demand:
    """A Job's pods (every replica of every task) and their sum."""

    pods: tuple[ResourceList, ...]

    @property
    def total(self) -> ResourceList:
        return sum(self.pods, ResourceList())


def demand_of(job: Mapping[str, Any]) -> Demand:
    """What the whole Job asks for: each replica's requests, as the member's controller will make
    its pods from the task templates."""
    view = Job.from_dict(job)
    pods: list[ResourceList] = []
    for task in view.tasks:
        requests = pod_requests({"spec": copy.deepcopy(dict(task.template.get("spec") or {}))})
        pods += [requests] * task.replicas
    return Demand(tuple(pods))


def cluster_selector(job: Mapping[str, Any]) -> LabelSelector | None:
    """The Job's cluster affinity (its cluster-selector annotation); SelectorError when malformed."""
    text = ((job.get("metadata") or {}).get("annotations") or {}).get(CLUSTER_SELECTOR_ANNOTATION)
    if not text:
        return None
    try:
        return parse_label_selector(text)
    except SelectorError as exc:
        raise SelectorError(f"annotation {CLUSTER_SELECTOR_ANNOTATION}: {exc}") from None


def _size(pod: ResourceList) -> tuple[int, ...]:
    return (pod.get("nvidia.com/gpu"), pod.get("cpu"), pod.get("memory"), sum(pod.values()))


def pack(node_free: Sequence[ResourceList], pods: Sequence[ResourceList]) -> list[ResourceList] | None:
    """The nodes' free room after placing every pod (biggest first, each on the node it leaves
    least room on), or None when some pod finds no node: the gang does not fit."""
    free = list(node_free)
    for pod in sorted(pods, key=_size, reverse=True):
        best: int | None = None
        for index, room in enumerate(free):
            if pod.fits_in(room) and (best is None or _size(room - pod) < _size(free[best] - pod)):
                best = index
        if best is None:
            return None
        free[best] = free[best] - pod
    return free


def dominant_share(amount: ResourceList, capacity: ResourceList) -> float:
    """The largest fraction `amount` takes of any resource `capacity` has."""
    shares = [amount.get(name) / total for name, total in capacity.items() if total > 0]
    return max(shares, default=0.0)


def within(amount: ResourceList, bound: ResourceList) -> bool:
    """Whether `amount` stays within every resource `bound` names (an unnamed one is unbounded)."""
    return all(amount.get(name) <= limit for name, limit in bound.items())


def score(
    member: MemberView,
    free_after: Sequence[ResourceList],
    queue_use_after: ResourceList,
    max_cost: float,
    weights: Mapping[str, float],
) -> float:
    """Higher is better: room left (free-capacity), the Job's queue's share of the member
    (queue-share, lower is better) and price (cost), each in [0, 1], weighted."""
    capacity = member.capacity
    room = 1.0 - dominant_share(capacity - sum(free_after, ResourceList()), capacity)
    queue_share = 1.0 - min(1.0, dominant_share(queue_use_after, capacity))
    cheapness = 1.0 - member.cost / max_cost if max_cost > 0 else 1.0
    return (
        weights.get("free-capacity", 0.0) * room
        + weights.get("queue-share", 0.0) * queue_share
        + weights.get("cost", 0.0) * cheapness
    )


@dataclass(frozen=True)
class Choice:
    member: str | None
    reason: str = ""  # names.REASON_* when member is None
    message: str = ""
    free_after: tuple[ResourceList, ...] = ()
