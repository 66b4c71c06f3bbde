"""The metrics catalogue (lahar/metrics_catalog.py) and docs/metrics.md: the reference is what the
code exports today (regenerated and compared, like tests/rpc/test_proto_generated.py), the sample
data makes every conditional family appear, and no metric name the code mentions is missing from it."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lahar.metrics_catalog import (
    COMPATIBLE,
    COMPONENTS,
    MetricInfo,
    all_families,
    catalog,
    names_in,
    render_markdown,
    sample_qos_snapshot,
    sample_report,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "metrics.md"
PROGRAMS = ("agent", "scheduler", "controller")
STRATEGIES_DIR = REPO / "agent" / "qos" / "strategies"
# A metric name in code or prose: `lahar_` then a name that ends here (not `lahar_qos_<name>`, not
# an f-string's `lahar_agent_{name}`); `lahar_x_total{reason}` names lahar_x_total.
NAME_IN_TEXT = re.compile(r"(?<![A-Za-z0-9_.])lahar_[a-z0-9_]*[a-z0-9](?![A-Za-z0-9_])")


@pytest.fixture(scope="module")
def entries() -> dict[str, list[MetricInfo]]:
    return catalog()


def test_docs_metrics_md_is_current(entries: dict[str, list[MetricInfo]]) -> None:
    assert DOC.read_text() == render_markdown(entries), (
        "docs/metrics.md is stale: run `.venv/bin/python scripts/gen-metrics-doc.py` and commit it"
    )


def test_the_script_checks_and_writes_the_reference(tmp_path: Path) -> None:
    script = REPO / "scripts" / "gen-metrics-doc.py"
    check = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    stale = tmp_path / "metrics.md"
    stale.write_text("# old\n")
    check = subprocess.run(
        [sys.executable, str(script), "--check", "-o", str(stale)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 1 and "+| `lahar_node_cpu_usage_cores` |" in check.stdout
    written = subprocess.run(
        [sys.executable, str(script), "-o", str(stale)], capture_output=True, text=True, timeout=60
    )
    assert written.returncode == 0 and stale.read_text() == DOC.read_text()


def test_every_family_has_samples_help_and_a_unique_lahar_name(entries: dict[str, list[MetricInfo]]) -> None:
    assert set(entries) == set(COMPONENTS) and all(entries.values())
    families = all_families(entries)
    names = [info.family for info in families]
    assert len(names) == len(set(names)), "a family is exported twice (by two programs, or twice by one)"
    for info in families:
        assert info.family.startswith(("lahar_", *COMPATIBLE)), info.family
        assert info.series, f"{info.family} has no sample: the catalogue's sample data misses its condition"
        assert info.help.strip(), f"{info.family} has no help text"
        assert not info.help.startswith("QoS figure "), (
            f"{info.family}: agent/exporter.py QOS_FIGURES lacks the help text of this figure"
        )
        assert not (info.family.endswith("_total") and info.type == "counter"), f"{info.family}: _total twice"


def test_agent_series_carry_the_node_and_pod_series_join_kube_state_metrics(
    entries: dict[str, list[MetricInfo]],
) -> None:
    for info in entries["agent"]:
        assert info.labels[0] == "node", info.family
        if info.family.startswith("lahar_pod_"):
            assert {"namespace", "pod"} <= set(info.labels), info.family


def test_design_examples_are_exported(entries: dict[str, list[MetricInfo]]) -> None:
    """The names DESIGN.md ("Metrics") gives as examples, with their labels."""
    examples = {
        "lahar_node_cpu_usage_cores": (),
        "lahar_node_memory_used_bytes": (),
        "lahar_numa_memory_used_bytes": ("numa",),
        "lahar_gpu_utilization_ratio": ("gpu", "uuid", "model"),
        "lahar_gpu_memory_used_bytes": (),
        "lahar_npu_utilization_ratio": ("npu",),
        "lahar_pod_cpu_usage_cores": ("namespace", "pod", "lahar_qos"),
        "lahar_node_reclaimable_cpu_cores": (),
        "lahar_qos_be_cpu_quota_cores": (),
        "lahar_evictions_total": ("reason",),
        "lahar_scheduler_e2e_scheduling_duration_seconds": (),
        "lahar_scheduler_queue_allocated": ("queue", "resource"),
    }
    by_name = {info.name: info for info in all_families(entries)}
    for name, labels in examples.items():
        assert name in by_name, name
        assert set(labels) <= set(by_name[name].labels), name


# --- the sample data leaves no condition out ------------------------------------------------------------


def empty_fields(value: Any, path: str) -> Iterator[str]:
    """Paths of empty lists, tuples and mappings (and unavailable accelerators) inside a dataclass."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if getattr(value, "available", True) is False:
            yield f"{path} (not available)"
        for item in dataclasses.fields(value):
            yield from empty_fields(getattr(value, item.name), f"{path}.{item.name}")
    elif isinstance(value, (list, tuple, dict)) or hasattr(value, "keys"):
        if not value:
            yield path
        for index, item in value.items() if hasattr(value, "items") else enumerate(value):
            yield from empty_fields(item, f"{path}[{index!r}]")


def test_sample_report_and_qos_snapshot_fill_every_collection() -> None:
    """A field added to NodeReport or QosSnapshot that the samples leave empty would hide the
    metrics it feeds from the catalogue: fill it in lahar/metrics_catalog.py."""
    # Accelerators holds GPUs or NPUs: the GPU collector's NPU list is empty, and the other way round.
    assert [
        path for path in empty_fields(sample_report(), "report") if path not in ("report.gpu.npus", "report.npu.gpus")
    ] == []
    snapshot = sample_qos_snapshot()
    allowed_empty = {"snapshot.reason"}  # a string, "" while active
    assert [path for path in empty_fields(snapshot, "snapshot") if path not in allowed_empty] == []
    assert snapshot.available and snapshot.config_error is None


# --- every metric name in the code is in the catalogue -----------------------------------------------------


def program_sources() -> Iterator[Path]:
    for program in PROGRAMS:
        yield from sorted((REPO / program).rglob("*.py"))


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_every_metric_name_in_the_code_is_catalogued(entries: dict[str, list[MetricInfo]]) -> None:
    """Every `lahar_...` name in agent/, scheduler/ and controller/ (string literals, docstrings and
    comments alike) is a family or series the catalogue lists (or a label, as `lahar_qos`)."""
    known = names_in(all_families(entries)) | {label for info in all_families(entries) for label in info.labels}
    missing = sorted(
        {
            f"{relative(path)}: {name}"
            for path in program_sources()
            for name in NAME_IN_TEXT.findall(path.read_text())
            if name not in known
        }
    )
    assert missing == [], "metric names in the code that no catalogued registry exports"


def template(node: ast.expr) -> re.Pattern[str] | None:
    """A name built at run time (f"lahar_qos_{name}", "lahar_" + x) as a pattern; None otherwise."""
    if isinstance(node, ast.JoinedStr):
        parts = node.values
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        parts = [node.left, node.right]
    else:
        return None
    first = parts[0] if parts else None
    if not (
        isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and first.value.startswith(("lahar_", *COMPATIBLE))
    ):
        return None
    pattern = "".join(
        re.escape(part.value) if isinstance(part, ast.Constant) and isinstance(part.value, str) else "[a-z0-9_]+"
        for part in parts
    )
    return re.compile(pattern)


def test_every_metric_name_template_matches_a_catalogued_family(entries: dict[str, list[MetricInfo]]) -> None:
    families = {info.family for info in all_families(entries)}
    unmatched = []
    for path in program_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            pattern = template(node) if isinstance(node, ast.expr) else None
            if pattern is not None and not any(pattern.fullmatch(family) for family in families):
                unmatched.append(f"{relative(path)}:{node.lineno}: {pattern.pattern}")
    assert unmatched == []


CONSTRUCTORS = {
    "Counter",
    "Gauge",
    "Histogram",
    "Summary",
    "Info",
    "Enum",
    "Metric",
    "CounterMetricFamily",
    "GaugeMetricFamily",
    "HistogramMetricFamily",
    "GaugeHistogramMetricFamily",
    "SummaryMetricFamily",
    "InfoMetricFamily",
    "StateSetMetricFamily",
    "UnknownMetricFamily",
}


def test_metric_families_the_code_constructs_are_named_lahar_star(entries: dict[str, list[MetricInfo]]) -> None:
    """A family built with a literal name not starting with `lahar_` would escape the scans above;
    one named after another project's (`volcano_...`, COMPATIBLE) must be catalogued."""
    families = {info.family for info in all_families(entries)}
    offenders = []
    for path in program_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.Call)
                and node.args
                and getattr(node.func, "id", getattr(node.func, "attr", None)) in CONSTRUCTORS
            ):
                continue
            name = node.args[0]
            pattern = template(name)
            if pattern is not None and not any(pattern.fullmatch(family) for family in families):
                offenders.append(f"{relative(path)}:{node.lineno}: {pattern.pattern} is not catalogued")
            if isinstance(name, ast.JoinedStr):
                name = name.values[0] if name.values else name
            if isinstance(name, ast.Constant) and not str(name.value).startswith(("lahar_", *COMPATIBLE)):
                offenders.append(f"{relative(path)}:{node.lineno}: {name.value!r}")
            elif (
                isinstance(name, ast.Constant)
                and str(name.value).startswith(tuple(COMPATIBLE))
                and node.args[0] is name
                and name.value not in families
            ):
                offenders.append(f"{relative(path)}:{node.lineno}: {name.value!r} is not catalogued")
    assert offenders == []


def figure_keys(tree: ast.Module) -> set[str]:
    """The keys of the `figures` a strategy's Plan carries: Plan(desired, {...}) or figures=..., a
    dict literal or a name bound to one in the module (`**spread` keys come from elsewhere)."""
    assigned: dict[str, list[ast.Dict]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
    keys: set[str] = set()

    def collect(value: ast.expr | None) -> None:
        if isinstance(value, ast.Dict):
            keys.update(k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
            for k, v in zip(value.keys, value.values, strict=True):
                if k is None:  # {**figures, ...}
                    collect(v)
        elif isinstance(value, ast.Name):
            for bound in assigned.get(value.id, []):
                collect(bound)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Plan":
            collect(node.args[1] if len(node.args) > 1 else None)
            for keyword in node.keywords:
                if keyword.arg == "figures":
                    collect(keyword.value)
    return keys


def test_every_qos_figure_a_strategy_reports_is_catalogued_and_documented(entries: dict[str, list[MetricInfo]]) -> None:
    from lahar.agent.exporter import QOS_FIGURES

    produced = set().union(*(figure_keys(ast.parse(path.read_text())) for path in sorted(STRATEGIES_DIR.glob("*.py"))))
    assert produced, "no figures found: has the Plan(...) shape changed?"
    agent = {info.family for info in entries["agent"]}
    assert sorted(f"lahar_qos_{key}" for key in produced if f"lahar_qos_{key}" not in agent) == []
    assert sorted(produced - set(QOS_FIGURES)) == [], "figures without help text in agent/exporter.py QOS_FIGURES"
    assert sorted(set(QOS_FIGURES) - produced) == [], "QOS_FIGURES documents figures no strategy reports"
