"""What the controller's end-to-end tests need besides the embedded API server: a tiny fake
kubelet (bind a pod, report its phase, exit code and restarts, end a deletion's grace period)
and short ways to build and read Jobs. Importable as `tests.controller.fake_kubelet`."""

from __future__ import annotations

from typing import Any

from lahar.api import kinds
from lahar.client.api import KubeApi

NAMESPACE = "default"
NODE = "node-1"


def job(
    name: str,
    replicas: int = 3,
    policies: list[dict[str, Any]] | None = None,
    tasks: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Volcano Job: one task "worker" of `replicas` pods unless `tasks` are given."""
    tasks = tasks or [task("worker", replicas)]
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": sum(t["replicas"] for t in tasks),
            "schedulerName": "lahar",
            "policies": policies or [],
            "tasks": tasks,
            **spec,
        },
    }


def task(name: str, replicas: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
            }
        },
        **extra,
    }


def pods_of(api: KubeApi, name: str) -> list[dict[str, Any]]:
    return api.list(kinds.POD, NAMESPACE, label_selector=f"volcano.sh/job-name={name}")["items"]


def pod_named(api: KubeApi, job_name: str, pod_name: str) -> dict[str, Any] | None:
    return next((p for p in pods_of(api, job_name) if p["metadata"]["name"] == pod_name), None)


def status_of(api: KubeApi, name: str) -> dict[str, Any]:
    return api.get(kinds.JOB, name, NAMESPACE).get("status") or {}


def phase_of(api: KubeApi, name: str) -> str:
    return (status_of(api, name).get("state") or {}).get("phase", "")


def events_of(api: KubeApi, name: str) -> list[dict[str, Any]]:
    return api.list(kinds.EVENT, NAMESPACE, field_selector=f"involvedObject.name={name}")["items"]


def kubelet_runs(api: KubeApi, pod: dict[str, Any], phase: str, exit_code: int = 0, restarts: int = 0) -> None:
    """What a kubelet does: bind (the scheduler's part, here), then report the pod's phase;
    Succeeded/Failed with the container's exit code, `restarts` in-place restarts so far."""
    name = pod["metadata"]["name"]
    if not api.get(kinds.POD, name, NAMESPACE)["spec"].get("nodeName"):  # `pod` may be an older copy
        api.bind(NAMESPACE, name, NODE)
    state = {"terminated": {"exitCode": exit_code}} if phase in ("Succeeded", "Failed") else {"running": {}}
    api.patch(
        kinds.POD,
        name,
        {
            "status": {
                "phase": phase,
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": phase == "Running",
                        "restartCount": restarts,
                        "image": "busybox",
                        "imageID": "",
                        "state": state,
                    }
                ],
            }
        },
        NAMESPACE,
        subresource="status",
    )


def kubelet_runs_all(api: KubeApi, job_name: str, phase: str) -> list[dict[str, Any]]:
    pods = pods_of(api, job_name)
    for pod in pods:
        kubelet_runs(api, pod, phase)
    return pods


def kubelet_finishes_deletions(api: KubeApi, job_name: str) -> int:
    """End the grace period of the job's terminating pods (the containers stopped); how many."""
    terminating = [p for p in pods_of(api, job_name) if p["metadata"].get("deletionTimestamp")]
    for pod in terminating:
        api.delete(kinds.POD, pod["metadata"]["name"], NAMESPACE, grace_period_seconds=0)
    return len(terminating)
