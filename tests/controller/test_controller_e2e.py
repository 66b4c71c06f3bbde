"""The job controller against the embedded API server, with a small fake kubelet in the test that
binds pods, moves them through Running/Succeeded and evicts them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.controller.controller import JobController
from tests.support import wait_for




@pytest.fixture
def api(apiserver: Any, tmp_path: Any) -> KubeApi:
    return KubeApi(new_api_client(str(apiserver.kubeconfig(tmp_path / "kc"))))


@pytest.fixture
def controller(api: KubeApi) -> Iterator[JobController]:
    running = JobController(api, admission_required=False, resync_seconds=2.0)
    running.start()
    yield running
    running.stop()


def job(name: str, replicas: int = 3, policies: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": name},
            "spec": {"minAvailable": replicas, "schedulerName": "lahar", "policies": policies or [],
                     "tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}}],
                     **spec}}


def pods_of(api: KubeApi, name: str) -> list[dict[str, Any]]:
    return api.list(kinds.POD, "default", label_selector=f"volcano.sh/job-name={name}")["items"]


def phase_of(api: KubeApi, name: str) -> str:
    return ((api.get(kinds.JOB, name, "default").get("status") or {}).get("state") or {}).get("phase", "")


def kubelet_runs(api: KubeApi, pod: dict[str, Any], phase: str) -> None:
    """What a kubelet does: bind (scheduler's part, here), then report the pod's phase."""
    name = pod["metadata"]["name"]
    if not pod["spec"].get("nodeName"):
        api.bind("default", name, "node-1")
    state = {"terminated": {"exitCode": 0}} if phase == "Succeeded" else {"running": {}}
    api.patch(kinds.POD, name, {"status": {"phase": phase, "containerStatuses": [
        {"name": "main", "ready": phase == "Running", "restartCount": 0, "image": "busybox", "imageID": "",
         "state": state}]}}, "default", subresource="status")


def test_job_runs_to_completion(api: KubeApi, controller: JobController) -> None:
    api.create(kinds.JOB, job("train"), "default")
    pods = wait_for(lambda: len(pods_of(api, "train")) == 3 and pods_of(api, "train"), 10, "3 pods")
    assert sorted(p["metadata"]["name"] for p in pods) == ["train-worker-0", "train-worker-1", "train-worker-2"]
    pod = pods[0]
    assert pod["spec"]["schedulerName"] == "lahar"
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "train"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    podgroup = api.get(kinds.PODGROUP, "train", "default")
    assert podgroup["spec"]["minMember"] == 3

    for pod in pods:
        kubelet_runs(api, pod, "Running")
    wait_for(lambda: phase_of(api, "train") == "Running", 10, "the job to run")
    status = api.get(kinds.JOB, "train", "default")["status"]
    assert status["running"] == 3 and status["minAvailable"] == 3

    for pod in pods_of(api, "train"):
        kubelet_runs(api, pod, "Succeeded")
    wait_for(lambda: phase_of(api, "train") == "Completed", 10, "the job to complete")
    assert api.get(kinds.JOB, "train", "default")["status"]["succeeded"] == 3
    events = api.list(kinds.EVENT, "default", field_selector="involvedObject.name=train")["items"]
    assert {"Running", "Completed"} <= {e["reason"] for e in events}


def test_evicted_pod_restarts_the_job_until_max_retry(api: KubeApi, controller: JobController) -> None:
    api.create(kinds.JOB, job("flaky", replicas=2, maxRetry=1,
                              policies=[{"event": "PodEvicted", "action": "RestartJob"}]), "default")
    for pod in wait_for(lambda: len(pods_of(api, "flaky")) == 2 and pods_of(api, "flaky"), 10, "2 pods"):
        kubelet_runs(api, pod, "Running")
    wait_for(lambda: phase_of(api, "flaky") == "Running", 10, "the job to run")
    first_uids = {p["metadata"]["uid"] for p in pods_of(api, "flaky")}

    api.evict("default", "flaky-worker-0")
    wait_for(lambda: (api.get(kinds.JOB, "flaky", "default").get("status") or {}).get("retryCount") == 1, 10,
             "the restart to be counted")
    # The restart deletes every pod; the kubelet's grace periods end; new pods come.
    for pod in pods_of(api, "flaky"):
        if pod["metadata"].get("deletionTimestamp"):
            api.delete(kinds.POD, pod["metadata"]["name"], "default", grace_period_seconds=0)
    fresh = wait_for(lambda: (lambda pods: len(pods) == 2 and not {p["metadata"]["uid"] for p in pods} & first_uids
                              and pods)(pods_of(api, "flaky")), 15, "recreated pods")
    for pod in fresh:
        kubelet_runs(api, pod, "Running")
    wait_for(lambda: phase_of(api, "flaky") == "Running", 10, "the job to run again")

    api.evict("default", "flaky-worker-1")  # a second eviction: maxRetry 1 is spent
    wait_for(lambda: phase_of(api, "flaky") == "Failed", 10, "the job to fail")


def test_controller_restart_neither_duplicates_nor_loses_pods(api: KubeApi, controller: JobController) -> None:
    api.create(kinds.JOB, job("steady", replicas=3), "default")
    wait_for(lambda: len(pods_of(api, "steady")) == 3, 10, "3 pods")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(api, "steady")}
    controller.stop()
    api.delete(kinds.POD, "steady-worker-1", "default")  # lost while no controller runs
    again = JobController(api, admission_required=False, resync_seconds=2.0)
    again.start()
    try:
        after = wait_for(lambda: len(pods_of(api, "steady")) == 3 and pods_of(api, "steady"), 10, "3 pods again")
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in after}
        assert uids["steady-worker-0"] == before["steady-worker-0"]
        assert uids["steady-worker-2"] == before["steady-worker-2"]
        assert uids["steady-worker-1"] != before["steady-worker-1"]
        time.sleep(1.0)
        assert len(pods_of(api, "steady")) == 3
    finally:
        again.stop()


def test_queue_closes_once_its_podgroups_are_gone(api: KubeApi, controller: JobController) -> None:
    api.create(kinds.QUEUE, {"metadata": {"name": "team"}, "spec": {"weight": 2}})
    api.create(kinds.JOB, job("member", replicas=1, queue="team"), "default")
    wait_for(lambda: (api.get(kinds.QUEUE, "team").get("status") or {}).get("pending") == 1, 10,
             "the queue to count the job's PodGroup")
    api.patch(kinds.QUEUE, "team", {"metadata": {"annotations": {"lahar.dev/queue-command": "close"}}})
    wait_for(lambda: api.get(kinds.QUEUE, "team")["status"]["state"] == "Closing", 10, "Closing")
    api.delete(kinds.JOB, "member", "default")  # the API's garbage collector takes its PodGroup
    wait_for(lambda: api.get(kinds.QUEUE, "team")["status"]["state"] == "Closed", 10, "Closed")
    wait_for(lambda: "lahar.dev/queue-command" not in (api.get(kinds.QUEUE, "team")["metadata"].get("annotations")
                                                      or {}), 10, "the request to be consumed")
    api.patch(kinds.QUEUE, "team", {"metadata": {"annotations": {"lahar.dev/queue-command": "open"}}})
    wait_for(lambda: api.get(kinds.QUEUE, "team")["status"]["state"] == "Open", 10, "Open again")
