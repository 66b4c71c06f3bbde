"""capacity: queues get what they are set to deserve, with hierarchical queues (Volcano's capacity
plugin, an alternative to proportion: configure one of the two).

Per queue, over the quota resources (every resource but pod slots):

- real capability: the cluster less every queue's guarantee, plus its own guarantee, within its
  `capability`; deserved: `spec.deserved` within the real capability, at least the guarantee (a
  resource `spec.deserved` leaves out deserves 0, as in Volcano);
- allocated: what its jobs' tasks hold; a parent holds what its whole subtree holds;
- inqueue: the part of its admitted gangs' `minResources` their tasks do not hold yet.

With `spec.parent` (any depth, `root` or nothing at the top) every level counts: a task is
allocatable only if allocated + request ≤ real capability for the queue and every ancestor, on
the resources it asks for; a job is admitted (`job_enqueueable`) only if minResources + allocated
+ inqueue ≤ real capability at every level; only leaf queues run jobs (a job in a queue with
children is refused). The tree is checked each session: a child's capability above its parent's,
or children's guarantees or deserved summing above their parent's, gets an `InvalidQueueHierarchy`
Warning event on the parent and refuses that subtree (Volcano stops scheduling every queue); a
missing parent or a looping chain is reported on the queue (`InvalidParent`) and cut there.

- queue_order: higher `spec.priority`, then the smaller share (max over resources of allocated /
  deserved);
- preemptive (may reclaim): the queue is Open, allocated + request stays within its real
  capability, and within its deserved share on some resource the task asks for that it deserves;
- reclaimable: victims that hold something the reclaimer asks for, of queues holding more
  than they deserve on a resource the victim holds and the queue deserves (a victim holding
  only resources its queue deserves none of may go, Volcano's "immediate victim"), never taking
  a queue below its guarantee, each victim lowering its queue's count for the next (across the
  tree: leaf against leaf, a parent's count following its children).

`ancestorReclaimLevel` (0: off) reclaims only where there is contention up the tree, to that many
levels above the leaf (Volcano's argument of that name; `root` is never checked):

- a victim's ancestor at each depth d ≤ level that is not the reclaimer's ancestor at depth d
  must also hold more than it deserves on a resource the victim holds and it deserves (or
  deserve none of them); the victim then lowers that ancestor's count for the next victim;
- a victim of a queue that deserves none of what it holds, when its queue and the reclaimer's
  share an ancestor within the level and the reclaimer's queue deserves none of what the
  reclaimer asks for, is left alone (two queues living on their parent's share);
- a queue that is not below its deserved share may still reclaim if an ancestor within the level
  is (after the request) below its own, on a resource the request asks for and it deserves.

Under oversubscription (`session.lends_to_be`) BE tasks' cpu and memory is borrowed from the
agents' reclaimable capacity: it is not charged to their queue (allocated, the capability
checks), as in proportion and overcommit.

Not implemented: DRA quotas, elastic resources in admission. `enableHierarchy` is accepted and
changes nothing: the tree is always read from `spec.parent` (a flat set of queues is a tree of
one level).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from lahar.api.resources import ResourceList
from lahar.scheduler.framework.plugin import Arguments, Plugin, integer, register_plugin
from lahar.scheduler.framework.queue_tree import QueueTree, queue_tree
from lahar.scheduler.framework.session import PERMIT, REJECT, Session
from lahar.scheduler.framework.shares import charged_request, charged_totals, uncharged_columns, victims_over_share
from lahar.scheduler.model import CHARGED, JobInfo, QueueInfo, TaskInfo

UNBOUNDED = np.iinfo(np.int64).max


@register_plugin
class CapacityPlugin(Plugin):
    name = "capacity"
    SWITCHES_HONOURED = frozenset({"enableHierarchy", "enabledHierarchy"})
    ARGUMENTS: ClassVar[Arguments] = {"ancestorReclaimLevel": integer(minimum=0)}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        queues = session.queues
        width = len(session.resources)
        self.columns = session.resources.quota_columns
        self.tree: QueueTree = queue_tree(queues)
        self.ancestor_level: int = self.argument("ancestorReclaimLevel", 0)
        self.uncharged = uncharged_columns(session)
        self.inqueue: dict[str, np.ndarray] = {name: np.zeros(width, dtype=np.int64) for name in queues}
        own = {name: np.zeros(width, dtype=np.int64) for name in queues}
        for job in session.jobs.values():
            if job.queue in own:
                if job.totals is not None:
                    own[job.queue] += charged_totals(job.totals, CHARGED, self.uncharged)
                self.inqueue[job.queue] += job.inqueue_request
        own_inqueue = {name: held.copy() for name, held in self.inqueue.items()}
        for queue in queues.values():
            queue.allocated = own[queue.name].copy()
        # A parent holds what its subtree holds (its own jobs included).
        for name, chain in self.tree.ancestors.items():
            for ancestor in chain:
                queues[ancestor].allocated += own[name]
                self.inqueue[ancestor] += own_inqueue[name]
        total = session.total
        guarantees = sum((q.guarantee for q in queues.values() if q.parent in ("", "root")), np.zeros(width, np.int64))
        self.real: dict[str, np.ndarray] = {}
        for queue in queues.values():
            real = np.maximum(total - guarantees, 0) + queue.guarantee
            bounded = queue.capability >= 0
            real[bounded] = np.minimum(real[bounded], queue.capability[bounded])
            self.real[queue.name] = real
            queue.deserved = np.maximum(np.minimum(queue.deserved_spec, real), queue.guarantee)
        self.refused = self._check_tree()
        session.add_queue_order_fn(lambda queue: (-queue.priority, self.share(queue)))
        session.add_allocatable_fn(self.allocatable)
        session.add_preemptive_fn(self.preemptive)
        session.add_job_enqueueable_fn(self.job_enqueueable)
        session.add_job_enqueued_fn(self.job_enqueued)
        session.add_reclaimable_fn(self.victims)
        session.add_event_handler(self._allocated, self._deallocated)

    # -- the tree ----------------------------------------------------------------------------

    def _check_tree(self) -> set[str]:
        """The queues refused this session: a faulty chain's queue, and every queue under a
        parent whose children ask more than it has (each reported)."""
        session, queues, columns = self.session, self.session.queues, self.columns
        refused: set[str] = set()
        for name, why in self.tree.faults.items():
            if queues[name].queue is not None:
                session.record_event("Queue", "", name, "Warning", "InvalidParent", f"queue {name}: {why}")
            refused.add(name)
        for parent, children in self.tree.children.items():
            problems = []
            bounded = queues[parent].capability[columns] >= 0
            for child in children:
                capability = queues[child].capability[columns]
                if (bounded & (capability >= 0) & (capability > queues[parent].capability[columns])).any():
                    problems.append(f"child {child}'s capability exceeds it")
            for field in ("guarantee", "deserved_spec"):
                summed = sum(getattr(queues[child], field)[columns] for child in children)
                own = getattr(queues[parent], field)[columns]
                if ((own > 0) & (summed > own)).any():
                    problems.append(f"its children's {field.replace('_spec', '')} sums exceed its own")
            if problems:
                message = f"queue {parent}: {'; '.join(problems)}; its subtree is not scheduled"
                session.record_event("Queue", "", parent, "Warning", "InvalidQueueHierarchy", message)
                refused.add(parent)
        # A refused queue's descendants are refused with it.
        return {name for name, chain in self.tree.ancestors.items() if name in refused or refused & set(chain)}

    def _levels(self, queue: QueueInfo) -> list[QueueInfo]:
        queues = self.session.queues
        return [queue, *(queues[name] for name in self.tree.ancestors.get(queue.name, ()))]

    def _usable(self, queue: QueueInfo) -> bool:
        return queue.is_open and queue.name not in self.refused and self.tree.is_leaf(queue.name)

    # -- figures -----------------------------------------------------------------------------

    def share(self, queue: QueueInfo) -> float:
        columns = self.columns
        deserved, allocated = queue.deserved[columns], queue.allocated[columns]
        with np.errstate(divide="ignore", invalid="ignore"):
            shares = np.where(deserved > 0, allocated / np.maximum(deserved, 1), np.where(allocated > 0, 1.0, 0.0))
        return float(shares.max(initial=0.0))

    def _within(self, used: np.ndarray, bound: np.ndarray, asked: np.ndarray) -> bool:
        return bool((used[asked] <= bound[asked]).all())

    def _asked(self, request: np.ndarray) -> np.ndarray:
        return self.columns[request[self.columns] > 0]

    # -- decisions ---------------------------------------------------------------------------

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        if not self._usable(queue):
            return False
        request = charged_request(task, self.uncharged)
        asked = self._asked(request)
        return all(
            self._within(level.allocated + request, self.real[level.name], asked) for level in self._levels(queue)
        )

    def preemptive(self, queue: QueueInfo, task: TaskInfo) -> bool:
        if not self._usable(queue):
            return False
        request = charged_request(task, self.uncharged)
        asked = self._asked(request)
        if not self._within(queue.allocated + request, self.real[queue.name], asked):
            return False
        # Below its deserved share on something asked, or an ancestor within the level is.
        return any(self._below_deserved(level, request, asked) for level in self._ancestry(queue))

    def _below_deserved(self, queue: QueueInfo, request: np.ndarray, asked: np.ndarray) -> bool:
        deserving = asked[queue.deserved[asked] > 0]
        return bool((queue.allocated[deserving] + request[deserving] <= queue.deserved[deserving]).any())

    def _ancestry(self, queue: QueueInfo) -> list[QueueInfo]:
        """The queue and its ancestors up to `ancestorReclaimLevel` levels above it (root left out)."""
        return self._levels(queue)[: self.ancestor_level + 1]

    def job_enqueueable(self, job: JobInfo) -> int:
        queue = self.session.queues.get(job.queue)
        if queue is None or not self._usable(queue):
            return REJECT
        if not job.min_resources.any():
            return PERMIT
        asked = self._asked(job.min_resources)
        for level in self._levels(queue):
            wanted = job.min_resources + level.allocated + self.inqueue[level.name]
            if not self._within(wanted, self.real[level.name], asked):
                return REJECT
        return PERMIT

    def job_enqueued(self, job: JobInfo) -> None:
        queue = self.session.queues.get(job.queue)
        if queue is not None:
            for level in self._levels(queue):
                self.inqueue[level.name] += job.min_resources

    def victims(self, reclaimer: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        """Victims that hold something the reclaimer asks for, of queues above their deserved
        share on a resource the victim holds and the queue deserves; a victim holding nothing its
        queue deserves at all may go (Volcano's "immediate victim"). With `ancestorReclaimLevel`,
        its ancestors within the level must agree (module docstring)."""
        columns = self.columns
        wanted = reclaimer.request[columns] > 0
        level = self.ancestor_level
        reclaimers_queue = self.session.queue_of(reclaimer)
        theirs: list[str] = [] if reclaimers_queue is None else self.tree.ancestors.get(reclaimers_queue.name, [])
        # Volcano's condition for leaving an immediate victim alone: both queues live on a shared
        # ancestor's share and the reclaimer's own queue deserves nothing it asks for.
        reclaimer_deserves = reclaimers_queue is not None and bool(
            (reclaimers_queue.deserved[columns][wanted] > 0).any()
        )

        def deserving(queue: QueueInfo, request: np.ndarray) -> np.ndarray:
            return columns[(request[columns] > 0) & (queue.deserved[columns] > 0)]

        def over_share(queue: QueueInfo, allocated: np.ndarray, request: np.ndarray) -> bool:
            if not ((request[columns] > 0) & wanted).any():
                return False  # frees nothing the reclaimer needs
            held = deserving(queue, request)
            if not held.size:
                shares_ancestor = bool(set(self.tree.ancestors.get(queue.name, [])[:level]) & set(theirs[:level]))
                return not (level and shares_ancestor and not reclaimer_deserves)
            return bool((allocated[held] > queue.deserved[held]).any())

        def ancestors_agree(
            victim: TaskInfo, queue: QueueInfo, allocation: Callable[[QueueInfo], np.ndarray]
        ) -> list[QueueInfo] | None:
            charged = []
            for depth, name in enumerate(self.tree.ancestors.get(queue.name, [])[:level]):
                if depth < len(theirs) and theirs[depth] == name:
                    continue  # the reclaimer's own ancestor at that depth: no contention there
                ancestor = self.session.queues[name]
                held = deserving(ancestor, victim.request)
                if held.size and not (allocation(ancestor)[held] > ancestor.deserved[held]).any():
                    return None
                charged.append(ancestor)
            return charged

        also_charged = ancestors_agree if level else None
        return victims_over_share(candidates, self.session.queue_of, columns, over_share, also_charged, self.uncharged)

    # -- events ------------------------------------------------------------------------------

    def _moved(self, task: TaskInfo, sign: int) -> None:
        queue = self.session.queue_of(task)
        if queue is not None:
            charged = charged_request(task, self.uncharged)
            for level in self._levels(queue):
                level.allocated += sign * charged

    def _allocated(self, task: TaskInfo) -> None:
        self._moved(task, 1)

    def _deallocated(self, task: TaskInfo) -> None:
        self._moved(task, -1)

    def on_session_close(self, session: Session) -> None:
        if session.queue_figures:
            return  # proportion's figures, when both are configured

        def quota(vector: np.ndarray) -> ResourceList:
            counted = np.zeros_like(vector)
            counted[self.columns] = vector[self.columns]
            return session.resources.to_list(counted)

        figures: dict[str, dict[str, Any]] = {}
        for queue in session.queues.values():
            figures[queue.name] = {
                "share": self.share(queue),
                "deserved": quota(queue.deserved),
                "allocated": quota(queue.allocated),
                "inqueue": quota(self.inqueue[queue.name]),
                "overused": False,
            }
        session.queue_figures = figures
