"""`lahar bench scheduler`: every scenario on a tiny shape, checking the JSON it prints and the
invariants the figures rest on (everything placed, no partial gang, no node lent beyond what its
agent reported, no BE pod on a node with a stale report). The figures themselves are for the
benchmark's own runs, not for tests."""

from __future__ import annotations

import json

import pytest

from lahar.bench.scheduler import SCENARIOS, main

TINY = ["--nodes", "50", "--pods", "200", "--json", "--quiet"]
COMMON_KEYS = ("scenario", "nodes", "pods", "pods_per_second", "seconds")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict]]:
    code = main([*argv, *TINY])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    return code, [json.loads(line) for line in lines]


def single(capsys: pytest.CaptureFixture[str], scenario: str, *extra: str) -> dict:
    code, results = run(capsys, "--scenario", scenario, *extra)
    assert len(results) == 1
    result = results[0]
    for key in COMMON_KEYS:
        assert key in result, key
    assert result["scenario"] == scenario
    assert result["nodes"] == 50
    assert result["seconds"] > 0 and result["pods_per_second"] > 0
    assert code == 0, result
    return result


@pytest.mark.parametrize("scenario", ["basic", "basic-50k"])
def test_basic_places_every_pod(capsys: pytest.CaptureFixture[str], scenario: str) -> None:
    result = single(capsys, scenario)
    assert result["pods"] == 200 and result["placed"] == 200 and result["init_pods"] == 20
    assert result["target"]["metric"] == "pods_per_second"
    assert set(result["action_seconds"]) >= {"enqueue", "allocate"}


def test_gangs_all_or_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    result = single(capsys, "gang")
    assert result["partial_gangs"] == 0
    assert result["gangs"] == 11 and result["placed"] == result["pods"]
    assert [g["pods"] for g in result["per_gang"]] == [16] * 10 + [32]
    assert 0 < result["max_gang_decision_seconds"] <= result["seconds"]
    unfit = result["unfit_gang"]
    assert unfit["placed"] == 0 and unfit["pods"] == unfit["room"] + 1 and unfit["fits_by_sum"]
    assert unfit["later_cycle_seconds"] > 0 and unfit["idle_cycle_seconds"] > 0


def test_preemption_evicts_lower_priority_only(capsys: pytest.CaptureFixture[str]) -> None:
    result = single(capsys, "preempt")
    assert result["pods"] == 50  # one 3-CPU preemptor per node
    assert result["decided"] == 50 and result["bound"] == 50
    assert result["victims_not_lower_priority"] == 0
    assert result["victims"] >= 3 * 50  # 0.4 CPU free + 3 x 0.9 freed makes room for 3 CPU


def test_oversubscription_stays_within_reports(capsys: pytest.CaptureFixture[str]) -> None:
    result = single(capsys, "oversub")
    assert result["violations"] == 0
    assert result["be_on_stale_nodes"] == 0 and result["be_on_unreported_nodes"] == 0
    assert result["stale_nodes"] > 0 and result["unreported_nodes"] > 0
    assert 0 < result["placed"] <= result["pods"]
    assert 0 < result["extra_utilization_cpu"] <= 0.65  # at most 4 - 4 x 0.3 used - 5% margin of 4 CPU
    # The simulated fleet: the agent's rule harvests what online pods leave idle, the old 0.65
    # ceiling with its 300 s peak far less, and neither lends into online pods' CPU or memory.
    agent, old = result["fleet"]["agent"], result["fleet"]["old"]
    assert agent["nodes"] == old["nodes"] == 50
    assert agent["harvested_cpu"] >= 0.9 and agent["online_slo_violations"] == 0
    assert old["harvested_cpu"] < agent["harvested_cpu"] and old["online_slo_violations"] == 0
    assert 0 < agent["be_cpu_cores_mean"] <= agent["cpu_idle_cores_mean"]


def test_queues_share_by_weight(capsys: pytest.CaptureFixture[str]) -> None:
    # Three queues (weights 1, 2, 4) on 200 CPU: every queue's share can hold a 20-CPU gang.
    result = single(capsys, "queues", "--queues", "3")
    assert result["queues"] == 3 and result["admitted"] == result["jobs"]
    assert result["partial_gangs"] == 0
    assert set(result["mean_time_to_admission"]) == {"small", "medium", "large"}
    assert [row["weight"] for row in result["per_queue"]] == [1, 2, 4]
    assert all(0 <= row["share"] <= 1 and 0 <= row["deserved"] <= 1 for row in result["per_queue"])


def test_http_binds_through_the_api(capsys: pytest.CaptureFixture[str]) -> None:
    result = single(capsys, "http")
    assert result["placed"] == 200 and result["cycles"] >= 1


def test_every_scenario_is_tested() -> None:
    assert set(SCENARIOS) == {"basic", "basic-50k", "gang", "preempt", "queues", "oversub", "http"}


def test_human_output_names_the_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "basic", "--nodes", "20", "--pods", "40", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("basic: 20 nodes, 40 pods:") and "target pods_per_second >= 5,000" in out
