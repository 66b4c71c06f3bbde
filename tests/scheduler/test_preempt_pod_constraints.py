"""Preempt and reclaim resolve a conflict that evicting a pod removes (issue 17; kube-scheduler's
preemption re-runs its filters with the victims gone): a preemptor whose required pod
anti-affinity selects a running victim, a victim whose own anti-affinity selects the preemptor,
a host port a victim holds. The blocking victims go first, and only as many others as the
resources need; a blocker that may not be evicted, or that runs on another node of the domain,
leaves the node to the preemptor's rivals."""

from __future__ import annotations

import copy
from typing import Any

from lahar.scheduler.framework.session import Session
from tests.scheduler.preempt_builders import a_pod, cluster, conf, gang, node, prioritised, queue, run, running

Obj = dict[str, Any]
HOST = "kubernetes.io/hostname"
PREEMPT = conf("preempt", ["priority", {"name": "gang", "enablePreemptable": False}], ["predicates", "proportion"])


def evicted(session: Session) -> list[str]:
    return sorted(eviction.task.name for eviction in session.evictions)


def pipelined(session: Session) -> dict[str, str]:
    return {task.name: task.node for task in session.pipelined}


def shaped(obj: Obj, labels: dict[str, str] | None = None, anti: dict[str, str] | None = None, key: str = HOST) -> Obj:
    """The pod with `labels`, and a required anti-affinity to the pods labelled `anti` over `key`."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["labels"] = dict(labels or {})
    if anti:
        term = {"labelSelector": {"matchLabels": anti}, "topologyKey": key}
        obj["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return obj


def host_port(obj: Obj, port: int) -> Obj:
    obj = copy.deepcopy(obj)
    obj["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": port}]
    return obj


def labelled_node(name: str, zone: str = "a", cpu: str = "2") -> Obj:
    obj = node(name, cpu=cpu, memory="8Gi")
    obj["metadata"]["labels"] = {HOST: name, "zone": zone}
    return obj


def preemptor(queue_name: str = "", **shape: Any) -> Obj:
    return shaped(prioritised(a_pod("high", cpu="1", memory="1Gi", queue=queue_name), 10), **shape)


def low(name: str, node_name: str, priority: int = 1, queue_name: str = "", group: str = "", **shape: Any) -> Obj:
    return shaped(running(name, node_name, priority, cpu="1", memory="1Gi", queue=queue_name, group=group), **shape)


def test_the_preemptors_anti_affinity_evicts_the_pod_it_selects_and_no_other() -> None:
    # n1 holds two low pods and has no room; lowest first would take "plain" (priority 1), but
    # only the eviction of "db" (priority 2) lets the preemptor's anti-affinity pass.
    cache = cluster(
        labelled_node("n1"),
        low("plain", "n1", 1),
        low("db", "n1", 2, labels={"app": "db"}),
        preemptor(anti={"app": "db"}),
    )
    session = run(cache, PREEMPT)
    assert evicted(session) == ["db"]
    assert pipelined(session) == {"high": "n1"}


def test_a_blocker_goes_even_where_resources_already_fit() -> None:
    cache = cluster(labelled_node("n1", cpu="4"), low("db", "n1", labels={"app": "db"}), preemptor(anti={"app": "db"}))
    session = run(cache, PREEMPT)
    assert evicted(session) == ["db"] and pipelined(session) == {"high": "n1"}


def test_a_victims_own_anti_affinity_to_the_preemptor_is_resolved_by_evicting_it() -> None:
    cache = cluster(
        labelled_node("n1", cpu="4"),
        low("guard", "n1", anti={"app": "web"}),
        low("other", "n1"),
        preemptor(labels={"app": "web"}),
    )
    session = run(cache, PREEMPT)
    assert evicted(session) == ["guard"] and pipelined(session) == {"high": "n1"}


def test_a_blocker_that_may_not_be_evicted_leaves_the_node_for_another() -> None:
    # n1's blocker has a higher priority than the preemptor; n2 is full of low pods it may take.
    cache = cluster(
        labelled_node("n1", cpu="4"),
        low("db", "n1", 50, labels={"app": "db"}),
        labelled_node("n2"),
        low("a", "n2"),
        low("b", "n2"),
        preemptor(anti={"app": "db"}),
    )
    session = run(cache, PREEMPT)
    assert evicted(session) == ["a"] or evicted(session) == ["b"]
    assert pipelined(session) == {"high": "n2"}


def test_nothing_is_evicted_when_no_node_can_be_freed_of_its_blockers() -> None:
    cache = cluster(labelled_node("n1"), low("db", "n1", 50, labels={"app": "db"}), low("x", "n1"))
    cache.add_pod(preemptor(anti={"app": "db"}))
    session = run(cache, PREEMPT)
    assert session.evictions == [] and session.pipelined == []


def test_a_zone_blocker_on_another_node_is_not_resolved_by_evictions_here() -> None:
    # Zone a: n1 (full of low pods) and n2, where a high-priority db pod runs. Evicting on n1 never
    # empties the zone of db pods, so nothing is evicted; zone b's n3 takes the preemptor later.
    cache = cluster(
        labelled_node("n1"),
        low("x", "n1"),
        low("y", "n1"),
        labelled_node("n2"),
        low("db", "n2", 50, labels={"app": "db"}),
        low("z", "n2"),
        preemptor(anti={"app": "db"}, key="zone"),
    )
    session = run(cache, PREEMPT)
    assert session.evictions == [] and session.pipelined == []


def test_a_host_port_held_by_a_lower_pod_is_freed_by_evicting_it() -> None:
    cache = cluster(
        labelled_node("n1", cpu="4"),
        host_port(low("holder", "n1"), 8080),
        low("other", "n1"),
        host_port(preemptor(), 8080),
    )
    session = run(cache, PREEMPT)
    assert evicted(session) == ["holder"] and pipelined(session) == {"high": "n1"}


def test_reclaim_evicts_the_blocker_of_the_overused_queue() -> None:
    # Queue "big" uses the whole cluster with a job of two pods (a gang of 1: one may go); "small"
    # is owed half. Its pod's anti-affinity selects big's db pod, which reclaim evicts (not
    # "plain", the lower in order).
    reclaim = conf("reclaim", ["priority", "gang"], ["predicates", "proportion"])
    cache = cluster(
        queue("big"),
        queue("small"),
        gang("big-job", 1, queue="big", phase="Running"),
        labelled_node("n1"),
        low("plain", "n1", 1, "big", "big-job"),
        low("db", "n1", 2, "big", "big-job", labels={"app": "db"}),
        preemptor("small", anti={"app": "db"}),
    )
    session = run(cache, reclaim)
    assert evicted(session) == ["db"] and pipelined(session) == {"high": "n1"}
