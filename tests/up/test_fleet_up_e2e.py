"""`lahar up --clusters 3` end to end: three member clusters (each its own embedded API server,
scheduler, controller and simulated nodes, of different sizes and labels) and a hub running
`lahar federation`. Jobs submitted to the hub run in the member that can hold them and show as
Running on the hub; a team's fleet-wide quota holds. Long (seven programs start): marked slow."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.endpoints import free_loopback_port
from lahar.federation import names
from tests.support import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
START_TIMEOUT = 300.0  # seven programs importing at once on a loaded 2-core machine


def job(name: str, replicas: int, cpu: str, *, gpu: int = 0, queue: str = "default") -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": "1Gi", **({"nvidia.com/gpu": str(gpu)} if gpu else {})}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "minAvailable": replicas,
            "schedulerName": "volcano",
            "queue": queue,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "metadata": {"annotations": {"lahar.dev/sim-duration": "600"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "sim",
                                    "resources": {"requests": requests, "limits": requests},
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[KubeApi, list[str]]]:
    data_dir = tmp_path / "fleet"
    argv = [sys.executable, "-m", "lahar", "up", "--clusters", "3", "--data-dir", str(data_dir)]
    argv += ["--port", str(free_loopback_port())]
    lines: list[str] = []
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )

    def read() -> None:
        assert proc.stdout is not None
        lines.extend(proc.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(
            lambda: "The federation is up" in "".join(lines) or proc.poll() is not None, START_TIMEOUT, "the fleet"
        )
        assert proc.poll() is None, "".join(lines)
        yield KubeApi(new_api_client(str(data_dir / "kubeconfig")), timeout=10), lines
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def where(hub: KubeApi, name: str) -> tuple[str, str]:
    obj = hub.get(kinds.JOB, name, "default")
    phase = ((obj.get("status") or {}).get("state") or {}).get("phase", "")
    return obj["metadata"].get("labels", {}).get(names.CLUSTER_LABEL, ""), phase


def test_jobs_run_where_they_fit_and_the_team_quota_holds(fleet: tuple[KubeApi, list[str]]) -> None:
    hub, _ = fleet
    wait_for(lambda: all(c.get("status", {}).get("reachable") for c in hub.list(kinds.CLUSTER)["items"]), 30, "members")
    assert len(hub.list(kinds.CLUSTER)["items"]) == 3
    hub.create(kinds.JOB, job("gpu-train", 2, "2", gpu=2))  # only member-3 has GPUs
    hub.create(kinds.JOB, job("wide", 2, "24"))  # 24-CPU pods: only member-2's 32-CPU nodes
    for name, member in (("gpu-train", "member-3"), ("wide", "member-2")):
        wait_for(lambda n=name, m=member: where(hub, n) == (m, "Running"), 120, f"{name} Running on {member}")
    # A team's quota is fleet-wide: 12 CPUs across all members, jobs of 2 x 4 CPUs each.
    hub.create(kinds.QUEUE, {"metadata": {"name": "team"}, "spec": {"weight": 1, "capability": {"cpu": "12"}}})
    for index in range(3):
        hub.create(kinds.JOB, job(f"team-{index}", 2, "2", queue="team"))  # 4 CPUs each: 3 fit in 12
    hub.create(kinds.JOB, job("team-over", 2, "2", queue="team"))
    wait_for(lambda: all(where(hub, f"team-{i}")[1] == "Running" for i in range(3)), 120, "the team's jobs Running")
    time.sleep(3)
    cluster, phase = where(hub, "team-over")
    assert cluster == "" and phase == "Pending"
    state = hub.get(kinds.JOB, "team-over", "default")["status"]["state"]
    assert state["reason"] == names.REASON_QUOTA
