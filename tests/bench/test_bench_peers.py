"""`lahar bench peers`: the parts that decide its figures, without servers: the pod ledger's
over-capacity replay and partial gangs, the queue share error, the summaries and targets, each
shape's objects per peer, the options it refuses, and the plot it writes. The runs themselves are
in test_bench_peers_e2e.py."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from lahar.api.qos import QOS_CLASS_KEY
from lahar.bench import peers
from lahar.bench.peers import GROUP_LABEL, QUEUE_LABEL, Ledger, NodeShape, Workload
from lahar.node.simulated import SIM_USAGE_ANNOTATION
from lahar.scheduler.conf import default_conf, parse_conf

GIB = 1 << 30


def pod(name: str, *, node: str = "", cpu: str = "1", phase: str = "Pending", group: str = "", queue: str = "") -> dict:
    labels = {GROUP_LABEL: group, QUEUE_LABEL: queue}
    return {
        "metadata": {"name": name, "labels": {k: v for k, v in labels.items() if v}},
        "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": phase},
    }


def ledger(cpu_millis: int = 2000, memory: int = 8 * GIB, pods: int = 110) -> Ledger:
    return Ledger(api=None, node_cpu=cpu_millis, node_memory=memory, node_pods=pods)


def test_a_bind_past_allocatable_is_counted_once_and_ended_pods_free_their_node() -> None:
    book = ledger()
    book._apply("ADDED", pod("a"))
    book._apply("MODIFIED", pod("a", node="n1"))
    book._apply("MODIFIED", pod("b", node="n1"))
    assert book.over_capacity == 0  # 2 CPU of 2
    book._apply("MODIFIED", pod("c", node="n1"))
    assert book.over_capacity == 1  # 3 CPU of 2
    book._apply("MODIFIED", pod("c", node="n1", phase="Running"))  # the same pod again: not a new bind
    assert book.over_capacity == 1
    book._apply("MODIFIED", pod("a", node="n1", phase="Succeeded"))
    book._apply("DELETED", pod("c", node="n1", phase="Running"))
    book._apply("MODIFIED", pod("d", node="n1"))  # fits again: b and d
    assert book.over_capacity == 1
    assert book.used["n1"][0] == 2000 and book.used["n1"][2] == 2
    assert book.count_bound({"a", "b", "c", "d", "e"}) == 4


def test_the_pod_count_is_a_capacity_too() -> None:
    book = ledger(cpu_millis=100_000, pods=2)
    for name in ("a", "b", "c"):
        book._apply("ADDED", pod(name, node="n1", cpu="10m"))
    assert book.over_capacity == 1


def test_a_pod_that_ended_before_it_was_seen_bound_holds_nothing() -> None:
    book = ledger()
    book._apply("ADDED", pod("a", node="n1", cpu="2", phase="Succeeded"))
    book._apply("ADDED", pod("b", node="n1", cpu="2"))
    assert book.over_capacity == 0 and book.count_bound({"a", "b"}) == 2


def test_partial_gangs_are_groups_with_some_but_not_all_members_bound() -> None:
    book = ledger(cpu_millis=100_000)
    for i in range(3):
        book._apply("ADDED", pod(f"whole-{i}", node="n1", group="whole"))
    book._apply("ADDED", pod("half-0", node="n1", group="half"))
    book._apply("ADDED", pod("half-1", group="half"))
    book._apply("ADDED", pod("none-0", group="none"))
    assert book.partial_gangs({"whole": 3, "half": 2, "none": 1}) == ["half"]
    # minMember below the size: 1 of 2 bound is whole enough
    assert book.partial_gangs({"whole": 3, "half": 1, "none": 1}) == []


def test_queue_cpu_follows_binds_and_ends() -> None:
    book = ledger(cpu_millis=100_000)
    book._apply("ADDED", pod("a", node="n1", queue="q1"))
    book._apply("ADDED", pod("b", node="n1", queue="q2"))
    book._apply("MODIFIED", pod("a", node="n1", queue="q1", phase="Failed"))
    assert book.queue_shares() == {"q1": 0, "q2": 1000}


def workload_with_queues() -> Workload:
    return Workload(NodeShape(1), [], queues={"q1": 1, "q2": 2, "q3": 3}, share_window=(10.0, 20.0))


def test_share_error_is_the_largest_relative_gap_inside_the_window() -> None:
    exact = {"q1": 1000, "q2": 2000, "q3": 3000}
    skewed = {"q1": 2000, "q2": 2000, "q3": 2000}  # q1 twice its share
    samples = [(5.0, skewed), (10.0, exact), (15.0, exact), (25.0, skewed)]
    weights = workload_with_queues().queues
    shares = peers.mean_shares(samples, workload_with_queues())
    assert shares == {"q1": round(1 / 6, 4), "q2": round(2 / 6, 4), "q3": 0.5}
    assert peers.share_error(shares, weights) == pytest.approx(0.0, abs=1e-3)
    samples.append((20.0, skewed))  # q1: mean of 1/6, 1/6, 1/3 = 2/9 against 1/6: +33%
    assert peers.share_error(peers.mean_shares(samples, workload_with_queues()), weights) == pytest.approx(
        1 / 3, abs=1e-3
    )


def test_share_error_without_any_allocation_in_the_window_is_none() -> None:
    assert peers.mean_shares([(1.0, {"q1": 5})], workload_with_queues()) == {}
    assert peers.share_error({}, {"q1": 1}) is None


def test_summaries_are_medians_and_spreads_and_targets_compare_medians() -> None:
    def run(pods_per_second: float, cpu_per_1000: float, over: int = 0) -> dict[str, Any]:
        return {
            "outcome": "all bound",
            "pods": 100,
            "bound": 100,
            "pods_per_second": pods_per_second,
            "scheduler_cpu_s_per_1000": cpu_per_1000,
            "over_capacity": over,
        }

    lahar = peers.summarize([run(130, 1.0), run(120, 1.2), run(150, 0.9, over=1)])
    assert lahar["pods_per_second"] == {"median": 130, "spread": 30, "max": 150}
    assert lahar["over_capacity"] == {"median": 0, "spread": 1, "max": 1}
    volcano = peers.summarize([run(100, 2.0)] * 3)
    kube = peers.summarize([run(140, 0.5)] * 3)
    checks = peers.targets(
        {
            "basic / real": {
                "lahar": {"summary": lahar},
                "volcano": {"summary": volcano},
                "kube-scheduler": {"summary": kube},
            }
        }
    )
    by_what = {check["what"]: check for check in checks}
    assert by_what["pods/s >= 1.2 x volcano"]["ok"] and by_what["pods/s >= 1.2 x volcano"]["ratio"] == 1.3
    assert not by_what["pods/s >= 1.0 x kube-scheduler"]["ok"]
    assert by_what["CPU-s/1000 pods <= volcano"]["ok"]
    assert not by_what["over_capacity <= 0 (worst run)"]["ok"]  # one run of three over is a miss


def test_a_peer_that_did_not_run_gives_no_ratio() -> None:
    lahar = peers.summarize([{"outcome": "all bound", "pods": 1, "bound": 1, "pods_per_second": 5.0}])
    checks = peers.targets({"basic / real": {"lahar": {"summary": lahar}, "volcano": {"why": "not built"}}})
    assert [check["what"] for check in checks] == []


def test_each_peer_gets_the_objects_it_schedules() -> None:
    volcano = peers.basic("volcano", 0.001)
    lahar = peers.basic("lahar", 0.001)
    kube = peers.basic("kube-scheduler", 0.001)
    assert len(volcano.waves[0].pods) == len(lahar.waves[0].pods) == len(kube.waves[0].pods) == 10
    # Volcano schedules only pods of a PodGroup: one per pod, as its controller makes them
    assert len(volcano.waves[0].podgroups) == 10 and not lahar.waves[0].podgroups
    assert {p["spec"]["schedulerName"] for p in kube.waves[0].pods} == {"default-scheduler"}
    assert {p["spec"]["schedulerName"] for p in lahar.waves[0].pods} == {"volcano"}
    gang = peers.gangs("lahar", 0.001)
    assert gang.waves[0].podgroups[0]["spec"]["minMember"] == 20
    annotations = gang.waves[0].pods[0]["metadata"]["annotations"]
    assert annotations["scheduling.k8s.io/group-name"] == "gang-0000" and annotations[peers.SIM_DURATION] == "10"
    assert all("annotations" not in p["metadata"] for p in peers.preemption("kube-scheduler", 0.01).waves[1].pods)


def test_preemption_measures_only_the_high_priority_wave_after_the_fill_is_bound() -> None:
    fill, high = peers.preemption("volcano", 0.02).waves
    assert not fill.measured and high.after_bound and high.measured
    assert {p["spec"]["priorityClassName"] for p in high.pods} == {"high"}
    # admitted at once: no minResources for enqueue's overcommit check to hold back on a full cluster
    assert all("minResources" not in g["spec"] for g in high.podgroups)


def test_queues_ask_three_times_the_cluster_at_any_scale() -> None:
    for scale in (0.02, 1.0):
        workload = peers.queues("lahar", scale)
        cluster = workload.nodes.count * 4
        pods_per_second = sum(len(w.pods) for w in workload.waves) / 60
        assert pods_per_second * 10 == pytest.approx(3 * cluster, rel=0.2)


def test_volcano_runs_its_own_defaults_with_preempt_only_for_preemption() -> None:
    assert yaml.safe_load(peers.volcano_conf("basic"))["actions"] == "enqueue, allocate, backfill"
    assert "preempt" in yaml.safe_load(peers.volcano_conf("preemption"))["actions"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--scale", "0"],
        ["--scale", "-1"],
        ["--runs", "0"],
        ["--shapes", "basic,nope"],
        ["--peers", "slurm"],
        ["--backends", ""],
    ],
)
def test_bad_options_are_refused_before_anything_starts(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        peers.parse_args(argv)
    assert exited.value.code == 2
    assert "--" in capsys.readouterr().err


def test_the_plot_is_an_svg_with_a_line_per_peer_that_ran(tmp_path: Path) -> None:
    curve = [(0.0, 0), (1.0, 50), (2.0, 100)]
    results = {
        "basic / real": {
            "lahar": {"runs": [{"curve": curve}]},
            "volcano": {"runs": [{"curve": curve[:2]}]},
            "kube-scheduler": {"why": "not built"},
        }
    }
    path = tmp_path / "peers.svg"
    peers.write_svg(results, path)
    root = ET.parse(path).getroot()
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2
    assert lines[0].get("points", "").split()[-1] != lines[1].get("points", "").split()[-1]


def test_the_bound_curve_steps_through_every_bind_and_ends_with_the_run() -> None:
    curve = peers.bound_curve([0.5, 0.7, 2.0], ended=3.0)
    assert curve == [(0.0, 0), (0.5, 1), (0.7, 2), (2.0, 3), (2.0, 3), (3.0, 3)]
    thinned = peers.bound_curve([i / 100 for i in range(1000)], ended=20.0, points=10)
    assert len(thinned) <= 14 and thinned[-2] == (9.99, 1000) and thinned[-1] == (20.0, 1000)
    assert peers.bound_curve([], ended=5.0) == [(0.0, 0), (5.0, 0)]


def test_throughput_targets_do_not_apply_where_capacity_and_run_times_bound_it() -> None:
    run = {"outcome": "all bound", "pods": 10, "bound": 10, "pods_per_second": 4.0, "partial_gangs": 0}
    summary = peers.summarize([run])
    checks = peers.targets({"gangs / real": {"lahar": {"summary": summary}, "volcano": {"summary": summary}}})
    throughput = [check for check in checks if check["what"].startswith("pods/s")]
    assert len(throughput) == 1 and throughput[0]["ok"] is None
    assert any(check["what"] == "partial_gangs <= 0 (worst run)" and check["ok"] for check in checks)


def test_render_replaces_a_shapes_result_peer_by_peer(tmp_path: Path) -> None:
    def part(name: str, results: dict[str, Any]) -> str:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"commands": [name], "machine": "m", "runs": 1, "results": results}))
        return str(path)

    run = {"outcome": "all bound", "pods": 10, "bound": 10, "pods_per_second": 4.0, "curve": [(0.0, 0), (1.0, 10)]}
    faster = {**run, "pods_per_second": 8.0}
    first = part("first", {"queues / real": {"lahar": {"runs": [run]}, "volcano": {"runs": [run]}}})
    later = part("later", {"queues / real": {"lahar": {"runs": [faster]}}})
    args = peers.parse_args(["--render", first, later, "--out", str(tmp_path / "all"), "--json"])
    assert peers.render(args) == 0
    merged = json.loads((tmp_path / "all" / "peers.json").read_text())
    assert merged["commands"] == ["first", "later"]
    queues = merged["results"]["queues / real"]
    assert queues["lahar"]["summary"]["pods_per_second"]["median"] == 8.0  # the later part's run
    assert queues["volcano"]["summary"]["pods_per_second"]["median"] == 4.0  # kept from the first


def test_render_pools_runs_from_parts_that_each_ran_every_peer_once(tmp_path: Path) -> None:
    def part(name: str, lahar_rate: float, volcano_rate: float) -> str:
        def run(rate: float) -> dict[str, Any]:
            return {"outcome": "all bound", "pods": 10, "bound": 10, "pods_per_second": rate, "curve": [(0.0, 0)]}

        results = {"basic / real": {"lahar": {"runs": [run(lahar_rate)]}, "volcano": {"runs": [run(volcano_rate)]}}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"commands": [name], "machine": "m", "runs": 1, "results": results}))
        return str(path)

    parts = [part("one", 10.0, 5.0), part("two", 30.0, 6.0), part("three", 20.0, 1.0)]
    args = peers.parse_args(["--render", *parts, "--pool", "--out", str(tmp_path / "all"), "--json"])
    assert peers.render(args) == 0
    merged = json.loads((tmp_path / "all" / "peers.json").read_text())
    basic = merged["results"]["basic / real"]
    assert [run["pods_per_second"] for run in basic["lahar"]["runs"]] == [10.0, 30.0, 20.0]
    assert basic["lahar"]["summary"]["pods_per_second"]["median"] == 20.0
    assert basic["volcano"]["summary"]["pods_per_second"]["median"] == 5.0
    assert merged["runs"] == 3


def test_pool_without_render_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        peers.parse_args(["--pool"])
    assert exit_.value.code == 2 and "--pool only applies with --render" in capsys.readouterr().err


def test_lahar_runs_its_own_plugins_with_volcanos_actions_for_each_shape() -> None:
    for shape in ("basic", "queues", "preemption"):
        lahar = parse_conf(peers.lahar_conf(shape))
        volcano = yaml.safe_load(peers.volcano_conf(shape))
        assert ", ".join(lahar.actions) == volcano["actions"]
        assert [p.name for tier in lahar.tiers for p in tier] == [p.name for tier in default_conf().tiers for p in tier]
    assert "reclaim" not in parse_conf(peers.lahar_conf("queues")).actions


# --- oversubscription ---------------------------------------------------------------------------


def shaped_pod(name: str, node: str, cpu: str, *, best_effort: bool = False, share: float = 1.0) -> dict:
    """A pod as the oversubscription shape makes it: BE by Lahar's label, its usage share annotated."""
    labels = {QOS_CLASS_KEY: "BE"} if best_effort else {}
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {SIM_USAGE_ANNOTATION: f"{share:g}"}},
        "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending"},
    }


def test_batch_pods_borrow_against_reclaimable_not_allocatable() -> None:
    """A 4-CPU node whose online pod asks 3 and uses a tenth: 3,420m reclaimable by the agent's
    rule (4,000 − 80 system − 300 − 200 margin). BE binds past allocatable are counted as
    placements on lent capacity, not as over-capacity; past reclaimable, as over-reclaim."""
    book = ledger(cpu_millis=4000, memory=32 * GIB)
    book.usage = peers.OVERSUBSCRIPTION_USAGE
    book._apply("ADDED", shaped_pod("online", "n1", "3", share=0.1))
    for i, cpu in enumerate(("500m", "500m")):
        book._apply("ADDED", shaped_pod(f"b{i}", "n1", cpu, best_effort=True))
    assert (book.over_capacity, book.beyond_requests, book.over_reclaim) == (0, 0, 0)  # 4 CPU of 4 asked
    book._apply("ADDED", shaped_pod("b2", "n1", "2400m", best_effort=True))  # BE 3,400m of 3,420m
    assert (book.over_capacity, book.beyond_requests, book.over_reclaim) == (0, 1, 0)
    book._apply("ADDED", shaped_pod("b3", "n1", "100m", best_effort=True))  # 3,500m: past what is lent
    assert (book.over_capacity, book.beyond_requests, book.over_reclaim, book.over_usage) == (0, 2, 1, 0)
    book._apply("ADDED", shaped_pod("b4", "n1", "200m", best_effort=True))  # usage 80+300+3,700 > 4,000
    assert book.over_usage == 1
    book._apply("MODIFIED", {**shaped_pod("b4", "n1", "200m", best_effort=True), "status": {"phase": "Failed"}})
    assert book.be_used["n1"][0] == 3500 and book.used["n1"] == [3000, GIB, 5]


def test_without_a_usage_model_only_requests_count() -> None:
    book = ledger(cpu_millis=1000)
    book._apply("ADDED", shaped_pod("online", "n1", "1"))
    book._apply("ADDED", shaped_pod("batch", "n1", "1", best_effort=True))
    assert (book.over_capacity, book.beyond_requests, book.over_reclaim, book.over_usage) == (0, 1, 0, 0)


def test_oversubscription_gives_each_peer_the_same_pods_and_only_lahar_the_reports() -> None:
    shapes = {peer: peers.oversubscription(peer, 0.003) for peer in peers.PEERS}
    for peer, workload in shapes.items():
        online, batch = workload.waves
        assert not online.measured and batch.measured and workload.settle_seconds
        nodes = [p["spec"]["nodeName"] for p in online.pods]
        assert nodes == [f"{peers.NODE_PREFIX}{i}" for i in range(3)]  # one online pod a node, bound
        assert len(batch.pods) == 3 * peers.BATCH_PER_NODE
        assert all(p["metadata"]["labels"][QOS_CLASS_KEY] == "BE" for p in batch.pods)
        assert workload.reports == (peer == "lahar") and workload.usage is peers.OVERSUBSCRIPTION_USAGE
        assert len(batch.podgroups) == (len(batch.pods) if peer == "volcano" else 0)
    # Volcano's PodGroups carry minResources, which its overcommit plugin admits against
    assert shapes["volcano"].waves[1].podgroups[0]["spec"]["minResources"] == {"cpu": "500m"}


def test_volcano_runs_its_overcommit_plugin_with_the_factor_for_oversubscription() -> None:
    def overcommit(shape: str) -> dict:
        tiers = yaml.safe_load(peers.volcano_conf(shape))["tiers"]
        [plugin] = [p for tier in tiers for p in tier["plugins"] if p["name"] == "overcommit"]
        return plugin

    assert overcommit("oversubscription")["arguments"] == {"overcommit-factor": peers.OVERCOMMIT_FACTOR}
    assert "arguments" not in overcommit("basic")  # its default factor elsewhere
    # Lahar's own configuration lends reclaimable capacity to BE pods
    names = [p.name for tier in parse_conf(peers.lahar_conf("oversubscription")).tiers for p in tier]
    assert "oversubscription" in names


def test_oversubscription_compares_placements_and_checks_lahars_borrowing() -> None:
    def run(bound: int, beyond: int, over_reclaim: int = 0) -> dict[str, Any]:
        return {
            "outcome": "settled",
            "pods": 50,
            "bound": bound,
            "pods_per_second": 100.0,
            "beyond_requests": beyond,
            "over_reclaim": over_reclaim,
            "over_usage": 0,
        }

    results = {
        "oversubscription / real": {
            "lahar": {"summary": peers.summarize([run(40, 20), run(40, 20, over_reclaim=1)])},
            "kube-scheduler": {"summary": peers.summarize([run(20, 0)])},
        }
    }
    by_what = {check["what"]: check for check in peers.targets(results)}
    placed = by_what["BE pods placed vs kube-scheduler (no target: what borrowing reclaimable capacity adds)"]
    assert placed["ratio"] == 2.0 and placed["ok"] is None
    assert not by_what["over_reclaim <= 0 (worst run)"]["ok"] and by_what["over_usage <= 0 (worst run)"]["ok"]


def test_a_measured_wave_waits_until_the_scheduler_is_quiet() -> None:
    """wait_quiet returns once the process stops using CPU: a busy second and a half, then idle."""
    import subprocess
    import sys
    import time

    busy = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass\ntime.sleep(30)"]
    )
    try:
        time.sleep(0.2)
        started = time.perf_counter()
        peers.wait_quiet(busy.pid, limit=10.0)
        waited = time.perf_counter() - started
        assert 1.0 <= waited < 5.0, waited  # not before the busy part ended, soon after it
        started = time.perf_counter()
        peers.wait_quiet(busy.pid, limit=10.0)
        assert time.perf_counter() - started < 1.5  # quiet already: one look
    finally:
        busy.kill()
        busy.wait()
