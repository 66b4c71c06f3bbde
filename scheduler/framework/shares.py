"""What the queue plugins (proportion, capacity) share when they pick reclaim victims: the
victims go in the action's order, each lowering its queue's allocation for the next, and a victim
is taken only while its queue, as the earlier victims left it, is above its share by the plugin's
own rule and stays at or above its guarantee once the victim is gone."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from lahar.scheduler.model import QueueInfo, TaskInfo

# (queue, its allocation as the earlier victims left it, the victim's request) -> may it lose it
OverShare = Callable[[QueueInfo, np.ndarray, np.ndarray], bool]


def victims_over_share(
    candidates: Iterable[TaskInfo],
    queue_of: Callable[[TaskInfo], QueueInfo | None],
    columns: np.ndarray,
    over_share: OverShare,
) -> list[TaskInfo]:
    """The candidates (in order) whose queue `over_share` lets lose them, each leaving its queue's
    allocation at or above its guarantee on `columns`; a candidate of no known queue is left out."""
    left: dict[str, np.ndarray] = {}  # queue -> allocation once the victims chosen so far are gone
    chosen = []
    for victim in candidates:
        queue = queue_of(victim)
        if queue is None:
            continue
        allocated = left.get(queue.name, queue.allocated)
        if not over_share(queue, allocated, victim.request):
            continue
        after = allocated - victim.request
        if (after[columns] < queue.guarantee[columns]).any():
            continue
        left[queue.name] = after
        chosen.append(victim)
    return chosen
