"""Admission on the embedded API server: invalid Volcano Jobs, Queues and PodGroups are refused
with a Kubernetes Status 422 whose message names the field, on create and on update, and nothing
is stored; a valid Volcano manifest is stored with Volcano's defaults."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

Server = Any  # conftest.ServerProcess (conftest is not importable under --import-mode=importlib)

BATCH = ("batch.volcano.sh", "v1alpha1")
SCHED = ("scheduling.volcano.sh", "v1beta1")
MPI_JOB = Path(__file__).resolve().parents[2] / "examples" / "mpi-job.yaml"


@pytest.fixture
def apiserver(module_apiserver: Server) -> Server:
    return module_apiserver


@pytest.fixture
def custom(module_k8s: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(module_k8s)


@pytest.fixture
def core(module_k8s: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(module_k8s)


def task(name: str, replicas: int = 1, cpu: Any = "500m") -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "busybox:1", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
                ],
            }
        },
    }


def job(name: str = "j", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"minAvailable": 1, "tasks": [task("work")]}
    body.update(spec)
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": name}, "spec": body}


def refused(call: Callable[[], Any], *fields: str) -> dict[str, Any]:
    """Assert a 422 Invalid Status naming every one of `fields` in its message and its causes."""
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 422, caught.value.body
    status = json.loads(caught.value.body)
    assert status["kind"] == "Status" and status["apiVersion"] == "v1"
    assert status["status"] == "Failure" and status["code"] == 422 and status["reason"] == "Invalid"
    causes = [c.get("field", "") for c in (status.get("details") or {}).get("causes") or []]
    for field in fields:
        assert field in status["message"], (field, status["message"])
        assert any(field in cause for cause in causes), (field, causes)
    return status


def no_jobs(custom: client.CustomObjectsApi, ns: str) -> None:
    assert custom.list_namespaced_custom_object(*BATCH, ns, "jobs")["items"] == []


# -- Jobs ------------------------------------------------------------------------------------------------


def test_job_min_available_above_total_replicas(custom: client.CustomObjectsApi, ns: str) -> None:
    body = job(minAvailable=4, tasks=[task("a", 1), task("b", 2)])
    status = refused(lambda: custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body), "spec.minAvailable")
    assert "Job.batch.volcano.sh" in status["message"] and '"j"' in status["message"]
    no_jobs(custom, ns)


def test_job_min_available_equal_to_total_is_fine(custom: client.CustomObjectsApi, ns: str) -> None:
    body = job(minAvailable=3, tasks=[task("a", 1), task("b", 2)])
    assert custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body)["spec"]["minAvailable"] == 3


def test_job_duplicate_task_name(custom: client.CustomObjectsApi, ns: str) -> None:
    body = job(tasks=[task("worker"), task("worker")])
    refused(lambda: custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body), "spec.tasks[1].name")
    no_jobs(custom, ns)


def test_job_duplicate_policy_event(custom: client.CustomObjectsApi, ns: str) -> None:
    body = job(
        policies=[{"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodEvicted", "action": "AbortJob"}]
    )
    refused(lambda: custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body), "spec.policies[1]")
    no_jobs(custom, ns)


def test_task_duplicate_policy_event(custom: client.CustomObjectsApi, ns: str) -> None:
    worker = task("worker")
    worker["policies"] = [
        {"event": "TaskCompleted", "action": "CompleteJob"},
        {"events": ["PodFailed", "TaskCompleted"], "action": "AbortJob"},
    ]
    body = job(tasks=[worker])
    refused(lambda: custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body), "spec.tasks[0].policies[1]")
    no_jobs(custom, ns)


@pytest.mark.parametrize("quantity", ["1.5.5", "lots", "-1", "5Qi"])
def test_job_bad_quantity(custom: client.CustomObjectsApi, ns: str, quantity: str) -> None:
    """Malformed and negative requests are both refused (Volcano validates the pod template as
    Kubernetes does: a resource quantity must be well-formed and >= 0)."""
    body = job(tasks=[task("work", cpu=quantity)])
    refused(
        lambda: custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body),
        "spec.tasks[0].template.spec.containers[0].resources.requests",
    )
    no_jobs(custom, ns)


def test_job_lists_every_error_at_once(custom: client.CustomObjectsApi, ns: str) -> None:
    body = job(minAvailable=9, tasks=[task("w", cpu="bad"), task("w")])
    refused(
        lambda: custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body),
        "spec.minAvailable",
        "spec.tasks[1].name",
        "spec.tasks[0].template",
    )


def test_job_unknown_policy_action(custom: client.CustomObjectsApi, ns: str) -> None:
    body = job(policies=[{"event": "PodEvicted", "action": "Explode"}])
    refused(lambda: custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body), "spec.policies[0].action")


def test_invalid_job_update_is_refused_and_nothing_changes(custom: client.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job("u", tasks=[task("a", 2)]))
    too_many = copy.deepcopy(created)
    too_many["spec"]["minAvailable"] = 5
    refused(lambda: custom.replace_namespaced_custom_object(*BATCH, ns, "jobs", "u", too_many), "spec.minAvailable")
    refused(
        lambda: custom.patch_namespaced_custom_object(*BATCH, ns, "jobs", "u", {"spec": {"minAvailable": 5}}),
        "spec.minAvailable",
    )
    refused(
        lambda: custom.patch_namespaced_custom_object(*BATCH, ns, "jobs", "u", {"spec": {"maxRetry": -1}}),
        "spec.maxRetry",
    )
    current = custom.get_namespaced_custom_object(*BATCH, ns, "jobs", "u")
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert current["spec"] == created["spec"]


def test_job_update_with_duplicate_task_name_is_refused(custom: client.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job("d", tasks=[task("a"), task("b")]))
    renamed = copy.deepcopy(created)
    renamed["spec"]["tasks"][1]["name"] = "a"
    status = refused(lambda: custom.replace_namespaced_custom_object(*BATCH, ns, "jobs", "d", renamed), "spec.tasks")
    assert "spec.tasks[1].name" in status["message"] or "spec.tasks" in status["message"]
    assert custom.get_namespaced_custom_object(*BATCH, ns, "jobs", "d")["spec"]["tasks"][1]["name"] == "b"


def test_dry_run_of_invalid_job_is_refused_too(custom: client.CustomObjectsApi, ns: str) -> None:
    body = job(minAvailable=7)
    refused(
        lambda: custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body, dry_run="All"), "spec.minAvailable"
    )


# -- Queues and PodGroups ------------------------------------------------------------------------------------


def test_queue_weight_zero(custom: client.CustomObjectsApi) -> None:
    name = f"q-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 0},
    }
    refused(lambda: custom.create_cluster_custom_object(*SCHED, "queues", body), "spec.weight")
    with pytest.raises(ApiException) as caught:
        custom.get_cluster_custom_object(*SCHED, "queues", name)
    assert caught.value.status == 404


def test_queue_update_to_weight_zero(custom: client.CustomObjectsApi) -> None:
    name = f"q-{uuid.uuid4().hex[:6]}"
    created = custom.create_cluster_custom_object(*SCHED, "queues", {"metadata": {"name": name}, "spec": {"weight": 2}})
    refused(lambda: custom.patch_cluster_custom_object(*SCHED, "queues", name, {"spec": {"weight": 0}}), "spec.weight")
    body = copy.deepcopy(created)
    body["spec"]["weight"] = 0
    refused(lambda: custom.replace_cluster_custom_object(*SCHED, "queues", name, body), "spec.weight")
    assert custom.get_cluster_custom_object(*SCHED, "queues", name)["spec"]["weight"] == 2


def test_queue_defaults(custom: client.CustomObjectsApi) -> None:
    name = f"q-{uuid.uuid4().hex[:6]}"
    created = custom.create_cluster_custom_object(*SCHED, "queues", {"metadata": {"name": name}})
    assert created["spec"]["weight"] == 1
    assert created["spec"]["reclaimable"] is True


def queue_body(name: str, parent: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"parent": parent} if parent else {}}


def test_queue_tree_loop_across_queues_is_refused_on_create_and_update(custom: client.CustomObjectsApi) -> None:
    """a <- b <- c is a chain; a write that makes it a loop is refused naming the loop, and the
    stored queues stay as they were."""
    a, b, c = (f"q{letter}-{uuid.uuid4().hex[:6]}" for letter in "abc")
    custom.create_cluster_custom_object(*SCHED, "queues", queue_body(a))
    custom.create_cluster_custom_object(*SCHED, "queues", queue_body(b, a))
    custom.create_cluster_custom_object(*SCHED, "queues", queue_body(c, b))
    status = refused(
        lambda: custom.patch_cluster_custom_object(*SCHED, "queues", a, {"spec": {"parent": c}}), "spec.parent"
    )
    assert f"the queue tree would loop: {a} -> {c} -> {b} -> {a}" in status["message"]
    current = custom.get_cluster_custom_object(*SCHED, "queues", a)
    body = copy.deepcopy(current)
    body["spec"]["parent"] = b
    refused(lambda: custom.replace_cluster_custom_object(*SCHED, "queues", a, body), "spec.parent")
    assert custom.get_cluster_custom_object(*SCHED, "queues", a) == current
    # Reparenting without a loop is fine, and a new queue under the chain is too.
    custom.patch_cluster_custom_object(*SCHED, "queues", c, {"spec": {"parent": a}})
    custom.create_cluster_custom_object(*SCHED, "queues", queue_body(f"{c}-leaf", c))


def hypernode_body(name: str, *members: str) -> dict[str, Any]:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {
            "tier": 2,
            "members": [{"type": "HyperNode", "selector": {"exactMatch": {"name": m}}} for m in members],
        },
    }


def test_hypernode_loop_across_objects_is_refused_on_create_and_update(custom: client.CustomObjectsApi) -> None:
    topo = ("topology.volcano.sh", "v1alpha1")
    x, y, z = (f"h{letter}-{uuid.uuid4().hex[:6]}" for letter in "xyz")
    custom.create_cluster_custom_object(*topo, "hypernodes", hypernode_body(y, z))
    custom.create_cluster_custom_object(*topo, "hypernodes", hypernode_body(x, y))
    # z does not exist yet; creating it with x as a member closes z -> x -> y -> z.
    status = refused(
        lambda: custom.create_cluster_custom_object(*topo, "hypernodes", hypernode_body(z, x)), "spec.members"
    )
    assert f"the HyperNode tree would loop: {z} -> {x} -> {y} -> {z}" in status["message"]
    with pytest.raises(ApiException) as caught:
        custom.get_cluster_custom_object(*topo, "hypernodes", z)
    assert caught.value.status == 404
    before = custom.get_cluster_custom_object(*topo, "hypernodes", y)
    refused(
        lambda: custom.replace_cluster_custom_object(
            *topo, "hypernodes", y, {**hypernode_body(y, z, x), "metadata": before["metadata"]}
        ),
        "spec.members",
    )
    assert custom.get_cluster_custom_object(*topo, "hypernodes", y) == before
    custom.create_cluster_custom_object(*topo, "hypernodes", hypernode_body(z, f"{z}-leaf"))


def test_podgroup_negative_min_member(custom: client.CustomObjectsApi, ns: str) -> None:
    body = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg"},
        "spec": {"minMember": -1},
    }
    refused(lambda: custom.create_namespaced_custom_object(*SCHED, ns, "podgroups", body), "spec.minMember")
    assert custom.list_namespaced_custom_object(*SCHED, ns, "podgroups")["items"] == []


def test_podgroup_update_to_negative_min_member(custom: client.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(
        *SCHED, ns, "podgroups", {"metadata": {"name": "pg"}, "spec": {"minMember": 2}}
    )
    refused(
        lambda: custom.patch_namespaced_custom_object(*SCHED, ns, "podgroups", "pg", {"spec": {"minMember": -3}}),
        "spec.minMember",
    )
    current = custom.get_namespaced_custom_object(*SCHED, ns, "podgroups", "pg")
    assert current["spec"]["minMember"] == 2
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_podgroup_bad_min_resources(custom: client.CustomObjectsApi, ns: str) -> None:
    body = {"metadata": {"name": "pgq"}, "spec": {"minMember": 1, "minResources": {"cpu": "two"}}}
    refused(lambda: custom.create_namespaced_custom_object(*SCHED, ns, "podgroups", body), "spec.minResources")


@pytest.mark.parametrize("quantity", ["1.2.3Gi", "-512Mi"])
def test_pod_bad_quantity(core: client.CoreV1Api, ns: str, quantity: str) -> None:
    """Kubernetes refuses malformed and negative resource quantities alike."""
    body = {
        "metadata": {"name": "badpod"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1", "resources": {"limits": {"memory": quantity}}}]},
    }
    refused(lambda: core.create_namespaced_pod(ns, body), "spec.containers[0].resources.limits")
    assert core.list_namespaced_pod(ns).items == []


# -- a valid Volcano manifest -------------------------------------------------------------------------------------


def mpi_job() -> dict[str, Any]:
    return yaml.safe_load(MPI_JOB.read_text())


def test_example_mpi_job_is_stored_as_written(custom: client.CustomObjectsApi, ns: str) -> None:
    manifest = mpi_job()
    stored = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", manifest)
    assert stored["metadata"]["name"] == "lm-mpi-job"
    assert stored["spec"]["minAvailable"] == 3
    assert stored["spec"]["queue"] == "default"
    assert stored["spec"]["maxRetry"] == 3
    assert [t["name"] for t in stored["spec"]["tasks"]] == ["mpimaster", "mpiworker"]
    assert [t["replicas"] for t in stored["spec"]["tasks"]] == [1, 2]
    assert stored["spec"]["policies"] == manifest["spec"]["policies"]
    assert stored["spec"]["plugins"] == manifest["spec"]["plugins"]
    fetched = custom.get_namespaced_custom_object(*BATCH, ns, "jobs", "lm-mpi-job")
    assert fetched["spec"] == stored["spec"]


def test_example_mpi_job_without_queue_and_max_retry_gets_defaults(custom: client.CustomObjectsApi, ns: str) -> None:
    manifest = mpi_job()
    del manifest["spec"]["queue"], manifest["spec"]["maxRetry"]
    stored = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", manifest)
    assert stored["spec"]["queue"] == "default"
    assert stored["spec"]["maxRetry"] == 3
    fetched = custom.get_namespaced_custom_object(*BATCH, ns, "jobs", "lm-mpi-job")
    assert fetched["spec"]["queue"] == "default" and fetched["spec"]["maxRetry"] == 3


def test_job_without_min_available_defaults_to_total(custom: client.CustomObjectsApi, ns: str) -> None:
    body = job("nomin", tasks=[task("a", 2), task("b", 3)])
    del body["spec"]["minAvailable"]
    stored = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body)
    assert stored["spec"]["minAvailable"] == 5
    assert stored["spec"]["queue"] == "default"
    assert stored["spec"]["maxRetry"] == 3
