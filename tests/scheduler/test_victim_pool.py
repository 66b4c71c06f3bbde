"""The victim pool of preempt and reclaim, built every cycle of a preemption wave: which running
tasks it holds, decided once per task (`TaskInfo.spared`) rather than from each pod every cycle,
and built without reading the pods."""

from __future__ import annotations

from typing import Any

from lahar.scheduler.actions.preempt import VictimPool, possible_victims
from tests.scheduler.preempt_builders import a_pod, annotate, cluster, conf, gang, node, opened, running, task

PREEMPT_CONF = conf("preempt", ["priority", {"name": "gang", "enablePreemptable": False}], ["predicates", "proportion"])


class Unread:
    """Stands for a pod that must not be read."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the pod was read ({name})")


def critical(obj: dict) -> dict:
    obj["spec"]["priorityClassName"] = "system-node-critical"
    return obj


def wave_cluster() -> Any:
    return cluster(
        node("n1", cpu="4", memory="32Gi"),
        node("n2", cpu="4", memory="32Gi"),
        running("plain", "n1", 1, cpu="1", memory="500Mi"),
        annotate(running("kept", "n1", 1, cpu="1", memory="500Mi"), **{"volcano.sh/preemptable": "false"}),
        critical(running("critical", "n2", 1, cpu="1", memory="500Mi")),
        running("other", "n2", 2, cpu="2", memory="500Mi"),
        gang("high", 1),
        a_pod("high-0", cpu="4", memory="500Mi", group="high"),
    )


def test_a_task_knows_when_it_is_made_whether_it_may_ever_be_a_victim() -> None:
    session = opened(wave_cluster(), PREEMPT_CONF)
    spared = {name: task(session, name).spared for name in ("plain", "kept", "critical", "other", "high-0")}
    assert spared == {"plain": False, "kept": True, "critical": True, "other": False, "high-0": False}
    assert task(session, "kept").clone().spared


def test_the_pool_is_built_without_reading_a_pod() -> None:
    session = opened(wave_cluster(), PREEMPT_CONF)
    for job in session.jobs.values():
        for each in job.tasks.values():
            each.pod = Unread()  # type: ignore[assignment]
    pool = VictimPool(session, possible_victims(session.jobs.values(), lambda job: True))
    held = set(pool._index)
    assert held == {task(session, "plain").uid, task(session, "other").uid}
    i, j = pool._index[task(session, "plain").uid], pool._index[task(session, "other").uid]
    assert (pool.rows[i], pool.rows[j]) == (session.nodes.index["n1"], session.nodes.index["n2"])
    assert (pool.task_priority[i], pool.task_priority[j]) == (1, 2)
    assert pool.job[i] != pool.job[j] and pool.queue[i] == pool.queue[j]
    assert not pool.best_effort.any() and pool.available.all()
