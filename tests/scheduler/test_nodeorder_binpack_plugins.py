"""Node scores: nodeorder (least/most requested, balanced resources, preferred node affinity,
PreferNoSchedule taints) and binpack (Volcano's formula and its arguments)."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.scheduler.framework.session import open_session
from tests.scheduler.cluster_fixtures import Obj, conf, cycle, node, placed, pod, snapshot, task_named


def _scores(objects: list[Obj], pod_name: str, *plugins: str | dict[str, Any]) -> dict[str, float]:
    session = open_session(snapshot(objects), conf("allocate", list(plugins)))
    return dict(zip(session.nodes.names, session.score(task_named(session, pod_name)).tolist(), strict=True))


def _chosen(objects: list[Obj], *plugins: str | dict[str, Any]) -> dict[str, str]:
    return placed(cycle(objects, "allocate", (["predicates", *plugins],)))


BUSY_AND_IDLE = [node("busy"), node("idle"), pod("running", cpu="2", memory="8Gi", node_name="busy", phase="Running")]


def test_leastrequested_spreads_and_binpack_packs() -> None:
    assert _chosen([*BUSY_AND_IDLE, pod("p")], "nodeorder") == {"p": "idle"}
    assert _chosen([*BUSY_AND_IDLE, pod("p")], "binpack") == {"p": "busy"}
    most = {
        "name": "nodeorder",
        "arguments": {"mostrequested.weight": 1, "leastrequested.weight": 0, "balancedresource.weight": 0},
    }
    assert _chosen([*BUSY_AND_IDLE, pod("p")], most) == {"p": "busy"}


def test_nodeorder_scores_by_kube_scheduler_formulas_times_weights() -> None:
    # On "busy" with the pod: cpu 3/4, memory 16/32. On "idle": 1/4 and 8/32.
    objects = [*BUSY_AND_IDLE, pod("p", cpu="1", memory="8Gi")]
    only = {
        "leastrequested.weight": 0,
        "balancedresource.weight": 0,
        "nodeaffinity.weight": 0,
        "tainttoleration.weight": 0,
    }
    least = _scores(objects, "p", {"name": "nodeorder", "arguments": {**only, "leastrequested.weight": 2}})
    assert least == pytest.approx({"busy": 2 * 100 * (0.25 + 0.5) / 2, "idle": 2 * 100 * (0.75 + 0.75) / 2})
    balanced = _scores(objects, "p", {"name": "nodeorder", "arguments": {**only, "balancedresource.weight": 1}})
    assert balanced == pytest.approx({"busy": 100 * (1 - 0.25 / 2), "idle": 100.0})


def test_preferred_node_affinity_draws_the_pod_by_term_weight() -> None:
    prefer = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                },
                {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
            ]
        }
    }
    objects = [node("a", labels={"zone": "a"}), node("b", labels={"zone": "b"}), node("c"), pod("p", affinity=prefer)]
    assert _chosen(objects, "nodeorder") == {"p": "b"}
    scores = _scores(
        objects,
        "p",
        {
            "name": "nodeorder",
            "arguments": {"leastrequested.weight": 0, "balancedresource.weight": 0, "tainttoleration.weight": 0},
        },
    )
    assert scores == pytest.approx({"a": 2 * 50.0, "b": 2 * 100.0, "c": 0.0})


def test_prefer_no_schedule_taints_are_avoided_unless_tolerated() -> None:
    taint = {"key": "spare", "value": "yes", "effect": "PreferNoSchedule"}
    objects = [node("a-soft", taints=[taint]), node("b-plain")]
    assert _chosen([*objects, pod("p")], "nodeorder") == {"p": "b-plain"}
    tolerant = pod("p", tolerations=[{"key": "spare", "operator": "Exists", "effect": "PreferNoSchedule"}])
    assert _chosen([*objects, tolerant], "nodeorder") == {"p": "a-soft"}  # a tie: the first row


def test_binpack_score_follows_volcanos_formula_and_weights() -> None:
    # busy with the pod: cpu 3/4 (weight 2), memory 16/32 (weight 1); scaled by binpack.weight 3.
    objects = [*BUSY_AND_IDLE, pod("p", cpu="1", memory="8Gi")]
    arguments = {"binpack.weight": 3, "binpack.cpu": 2, "binpack.memory": 1}
    scores = _scores(objects, "p", {"name": "binpack", "arguments": arguments})
    assert scores == pytest.approx(
        {"busy": (0.75 * 2 + 0.5 * 1) / 3 * 100 * 3, "idle": (0.25 * 2 + 0.25 * 1) / 3 * 100 * 3}
    )


def test_binpack_weighs_listed_extended_resources_and_scores_overcommitted_nodes_zero() -> None:
    objects = [
        node("g", **{"nvidia.com/gpu": "4"}),
        node("tight", cpu="1", **{"nvidia.com/gpu": "4"}),
        pod("running", cpu="1", memory="1Gi", node_name="g", phase="Running", **{"nvidia.com/gpu": "2"}),
        pod("p", cpu="1", memory="1Gi", **{"nvidia.com/gpu": "1"}),
        pod("hog", cpu="2", memory="1Gi"),
    ]
    arguments = {"binpack.resources": "nvidia.com/gpu, example.com/unknown", "binpack.resources.nvidia.com/gpu": 2}
    scores = _scores(objects, "p", {"name": "binpack", "arguments": arguments})
    assert scores["g"] == pytest.approx((2 / 4 * 1 + 2 / 32 * 1 + 3 / 4 * 2) / 4 * 100)
    assert _scores(objects, "hog", {"name": "binpack", "arguments": arguments})["tight"] == 0.0
