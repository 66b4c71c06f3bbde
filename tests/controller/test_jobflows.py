"""Volcano's JobFlow and JobTemplate: admission (DAG checks), the pure decision
(controller/jobflows.py: flow_step) and the controller running a DAG through the API."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.api import admission, kinds
from lahar.api.errors import ValidationError
from lahar.client.api import KubeApi
from lahar.controller.controller import JobController
from lahar.controller.jobflows import flow_step, merge_spec
from tests.controller.fake_kubelet import NAMESPACE, kubelet_runs_all, task
from tests.support import wait_for


def jobflow(flows: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobFlow",
        "metadata": {"name": "flow", "namespace": NAMESPACE, "uid": "flow-uid"},
        "spec": {"flows": flows, **spec},
    }


def template(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"minAvailable": replicas, "schedulerName": "lahar", "tasks": [task("t", replicas)]},
    }


def made(name: str, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"state": {"phase": phase}},
    }


DIAMOND = [
    {"name": "a"},
    {"name": "b", "dependsOn": {"targets": ["a"]}},
    {"name": "c", "dependsOn": {"targets": ["a"]}, "patch": {"spec": {"tasks": [{"name": "t", "replicas": 3}]}}},
    {"name": "d", "dependsOn": {"targets": ["b", "c"]}},
]
TEMPLATES = {name: template(name) for name in "abcd"}


def test_admission_refuses_cycles_unknown_targets_and_duplicates() -> None:
    for flows, message in (
        (
            [{"name": "a", "dependsOn": {"targets": ["b"]}}, {"name": "b", "dependsOn": {"targets": ["a"]}}],
            "dependency cycle: a -> b -> a",
        ),
        ([{"name": "a", "dependsOn": {"targets": ["zz"]}}], 'unknown flow "zz"'),
        ([{"name": "a"}, {"name": "a"}], 'duplicate flow "a"'),
        ([{"name": "a", "dependsOn": {"targets": ["a"]}}], "a flow cannot depend on itself"),
    ):
        with pytest.raises(ValidationError, match=message):
            admission.validate(kinds.JOBFLOW, admission.apply_defaults(kinds.JOBFLOW, jobflow(flows)))
    bad_template = template("t")
    bad_template["spec"]["tasks"][0]["replicas"] = -1
    with pytest.raises(ValidationError, match=r"spec.tasks\[0\].replicas"):
        admission.validate(kinds.JOBTEMPLATE, admission.apply_defaults(kinds.JOBTEMPLATE, bad_template))


def test_the_dag_runs_in_order_with_patches() -> None:
    first = flow_step(jobflow(DIAMOND), [], TEMPLATES)
    assert [j["metadata"]["name"] for j in first.create] == ["flow-a"]
    assert first.create[0]["metadata"]["labels"] == {
        "volcano.sh/createdByJobTemplate": "default.a",
        "volcano.sh/createdByJobFlow": "default.flow",
    }
    assert first.status["state"] == {"phase": "Pending"}
    second = flow_step(jobflow(DIAMOND), [made("flow-a", "Completed")], TEMPLATES)
    assert [j["metadata"]["name"] for j in second.create] == ["flow-b", "flow-c"]
    assert second.create[1]["spec"]["tasks"][0]["replicas"] == 3  # c's patch
    assert second.status["state"] == {"phase": "Running"}
    running_c = [made("flow-a", "Completed"), made("flow-b", "Completed"), made("flow-c", "Running")]
    assert flow_step(jobflow(DIAMOND), running_c, TEMPLATES).create == []  # d waits for c too
    all_done = [made(f"flow-{n}", "Completed") for n in "abcd"]
    done = flow_step(jobflow(DIAMOND, jobRetainPolicy="delete"), all_done, TEMPLATES)
    assert done.status["state"] == {"phase": "Succeed"} and done.delete == ["flow-a", "flow-b", "flow-c", "flow-d"]
    assert flow_step(jobflow(DIAMOND), all_done, TEMPLATES).delete == []  # retain
    failed = flow_step(jobflow(DIAMOND), [made("flow-a", "Failed")], TEMPLATES)
    assert failed.status["state"] == {"phase": "Failed"} and failed.status["failedJobs"] == ["flow-a"]
    held = flow_step(jobflow(DIAMOND), [], {})
    assert held.create == [] and held.missing_templates == ["a"]


def test_merge_spec_patches_maps_and_tasks_by_name() -> None:
    base = {"queue": "q", "tasks": [{"name": "t", "replicas": 1, "template": {"x": 1}}]}
    patched = merge_spec(base, {"queue": "r", "tasks": [{"name": "t", "replicas": 2}, {"name": "u", "replicas": 1}]})
    assert patched == {
        "queue": "r",
        "tasks": [{"name": "t", "replicas": 2, "template": {"x": 1}}, {"name": "u", "replicas": 1}],
    }
    assert base["tasks"][0]["replicas"] == 1  # not changed in place


def phase_of(api: KubeApi, name: str) -> str | None:
    job = next((j for j in api.list(kinds.JOB, NAMESPACE)["items"] if j["metadata"]["name"] == name), None)
    return None if job is None else ((job.get("status") or {}).get("state") or {}).get("phase")


def test_the_controller_runs_a_flow_job_after_its_dependency_completes(api: KubeApi, controller: JobController) -> None:
    for name in ("first", "second"):
        api.create(kinds.JOBTEMPLATE, template(name), NAMESPACE)
    api.create(
        kinds.JOBFLOW, jobflow([{"name": "first"}, {"name": "second", "dependsOn": {"targets": ["first"]}}]), NAMESPACE
    )
    wait_for(lambda: phase_of(api, "flow-first") == "Pending", 10, "the first flow's Job")
    assert [j["metadata"]["name"] for j in api.list(kinds.JOB, NAMESPACE)["items"]] == ["flow-first"]
    wait_for(lambda: kubelet_runs_all(api, "flow-first", "Succeeded"), 10, "the first job's pod")
    wait_for(lambda: phase_of(api, "flow-first") == "Completed", 10, "the first job to complete")
    wait_for(lambda: phase_of(api, "flow-second") == "Pending", 10, "the second flow's Job")
    status = wait_for(
        lambda: (
            (api.get(kinds.JOBFLOW, "flow", NAMESPACE).get("status") or {}).get("completedJobs") == ["flow-first"]
            and api.get(kinds.JOBFLOW, "flow", NAMESPACE)["status"]
        ),
        10,
        "the flow's status",
    )
    assert status["state"] == {"phase": "Running"} and status["pendingJobs"] == ["flow-second"]
    made_from = wait_for(
        lambda: (api.get(kinds.JOBTEMPLATE, "first", NAMESPACE).get("status") or {}).get("jobDependsOnList"),
        10,
        "the template's status",
    )
    assert made_from == ["flow-first"]
