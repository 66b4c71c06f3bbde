"""End to end with a real Prometheus (docs/architecture.md, "Testing"): Debian's `prometheus`
(scripts/setup.sh installs it when run as root) scrapes, every second, a standalone `lahar agent`
running QoS in dry-run on this machine, a `lahar scheduler` and a `lahar controller` against the embedded
API server; then Prometheus's HTTP API shows that:

- every target is up, and every `lahar_` series it holds is one the metrics catalogue lists;
- node CPU usage is there and plausible (0 < usage <= the node's CPUs);
- the BE CPU cap is there and plausible: with no interference measured it is the SRE ceiling
  given with --qos-config, exactly `cores x ceiling - online - system` of the same tick, floored;
  the interference signal (online pods' CPU wait share) is exported;
- the scheduler has run cycles and the controller counts jobs in every phase;
- every query of the Grafana dashboard evaluates (Grafana's variables filled in), and its key
  panels have data.

Skipped, with the reason, where prometheus is not installed. Every process is stopped in
`finally`, and dies with this one (PR_SET_PDEATHSIG) if the test is killed."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from lahar.api.job import JobPhase
from lahar.endpoints import free_loopback_port
from lahar.metrics_catalog import catalog, series_names
from tests.observability.dashboard_support import all_panels, load_dashboard, queries, with_grafana_values
from tests.support import wait_for

NODE = "lahar-e2e"
CEILING, FLOOR = 0.9, 0.02  # cpu_suppress settings for the agent: high, so the cap is rarely the floor
JOBS = ("lahar-agent", "lahar-scheduler", "lahar-controller")
# Panels that must show data after a few scrapes of an idle system (others need GPUs, pods, queues).
PANELS_WITH_DATA = (
    "Node CPU usage",
    "BE CPU cap vs online wait",
    "Pending work",
    "Jobs by phase",
    "Scheduling cycle latency",
    "Agent collection time",
)
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process goes, however it goes."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def prometheus_binary() -> str:
    """Debian's prometheus, which scripts/setup.sh installs (as root); tests never install."""
    found = shutil.which("prometheus")
    if found is None:
        pytest.skip("prometheus is not installed: scripts/setup.sh installs it when run as root (make setup)")
    return found


class Processes:
    """Child processes, each logging to its own file; stopped together."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, command: list[str]) -> None:
        with open(self.directory / f"{name}.log", "wb") as log:
            self.running[name] = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                preexec_fn=die_with_parent,
            )

    def check_alive(self) -> None:
        for name, process in self.running.items():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with {process.returncode}:\n{self.log(name)}")

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")[-3000:]

    def logs(self) -> str:
        return "\n".join(f"--- {name} ---\n{self.log(name)}" for name in self.running)

    def stop(self) -> None:
        for process in self.running.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.running.values():
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class PrometheusApi:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def value(self, expr: str) -> float:
        result = self.query(expr)
        assert len(result) == 1, f"{expr}: expected one series, got {result}"
        return float(result[0]["value"][1])

    def values(self, expr: str) -> dict[str, float]:
        """One figure per series, by the series' labels (job and instance left out)."""
        return {
            json.dumps({k: v for k, v in sorted(s["metric"].items()) if k not in ("job", "instance")}): float(
                s["value"][1]
            )
            for s in self.query(expr)
        }


def prometheus_config(agent: int, scheduler: int, controller: int) -> dict[str, Any]:
    def job(name: str, port: int, **extra: Any) -> dict[str, Any]:
        return {"job_name": name, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}], **extra}

    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        # As deploy/monitoring's ServiceMonitors: the agent's pod series keep their own labels.
        "scrape_configs": [
            job("lahar-agent", agent, honor_labels=True),
            job("lahar-scheduler", scheduler),
            job("lahar-controller", controller),
        ],
    }


def lahar(*args: str) -> list[str]:
    return [sys.executable, "-m", "lahar", *args]


def eventually(
    api: PrometheusApi, processes: Processes, condition: Callable[[], Any], what: str, timeout: float = 30.0
) -> Any:
    def check() -> Any:
        processes.check_alive()
        try:
            return condition()
        except (AssertionError, OSError):
            return None

    try:
        return wait_for(check, timeout, what, interval=0.25)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{processes.logs()}") from None


@pytest.mark.timeout(120)  # the test itself takes about 15 s
def test_prometheus_scrapes_the_agent_scheduler_and_controller(tmp_path: Path, apiserver: Any) -> None:
    binary = prometheus_binary()
    ports = {name: free_loopback_port() for name in ("agent", "scheduler", "controller", "prometheus")}
    kubeconfig = str(apiserver.kubeconfig(tmp_path / "kubeconfig"))
    qos_config = tmp_path / "qos.yaml"
    qos_config.write_text(
        yaml.safe_dump({"cpu_suppress": {"enabled": True, "ceiling_ratio": CEILING, "floor_ratio": FLOOR}})
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(ports["agent"], ports["scheduler"], ports["controller"])))
    processes = Processes(tmp_path)
    api = PrometheusApi(ports["prometheus"])
    try:
        # --dry-run and a kubepods name no node has: QoS decides on this machine's real usage and
        # writes nothing. Standalone: no API, no scheduler stream.
        processes.start(
            "agent",
            lahar(
                "agent",
                "--standalone",
                "--node",
                NODE,
                "--interval",
                "0.5",
                "--metrics-port",
                str(ports["agent"]),
                "--metrics-address",
                "127.0.0.1",
                "--qos-config",
                str(qos_config),
                "--dry-run",
                "--kubepods",
                f"lahar-e2e-{uuid.uuid4().hex[:8]}",
            ),
        )
        processes.start(
            "scheduler",
            lahar(
                "scheduler",
                "--kubeconfig",
                kubeconfig,
                "--period",
                "0.5",
                "--metrics-port",
                str(ports["scheduler"]),
                "--metrics-address",
                "127.0.0.1",
            ),
        )
        processes.start(
            "controller",
            lahar(
                "controller",
                "--kubeconfig",
                kubeconfig,
                "--metrics-port",
                str(ports["controller"]),
                "--metrics-address",
                "127.0.0.1",
            ),
        )
        processes.start(
            "prometheus",
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
                "--log.level=warn",
            ],
        )
        eventually(api, processes, api.ready, "prometheus to be ready")
        eventually(
            api,
            processes,
            lambda: {s["metric"]["job"]: s["value"][1] for s in api.query("up")} == dict.fromkeys(JOBS, "1"),
            "every target up",
        )

        # Node CPU: present and plausible. The first collection has no interval to measure over.
        cpu_query = f'lahar_node_cpu_usage_cores{{job="lahar-agent", node="{NODE}"}}'
        usage = eventually(
            api, processes, lambda: api.value(cpu_query) if api.value(cpu_query) > 0 else None, "node CPU usage above 0"
        )
        cores = api.value(f'lahar_node_cpu_cores{{node="{NODE}"}}')
        assert 1 <= cores <= (os.cpu_count() or cores)
        assert 0 < usage <= cores

        # The BE CPU cap: present while QoS runs, within [floor, ceiling] x cores; with no
        # interference it is the ceiling over the same tick's online and system usage.
        quota_query = f'lahar_qos_be_cpu_quota_cores{{node="{NODE}"}}'
        quota = eventually(api, processes, lambda: api.value(quota_query), "the BE CPU cap")
        assert FLOOR * cores - 1e-9 <= quota <= CEILING * cores + 1e-9
        figures = {
            name: api.value(f'lahar_qos_{name}{{node="{NODE}"}}')
            for name in (
                "be_cpu_quota_cores",
                "online_cpu_usage_cores",
                "system_cpu_usage_cores",
                "online_cpu_wait_ratio",
            )
        }
        expected = max(
            cores * CEILING - figures["online_cpu_usage_cores"] - figures["system_cpu_usage_cores"], cores * FLOOR
        )
        assert figures["be_cpu_quota_cores"] == pytest.approx(expected, abs=1e-6), figures
        assert 0 <= figures["online_cpu_wait_ratio"] <= 1
        assert api.value(f'lahar_qos_strategy_enabled{{node="{NODE}", strategy="cpu_suppress"}}') == 1
        assert api.value(f'lahar_qos_dry_run{{node="{NODE}"}}') == 1
        assert api.value(f'lahar_qos_config_valid{{node="{NODE}"}}') == 1

        # The scheduler cycles; the controller counts jobs in every phase (none yet).
        eventually(
            api,
            processes,
            lambda: api.value('lahar_scheduler_e2e_scheduling_duration_seconds_count{job="lahar-scheduler"}') >= 2,
            "scheduler cycles",
        )
        assert api.value('lahar_scheduler_pending_pods{job="lahar-scheduler"}') == 0
        phases = api.values('lahar_controller_jobs{job="lahar-controller"}')
        assert {json.loads(key)["phase"] for key in phases} == {phase.value for phase in JobPhase}

        # Everything Prometheus holds is catalogued (the catalogue misses nothing a live program serves).
        known = series_names(catalog())
        held = [name for name in api.get("/api/v1/label/__name__/values") if name.startswith("lahar_")]
        assert [name for name in held if name not in known] == []
        assert {
            "lahar_node_cpu_usage_cores",
            "lahar_qos_be_cpu_quota_cores",
            "lahar_scheduler_e2e_scheduling_duration_seconds_bucket",
            "lahar_controller_jobs",
        } <= set(held)

        # The dashboard: every query evaluates; the key panels show data once rates have two samples.
        dashboard = load_dashboard()
        failures = []
        for where, expr in queries(dashboard):
            try:
                api.query(with_grafana_values(expr))
            except (AssertionError, urllib.error.HTTPError) as exc:
                detail = exc.read().decode() if isinstance(exc, urllib.error.HTTPError) else str(exc)
                failures.append(f"{where}: {expr}: {detail}")
        assert failures == []
        for panel in (p for p in all_panels(dashboard) if p.get("title") in PANELS_WITH_DATA):
            for target in panel["targets"]:
                if "BE usage" in target["legendFormat"]:
                    continue  # no BE pods on this machine
                eventually(
                    api,
                    processes,
                    lambda target=target: api.query(with_grafana_values(target["expr"])),
                    f"data for {panel['title']!r} {target['refId']}",
                    timeout=15,
                )
        assert sorted(p["title"] for p in all_panels(dashboard) if p.get("title") in PANELS_WITH_DATA) == sorted(
            PANELS_WITH_DATA
        )
    finally:
        processes.stop()
