"""Discovery documents of the embedded API server, read through the official client where it has a
typed call (CoreApi, CoreV1Api, ApisApi, VersionApi) and as raw JSON where it has none."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from kubernetes import client

Server = Any  # conftest.ServerProcess (conftest is not importable under --import-mode=importlib)

VOLCANO_GROUPS = {"batch.volcano.sh": "v1alpha1", "scheduling.volcano.sh": "v1beta1"}


@pytest.fixture
def apiserver(module_apiserver: Server) -> Server:
    return module_apiserver  # discovery reads change nothing: one server serves the module


@pytest.fixture
def k8s(module_k8s: client.ApiClient) -> client.ApiClient:
    return module_k8s


def _get(apiserver: Any, path: str) -> requests.Response:
    return requests.get(apiserver.url + path, timeout=5)


def _resources(apiserver: Any, group_version: str) -> dict[str, dict[str, Any]]:
    path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    response = _get(apiserver, path)
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["kind"] == "APIResourceList"
    assert document["groupVersion"] == group_version
    return {r["name"]: r for r in document["resources"]}


def test_core_api_versions(k8s: client.ApiClient) -> None:
    versions = client.CoreApi(k8s).get_api_versions()
    assert versions.versions == ["v1"]
    assert versions.server_address_by_client_cidrs, "kubectl needs serverAddressByClientCIDRs"


def test_core_v1_resources_and_pod_subresources(k8s: client.ApiClient) -> None:
    listing = client.CoreV1Api(k8s).get_api_resources()
    assert listing.group_version == "v1"
    resources = {r.name: r for r in listing.resources}
    for name in ("pods", "nodes", "namespaces", "events", "services", "configmaps"):
        assert name in resources, f"{name} missing from /api/v1"
    assert resources["pods"].namespaced is True
    assert resources["pods"].kind == "Pod"
    assert {"create", "get", "list", "watch", "update", "patch", "delete", "deletecollection"} <= set(
        resources["pods"].verbs
    )
    assert "po" in (resources["pods"].short_names or [])
    assert resources["nodes"].namespaced is False
    assert resources["namespaces"].namespaced is False
    assert resources["events"].namespaced is True
    assert resources["configmaps"].namespaced is True
    for sub in ("pods/binding", "pods/eviction", "pods/status"):
        assert sub in resources, f"{sub} missing from /api/v1"
        assert resources[sub].namespaced is True
    assert resources["pods/binding"].kind == "Binding"
    assert "create" in resources["pods/binding"].verbs
    assert resources["pods/eviction"].kind == "Eviction"
    assert resources["pods/eviction"].group == "policy"
    assert {"get", "update", "patch"} <= set(resources["pods/status"].verbs)


def test_group_list_has_every_served_group(k8s: client.ApiClient) -> None:
    groups = {g.name: g for g in client.ApisApi(k8s).get_api_versions().groups}
    assert {"policy", "scheduling.k8s.io", "batch.volcano.sh", "scheduling.volcano.sh"} <= set(groups)
    assert groups["policy"].preferred_version.group_version == "policy/v1"
    assert groups["scheduling.k8s.io"].preferred_version.group_version == "scheduling.k8s.io/v1"
    for name, version in VOLCANO_GROUPS.items():
        assert groups[name].preferred_version.version == version
        assert f"{name}/{version}" in [v.group_version for v in groups[name].versions]


@pytest.mark.parametrize("group", ["policy", "scheduling.k8s.io", "batch.volcano.sh", "scheduling.volcano.sh"])
def test_single_group_document(apiserver: Any, group: str) -> None:
    response = _get(apiserver, f"/apis/{group}")
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["kind"] == "APIGroup"
    assert document["name"] == group
    assert document["preferredVersion"]["groupVersion"].startswith(f"{group}/")


@pytest.mark.parametrize(
    ("group_version", "resource", "kind", "namespaced"),
    [
        ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
        ("scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", False),
        ("batch.volcano.sh/v1alpha1", "jobs", "Job", True),
        ("scheduling.volcano.sh/v1beta1", "podgroups", "PodGroup", True),
        ("scheduling.volcano.sh/v1beta1", "queues", "Queue", False),
    ],
)
def test_group_version_resource_lists(
    apiserver: Any, group_version: str, resource: str, kind: str, namespaced: bool
) -> None:
    resources = _resources(apiserver, group_version)
    assert resource in resources
    assert resources[resource]["kind"] == kind
    assert resources[resource]["namespaced"] is namespaced
    assert "watch" in resources[resource]["verbs"]


@pytest.mark.parametrize(
    ("group_version", "subresource"),
    [
        ("batch.volcano.sh/v1alpha1", "jobs/status"),
        ("scheduling.volcano.sh/v1beta1", "podgroups/status"),
        ("scheduling.volcano.sh/v1beta1", "queues/status"),
    ],
)
def test_volcano_status_subresources_listed(apiserver: Any, group_version: str, subresource: str) -> None:
    resources = _resources(apiserver, group_version)
    assert subresource in resources
    assert resources[subresource]["namespaced"] is (subresource != "queues/status")


def test_vcjob_short_name(apiserver: Any) -> None:
    assert "vcjob" in _resources(apiserver, "batch.volcano.sh/v1alpha1")["jobs"].get("shortNames", [])


def test_version(k8s: client.ApiClient) -> None:
    info = client.VersionApi(k8s).get_code()
    assert info.major == "1"
    assert info.minor.isdigit()
    assert info.git_version.startswith(f"v1.{info.minor}")
    assert info.platform


@pytest.mark.parametrize(
    "path",
    [
        "/nothing",
        "/api/v2",
        "/api/v1/widgets",
        "/apis/example.com/v1",
        "/apis/batch.volcano.sh/v9",
        "/apis/batch.volcano.sh/v1alpha1/namespaces/default/widgets",
        "/api/v1/namespaces/default/pods/p/nosuchsubresource",
    ],
)
def test_unknown_path_is_404_status(apiserver: Any, path: str) -> None:
    response = _get(apiserver, path)
    assert response.status_code == 404
    status = response.json()
    assert status["kind"] == "Status"
    assert status["status"] == "Failure"
    assert status["code"] == 404
    assert status["reason"] == "NotFound"


def test_unknown_group_through_official_client_raises_404(k8s: client.ApiClient) -> None:
    with pytest.raises(client.ApiException) as caught:
        client.CustomObjectsApi(k8s).list_cluster_custom_object("example.com", "v1", "widgets")
    assert caught.value.status == 404
