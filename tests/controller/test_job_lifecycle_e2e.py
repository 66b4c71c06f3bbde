"""What a finished, scaled, crash-looping or unschedulable Job looks like through the API, with the
controller against the embedded server (the fake kubelet plays the node)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import NotFound
from lahar.controller.controller import JobController
from tests.controller.fake_kubelet import (
    NAMESPACE,
    events_of,
    job,
    kubelet_finishes_deletions,
    kubelet_runs,
    kubelet_runs_all,
    phase_of,
    pods_of,
    status_of,
    task,
)
from tests.support import wait_for


def _gone(api: KubeApi, kind: kinds.Kind, name: str) -> bool:
    try:
        api.get(kind, name, NAMESPACE)
    except NotFound:
        return True
    return False


def test_a_finished_job_releases_its_podgroup_and_plugin_objects(api: KubeApi, controller: JobController) -> None:
    """A finished job's PodGroup kept reserving its queue's quota (the scheduler put it back
    Inqueue), so the next job in that queue waited for ever: Completed releases everything."""
    api.create(kinds.JOB, job("done", replicas=2, plugins={"svc": [], "ssh": []}), NAMESPACE)
    wait_for(lambda: len(pods_of(api, "done")) == 2, 10, "2 pods")
    assert api.get(kinds.PODGROUP, "done", NAMESPACE)["spec"]["minMember"] == 2
    assert api.get(kinds.SECRET, "done-ssh", NAMESPACE)
    kubelet_runs_all(api, "done", "Succeeded")
    wait_for(lambda: phase_of(api, "done") == "Completed", 10, "the job to complete")
    wait_for(lambda: _gone(api, kinds.PODGROUP, "done"), 10, "the PodGroup to be released")
    for kind, name in ((kinds.SERVICE, "done"), (kinds.CONFIGMAP, "done-svc"), (kinds.SECRET, "done-ssh")):
        wait_for(lambda kind=kind, name=name: _gone(api, kind, name), 10, f"{kind.kind} {name} to be released")
    assert len(pods_of(api, "done")) == 2  # the finished pods stay, for their logs


def _job_with_hosts(name: str, replicas: int) -> dict[str, Any]:
    manifest = job(name, tasks=[task("worker", replicas)], plugins={"svc": []})
    manifest["spec"]["minAvailable"] = replicas
    return manifest


def _scale(api: KubeApi, name: str, replicas: int) -> None:
    current = api.get(kinds.JOB, name, NAMESPACE)
    tasks = current["spec"]["tasks"]
    tasks[0]["replicas"] = tasks[0]["minAvailable"] = replicas
    api.patch(kinds.JOB, name, {"spec": {"minAvailable": replicas, "tasks": tasks}}, NAMESPACE)


def test_scaling_updates_the_gang_the_hosts_and_the_pods(api: KubeApi, controller: JobController) -> None:
    api.create(kinds.JOB, _job_with_hosts("elastic", 3), NAMESPACE)
    wait_for(lambda: len(pods_of(api, "elastic")) == 3, 10, "3 pods")
    kubelet_runs_all(api, "elastic", "Running")
    wait_for(lambda: phase_of(api, "elastic") == "Running", 10, "the job to run")

    _scale(api, "elastic", 2)
    wait_for(lambda: api.get(kinds.PODGROUP, "elastic", NAMESPACE)["spec"]["minMember"] == 2, 10, "minMember 2")
    assert api.get(kinds.PODGROUP, "elastic", NAMESPACE)["spec"]["minTaskMember"] == {"worker": 2}
    hosts = wait_for(
        lambda: (data := api.get(kinds.CONFIGMAP, "elastic-svc", NAMESPACE)["data"])["VC_WORKER_NUM"] == "2" and data,
        10,
        "the hosts to shrink",
    )
    assert hosts["worker.host"] == "elastic-worker-0.elastic\nelastic-worker-1.elastic"
    wait_for(lambda: pod_deleting(api, "elastic", "elastic-worker-2"), 10, "the pod beyond the replicas to be deleted")
    kubelet_finishes_deletions(api, "elastic")

    _scale(api, "elastic", 4)
    wait_for(lambda: len(pods_of(api, "elastic")) == 4, 10, "4 pods")
    assert api.get(kinds.PODGROUP, "elastic", NAMESPACE)["spec"]["minMember"] == 4
    hosts = api.get(kinds.CONFIGMAP, "elastic-svc", NAMESPACE)["data"]
    assert hosts["VC_WORKER_NUM"] == "4" and hosts["VC_WORKER_HOSTS"].endswith(",elastic-worker-3.elastic")
    assert phase_of(api, "elastic") in ("Running", "Pending")


def pod_deleting(api: KubeApi, job_name: str, pod_name: str) -> bool:
    pod = next((p for p in pods_of(api, job_name) if p["metadata"]["name"] == pod_name), None)
    return pod is None or bool(pod["metadata"].get("deletionTimestamp"))


def test_task_status_count_follows_the_pods_and_crash_loops_do_not_count_as_running(
    api: KubeApi, controller: JobController, kubeconfig: Path
) -> None:
    api.create(kinds.JOB, job("counted", replicas=2), NAMESPACE)
    pods = wait_for(lambda: len(pods_of(api, "counted")) == 2 and pods_of(api, "counted"), 10, "2 pods")
    wait_for(
        lambda: status_of(api, "counted").get("taskStatusCount") == {"worker": {"phase": {"Pending": 2}}},
        10,
        "two pending pods counted",
    )
    kubelet_runs_all(api, "counted", "Running")
    # A phase no pod is in any more is gone (a merge patch used to keep Pending: 2 beside Running: 2).
    wait_for(
        lambda: status_of(api, "counted").get("taskStatusCount") == {"worker": {"phase": {"Running": 2}}},
        10,
        "two running pods counted",
    )
    crash = {
        "name": "main",
        "ready": False,
        "restartCount": 4,
        "image": "busybox",
        "imageID": "",
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
    }
    name = pods[0]["metadata"]["name"]
    api.patch(
        kinds.POD, name, {"status": {"phase": "Running", "containerStatuses": [crash]}}, NAMESPACE, subresource="status"
    )
    wait_for(lambda: status_of(api, "counted").get("running") == 1, 10, "the crash-looping pod not counted running")
    status = status_of(api, "counted")
    assert status["pending"] == 1
    assert status["taskStatusCount"] == {"worker": {"phase": {"Running": 1, "Pending": 1}}}
    assert status["state"]["phase"] == "Running"  # the job itself still runs
    [event] = wait_for(
        lambda: [e for e in events_of(api, "counted") if e["reason"] == "PodCrashLooping"], 10, "a crash-loop event"
    )
    assert event["type"] == "Warning" and f"pod {name}: main: back-off 40s" in event["message"]
    if shutil.which("kubectl"):  # what a user sees: the Job's events in `kubectl describe`
        described = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "describe", "vcjob", "counted"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        events = described[described.index("Events:") :]
        assert "PodCrashLooping" in events and "Running" in events


def test_an_unschedulable_gang_says_why_on_the_job(api: KubeApi, controller: JobController) -> None:
    """The scheduler's reason (here: a resource no node offers) reaches the Job's state and a
    PodGroupPending Warning, as Volcano relays it, instead of a bare Pending."""
    api.create(kinds.JOB, job("paddle", replicas=1), NAMESPACE)
    wait_for(lambda: api.list(kinds.PODGROUP, NAMESPACE)["items"], 10, "the PodGroup")
    why = "1/1 tasks in gang unschedulable: no schedulable node offers ephemeral-storage, which the gang asks for"
    condition = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": why}
    api.patch(
        kinds.PODGROUP,
        "paddle",
        {"status": {"phase": "Pending", "conditions": [condition]}},
        NAMESPACE,
        subresource="status",
    )
    wait_for(lambda: status_of(api, "paddle").get("state", {}).get("message") == why, 10, "the reason on the job")
    assert status_of(api, "paddle")["state"]["reason"] == "Unschedulable"
    [event] = wait_for(
        lambda: [e for e in events_of(api, "paddle") if e["reason"] == "PodGroupPending"], 10, "the Warning"
    )
    assert (
        event["type"] == "Warning" and event["message"] == f"PodGroup {NAMESPACE}:paddle unschedulable, reason: {why}"
    )


@pytest.mark.parametrize("iteration", ["all"])
def test_a_dependent_task_is_admitted_once_its_dependency_runs(
    api: KubeApi, controller: JobController, iteration: str
) -> None:
    """Volcano's task-start-dependency/mpi.yaml shape: the master waits for the workers. The
    PodGroup first demands the workers only, then the master too."""
    manifest = job(
        "deps",
        tasks=[task("master", 1, dependsOn={"name": ["worker"], "iteration": iteration}), task("worker", 2)],
    )
    api.create(kinds.JOB, manifest, NAMESPACE)
    workers = wait_for(lambda: len(pods_of(api, "deps")) == 2 and pods_of(api, "deps"), 10, "the workers")
    group = api.get(kinds.PODGROUP, "deps", NAMESPACE)["spec"]
    assert group["minMember"] == 2 and group["minTaskMember"] == {"master": 0, "worker": 2}
    for pod in workers:
        kubelet_runs(api, pod, "Running")
    wait_for(lambda: len(pods_of(api, "deps")) == 3, 10, "the master once the workers are ready")
    group = api.get(kinds.PODGROUP, "deps", NAMESPACE)["spec"]
    assert group["minMember"] == 3 and group["minTaskMember"] == {"master": 1, "worker": 2}


def test_bad_input_is_refused_at_admission_and_the_controller_carries_on(
    api: KubeApi, controller: JobController
) -> None:
    """JobFlow cycles, unknown plugins, bad cron, negative or > int32 replicas: each refused
    with a message naming the field; nothing is stored and a good Job still runs."""
    from lahar.client.errors import Invalid

    cycle = {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobFlow",
        "metadata": {"name": "loop"},
        "spec": {
            "flows": [{"name": "a", "dependsOn": {"targets": ["b"]}}, {"name": "b", "dependsOn": {"targets": ["a"]}}]
        },
    }
    bad_cron = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "CronJob",
        "metadata": {"name": "never"},
        "spec": {"schedule": "61 * * * *", "jobTemplate": {"spec": job("x")["spec"]}},
    }
    negative, huge, plugin = job("negative"), job("huge"), job("plugin", plugins={"paddle": []})
    negative["spec"]["tasks"][0]["replicas"] = -1
    huge["spec"]["tasks"][0]["replicas"] = 2**31
    for kind, obj, message in (
        (kinds.JOBFLOW, cycle, "dependency cycle: a -> b -> a"),
        (kinds.CRONJOB, bad_cron, "minute: 61 is out of range 0-59"),
        (kinds.JOB, negative, "spec.tasks[0].replicas"),
        (kinds.JOB, huge, "spec.tasks[0].replicas"),
        (kinds.JOB, plugin, 'unsupported job plugin "paddle"'),
    ):
        with pytest.raises(Invalid) as refused:
            api.create(kind, obj, NAMESPACE)
        assert message in str(refused.value), str(refused.value)
    assert api.list(kinds.JOB, NAMESPACE)["items"] == []
    api.create(kinds.JOB, job("good", replicas=1), NAMESPACE)
    wait_for(lambda: len(pods_of(api, "good")) == 1, 10, "the good job's pod")
