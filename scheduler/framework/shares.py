"""What the queue plugins (proportion, capacity) share: what a task charges its queue (BE tasks
borrowing the agents' reclaimable cpu/memory charge none of it), and how reclaim victims are
picked: the victims go in the action's order, each lowering its queue's allocation for the next,
and a victim is taken only while its queue, as the earlier victims left it, is above its share by
the plugin's own rule and stays at or above its guarantee once the victim is gone."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING

import numpy as np

from lahar.scheduler.model import LENT_COLUMNS, QueueInfo, TaskInfo, TaskStatus, requested_in

if TYPE_CHECKING:
    from lahar.scheduler.framework.session import Session


def uncharged_columns(session: Session) -> np.ndarray | None:
    """The columns BE tasks do not charge their queue: under oversubscription (`lends_to_be`)
    their cpu/memory is borrowed from the agents' reclaimable capacity, not from the cluster the
    queues share. None when nothing is lent (every task charges its whole request)."""
    if not session.lends_to_be:
        return None
    return np.array([session.resources.column[name] for name in LENT_COLUMNS])


def charged_totals(totals: np.ndarray, statuses: Collection[TaskStatus], uncharged: np.ndarray | None) -> np.ndarray:
    """What the tasks in `statuses` of a `JobInfo.totals` array (one job's, or several summed)
    charge their queue."""
    if uncharged is None:
        return requested_in(totals, statuses)
    borrowed = requested_in(totals, statuses, best_effort=True)
    borrowed[uncharged] = 0
    return requested_in(totals, statuses, best_effort=False) + borrowed


def charged_request(task: TaskInfo, uncharged: np.ndarray | None) -> np.ndarray:
    """What one task charges its queue."""
    if uncharged is None or not task.best_effort:
        return task.request
    charged = task.request.copy()
    charged[uncharged] = 0
    return charged


# (queue, its allocation as the earlier victims left it, the victim's request) -> may it lose it
OverShare = Callable[[QueueInfo, np.ndarray, np.ndarray], bool]
# (victim, its queue, any queue's allocation as the earlier victims left it) -> the other queues
# (ancestors) that must also be able to lose the victim and are charged with it; None: one may not
AlsoCharged = Callable[[TaskInfo, QueueInfo, Callable[[QueueInfo], np.ndarray]], list[QueueInfo] | None]


def victims_over_share(
    candidates: Iterable[TaskInfo],
    queue_of: Callable[[TaskInfo], QueueInfo | None],
    columns: np.ndarray,
    over_share: OverShare,
    also_charged: AlsoCharged | None = None,
    uncharged: np.ndarray | None = None,
) -> list[TaskInfo]:
    """The candidates (in order) whose queue `over_share` lets lose them, each leaving its queue's
    allocation at or above its guarantee on `columns`, and, with `also_charged`, whose other
    queues it names may lose them too; a candidate of no known queue is left out. A victim
    lowers the allocations by what it charged them (`charged_request`: a BE victim's borrowed
    cpu/memory was never counted)."""
    left: dict[str, np.ndarray] = {}  # queue -> allocation once the victims chosen so far are gone

    def allocation(queue: QueueInfo) -> np.ndarray:
        return left.get(queue.name, queue.allocated)

    chosen = []
    for victim in candidates:
        queue = queue_of(victim)
        if queue is None:
            continue
        allocated = allocation(queue)
        if not over_share(queue, allocated, victim.request):
            continue
        charged = charged_request(victim, uncharged)
        after = allocated - charged
        if (after[columns] < queue.guarantee[columns]).any():
            continue
        others = [] if also_charged is None else also_charged(victim, queue, allocation)
        if others is None:
            continue
        for other in others:
            left[other.name] = allocation(other) - charged
        left[queue.name] = after
        chosen.append(victim)
    return chosen
