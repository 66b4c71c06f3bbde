"""Reclaimable capacity: the formula, the peaks, what each report's CPU is, interference held and
released, thresholds and reserves as plain functions;
the report carrying it over gRPC; and the Node's batch resources patched through the embedded API
server only when they move meaningfully."""

from __future__ import annotations

import math
from typing import Any

import pytest

from lahar.agent.qos.config import QosConfig
from lahar.agent.qos.node_allocatable import (
    BATCH_CPU,
    BATCH_MEMORY,
    batch_resources_of,
    changed_meaningfully,
    patch_batch_allocatable,
)
from lahar.agent.qos.reclaimable import (
    CpuSplit,
    HeldInterference,
    RecentPeak,
    ReclaimableConfig,
    ReclaimableTracker,
    WindowMax,
    WindowMean,
    online_usage,
    reclaimable,
    split_cpu,
)
from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.rpc.convert import report_from_proto, report_to_proto
from lahar.rpc.report import CpuUsage, MemoryUsage, NodeReport, PodUsage

GiB = 1 << 30


def pod(uid: str, qos: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p-{uid}", "namespace": "team", "uid": uid, "labels": {"lahar.dev/qos-class": qos}},
        "spec": {"containers": [{"name": "main"}]},
    }


def report(
    cpu_used: float, memory_used: float, pods: list[PodUsage] | None = None, cores: int = 4, memory_total: float = 16.0
) -> NodeReport:
    total, used = int(memory_total * GiB), int(memory_used * GiB)
    return NodeReport(
        node="n1",
        sequence=1,
        timestamp=0.0,
        cpu=CpuUsage(cores, cpu_used, cpu_used / cores),
        memory=MemoryUsage(total, used, total - used, 0),
        pods=pods or [],
    )


def usage(uid: str, cpu: float, memory: float, qos: str = "BE") -> PodUsage:
    """A pod's usage as the collector reports it: classed from its API object (BE without one)."""
    return PodUsage("team", f"p-{uid}", uid, qos, "BestEffort", f"kubepods/besteffort/pod{uid}", cpu, int(memory * GiB))


# --- configuration --------------------------------------------------------------------------


def test_config_defaults_and_quantities() -> None:
    assert ReclaimableConfig.from_mapping({}) == ReclaimableConfig()
    defaults = ReclaimableConfig()
    assert (
        defaults.cpu_margin_ratio,
        defaults.cpu_window_seconds,
        defaults.cpu_peak_half_life_seconds,
        defaults.interference_recovery_seconds,
        defaults.memory_threshold,
    ) == (0.05, 5.0, 10.0, 30.0, 0.65)
    config = ReclaimableConfig.from_mapping(
        {
            "cpu_reserve_millicores": "1.5",
            "memory_reserve_bytes": "1Gi",
            "window_seconds": 60,
            "patch_node_allocatable": True,
        }
    )
    assert (config.cpu_reserve_millicores, config.memory_reserve_bytes, config.window_seconds) == (1500, GiB, 60.0)
    assert ReclaimableConfig.from_mapping({"cpu_reserve_millicores": 250}).cpu_reserve_millicores == 250


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cpu_threshold": 0.5}, "unknown key"),  # CPU follows what online leaves idle: no ceiling ratio
        ({"memory_threshold": 1.5}, "memory_threshold: must be in"),
        ({"cpu_margin_ratio": -0.1}, r"cpu_margin_ratio: must be in \[0, 0.5\]"),
        ({"cpu_margin_ratio": 0.9}, r"cpu_margin_ratio: must be in \[0, 0.5\] \(at most half the node kept idle\)"),
        ({"cpu_window_seconds": -1}, r"cpu_window_seconds: must be in \[0, 600\]"),
        ({"cpu_window_seconds": 86400}, r"cpu_window_seconds: must be in \[0, 600\]"),
        ({"cpu_peak_half_life_seconds": 0}, r"cpu_peak_half_life_seconds: must be in \[0.1, 3600\]"),
        ({"cpu_peak_half_life_seconds": 1e9}, r"cpu_peak_half_life_seconds: must be in \[0.1, 3600\]"),
        ({"interference_recovery_seconds": -5}, r"interference_recovery_seconds: must be in \[0, 3600\]"),
        ({"interference_recovery_seconds": float("inf")}, "interference_recovery_seconds: expected float"),
        ({"window_seconds": -1}, r"window_seconds: must be in \[0, 86400\]"),
        ({"memory_reserve_bytes": "lots"}, "memory_reserve_bytes:"),
        ({"memory_reserve_bytes": "1Ei"}, "memory_reserve_bytes: must be in"),
        ({"cpu_reserve_millicores": 0.5}, "cpu_reserve_millicores: expected int"),
        ({"cpu_reserve_millicores": -5}, r"cpu_reserve_millicores: must be in \[0, 1.024e\+06\]"),
        ({"cpu_reserve_millicores": "100000"}, "cpu_reserve_millicores: must be in"),  # 100k cores: a unit slip
        ({"patch_node_allocatable": "true"}, "patch_node_allocatable: expected bool"),
    ],
)
def test_config_refuses_bad_values(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReclaimableConfig.from_mapping(data)


def test_the_qos_config_names_the_section_of_a_bad_value() -> None:
    with pytest.raises(ValueError, match=r"reclaimable\.cpu_margin_ratio: must be in \[0, 0\.5\]"):
        QosConfig.from_mapping({"reclaimable": {"cpu_margin_ratio": -0.05}})


# --- what each report's CPU is ----------------------------------------------------------------


def test_cpu_is_split_into_online_pods_transient_and_best_effort() -> None:
    usages = [
        usage("be", 1.5, 4.0),
        usage("be-leaving", 0.3, 1.0),  # BE in its grace period: still BE
        usage("ls", 0.5, 2.0, "LS"),
        usage("sys", 0.1, 0.5, "SYSTEM"),
        usage("ls-leaving", 0.4, 1.0, "LS"),
    ]
    split = split_cpu(report(3.2, 10.0, usages), terminating=frozenset({"be-leaving", "ls-leaving"}))
    # outside pods: 3.2 − 2.8 = 0.4 cores, transient like the leaving LS pod
    assert split == CpuSplit(online=600, transient=800, best_effort=1800)
    # a BE pod gone since the last report used 0.3 cores then: up to that of the outside usage is BE
    assert split_cpu(report(3.2, 10.0, usages), departed_be=0.3).best_effort == 2100
    assert split_cpu(report(2.8, 10.0, usages), departed_be=0.3).best_effort == 1800  # nothing outside to own
    assert online_usage(report(3.0, 10.0, usages[:4])) == {"cpu": 1200, "memory": 5 * GiB}
    assert online_usage(report(1.0, 3.0, usages)) == {"cpu": 0, "memory": 0}  # skewed samples: floor 0


def test_idle_cpu_is_lent_less_margin_reserve_and_interference() -> None:
    capacity = {"cpu": 4000, "memory": 16 * GiB}
    peak = {"cpu": 1000, "memory": 4 * GiB}
    # 4000 − 1000 online − 200 margin (5%)
    assert reclaimable(capacity, peak, ReclaimableConfig()) == {"cpu": 2800, "memory": int(16 * GiB * 0.65) - 4 * GiB}
    config = ReclaimableConfig(
        cpu_margin_ratio=0.1, memory_threshold=0.5, cpu_reserve_millicores=500, memory_reserve_bytes=GiB
    )
    assert reclaimable(capacity, peak, config) == {"cpu": 2100, "memory": 3 * GiB}
    assert reclaimable(capacity, peak, config, interference=0.5)["cpu"] == 1050  # held back by half
    assert reclaimable(capacity, {"cpu": 3900, "memory": 15 * GiB}, config) == {"cpu": 0, "memory": 0}


def test_an_idle_node_lends_at_least_ninety_percent_of_its_idle_cpu() -> None:
    for cores in (2, 4, 64):
        tracker = ReclaimableTracker(ReclaimableConfig())
        idle = report(0.02, 2.0, [usage("ls", 0.0, 0.5, "LS")], cores=cores)  # an idle LS pod, 0.02 cores used
        lent = tracker.update(idle, [], 0.0)["cpu"]
        assert lent >= 0.9 * (cores * 1000 - 20), cores


def test_window_mean() -> None:
    window = WindowMean()
    for at, value in ((0, 600), (1, 0), (2, 300), (3, 100)):
        window.add(at, value)
    assert window.mean(0) == 250
    assert window.mean(2) == 200
    assert window.mean(4) is None


def test_window_max() -> None:
    window = WindowMax()
    for at, value in ((0, 5), (1, 3), (2, 4), (3, 1)):
        window.add(at, value)
    assert window.peak(0) == 5
    assert window.peak(1) == 4
    assert window.peak(3) == 1
    assert window.peak(4) is None


def test_recent_peak_holds_for_the_window_then_halves_every_half_life() -> None:
    peak = RecentPeak()
    assert peak.add(0.0, 2000, window=5, half_life=10) == 2000
    assert peak.add(5.0, 100, window=5, half_life=10) == 2000  # still in the window
    assert peak.add(15.0, 100, window=5, half_life=10) == 1000  # 10 s past the window: half
    assert peak.add(25.0, 100, window=5, half_life=10) == 500
    # a smaller later sample is held for its own window even while the big one fades below it
    peak = RecentPeak()
    peak.add(0.0, 2000, window=5, half_life=10)
    peak.add(12.0, 1000, window=5, half_life=10)
    assert peak.add(17.0, 0, window=5, half_life=10) == 1000  # the big one is at 2000 × 0.5^1.2 = 870


def test_a_start_up_burst_lowers_cpu_only_for_the_burst_plus_the_window() -> None:
    """The node's own processes (outside pods) burst for 20 s at start: BE is lent little while
    it lasts and all again a window (5 s) after it ends, not five minutes later. They count by
    their mean over the window: they take their CPU back from BE by weight whenever they want it."""
    tracker = ReclaimableTracker(ReclaimableConfig())
    ls = usage("ls", 0.0, 0.5, "LS")
    lent = {t: tracker.update(report(3.5, 2.0, [ls]), [], float(t))["cpu"] for t in range(20)}
    assert max(lent.values()) <= 4000 - 3500
    after = {t: tracker.update(report(0.05, 2.0, [ls]), [], float(t))["cpu"] for t in range(20, 40)}
    assert after[22] < 0.9 * (4000 - 50)  # the window's mean still holds part of the burst (t <= 19)
    assert after[25] >= 0.9 * (4000 - 50)


def test_an_online_pods_burst_fades_with_the_half_life() -> None:
    tracker = ReclaimableTracker(ReclaimableConfig())
    busy, quiet = report(3.05, 2.0, [usage("ls", 3.0, 0.5, "LS")]), report(0.05, 2.0, [usage("ls", 0.0, 0.5, "LS")])
    for t in range(5):
        tracker.update(busy, [], float(t))
    after = {t: tracker.update(quiet, [], float(t))["cpu"] for t in range(5, 60)}
    assert after[8] <= 4000 - 3000 - 200  # held over the window
    assert 4000 - 3000 < after[20] < 4000 - 1000  # fading: about half the burst 10 s past the window
    assert after[55] >= 0.9 * (4000 - 50)  # a few half-lives later it is forgotten
    assert all(after[t + 1] >= after[t] for t in range(5, 59))


def test_a_deleted_be_pod_counts_as_be_through_its_grace_period_and_after() -> None:
    tracker = ReclaimableTracker(ReclaimableConfig())
    hog = usage("hog", 3.0, 1.0)
    api_hog = pod("hog", "BE")
    full = tracker.update(report(3.05, 3.0, [hog]), [api_hog], 0.0)["cpu"]
    assert full >= 0.9 * (4000 - 50)
    # deletion starts: the API pod carries a deletionTimestamp, its processes still burn CPU
    leaving = {**api_hog, "metadata": {**api_hog["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert tracker.update(report(3.05, 3.0, [hog]), [leaving], 1.0)["cpu"] == full
    # the API forgot it mid-interval: its last CPU is in the node's total, no pod carries it
    assert tracker.update(report(2.05, 2.0), [], 2.0)["cpu"] >= full
    assert tracker.update(report(0.05, 2.0), [], 3.0)["cpu"] >= full
    assert tracker.last is not None and tracker.last.transient_mean <= 50


def test_an_online_pod_being_deleted_is_transient() -> None:
    tracker = ReclaimableTracker(ReclaimableConfig(cpu_peak_half_life_seconds=600))
    ls = usage("ls", 1.0, 0.5, "LS")
    leaving = pod("ls", "LS")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for t in range(3):
        assert tracker.update(report(1.05, 2.0, [ls]), [leaving], float(t))["cpu"] == 4000 - 1050 - 200
    # once gone, only the window remembers it, not the (here very long) online half-life
    assert tracker.update(report(0.05, 2.0), [], 8.0)["cpu"] == 4000 - 50 - 200


def test_interference_shrinks_at_once_and_grows_back_over_the_recovery_time() -> None:
    tracker = ReclaimableTracker(ReclaimableConfig())
    quiet = report(0.2, 2.0, [usage("ls", 0.2, 0.5, "LS")])
    full = tracker.update(quiet, [], 0.0)["cpu"]
    assert full == 4000 - 200 - 200
    assert tracker.update(quiet, [], 1.0, interference=0.6)["cpu"] == round(full * 0.4)
    assert tracker.update(quiet, [], 2.0, interference=0.2)["cpu"] < round(full * 0.5)  # held, not followed down
    assert tracker.update(quiet, [], 16.0)["cpu"] == round(full * (1 - (0.6 - 15 / 30)))  # linear growth
    assert tracker.update(quiet, [], 19.0)["cpu"] == full
    assert tracker.update(quiet, [], 20.0, interference=math.nan)["cpu"] == 0  # an unknown severity: the worst
    assert HeldInterference().update(0.0, 1.5, 30) == 1.0
    held = HeldInterference()
    held.update(0.0, 1.0, 0.0)
    assert held.update(0.1, 0.0, 0.0) == 0.0  # recovery 0: follows the signal


def test_memory_takes_the_peak_of_its_window() -> None:
    tracker = ReclaimableTracker(ReclaimableConfig(window_seconds=10))
    busy = report(3.0, 8.0, [usage("be", 1.0, 2.0)])  # online 6 GiB
    quiet = report(1.5, 5.0, [usage("be", 1.0, 2.0)])  # online 3 GiB
    assert tracker.update(busy, [], 0.0)["memory"] == int(16 * GiB * 0.65) - 6 * GiB
    assert tracker.update(quiet, [], 5.0)["memory"] == int(16 * GiB * 0.65) - 6 * GiB  # still in the window
    assert tracker.update(quiet, [], 10.5)["memory"] == int(16 * GiB * 0.65) - 3 * GiB
    tracker.update(busy, [], 11.0)
    tracker.reconfigure(ReclaimableConfig(window_seconds=0))  # a shorter window applies at once
    assert tracker.update(quiet, [], 12.0)["memory"] == int(16 * GiB * 0.65) - 3 * GiB


def test_a_failed_cpu_collector_reclaims_nothing() -> None:
    failed = NodeReport(node="n1", sequence=1, timestamp=0.0, cpu=CpuUsage(0, 0.0, 0.0), memory=MemoryUsage(0, 0, 0, 0))
    assert ReclaimableTracker(ReclaimableConfig()).update(failed, [], 0.0) == {"cpu": 0, "memory": 0}


def test_reports_carry_reclaimable_over_grpc() -> None:
    sample = report(1.0, 2.0)
    sample.reclaimable = {"cpu": 1600, "memory": 5 * GiB}
    message = report_to_proto(sample)
    assert dict(message.reclaimable) == {"cpu": 1600, "memory": 5 * GiB}
    assert report_from_proto(message).reclaimable == {"cpu": 1600, "memory": 5 * GiB}


# --- the Node's batch resources -------------------------------------------------------------


def test_meaningful_change() -> None:
    carried = {"cpu": 2000, "memory": 4 * GiB}
    assert not changed_meaningfully(carried, {"cpu": 2150, "memory": 4 * GiB + (300 << 20)})  # under 10%
    assert changed_meaningfully(carried, {"cpu": 2300, "memory": 4 * GiB})
    assert changed_meaningfully(carried, {"cpu": 2000, "memory": 3 * GiB})
    assert not changed_meaningfully({"cpu": 0, "memory": 0}, {"cpu": 90, "memory": 32 << 20})  # under the floors
    assert changed_meaningfully({"cpu": 0, "memory": 0}, {"cpu": 200, "memory": 0})
    assert changed_meaningfully({}, {"cpu": 0, "memory": 0})  # not on the node yet


@pytest.fixture(scope="module")
def api(module_k8s: Any) -> KubeApi:
    """Lahar's client over the module's embedded API server."""
    return KubeApi(module_k8s, timeout=10)


class CountingApi:
    """The real client, counting the requests that reach the server."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.calls: list[str] = []

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("get")
        return self.api.get(*args, **kwargs)

    def patch(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("patch")
        return self.api.patch(*args, **kwargs)


def test_node_allocatable_patched_through_the_status_subresource_without_churn(api: KubeApi) -> None:
    api.create(
        kinds.NODE,
        {
            "metadata": {"name": "batch-node"},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {"cpu": "3800m", "memory": "15Gi"}},
        },
    )
    counting = CountingApi(api)
    edge: Any = counting
    carried = patch_batch_allocatable(edge, "batch-node", {"cpu": 1600, "memory": 5 * GiB})
    assert carried == {"cpu": 1600, "memory": 5 * GiB}
    assert counting.calls == ["get", "patch"]
    status = api.get(kinds.NODE, "batch-node")["status"]
    assert status["allocatable"][BATCH_CPU] == "1600" and status["allocatable"][BATCH_MEMORY] == str(5 * GiB)
    assert status["capacity"][BATCH_CPU] == "1600"
    assert (status["allocatable"]["cpu"], status["capacity"]["memory"]) == ("3800m", "16Gi")  # others kept
    version = api.get(kinds.NODE, "batch-node")["metadata"]["resourceVersion"]

    # small moves: no request at all; the caller keeps what the node carries
    for cpu in (1650, 1700, 1550):
        carried = patch_batch_allocatable(edge, "batch-node", {"cpu": cpu, "memory": 5 * GiB}, carried)
    assert counting.calls == ["get", "patch"] and carried == {"cpu": 1600, "memory": 5 * GiB}
    assert api.get(kinds.NODE, "batch-node")["metadata"]["resourceVersion"] == version

    # a restarted agent reads the node and leaves an unchanged value alone
    counting.calls.clear()
    assert patch_batch_allocatable(edge, "batch-node", {"cpu": 1620, "memory": 5 * GiB}) == carried
    assert counting.calls == ["get"]

    # a real move (online load rose) is written
    carried = patch_batch_allocatable(edge, "batch-node", {"cpu": 400, "memory": 5 * GiB}, carried)
    assert carried == {"cpu": 400, "memory": 5 * GiB}
    assert batch_resources_of(api.get(kinds.NODE, "batch-node")) == carried


def test_node_allocatable_api_failure_keeps_the_old_value(api: KubeApi) -> None:
    assert patch_batch_allocatable(api, "no-such-node", {"cpu": 100, "memory": 0}) == {}
    assert patch_batch_allocatable(api, "no-such-node", {"cpu": 100, "memory": 0}, {"cpu": 5}) == {"cpu": 5}
