"""batch/v1 Jobs under the workload controllers and the embedded API server, driven by kubectl:
`create job` runs to Complete (`kubectl wait --for=condition=complete`), a Job whose pods fail
ends Failed at its backoffLimit, and deleting a Job takes its pods. A kubelet stand-in binds each
pod and finishes it: Failed when its command says `false`, else Succeeded."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import KubeError
from lahar.controller.workloads.runner import WorkloadControllers
from tests.support import wait_for

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def _finish(api: KubeApi, pod: dict[str, Any]) -> None:
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    if not pod["spec"].get("nodeName"):
        api.bind(namespace, name, "node-1")
    command = pod["spec"]["containers"][0].get("command") or []
    phase = "Failed" if "false" in command else "Succeeded"
    api.patch(kinds.POD, name, {"status": {"phase": phase}}, namespace, subresource="status")


@pytest.fixture
def workloads(api: KubeApi) -> Iterator[WorkloadControllers]:
    stop = threading.Event()

    def kubelet() -> None:
        while not stop.wait(0.1):
            try:
                for pod in api.list(kinds.POD)["items"]:
                    if pod["metadata"].get("deletionTimestamp"):
                        api.delete(kinds.POD, pod["metadata"]["name"], pod["metadata"]["namespace"], 0)
                    elif (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                        _finish(api, pod)
            except KubeError:
                pass  # a pod changed under us: the next round sees it

    thread = threading.Thread(target=kubelet, daemon=True)
    thread.start()
    running = WorkloadControllers(api)
    running.start()
    yield running
    running.stop()
    stop.set()
    thread.join(5)


def test_jobs_complete_fail_at_their_backoff_limit_and_are_collected(
    kubeconfig: Path, api: KubeApi, workloads: WorkloadControllers
) -> None:
    assert KUBECTL is not None

    def kubectl(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [KUBECTL, f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True, timeout=60, input=stdin
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    kubectl("create", "job", "ok", "--image=busybox", "--", "true")
    kubectl("wait", "--for=condition=complete", "job/ok", "--timeout=30s")
    status = json.loads(kubectl("get", "job", "ok", "-o", "json"))["status"]
    assert status["succeeded"] == 1 and status["completionTime"]

    failing = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": {
            "backoffLimit": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["false"]}],
                }
            },
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(failing))
    kubectl("wait", "--for=condition=failed", "job/bad", "--timeout=30s")
    bad = json.loads(kubectl("get", "job", "bad", "-o", "json"))
    assert bad["status"]["failed"] == 3, "backoffLimit 2: the third failure fails the Job"
    assert bad["status"]["conditions"][-1]["reason"] == "BackoffLimitExceeded"

    refused = subprocess.run(
        [KUBECTL, f"--kubeconfig={kubeconfig}", "apply", "-f", "-"],
        input=json.dumps(
            {
                **failing,
                "metadata": {"name": "always"},
                "spec": {
                    **failing["spec"],
                    "template": {
                        "spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "busybox"}]}
                    },
                },
            }
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "restartPolicy" in refused.stderr

    kubectl("delete", "job", "ok", "bad")
    wait_for(lambda: not api.list(kinds.POD, "default")["items"], timeout=20)
    reasons = {e["reason"] for e in json.loads(kubectl("get", "events", "-o", "json"))["items"]}
    assert {"SuccessfulCreate", "Completed", "BackoffLimitExceeded"} <= reasons


def test_a_due_cronjob_runs_a_batch_job_to_completion(
    kubeconfig: Path, api: KubeApi, workloads: WorkloadControllers
) -> None:
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, f"--kubeconfig={kubeconfig}", "create", "cronjob", "tick", "--image=busybox", "--schedule=* * * * *"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # Its last run two minutes ago: a scheduled minute is due now, without waiting for the clock.
    before = datetime.now(UTC) - timedelta(minutes=2)
    status = {"lastScheduleTime": before.strftime("%Y-%m-%dT%H:%M:%SZ")}
    api.patch(kinds.BATCH_CRONJOB, "tick", {"status": status}, "default", subresource="status")

    def finished() -> list[dict[str, Any]]:
        jobs = api.list(kinds.BATCH_JOB, "default")["items"]
        return [j for j in jobs if any(c["type"] == "Complete" for c in (j.get("status") or {}).get("conditions", []))]

    wait_for(lambda: finished(), timeout=30)
    (job,) = finished()
    assert job["metadata"]["ownerReferences"][0]["name"] == "tick"
    wait_for(
        lambda: (api.get(kinds.BATCH_CRONJOB, "tick", "default").get("status") or {}).get("lastSuccessfulTime"),
        timeout=20,
    )
    api.delete(kinds.BATCH_CRONJOB, "tick", "default")
    wait_for(lambda: not api.list(kinds.BATCH_JOB, "default")["items"], timeout=20)
