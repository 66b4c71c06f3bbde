"""The controller's Prometheus metrics: the pure phase count, then /metrics and /healthz scraped
over HTTP, from a controller in this process and from `lahar controller` as a process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.controller.controller import JobController
from lahar.controller.metrics import jobs_by_phase
from lahar.metrics_server import MetricsServer
from tests.controller.fake_kubelet import NAMESPACE, job, kubelet_runs_all, phase_of, pods_of
from tests.support import wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_jobs_by_phase_counts_every_phase() -> None:
    counts = jobs_by_phase(
        [
            {"status": {"state": {"phase": "Running"}}},
            {"status": {"state": {"phase": "Running"}}},
            {},
            {"status": {"state": {"phase": "Nonsense"}}},
        ]
    )
    assert counts["Running"] == 2 and counts["Pending"] == 2  # unwritten or unknown: Pending
    assert counts["Failed"] == 0 and len(counts) == 10


@pytest.fixture
def served(controller: JobController) -> Iterator[MetricsServer]:
    server = MetricsServer(controller.metrics.registry, controller.healthy, "127.0.0.1", 0)
    server.start()
    yield server
    server.stop()


def test_metrics_follow_jobs_reconciles_and_policy_actions(
    api: KubeApi, controller: JobController, served: MetricsServer
) -> None:
    assert get(f"http://127.0.0.1:{served.port}/healthz") == (200, "ok\n")
    assert get(f"http://127.0.0.1:{served.port}/nope")[0] == 404
    api.create(
        kinds.JOB, job("watched", replicas=2, policies=[{"event": "PodEvicted", "action": "RestartJob"}]), NAMESPACE
    )
    wait_for(lambda: len(pods_of(api, "watched")) == 2, 10, "2 pods")
    kubelet_runs_all(api, "watched", "Running")
    wait_for(lambda: phase_of(api, "watched") == "Running", 10, "Running")

    samples = wait_for(
        lambda: (lambda s: s[("lahar_controller_jobs", (("phase", "Running"),))] == 1 and s)(scrape(served.port)),
        10,
        "the job counted as Running",
    )
    assert samples[("lahar_controller_jobs", (("phase", "Pending"),))] == 0
    assert samples[("lahar_controller_reconcile_duration_seconds_count", (("kind", "job"),))] >= 3
    assert samples[("lahar_controller_reconcile_duration_seconds_count", (("kind", "queue"),))] >= 1
    assert samples[("lahar_controller_reconcile_errors_total", (("kind", "job"),))] == 0
    assert samples[("lahar_controller_policy_actions_total", (("action", "RestartJob"),))] == 0

    api.evict(NAMESPACE, "watched-worker-0")
    wait_for(
        lambda: scrape(served.port)[("lahar_controller_policy_actions_total", (("action", "RestartJob"),))] == 1,
        10,
        "the RestartJob to be counted",
    )
    samples = scrape(served.port)
    assert samples[("lahar_controller_jobs", (("phase", "Restarting"),))] == 1
    assert samples[("lahar_controller_policy_actions_total", (("action", "AbortJob"),))] == 0


def test_healthz_fails_until_the_controller_runs(api: KubeApi) -> None:
    idle = JobController(api, admission_required=False)
    assert idle.healthy() == (False, "the reconcile loop is not running")


def test_lahar_controller_serves_metrics(kubeconfig: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lahar",
            "controller",
            "--kubeconfig",
            str(kubeconfig),
            "--no-admission",
            "--metrics-port",
            "0",
            "--metrics-address",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", banner)
        assert found, banner
        port = int(found.group(1))
        wait_for(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 200, 20, "/healthz to answer 200")
        samples = scrape(port)
        assert samples[("lahar_controller_jobs", (("phase", "Pending"),))] == 0
        assert ("lahar_controller_reconcile_errors_total", (("kind", "queue"),)) in samples
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
        assert process.returncode == 0 and "lahar controller stopped" in output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_lahar_controller_refuses_a_bad_metrics_port(kubeconfig: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lahar", "controller", "--kubeconfig", str(kubeconfig), "--metrics-port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "--metrics-port must be between 0 and 65535, not 70000" in result.stderr
    assert "Traceback" not in result.stderr
