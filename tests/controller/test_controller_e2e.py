"""The job controller against the embedded API server, with a small fake kubelet in the test that
binds pods, moves them through Running/Succeeded and evicts them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.controller.controller import JobController
from tests.controller.fake_kubelet import events_of, job, kubelet_finishes_deletions, kubelet_runs, phase_of, pods_of
from tests.support import wait_for


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
    assert {"Running", "Completed"} <= {e["reason"] for e in events_of(api, "train")}


def test_evicted_pod_restarts_the_job_until_max_retry(api: KubeApi, controller: JobController) -> None:
    api.create(
        kinds.JOB,
        job("flaky", replicas=2, maxRetry=1, policies=[{"event": "PodEvicted", "action": "RestartJob"}]),
        "default",
    )
    for pod in wait_for(lambda: len(pods_of(api, "flaky")) == 2 and pods_of(api, "flaky"), 10, "2 pods"):
        kubelet_runs(api, pod, "Running")
    wait_for(lambda: phase_of(api, "flaky") == "Running", 10, "the job to run")
    first_uids = {p["metadata"]["uid"] for p in pods_of(api, "flaky")}

    api.evict("default", "flaky-worker-0")
    wait_for(
        lambda: (api.get(kinds.JOB, "flaky", "default").get("status") or {}).get("retryCount") == 1,
        10,
        "the restart to be counted",
    )
    # The restart deletes every pod; the kubelet's grace periods end; new pods come.
    wait_for(
        lambda: all(p["metadata"].get("deletionTimestamp") for p in pods_of(api, "flaky")),
        10,
        "every pod to be deleted",
    )
    kubelet_finishes_deletions(api, "flaky")
    fresh = wait_for(
        lambda: (lambda pods: len(pods) == 2 and not {p["metadata"]["uid"] for p in pods} & first_uids and pods)(
            pods_of(api, "flaky")
        ),
        15,
        "recreated pods",
    )
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
    wait_for(
        lambda: (api.get(kinds.QUEUE, "team").get("status") or {}).get("pending") == 1,
        10,
        "the queue to count the job's PodGroup",
    )
    api.patch(kinds.QUEUE, "team", {"metadata": {"annotations": {"lahar.dev/queue-command": "close"}}})
    wait_for(lambda: api.get(kinds.QUEUE, "team")["status"]["state"] == "Closing", 10, "Closing")
    api.delete(kinds.JOB, "member", "default")  # the API's garbage collector takes its PodGroup
    wait_for(lambda: api.get(kinds.QUEUE, "team")["status"]["state"] == "Closed", 10, "Closed")
    wait_for(
        lambda: "lahar.dev/queue-command" not in (api.get(kinds.QUEUE, "team")["metadata"].get("annotations") or {}),
        10,
        "the request to be consumed",
    )
    api.patch(kinds.QUEUE, "team", {"metadata": {"annotations": {"lahar.dev/queue-command": "open"}}})
    wait_for(lambda: api.get(kinds.QUEUE, "team")["status"]["state"] == "Open", 10, "Open again")


def _state(api: KubeApi, name: str) -> dict[str, str]:
    return (api.get(kinds.JOB, name, "default").get("status") or {}).get("state") or {}


def test_a_job_is_held_until_its_queue_exists(api: KubeApi, controller: JobController, kubeconfig: Path) -> None:
    api.create(kinds.JOB, job("early", replicas=2, queue="later"), "default")
    wait_for(lambda: _state(api, "early").get("reason") == "QueueNotFound", 10, "the job to be held")
    assert 'queue "later" does not exist' in _state(api, "early")["message"]
    assert _state(api, "early")["phase"] == "Pending"
    [event] = [e for e in events_of(api, "early") if e["reason"] == "QueueNotFound"]
    assert event["type"] == "Warning"
    time.sleep(0.5)  # a held job makes nothing: no pods, no PodGroup for the scheduler
    assert pods_of(api, "early") == []
    assert api.list(kinds.PODGROUP, "default")["items"] == []

    api.create(kinds.QUEUE, {"metadata": {"name": "later"}, "spec": {"weight": 1}})
    wait_for(lambda: len(pods_of(api, "early")) == 2, 10, "the job's pods once its queue exists")
    assert _state(api, "early")["reason"] == "QueueOpen"
    assert api.get(kinds.PODGROUP, "early", "default")["spec"]["queue"] == "later"
    conditions = api.get(kinds.JOB, "early", "default")["status"]["conditions"]
    assert [c.get("reason") for c in conditions] == ["QueueNotFound", "QueueOpen"]
    view = subprocess.run(
        [sys.executable, "-m", "lahar", "job", "view", "early", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert view.returncode == 0, view.stderr
    held = next(line for line in view.stdout.splitlines() if "QueueNotFound" in line)
    assert held.split()[:2] == ["Pending", "QueueNotFound"] and 'queue "later" does not exist' in held


def test_a_job_is_held_while_its_queue_is_closed(api: KubeApi, controller: JobController) -> None:
    api.create(kinds.QUEUE, {"metadata": {"name": "shut"}, "spec": {"weight": 1}})
    api.patch(kinds.QUEUE, "shut", {"metadata": {"annotations": {"lahar.dev/queue-command": "close"}}})
    wait_for(lambda: (api.get(kinds.QUEUE, "shut").get("status") or {}).get("state") == "Closed", 10, "Closed")

    api.create(kinds.JOB, job("blocked", replicas=1, queue="shut"), "default")
    wait_for(lambda: _state(api, "blocked").get("reason") == "QueueNotOpen", 10, "the job to be held")
    assert _state(api, "blocked")["message"] == 'queue "shut" is Closed; the job waits until it is opened'
    time.sleep(0.5)
    assert pods_of(api, "blocked") == []
    # Holding the job must not keep the queue from staying Closed.
    assert api.get(kinds.QUEUE, "shut")["status"]["state"] == "Closed"

    api.patch(kinds.QUEUE, "shut", {"metadata": {"annotations": {"lahar.dev/queue-command": "open"}}})
    wait_for(lambda: len(pods_of(api, "blocked")) == 1, 10, "the job's pod once its queue opens")
    assert _state(api, "blocked")["reason"] == "QueueOpen"
