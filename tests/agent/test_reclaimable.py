"""Reclaimable capacity: the formula, the window peak, thresholds and reserves as plain functions;
the report carrying it over gRPC; and the Node's batch resources patched through the embedded API
server only when they move meaningfully."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.agent.qos.node_allocatable import (
    BATCH_CPU,
    BATCH_MEMORY,
    batch_resources_of,
    changed_meaningfully,
    patch_batch_allocatable,
)
from lahar.agent.qos.reclaimable import (
    ReclaimableConfig,
    ReclaimableTracker,
    WindowMax,
    online_usage,
    reclaimable,
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
    assert (defaults.cpu_margin_ratio, defaults.cpu_peak_half_life_seconds, defaults.memory_threshold) == (
        0.05,
        10.0,
        0.65,
    )
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
        ({"cpu_margin_ratio": -0.1}, "cpu_margin_ratio: must be in"),
        ({"cpu_margin_ratio": 0.9}, "cpu_margin_ratio: must be <= 0.5"),
        ({"cpu_peak_half_life_seconds": 0}, "cpu_peak_half_life_seconds: must be >= 0.1"),
        ({"cpu_peak_half_life_seconds": 1e9}, "cpu_peak_half_life_seconds: must be <= 3600"),
        ({"window_seconds": -1}, "window_seconds: must be >= 0"),
        ({"memory_reserve_bytes": "lots"}, "memory_reserve_bytes:"),
        ({"cpu_reserve_millicores": 0.5}, "cpu_reserve_millicores: expected int"),
        ({"cpu_reserve_millicores": -5}, "cpu_reserve_millicores: must be >= 0"),
        ({"patch_node_allocatable": "true"}, "patch_node_allocatable: expected bool"),
    ],
)
def test_config_refuses_bad_values(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReclaimableConfig.from_mapping(data)


# --- the formula ----------------------------------------------------------------------------


def test_online_usage_is_node_usage_less_be_pods() -> None:
    usages = [
        usage("be", 1.5, 4.0),
        usage("ls", 0.5, 2.0, "LS"),
        usage("sys", 0.1, 0.5, "SYSTEM"),
        usage("leaving", 0.7, 1.0),  # a BE pod the API already forgot (its grace period): still BE
    ]
    assert online_usage(report(3.0, 10.0, usages)) == {"cpu": 800, "memory": 5 * GiB}
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
    tracker = ReclaimableTracker(ReclaimableConfig())
    idle = report(0.02, 2.0, [usage("ls", 0.0, 0.5, "LS")])  # an idle LS pod, 0.02 cores of node use
    lent = tracker.update(idle, [], 0.0)["cpu"]
    assert lent >= 0.9 * (4000 - 20)


def test_window_max() -> None:
    window = WindowMax()
    for at, value in ((0, 5), (1, 3), (2, 4), (3, 1)):
        window.add(at, value)
    assert window.peak(0) == 5
    assert window.peak(1) == 4
    assert window.peak(3) == 1
    assert window.peak(4) is None


def test_a_burst_lowers_cpu_only_for_the_burst_plus_a_few_half_lives() -> None:
    tracker = ReclaimableTracker(ReclaimableConfig())
    burst = report(3.0, 2.0)  # the node's start-up burst: 3 cores outside any pod
    quiet = report(0.05, 2.0)
    lent = [tracker.update(burst, [], float(t))["cpu"] for t in range(5)]
    assert lent[-1] <= 4000 - 3000
    after = {t: tracker.update(quiet, [], float(t))["cpu"] for t in range(5, 65)}
    assert after[15] > 4000 - 3000  # fading: half the burst 10 s on
    assert after[50] >= 0.9 * (4000 - 50)  # a few half-lives later it is forgotten
    assert after[64] == after[63] or after[64] > after[63]


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
