"""What the federation does next: one pure function from what the hub and the members look like now
to a list of actions (`plan`). The loop in federation.py reads, calls `plan`, and writes; every
decision is here, where a test can give it any fleet and any history.

A hub Job goes through: pending (no cluster label) -> placed (label + placement number) ->
dispatched (the copy exists in the member; its status is mirrored back) -> finished. Its member
stops answering: the Job is marked, and after `redispatch_after` seconds placed again elsewhere
with the next placement number. A copy in a member whose hub Job is gone, or whose placement is
not the hub Job's, is deleted: the fence that keeps one copy of a Job running."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lahar.api.job import FINISHED_PHASES, STATUS_STATE, JobPhase, job_phase
from lahar.api.pod import preemptable_flag
from lahar.api.queue import DEFAULT_QUEUE, Queue
from lahar.api.resources import ResourceList
from lahar.api.selectors import LabelSelector, SelectorError
from lahar.federation import names
from lahar.federation.placement import (
    Choice,
    Demand,
    MemberView,
    cluster_selector,
    demand_of,
    dominant_share,
    pack,
    score,
    within,
)
from lahar.federation.policy import Policy

Key = tuple[str, str]  # (namespace, name)
# Phases after which a Job holds nothing and is never moved again.
DONE_PHASES = FINISHED_PHASES | {JobPhase.ABORTED}


def _int_or_none(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class HubJob:
    """A Volcano Job on the hub, as the federation reads it."""

    key: Key
    uid: str
    queue: str
    priority: int
    created: str
    generation: int  # the hub's spec generation: a copy made from an older one is brought up to date
    demand: Demand
    cluster: str  # the member it is placed on ("" when pending)
    placement: int  # the placement number (0 when never placed)
    dispatched: int | None  # the placement number whose copy was created
    held: int | None  # the generation whose spec change is held back (the user was told)
    phase: JobPhase
    on_member_loss: str
    deleting: bool
    status: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    preemptable: bool = True  # not `volcano.sh/preemptable: "false"` (on the Job or a task's pods)

    @property
    def done(self) -> bool:
        return self.phase in DONE_PHASES


def hub_job(obj: Mapping[str, Any], priorities: Mapping[str, int]) -> HubJob:
    metadata = obj.get("metadata") or {}
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    spec = obj.get("spec") or {}
    return HubJob(
        key=(metadata.get("namespace") or "default", metadata.get("name") or ""),
        uid=metadata.get("uid") or "",
        queue=spec.get("queue") or DEFAULT_QUEUE,
        priority=priorities.get(spec.get("priorityClassName") or "", 0),
        created=metadata.get("creationTimestamp") or "",
        generation=_int_or_none(metadata.get("generation")) or 0,
        demand=demand_of(obj),
        cluster=labels.get(names.CLUSTER_LABEL) or "",
        placement=_int_or_none(annotations.get(names.PLACEMENT_ANNOTATION)) or 0,
        dispatched=_int_or_none(annotations.get(names.DISPATCHED_ANNOTATION)),
        held=_int_or_none(annotations.get(names.HELD_GENERATION_ANNOTATION)),
        phase=job_phase(obj),
        on_member_loss=annotations.get(names.ON_MEMBER_LOSS_ANNOTATION) or names.REDISPATCH,
        deleting=bool(metadata.get("deletionTimestamp")),
        status=obj.get("status") or {},
        raw=obj,
        preemptable=_preemptable(obj),
    )


def _preemptable(obj: Mapping[str, Any]) -> bool:
    """Whether the Job may be evicted: neither it nor any task's pod template opts out."""
    metadata = obj.get("metadata") or {}
    marked = [(metadata.get("annotations") or {}, metadata.get("labels") or {})]
    for task in (obj.get("spec") or {}).get("tasks") or ():
        template = (task.get("template") or {}).get("metadata") or {} if isinstance(task, Mapping) else {}
        marked.append((template.get("annotations") or {}, template.get("labels") or {}))
    return all(preemptable_flag(annotations, labels) is not False for annotations, labels in marked)


@dataclass(frozen=True)
class MemberCopy:
    """A Job in a member that the federation created (it carries its hub Job's uid)."""

    member: str
    key: Key
    uid: str  # the copy's own uid in the member: deletes are preconditioned on it
    hub_uid: str
    placement: int
    status: Mapping[str, Any]
    hub_generation: int = 0  # the hub Job's generation the copy's spec was made from
    total: ResourceList = field(default_factory=ResourceList)  # what the copy's spec asks, all pods
    fenced: bool = False  # the member's fence stopped it: the hub's lease there had run out
    # What its bound pods take of each of the member's nodes (in the snapshot's node order): the
    # room evicting it gives back.
    on_nodes: tuple[ResourceList, ...] = ()


# --- actions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dispatch:
    """Place the Job on `member` as placement number `placement` (label and annotation on the hub
    Job first, then the copy): the hub remembers the decision before the member sees it."""

    job: Key
    member: str
    placement: int
    reason: str
    message: str


@dataclass(frozen=True)
class CreateCopy:
    """The hub Job is placed on `member` but its copy was never confirmed there: create it."""

    job: Key
    member: str
    placement: int


@dataclass(frozen=True)
class UpdateCopy:
    """The hub Job's spec changed after dispatch (what the hub's admission lets change: replicas,
    minAvailable, maxRetry, priorityClassName, ttlSecondsAfterFinished): carry it to the copy
    (preconditioned on the copy's uid; the member's admission checks it as the hub's did)."""

    member: str
    job: Key
    uid: str  # the copy's uid in the member
    placement: int
    generation: int


@dataclass(frozen=True)
class HoldChange:
    """A spec change that would take the Job's queue past its fleet-wide capability is not
    carried to the copy yet: say so once (an annotation naming the generation, and a Warning)."""

    job: Key
    generation: int
    message: str


@dataclass(frozen=True)
class DeleteCopy:
    member: str
    job: Key
    uid: str  # the copy's uid in the member
    why: str


@dataclass(frozen=True)
class Evict:
    """Take a running Job off its member for a Job that needs the room (preempt or reclaim): the
    hub Job goes back to pending first (its placement number kept, so the next one is new), then
    its copy is deleted in the member (preconditioned on the copy's uid)."""

    job: Key
    member: str
    uid: str  # the copy's uid in the member
    reason: str  # names.REASON_PREEMPTED or REASON_RECLAIMED
    message: str


@dataclass(frozen=True)
class SetStatus:
    """Write the hub Job's status: the member copy's (mirroring) or a reason of the federation's."""

    job: Key
    status: Mapping[str, Any]
    event: tuple[str, str, str] | None = None  # (type, reason, message) to record with it


Action = Dispatch | CreateCopy | UpdateCopy | HoldChange | DeleteCopy | Evict | SetStatus


# --- quotas -------------------------------------------------------------------------------------


def fleet_capability(queue: str, hub_queues: Mapping[str, Queue], members: Iterable[MemberView]) -> ResourceList:
    """A queue's quota across the fleet: the hub Queue's capability when it sets one; otherwise
    the members' own capabilities for it, summed, for each resource every member bounds (a
    member that does not bound a resource leaves it unbounded fleet-wide)."""
    hub_queue = hub_queues.get(queue)
    if hub_queue is not None and hub_queue.capability:
        return hub_queue.capability
    bounds = [member.queue_capability.get(queue) for member in members if member.known]
    if not bounds or any(bound is None for bound in bounds):
        return ResourceList()
    common = set.intersection(*(set(bound) for bound in bounds if bound is not None))
    return ResourceList({name: sum(bound.get(name) for bound in bounds if bound is not None) for name in common})


def _state_of(status: Mapping[str, Any]) -> Mapping[str, Any]:
    state = status.get(STATUS_STATE)
    return state if isinstance(state, Mapping) else {}


def _with_state(status: Mapping[str, Any], phase: JobPhase, reason: str, message: str) -> dict[str, Any]:
    result = dict(status)
    result[STATUS_STATE] = {"phase": phase.value, "reason": reason, "message": message}
    return result


def _says(job: HubJob, reason: str, message: str) -> bool:
    state = _state_of(job.status)
    return state.get("reason") == reason and state.get("message") == message


# --- the plan -----------------------------------------------------------------------------------


@dataclass
class _Fleet:
    """The room placement works with during one plan: nodes' free room and each queue's use,
    updated as Jobs are placed so two Jobs never count on the same room."""

    members: dict[str, MemberView]
    free: dict[str, list[ResourceList]]
    queue_use: dict[str, ResourceList]  # fleet-wide, by queue
    queue_on_member: dict[tuple[str, str], ResourceList]

    def commit(self, member: str, job: HubJob, free_after: Sequence[ResourceList]) -> None:
        self.free[member] = list(free_after)
        self.queue_use[job.queue] = self.queue_use.get(job.queue, ResourceList()) + job.demand.total
        key = (job.queue, member)
        self.queue_on_member[key] = self.queue_on_member.get(key, ResourceList()) + job.demand.total


def choose(
    job: HubJob,
    fleet: _Fleet,
    hub_queues: Mapping[str, Queue],
    policy: Policy,
    exclude: str = "",
) -> Choice:
    """The best member for `job` now, or why there is none."""
    try:
        selector: LabelSelector | None = cluster_selector(job.raw)
    except SelectorError as exc:
        return Choice(None, names.REASON_NEVER_FITS, str(exc))
    capability = fleet_capability(job.queue, hub_queues, fleet.members.values())
    used = fleet.queue_use.get(job.queue, ResourceList())
    if capability and not within(used + job.demand.total, capability):
        if not within(job.demand.total, capability):
            return Choice(None, names.REASON_NEVER_FITS, f"the job asks more than queue {job.queue}'s capability")
        return Choice(None, names.REASON_QUOTA, f"queue {job.queue} is at its fleet-wide capability")
    held_for = _guarantees_in_the_way(job, fleet, hub_queues)
    if held_for:
        return Choice(
            None,
            names.REASON_GUARANTEE,
            f"the fleet's free room is held for the guarantee of queue {', '.join(held_for)}",
        )
    matching = [
        m for m in fleet.members.values() if m.name != exclude and (selector is None or selector.matches(m.labels))
    ]
    if not matching:
        return Choice(None, names.REASON_NEVER_FITS, "no member cluster matches the job's cluster selector")
    if all(m.known for m in matching) and not any(pack(m.node_allocatable, job.demand.pods) for m in matching):
        return Choice(None, names.REASON_NEVER_FITS, "no member cluster could ever hold the whole gang")
    max_cost = max((m.cost for m in matching), default=0.0)
    best: tuple[float, str, list[ResourceList]] | None = None
    for member in sorted(matching, key=lambda m: m.name):
        if not member.accepts_new_jobs:
            continue
        queue_bound = member.queue_capability.get(job.queue)
        queue_after = fleet.queue_on_member.get((job.queue, member.name), ResourceList()) + job.demand.total
        if queue_bound is not None and not within(queue_after, queue_bound):
            continue
        free_after = pack(fleet.free[member.name], job.demand.pods)
        if free_after is None:
            continue
        value = score(member, free_after, queue_after, max_cost, policy.weights)
        if best is None or value > best[0]:
            best = (value, member.name, free_after)
    if best is None:
        return Choice(None, names.REASON_WAITING, "no member cluster has room for the whole gang now")
    return Choice(best[1], free_after=tuple(best[2]))


@dataclass(frozen=True)
class _Running:
    """A placed Job whose copy its member listed: what an eviction could take back. `room` is what
    it takes of each of the member's nodes: its bound pods (in the snapshot), and the room held
    for its pods not bound yet (_hold_room_for_unstarted), so a Job placed but not started may
    be evicted as well as a running one."""

    job: HubJob
    copy: MemberCopy
    room: tuple[ResourceList, ...]


def _may_evict(job: HubJob, victim: HubJob, fleet: _Fleet, hub_queues: Mapping[str, Queue], policy: Policy) -> str:
    """Why `victim` may be evicted for `job` (names.REASON_PREEMPTED / REASON_RECLAIMED), or "".
    Volcano's rules, whole Jobs: preempt takes a strictly lower-priority Job of the same queue;
    reclaim, for a queue still within its fleet-wide guarantee with this Job, takes a Job of
    another queue that is reclaimable and keeps that queue at its own guarantee or above."""
    if not victim.preemptable:
        return ""
    if victim.queue == job.queue:
        return names.REASON_PREEMPTED if "preempt" in policy.actions and victim.priority < job.priority else ""
    if "reclaim" not in policy.actions:
        return ""
    own = hub_queues.get(job.queue)
    guarantee = own.guarantee if own is not None else ResourceList()
    if not guarantee or not within(fleet.queue_use.get(job.queue, ResourceList()) + job.demand.total, guarantee):
        return ""
    theirs = hub_queues.get(victim.queue)
    if theirs is not None and not theirs.reclaimable:
        return ""
    kept = theirs.guarantee if theirs is not None else ResourceList()
    left = fleet.queue_use.get(victim.queue, ResourceList()) - victim.demand.total
    if any(left.get(name) < amount for name, amount in kept.items()):
        return ""
    return names.REASON_RECLAIMED


def _evictions_for(
    job: HubJob,
    fleet: _Fleet,
    running: Sequence[_Running],
    hub_queues: Mapping[str, Queue],
    policy: Policy,
    exclude: str = "",
) -> tuple[str, list[tuple[_Running, str]], list[ResourceList]] | None:
    """A member where `job` fits once some running Jobs are evicted, and those Jobs: on each
    member the Job may go to, the victims lowest priority first (then newest), only until the
    whole gang packs and its queue's capabilities (fleet-wide, and the member queue's own) hold
    with the victims of its own queue gone; the member needing the fewest evictions wins (then
    the lower victims). Never on `exclude` (the member a Job is being moved off)."""
    try:
        selector = cluster_selector(job.raw)
    except SelectorError:
        return None
    capability = fleet_capability(job.queue, hub_queues, fleet.members.values())
    used = fleet.queue_use.get(job.queue, ResourceList())
    best: tuple[tuple[int, int, str], str, list[tuple[_Running, str]], list[ResourceList]] | None = None
    for member in fleet.members.values():
        if member.name == exclude or not member.accepts_new_jobs:
            continue
        if selector is not None and not selector.matches(member.labels):
            continue
        # The Job's queue's use and bound, fleet-wide and on this member.
        limits = (
            (used, capability),
            (
                fleet.queue_on_member.get((job.queue, member.name), ResourceList()),
                member.queue_capability.get(job.queue) or ResourceList(),
            ),
        )
        free = list(fleet.free[member.name])
        chosen: list[tuple[_Running, str]] = []
        candidates = [r for r in running if r.job.cluster == member.name and len(r.room) == len(free)]
        candidates.sort(key=lambda r: (r.job.created, r.job.key), reverse=True)  # newest first...
        candidates.sort(key=lambda r: r.job.priority)  # ...within each priority, lowest first
        free_after = _room_with(job, chosen, free, limits)
        for candidate in candidates:
            if free_after is not None:
                break
            why = _may_evict(job, candidate.job, fleet, hub_queues, policy)
            if not why:
                continue
            chosen.append((candidate, why))
            free = [room + taken for room, taken in zip(free, candidate.room, strict=True)]
            free_after = _room_with(job, chosen, free, limits)
        if free_after is None or not chosen:
            continue
        rank = (len(chosen), max(r.job.priority for r, _ in chosen), member.name)
        if best is None or rank < best[0]:
            best = (rank, member.name, chosen, free_after)
    return None if best is None else (best[1], best[2], best[3])


def _room_with(
    job: HubJob,
    victims: Sequence[tuple[_Running, str]],
    free: list[ResourceList],
    limits: Sequence[tuple[ResourceList, ResourceList]],
) -> list[ResourceList] | None:
    """The member's nodes' room after placing `job` once `victims` are gone (their room already in
    `free`), or None when the gang does not pack or a (use, bound) of its queue would not hold
    (the victims of its own queue give their share back)."""
    freed = sum((r.job.demand.total for r, _ in victims if r.job.queue == job.queue), ResourceList())
    if any(not within(use - freed + job.demand.total, bound) for use, bound in limits):
        return None
    return pack(free, job.demand.pods)


def _guarantees_in_the_way(job: HubJob, fleet: _Fleet, hub_queues: Mapping[str, Queue]) -> list[str]:
    """The other queues whose unmet guarantee (hub Queue `spec.guarantee.resource` less what their
    placed Jobs use, fleet-wide) the fleet's free room could no longer cover with this Job placed.
    A guarantee is room kept for its queue even while the queue is idle; it is counted over the
    whole fleet, as a quota is."""
    unmet: dict[str, ResourceList] = {}
    for name, queue in hub_queues.items():
        guarantee = queue.guarantee
        if name == job.queue or not guarantee:
            continue
        used = fleet.queue_use.get(name, ResourceList())
        missing = ResourceList({r: amount - used.get(r) for r, amount in guarantee.items() if amount > used.get(r)})
        if missing:
            unmet[name] = missing
    if not unmet:
        return []
    free = sum(
        (sum(fleet.free[m.name], ResourceList()) for m in fleet.members.values() if m.accepts_new_jobs), ResourceList()
    )
    left = free - job.demand.total
    reserved = sum(unmet.values(), ResourceList())
    short = {r for r, amount in reserved.items() if amount > left.get(r)}
    return sorted(name for name, missing in unmet.items() if short & set(missing))


def _fair_order(pending: list[HubJob], fleet: _Fleet, hub_queues: Mapping[str, Queue]) -> list[HubJob]:
    """Pending Jobs in dispatch order: higher priority first; between queues, the one using the
    least of its weighted share of the fleet; within a queue, oldest first. The shares move as
    the order is built (each Job counted as if dispatched), so queues take turns."""
    capacity = sum((m.capacity for m in fleet.members.values() if m.known), ResourceList())
    queues = {job.queue for job in pending} | set(fleet.queue_use)
    weight = {q: (hub_queues[q].weight if q in hub_queues else 1) for q in queues}
    total_weight = sum(weight.values()) or 1
    by_queue: dict[str, list[HubJob]] = {}
    for job in sorted(pending, key=lambda j: (-j.priority, j.created, j.key)):
        by_queue.setdefault(job.queue, []).append(job)
    use = dict(fleet.queue_use)
    ordered: list[HubJob] = []
    while by_queue:

        def share(q: str) -> float:
            deserved = ResourceList({n: a * weight[q] // total_weight for n, a in capacity.items()})
            return dominant_share(use.get(q, ResourceList()), deserved) if deserved else 0.0

        queue = min(by_queue, key=lambda q: (-by_queue[q][0].priority, share(q), by_queue[q][0].created, q))
        job = by_queue[queue].pop(0)
        if not by_queue[queue]:
            del by_queue[queue]
        use[queue] = use.get(queue, ResourceList()) + job.demand.total
        ordered.append(job)
    return ordered


# A copy in these phases has its gang's pods bound: the member's free room already counts them.
_STARTED = frozenset(JobPhase) - {JobPhase.PENDING}


def _hold_room_for_unstarted(
    jobs: Sequence[HubJob], copy_of: Mapping[tuple[str, str], MemberCopy], fleet: _Fleet
) -> dict[str, tuple[ResourceList, ...]]:
    """Jobs placed on a member whose pods are not bound yet take no room in its snapshot: pack them
    first, so the room they will take is not promised to another Job. What each took of each node
    (by hub uid): the room evicting it gives back."""
    held: dict[str, tuple[ResourceList, ...]] = {}
    for job in jobs:
        if not job.cluster or job.done or job.deleting or job.cluster not in fleet.free:
            continue
        found = copy_of.get((job.cluster, job.uid))
        if found is not None and job_phase({"status": found.status}) in _STARTED:
            continue
        before = fleet.free[job.cluster]
        free_after = pack(before, job.demand.pods)
        if free_after is not None:
            fleet.free[job.cluster] = free_after
            held[job.uid] = tuple(room - left for room, left in zip(before, free_after, strict=True))
    return held


def _room_taken(bound: tuple[ResourceList, ...], held: tuple[ResourceList, ...] | None) -> tuple[ResourceList, ...]:
    """What a placed Job takes of each node: its bound pods' room and the room held for the rest."""
    if held is None:
        return bound
    if not bound:
        return held
    return tuple(a + b for a, b in zip(bound, held, strict=True))


def _carry_spec_changes(
    edited: Sequence[tuple[HubJob, MemberCopy]], fleet: _Fleet, hub_queues: Mapping[str, Queue]
) -> list[Action]:
    """Hub Jobs whose spec changed after dispatch: the change goes to the copy, unless it makes
    the Job ask more while its queue's placed Jobs, counted at their hub sizes (so with this
    change), are past the queue's fleet-wide capability: then it is held, and the user told once,
    until the queue is back within it. A change that asks less always goes."""
    actions: list[Action] = []
    for job, its_copy in edited:
        grows = not within(job.demand.total, its_copy.total)
        capability = fleet_capability(job.queue, hub_queues, fleet.members.values())
        use = fleet.queue_use.get(job.queue, ResourceList())
        if grows and capability and not within(use, capability):
            if job.held != job.generation:
                message = (
                    f"the change (generation {job.generation}) would take queue {job.queue} past its fleet-wide "
                    "capability: held until the queue is back within it"
                )
                actions.append(HoldChange(job.key, job.generation, message))
            continue
        actions.append(UpdateCopy(its_copy.member, job.key, its_copy.uid, job.placement, job.generation))
    return actions


def plan(
    jobs: Sequence[HubJob],
    members: Mapping[str, MemberView],
    copies: Mapping[str, Sequence[MemberCopy]],
    hub_queues: Mapping[str, Queue],
    policy: Policy,
    now: float,
) -> list[Action]:
    """The actions that bring the fleet to what the hub asks. `copies` holds, for each member
    listed just now, every copy found there (a member absent from it was not listed: nothing is
    concluded about its copies)."""
    actions: list[Action] = []
    by_uid = {job.uid: job for job in jobs if not job.deleting}
    copy_of: dict[tuple[str, str], MemberCopy] = {}
    ahead: set[str] = set()  # hub uids whose read lags a copy
    fenced: dict[str, MemberCopy] = {}  # hub uid -> its current copy, which the member's fence stopped
    for member_name, found in copies.items():
        for member_copy in found:
            hub = by_uid.get(member_copy.hub_uid)
            if hub is None:
                actions.append(DeleteCopy(member_name, member_copy.key, member_copy.uid, "its hub job is gone"))
            elif member_copy.placement > hub.placement:
                # Newer than the hub Job as read: the read is behind the federation's own write
                # (placements only grow, and the hub is written first). Nothing to conclude yet.
                ahead.add(hub.uid)
                continue
            elif hub.cluster != member_name or hub.placement != member_copy.placement:
                actions.append(
                    DeleteCopy(
                        member_name,
                        member_copy.key,
                        member_copy.uid,
                        f"stale: placement {hub.placement} is on {hub.cluster or 'no member'}",
                    )
                )
            elif member_copy.fenced:
                # The member stopped it when the lease ran out: the Job runs nowhere now.
                fenced[hub.uid] = member_copy
            else:
                copy_of[(member_name, hub.uid)] = member_copy

    fleet = _Fleet(
        members=dict(members),
        free={name: list(m.node_free) for name, m in members.items()},
        queue_use={},
        queue_on_member={},
    )
    pending: list[HubJob] = []
    moving: dict[Key, tuple[str, str]] = {}  # Jobs placed again: (the member to avoid, why)

    def place_again(job: HubJob, avoid: str, why: str) -> None:
        """Take the Job off its member (its room and its queue's use there) and into pending."""
        fleet.queue_use[job.queue] = fleet.queue_use[job.queue] - job.demand.total
        fleet.queue_on_member[(job.queue, job.cluster)] -= job.demand.total
        moving[job.key] = (avoid, why)
        pending.append(job)

    edited: list[tuple[HubJob, MemberCopy]] = []  # spec changed on the hub since the copy was made
    for job in jobs:
        if job.deleting or job.uid in ahead:
            continue
        if not job.cluster:
            if not job.done:
                pending.append(job)
            continue
        if not job.done:
            fleet.queue_use[job.queue] = fleet.queue_use.get(job.queue, ResourceList()) + job.demand.total
            key = (job.queue, job.cluster)
            fleet.queue_on_member[key] = fleet.queue_on_member.get(key, ResourceList()) + job.demand.total
        member = members.get(job.cluster)
        listed = job.cluster in copies
        stopped = fenced.get(job.uid)
        if stopped is not None:
            # Back to pending, as an evicted Job (placed again next cycle, with the next placement
            # number; this member may take it: it answers again), and the stopped copy removed.
            why = f"the copy in {job.cluster} was stopped when the hub's lease there ran out"
            if job.done:
                actions.append(DeleteCopy(job.cluster, stopped.key, stopped.uid, why))
            else:
                actions.append(Evict(job.key, job.cluster, stopped.uid, names.REASON_FENCED, why))
            continue
        its_copy = copy_of.get((job.cluster, job.uid))
        if its_copy is not None:
            if dict(its_copy.status) != dict(job.status) and its_copy.status:
                actions.append(SetStatus(job.key, its_copy.status))
            if not job.done and its_copy.hub_generation < job.generation:
                edited.append((job, its_copy))
            continue
        if job.done:
            continue
        if member is not None and listed:
            if job.dispatched != job.placement:
                actions.append(CreateCopy(job.key, job.cluster, job.placement))
            elif not _says(job, names.REASON_DELETED_IN_MEMBER, ""):
                status = _with_state(job.status, JobPhase.TERMINATED, names.REASON_DELETED_IN_MEMBER, "")
                actions.append(
                    SetStatus(
                        job.key,
                        status,
                        ("Warning", names.REASON_DELETED_IN_MEMBER, f"the copy in {job.cluster} was deleted there"),
                    )
                )
            continue
        # The member was not listed just now: gone from the hub, silent, or written to since.
        silent_for = (
            now - member.last_heartbeat if member is not None and member.last_heartbeat is not None else float("inf")
        )
        if member is not None and silent_for < policy.unreachable_after:
            continue  # it answered recently: nothing to conclude yet
        lost = member is None or silent_for >= policy.redispatch_after
        if lost and job.on_member_loss == names.REDISPATCH:
            place_again(job, job.cluster, f"member cluster {job.cluster} lost")
            continue
        message = f"member cluster {job.cluster} is not answering" + (
            "" if member is not None else " (its Cluster is gone)"
        )
        if not _says(job, names.REASON_UNREACHABLE, message):
            status = _with_state(job.status, job.phase, names.REASON_UNREACHABLE, message)
            actions.append(SetStatus(job.key, status, ("Warning", names.REASON_UNREACHABLE, message)))

    actions += _carry_spec_changes(edited, fleet, hub_queues)
    held = _hold_room_for_unstarted(jobs, copy_of, fleet)
    running = [
        _Running(job, its_copy, _room_taken(its_copy.on_nodes, held.get(job.uid)))
        for job in jobs
        if job.cluster and not job.done and not job.deleting
        for its_copy in [copy_of.get((job.cluster, job.uid))]
        if its_copy is not None
    ]
    evicted: set[str] = set()
    for job in _fair_order(pending, fleet, hub_queues):
        away_from, why = moving.get(job.key, ("", ""))
        choice = choose(job, fleet, hub_queues, policy, exclude=away_from)
        # Waiting for room, or for its queue's quota (evicting Jobs of its own queue gives some back);
        # a Job being moved off a lost member too, on another member.
        if choice.reason in (names.REASON_WAITING, names.REASON_QUOTA):
            left = [r for r in running if r.job.uid not in evicted]
            room = _evictions_for(job, fleet, left, hub_queues, policy, exclude=away_from)
            if room is not None:
                member_name, victims, free_after = room
                for victim, reason in victims:
                    evicted.add(victim.job.uid)
                    fleet.queue_use[victim.job.queue] -= victim.job.demand.total
                    fleet.queue_on_member[(victim.job.queue, member_name)] -= victim.job.demand.total
                    namespace, name = job.key
                    message = f"evicted from member cluster {member_name} for {namespace}/{name}"
                    actions.append(Evict(victim.job.key, member_name, victim.copy.uid, reason, message))
                choice = Choice(member_name, free_after=tuple(free_after))
        if choice.member is None:
            if not _says(job, choice.reason, choice.message):
                was_placed = job.key in moving
                status = _with_state({} if was_placed else job.status, JobPhase.PENDING, choice.reason, choice.message)
                event = ("Warning", choice.reason, choice.message) if choice.reason == names.REASON_NEVER_FITS else None
                actions.append(SetStatus(job.key, status, event))
            continue
        fleet.commit(choice.member, job, choice.free_after)
        if why:
            reason = names.REASON_REDISPATCHED
            message = f"{why}; placed on {choice.member}"
        else:
            reason, message = names.REASON_DISPATCHED, f"placed on member cluster {choice.member}"
        actions.append(Dispatch(job.key, choice.member, job.placement + 1, reason, message))
    return actions
