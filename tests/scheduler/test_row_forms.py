"""Row forms: after a placement the session brings a class's cached node answers up to date one
changed row at a time through the callbacks' plain-Python row forms (`Session.add_predicate_fn`'s
`row`). Those must give exactly what the array forms give, or the cached answers would drift from
what a full evaluation says and decisions would depend on the order nodes changed in."""

from __future__ import annotations

import random

import numpy as np
import pytest

from lahar.scheduler.framework.session import ROW_BY_ROW, Session, Statement
from lahar.scheduler.model import TaskInfo
from tests.scheduler.cluster_fixtures import Obj, conf, node, pod
from tests.scheduler.preempt_builders import GIB, Clock, cluster, opened, report, store

GPU = "nvidia.com/gpu"
PREFER_B = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 7, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}},
            {"weight": 3, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]}},
        ]
    }
}
SOFT = {"key": "spare", "value": "yes", "effect": "PreferNoSchedule"}
HARD = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
BE = {"lahar.dev/qos-class": "BE"}
# One placement class each; copy 0 of each is never placed and stands for its class.
CLASSES: dict[str, dict[str, object]] = {
    "small": {"cpu": "500m", "memory": "1Gi"},
    "big": {"cpu": "3", "memory": "12Gi"},
    "gpu": {"cpu": "1", "memory": "2Gi", GPU: "1"},
    "prefer": {"cpu": "700m", "memory": "3Gi", "affinity": PREFER_B, "tolerations": [dict(SOFT)]},
    "zone-a": {"cpu": "1", "memory": "1Gi", "node_selector": {"zone": "a"}},
    "cpu-only": {"cpu": "1500m", "memory": None},
    "be": {"cpu": "500m", "memory": "1Gi", "annotations": BE},  # counts in be_used
}
COPIES = 12


def _objects(rng: random.Random) -> list[Obj]:
    objects = []
    for i in range(16):
        extra = {GPU: "4"} if i % 3 == 0 else {}
        taints = [SOFT] if i % 5 == 1 else [HARD] if i % 7 == 6 else []
        objects.append(
            node(
                f"n{i:02d}",
                cpu=rng.choice(["2", "4", "8", "6500m"]),
                memory=rng.choice(["8Gi", "32Gi", "12Gi"]),
                pods=rng.choice([3, 8, 110]),
                labels={"zone": "abc"[i % 3]},
                taints=taints,
                unschedulable=i == 4,
                **extra,
            )
        )
    objects.append(node("no-memory", cpu="4", memory="0"))  # scores as full on memory
    objects.append(pod("already", cpu="1", memory="6Gi", node_name="n03", phase="Running"))
    objects.append(pod("harvest", cpu="2", memory="4Gi", node_name="n06", phase="Running", annotations=BE))
    for name, fields in CLASSES.items():
        objects += [pod(f"{name}-{i:02d}", **fields) for i in range(COPIES)]  # type: ignore[arg-type]
    return objects


def _session(seed: int) -> Session:
    rng = random.Random(seed)
    clock = Clock()
    reports = store(
        clock,
        # What the agents lend BE pods (oversubscription): BE pods borrow only on these nodes.
        report("n00", cpu_ratio=0.3, memory_used=4 * GIB, reclaimable={"cpu": 1500, "memory": 6 * GIB}),
        report("n01", cpu_ratio=0.95),  # over the usage threshold: filtered
        report("n02", cpu_ratio=0.55, memory_used=20 * GIB, reclaimable={"cpu": 3000, "memory": 2 * GIB}),
        report("n05", cpu_ratio=0.1, memory_total=8 * GIB, memory_used=1 * GIB, reclaimable={"cpu": 700}),
        report("n06", cpu_ratio=0.2, reclaimable={"cpu": 4000, "memory": 16 * GIB}),
        report("n09", reclaimable={"cpu": 2500, "memory": 8 * GIB}),
    )
    configuration = conf(
        "allocate",
        [
            "predicates",
            "nodeorder",
            {"name": "binpack", "arguments": {"binpack.resources": GPU, f"binpack.resources.{GPU}": 2}},
            "usage",
            "oversubscription",
        ],
    )
    return opened(cluster(*_objects(rng)), configuration, reports)


def _tasks(session: Session) -> dict[str, list[TaskInfo]]:
    by_class: dict[str, list[TaskInfo]] = {name: [] for name in CLASSES}
    for job in session.jobs.values():
        for task in job.tasks.values():
            if not task.node:
                by_class[task.name.rsplit("-", 1)[0]].append(task)
    for tasks in by_class.values():
        tasks.sort(key=lambda task: task.name)
    return by_class


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_row_by_row_updates_match_a_full_evaluation_after_random_placements(seed: int) -> None:
    session = _session(seed)
    rng = random.Random(seed * 7919)
    by_class = _tasks(session)
    standing = {name: tasks[0] for name, tasks in by_class.items()}
    movable = [task for tasks in by_class.values() for task in tasks[1:]]
    for task in standing.values():  # every class has row forms for all that applies to it
        assert session._row_forms_of(task) is not None
        scores = session.candidate_scores(task)
        assert (scores > -np.inf).any() and (scores == -np.inf).any()  # both kinds of answer compared
    statement: Statement | None = None
    row_updates = 0
    for step in range(80):
        if statement is None or rng.random() < 0.25:
            if statement is not None and rng.random() < 0.4:
                statement.discard()  # undone placements change rows too
            statement = session.statement()
        pending = [task for task in movable if not session.jobs[task.job].tasks[task.uid].node]
        task = rng.choice(pending)
        feasible = np.flatnonzero(session.candidate_scores(task) > -np.inf)
        if len(feasible):
            statement.allocate(task, int(rng.choice(feasible)))  # anywhere feasible: varied usage
        for name, standing_task in standing.items():
            state = session._classes.get(session.class_key(standing_task))
            behind = len(session._change_log) - state.synced if state is not None else 0
            row_updates += 0 < behind <= ROW_BY_ROW
            cached = session.candidate_scores(standing_task)
            full = session._evaluate(standing_task, slice(None))
            assert np.array_equal(cached, full), f"step {step}, class {name}: {cached} != {full}"
    assert row_updates > 100  # the row forms did the updating


def test_each_row_form_answers_as_its_array_form_on_every_row() -> None:
    session = _session(5)
    rng = random.Random(5)
    statement = session.statement()
    by_class = _tasks(session)
    for task in rng.sample([task for tasks in by_class.values() for task in tasks[1:]], 30):
        feasible = np.flatnonzero(session.predicate(task))
        if len(feasible):
            statement.allocate(task, int(rng.choice(feasible)))
    nodes = session.nodes
    checked = set()
    for tasks in by_class.values():
        task = tasks[0]
        for lent in (None, session.be_capacity):
            fits = nodes.fits(task, slice(None), lent)
            assert [nodes.fits_row(task, row, lent) for row in range(len(nodes))] == fits.tolist()
        for kind in ("predicate", "node_order"):
            for registered in session._all(kind):
                assert registered.row is not None, f"{registered.plugin}'s {kind} has no row form"
                whole = registered.fn(task, nodes, slice(None))
                for row in range(len(nodes)):
                    one = registered.row(task, nodes, row)
                    assert type(one) is (bool if kind == "predicate" else float)
                    assert one == whole[row] == registered.fn(task, nodes, slice(row, row + 1))[0]
                checked.add(registered.plugin)
    assert checked == {"predicates", "nodeorder", "binpack", "usage", "oversubscription"}
