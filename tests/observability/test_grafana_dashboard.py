"""deploy/grafana/lahar-dashboard.json: a valid Grafana dashboard (schema 36 or later, a Prometheus
data source variable, a `node` variable), every query of every panel and variable uses only metrics
the code exports (lahar/metrics_catalog.py) with label matchers those metrics carry, agent panels
follow the `node` variable, and the panels the issue asks for are there. The optional
kustomization in deploy/grafana/ turns the JSON into a ConfigMap for Grafana's dashboard sidecar."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from typing import Any

import pytest
import yaml

from lahar.metrics_catalog import MetricInfo, catalog, series_names
from tests.observability.dashboard_support import (
    DASHBOARD,
    PromQLError,
    Selector,
    all_panels,
    load_dashboard,
    metric_names,
    queries,
    selectors,
    variable_query_expression,
    with_grafana_values,
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# What the dashboard must show (issue 8): one metric per subject, at least.
REQUIRED = {
    "node utilization": {"lahar_node_cpu_usage_cores", "lahar_node_memory_used_bytes"},
    "NUMA utilization": {"lahar_numa_cpu_usage_cores", "lahar_numa_memory_used_bytes"},
    "per-QoS-class CPU": {"lahar_pod_cpu_usage_cores"},
    "BE cap vs online usage": {"lahar_qos_be_cpu_quota_cores", "lahar_qos_online_cpu_usage_cores"},
    "reclaimable capacity": {"lahar_node_reclaimable_cpu_cores", "lahar_node_reclaimable_memory_bytes"},
    "GPU utilization and memory": {"lahar_gpu_utilization_ratio", "lahar_gpu_memory_used_bytes"},
    "NPU utilization and memory": {"lahar_npu_utilization_ratio", "lahar_npu_hbm_used_bytes"},
    "evictions": {"lahar_evictions_total"},
    "scheduler throughput": {"lahar_scheduler_pods_scheduled_total"},
    "scheduler latency": {
        "lahar_scheduler_e2e_scheduling_duration_seconds_bucket",
        "lahar_scheduler_action_duration_seconds_bucket",
    },
    "queue shares": {
        "lahar_scheduler_queue_allocated",
        "lahar_scheduler_queue_deserved",
        "lahar_scheduler_queue_share",
    },
    "jobs by phase": {"lahar_controller_jobs"},
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return load_dashboard()


@pytest.fixture(scope="module")
def exported() -> dict[str, MetricInfo]:
    return series_names(catalog())


# --- the PromQL reader itself -------------------------------------------------------------------------


def test_selectors_skip_functions_clauses_labels_and_variables() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, action) (rate(lahar_a_seconds_bucket{node=~"$node"}[$__rate_interval])))'
    )
    assert selectors(expr) == [Selector("lahar_a_seconds_bucket", (("node", "=~", "$node"),))]
    assert metric_names(
        "sum(rate(x_total[5m] offset 1h)) without (pod) / on(node) group_left(model) "
        'max by (node) (y{a="b,c}", d!~"e"}) > bool 1e3'
    ) == {"x_total", "y"}
    assert metric_names('label_replace(up, "dst", "$1", "src", "(.*)") and {__name__="z", job="j"}') == {"up", "z"}
    assert metric_names('count_values("v", build_info) + topk(3, m) < +Inf or vector(0)') == {"build_info", "m"}
    assert metric_names("m[5m:30s] @ 1700000000 - -0.5 * NaN") == {"m"}
    assert metric_names("sum(a) by (x) unless ignoring (y) b") == {"a", "b"}
    with pytest.raises(PromQLError):
        selectors('m{node=~"unterminated}')
    assert variable_query_expression("label_values(lahar_node_cpu_cores, node)") == "lahar_node_cpu_cores"
    assert variable_query_expression("label_values(node)") is None
    assert with_grafana_values('rate(m{node=~"$node"}[$__rate_interval])') == 'rate(m{node=~".*"}[1m])'


# --- the dashboard -------------------------------------------------------------------------------------


def test_the_dashboard_is_grafana_json_with_its_variables(dashboard: dict[str, Any]) -> None:
    json.loads(DASHBOARD.read_text())  # strict JSON
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["title"] and dashboard["uid"] and len(dashboard["uid"]) <= 40
    assert dashboard.get("id") is None, "an exported dashboard carries no database id"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    node = variables["node"]
    assert node["type"] == "query" and node["datasource"] == DATASOURCE
    assert node["includeAll"] and node["multi"] and node["allValue"] == ".*"


def test_panels_are_laid_out_and_use_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    panels = list(all_panels(dashboard))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    occupied: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel.get("description"), f"panel {panel['id']} has a title and a description"
        assert panel["datasource"] == DATASOURCE, panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["expr"].strip(), panel["title"]


def test_every_query_uses_only_exported_metrics_and_their_labels(
    dashboard: dict[str, Any], exported: dict[str, MetricInfo]
) -> None:
    problems = []
    for where, expr in queries(dashboard):
        found = selectors(expr)
        if not found:
            problems.append(f"{where}: no metric in {expr!r}")
        for selector in found:
            info = exported.get(selector.metric)
            if info is None:
                problems.append(f"{where}: {selector.metric} is not exported by any Lahar program")
                continue
            allowed = set(info.labels) | {"job", "instance"}
            if selector.metric.endswith("_bucket"):
                allowed.add("le")
            unknown = sorted({label for label, _, _ in selector.matchers} - allowed)
            if unknown:
                problems.append(f"{where}: {selector.metric} has no label {unknown} (it has {list(info.labels)})")
            if (
                info.component == "agent"
                and not where.startswith("variable")
                and selector.label("node") != ("=~", "$node")
            ):
                problems.append(f'{where}: {selector.metric} does not follow the node variable (node=~"$node")')
    assert problems == []


def test_variables_read_labels_their_metric_has(dashboard: dict[str, Any], exported: dict[str, MetricInfo]) -> None:
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        text = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        assert variable.get("definition", text) == text
        expression = variable_query_expression(text)
        assert expression is not None
        label = text.rstrip(") ").rsplit(",", 1)[1].strip()
        (metric,) = metric_names(expression)
        assert label in exported[metric].labels, f"{variable['name']}: {metric} has no label {label}"


def test_the_dashboard_covers_what_the_issue_asks_for(dashboard: dict[str, Any]) -> None:
    used = set().union(*(metric_names(expr) for _, expr in queries(dashboard)))
    missing = {subject: sorted(metrics - used) for subject, metrics in REQUIRED.items() if not metrics <= used}
    assert missing == {}


def test_each_panel_title_is_unique(dashboard: dict[str, Any]) -> None:
    titles = Counter(panel["title"] for panel in all_panels(dashboard) if panel["type"] != "row")
    assert [title for title, count in titles.items() if count > 1] == []


# --- the ConfigMap for Grafana's sidecar ----------------------------------------------------------------


def test_grafana_kustomization_makes_a_configmap_of_the_dashboard() -> None:
    kustomization = yaml.safe_load((DASHBOARD.parent / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == [DASHBOARD.name]
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl renders the kustomization")
    result = subprocess.run(
        [kubectl, "kustomize", str(DASHBOARD.parent)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    (config_map,) = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["namespace"] == "lahar-system"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"][DASHBOARD.name]) == load_dashboard()
