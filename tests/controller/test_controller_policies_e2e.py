"""Policies, plugins and clean-up through the real controller loop, against the embedded API
server, with the fake kubelet of tests/controller/fake_kubelet.py driving the pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.client.errors import KubeError
from lahar.controller.controller import JobController
from tests.controller.fake_kubelet import (
    NAMESPACE,
    events_of,
    job,
    kubelet_finishes_deletions,
    kubelet_runs,
    kubelet_runs_all,
    phase_of,
    pod_named,
    pods_of,
    status_of,
    task,
)
from tests.support import wait_for


def wait_for_pods(api: KubeApi, name: str, count: int) -> list[dict[str, Any]]:
    return wait_for(lambda: len(pods_of(api, name)) == count and pods_of(api, name), 10, f"{count} pods of {name}")


def wait_for_phase(api: KubeApi, name: str, phase: str, timeout: float = 10.0) -> dict[str, Any]:
    wait_for(lambda: phase_of(api, name) == phase, timeout, f"{name} to be {phase}")
    return status_of(api, name)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", []) if "value" in e}


def test_task_completed_completes_the_job(api: KubeApi, controller: JobController) -> None:
    api.create(
        kinds.JOB,
        job(
            "mw",
            tasks=[
                task("master", 1, policies=[{"event": "TaskCompleted", "action": "CompleteJob"}]),
                task("worker", 2),
            ],
        ),
        NAMESPACE,
    )
    wait_for_pods(api, "mw", 3)
    kubelet_runs_all(api, "mw", "Running")
    wait_for_phase(api, "mw", "Running")

    kubelet_runs(api, pod_named(api, "mw", "mw-master-0"), "Succeeded")
    wait_for_phase(api, "mw", "Completing")
    # The workers are still running: Completing stops them, then the job is Completed.
    wait_for(lambda: kubelet_finishes_deletions(api, "mw") == 2, 10, "both workers to be stopped")
    status = wait_for_phase(api, "mw", "Completed")
    assert status["state"]["reason"] == "CompleteJob"
    assert [p["metadata"]["name"] for p in pods_of(api, "mw")] == ["mw-master-0"]


def test_min_success_completes_the_job_early(api: KubeApi, controller: JobController) -> None:
    api.create(kinds.JOB, job("early", replicas=3, minAvailable=2, minSuccess=2), NAMESPACE)
    pods = wait_for_pods(api, "early", 3)
    kubelet_runs_all(api, "early", "Running")
    wait_for_phase(api, "early", "Running")
    for pod in pods[:2]:
        kubelet_runs(api, pod, "Succeeded")
    status = wait_for_phase(api, "early", "Completed")
    assert status["state"]["reason"] == "MinSuccess"
    # The third pod, still running, is stopped: a finished job keeps no pod running.
    wait_for(lambda: kubelet_finishes_deletions(api, "early") == 1, 10, "the last pod to be stopped")
    wait_for(lambda: len(pods_of(api, "early")) == 2, 10, "only the succeeded pods")


def test_ttl_deletes_the_finished_job_and_what_it_owns(api: KubeApi, controller: JobController) -> None:
    api.create(kinds.JOB, job("brief", replicas=1, ttlSecondsAfterFinished=1, plugins={"svc": []}), NAMESPACE)
    wait_for_pods(api, "brief", 1)
    kubelet_runs_all(api, "brief", "Succeeded")
    # Completed, then deleted a second later: the Event outlives the Job, a polled phase may not.
    wait_for(lambda: "Completed" in {e["reason"] for e in events_of(api, "brief")}, 10, "the job to complete")

    wait_for(lambda: not api.list(kinds.JOB, NAMESPACE)["items"], 10, "the job to be deleted")
    # The API's garbage collector takes everything the job owned.
    assert pods_of(api, "brief") == []
    for kind in (kinds.PODGROUP, kinds.SERVICE, kinds.CONFIGMAP):
        assert [
            o["metadata"]["name"]
            for o in api.list(kind, NAMESPACE)["items"]
            if o["metadata"]["name"].startswith("brief")
        ] == [], kind.plural


def test_svc_and_env_plugins_give_hosts_and_indexes(api: KubeApi, controller: JobController) -> None:
    api.create(
        kinds.JOB,
        job("mpi", tasks=[task("launcher", 1), task("mpi-worker", 2)], plugins={"svc": [], "env": []}),
        NAMESPACE,
    )
    pods = {p["metadata"]["name"]: p for p in wait_for_pods(api, "mpi", 3)}

    service = api.get(kinds.SERVICE, "mpi", NAMESPACE)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"volcano.sh/job-name": "mpi", "volcano.sh/job-namespace": NAMESPACE}
    hosts = api.get(kinds.CONFIGMAP, "mpi-svc", NAMESPACE)["data"]
    assert hosts["mpi_worker.host"] == "mpi-mpi-worker-0.mpi\nmpi-mpi-worker-1.mpi"
    assert hosts["launcher.host"] == "mpi-launcher-0.mpi"
    assert hosts["VC_MPI_WORKER_HOSTS"] == "mpi-mpi-worker-0.mpi,mpi-mpi-worker-1.mpi"
    assert hosts["VC_MPI_WORKER_NUM"] == "2"
    assert hosts["VC_LAUNCHER_HOSTS"] == "mpi-launcher-0.mpi" and hosts["VC_LAUNCHER_NUM"] == "1"
    assert api.get(kinds.NETWORK_POLICY, "mpi", NAMESPACE)["spec"]["policyTypes"] == ["Ingress"]

    worker = pods["mpi-mpi-worker-1"]
    env = {e["name"]: e for e in worker["spec"]["containers"][0]["env"]}
    for key in ("VC_MPI_WORKER_HOSTS", "VC_MPI_WORKER_NUM", "VC_LAUNCHER_HOSTS", "VC_LAUNCHER_NUM"):
        assert env[key]["valueFrom"]["configMapKeyRef"] == {"name": "mpi-svc", "key": key}
    env = env_of(worker)
    assert env["VC_TASK_INDEX"] == env["VK_TASK_INDEX"] == "1"
    assert env_of(pods["mpi-mpi-worker-0"])["VC_TASK_INDEX"] == "0"
    assert env_of(pods["mpi-launcher-0"])["VK_TASK_INDEX"] == "0"
    assert worker["spec"]["hostname"] == "mpi-mpi-worker-1" and worker["spec"]["subdomain"] == "mpi"


def test_pod_pending_too_long_restarts_the_pod_until_max_retry(api: KubeApi, controller: JobController) -> None:
    # No scheduler binds the pod: it stays Pending past the policy's timeout, twice.
    api.create(
        kinds.JOB,
        job(
            "stuck",
            tasks=[task("worker", 1, policies=[{"event": "PodPending", "timeout": "1s", "action": "RestartPod"}])],
            maxRetry=1,
        ),
        NAMESPACE,
    )
    first = wait_for_pods(api, "stuck", 1)[0]["metadata"]["uid"]
    wait_for(lambda: status_of(api, "stuck").get("retryCount") == 1, 10, "the first restart")
    wait_for(lambda: any(p["metadata"]["uid"] != first for p in pods_of(api, "stuck")), 10, "a new pod")
    status = wait_for_phase(api, "stuck", "Failed")
    assert status["retryCount"] == 1 and status["state"]["reason"] == "MaxRetryExceeded"
    assert "PodPending on pod stuck-worker-0" in status["state"]["message"]
    assert [c["status"] for c in status["conditions"]] == ["Pending", "Restarting", "Pending", "Failed"]


def test_exit_code_policy_picks_the_action(api: KubeApi, controller: JobController) -> None:
    api.create(
        kinds.JOB,
        job(
            "coded",
            tasks=[task("worker", 2, policies=[{"exitCode": 3, "action": "AbortJob"}])],
            policies=[{"event": "PodFailed", "action": "RestartJob"}],
        ),
        NAMESPACE,
    )
    pods = wait_for_pods(api, "coded", 2)
    kubelet_runs_all(api, "coded", "Running")
    wait_for_phase(api, "coded", "Running")
    kubelet_runs(api, pods[0], "Failed", exit_code=3)  # exit code 3 wins over the job's PodFailed policy
    wait_for_phase(api, "coded", "Aborting")
    wait_for(lambda: kubelet_finishes_deletions(api, "coded") == 1, 10, "the other pod to be stopped")
    status = wait_for_phase(api, "coded", "Aborted")
    assert status["retryCount"] == 0 and status["state"]["message"] == "PodFailed on pod coded-worker-0 (exit code 3)"
    # The Event follows the status write that it announces.
    wait_for(lambda: {"Aborting", "Aborted"} <= {e["reason"] for e in events_of(api, "coded")}, 10, "the events")


class FlakyPodDeletes(KubeApi):
    """The API, except that the first `failures` pod deletions fail as an overloaded server's would."""

    def __init__(self, kubeconfig: Path, failures: int) -> None:
        super().__init__(new_api_client(str(kubeconfig)))
        self.failures = failures
        self.pod_deletes: list[str] = []

    def delete(self, kind: Any, name: str, namespace: str | None = None, **options: Any) -> Any:
        if kind is kinds.POD:
            self.pod_deletes.append(name)
            if self.failures > 0:
                self.failures -= 1
                raise KubeError(500, "InternalError", "the server is overloaded")
        return super().delete(kind, name, namespace, **options)


def test_a_failed_pod_deletion_is_issued_again(api: KubeApi, kubeconfig: Path) -> None:
    flaky = FlakyPodDeletes(kubeconfig, failures=1)
    controller = JobController(flaky, admission_required=False, resync_seconds=2.0)
    controller.start()
    try:
        api.create(
            kinds.JOB,
            job("retry", tasks=[task("worker", 2, policies=[{"event": "PodFailed", "action": "RestartPod"}])]),
            NAMESPACE,
        )
        pods = wait_for_pods(api, "retry", 2)
        kubelet_runs_all(api, "retry", "Running")
        wait_for_phase(api, "retry", "Running")
        failed_uid = pods[0]["metadata"]["uid"]
        kubelet_runs(api, pods[0], "Failed", exit_code=1)

        def current_uid() -> str | None:
            return (pod_named(api, "retry", "retry-worker-0") or {}).get("metadata", {}).get("uid")

        wait_for(lambda: current_uid() not in (None, failed_uid), 10, "the failed pod to be replaced")
        assert flaky.pod_deletes == ["retry-worker-0", "retry-worker-0"]  # refused once, then issued again
        assert status_of(api, "retry")["retryCount"] == 1  # one restart, counted once
        wait_for(lambda: "restartingPods" not in status_of(api, "retry"), 10, "the restart's record to be cleared")
        assert pod_named(api, "retry", "retry-worker-1")["metadata"]["uid"] == pods[1]["metadata"]["uid"]
        assert "FailedPodWrites" in {e["reason"] for e in events_of(api, "retry")}
        errors = controller.metrics.registry.get_sample_value(
            "lahar_controller_reconcile_errors_total", {"kind": "job"}
        )
        assert errors is not None and errors >= 1
    finally:
        controller.stop()
