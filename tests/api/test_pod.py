"""Pod: the scheduler's view, Kubernetes' defaults (with the QoS class) and validation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lahar.api import pod
from lahar.api.node import Taint
from lahar.api.pod import Pod, Toleration
from lahar.api.qos import QoSClass

GI = 2**30


def container(
    name: str = "app",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    image: str = "nginx:1.25",
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": image, "resources": resources}


def make_pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "shop",
            "uid": "u-1",
            "labels": {"app": "web"},
            "annotations": {"scheduling.k8s.io/group-name": "web-group"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u-0", "controller": True}
            ],
        },
        "spec": {"containers": list(containers) or [container(requests={"cpu": "250m", "memory": "64Mi"})], **spec},
    }


def errors(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in pod.validate(obj)]


# --- defaults -----------------------------------------------------------------------------------


def test_defaults() -> None:
    defaulted = pod.defaults(make_pod(container(image="registry.local:5000/team/app")))
    spec = defaulted["spec"]
    assert (spec["schedulerName"], spec["restartPolicy"], spec["terminationGracePeriodSeconds"], spec["dnsPolicy"]) == (
        "default-scheduler",
        "Always",
        30,
        "ClusterFirst",
    )
    assert defaulted["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    app = spec["containers"][0]
    assert app["imagePullPolicy"] == "Always"  # untagged (the ":5000" is the registry port)
    assert app["terminationMessagePath"] == "/dev/termination-log"


def test_defaults_keep_given_values_and_do_not_mutate() -> None:
    manifest = make_pod(schedulerName="lahar", restartPolicy="Never", terminationGracePeriodSeconds=5)
    before = copy.deepcopy(manifest)
    spec = pod.defaults(manifest)["spec"]
    assert manifest == before
    assert spec["schedulerName"] == "lahar" and spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 5


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.25", "IfNotPresent"),
        ("nginx@sha256:abcd", "IfNotPresent"),
        ("localhost:5000/nginx", "Always"),
    ],
)
def test_image_pull_policy_default(image: str, policy: str) -> None:
    assert pod.defaults(make_pod(container(image=image)))["spec"]["containers"][0]["imagePullPolicy"] == policy


def test_requests_default_to_limits() -> None:
    defaulted = pod.defaults(make_pod(container(requests={"memory": "1Gi"}, limits={"cpu": "1", "memory": "2Gi"})))
    assert defaulted["spec"]["containers"][0]["resources"]["requests"] == {"memory": "1Gi", "cpu": "1"}


@pytest.mark.parametrize(
    ("containers", "qos"),
    [
        ([container()], "BestEffort"),
        ([container(limits={"cpu": "1", "memory": "1Gi"})], "Guaranteed"),
        ([container(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1000m", "memory": "1Gi"})], "Guaranteed"),
        ([container(requests={"cpu": "500m"}, limits={"cpu": "1", "memory": "1Gi"})], "Burstable"),
        ([container(requests={"cpu": "100m"})], "Burstable"),
        ([container(limits={"cpu": "1", "memory": "1Gi"}), container("side", requests={"cpu": "100m"})], "Burstable"),
        ([container(requests={"cpu": "0", "memory": "0"})], "BestEffort"),
        ([container(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"})], "BestEffort"),
        ([container(requests={"cpu": "0"}, limits={"cpu": "1", "memory": "1Gi"})], "Burstable"),
    ],
)
def test_qos_class_default(containers: list[dict[str, Any]], qos: str) -> None:
    assert pod.defaults(make_pod(*containers))["status"]["qosClass"] == qos


def test_init_containers_count_for_the_qos_class() -> None:
    manifest = make_pod(container(limits={"cpu": "1", "memory": "1Gi"}))
    manifest["spec"]["initContainers"] = [container("init", requests={"cpu": "100m"})]
    assert pod.defaults(manifest)["status"]["qosClass"] == "Burstable"


def test_defaults_tolerate_malformed_input() -> None:
    manifest = make_pod()
    manifest["spec"]["containers"] = [
        {"name": "a", "image": "x", "resources": {"limits": {"cpu": "lots"}}, "ports": 80},
        "junk",
    ]
    defaulted = pod.defaults(manifest)  # no exception: validation reports these
    assert defaulted["status"]["qosClass"] == "BestEffort"
    assert pod.defaults({"spec": "nope"})["spec"] == "nope"


# --- validation ---------------------------------------------------------------------------------


def test_valid_pod() -> None:
    manifest = make_pod(
        tolerations=[
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {"key": "dedicated", "value": "batch", "effect": "NoExecute", "tolerationSeconds": 30},
        ],
        nodeSelector={"kubernetes.io/arch": "amd64"},
    )
    assert errors(manifest) == []
    assert errors(pod.defaults(manifest)) == []


CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"containers": []}, "spec.containers", "at least one container is required"),
    ({"containers": {"name": "app"}}, "spec.containers", "expected an array, got object"),
    (
        {"containers": [container("Web_App")]},
        "spec.containers[0].name",
        'invalid value "Web_App": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '
        "'-', and must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')",
    ),
    ({"containers": [{"name": "app"}]}, "spec.containers[0].image", "is required"),
    ({"containers": [container(image="")]}, "spec.containers[0].image", "is required"),
    ({"containers": [container(), container()]}, "spec.containers[1].name", 'duplicate container name "app"'),
    (
        {"containers": [container()], "initContainers": [container()]},
        "spec.initContainers[0].name",
        'duplicate container name "app"',
    ),
    (
        {"containers": [container(limits={"memory": "1GB"})]},
        "spec.containers[0].resources.limits.memory",
        'invalid quantity "1GB": unknown suffix "GB"',
    ),
    (
        {"containers": [container(requests={"nvidia.com/gpu": "one"})]},
        "spec.containers[0].resources.requests[nvidia.com/gpu]",
        'invalid quantity "one": missing number',
    ),
    (
        {"containers": [container(requests={"cpu": "1"}, limits={"cpu": "500m"})]},
        "spec.containers[0].resources.requests.cpu",
        "must be less than or equal to the cpu limit (500m)",
    ),
    (
        {"containers": [container(limits={"memory": "-512Mi"})]},
        "spec.containers[0].resources.limits.memory",
        'invalid quantity "-512Mi": must be greater than or equal to 0',
    ),
    (
        {"containers": [container(requests={"cpu": True})]},
        "spec.containers[0].resources.requests.cpu",
        "expected a quantity string, got boolean true",
    ),
    (
        {"containers": [container()], "restartPolicy": "Sometimes"},
        "spec.restartPolicy",
        'unsupported restart policy "Sometimes" (supported: "Always", "OnFailure", "Never")',
    ),
    (
        {"containers": [container()], "tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
        "spec.tolerations[0].value",
        'must be empty when the operator is "Exists"',
    ),
    (
        {"containers": [container()], "tolerations": [{"value": "v"}]},
        "spec.tolerations[0].operator",
        'must be "Exists" when the key is empty',
    ),
    (
        {"containers": [container()], "tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]},
        "spec.tolerations[0].tolerationSeconds",
        'may only be set when the effect is "NoExecute"',
    ),
    (
        {"containers": [container()], "tolerations": [{"key": "k", "effect": "Sometimes"}]},
        "spec.tolerations[0].effect",
        'unsupported toleration effect "Sometimes" (supported: "NoSchedule", "PreferNoSchedule", "NoExecute")',
    ),
    (
        {"containers": [container()], "terminationGracePeriodSeconds": -1},
        "spec.terminationGracePeriodSeconds",
        "must be greater than or equal to 0",
    ),
    ({"containers": [container()], "priority": "high"}, "spec.priority", 'expected an integer, got string "high"'),
    (
        {"containers": [container()], "nodeSelector": {"zone": 3}},
        "spec.nodeSelector.zone",
        "expected a string, got integer 3",
    ),
]


@pytest.mark.parametrize(("spec", "field", "message"), CASES, ids=[f"{c[1]}:{c[2][:25]}" for c in CASES])
def test_invalid_pod_names_the_field(spec: dict[str, Any], field: str, message: str) -> None:
    manifest = make_pod()
    manifest["spec"] = spec
    assert (field, message) in errors(manifest)


def test_invalid_status_phase_and_qos_key() -> None:
    manifest = make_pod()
    manifest["status"] = {"phase": "Sleeping"}
    manifest["metadata"]["labels"]["lahar.dev/qos-class"] = "GOLD"
    assert errors(manifest) == [
        (
            "metadata.labels[lahar.dev/qos-class]",
            'unsupported QoS class "GOLD" (supported: "LC", "LS", "BE", "SYSTEM")',
        ),
        (
            "status.phase",
            'unsupported pod phase "Sleeping" (supported: "Pending", "Running", "Succeeded", "Failed", "Unknown")',
        ),
    ]


def test_missing_spec() -> None:
    assert errors({"metadata": {"name": "x"}}) == [("spec", "is required")]


# --- view ---------------------------------------------------------------------------------------


def test_pod_view() -> None:
    manifest = make_pod(
        container(requests={"cpu": "250m", "memory": "64Mi"}),
        container("sidecar", limits={"cpu": "100m", "memory": "32Mi"}),
        nodeName="node-7",
        schedulerName="lahar",
        priority=1000,
        priorityClassName="batch-high",
        nodeSelector={"disk": "ssd"},
        affinity={"nodeAffinity": {}},
        tolerations=[{"key": "gpu", "operator": "Exists"}],
    )
    manifest["status"] = {"phase": "Running"}
    view = Pod(manifest)
    assert view.raw is manifest
    assert (view.name, view.namespace, view.key, view.uid) == ("web-0", "shop", "shop/web-0", "u-1")
    assert (view.node_name, view.scheduler_name, view.phase) == ("node-7", "lahar", "Running")
    assert (view.priority, view.priority_class_name, view.group_name) == (1000, "batch-high", "web-group")
    assert dict(view.requests) == {"cpu": 350, "memory": 96 * 2**20}
    assert view.requests is view.requests  # parsed once
    assert view.node_selector == {"disk": "ssd"} and view.affinity == {"nodeAffinity": {}}
    assert view.labels == {"app": "web"}
    assert view.owner_references[0].kind == "StatefulSet" and view.meta.controller_ref is not None
    assert view.tolerations == (Toleration(key="gpu", operator="Exists"),)
    assert view.tolerates(Taint("gpu", "NoSchedule", "a100"))
    assert not view.tolerates(Taint("spot", "NoSchedule"))
    assert view.is_assigned and not view.is_terminal and not view.is_deleting
    assert view.k8s_qos_class == "Burstable" and view.qos_class is QoSClass.LS


def test_pod_view_defaults_for_a_bare_pod() -> None:
    view = Pod({"metadata": {"name": "bare"}})
    assert (view.scheduler_name, view.phase, view.priority, view.node_name) == ("default-scheduler", "Pending", 0, "")
    assert view.group_name is None and dict(view.requests) == {} and view.tolerations == ()
    assert view.k8s_qos_class == "BestEffort" and view.qos_class is QoSClass.BE


def test_pod_view_parses_lazily() -> None:
    # Building a view must not parse quantities: the scheduler builds one per pod.
    manifest = make_pod(container(requests={"cpu": "not-a-quantity"}))
    view = Pod(manifest)
    assert view.name == "web-0"
    with pytest.raises(ValueError, match="not-a-quantity"):
        _ = view.requests


@pytest.mark.parametrize(
    ("phase", "terminal"), [("Succeeded", True), ("Failed", True), ("Running", False), ("Pending", False)]
)
def test_is_terminal(phase: str, terminal: bool) -> None:
    assert Pod({"status": {"phase": phase}}).is_terminal is terminal


def test_deleting_pod() -> None:
    view = Pod({"metadata": {"name": "x", "deletionTimestamp": "2024-05-01T00:00:00Z"}})
    assert view.is_deleting and view.deletion_timestamp == "2024-05-01T00:00:00Z"


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "NoSchedule", "v"), True),
        (Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "NoSchedule", "w"), False),
        (Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "NoExecute", "v"), False),
        (Toleration("k", "Exists"), Taint("k", "NoExecute", "anything"), True),
        (Toleration(operator="Exists"), Taint("any", "PreferNoSchedule"), True),
        (Toleration("other", "Exists"), Taint("k", "NoSchedule"), False),
    ],
)
def test_toleration_matching(toleration: Toleration, taint: Taint, tolerated: bool) -> None:
    assert toleration.tolerates(taint) is tolerated
