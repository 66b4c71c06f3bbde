"""`framework.shares.victims_over_share`, the reclaim victim walk proportion and capacity share:
victims in order, each lowering its queue's allocation for the next, taken only while the
plugin's rule says the queue is over its share and the queue stays at or above its guarantee."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from lahar.api.queue import QueueState
from lahar.scheduler.framework.shares import victims_over_share
from lahar.scheduler.model import QueueInfo

COLUMNS = np.array([0, 1])


def queue(name: str, allocated: list[int], deserved: list[int], guarantee: list[int]) -> QueueInfo:
    unbounded, unset = np.array([-1, -1]), np.array([0, 0])
    spec = (1, unbounded, np.array(guarantee), unset, True, QueueState.OPEN, 0, "", None)
    return QueueInfo(name, *spec, allocated=np.array(allocated), deserved=np.array(deserved))


def victim(name: str, queue_name: str, cpu: int, memory: int = 0) -> Any:
    return SimpleNamespace(name=name, queue=queue_name, request=np.array([cpu, memory]))


def above_deserved(queue: QueueInfo, allocated: np.ndarray, request: np.ndarray) -> bool:
    return bool((allocated > queue.deserved).any())


def names(chosen: list[Any]) -> list[str]:
    return [task.name for task in chosen]


def test_each_victim_lowers_its_queue_for_the_next_and_stops_at_the_share() -> None:
    big = queue("big", [6, 0], [3, 0], [0, 0])
    candidates = [victim(f"v{i}", "big", 1) for i in range(5)]
    chosen = victims_over_share(candidates, lambda task: {"big": big}[task.queue], COLUMNS, above_deserved)
    # 6 → 5 → 4 → 3: the fourth candidate finds the queue at its deserved 3.
    assert names(chosen) == ["v0", "v1", "v2"]
    assert big.allocated.tolist() == [6, 0]  # the queue itself is not changed


def test_a_victim_that_would_take_its_queue_below_its_guarantee_is_passed_over() -> None:
    guarded = queue("guarded", [6, 0], [2, 0], [5, 0])
    candidates = [victim("large", "guarded", 2), victim("small", "guarded", 1), victim("next", "guarded", 1)]
    chosen = victims_over_share(candidates, lambda task: guarded, COLUMNS, above_deserved)
    assert names(chosen) == ["small"]  # 6 − 2 < 5; 6 − 1 = 5; then 5 − 1 < 5


def test_queues_are_counted_apart_and_unknown_queues_give_no_victims() -> None:
    queues = {"a": queue("a", [2, 0], [1, 0], [0, 0]), "b": queue("b", [1, 0], [1, 0], [0, 0])}
    candidates = [victim("a0", "a", 1), victim("b0", "b", 1), victim("x0", "gone", 1), victim("a1", "a", 1)]
    chosen = victims_over_share(candidates, lambda task: queues.get(task.queue), COLUMNS, above_deserved)
    assert names(chosen) == ["a0"]


def test_the_plugin_rule_sees_the_victims_request() -> None:
    memory_heavy = queue("m", [1, 8], [4, 4], [0, 0])

    def over_on_what_it_holds(queue: QueueInfo, allocated: np.ndarray, request: np.ndarray) -> bool:
        held = request > 0
        return bool((allocated[held] > queue.deserved[held]).any())

    candidates = [victim("cpu-only", "m", 1), victim("memory", "m", 0, 2)]
    chosen = victims_over_share(candidates, lambda task: memory_heavy, COLUMNS, over_on_what_it_holds)
    assert names(chosen) == ["memory"]
