"""The OpenAPI documents and server-side field validation (apiserver/openapi.py): kubectl `apply`
validates with no flags and `explain` explains, built-in kinds and the Volcano CRDs alike."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from lahar.api.kinds import CONFIGMAP, JOB, POD, QUEUE
from lahar.apiserver import openapi
from lahar.apiserver.errors import ApiError

Server = Any  # conftest.ServerProcess
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def test_unknown_fields_are_found_in_built_in_kinds_and_custom_resources():
    pod = {
        "metadata": {"name": "p", "labelz": {}},
        "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolice": "x"}], "nodeName": "n"},
    }
    assert openapi.unknown_fields(POD, pod) == ["metadata.labelz", "spec.containers[0].imagePullPolice"]
    # Embedded structs are promoted: a ConfigMapKeySelector's `name` comes from LocalObjectReference.
    env = {"name": "E", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}
    pod["spec"]["containers"][0] = {"name": "c", "env": [env]}
    pod["metadata"] = {"name": "p"}
    assert openapi.unknown_fields(POD, pod) == []
    # Patch directives are not fields.
    assert openapi.unknown_fields(CONFIGMAP, {"data": {"a": "1"}, "$patch": "replace"}) == []
    queue = {"metadata": {"name": "q", "bogus": 1}, "spec": {"weight": 2, "capability": {"cpu": "2"}, "x": 1}}
    assert openapi.unknown_fields(QUEUE, queue) == ["metadata.bogus", "spec.x"]


def test_strict_refuses_warn_reports_ignore_accepts():
    body = {"metadata": {"name": "c"}, "datax": {}}
    with pytest.raises(ApiError) as refused:
        openapi.field_problems(CONFIGMAP, body, "Strict")
    assert refused.value.code == 400 and 'strict decoding error: unknown field "datax"' in str(refused.value.status())
    assert openapi.field_problems(CONFIGMAP, body, "") == ['unknown field "datax"']
    assert openapi.field_problems(CONFIGMAP, body, "Ignore") == []
    with pytest.raises(ApiError):
        openapi.field_problems(CONFIGMAP, body, "Loose")


def test_the_v3_documents_name_each_kind_and_take_field_validation(module_apiserver: Server):
    root = requests.get(f"{module_apiserver.url}/openapi/v3", timeout=5).json()["paths"]
    assert {"api/v1", "apis/batch.volcano.sh/v1alpha1", "apis/coordination.k8s.io/v1"} <= set(root)
    document = requests.get(module_apiserver.url + root["apis/batch.volcano.sh/v1alpha1"]["serverRelativeURL"]).json()
    schemas = document["components"]["schemas"]
    job = schemas["sh.volcano.batch.v1alpha1.Job"]
    assert job["x-kubernetes-group-version-kind"] == [{"group": JOB.group, "version": "v1alpha1", "kind": "Job"}]
    assert "minAvailable" in job["properties"]["spec"]["properties"]
    patch = document["paths"]["/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    v2 = requests.get(f"{module_apiserver.url}/openapi/v2", timeout=5).json()
    assert v2["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"] == {
        "allOf": [{"$ref": "#/definitions/io.k8s.api.core.v1.PodSpec"}]
    }
    gnostic = requests.get(
        f"{module_apiserver.url}/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
        timeout=5,
    )
    assert gnostic.status_code == 406


def test_a_warning_names_unknown_fields_when_the_client_does_not_ask_for_strict(module_apiserver: Server):
    url = f"{module_apiserver.url}/api/v1/namespaces/default/configmaps"
    name = f"w-{uuid.uuid4().hex[:6]}"
    response = requests.post(url, json={"metadata": {"name": name}, "datax": {"a": "1"}}, timeout=5)
    assert response.status_code == 201
    assert response.headers["Warning"] == '299 - "unknown field \\"datax\\""'


@needs_kubectl
def test_kubectl_apply_validates_and_explain_explains(module_apiserver: Server, tmp_path: Path):
    assert KUBECTL is not None
    kubeconfig = module_apiserver.kubeconfig(tmp_path / "kc")

    def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        command = [KUBECTL, f"--kubeconfig={kubeconfig}", *args]
        return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=30)

    name = f"v-{uuid.uuid4().hex[:6]}"
    good = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}
    done = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(good))
    assert done.returncode == 0, done.stderr
    bad = {**good, "metadata": {"name": f"{name}-bad", "namespace": "default"}, "datax": {"a": "1"}}
    refused = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(bad))
    assert refused.returncode == 1 and 'unknown field "datax"' in refused.stderr
    assert kubectl("get", "configmap", f"{name}-bad").returncode == 1, "a refused apply changes nothing"
    explained = kubectl("explain", "pod.spec.nodeName")
    assert explained.returncode == 0 and "FIELD: nodeName <string>" in explained.stdout
    volcano = kubectl("explain", "jobs.spec.minAvailable", "--api-version=batch.volcano.sh/v1alpha1")
    assert volcano.returncode == 0 and "FIELD: minAvailable <integer>" in volcano.stdout
