"""The real `kubectl` against the embedded API server: apply (client-side, with its strategic merge
patch), get with server-side tables, describe and delete. Skipped where kubectl is not installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

Server = Any  # conftest.ServerProcess (conftest is not importable under --import-mode=importlib)

KUBECTL = shutil.which("kubectl")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@pytest.fixture(scope="module")
def kubeconfig(module_apiserver: Server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return module_apiserver.kubeconfig(tmp_path_factory.mktemp("kubectl") / "kc")


@pytest.fixture
def kubectl(kubeconfig: Path) -> Any:
    def run(*args: str, stdin: str | None = None, ok: bool = True) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=20
        )
        if ok:
            assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result

    return run


@pytest.fixture
def ns(kubectl: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)  # a protobuf body, as kubectl sends built-in kinds
    return name


def test_kubectl_create_sends_protobuf_the_server_reads(kubectl: Any, ns: str):
    kubectl("create", "configmap", "settings", "--from-literal=mode=fast", "-n", ns)
    kubectl("create", "secret", "generic", "token", "--from-literal=key=value", "-n", ns)
    configmap = json.loads(kubectl("get", "configmap", "settings", "-n", ns, "-o", "json").stdout)
    assert configmap["data"] == {"mode": "fast"}
    secret = json.loads(kubectl("get", "secret", "token", "-n", ns, "-o", "json").stdout)
    assert secret["data"] == {"key": "dmFsdWU="} and secret["type"] == "Opaque"
    again = kubectl("create", "configmap", "settings", "--from-literal=mode=slow", "-n", ns, ok=False)
    assert again.returncode == 1 and 'configmaps "settings" already exists' in again.stderr


def table(output: str) -> list[dict[str, str]]:
    """`kubectl get` output as rows keyed by column header, cut at the headers' offsets (a cell
    may be empty, as a custom resource's printer column with nothing at its path is)."""
    lines = [line for line in output.splitlines() if line.strip()]
    found = list(re.finditer(r"\S+(?: \S+)*", lines[0]))  # headers may hold one space: NOMINATED NODE
    starts, headers = [m.start() for m in found], [m.group() for m in found]
    bounds = [*starts[1:], None]
    return [
        {header: line[start:end].strip() for header, start, end in zip(headers, starts, bounds, strict=True)}
        for line in lines[1:]
    ]


def pod_manifest(name: str, image: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "main", "image": image}, {"name": "sidecar", "image": "busybox:1"}]},
        }
    )


def test_apply_example_mpi_job_and_get_it(kubectl: Any, ns: str) -> None:
    applied = kubectl("apply", "--validate=false", "-n", ns, "-f", str(EXAMPLES / "mpi-job.yaml"))
    assert "job.batch.volcano.sh/lm-mpi-job created" in applied.stdout
    for resource in ("vcjob", "jobs.batch.volcano.sh", "vj"):
        rows = table(kubectl("get", resource, "-n", ns).stdout)
        assert [r["NAME"] for r in rows] == ["lm-mpi-job"], resource
        assert rows[0]["MINAVAILABLE"] == "3"
    wide = table(kubectl("get", "vcjob", "-n", ns, "-o", "wide").stdout)
    assert wide[0]["QUEUE"] == "default"
    stored = json.loads(kubectl("get", "vcjob", "lm-mpi-job", "-n", ns, "-o", "json").stdout)
    assert stored["spec"]["maxRetry"] == 3
    assert "kubectl.kubernetes.io/last-applied-configuration" in stored["metadata"]["annotations"]
    # Server defaults inside spec.tasks make kubectl's three-way merge patch resend the task list
    # (as against Volcano's webhook), so "configured" is fine; the job itself must not change.
    again = kubectl("apply", "--validate=false", "-n", ns, "-f", str(EXAMPLES / "mpi-job.yaml"))
    assert "unchanged" in again.stdout or "configured" in again.stdout
    reapplied = json.loads(kubectl("get", "vcjob", "lm-mpi-job", "-n", ns, "-o", "json").stdout)
    assert reapplied["spec"] == stored["spec"]
    assert reapplied["metadata"]["generation"] == stored["metadata"]["generation"] == 1


def test_get_pods_wide(kubectl: Any, ns: str, module_apiserver: Server) -> None:
    import requests

    kubectl("apply", "--validate=false", "-n", ns, "-f", "-", stdin=pod_manifest("shown", "busybox:1"))
    kubectl("apply", "--validate=false", "-n", ns, "-f", "-", stdin=pod_manifest("placed", "busybox:1"))
    response = requests.post(
        f"{module_apiserver.url}/api/v1/namespaces/{ns}/pods/placed/binding",
        timeout=5,
        json={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "placed"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-9"},
        },
    )
    assert response.status_code == 201
    rows = {r["NAME"]: r for r in table(kubectl("get", "pods", "-n", ns, "-o", "wide").stdout)}
    assert set(rows) == {"shown", "placed"}
    assert rows["placed"]["NODE"] == "node-9"
    assert rows["shown"]["NODE"] == "<none>"
    assert rows["shown"]["STATUS"] == "Pending"
    assert rows["shown"]["READY"] == "0/2"
    names = kubectl("get", "pods", "-n", ns, "-o", "name", "--field-selector", "spec.nodeName=node-9").stdout
    assert names.split() == ["pod/placed"]
    labelled = kubectl("get", "pods", "-n", ns, "-l", "app=web", "-o", "name").stdout
    assert sorted(labelled.split()) == ["pod/placed", "pod/shown"]


def test_apply_twice_with_a_changed_image(kubectl: Any, ns: str) -> None:
    first = kubectl("apply", "--validate=false", "-n", ns, "-f", "-", stdin=pod_manifest("web", "nginx:1.25"))
    assert "pod/web created" in first.stdout
    before = json.loads(kubectl("get", "pod", "web", "-n", ns, "-o", "json").stdout)
    second = kubectl("apply", "--validate=false", "-n", ns, "-f", "-", stdin=pod_manifest("web", "nginx:1.27"))
    assert "pod/web configured" in second.stdout
    after = json.loads(kubectl("get", "pod", "web", "-n", ns, "-o", "json").stdout)
    assert [(c["name"], c["image"]) for c in after["spec"]["containers"]] == [
        ("main", "nginx:1.27"),
        ("sidecar", "busybox:1"),
    ]
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "apply must patch, not recreate"
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    applied = json.loads(after["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert applied["spec"]["containers"][0]["image"] == "nginx:1.27"


def test_apply_a_changed_job(kubectl: Any, ns: str) -> None:
    manifest = yaml.safe_load((EXAMPLES / "mpi-job.yaml").read_text())
    kubectl("apply", "--validate=false", "-n", ns, "-f", "-", stdin=yaml.safe_dump(manifest))
    manifest["spec"]["maxRetry"] = 5
    changed = kubectl("apply", "--validate=false", "-n", ns, "-f", "-", stdin=yaml.safe_dump(manifest))
    assert "job.batch.volcano.sh/lm-mpi-job configured" in changed.stdout
    stored = json.loads(kubectl("get", "vcjob", "lm-mpi-job", "-n", ns, "-o", "json").stdout)
    assert stored["spec"]["maxRetry"] == 5
    assert stored["metadata"]["generation"] == 2


def test_apply_an_invalid_job_shows_the_field(kubectl: Any, ns: str) -> None:
    manifest = yaml.safe_load((EXAMPLES / "mpi-job.yaml").read_text())
    manifest["spec"]["minAvailable"] = 10
    refused = kubectl("apply", "--validate=false", "-n", ns, "-f", "-", stdin=yaml.safe_dump(manifest), ok=False)
    assert refused.returncode != 0
    assert "spec.minAvailable" in refused.stderr
    assert kubectl("get", "vcjob", "-n", ns, "-o", "name").stdout.strip() == ""


def test_describe_pod(kubectl: Any, ns: str) -> None:
    kubectl("apply", "--validate=false", "-n", ns, "-f", "-", stdin=pod_manifest("described", "nginx:1.25"))
    described = kubectl("describe", "pod", "described", "-n", ns).stdout
    assert "Name:" in described and "described" in described
    assert f"Namespace:    {ns}" in described
    assert "nginx:1.25" in described
    assert "app=web" in described
    assert "Pending" in described


def test_delete(kubectl: Any, ns: str) -> None:
    kubectl("apply", "--validate=false", "-n", ns, "-f", str(EXAMPLES / "mpi-job.yaml"))
    kubectl("apply", "--validate=false", "-n", ns, "-f", "-", stdin=pod_manifest("doomed", "busybox:1"))
    deleted = kubectl("delete", "-n", ns, "-f", str(EXAMPLES / "mpi-job.yaml"))
    assert "lm-mpi-job" in deleted.stdout and "deleted" in deleted.stdout
    assert 'pod "doomed" deleted' in kubectl("delete", "pod", "doomed", "-n", ns).stdout
    assert kubectl("get", "vcjob,pods", "-n", ns, "-o", "name").stdout.strip() == ""
    missing = kubectl("get", "vcjob", "lm-mpi-job", "-n", ns, ok=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_get_queues_shows_default(kubectl: Any) -> None:
    rows = {r["NAME"]: r for r in table(kubectl("get", "queues").stdout)}
    assert "default" in rows
    assert rows["default"]["WEIGHT"] == "1"
    assert rows["default"]["STATE"] == "Open"


def test_apply_example_queues(kubectl: Any) -> None:
    kubectl("apply", "--validate=false", "-f", str(EXAMPLES / "queues.yaml"))
    rows = {r["NAME"]: r for r in table(kubectl("get", "queues").stdout)}
    assert {"default", "production", "research"} <= set(rows)
    assert rows["production"]["WEIGHT"] == "2"


def test_api_resources(kubectl: Any) -> None:
    output = kubectl("api-resources").stdout
    rows = [line.split() for line in output.splitlines()[1:]]
    by_name = {r[0]: r for r in rows}
    assert "queues" in by_name and "false" in by_name["queues"]
    assert "podgroups" in by_name and "true" in by_name["podgroups"]
    assert "vcjob" in by_name["jobs"][1]


def test_server_side_apply_creates_then_changes(kubectl: Any, ns: str) -> None:
    def manifest(value: str) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "ssa", "namespace": ns},
                "data": {"a": value},
            }
        )

    assert "serverside-applied" in kubectl("apply", "--server-side", "-f", "-", stdin=manifest("1")).stdout
    kubectl("apply", "--server-side", "-f", "-", stdin=manifest("2"))
    assert kubectl("get", "configmap", "ssa", "-n", ns, "-o", "jsonpath={.data.a}").stdout == "2"
