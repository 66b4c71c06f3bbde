"""A predicate or score registered with `applies(task)` is asked only for the tasks it applies
to (once per class), and adds nothing for the others: the hot path's skip must not change what
a plugin that does apply decides."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from lahar.scheduler.framework.plugin import PLUGINS, Plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import NodeTable, Rows, TaskInfo
from tests.scheduler.volcano_cases import binds, outcome, quantities, vc_node, vc_pod, vc_podgroup, vc_queue

CALLS: dict[str, list[str]] = {"predicate": [], "score": []}


class PickyAboutOnePod(Plugin):
    """Refuses node n1 and scores n2 high, but only for pods named picky-* (a test's shortcut: the
    name stands for what a real plugin reads, and the picky pod has a placement class of its own)."""

    name = "picky-about-one-pod"

    def on_session_open(self, session: Session) -> None:
        picky: Callable[[TaskInfo], bool] = lambda task: task.name.startswith("picky")  # noqa: E731
        session.add_predicate_fn(self.predicate, applies=picky)
        session.add_node_order_fn(self.score, applies=picky)

    def predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        CALLS["predicate"].append(task.name)
        return np.array([name != "n1" for name in nodes.names], dtype=bool)[rows]

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        CALLS["score"].append(task.name)
        return np.array([100.0 if name == "n2" else 0.0 for name in nodes.names])[rows]


@pytest.fixture
def picky(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(PLUGINS, PickyAboutOnePod.name, PickyAboutOnePod)
    for calls in CALLS.values():
        calls.clear()
    yield


def test_a_callback_is_asked_only_for_the_tasks_it_applies_to(picky: None) -> None:
    objects: list[dict[str, Any]] = [vc_queue("q1", 1), vc_node("n1", "4", "4G", 10), vc_node("n2", "4", "4G", 10)]
    # `applies` is asked once per placement class, so the picky pod is of its own class (2 CPUs)
    for name, cpu in (("picky-a", "2"), ("easy-a", "1"), ("easy-b", "1")):
        objects.append(vc_podgroup(f"pg-{name}", "c1", "q1", 1, {"": 1}, "Inqueue"))
        objects.append(vc_pod("c1", name, "", "Pending", quantities(cpu, "1G"), f"pg-{name}"))
    tiers = ([{"name": "gang"}, {"name": "proportion"}, {"name": "predicates"}, {"name": PickyAboutOnePod.name}],)
    session = outcome(objects, "enqueue, allocate", tiers)
    placed = binds(session)
    assert placed["c1/picky-a"] == "n2"  # the plugin's predicate and score held for it
    assert {"c1/easy-a", "c1/easy-b"} <= placed.keys()
    assert CALLS["predicate"] and set(CALLS["predicate"]) == {"picky-a"}
    assert set(CALLS["score"]) <= {"picky-a"}
