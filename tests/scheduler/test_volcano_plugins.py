"""The Volcano plugins Lahar lacked (issue 17), each on the cases its Volcano docs and tests use:
sla, resource-strategy-fit, task-topology (with per-job score caching), tdm with the shuffle
action, and pdb in preempt, reclaim and shuffle."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

import pytest

from lahar.scheduler.conf import ConfError, parse_conf
from lahar.scheduler.framework.session import run_cycle
from lahar.scheduler.plugins.sla import SlaPlugin
from lahar.scheduler.plugins.tdm import TdmPlugin, is_open, window
from tests.scheduler import cluster_fixtures as fx
from tests.scheduler.preempt_builders import a_pod, cluster, conf, node, prioritised, run, running
from tests.scheduler.preempt_builders import gang as gang_obj
from tests.scheduler.preempt_builders import queue as queue_obj

Obj = dict[str, Any]
T0 = datetime.fromisoformat("2024-01-01T00:00:00+00:00").timestamp()


def annotated(obj: Obj, **notes: str) -> Obj:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("annotations", {}).update(notes)
    return obj


def labelled(obj: Obj, **labels: str) -> Obj:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("labels", {}).update(labels)
    return obj


# -- sla --------------------------------------------------------------------------------------------


def pending_group(name: str, created: str, **notes: str) -> Obj:
    group = fx.podgroup(name, 1, phase="Pending", min_resources={"cpu": "1"}, created=created)
    return annotated(group, **notes)


def test_sla_orders_by_deadline_and_admits_jobs_past_it() -> None:
    # Both ask for more than overcommit admits; the one past its SLA is admitted anyway.
    objects = [
        fx.node("n1", cpu="1"),
        pending_group("late", "2024-01-01T00:00:00Z", **{"sla-waiting-time": "1h"}),
        pending_group("early", "2024-01-01T00:30:00Z", **{"sla-waiting-time": "10m"}),
        pending_group("none", "2023-12-31T00:00:00Z"),
    ]
    objects[1]["spec"]["minResources"] = {"cpu": "4"}
    tiers = (["sla"], ["overcommit"])
    session = run_cycle(fx.snapshot(objects), conf("enqueue", *tiers), now=T0 + 45 * 60)
    phases = {job.name: job.phase.value for job in session.jobs.values()}
    assert phases == {"late": "Pending", "early": "Inqueue", "none": "Pending"}  # early's 10m ran out
    order = sorted(session.jobs.values(), key=session.job_order_key)
    assert [job.name for job in order] == ["early", "late", "none"]  # deadlines 00:40, 01:00, none
    session = run_cycle(fx.snapshot(objects), conf("enqueue", *tiers), now=T0 + 2 * 3600)
    assert session.jobs["default/late"].phase.value == "Inqueue"


def test_sla_arguments_are_go_durations() -> None:
    text = 'actions: "enqueue"\ntiers:\n- plugins:\n  - name: sla\n    arguments: {sla-waiting-time: 1h2m3s}\n'
    option = parse_conf(text).tiers[0][0]
    assert SlaPlugin(option.arguments).argument("sla-waiting-time", None) == pytest.approx(3723)
    with pytest.raises(ConfError, match="sla-waiting-time"):
        parse_conf(text.replace("1h2m3s", "soon"))


# -- resource-strategy-fit --------------------------------------------------------------------------

GPU = "nvidia.com/gpu"


def test_resource_strategy_fit_packs_gpus_and_spreads_cpu() -> None:
    nodes = [
        fx.node("busy", cpu="16", **{GPU: "8"}),
        fx.node("idle", cpu="16", **{GPU: "8"}),
    ]
    holder = fx.pod("holder", cpu="1", node_name="busy", phase="Running", **{GPU: "4"})
    wants = fx.pod("wants", cpu="1", **{GPU: "1"})
    packing = {
        "name": "resource-strategy-fit",
        "arguments": {"resources": {"nvidia.com/*": {"type": "MostAllocated", "weight": 2}}},
    }
    assert fx.placed(fx.cycle([*nodes, holder, wants], "allocate", (["predicates", packing],))) == {"wants": "busy"}
    spreading = {"name": "resource-strategy-fit", "arguments": {"resources": {GPU: {"type": "LeastAllocated"}}}}
    assert fx.placed(fx.cycle([*nodes, holder, wants], "allocate", (["predicates", spreading],))) == {"wants": "idle"}
    # The pod's own choice wins over the configuration.
    own = annotated(
        wants,
        **{
            "volcano.sh/resource-strategy-scoring-type": "LeastAllocated",
            "volcano.sh/resource-strategy-weight": '{"nvidia.com/gpu": 1}',
        },
    )
    assert fx.placed(fx.cycle([*nodes, holder, own], "allocate", (["predicates", packing],))) == {"wants": "idle"}


def test_resource_strategy_fit_refuses_bad_arguments() -> None:
    base = 'actions: "allocate"\ntiers:\n- plugins:\n  - name: resource-strategy-fit\n    arguments:\n'
    with pytest.raises(ConfError, match="MostAllocated or LeastAllocated"):
        parse_conf(base + "      resources: {cpu: {type: Fullest}}\n")
    with pytest.raises(ConfError, match=r"resourceWeight names nvidia\.com/a10"):
        parse_conf(base + "      sra: {enable: true, resources: nvidia.com/t4, resourceWeight: {nvidia.com/a10: 1}}\n")
    with pytest.raises(ConfError, match=r"nvidia\.com/gpu\.disk"):
        rates = "{nvidia.com/gpu.disk: 1}"
        parse_conf(
            base + f"      proportional: {{enable: true, resources: nvidia.com/gpu, resourceProportion: {rates}}}\n"
        )
    with pytest.raises(ConfError, match="at least 0"):
        parse_conf(base + "      sra: {enable: true, resources: nvidia.com/gpu, weight: -1}\n")
    assert not parse_conf(base + "      sra: {enable: false, resources: 3}\n").warnings  # off: not read further


def test_proportional_keeps_cpu_for_idle_gpus_and_sra_keeps_gpu_nodes_free() -> None:
    """A cpu-only pod avoids the GPU node with sra, and may not take the cpu its idle GPUs need
    with proportional (4 cores per GPU); a GPU pod is not held back."""
    nodes = [fx.node("gpu", cpu="8", memory="64Gi", **{GPU: "1"}), fx.node("cpu", cpu="8", memory="64Gi")]
    cpu_pod, gpu_pod = fx.pod("cpu-pod", cpu="2"), fx.pod("gpu-pod", cpu="6", **{GPU: "1"})
    sra = {"name": "resource-strategy-fit", "arguments": {"sra": {"enable": True, "resources": GPU, "weight": 10}}}
    assert fx.placed(fx.cycle([*nodes, cpu_pod], "allocate", (["predicates", sra],))) == {"cpu-pod": "cpu"}
    keep = {"enable": True, "resources": GPU, "resourceProportion": {f"{GPU}.cpu": 4, f"{GPU}.memory": 0}}
    proportional = {"name": "resource-strategy-fit", "arguments": {"proportional": keep}}
    big = fx.pod("big", cpu="5")  # 8 - 5 < 4 cores for the idle GPU
    assert fx.placed(fx.cycle([nodes[0], big], "allocate", (["predicates", proportional],))) == {}
    assert fx.placed(fx.cycle([nodes[0], cpu_pod], "allocate", (["predicates", proportional],))) == {"cpu-pod": "gpu"}
    assert fx.placed(fx.cycle([nodes[0], gpu_pod], "allocate", (["predicates", proportional],))) == {"gpu-pod": "gpu"}


# -- task-topology ----------------------------------------------------------------------------------


def topology_job(name: str, **notes: str) -> list[Obj]:
    group = annotated(fx.podgroup(name, 4), **notes)
    pods = [fx.pod(f"{name}-ps-{i}", group=name, task="ps") for i in range(2)]
    pods += [fx.pod(f"{name}-worker-{i}", group=name, task="worker") for i in range(2)]
    return [group, *pods]


NODES = [fx.node(f"n{i}", cpu="2") for i in range(4)]
TOPOLOGY_TIERS = (["gang", "predicates"], ["task-topology"])


def test_task_topology_places_affine_tasks_together_and_anti_affine_apart() -> None:
    together = fx.cycle(
        [*NODES, topology_job("j", **{"volcano.sh/task-topology-affinity": "ps,worker"})], "allocate", TOPOLOGY_TIERS
    )
    placed = fx.placed(together)
    assert placed["j-ps-0"] == placed["j-worker-0"] or placed["j-ps-0"] == placed["j-worker-1"]
    assert len(set(placed.values())) == 2  # two nodes of two pods each
    apart = fx.cycle(
        [*NODES, topology_job("k", **{"volcano.sh/task-topology-anti-affinity": "ps"})], "allocate", TOPOLOGY_TIERS
    )
    ps_nodes = [node for pod, node in fx.placed(apart).items() if "-ps-" in pod]
    assert len(set(ps_nodes)) == 2


def test_task_topology_scores_are_kept_per_job() -> None:
    # Two jobs whose pending pods are alike (one placement class): "near" wants its ps pods
    # together (one runs on n3), "far" wants them apart (one runs on n0). Scores cached for the
    # class would give the second job the first one's view of the nodes it did not change.
    def job(name: str, annotation: str, running_on: str) -> list[Obj]:
        group = annotated(fx.podgroup(name, 1), **{annotation: "ps"})
        first = fx.pod(f"{name}-ps-0", group=name, task="ps", node_name=running_on, phase="Running")
        return [group, first, fx.pod(f"{name}-ps-1", group=name, task="ps")]

    objects = [
        *[fx.node(f"n{i}", cpu="8") for i in range(4)],
        *job("near", "volcano.sh/task-topology-affinity", "n3"),
        *job("far", "volcano.sh/task-topology-anti-affinity", "n0"),
    ]
    placed = fx.placed(fx.cycle(objects, "allocate", TOPOLOGY_TIERS))
    assert placed["near-ps-1"] == "n3" and placed["far-ps-1"] != "n0"


def test_task_topology_order_and_a_bad_annotation() -> None:
    objects = [*NODES, topology_job("o", **{"volcano.sh/task-topology-task-order": "worker,ps"})]
    session = fx.cycle(objects, "allocate", TOPOLOGY_TIERS)
    tasks = sorted(session.jobs["default/o"].tasks.values(), key=session.task_order_key)
    assert [task.task_name for task in tasks] == ["worker", "worker", "ps", "ps"]
    bad = fx.cycle(
        [*NODES, topology_job("b", **{"volcano.sh/task-topology-affinity": "ps,chief"})], "allocate", TOPOLOGY_TIERS
    )
    events = [e for e in bad.events if e.reason == "InvalidTaskTopology"]
    assert len(events) == 1 and "'chief'" in events[0].message
    assert len(fx.placed(bad)) == 4  # the job is still scheduled, without a topology


# -- tdm --------------------------------------------------------------------------------------------

ZONE = "volcano.sh/revocable-zone"


def test_tdm_windows_as_volcano_computes_them() -> None:
    assert window("10:00-21:00") == (600, 1260)
    assert is_open((600, 1260), datetime(2024, 1, 1, 12, 0))
    assert not is_open((600, 1260), datetime(2024, 1, 1, 22, 0))
    assert is_open((1320, 120), datetime(2024, 1, 1, 23, 30))  # ends past midnight
    with pytest.raises(ConfError, match="10:00-21:00"):
        parse_conf(
            'actions: "allocate"\ntiers:\n- plugins:\n  - name: tdm\n    arguments: {tdm.revocable-zone.a: late}\n'
        )


def tdm_tiers(span: str) -> tuple[list[Any], ...]:
    return (["predicates", {"name": "tdm", "arguments": {"tdm.revocable-zone.rz": span, "tdm.evict.period": "0s"}}],)


def test_tdm_lends_revocable_nodes_to_revocable_pods_in_their_window() -> None:
    now = datetime.now()
    # From this hour's start to the next hour's end: open all this hour (at 23:xx it ends tomorrow).
    # "00:00-23:59" closed during 23:59, so the test failed in that minute.
    current = f"{now.hour:02d}:00-{(now.hour + 1) % 24:02d}:59"
    shut = f"{(now.hour + 2) % 24:02d}:00-{(now.hour + 3) % 24:02d}:00"
    nodes = [fx.node("plain", cpu="1"), fx.node("lent", cpu="64", labels={ZONE: "rz"})]
    revocable = annotated(fx.pod("rev"), **{ZONE: "*"})
    ordinary = fx.pod("ord")
    assert fx.placed(fx.cycle([*nodes, revocable, ordinary], "allocate", tdm_tiers(current))) == {
        "rev": "lent",
        "ord": "plain",
    }
    # Alike but for the annotation (one placement class): the cached answers must not mix them.
    # The ordinary pods go first (older), so the class's answers are first asked for them.
    older = "2023-01-01T00:00:00Z"
    twins = [annotated(fx.pod(f"rev-{i}"), **{ZONE: "*"}) for i in range(2)]
    twins += [fx.pod(f"ord-{i}", created=older) for i in range(2)]
    # Enough nodes that one placement re-evaluates one row, not the whole class (zone "none" has
    # no window: its nodes take nobody).
    spare = [fx.node(f"spare-{i}", labels={ZONE: "none"}) for i in range(6)]
    wide = [fx.node("plain", cpu="2"), fx.node("lent", cpu="64", labels={ZONE: "rz"}), *spare]
    placed = fx.placed(fx.cycle([*wide, *twins], "allocate", tdm_tiers(current)))
    assert placed == {"rev-0": "lent", "rev-1": "lent", "ord-0": "plain", "ord-1": "plain"}
    assert fx.placed(fx.cycle([*nodes, revocable, ordinary], "allocate", tdm_tiers(shut))) in (
        {"rev": "plain"},
        {"ord": "plain"},
    )


def test_tdm_shuffle_evicts_preemptable_pods_from_closed_zones() -> None:
    now = datetime.now()
    shut = f"{(now.hour + 2) % 24:02d}:00-{(now.hour + 3) % 24:02d}:00"
    TdmPlugin._last_shuffle = None
    on_loan = annotated(fx.pod("loan", node_name="lent", phase="Running"), **{"volcano.sh/preemptable": "true"})
    kept = fx.pod("kept", node_name="lent", phase="Running")  # not marked preemptable: stays
    objects = [fx.node("lent", labels={ZONE: "rz"}), on_loan, kept]
    session = fx.cycle(objects, "shuffle", tdm_tiers(shut))
    assert [(e.task.name, e.reason) for e in session.evictions] == [("loan", "shuffle")]
    TdmPlugin._last_shuffle = None


# -- pdb --------------------------------------------------------------------------------------------


def budget(name: str, allowed_unavailable: int | str, **match: str) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"maxUnavailable": allowed_unavailable, "selector": {"matchLabels": dict(match)}},
    }


PDB_PREEMPT = conf("preempt", ["priority", {"name": "gang", "enablePreemptable": False}, "pdb"], ["predicates"])


def test_preempt_takes_no_victim_a_budget_protects() -> None:
    victims = [labelled(running(f"web-{i}", "n1", 0, cpu="1", memory="1Gi"), app="web") for i in range(2)]
    high = prioritised(a_pod("high", cpu="1", memory="1Gi"), 10)
    full = node("n1", cpu="2", memory="8Gi")
    protected = run(cluster(full, budget("web", 0, app="web"), *victims, high), PDB_PREEMPT)
    assert protected.evictions == []
    allowed = run(cluster(full, budget("web", 1, app="web"), *victims, high), PDB_PREEMPT)
    assert len(allowed.evictions) == 1


def test_one_cycle_spends_a_budget_only_once() -> None:
    # Two nodes, a victim of the same budget on each, two preemptors: the budget allows one.
    victims = [labelled(running(f"web-{i}", f"n{i}", 0, cpu="2", memory="1Gi"), app="web") for i in range(2)]
    preemptors = [prioritised(a_pod(f"high-{i}", cpu="2", memory="1Gi"), 10) for i in range(2)]
    nodes = [node(f"n{i}", cpu="2", memory="8Gi") for i in range(2)]
    session = run(cluster(*nodes, budget("web", 1, app="web"), *victims, *preemptors), PDB_PREEMPT)
    assert len(session.evictions) == 1


def test_the_cache_keeps_budgets_for_the_sessions() -> None:
    cache = cluster(node("n1"), budget("web", "50%", app="web"))
    assert [b["metadata"]["name"] for b in cache.snapshot().disruption_budgets] == ["web"]
    cache.delete_disruption_budget(budget("web", 1))
    assert cache.snapshot().disruption_budgets == ()


def test_reclaim_takes_no_protected_pod_whatever_tier_decides() -> None:
    # Queue a fills two nodes with web pods a budget allows none of; b is starving. The gang
    # plugin's tier and proportion's choose victims; the budget still has the last word.
    objects: list[Obj] = [node("n1", cpu="4", memory="32Gi"), node("n2", cpu="4", memory="32Gi")]
    objects += [queue_obj("a"), queue_obj("b"), gang_obj("a-job", 1, queue="a", phase="Running")]
    objects += [
        labelled(running(f"a-{i}", f"n{1 + i % 2}", cpu="1", memory="1Gi", queue="a", group="a-job"), app="web")
        for i in range(8)
    ]
    objects += [a_pod(f"b-{i}", cpu="1", memory="1Gi", queue="b") for i in range(3)]
    tiers = (["priority", "gang", "pdb"], ["predicates", "proportion"])
    assert len(run(cluster(*objects), conf("reclaim", *tiers)).evictions) == 3  # no budget: b's share
    protected = run(cluster(*objects, budget("web", 0, app="web")), conf("reclaim", *tiers))
    assert protected.evictions == [] and protected.pipelined == []
    two = run(cluster(*objects, budget("web", 2, app="web")), conf("reclaim", *tiers))
    assert len(two.evictions) == 2
