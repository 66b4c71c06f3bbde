"""What an SRE charting the agent needs (issue 19): every labelled counter at 0 from the first
report, CPU as counters per pod and per QoS class, throttling counted where the cap is (the BE
parent), online pods' CPU wait, and the DCGM / cAdvisor / node_exporter names with their units."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lahar.agent.exporter import QOS_LABEL, ReportCollector
from lahar.agent.qos.engine import ACTIVE, OnlineWait, QosSnapshot
from lahar.agent.qos.eviction import REASONS
from lahar.agent.qos.knobs import KNOBS
from lahar.agent.qos.strategies import STRATEGIES
from lahar.agent.usage_totals import (
    BE_PARENT,
    CPU_SECONDS,
    THROTTLED_SECONDS,
    WAIT_SECONDS,
    advance,
    members,
    totals_of,
)
from lahar.metrics_catalog import sample_qos_snapshot, sample_report

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def quiet_snapshot() -> QosSnapshot:
    """QoS just started: nothing counted yet."""
    return QosSnapshot(
        available=True,
        status=ACTIVE,
        reason="",
        dry_run=False,
        config_error=None,
        config_reloads={},
        enabled={},
        figures={},
        io_limits=(),
        writes={},
        write_errors={},
        refused=0,
        actions={},
        be_throttled_periods=0,
        be_throttled_seconds=0.0,
        evictions={},
        eviction_refusals={},
    )


def scrape(report: object, qos: QosSnapshot | None, totals: dict[tuple[str, str], float] | None = None) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        ReportCollector(lambda: report, qos=(lambda: qos) if qos else None, totals=(lambda: totals or {}))  # type: ignore[arg-type, return-value]
    )
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def values(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for (found, labels), value in samples.items() if found == name}


def test_every_labelled_counter_exists_at_zero_from_the_first_report() -> None:
    samples = scrape(sample_report(), quiet_snapshot())
    reasons = set(REASONS.values())
    assert values(samples, "lahar_evictions_total", "reason") == dict.fromkeys(reasons, 0.0)
    assert values(samples, "lahar_eviction_refusals_total", "reason") == dict.fromkeys(reasons, 0.0)
    assert values(samples, "lahar_qos_cgroup_writes_total", "knob") == dict.fromkeys(KNOBS, 0.0)
    assert values(samples, "lahar_qos_cgroup_write_errors_total", "knob") == dict.fromkeys(KNOBS, 0.0)
    assert values(samples, "lahar_qos_config_reloads_total", "result") == {"ok": 0.0, "refused": 0.0}
    actions = {
        (dict(labels)["strategy"], dict(labels)["action"]): value
        for (name, labels), value in samples.items()
        if name == "lahar_qos_actions_total"
    }
    expected = {(strategy.name, action) for strategy in STRATEGIES for action in strategy.actions}
    assert {"cut", "grow", "cap", "release", "update"} <= {action for _, action in expected}
    assert actions == dict.fromkeys(expected, 0.0)
    for family in ("usage_seconds", "throttled_seconds", "throttled_periods"):
        assert values(samples, f"lahar_class_cpu_{family}_total", QOS_LABEL) == dict.fromkeys(
            ("LC", "LS", "BE", "SYSTEM"), 0.0
        )
    assert values(samples, "lahar_class_cpu_wait_seconds_total", QOS_LABEL) == {"LC": 0.0, "LS": 0.0}
    failing = values(samples, "lahar_agent_collector_failing", "collector")
    assert {"cpu", "pods", "gpu", "qos"} <= set(failing) and set(failing.values()) == {0.0, 1.0}
    assert failing["npu"] == 1.0  # the sample report's npu collector timed out


def test_counts_show_once_counted() -> None:
    samples = scrape(sample_report(), sample_qos_snapshot())
    assert values(samples, "lahar_evictions_total", "reason") == dict.fromkeys(REASONS.values(), 1.0)
    assert values(samples, "lahar_qos_cgroup_writes_total", "knob") == dict.fromkeys(KNOBS, 3.0)
    assert values(samples, "lahar_qos_config_reloads_total", "result") == {"ok": 2.0, "refused": 1.0}


def test_the_qos_class_label_is_lahar_qos_not_kube_state_metrics_qos_class() -> None:
    samples = scrape(sample_report(), None)
    pod_series = [labels for (name, labels), _ in samples.items() if name.startswith("lahar_pod_")]
    assert pod_series and all(QOS_LABEL in dict(labels) and "qos_class" not in dict(labels) for labels in pod_series)
    assert values(samples, "lahar_pod_cpu_usage_cores", QOS_LABEL) == {"LC": 1.0, "LS": 1.5, "BE": 2.5, "SYSTEM": 0.1}


def test_cpu_time_is_a_counter_per_pod_container_and_class() -> None:
    report = sample_report()
    samples = scrape(report, None, totals_of([(report, None)]))
    by_pod = values(samples, "lahar_pod_cpu_usage_seconds_total", "pod")
    assert by_pod == {"frontend-0": 3600.0, "api-0": 5400.0, "train-0": 9000.0, "node-exporter-x": 360.0}
    assert values(samples, "lahar_class_cpu_usage_seconds_total", QOS_LABEL) == {
        "LC": 3600.0,
        "LS": 5400.0,
        "BE": 9000.0,
        "SYSTEM": 360.0,
    }
    assert values(samples, "lahar_container_cpu_usage_seconds_total", "container")["trainer"] == 9000.0


def test_class_counters_never_go_down_when_pods_come_and_go() -> None:
    total, last = advance(0.0, {}, {"a": 10.0, "b": 5.0})
    assert total == 15.0
    total, last = advance(total, last, {"a": 12.0})  # b ended: its 5 s stay counted
    assert total == 17.0
    total, last = advance(total, last, {"a": 1.0, "c": 2.0})  # a's cgroup made again; c is new
    assert total == 20.0
    assert last == {"a": 1.0, "c": 2.0}


def test_be_throttling_is_counted_at_the_parent_where_the_cap_sits() -> None:
    """The cap is written on the BE groups (the parent), so the BE pods' own cgroups read 0 while
    BE is throttled hard: the class counter takes the parent's figure, not the pods'."""
    report = sample_report()
    be_pod = next(pod for pod in report.pods if pod.qos_class == "BE")
    unthrottled = dataclasses.replace(report, pods=[dataclasses.replace(be_pod, cpu_throttled_seconds_total=0.0)])
    capped = dataclasses.replace(
        quiet_snapshot(), be_groups_read=True, be_throttled_seconds=42.0, be_throttled_periods=7
    )
    found = members(unthrottled, capped)
    assert found[(THROTTLED_SECONDS, "BE")] == {BE_PARENT: 42.0}
    samples = scrape(unthrottled, capped, totals_of([(unthrottled, capped)]))
    assert values(samples, "lahar_class_cpu_throttled_seconds_total", QOS_LABEL)["BE"] == 42.0
    assert values(samples, "lahar_class_cpu_throttled_periods_total", QOS_LABEL)["BE"] == 7.0
    assert values(samples, "lahar_pod_cpu_throttled_seconds_total", "pod")["train-0"] == 0.0
    # Without QoS there is no parent cap: the pods' own throttling is all there is.
    assert members(report, None)[(THROTTLED_SECONDS, "BE")] == {"uid-be": 12.5}
    assert members(report, None)[(CPU_SECONDS, "BE")] == {"uid-be": 9000.0}


def test_online_pods_cpu_wait_per_pod_and_per_class() -> None:
    waits = (
        OnlineWait("uid-lc", "web", "frontend-0", "LC", "psi", 4.5),
        OnlineWait("uid-ls", "web", "api-0", "LS", "schedstat", 30.0),
    )
    snapshot = dataclasses.replace(quiet_snapshot(), online_waits=waits)
    report = sample_report()
    samples = scrape(report, snapshot, totals_of([(report, snapshot)]))
    per_pod = {
        (dict(labels)["pod"], dict(labels)["source"]): value
        for (name, labels), value in samples.items()
        if name == "lahar_pod_cpu_wait_seconds_total"
    }
    assert per_pod == {("frontend-0", "psi"): 4.5, ("api-0", "schedstat"): 30.0}
    assert values(samples, "lahar_class_cpu_wait_seconds_total", QOS_LABEL) == {"LC": 4.5, "LS": 30.0}
    assert members(report, snapshot)[(WAIT_SECONDS, "LC")] == {"uid-lc": 4.5}


def test_gpu_under_dcgm_names_and_units_cpu_under_cadvisor_and_node_exporter_names() -> None:
    report = sample_report()
    samples = scrape(report, None)
    gpu = report.gpu.gpus[0]
    dcgm = {name: value for (name, _), value in samples.items() if name.startswith("DCGM_FI_DEV_")}
    assert dcgm == {
        "DCGM_FI_DEV_GPU_UTIL": gpu.utilization_ratio * 100,
        "DCGM_FI_DEV_FB_USED": 40 * 1024,
        "DCGM_FI_DEV_FB_FREE": 40 * 1024,
        "DCGM_FI_DEV_POWER_USAGE": 310.0,
        "DCGM_FI_DEV_GPU_TEMP": 61.0,
    }
    labels = dict(next(labels for (name, labels) in samples if name == "DCGM_FI_DEV_GPU_UTIL"))
    assert labels | {"node": ""} == {
        "node": "",
        "gpu": "0",
        "UUID": gpu.uuid,
        "device": "nvidia0",
        "modelName": gpu.model,
        "Hostname": report.node,
    }
    cadvisor = {
        dict(labels)["container"]: value
        for (name, labels), value in samples.items()
        if name == "container_cpu_usage_seconds_total" and dict(labels)["pod"] == "train-0"
    }
    assert cadvisor == {"": 9000.0, "trainer": 9000.0}  # "": the pod's cgroup, as cAdvisor has it
    assert samples[("node_pressure_cpu_waiting_seconds_total", (("node", report.node),))] == 120.0
    assert samples[("node_memory_MemAvailable_bytes", (("node", report.node),))] == report.memory.available_bytes
