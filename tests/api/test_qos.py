"""Lahar QoS classes, DESIGN.md's table row by row, and Kubernetes' QoS class."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.api import qos
from lahar.api.errors import Field
from lahar.api.qos import QoSClass, k8s_qos_class, qos_class

GUARANTEED_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
BURSTABLE_RESOURCES = {"requests": {"cpu": "100m"}}


def make_pod(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    resources: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": resources or {}}], **spec},
    }


# Row LC / LS / BE: lahar.dev/qos-class (label or annotation).
@pytest.mark.parametrize("value", ["LC", "LS", "BE", "SYSTEM"])
def test_lahar_label(value: str) -> None:
    assert qos_class(make_pod(labels={"lahar.dev/qos-class": value}, resources=BURSTABLE_RESOURCES)) == value


@pytest.mark.parametrize("value", ["LC", "LS", "BE", "SYSTEM"])
def test_lahar_annotation(value: str) -> None:
    assert qos_class(make_pod(annotations={"lahar.dev/qos-class": value})) == value


def test_lahar_label_beats_lahar_annotation() -> None:
    pod = make_pod(labels={"lahar.dev/qos-class": "LC"}, annotations={"lahar.dev/qos-class": "BE"})
    assert qos_class(pod) is QoSClass.LC


def test_lahar_key_beats_volcano_and_koordinator() -> None:
    pod = make_pod(
        labels={"lahar.dev/qos-class": "BE", "koordinator.sh/qosClass": "LSE"},
        annotations={"volcano.sh/qos-level": "LC"},
        resources=GUARANTEED_RESOURCES,
    )
    assert qos_class(pod) is QoSClass.BE


def test_unknown_lahar_value_is_ignored_by_the_classifier() -> None:
    pod = make_pod(labels={"lahar.dev/qos-class": "GOLD"}, annotations={"volcano.sh/qos-level": "LC"})
    assert qos_class(pod) is QoSClass.LC


# Volcano's annotation: LC/HLS -> LC, LS -> LS, BE -> BE.
@pytest.mark.parametrize(("level", "expected"), [("LC", "LC"), ("HLS", "LC"), ("LS", "LS"), ("BE", "BE")])
def test_volcano_qos_level(level: str, expected: str) -> None:
    # A Guaranteed pod would otherwise be LS, a BestEffort one BE: the annotation decides.
    assert qos_class(make_pod(annotations={"volcano.sh/qos-level": level}, resources=GUARANTEED_RESOURCES)) == expected
    assert qos_class(make_pod(annotations={"volcano.sh/qos-level": level})) == expected


def test_volcano_beats_koordinator() -> None:
    pod = make_pod(labels={"koordinator.sh/qosClass": "BE"}, annotations={"volcano.sh/qos-level": "HLS"})
    assert qos_class(pod) is QoSClass.LC


# Koordinator's label: LSE/LSR -> LC, LS -> LS, BE -> BE, SYSTEM -> SYSTEM.
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("LSE", "LC"),
        ("LSR", "LC"),
        ("LS", "LS"),
        ("BE", "BE"),
        ("SYSTEM", "SYSTEM"),
    ],
)
def test_koordinator_qos_class(value: str, expected: str) -> None:
    assert qos_class(make_pod(labels={"koordinator.sh/qosClass": value})) == expected


def test_koordinator_key_is_read_from_labels_only() -> None:
    assert (
        qos_class(make_pod(annotations={"koordinator.sh/qosClass": "LSE"}, resources=BURSTABLE_RESOURCES))
        is QoSClass.LS
    )


# SYSTEM: kube-system critical pods.
@pytest.mark.parametrize("priority_class", ["system-node-critical", "system-cluster-critical"])
def test_critical_priority_classes_are_system(priority_class: str) -> None:
    pod = make_pod(priorityClassName=priority_class, resources=BURSTABLE_RESOURCES)
    pod["metadata"]["namespace"] = "kube-system"
    assert qos_class(pod) is QoSClass.SYSTEM


def test_system_critical_priority_value_is_system() -> None:
    assert qos_class(make_pod(priority=2_000_001_000, resources=BURSTABLE_RESOURCES)) is QoSClass.SYSTEM
    assert qos_class(make_pod(priority=1_000_000_000, resources=BURSTABLE_RESOURCES)) is QoSClass.LS


def test_explicit_keys_beat_critical_priority() -> None:
    pod = make_pod(labels={"koordinator.sh/qosClass": "LS"}, priorityClassName="system-node-critical")
    assert qos_class(pod) is QoSClass.LS


# BE: BestEffort pods and pods requesting batch resources.
def test_best_effort_pod_is_be() -> None:
    assert qos_class(make_pod()) is QoSClass.BE


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"cpu": "100m", "kubernetes.io/batch-cpu": "1000"}},
        {"requests": {"memory": "1Gi"}, "limits": {"kubernetes.io/batch-memory": "2Gi"}},
        {
            "requests": {"cpu": "1", "memory": "1Gi", "kubernetes.io/batch-cpu": "1000"},
            "limits": {"cpu": "1", "memory": "1Gi", "kubernetes.io/batch-cpu": "1000"},
        },
    ],
)
def test_batch_resource_requests_are_be(resources: dict[str, Any]) -> None:
    assert qos_class(make_pod(resources=resources)) is QoSClass.BE


def test_status_qos_class_is_honoured() -> None:
    pod = make_pod(resources=BURSTABLE_RESOURCES)
    pod["status"] = {"qosClass": "BestEffort"}
    assert qos_class(pod) is QoSClass.BE


# LS: everything else (Guaranteed and Burstable).
@pytest.mark.parametrize("resources", [GUARANTEED_RESOURCES, BURSTABLE_RESOURCES])
def test_guaranteed_and_burstable_default_to_ls(resources: dict[str, Any]) -> None:
    assert qos_class(make_pod(resources=resources)) is QoSClass.LS


def test_malformed_pods_still_classify() -> None:
    assert qos_class({}) is QoSClass.BE
    assert qos_class({"metadata": "x", "spec": []}) is QoSClass.BE
    assert qos_class(make_pod(resources={"requests": {"cpu": "lots"}})) is QoSClass.BE


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({}, "BestEffort"),
        (GUARANTEED_RESOURCES, "Guaranteed"),
        ({"limits": {"cpu": "2", "memory": "1Gi"}}, "Guaranteed"),
        (BURSTABLE_RESOURCES, "Burstable"),
        ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}, "Burstable"),
        ({"limits": {"cpu": "1"}}, "Burstable"),
    ],
)
def test_k8s_qos_class(resources: dict[str, Any], expected: str) -> None:
    assert k8s_qos_class(make_pod(resources=resources)["spec"]) == expected


def test_validate_qos_keys() -> None:
    metadata = Field(
        {"labels": {"lahar.dev/qos-class": "be"}, "annotations": {"lahar.dev/qos-class": "LC"}}, "metadata"
    )
    qos.validate_qos_keys(metadata)
    assert [(e.field, e.message) for e in metadata.errors] == [
        ("metadata.labels[lahar.dev/qos-class]", 'unsupported QoS class "be" (supported: "LC", "LS", "BE", "SYSTEM")'),
    ]
