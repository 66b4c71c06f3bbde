"""Every panel of the Grafana dashboard returns data on a running `lahar up --demo` (issue 19):
Debian's Prometheus scrapes the scheduler, the controller and the agent `lahar up` starts, every
second, while the demo runs its four scenarios (an online service under load alone and beside a
BE job, a gang, two queues); then each panel's every query is evaluated over the run through
Prometheus' HTTP API, Grafana's variables filled in, and must return data.

A few targets depend on what this machine has or what the demo does not set off; they are listed
in CONDITIONAL with the reason, and their panel must still show data from its other targets
(GPU and NPU panels are exempt only while the agent says the node has none). When Chromium is
installed the same queries are rendered (scripts/render-dashboard.py) into a picture, as
docs/dashboard.png was made (LAHAR_UPDATE_DASHBOARD_PICTURE=1 copies it there).

Marked `demo` (about two minutes): deselect it with `-m "not demo"`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from lahar.endpoints import free_loopback_port
from tests.node.support import cgroups_skip_reason
from tests.observability.dashboard_support import REPO, all_panels, load_dashboard, with_grafana_values
from tests.observability.test_prometheus_e2e import Processes, PrometheusApi, prometheus_binary
from tests.support import wait_for
from tests.up.test_lahar_up_e2e import LaharUp

RATE_WINDOW = "15s"  # $__rate_interval for a run of two minutes scraped every second
# (panel title, refId) -> why it may be empty on a demo run.
CONDITIONAL = {
    ("BE memory vs cap", "B"): "a BE memory cap exists only while node memory is past its threshold",
    ("BE IO limits", "A"): "IO limits need devices in the QoS config; the demo configures none",
    ("BE IO limits", "B"): "IO limits need devices in the QoS config; the demo configures none",
    ("Reconcile latency (p99) and errors", "B"): "no reconcile fails in the demo",
}
ACCELERATOR_ROW = "GPUs and NPUs"
UPDATE_PICTURE = "LAHAR_UPDATE_DASHBOARD_PICTURE"  # =1: this run's picture becomes docs/dashboard.png


def metrics_urls(output: str) -> dict[str, str]:
    """The programs' /metrics addresses from `lahar up`'s summary."""
    found = dict(re.findall(r"^\s+(scheduler|controller|agent)\s+(http://\S+/metrics)", output, re.M))
    assert set(found) == {"scheduler", "controller", "agent"}, output
    return found


def prometheus_config(urls: dict[str, str]) -> dict[str, Any]:
    def job(name: str, url: str) -> dict[str, Any]:
        target = urllib.parse.urlsplit(url).netloc
        return {"job_name": f"lahar-{name}", "static_configs": [{"targets": [target]}], "honor_labels": name == "agent"}

    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [job(name, url) for name, url in sorted(urls.items())],
    }


def query_range(api: PrometheusApi, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    data = api.get("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step="2s")
    return list(data["result"])


def panels_by_row(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    row, found = "", []
    for panel in all_panels(dashboard):
        if panel.get("type") == "row":
            row = panel["title"]
        elif panel.get("targets"):
            found.append((row, panel))
    return found


@pytest.mark.demo
@pytest.mark.timeout(420)
def test_every_panel_returns_data_on_a_running_demo(tmp_path: Path) -> None:
    binary = prometheus_binary()
    if reason := cgroups_skip_reason():
        pytest.skip(f"the demo's local node needs cgroups: {reason}")
    up = LaharUp(tmp_path / "data", f"dash{int(time.time()) % 100000}", "--demo")
    processes = Processes(tmp_path)
    port = free_loopback_port()
    api = PrometheusApi(port)
    try:
        up.start(ready="Lahar is up")
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(metrics_urls(up.output))))
        processes.start(
            "prometheus",
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
        )
        wait_for(api.ready, 30, "prometheus to be ready")
        start = time.time()
        up.wait_for_output("The demo is done", 300)
        time.sleep(5)  # a few more scrapes after the last scenario
        end = time.time()

        dashboard = load_dashboard()
        values = {"__rate_interval": RATE_WINDOW}
        accelerators = {
            series["metric"]["kind"]: float(series["value"][1])
            for series in api.query('max by (kind) (lahar_accelerator_available{job="lahar-agent"})')
        }
        empty, results = [], {}
        for row, panel in panels_by_row(dashboard):
            with_data = []
            for target in panel["targets"]:
                expr = with_grafana_values(target["expr"], values)
                result = query_range(api, expr, start, end)
                results[(panel["title"], target["refId"])] = result
                if result:
                    with_data.append(target["refId"])
                elif (panel["title"], target["refId"]) not in CONDITIONAL and row != ACCELERATOR_ROW:
                    empty.append(f"{panel['title']!r} {target['refId']}: {target['expr']}")
            if not with_data and not (row == ACCELERATOR_ROW and not any(accelerators.values())):
                empty.append(f"{panel['title']!r}: no target has data")
        assert empty == [], f"{len(empty)} without data:\n" + "\n".join(empty) + f"\n{up.output[-3000:]}"
        assert set(CONDITIONAL) <= set(results), "CONDITIONAL names a target the dashboard does not have"

        # The online-latency view: the demo's online service names its request-time histogram;
        # the agent shows its p99 (under its 20 ms target: the BE job is held back).
        latency = results[("Online latency vs BE cap", "A")]
        assert {s["metric"]["pod"] for s in latency} == {"online-service"}
        p99 = [float(value) for series in latency for _, value in series["values"]]
        assert min(p99) > 0 and max(p99) < 1.0, p99

        renderer = shutil.which("chromium") or shutil.which("chromium-headless-shell")
        if renderer is not None:
            picture = tmp_path / "dashboard.png"
            done = subprocess.run(
                [
                    sys.executable,
                    str(REPO / "scripts" / "render-dashboard.py"),
                    "--prometheus",
                    api.base,
                    "--start",
                    str(start),
                    "--end",
                    str(end),
                    "--output",
                    str(picture),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert picture.stat().st_size > 50_000 and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            json.loads((tmp_path / "dashboard.json").read_text())  # the data it drew, beside it
            if os.environ.get(UPDATE_PICTURE) == "1":  # to refresh docs/dashboard.png from this run
                shutil.copy(picture, REPO / "docs" / "dashboard.png")
        assert up.stop() == 0, up.output[-3000:]
    finally:
        processes.stop()
        left = up.close()
    assert not left, f"left behind: {left}"
