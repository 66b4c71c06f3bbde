"""The workload controllers against the embedded API server, driven by kubectl as a user drives
them: `create deployment`, `scale`, `set image`, `rollout status`, `rollout undo`, `delete`
(its ReplicaSets and pods go too). A small kubelet stand-in binds pods and marks them Ready."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import KubeError
from lahar.controller.workloads.daemonset import target_node
from lahar.controller.workloads.runner import WorkloadControllers
from tests.support import wait_for

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
NODE = "node-1"


def _ready(api: KubeApi, pod: dict[str, Any]) -> None:
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    if not pod["spec"].get("nodeName"):
        api.bind(namespace, name, target_node(pod) or NODE)  # a daemon pod names its node
    condition = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    status = {"phase": "Running", "conditions": [condition]}
    api.patch(kinds.POD, name, {"status": status}, namespace, subresource="status")


@pytest.fixture
def kubelet(api: KubeApi) -> Iterator[None]:
    """Every pod that is not Ready yet becomes Ready, and a deleted pod's grace period ends."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.1):
            try:
                for pod in api.list(kinds.POD)["items"]:
                    if pod["metadata"].get("deletionTimestamp"):
                        api.delete(kinds.POD, pod["metadata"]["name"], pod["metadata"]["namespace"], 0)
                    elif (pod.get("status") or {}).get("phase") != "Running":
                        _ready(api, pod)
            except KubeError:
                pass  # a pod changed under us: the next round sees it

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(5)


@pytest.fixture
def workloads(api: KubeApi, kubelet: None) -> Iterator[WorkloadControllers]:
    running = WorkloadControllers(api)
    running.start()
    yield running
    running.stop()


def test_a_deployment_rolls_scales_undoes_and_is_collected(
    kubeconfig: Path, api: KubeApi, workloads: WorkloadControllers
) -> None:
    assert KUBECTL is not None

    def kubectl(*args: str) -> str:
        done = subprocess.run(
            [KUBECTL, f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def replica_sets() -> dict[str, dict[str, Any]]:
        return {rs["metadata"]["name"]: rs for rs in api.list(kinds.REPLICA_SET, "default")["items"]}

    def pods() -> list[dict[str, Any]]:
        return [p for p in api.list(kinds.POD, "default")["items"] if not p["metadata"].get("deletionTimestamp")]

    kubectl("create", "deployment", "web", "--image=busybox", "--replicas=3", "--", "sleep", "3600")
    assert "successfully rolled out" in kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    assert len(pods()) == 3
    (first,) = replica_sets()

    kubectl("scale", "deployment", "web", "--replicas=2")
    wait_for(lambda: len(pods()) == 2, timeout=20)

    kubectl("set", "image", "deployment/web", "busybox=busybox:1.36")
    assert "successfully rolled out" in kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    assert {p["spec"]["containers"][0]["image"] for p in pods()} == {"busybox:1.36"}
    assert replica_sets()[first]["spec"]["replicas"] == 0

    kubectl("rollout", "undo", "deployment/web")
    assert "successfully rolled out" in kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    sets = replica_sets()
    assert len(sets) == 2 and sets[first]["spec"]["replicas"] == 2, "the undo reuses the first ReplicaSet"
    assert sets[first]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert {p["spec"]["containers"][0]["image"] for p in pods()} == {"busybox"}
    table = kubectl("get", "deployment", "web", "-o", "wide")
    assert table.split("\n")[1].split()[:4] == ["web", "2/2", "2", "2"]

    kubectl("delete", "deployment", "web")
    wait_for(lambda: not replica_sets() and not api.list(kinds.POD, "default")["items"], timeout=20)
    reasons = {e["reason"] for e in json.loads(kubectl("get", "events", "-o", "json"))["items"]}
    assert {"ScalingReplicaSet", "SuccessfulCreate", "SuccessfulDelete"} <= reasons


def test_a_statefulset_makes_stable_names_scales_and_is_collected(
    kubeconfig: Path, api: KubeApi, workloads: WorkloadControllers
) -> None:
    assert KUBECTL is not None
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {
            "replicas": 3,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }

    def kubectl(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [KUBECTL, f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True, timeout=60, input=stdin
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def names() -> set[str]:
        return {p["metadata"]["name"] for p in api.list(kinds.POD, "default")["items"]}

    kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    wait_for(lambda: names() == {"db-0", "db-1", "db-2"}, timeout=30)
    wait_for(
        lambda: (api.get(kinds.STATEFUL_SET, "db", "default").get("status") or {}).get("readyReplicas") == 3, timeout=20
    )
    assert api.get(kinds.POD, "db-1", "default")["spec"]["hostname"] == "db-1"
    # A template update rolls through the pods, highest ordinal first; rollout status waits for it.
    kubectl("set", "image", "statefulset/db", "c=busybox:2")
    rolled = kubectl("rollout", "status", "statefulset/db", "--timeout=60s")
    assert rolled.strip().splitlines()[-1] == "partitioned roll out complete: 3 new pods have been updated..."
    images = lambda: {p["spec"]["containers"][0]["image"] for p in api.list(kinds.POD, "default")["items"]}  # noqa: E731
    wait_for(lambda: images() == {"busybox:2"}, timeout=20)
    status = api.get(kinds.STATEFUL_SET, "db", "default")["status"]
    assert status["currentRevision"] == status["updateRevision"] and status["updatedReplicas"] == 3
    kubectl("scale", "statefulset", "db", "--replicas=1")
    wait_for(lambda: names() == {"db-0"}, timeout=30)
    kubectl("delete", "statefulset", "db")
    wait_for(lambda: not names(), timeout=20)


def test_a_daemonset_runs_one_pod_per_node_as_nodes_come_and_go(
    kubeconfig: Path, api: KubeApi, workloads: WorkloadControllers
) -> None:
    def node(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"role": "worker"}}}

    for name in ("w1", "w2"):
        api.create(kinds.NODE, node(name))
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"nodeSelector": {"role": "worker"}, "containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    api.create(kinds.DAEMON_SET, manifest, "default")

    def placed() -> list[str]:
        pods = api.list(kinds.POD, "default")["items"]
        return sorted(p["spec"].get("nodeName", "") for p in pods if not p["metadata"].get("deletionTimestamp"))

    wait_for(lambda: placed() == ["w1", "w2"], timeout=30)
    api.create(kinds.NODE, node("w3"))
    wait_for(lambda: placed() == ["w1", "w2", "w3"], timeout=30)
    api.delete(kinds.NODE, "w1")
    wait_for(lambda: placed() == ["w2", "w3"], timeout=30)
    status = lambda: api.get(kinds.DAEMON_SET, "agent", "default").get("status") or {}  # noqa: E731
    wait_for(lambda: status().get("numberReady") == 2 and status().get("desiredNumberScheduled") == 2, timeout=20)
    # A template update replaces the pods node by node; rollout status waits for it.
    assert KUBECTL is not None
    api.patch(kinds.DAEMON_SET, "agent", {"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}}, "default")
    rolled = subprocess.run(
        [KUBECTL, f"--kubeconfig={kubeconfig}", "rollout", "status", "daemonset/agent", "--timeout=60s"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert rolled.stdout.strip().endswith('daemon set "agent" successfully rolled out'), rolled.stderr
    versions = lambda: sorted(p["metadata"]["labels"].get("v", "") for p in api.list(kinds.POD, "default")["items"])  # noqa: E731
    wait_for(lambda: versions() == ["2", "2"], timeout=20)


def test_every_namespace_gets_a_default_service_account(api: KubeApi, workloads: WorkloadControllers) -> None:
    def account() -> dict[str, Any] | None:
        found = [a for a in api.list(kinds.SERVICE_ACCOUNT, "team-a")["items"] if a["metadata"]["name"] == "default"]
        return found[0] if found else None

    api.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    wait_for(lambda: account() is not None, timeout=20)
    first = account()
    assert first is not None
    api.delete(kinds.SERVICE_ACCOUNT, "default", "team-a")
    wait_for(lambda: (account() or first)["metadata"]["uid"] != first["metadata"]["uid"], timeout=20)
    assert any(a["metadata"]["name"] == "default" for a in api.list(kinds.SERVICE_ACCOUNT, "default")["items"])
