"""Admission entry points: defaults then validation for every kind, metadata rules, and the
promise that no input, however malformed, escapes as anything but a ValidationError."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from lahar.api import admission
from lahar.api.errors import FieldError, ValidationError
from lahar.api.kinds import CONFIGMAP, EVENT, JOB, NAMESPACE, NODE, POD, PODGROUP, QUEUE, SERVICE, Kind


def small_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "minAvailable": 2,
            "plugins": {"svc": [], "env": []},
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "w",
                                    "image": "trainer:1",
                                    "resources": {
                                        "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                        "limits": {"cpu": "2", "nvidia.com/gpu": "1"},
                                    },
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }


SAMPLES: dict[Kind, dict[str, Any]] = {
    JOB: small_job(),
    POD: {
        "metadata": {
            "name": "web-0",
            "namespace": "shop",
            "labels": {"app": "web"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "1", "controller": True}
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}},
                }
            ],
            "tolerations": [
                {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 30}
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    },
    PODGROUP: {
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"minMember": 2, "minTaskMember": {"a": 1}, "minResources": {"cpu": "2"}},
    },
    QUEUE: {
        "metadata": {"name": "research"},
        "spec": {
            "weight": 2,
            "capability": {"cpu": "8"},
            "guarantee": {"resource": {"cpu": "1"}},
            "deserved": {"cpu": "4"},
        },
    },
    NODE: {
        "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
        "spec": {"taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    },
}


def admit(kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    defaulted = admission.apply_defaults(kind, obj)
    admission.validate(kind, defaulted, old)
    return defaulted


def field_errors(kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        admit(kind, obj, old)
    return [(e.field, e.message) for e in caught.value.errors]


@pytest.mark.parametrize("kind", list(SAMPLES), ids=lambda k: k.kind)
def test_samples_are_admitted(kind: Kind) -> None:
    sample = SAMPLES[kind]
    before = copy.deepcopy(sample)
    admitted = admit(kind, sample)
    assert sample == before  # apply_defaults returns a new dict
    assert (admitted["apiVersion"], admitted["kind"]) == (kind.api_version, kind.kind)


def test_defaults_per_kind() -> None:
    assert admit(JOB, SAMPLES[JOB])["spec"]["queue"] == "default"
    assert admit(POD, SAMPLES[POD])["status"]["qosClass"] == "Burstable"
    assert admit(PODGROUP, SAMPLES[PODGROUP])["status"]["phase"] == "Pending"
    assert admit(QUEUE, SAMPLES[QUEUE])["spec"]["reclaimable"] is True
    assert admit(NODE, SAMPLES[NODE])["status"]["allocatable"] == {"cpu": "8", "memory": "32Gi", "pods": "110"}


def test_kinds_without_rules_get_a_copy_and_metadata_checks() -> None:
    config_map = {"metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "b"}}
    admitted = admit(CONFIGMAP, config_map)
    assert admitted == {**config_map, "apiVersion": "v1", "kind": "ConfigMap"}
    assert admitted["data"] is not config_map["data"]
    assert field_errors(CONFIGMAP, {"metadata": {"name": "Settings", "namespace": "default"}})[0][0] == "metadata.name"


def test_validation_error_lists_every_field() -> None:
    job = small_job()
    job["spec"]["tasks"].append(copy.deepcopy(job["spec"]["tasks"][0]))
    job["spec"]["minAvailable"] = 5
    job["metadata"]["labels"] = {"team": "ml research"}
    with pytest.raises(ValidationError) as caught:
        admit(JOB, job)
    error = caught.value
    assert isinstance(error, ValueError)
    assert [(e.field, e.reason) for e in error.errors] == [
        ("metadata.labels.team", "FieldValueInvalid"),
        ("spec.tasks[1].name", "FieldValueDuplicate"),
        ("spec.minAvailable", "FieldValueInvalid"),
    ]
    assert str(error) == "; ".join(f"{e.field}: {e.message}" for e in error.errors)
    assert 'spec.tasks[1].name: duplicate task name "worker"' in str(error)
    assert "spec.minAvailable: minAvailable (5) must not be greater than the total replicas (4)" in str(error)


def test_validation_error_str() -> None:
    error = ValidationError(
        [
            FieldError("spec.tasks[1].name", 'duplicate task name "worker"'),
            FieldError("spec.queue", "is required", "FieldValueRequired"),
        ]
    )
    assert str(error) == 'spec.tasks[1].name: duplicate task name "worker"; spec.queue: is required'
    assert error.errors[1].reason == "FieldValueRequired"


# --- metadata -----------------------------------------------------------------------------------


def with_metadata(kind: Kind, **metadata: Any) -> dict[str, Any]:
    obj = copy.deepcopy(SAMPLES.get(kind, {"metadata": {"name": "x", "namespace": "default"}}))
    obj["metadata"].update(metadata)
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if v is not None}}


METADATA_CASES = [
    (POD, {"name": None}, "metadata.name", "name or generateName is required"),
    (
        POD,
        {"name": "Web_0"},
        "metadata.name",
        'invalid value "Web_0": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '
        "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')",
    ),
    (POD, {"name": "a" * 254}, "metadata.name", f'invalid value "{"a" * 254}": must be no more than 253 characters'),
    (POD, {"namespace": None}, "metadata.namespace", "is required"),
    (
        POD,
        {"namespace": "Shop"},
        "metadata.namespace",
        "invalid value \"Shop\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
        "and must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')",
    ),
    (QUEUE, {"namespace": "default"}, "metadata.namespace", "not allowed on this type"),
    (
        NAMESPACE,
        {"name": "team.a"},
        "metadata.name",
        'invalid value "team.a": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '
        "'-', and must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')",
    ),
    (
        SERVICE,
        {"name": "1st"},
        "metadata.name",
        "invalid value \"1st\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
        "with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name' or 'abc-123')",
    ),
    (EVENT, {"name": "a/b"}, "metadata.name", 'invalid value "a/b": may not contain "/"'),
    (
        POD,
        {"labels": {"app": "web server"}},
        "metadata.labels.app",
        'invalid value "web server": a valid label must be an empty string or consist of alphanumeric characters, '
        "'-', '_' or '.', and must start and end with an alphanumeric character",
    ),
    (
        POD,
        {"labels": {"-app": "web"}},
        "metadata.labels.-app",
        "invalid label key \"-app\": name part must consist of alphanumeric characters, '-', '_' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')",
    ),
    (
        POD,
        {"labels": {"Example.com/app": "web"}},
        "metadata.labels[Example.com/app]",
        'invalid label key "Example.com/app": prefix part a lowercase RFC 1123 subdomain must consist of lower case '
        "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
        "(e.g. 'example.com')",
    ),
    (POD, {"labels": {"app": 1}}, "metadata.labels.app", "expected a string, got integer 1"),
    (POD, {"labels": ["app"]}, "metadata.labels", "expected an object, got array"),
    (
        POD,
        {"annotations": {"note": "x" * 300_000}},
        "metadata.annotations",
        "annotations may not be larger than 262144 bytes (they are 300004)",
    ),
    (
        POD,
        {
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": True},
                {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2", "controller": True},
            ]
        },
        "metadata.ownerReferences",
        "only one reference can have controller set to true",
    ),
    (
        POD,
        {"ownerReferences": [{"apiVersion": "v1", "kind": "A", "name": "a"}]},
        "metadata.ownerReferences[0].uid",
        "is required",
    ),
]


@pytest.mark.parametrize(
    ("kind", "metadata", "field", "message"), METADATA_CASES, ids=[f"{c[0].kind}:{c[2]}" for c in METADATA_CASES]
)
def test_metadata_rules(kind: Kind, metadata: dict[str, Any], field: str, message: str) -> None:
    assert (field, message) in field_errors(kind, with_metadata(kind, **metadata))


def test_generate_name_is_checked_as_a_prefix() -> None:
    admit(POD, with_metadata(POD, name=None, generateName="web-"))
    assert field_errors(POD, with_metadata(POD, name=None, generateName="Web-"))[0][0] == "metadata.generateName"


def test_names_valid_for_one_kind_may_not_be_for_another() -> None:
    admit(CONFIGMAP, {"metadata": {"name": "team.a", "namespace": "default"}})
    admit(NAMESPACE, {"metadata": {"name": "team-a"}})


def test_type_meta_must_match_the_kind() -> None:
    job = small_job()
    job["apiVersion"] = "batch/v1"
    assert field_errors(JOB, job) == [("apiVersion", 'must be "batch.volcano.sh/v1alpha1" for jobs, got "batch/v1"')]


def test_identity_fields_are_immutable_on_update() -> None:
    old = admit(POD, with_metadata(POD, uid="u-1"))
    new = copy.deepcopy(old)
    new["metadata"]["uid"] = "u-2"
    assert field_errors(POD, new, old) == [("metadata.uid", "field is immutable")]


def test_job_update_rules_apply_through_admission() -> None:
    old = admit(JOB, small_job())
    new = copy.deepcopy(old)
    new["spec"]["tasks"][0]["replicas"] = 4
    admit(JOB, new, old)
    new["spec"]["queue"] = "other"
    assert field_errors(JOB, new, old) == [("spec.queue", "field is immutable")]


# --- malformed input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "obj", "expected"),
    [
        (
            JOB,
            {**small_job(), "spec": {**small_job()["spec"], "tasks": {}}},
            ("spec.tasks", "expected an array, got object"),
        ),
        (JOB, {**small_job(), "spec": []}, ("spec", "expected an object, got array")),
        (JOB, {"metadata": {"name": "j", "namespace": "d"}}, ("spec", "is required")),
        (POD, {"metadata": "web"}, ("metadata", 'expected an object, got string "web"')),
        (
            NODE,
            {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "eight"}}},
            ("status.capacity.cpu", 'invalid quantity "eight": missing number'),
        ),
        (
            NODE,
            {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "a", "effect": "Never"}] * 2}},
            (
                "spec.taints[0].effect",
                'unsupported taint effect "Never" (supported: "NoSchedule", "PreferNoSchedule", "NoExecute")',
            ),
        ),
        (
            NODE,
            {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}] * 2}},
            ("spec.taints[1]", 'taints must be unique by key and effect: "a:NoSchedule" is repeated'),
        ),
        (
            PODGROUP,
            {"metadata": {"name": "g", "namespace": "d"}, "spec": {"minResources": {"memory": "1Qi"}}},
            ("spec.minResources.memory", 'invalid quantity "1Qi": unknown suffix "Qi"'),
        ),
    ],
)
def test_malformed_fields_become_field_errors(kind: Kind, obj: dict[str, Any], expected: tuple[str, str]) -> None:
    assert expected in field_errors(kind, obj)


def test_a_non_object_body_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="expected an object, got array"):
        admission.validate(POD, [])  # type: ignore[arg-type]


WRONG_VALUES: list[Any] = ["three", -1, 0, True, None, [], {}, [1], {"x": 1}, 2.5, "", "1e99999"]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from _paths(child, (*path, key))


def _replaced(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    target: Any = result
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return result


@pytest.mark.parametrize("kind", list(SAMPLES), ids=lambda k: k.kind)
def test_any_field_of_any_type_gives_field_errors_never_a_crash(kind: Kind) -> None:
    """Replace every field of a valid sample by values of every JSON type: defaulting and
    validation (create and update) either accept it or raise ValidationError with errors."""
    sample = SAMPLES[kind]
    old = admission.apply_defaults(kind, sample)
    tried = 0
    for path in _paths(sample):
        for value in WRONG_VALUES:
            body = _replaced(sample, path, value)
            before = copy.deepcopy(body)
            for previous in (None, old):
                try:
                    admit(kind, body, previous)
                except ValidationError as error:
                    assert error.errors and all(e.field or e.message for e in error.errors)
            assert body == before
            tried += 1
    assert tried > 100
