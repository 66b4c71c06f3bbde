"""Create, read, update, patch and delete on the embedded API server, through the official client:
server-set metadata, generation and resourceVersion rules, the Status codes of failures, dry runs,
the status subresource, the three patch types, collections, garbage collection and the objects
that may not be deleted."""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from kubernetes import client
from kubernetes.client import ApiException

Server = Any  # conftest.ServerProcess (conftest is not importable under --import-mode=importlib)

BATCH = ("batch.volcano.sh", "v1alpha1")
SCHED = ("scheduling.volcano.sh", "v1beta1")
# Typed models come back through datetime (+00:00); the wire format (checked raw below) ends in Z.
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def apiserver(module_apiserver: Server) -> Server:
    return module_apiserver


@pytest.fixture
def k8s(module_k8s: client.ApiClient) -> client.ApiClient:
    return module_k8s


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def status_of(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status", body
    assert body["status"] == "Failure", body
    assert body["code"] == exc.status, body
    return body


def expect_error(code: int, call: Callable[[], Any], reason: str | None = None) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == code, caught.value.body
    status = status_of(caught.value)
    if reason is not None:
        assert status["reason"] == reason, status
    return status


def pod_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}], **spec},
    }


def job_body(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": 1,
            "schedulerName": "volcano",
            "queue": "default",
            "tasks": [
                {
                    "name": "work",
                    "replicas": replicas,
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1"}]}
                    },
                }
            ],
        },
    }


def podgroup_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": 1, "queue": "default"},
    }


def queue_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, "reclaimable": True},
    }


# -- one table of kinds drives the round trips --------------------------------------------------------


@dataclass
class Resource:
    """A kind's typed calls, normalised to dicts, plus a body and a spec change for it."""

    create: Callable[[dict[str, Any]], dict[str, Any]]
    read: Callable[[str], dict[str, Any]]
    replace: Callable[[str, dict[str, Any]], dict[str, Any]]
    delete: Callable[[str], Any]
    names: Callable[[], list[str]]
    body: Callable[[str], dict[str, Any]]
    change: Callable[[dict[str, Any]], None]
    has_spec: bool = True


def _names(items: Any) -> list[str]:
    return [(i["metadata"]["name"] if isinstance(i, dict) else i.metadata.name) for i in items]


def resources(api: client.ApiClient, ns: str) -> dict[str, Resource]:
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    sched, custom = client.SchedulingV1Api(api), client.CustomObjectsApi(api)
    d = api.sanitize_for_serialization

    def set_path(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
        def apply(obj: dict[str, Any]) -> None:
            *parents, last = path.split(".")
            target: Any = obj
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
            target[last] = value

        return apply

    def namespaced_custom(group_version: tuple[str, str], plural: str) -> dict[str, Any]:
        g, v = group_version
        return dict(
            create=lambda b: custom.create_namespaced_custom_object(g, v, ns, plural, b),
            read=lambda n: custom.get_namespaced_custom_object(g, v, ns, plural, n),
            replace=lambda n, b: custom.replace_namespaced_custom_object(g, v, ns, plural, n, b),
            delete=lambda n: custom.delete_namespaced_custom_object(g, v, ns, plural, n),
            names=lambda: _names(custom.list_namespaced_custom_object(g, v, ns, plural)["items"]),
        )

    return {
        "pods": Resource(
            create=lambda b: d(core.create_namespaced_pod(ns, b)),
            read=lambda n: d(core.read_namespaced_pod(n, ns)),
            replace=lambda n, b: d(core.replace_namespaced_pod(n, ns, b)),
            delete=lambda n: core.delete_namespaced_pod(n, ns),
            names=lambda: _names(core.list_namespaced_pod(ns).items),
            body=pod_body,
            change=set_path("spec.containers.0.image", "busybox:2"),
        ),
        "nodes": Resource(
            create=lambda b: d(core.create_node(b)),
            read=lambda n: d(core.read_node(n)),
            replace=lambda n, b: d(core.replace_node(n, b)),
            delete=lambda n: core.delete_node(n),
            names=lambda: _names(core.list_node().items),
            body=lambda n: {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": n},
                "spec": {"podCIDR": "10.0.0.0/24"},
            },
            change=set_path("spec.unschedulable", True),
        ),
        "namespaces": Resource(
            create=lambda b: d(core.create_namespace(b)),
            read=lambda n: d(core.read_namespace(n)),
            replace=lambda n, b: d(core.replace_namespace(n, b)),
            delete=lambda n: core.delete_namespace(n),
            names=lambda: _names(core.list_namespace().items),
            body=lambda n: {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}},
            change=set_path("metadata.labels", {"team": "a"}),
            has_spec=False,
        ),
        "events": Resource(
            create=lambda b: d(core.create_namespaced_event(ns, b)),
            read=lambda n: d(core.read_namespaced_event(n, ns)),
            replace=lambda n, b: d(core.replace_namespaced_event(n, ns, b)),
            delete=lambda n: core.delete_namespaced_event(n, ns),
            names=lambda: _names(core.list_namespaced_event(ns).items),
            body=lambda n: {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": n},
                "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
                "reason": "Tested",
                "message": "first",
                "type": "Normal",
            },
            change=set_path("message", "second"),
            has_spec=False,
        ),
        "services": Resource(
            create=lambda b: d(core.create_namespaced_service(ns, b)),
            read=lambda n: d(core.read_namespaced_service(n, ns)),
            replace=lambda n, b: d(core.replace_namespaced_service(n, ns, b)),
            delete=lambda n: core.delete_namespaced_service(n, ns),
            names=lambda: _names(core.list_namespaced_service(ns).items),
            body=lambda n: {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": n},
                "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80}]},
            },
            change=set_path("spec.ports", [{"port": 81}]),
        ),
        "configmaps": Resource(
            create=lambda b: d(core.create_namespaced_config_map(ns, b)),
            read=lambda n: d(core.read_namespaced_config_map(n, ns)),
            replace=lambda n, b: d(core.replace_namespaced_config_map(n, ns, b)),
            delete=lambda n: core.delete_namespaced_config_map(n, ns),
            names=lambda: _names(core.list_namespaced_config_map(ns).items),
            body=lambda n: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}, "data": {"k": "1"}},
            change=set_path("data.k", "2"),
            has_spec=False,
        ),
        "poddisruptionbudgets": Resource(
            create=lambda b: d(policy.create_namespaced_pod_disruption_budget(ns, b)),
            read=lambda n: d(policy.read_namespaced_pod_disruption_budget(n, ns)),
            replace=lambda n, b: d(policy.replace_namespaced_pod_disruption_budget(n, ns, b)),
            delete=lambda n: policy.delete_namespaced_pod_disruption_budget(n, ns),
            names=lambda: _names(policy.list_namespaced_pod_disruption_budget(ns).items),
            body=lambda n: {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": n},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            },
            change=set_path("spec.minAvailable", 2),
        ),
        "priorityclasses": Resource(
            create=lambda b: d(sched.create_priority_class(b)),
            read=lambda n: d(sched.read_priority_class(n)),
            replace=lambda n, b: d(sched.replace_priority_class(n, b)),
            delete=lambda n: sched.delete_priority_class(n),
            names=lambda: _names(sched.list_priority_class().items),
            body=lambda n: {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": n},
                "value": 1000,
                "description": "first",
            },
            change=set_path("description", "second"),
            has_spec=False,
        ),
        "jobs": Resource(
            **namespaced_custom(BATCH, "jobs"), body=job_body, change=set_path("spec.tasks.0.replicas", 2)
        ),
        "podgroups": Resource(
            **namespaced_custom(SCHED, "podgroups"), body=podgroup_body, change=set_path("spec.minMember", 2)
        ),
        "queues": Resource(
            create=lambda b: custom.create_cluster_custom_object(*SCHED, "queues", b),
            read=lambda n: custom.get_cluster_custom_object(*SCHED, "queues", n),
            replace=lambda n, b: custom.replace_cluster_custom_object(*SCHED, "queues", n, b),
            delete=lambda n: custom.delete_cluster_custom_object(*SCHED, "queues", n),
            names=lambda: _names(custom.list_cluster_custom_object(*SCHED, "queues")["items"]),
            body=queue_body,
            change=set_path("spec.weight", 2),
        ),
    }


GENERATION_PLURALS = {"pods", "poddisruptionbudgets", "jobs", "podgroups", "queues"}
KINDS = [
    "pods",
    "nodes",
    "namespaces",
    "events",
    "services",
    "configmaps",
    "poddisruptionbudgets",
    "priorityclasses",
    "jobs",
    "podgroups",
    "queues",
]


def wait_gone(read: Callable[[], Any], seconds: float = 2.5) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            read()
        except ApiException as exc:
            assert exc.status == 404, exc.body
            return
        assert time.monotonic() < deadline, "object still readable after delete"
        time.sleep(0.05)


@pytest.mark.parametrize("plural", KINDS)
def test_create_get_update_delete(k8s: client.ApiClient, ns: str, plural: str) -> None:
    res = resources(k8s, ns)[plural]
    name = unique(plural[:5])
    created = res.create(res.body(name))
    meta = created["metadata"]
    assert meta["name"] == name
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"]), meta
    assert RFC3339.match(meta["creationTimestamp"]), meta
    assert rv(created) > 0
    # kube-apiserver keeps a generation for pods, PDBs and custom resources; Nodes, Services and
    # the other kinds without one get none.
    counted = plural in GENERATION_PLURALS
    assert ("generation" in meta) == counted
    if counted:
        assert meta["generation"] == 1
    if plural not in ("nodes", "namespaces", "priorityclasses", "queues"):
        assert meta["namespace"] == ns

    fetched = res.read(name)
    assert fetched["metadata"]["uid"] == meta["uid"]
    assert fetched["metadata"]["resourceVersion"] == meta["resourceVersion"]
    assert name in res.names()

    changed = copy.deepcopy(fetched)
    res.change(changed)
    updated = res.replace(name, changed)
    assert rv(updated) > rv(created)
    assert updated["metadata"]["uid"] == meta["uid"]
    assert updated["metadata"]["creationTimestamp"] == meta["creationTimestamp"]
    if counted:
        assert updated["metadata"]["generation"] == 2
    reread = res.read(name)
    assert reread["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    expected = copy.deepcopy(fetched)
    res.change(expected)
    for key in ("spec", "data", "message", "description"):
        if key in expected:
            assert reread[key] == expected[key]
    if plural == "namespaces":
        assert reread["metadata"]["labels"]["team"] == "a"

    res.delete(name)
    wait_gone(lambda: res.read(name))
    assert name not in res.names()


def test_wire_format_of_server_set_metadata(apiserver: Server, ns: str) -> None:
    response = requests.post(
        f"{apiserver.url}/api/v1/namespaces/{ns}/configmaps",
        json={"metadata": {"name": "wire", "uid": "mine", "resourceVersion": "999999"}},
        timeout=5,
    )
    assert response.status_code == 201, response.text
    meta = response.json()["metadata"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"]), meta
    assert meta["uid"] != "mine", "the server sets the uid"
    assert meta["resourceVersion"] != "999999", "the server sets the resourceVersion"
    assert response.json()["apiVersion"] == "v1" and response.json()["kind"] == "ConfigMap"


def test_resource_versions_increase_across_kinds(k8s: client.ApiClient, ns: str) -> None:
    table = resources(k8s, ns)
    versions = [rv(table[p].create(table[p].body(unique(p[:5])))) for p in ("configmaps", "queues", "pods", "jobs")]
    assert versions == sorted(versions) and len(set(versions)) == len(versions), versions


def test_generation_bumps_on_spec_change_only(custom: client.CustomObjectsApi, ns: str) -> None:
    name = unique("gen")
    job = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job_body(name))
    assert job["metadata"]["generation"] == 1

    job["metadata"]["labels"] = {"touched": "yes"}
    relabelled = custom.replace_namespaced_custom_object(*BATCH, ns, "jobs", name, job)
    assert relabelled["metadata"]["generation"] == 1
    assert rv(relabelled) > rv(job)

    patched = custom.patch_namespaced_custom_object(*BATCH, ns, "jobs", name, {"metadata": {"annotations": {"a": "b"}}})
    assert patched["metadata"]["generation"] == 1

    status = custom.patch_namespaced_custom_object_status(
        *BATCH, ns, "jobs", name, {"status": {"state": {"phase": "Running"}}}
    )
    assert status["metadata"]["generation"] == 1
    assert rv(status) > rv(patched)

    spec = custom.patch_namespaced_custom_object(*BATCH, ns, "jobs", name, {"spec": {"maxRetry": 5}})
    assert spec["metadata"]["generation"] == 2
    again = custom.patch_namespaced_custom_object(*BATCH, ns, "jobs", name, {"spec": {"maxRetry": 5}})
    assert again["metadata"]["generation"] == 2, "a patch that changes nothing must not bump generation"


def test_generation_ignores_fields_the_server_defaults(custom: client.CustomObjectsApi, ns: str) -> None:
    """Re-sending a manifest without the defaults the server filled in (what `kubectl apply` does
    when its merge patch replaces spec.tasks) is no spec change: the defaulted result is the same."""
    created = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job_body("defaults"))
    assert created["spec"]["tasks"] != job_body("defaults")["spec"]["tasks"], "expected server defaults in tasks"
    patched = custom.patch_namespaced_custom_object(
        *BATCH, ns, "jobs", "defaults", {"spec": {"tasks": job_body("defaults")["spec"]["tasks"]}}
    )
    assert patched["spec"] == created["spec"]
    assert patched["metadata"]["generation"] == 1
    replaced = custom.replace_namespaced_custom_object(*BATCH, ns, "jobs", "defaults", job_body("defaults"))
    assert replaced["spec"] == created["spec"]
    assert replaced["metadata"]["generation"] == 1


def test_update_that_changes_nothing_keeps_the_resource_version(k8s: client.ApiClient, ns: str) -> None:
    """As in kube-apiserver, a write whose result equals the stored object is a no-op: same
    resourceVersion, no watch event (controllers that rewrite unchanged status must not cause churn)."""
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "same", "labels": {"a": "b"}}, "data": {"k": "v"}})
    again = core.patch_namespaced_config_map("same", ns, {"data": {"k": "v"}})
    assert again.metadata.resource_version == cm.metadata.resource_version
    job = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job_body("same"))
    unchanged = custom.replace_namespaced_custom_object(*BATCH, ns, "jobs", "same", job)
    assert unchanged["metadata"]["resourceVersion"] == job["metadata"]["resourceVersion"]
    status = custom.patch_namespaced_custom_object_status(
        *BATCH, ns, "jobs", "same", {"status": {"state": {"phase": "Running"}}}
    )
    same_status = custom.patch_namespaced_custom_object_status(
        *BATCH, ns, "jobs", "same", {"status": {"state": {"phase": "Running"}}}
    )
    assert same_status["metadata"]["resourceVersion"] == status["metadata"]["resourceVersion"]


@pytest.mark.parametrize("plural", ["pods", "configmaps", "jobs", "queues", "namespaces"])
def test_duplicate_name_is_409_already_exists(k8s: client.ApiClient, ns: str, plural: str) -> None:
    res = resources(k8s, ns)[plural]
    name = unique("dup")
    first = res.create(res.body(name))
    status = expect_error(409, lambda: res.create(res.body(name)), "AlreadyExists")
    assert name in status["message"]
    assert res.read(name)["metadata"]["uid"] == first["metadata"]["uid"]


@pytest.mark.parametrize("plural", ["configmaps", "pods", "jobs", "queues"])
def test_stale_resource_version_update_is_409_conflict(k8s: client.ApiClient, ns: str, plural: str) -> None:
    res = resources(k8s, ns)[plural]
    name = unique("stale")
    original = res.create(res.body(name))
    fresh = copy.deepcopy(original)
    fresh["metadata"]["labels"] = {"writer": "first"}
    winner = res.replace(name, fresh)
    stale = copy.deepcopy(original)
    stale["metadata"]["labels"] = {"writer": "second"}
    expect_error(409, lambda: res.replace(name, stale), "Conflict")
    current = res.read(name)
    assert current["metadata"]["labels"] == {"writer": "first"}
    assert current["metadata"]["resourceVersion"] == winner["metadata"]["resourceVersion"]


def test_update_without_resource_version_is_unconditional(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"k": "1"}})
    updated = core.replace_namespaced_config_map("cm", ns, {"metadata": {"name": "cm"}, "data": {"k": "2"}})
    assert updated.data == {"k": "2"}


def test_not_found_is_404(k8s: client.ApiClient, ns: str) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    status = expect_error(404, lambda: core.read_namespaced_pod("missing", ns), "NotFound")
    assert '"missing"' in status["message"]
    assert status["details"]["name"] == "missing"
    expect_error(
        404, lambda: core.replace_namespaced_config_map("missing", ns, {"metadata": {"name": "missing"}}), "NotFound"
    )
    expect_error(404, lambda: core.delete_namespaced_pod("missing", ns), "NotFound")
    expect_error(
        404, lambda: core.patch_namespaced_pod("missing", ns, {"metadata": {"labels": {"a": "b"}}}), "NotFound"
    )
    expect_error(404, lambda: custom.get_namespaced_custom_object(*BATCH, ns, "jobs", "missing"), "NotFound")
    expect_error(404, lambda: custom.get_cluster_custom_object(*SCHED, "queues", "missing"), "NotFound")
    expect_error(404, lambda: core.read_node("missing"), "NotFound")


@pytest.mark.parametrize("plural", ["pods", "configmaps", "jobs", "podgroups"])
def test_create_in_missing_namespace_is_404(k8s: client.ApiClient, plural: str) -> None:
    missing = unique("nons")
    res = resources(k8s, missing)[plural]
    status = expect_error(404, lambda: res.create(res.body("x")), "NotFound")
    assert missing in status["message"]
    core = client.CoreV1Api(k8s)
    expect_error(404, lambda: core.read_namespace(missing))


def test_kind_and_api_version_mismatch_is_400(k8s: client.ApiClient, ns: str) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    wrong_kind = {**pod_body("wk"), "kind": "ConfigMap"}
    expect_error(400, lambda: core.create_namespaced_pod(ns, wrong_kind), "BadRequest")
    wrong_version = {**job_body("wv"), "apiVersion": "batch/v1"}
    expect_error(400, lambda: custom.create_namespaced_custom_object(*BATCH, ns, "jobs", wrong_version), "BadRequest")
    wrong_group_kind = {**queue_body(unique("wq")), "kind": "PodGroup"}
    expect_error(400, lambda: custom.create_cluster_custom_object(*SCHED, "queues", wrong_group_kind), "BadRequest")
    assert "wk" not in [p.metadata.name for p in core.list_namespaced_pod(ns).items]
    expect_error(404, lambda: custom.get_namespaced_custom_object(*BATCH, ns, "jobs", "wv"))
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    update = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cm"}, "data": {}}
    expect_error(400, lambda: core.replace_namespaced_config_map("cm", ns, update), "BadRequest")


def test_name_in_body_must_match_url(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "here"}, "data": {"k": "1"}})
    body = {"metadata": {"name": "there"}, "data": {"k": "2"}}
    expect_error(400, lambda: core.replace_namespaced_config_map("here", ns, body), "BadRequest")
    assert core.read_namespaced_config_map("here", ns).data == {"k": "1"}
    expect_error(404, lambda: core.read_namespaced_config_map("there", ns))


def test_namespace_in_body_must_match_url(core: client.CoreV1Api, ns: str) -> None:
    body = {"metadata": {"name": "elsewhere", "namespace": "default"}, "data": {}}
    expect_error(400, lambda: core.create_namespaced_config_map(ns, body), "BadRequest")


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("POST", b"{not json"),
        ("POST", b'{"metadata": {"name": "x"'),
        ("POST", b"[1, 2, 3]"),
        ("POST", b'"a string"'),
        ("PUT", b"{not json"),
    ],
)
def test_malformed_body_is_400(apiserver: Server, ns: str, method: str, body: bytes) -> None:
    url = f"{apiserver.url}/api/v1/namespaces/{ns}/configmaps"
    if method == "PUT":
        requests.post(url, json={"metadata": {"name": "target"}}, timeout=5).raise_for_status()
        url += "/target"
    response = requests.request(method, url, data=body, headers={"Content-Type": "application/json"}, timeout=5)
    assert response.status_code == 400, response.text
    status = response.json()
    assert status["kind"] == "Status" and status["code"] == 400 and status["reason"] == "BadRequest"
    listed = requests.get(url.removesuffix("/target"), timeout=5).json()["items"]
    assert [i["metadata"]["name"] for i in listed] == (["target"] if method == "PUT" else [])


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        # A custom resource has no protobuf form, on kube-apiserver either.
        ("application/vnd.kubernetes.protobuf", b"k8s\x00\n&\n\x1dscheduling.volcano.sh/v1beta1\x12\x05Queue"),
        ("application/cbor", b"\xa0"),
        ("text/plain", b"hello"),
    ],
)
def test_body_in_unsupported_media_type_is_415(apiserver: Server, ns: str, content_type: str, body: bytes) -> None:
    """A body in a format the server cannot read for the kind is 415 UnsupportedMediaType (as
    kube-apiserver answers), not 400 "not JSON", and nothing is created."""
    url = f"{apiserver.url}/api/v1/namespaces/{ns}/configmaps"
    response = requests.post(url, data=body, headers={"Content-Type": content_type}, timeout=5)
    assert response.status_code == 415, response.text
    status = response.json()
    assert status["kind"] == "Status" and status["reason"] == "UnsupportedMediaType"
    assert requests.get(url, timeout=5).json()["items"] == []


def test_malformed_protobuf_is_400(apiserver: Server, ns: str) -> None:
    url = f"{apiserver.url}/api/v1/namespaces/{ns}/configmaps"
    response = requests.post(
        url, data=b"k8s\x00\x12\xff", headers={"Content-Type": "application/vnd.kubernetes.protobuf"}, timeout=5
    )
    assert response.status_code == 400, response.text
    assert requests.get(url, timeout=5).json()["items"] == []


def test_generate_name(core: client.CoreV1Api, ns: str) -> None:
    body = pod_body("")
    body["metadata"] = {"generateName": "web-"}
    first = core.create_namespaced_pod(ns, body)
    second = core.create_namespaced_pod(ns, body)
    for pod in (first, second):
        assert pod.metadata.name.startswith("web-") and len(pod.metadata.name) > len("web-")
        assert pod.metadata.generate_name == "web-"
    assert first.metadata.name != second.metadata.name
    assert core.read_namespaced_pod(first.metadata.name, ns).metadata.uid == first.metadata.uid


def test_missing_name_is_refused(core: client.CoreV1Api, ns: str) -> None:
    expect_error(422, lambda: core.create_namespaced_config_map(ns, {"metadata": {}, "data": {}}), "Invalid")


def test_dry_run_stores_nothing(k8s: client.ApiClient, ns: str) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    before = int(core.list_namespaced_config_map(ns).metadata.resource_version)
    dry = core.create_namespaced_config_map(ns, {"metadata": {"name": "dry"}, "data": {"k": "v"}}, dry_run="All")
    assert dry.metadata.name == "dry"
    assert dry.data == {"k": "v"}
    expect_error(404, lambda: core.read_namespaced_config_map("dry", ns))
    assert core.list_namespaced_config_map(ns).items == []
    assert int(core.list_namespaced_config_map(ns).metadata.resource_version) == before

    dry_job = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job_body("dryjob"), dry_run="All")
    assert dry_job["metadata"]["name"] == "dryjob"
    expect_error(404, lambda: custom.get_namespaced_custom_object(*BATCH, ns, "jobs", "dryjob"))

    real = core.create_namespaced_config_map(ns, {"metadata": {"name": "real"}, "data": {"k": "1"}})
    core.replace_namespaced_config_map("real", ns, {"metadata": {"name": "real"}, "data": {"k": "2"}}, dry_run="All")
    core.patch_namespaced_config_map("real", ns, {"data": {"k": "3"}}, dry_run="All")
    core.delete_namespaced_config_map("real", ns, dry_run="All")
    kept = core.read_namespaced_config_map("real", ns)
    assert kept.data == {"k": "1"}
    assert kept.metadata.resource_version == real.metadata.resource_version


# -- status subresource ---------------------------------------------------------------------------------


@dataclass
class StatusCase:
    body: Callable[[str], dict[str, Any]]
    status: dict[str, Any]
    other_status: dict[str, Any]
    spec_change: Callable[[dict[str, Any]], None]


STATUS_CASES = {
    "pods": StatusCase(
        pod_body,
        {"phase": "Running"},
        {"phase": "Succeeded"},
        lambda o: o["spec"]["containers"][0].update(image="busybox:2"),
    ),
    "nodes": StatusCase(
        lambda n: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}, "spec": {}},
        {"capacity": {"cpu": "4"}},
        {"capacity": {"cpu": "8"}},
        lambda o: o["spec"].update(unschedulable=True),
    ),
    "jobs": StatusCase(
        job_body,
        {"state": {"phase": "Running"}},
        {"state": {"phase": "Completed"}},
        lambda o: o["spec"].update(maxRetry=7),
    ),
    "podgroups": StatusCase(
        podgroup_body, {"phase": "Inqueue"}, {"phase": "Running"}, lambda o: o["spec"].update(minMember=2)
    ),
    "queues": StatusCase(queue_body, {"state": "Closing"}, {"state": "Closed"}, lambda o: o["spec"].update(weight=3)),
}


def status_calls(
    api: client.ApiClient, ns: str, plural: str
) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """(replace_status(name, body), patch_status(name, body), patch(name, body)), each returning a dict."""
    core, custom, d = client.CoreV1Api(api), client.CustomObjectsApi(api), api.sanitize_for_serialization
    if plural == "pods":
        return (
            lambda n, b: d(core.replace_namespaced_pod_status(n, ns, b)),
            lambda n, b: d(core.patch_namespaced_pod_status(n, ns, b, _content_type=MERGE)),
            lambda n, b: d(core.patch_namespaced_pod(n, ns, b, _content_type=MERGE)),
        )
    if plural == "nodes":
        return (
            lambda n, b: d(core.replace_node_status(n, b)),
            lambda n, b: d(core.patch_node_status(n, b, _content_type=MERGE)),
            lambda n, b: d(core.patch_node(n, b, _content_type=MERGE)),
        )
    if plural == "queues":
        return (
            lambda n, b: custom.replace_cluster_custom_object_status(*SCHED, "queues", n, b),
            lambda n, b: custom.patch_cluster_custom_object_status(*SCHED, "queues", n, b),
            lambda n, b: custom.patch_cluster_custom_object(*SCHED, "queues", n, b),
        )
    g, v = BATCH if plural == "jobs" else SCHED
    return (
        lambda n, b: custom.replace_namespaced_custom_object_status(g, v, ns, plural, n, b),
        lambda n, b: custom.patch_namespaced_custom_object_status(g, v, ns, plural, n, b),
        lambda n, b: custom.patch_namespaced_custom_object(g, v, ns, plural, n, b),
    )


@pytest.mark.parametrize("plural", list(STATUS_CASES))
def test_status_subresource_changes_only_status(k8s: client.ApiClient, ns: str, plural: str) -> None:
    res, case = resources(k8s, ns)[plural], STATUS_CASES[plural]
    replace_status, patch_status, patch = status_calls(k8s, ns, plural)
    name = unique("st")
    created = res.create(case.body(name))
    spec = copy.deepcopy(created["spec"])

    # PUT .../status: the status is taken, a spec change and a label in the same body are not.
    body = copy.deepcopy(created)
    body["status"] = case.status
    case.spec_change(body)
    body["metadata"]["labels"] = {"sneaky": "yes"}
    after_put = replace_status(name, body)
    assert after_put["status"] == {**after_put["status"], **case.status}
    assert after_put["spec"] == spec
    assert "sneaky" not in (after_put["metadata"].get("labels") or {})
    assert after_put["metadata"].get("generation", 1) == created["metadata"].get("generation", 1)
    assert rv(after_put) > rv(created)
    current = res.read(name)
    assert current["spec"] == spec and current["status"] == after_put["status"]

    # PATCH .../status: the same, as a merge patch.
    changed_spec = copy.deepcopy(current)
    case.spec_change(changed_spec)
    after_patch = patch_status(name, {"status": case.other_status, "spec": changed_spec["spec"]})
    for key, value in case.other_status.items():
        assert after_patch["status"][key] == value
    assert after_patch["spec"] == spec

    # The main resource: PUT and PATCH change the spec and never the status.
    main = copy.deepcopy(res.read(name))
    main["status"] = case.status
    case.spec_change(main)
    after_main = res.replace(name, main)
    assert after_main["spec"] == main["spec"] and after_main["spec"] != spec
    for key, value in case.other_status.items():
        assert after_main["status"][key] == value, "the main endpoint changed the status"
    patched_main = patch(name, {"status": case.status, "metadata": {"labels": {"via": "patch"}}})
    assert patched_main["metadata"]["labels"]["via"] == "patch"
    for key, value in case.other_status.items():
        assert patched_main["status"][key] == value, "a main-resource PATCH changed the status"


def test_status_subresource_get(k8s: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(k8s)
    core.create_namespaced_pod(ns, pod_body("sg"))
    core.patch_namespaced_pod_status("sg", ns, {"status": {"phase": "Running"}}, _content_type=MERGE)
    assert core.read_namespaced_pod_status("sg", ns).status.phase == "Running"


def test_status_update_with_stale_resource_version_is_409(k8s: client.ApiClient, ns: str) -> None:
    custom = client.CustomObjectsApi(k8s)
    job = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job_body("sj"))
    custom.patch_namespaced_custom_object(*BATCH, ns, "jobs", "sj", {"metadata": {"labels": {"a": "b"}}})
    job["status"] = {"state": {"phase": "Running"}}
    expect_error(409, lambda: custom.replace_namespaced_custom_object_status(*BATCH, ns, "jobs", "sj", job), "Conflict")


def test_new_pod_has_pending_phase(core: client.CoreV1Api, ns: str) -> None:
    """kube-apiserver gives every new pod status.phase Pending (the client side relies on it)."""
    created = core.create_namespaced_pod(ns, pod_body("pending"))
    assert created.status is not None and created.status.phase == "Pending"


# -- patches ---------------------------------------------------------------------------------------------


def test_merge_patch_sets_and_removes_fields(core: client.CoreV1Api, ns: str) -> None:
    body = pod_body("mp")
    body["metadata"]["labels"] = {"app": "web", "tier": "front"}
    created = core.create_namespaced_pod(ns, body)
    patched = core.patch_namespaced_pod(
        "mp", ns, {"metadata": {"labels": {"tier": None, "new": "1"}}}, _content_type=MERGE
    )
    assert patched.metadata.labels == {"app": "web", "new": "1"}
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
    assert core.read_namespaced_pod("mp", ns).metadata.labels == {"app": "web", "new": "1"}


def _two_container_pod(core: client.CoreV1Api, ns: str, name: str) -> None:
    body = pod_body(name)
    body["spec"]["containers"] = [{"name": "a", "image": "img-a:1"}, {"name": "b", "image": "img-b:1"}]
    core.create_namespaced_pod(ns, body)


def test_strategic_merge_patch_merges_containers_by_name(core: client.CoreV1Api, ns: str) -> None:
    _two_container_pod(core, ns, "smp")
    patched = core.patch_namespaced_pod(
        "smp", ns, {"spec": {"containers": [{"name": "b", "image": "img-b:2"}]}}, _content_type=STRATEGIC
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [("a", "img-a:1"), ("b", "img-b:2")]
    assert patched.metadata.generation == 2
    # The official client's default for a dict body on a built-in kind is a strategic merge too.
    again = core.patch_namespaced_pod("smp", ns, {"spec": {"containers": [{"name": "a", "image": "img-a:2"}]}})
    assert [(c.name, c.image) for c in again.spec.containers] == [("a", "img-a:2"), ("b", "img-b:2")]


def test_merge_patch_replaces_lists(core: client.CoreV1Api, ns: str) -> None:
    _two_container_pod(core, ns, "mpl")
    patched = core.patch_namespaced_pod(
        "mpl", ns, {"spec": {"containers": [{"name": "b", "image": "img-b:2"}]}}, _content_type=MERGE
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [("b", "img-b:2")]


def test_strategic_merge_delete_directive(core: client.CoreV1Api, ns: str) -> None:
    _two_container_pod(core, ns, "smpdel")
    patched = core.patch_namespaced_pod(
        "smpdel", ns, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}, _content_type=STRATEGIC
    )
    assert [c.name for c in patched.spec.containers] == ["b"]


def test_json_patch(core: client.CoreV1Api, ns: str) -> None:
    _two_container_pod(core, ns, "jp")
    patched = core.patch_namespaced_pod(
        "jp",
        ns,
        [
            {"op": "add", "path": "/metadata/labels/added", "value": "yes"},
            {"op": "replace", "path": "/spec/containers/1/image", "value": "img-b:3"},
            {"op": "test", "path": "/spec/containers/0/name", "value": "a"},
        ],
    )
    assert patched.metadata.labels["added"] == "yes"
    assert patched.spec.containers[1].image == "img-b:3"


def test_json_patch_failing_test_op_changes_nothing(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod_body("jpt"))
    before = core.read_namespaced_pod("jpt", ns)
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod(
            "jpt",
            ns,
            [
                {"op": "replace", "path": "/metadata/labels/app", "value": "changed"},
                {"op": "test", "path": "/metadata/labels/app", "value": "not-the-value"},
            ],
        )
    assert 400 <= caught.value.status < 500
    status_of(caught.value)
    after = core.read_namespaced_pod("jpt", ns)
    assert after.metadata.labels == {"app": "web"}
    assert after.metadata.resource_version == before.metadata.resource_version


def test_json_patch_on_missing_path_is_4xx(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "jpm"}, "data": {"k": "v"}})
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_config_map("jpm", ns, [{"op": "remove", "path": "/data/nothing"}])
    assert 400 <= caught.value.status < 500
    assert core.read_namespaced_config_map("jpm", ns).data == {"k": "v"}


def test_json_patch_on_custom_resource(custom: client.CustomObjectsApi, ns: str) -> None:
    custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job_body("jpj"))
    patched = custom.patch_namespaced_custom_object(
        *BATCH,
        ns,
        "jobs",
        "jpj",
        [{"op": "replace", "path": "/spec/tasks/0/replicas", "value": 3}],
        _content_type=JSON_PATCH,
    )
    assert patched["spec"]["tasks"][0]["replicas"] == 3
    assert patched["metadata"]["generation"] == 2


def test_merge_patch_on_custom_resource(custom: client.CustomObjectsApi, ns: str) -> None:
    custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job_body("mpj"))
    patched = custom.patch_namespaced_custom_object(*BATCH, ns, "jobs", "mpj", {"spec": {"maxRetry": 9}})
    assert patched["spec"]["maxRetry"] == 9
    assert patched["spec"]["tasks"][0]["name"] == "work"


@pytest.mark.parametrize("plural", ["jobs", "podgroups", "queues"])
def test_strategic_merge_on_custom_resource_is_415(k8s: client.ApiClient, ns: str, plural: str) -> None:
    res = resources(k8s, ns)[plural]
    name = unique("smp")
    created = res.create(res.body(name))
    custom = client.CustomObjectsApi(k8s)
    patch = {"metadata": {"labels": {"x": "y"}}}
    if plural == "queues":

        def call():
            return custom.patch_cluster_custom_object(
                *SCHED,
                plural,
                name,
                patch,
                _content_type=STRATEGIC,
            )
    else:
        g, v = BATCH if plural == "jobs" else SCHED

        def call():
            return custom.patch_namespaced_custom_object(
                g,
                v,
                ns,
                plural,
                name,
                patch,
                _content_type=STRATEGIC,
            )

    expect_error(415, call, "UnsupportedMediaType")
    assert res.read(name)["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_unknown_patch_content_type_is_415(apiserver: Server, core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "ct"}, "data": {"k": "v"}})
    response = requests.patch(
        f"{apiserver.url}/api/v1/namespaces/{ns}/configmaps/ct",
        data=b'{"data":{"k":"w"}}',
        headers={"Content-Type": "text/plain"},
        timeout=5,
    )
    assert response.status_code == 415, response.text
    assert response.json()["kind"] == "Status"
    assert core.read_namespaced_config_map("ct", ns).data == {"k": "v"}


# -- collections, garbage collection, protected objects ------------------------------------------------------


def test_delete_collection_with_label_selector(k8s: client.ApiClient, ns: str) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    for name, labels in (("a", {"app": "x"}), ("b", {"app": "x"}), ("c", {"app": "y"}), ("d", {})):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
        body = pod_body(f"pod-{name}")
        body["metadata"]["labels"] = labels
        core.create_namespaced_pod(ns, body)
        pg = podgroup_body(f"pg-{name}")
        pg["metadata"]["labels"] = labels
        custom.create_namespaced_custom_object(*SCHED, ns, "podgroups", pg)
    core.delete_collection_namespaced_config_map(ns, label_selector="app=x")
    assert sorted(c.metadata.name for c in core.list_namespaced_config_map(ns).items) == ["c", "d"]
    core.delete_collection_namespaced_pod(ns, label_selector="app in (x,y)")
    assert [p.metadata.name for p in core.list_namespaced_pod(ns).items] == ["pod-d"]
    custom.delete_collection_namespaced_custom_object(*SCHED, ns, "podgroups", label_selector="app!=x")
    remaining = custom.list_namespaced_custom_object(*SCHED, ns, "podgroups")["items"]
    assert sorted(p["metadata"]["name"] for p in remaining) == ["pg-a", "pg-b"]


def test_delete_collection_stays_in_its_namespace(core: client.CoreV1Api, ns: str) -> None:
    other = unique("other")
    core.create_namespace({"metadata": {"name": other}})
    for namespace in (ns, other):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "same", "labels": {"app": "x"}}})
    core.delete_collection_namespaced_config_map(ns, label_selector="app=x")
    assert core.list_namespaced_config_map(ns).items == []
    assert [c.metadata.name for c in core.list_namespaced_config_map(other).items] == ["same"]


def _owned_by(owner: dict[str, Any], kind: str, api_version: str) -> dict[str, Any]:
    return {
        "ownerReferences": [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    }


def test_deleting_an_owner_collects_its_dependents(k8s: client.ApiClient, ns: str) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    job = custom.create_namespaced_custom_object(*BATCH, ns, "jobs", job_body("owner"))
    owner_ref = _owned_by(job, "Job", "batch.volcano.sh/v1alpha1")
    pg = podgroup_body("owner-pg")
    pg["metadata"].update(owner_ref)
    custom.create_namespaced_custom_object(*SCHED, ns, "podgroups", pg)
    pod = pod_body("owner-work-0")
    pod["metadata"].update(owner_ref)
    core.create_namespaced_pod(ns, pod)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "owned", **owner_ref}})
    # Same owner name, other uid: an older incarnation's dependent is not this owner's.
    stranger = copy.deepcopy(owner_ref)
    stranger["ownerReferences"][0]["uid"] = str(uuid.uuid4())
    core.create_namespaced_config_map(ns, {"metadata": {"name": "not-owned", **stranger}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "independent"}})

    custom.delete_namespaced_custom_object(*BATCH, ns, "jobs", "owner")

    wait_gone(lambda: custom.get_namespaced_custom_object(*SCHED, ns, "podgroups", "owner-pg"))
    wait_gone(lambda: core.read_namespaced_pod("owner-work-0", ns))
    wait_gone(lambda: core.read_namespaced_config_map("owned", ns))
    assert sorted(c.metadata.name for c in core.list_namespaced_config_map(ns).items) == ["independent", "not-owned"]


def test_garbage_collection_is_transitive(k8s: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(k8s)
    top = k8s.sanitize_for_serialization(core.create_namespaced_config_map(ns, {"metadata": {"name": "top"}}))
    middle = k8s.sanitize_for_serialization(
        core.create_namespaced_config_map(ns, {"metadata": {"name": "middle", **_owned_by(top, "ConfigMap", "v1")}})
    )
    core.create_namespaced_config_map(ns, {"metadata": {"name": "bottom", **_owned_by(middle, "ConfigMap", "v1")}})
    core.delete_namespaced_config_map("top", ns)
    wait_gone(lambda: core.read_namespaced_config_map("bottom", ns))
    assert core.list_namespaced_config_map(ns).items == []


def test_orphan_propagation_keeps_dependents(k8s: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(k8s)
    owner = k8s.sanitize_for_serialization(core.create_namespaced_config_map(ns, {"metadata": {"name": "o"}}))
    core.create_namespaced_config_map(ns, {"metadata": {"name": "dep", **_owned_by(owner, "ConfigMap", "v1")}})
    core.delete_namespaced_config_map("o", ns, propagation_policy="Orphan")
    time.sleep(0.2)
    orphan = core.read_namespaced_config_map("dep", ns)
    assert orphan.metadata.name == "dep" and not orphan.metadata.owner_references, "the reference goes, as in kube"


def test_foreground_deletion_keeps_the_owner_until_its_dependents_are_gone(k8s: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(k8s)
    owner = k8s.sanitize_for_serialization(core.create_namespaced_config_map(ns, {"metadata": {"name": "fg"}}))
    pod = pod_body("fg-pod")
    pod["metadata"].update(_owned_by(owner, "ConfigMap", "v1"))
    core.create_namespaced_pod(ns, pod)
    core.create_namespaced_pod_binding(
        "fg-pod", ns, {"metadata": {"name": "fg-pod"}, "target": {"kind": "Node", "name": "n1"}}, _preload_content=False
    )
    core.create_namespaced_config_map(ns, {"metadata": {"name": "fg-cm", **_owned_by(owner, "ConfigMap", "v1")}})
    core.delete_namespaced_config_map("fg", ns, propagation_policy="Foreground")
    # The bound pod has its grace period: the owner waits, marked, with kube's finalizer.
    marked = core.read_namespaced_config_map("fg", ns).metadata
    assert marked.deletion_timestamp is not None and marked.finalizers == ["foregroundDeletion"]
    expect_error(404, lambda: core.read_namespaced_config_map("fg-cm", ns), "NotFound")
    assert core.read_namespaced_pod("fg-pod", ns).metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("fg-pod", ns, grace_period_seconds=0)  # what the kubelet does at the end
    wait_gone(lambda: core.read_namespaced_config_map("fg", ns))


def test_an_unknown_propagation_policy_is_refused(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "kept"}})
    expect_error(
        400, lambda: core.delete_namespaced_config_map("kept", ns, propagation_policy="Sideways"), "BadRequest"
    )
    assert core.read_namespaced_config_map("kept", ns).metadata.name == "kept"


def test_default_queue_exists_and_cannot_be_deleted(custom: client.CustomObjectsApi) -> None:
    queue = custom.get_cluster_custom_object(*SCHED, "queues", "default")
    assert queue["spec"]["weight"] >= 1
    status = expect_error(403, lambda: custom.delete_cluster_custom_object(*SCHED, "queues", "default"), "Forbidden")
    assert "default" in status["message"]
    again = custom.get_cluster_custom_object(*SCHED, "queues", "default")
    assert again["metadata"]["uid"] == queue["metadata"]["uid"]


@pytest.mark.parametrize("name", ["default", "kube-system"])
def test_protected_namespace_cannot_be_deleted(core: client.CoreV1Api, name: str) -> None:
    uid = core.read_namespace(name).metadata.uid
    expect_error(403, lambda: core.delete_namespace(name), "Forbidden")
    assert core.read_namespace(name).metadata.uid == uid


def test_deleting_a_namespace_removes_its_objects(k8s: client.ApiClient, ns: str) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    other = unique("keep")
    core.create_namespace({"metadata": {"name": other}})
    for namespace in (ns, other):
        core.create_namespaced_pod(namespace, pod_body("p"))
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
        custom.create_namespaced_custom_object(*BATCH, namespace, "jobs", job_body("j"))
        custom.create_namespaced_custom_object(*SCHED, namespace, "podgroups", podgroup_body("pg"))
    core.delete_namespace(ns)
    wait_gone(lambda: core.read_namespace(ns))
    assert [
        p.metadata.namespace for p in core.list_pod_for_all_namespaces().items if p.metadata.namespace in (ns, other)
    ] == [other]
    assert core.list_namespaced_config_map(ns).items == []
    assert custom.list_namespaced_custom_object(*BATCH, ns, "jobs")["items"] == []
    assert custom.list_namespaced_custom_object(*SCHED, ns, "podgroups")["items"] == []
    assert len(custom.list_namespaced_custom_object(*BATCH, other, "jobs")["items"]) == 1
    # The name is free again, and empty.
    core.create_namespace({"metadata": {"name": ns}})
    assert core.list_namespaced_pod(ns).items == []


def test_pod_update_may_not_change_node_name(core: client.CoreV1Api, ns: str) -> None:
    created = core.create_namespaced_pod(ns, pod_body("nn"))
    body = core.api_client.sanitize_for_serialization(created)
    body["spec"]["nodeName"] = "node-1"
    status = expect_error(422, lambda: core.replace_namespaced_pod("nn", ns, body), "Invalid")
    assert "spec.nodeName" in status["message"]
    expect_error(
        422,
        lambda: core.patch_namespaced_pod("nn", ns, {"spec": {"nodeName": "node-1"}}, _content_type=MERGE),
        "Invalid",
    )
    assert core.read_namespaced_pod("nn", ns).spec.node_name is None
