"""deploy/monitoring/prometheus-rules.yaml: promtool accepts the rules, each alert fires on series
written for it and stays quiet on healthy ones (prometheus-rules.test.yaml, `promtool test rules`),
and each has a runbook section in docs/alerts.md that its runbook_url names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lahar.metrics_catalog import catalog, series_names
from tests.observability.dashboard_support import metric_names

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "monitoring" / "prometheus-rules.yaml"
UNIT_TESTS = Path(__file__).with_name("prometheus-rules.test.yaml")
RUNBOOK = REPO / "docs" / "alerts.md"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed: Debian's prometheus package has it (scripts/setup.sh, as root)")
    return found


def rule_groups() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    assert document["kind"] == "PrometheusRule" and document["apiVersion"] == "monitoring.coreos.com/v1"
    return list(document["spec"]["groups"])


def alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_promtool_checks_the_rules_and_every_alert_fires_in_its_unit_test(tmp_path: Path) -> None:
    tool = promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    assert "SUCCESS" in run([tool, "check", "rules", "rules.yaml"], tmp_path)
    assert "SUCCESS" in run([tool, "test", "rules", UNIT_TESTS.name], tmp_path)
    fired = {
        case["alertname"]
        for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in alerts()}, "an alert no unit test shows firing"


def test_the_issue_asks_for_these_alerts() -> None:
    names = {rule["alert"] for rule in alerts()}
    assert {
        "LaharOnlineLatencyAboveTarget",
        "LaharOnlineInterferenceHigh",
        "LaharBestEffortStarved",
        "LaharEvictionStorm",
        "LaharAgentNotReporting",
        "LaharSchedulerNotBinding",
        "LaharQueueStarved",
    } <= names


def test_every_alert_has_a_runbook_section_its_url_names() -> None:
    text = RUNBOOK.read_text()
    headings = {
        re.sub(r"[^a-z0-9-]", "", line[3:].strip().lower().replace(" ", "-"))
        for line in text.splitlines()
        if line.startswith("## ")
    }
    for rule in alerts():
        anchor = rule["alert"].lower()
        assert anchor in headings, f"docs/alerts.md has no section for {rule['alert']}"
        assert rule["annotations"]["runbook_url"] == f"docs/alerts.md#{anchor}"
        section = text.split(f"## {rule['alert']}", 1)[1].split("\n## ", 1)[0]
        for part in ("**Means**", "**Check**", "**Act**"):
            assert part in section, f"{rule['alert']}'s runbook lacks {part}"


def test_rules_use_only_exported_metrics() -> None:
    exported = set(series_names(catalog()))
    recorded = {rule["record"] for group in rule_groups() for rule in group["rules"] if "record" in rule}
    for group in rule_groups():
        for rule in group["rules"]:
            unknown = metric_names(rule["expr"]) - exported - recorded
            assert not unknown, f"{rule.get('alert') or rule.get('record')}: {sorted(unknown)} not exported"
