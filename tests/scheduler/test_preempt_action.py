"""The preempt action on small clusters: victims within the queue, lowest priority first and only
as many as needed, the preemptor pipelined and the evictions recorded; never across queues,
never BE over LS, never an equal priority; a gang that cannot be pipelined whole evicts nothing."""

from __future__ import annotations

import pytest

from lahar.scheduler.actions.preempt import VictimSearch
from lahar.scheduler.conf import parse_conf
from lahar.scheduler.framework.plugin import ConfError
from lahar.scheduler.framework.session import Session, budget_may_cover
from lahar.scheduler.model import TaskStatus
from tests.scheduler.preempt_builders import (
    a_pod,
    annotate,
    cluster,
    conf,
    gang,
    node,
    prioritised,
    priority_class,
    queue,
    run,
    running,
    spy,
)

PREEMPT = conf("preempt", ["priority", {"name": "gang", "enablePreemptable": False}], ["predicates", "proportion"])
BE = {"lahar.dev/qos-class": "BE"}


def evicted(session: Session) -> list[str]:
    return [eviction.task.name for eviction in session.evictions]


def pipelined(session: Session) -> dict[str, str]:
    return {task.name: task.node for task in session.pipelined}


def full_node(name: str, priorities: list[int], cpu: str = "900m", **kwargs: str) -> list[dict]:
    """A 4-CPU node and one running pod per priority on it (900m each: 3.6 CPUs used)."""
    return [
        node(name, cpu="4", memory="32Gi"),
        *(
            running(f"{name}-p{priority}-{i}", name, priority, cpu=cpu, memory="500Mi", **kwargs)
            for i, priority in enumerate(priorities)
        ),
    ]


def test_lowest_priority_victims_first_and_only_as_many_as_needed() -> None:
    cache = cluster(*full_node("n1", [5, 1, 3, 2]), prioritised(a_pod("high", cpu="2", memory="500Mi"), 10))
    session = run(cache, PREEMPT)
    # 0.4 CPU free: 2 CPUs need two victims, the priority-1 and priority-2 pods.
    assert evicted(session) == ["n1-p1-1", "n1-p2-3"]
    assert all(
        e.reason == "preempt" and e.preemptor is not None and e.preemptor.name == "high" for e in session.evictions
    )
    assert pipelined(session) == {"high": "n1"}
    job = session.jobs["default/high"]
    assert [task.status for task in job.tasks.values()] == [TaskStatus.PIPELINED]
    statuses = {task.name: task.status for task in session.nodes.tasks[0].values()}
    assert statuses["n1-p1-1"] is statuses["n1-p2-3"] is TaskStatus.RELEASING
    assert statuses["n1-p5-0"] is statuses["n1-p3-2"] is TaskStatus.RUNNING


def test_no_preemption_when_nothing_lower_is_there() -> None:
    cache = cluster(*full_node("n1", [10, 10, 20, 30]), prioritised(a_pod("high", cpu="2"), 10))
    session = run(cache, PREEMPT)
    assert session.evictions == [] and session.pipelined == []


def test_the_node_needing_fewest_evictions_is_not_guessed_but_a_fitting_one_is_taken() -> None:
    # n1's victims are all higher priority; n2's are lower: only n2 can work.
    cache = cluster(
        *full_node("n1", [50, 50, 50, 50]),
        *full_node("n2", [1, 1, 1, 1]),
        prioritised(a_pod("high", cpu="3", memory="500Mi"), 10),
    )
    session = run(cache, PREEMPT)
    assert pipelined(session) == {"high": "n2"}
    assert len(session.evictions) == 3 and all(name.startswith("n2-") for name in evicted(session))


def test_no_preemption_across_queues() -> None:
    cache = cluster(
        queue("a"),
        queue("b"),
        *full_node("n1", [0, 0, 0, 0], queue="a"),
        prioritised(a_pod("high", cpu="2", queue="b"), 10),
    )
    session = run(cache, PREEMPT)
    assert session.evictions == [] and session.pipelined == []


def test_preemption_within_the_preemptors_queue_only() -> None:
    cache = cluster(
        queue("a"),
        queue("b"),
        *full_node("n1", [0, 0, 0, 0], queue="a"),
        *full_node("n2", [0, 0, 0, 0], queue="b"),
        prioritised(a_pod("high", cpu="2", memory="500Mi", queue="b"), 10),
    )
    session = run(cache, PREEMPT)
    assert pipelined(session) == {"high": "n2"}
    assert evicted(session) and all(name.startswith("n2-") for name in evicted(session))


def test_best_effort_never_preempts_online_pods() -> None:
    ls_node = full_node("n1", [0, 0, 0, 0])
    be_preemptor = prioritised(annotate(a_pod("be-high", cpu="2", memory="500Mi"), **BE), 10)
    assert run(cluster(*ls_node, be_preemptor), PREEMPT).evictions == []
    # The same pod may preempt BE pods.
    be_node = [
        node("n1", cpu="4", memory="32Gi"),
        *(annotate(running(f"be-{i}", "n1", 0, cpu="900m", memory="500Mi"), **BE) for i in range(4)),
    ]
    session = run(cluster(*be_node, be_preemptor), PREEMPT)
    assert pipelined(session) == {"be-high": "n1"} and len(session.evictions) == 2


def test_a_task_fitting_once_releasing_pods_are_gone_evicts_nothing_more() -> None:
    deleting = running("going", "n2", 0, cpu="3", memory="500Mi")
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    cache = cluster(
        *full_node("n1", [0, 0, 0, 0]),
        node("n2", cpu="4", memory="32Gi"),
        deleting,
        running("stays", "n2", 0, cpu="900m", memory="500Mi"),
        prioritised(a_pod("high", cpu="3", memory="500Mi"), 10),
    )
    session = run(cache, PREEMPT)
    assert pipelined(session) == {"high": "n2"} and session.evictions == []


def test_a_gang_that_cannot_be_pipelined_whole_evicts_nothing() -> None:
    members = [prioritised(a_pod(f"g-{i}", cpu="3", memory="500Mi", group="g"), 10) for i in range(2)]
    objects = [
        priority_class("high", 10),
        gang("g", 2, priority_class="high"),
        *members,
        *full_node("n1", [0, 0, 0, 0]),
        *full_node("n2", [0, 0, 50, 50]),
    ]
    cache = cluster(*objects)
    session = run(cache, PREEMPT)
    # n2 keeps 1.8 CPUs of priority 50: only one member can be placed, so neither is.
    assert session.evictions == [] and session.pipelined == []
    assert all(task.status is TaskStatus.PENDING for task in session.jobs["default/g"].tasks.values())
    # With room for both, the whole gang goes.
    cache.delete_pod(objects[-1])
    session = run(cache, PREEMPT)
    assert sorted(pipelined(session).values()) == ["n1", "n2"]
    assert sorted(name[:2] for name in evicted(session)) == ["n1"] * 3 + ["n2"] * 2
    assert all("-p0-" in name for name in evicted(session))


def test_within_a_job_a_higher_priority_task_preempts_a_lower_one() -> None:
    # Without gang, the priority plugin calls a job starving while any of its tasks waits.
    cache = cluster(
        node("n1", cpu="4", memory="32Gi"),
        gang("g", 1),
        running("g-low", "n1", 1, cpu="3", memory="500Mi", group="g"),
        prioritised(a_pod("g-high", cpu="3", memory="500Mi", group="g"), 5),
    )
    session = run(cache, conf("preempt", ["priority"], ["predicates"]))
    assert evicted(session) == ["g-low"] and pipelined(session) == {"g-high": "n1"}


def budget(name: str, selector: dict | None, namespace: str = "default") -> dict:
    spec = {"maxUnavailable": 5} if selector is None else {"maxUnavailable": 5, "selector": selector}
    return {"kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def test_budget_coverage_as_the_eviction_api_reads_it() -> None:
    web = {"app": "web"}
    assert budget_may_cover(budget("b", {"matchLabels": web}), "default", web)
    assert not budget_may_cover(budget("b", {"matchLabels": web}), "default", {"app": "batch"})
    assert not budget_may_cover(budget("b", {"matchLabels": web}, "other"), "default", web)
    assert budget_may_cover(budget("b", {}), "default", {})  # policy/v1: an empty selector covers all
    assert not budget_may_cover(budget("b", None), "default", web)  # no selector: none
    bad = {"matchExpressions": [{"key": "app", "operator": "Sideways", "values": ["web"]}]}
    assert budget_may_cover(budget("b", bad), "default", web)  # unreadable here: the API decides


def test_evictions_say_whether_a_budget_may_cover_the_victim() -> None:
    """The binder evicts a victim a budget may cover through the Eviction API and deletes the
    others (`Eviction.guarded`)."""
    objects = full_node("n1", [1, 2, 3, 4])
    for obj in objects[1:]:
        obj["metadata"]["labels"] = {"app": "web" if obj["metadata"]["name"] == "n1-p1-0" else "batch"}
    guard = budget("web", {"matchLabels": {"app": "web"}})
    elsewhere = budget("batch", {"matchLabels": {"app": "batch"}}, namespace="other")
    cache = cluster(*objects, guard, elsewhere, prioritised(a_pod("high", cpu="2", memory="500Mi"), 10))
    session = run(cache, PREEMPT)
    assert {e.task.name: e.guarded for e in session.evictions} == {"n1-p1-0": True, "n1-p2-1": False}


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfError, match="maxCandidateNodes"):
        parse_conf('actions: "preempt"\nconfigurations:\n- name: preempt\n  arguments: {maxCandidateNodes: 0}\n')
    parsed = parse_conf('actions: "preempt"\nconfigurations:\n- name: preempt\n  arguments: {victims: 3}\n')
    assert "action preempt: unknown argument 'victims' ignored" in parsed.warnings[0]


def test_preemption_frees_a_gpu_share_on_its_device() -> None:
    gpus = {"nvidia.com/gpu": "1", "lahar.dev/gpu-memory": "16Gi"}
    holder = annotate(
        running("holder", "g1", 0, cpu="1", memory="1Gi", extended={"lahar.dev/gpu-memory": "12Gi"}),
        **{"lahar.dev/gpu-index": "0"},
    )
    small = running("small", "g1", 0, cpu="1", memory="1Gi", extended={"lahar.dev/gpu-memory": "2Gi"})
    wanting = prioritised(a_pod("wanting", cpu="1", memory="1Gi", extended={"lahar.dev/gpu-memory": "8Gi"}), 10)
    cache = cluster(node("g1", cpu="16", memory="64Gi", extended=gpus), holder, small, wanting)
    session = run(cache, conf("preempt", ["priority"], ["predicates", "deviceshare"]))
    # Node-wide 2Gi are free and the 2Gi share would not do: the 12Gi holder must go.
    assert "holder" in evicted(session) and pipelined(session) == {"wanting": "g1"}
    assert session.pod_annotations == {"uid-wanting": {"lahar.dev/gpu-index": "0"}}


def test_a_gang_the_nodes_cannot_hold_even_with_every_victim_gone_is_not_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    # Three 3-CPU members, two nodes: even with every lower-priority pod gone each node holds
    # one. The gang is skipped before any member is pipelined (and undone) one by one.
    tried = spy(monkeypatch, VictimSearch, "place")  # (task, ...) per task walked for
    members = [prioritised(a_pod(f"g-{i}", cpu="3", memory="500Mi", group="g"), 10) for i in range(3)]
    objects = [
        priority_class("high", 10),
        gang("g", 3, priority_class="high"),
        *members,
        *full_node("n1", [0, 0, 0, 0]),
        *full_node("n2", [0, 0, 0, 0]),
    ]
    session = run(cluster(*objects), PREEMPT)
    assert session.evictions == [] and session.pipelined == [] and not tried
    # Room for all three once a third node comes: tried, and placed whole.
    session = run(cluster(*objects, *full_node("n3", [0, 0, 0, 0])), PREEMPT)
    assert len(session.pipelined) == 3 and sorted(call[0].name for call in tried) == ["g-0", "g-1", "g-2"]


def test_a_preemptor_its_queue_refuses_as_things_stand_tries_every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    # Queue q runs 7.2 CPUs of low-priority pods on two nodes; the 2-CPU preemptor is refused
    # as things stand (7.2 + 2 over the queue's share). Evicting its own queue's pods gives the
    # queue room back, so every node is tried (Volcano's rule; issue 17: it used to be one).
    walked = spy(monkeypatch, VictimSearch, "_evict_until_fits")  # (task, row, ...) per node walked
    high = prioritised(a_pod("high", cpu="2", memory="500Mi", queue="q"), 10)
    nodes = [*full_node("n1", [0, 0, 0, 0], queue="q"), *full_node("n2", [0, 0, 0, 0], queue="q")]
    # Capability 5: even with a node's four victims gone, 3.6 + 2 > 5.
    session = run(cluster(queue("q", capability={"cpu": "5"}), *nodes, high), PREEMPT)
    assert session.evictions == [] and session.pipelined == [] and len(walked) == 2
    # Capability 8: two victims on its best node make room in the node and in the queue.
    session = run(cluster(queue("q", capability={"cpu": "8"}), *nodes, high), PREEMPT)
    assert len(pipelined(session)) == 1 and len(session.evictions) == 2


def test_a_preemptor_refused_by_its_queue_on_its_best_node_finds_another() -> None:
    # Queue q (capability 4 CPUs) holds 4: n1's one small victim gives too little quota back,
    # n2's victims give enough. n1 is tried first (the preemptor fits there without victims).
    high = prioritised(a_pod("high", cpu="2", memory="500Mi", queue="q"), 10)
    objects = [
        queue("q", capability={"cpu": "4"}),
        node("n1", cpu="4", memory="32Gi"),
        node("n2", cpu="4", memory="32Gi"),
        running("v1", "n1", 0, cpu="500m", memory="500Mi", queue="q"),
        running("v2", "n2", 0, cpu="2", memory="500Mi", queue="q"),
        running("v3", "n2", 0, cpu="1500m", memory="500Mi", queue="q"),
        high,
    ]
    session = run(cluster(*objects), PREEMPT)
    assert pipelined(session) == {"high": "n2"}
    assert sorted(evicted(session)) == ["v2", "v3"]


def test_a_session_evicts_from_its_own_copies_and_leaves_the_cache_as_it_was() -> None:
    # The snapshot shares running jobs with the cache; an eviction clones the victim's job first.
    cache = cluster(*full_node("n1", [5, 1, 3, 2]), prioritised(a_pod("high", cpu="2", memory="500Mi"), 10))
    before = {name: cache.job(f"default/{name}") for name in ("n1-p1-1", "n1-p2-3", "n1-p5-0")}
    session = run(cache, PREEMPT)
    assert evicted(session) == ["n1-p1-1", "n1-p2-3"]
    for name, job in before.items():
        assert cache.job(f"default/{name}") is job
        assert next(iter(job.tasks.values())).status is TaskStatus.RUNNING
    assert session.jobs["default/n1-p1-1"] is not before["n1-p1-1"]  # cloned, then evicted
    assert session.jobs["default/n1-p5-0"] is before["n1-p5-0"]  # untouched: still shared
    assert {t.status for t in cache.snapshot().nodes.tasks[0].values()} == {TaskStatus.RUNNING}
