"""Bounds on what admission accepts (issue 15): integer fields hold what their Go type holds,
quantities fit int64 in their resource's base unit, a Job asks for a bounded number of pods, and
a Pod's quantities are stored in canonical form, as kube-apiserver stores them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lahar.api import admission
from lahar.api.errors import ValidationError
from lahar.api.kinds import JOB, LEASE, POD, PODGROUP, QUEUE, Kind

POD_OBJ: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]},
}
JOB_OBJ: dict[str, Any] = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "j", "namespace": "default"},
    "spec": {
        "tasks": [
            {"name": "t", "replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
        ]
    },
}


def admit(kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
    defaulted = admission.apply_defaults(kind, obj)
    admission.validate(kind, defaulted)
    return defaulted


def refusal(kind: Kind, obj: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        admit(kind, obj)
    return str(caught.value)


def with_path(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node: Any = result
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[last] = value
    return result


@pytest.mark.parametrize("replicas", [2**63 - 1, 2**31, -(2**40)])
def test_int32_replicas_out_of_range_are_refused(replicas: int) -> None:
    message = refusal(JOB, with_path(JOB_OBJ, "spec.tasks.0.replicas", replicas))
    assert "spec.tasks[0].replicas" in message


def test_job_total_replicas_are_bounded() -> None:
    message = refusal(JOB, with_path(JOB_OBJ, "spec.tasks.0.replicas", 2**31 - 1))
    assert "must be at most 100000" in message
    admit(JOB, with_path(JOB_OBJ, "spec.tasks.0.replicas", 100_000))


@pytest.mark.parametrize(
    ("kind", "obj", "path"),
    [
        (PODGROUP, {"metadata": {"name": "g", "namespace": "default"}}, "spec.minMember"),
        (QUEUE, {"metadata": {"name": "q"}}, "spec.weight"),
        (QUEUE, {"metadata": {"name": "q"}}, "spec.priority"),
        (LEASE, {"metadata": {"name": "l", "namespace": "default"}}, "spec.leaseDurationSeconds"),
        (POD, POD_OBJ, "spec.priority"),
    ],
)
def test_int32_fields_refuse_int64_values(kind: Kind, obj: dict[str, Any], path: str) -> None:
    assert path in refusal(kind, with_path(obj, path, 2**31))


def test_int64_fields_take_int64_values_only() -> None:
    admit(POD, with_path(POD_OBJ, "spec.activeDeadlineSeconds", 2**40))
    assert "spec.activeDeadlineSeconds" in refusal(POD, with_path(POD_OBJ, "spec.activeDeadlineSeconds", 2**63))


@pytest.mark.parametrize("cpu", ["1e400", "1e19", 1e300, "9e18", "-1e400"])
def test_quantities_past_int64_are_refused(cpu: Any) -> None:
    message = refusal(POD, with_path(POD_OBJ, "spec.containers.0.resources.requests.cpu", cpu))
    assert "spec.containers[0].resources.requests.cpu" in message


@pytest.mark.parametrize("cpu", ["NaN", "Infinity", "inf", "nan"])
def test_quantity_words_are_refused(cpu: str) -> None:
    assert "invalid quantity" in refusal(POD, with_path(POD_OBJ, "spec.containers.0.resources.requests.cpu", cpu))


def test_largest_memory_is_accepted() -> None:
    admit(POD, with_path(POD_OBJ, "spec.containers.0.resources.requests.memory", "8Ei"))  # capped at int64, as Go


@pytest.mark.parametrize(
    ("given", "stored"), [("0.5", "500m"), ("1024Mi", "1Gi"), (2, "2"), ("1e3", "1e3"), ("1000m", "1")]
)
def test_pod_quantities_are_stored_canonical(given: Any, stored: str) -> None:
    pod = admit(POD, with_path(POD_OBJ, "spec.containers.0.resources", {"limits": {"cpu": given}}))
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["cpu"] == stored


def test_job_template_quantities_are_kept_as_written() -> None:
    """A Job is a custom resource: kube-apiserver stores it as sent."""
    job = admit(
        JOB, with_path(JOB_OBJ, "spec.tasks.0.template.spec.containers.0.resources", {"limits": {"cpu": "0.5"}})
    )
    assert job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "0.5"
