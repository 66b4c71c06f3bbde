"""The embedded API server keeps its objects in SQLite: what was answered with a 2xx survives a
clean stop (SIGTERM) and a crash (SIGKILL), resourceVersions carry on above the old ones after a
restart, and a pod's pending grace period still ends.

Watch history is memory-only: after a restart a watch can resume from the restart's revision on,
and a watch from any older resourceVersion gets 410 Gone (its client re-lists), the way an etcd
compaction answers."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client, watch
from kubernetes.client import ApiException

Server = Any  # conftest.ServerProcess (conftest is not importable under --import-mode=importlib)

BATCH = ("batch.volcano.sh", "v1alpha1")
SCHED = ("scheduling.volcano.sh", "v1beta1")


@pytest.fixture
def server(tmp_path: Path, server_process: type[Server]) -> Iterator[Server]:
    proc = server_process(tmp_path / "data")
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()


def api(server: Server) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = server.url
    return client.ApiClient(configuration)


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": 1,
            "tasks": [
                {
                    "name": "t",
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "busybox:1"}]}},
                }
            ],
        },
    }


def snapshot(server: Server) -> dict[str, dict[str, Any]]:
    """Every object the tests create, as raw JSON, by kind/namespace/name."""
    found: dict[str, dict[str, Any]] = {}
    for path in (
        "/api/v1/pods",
        "/api/v1/configmaps",
        "/api/v1/namespaces",
        "/api/v1/nodes",
        "/apis/batch.volcano.sh/v1alpha1/jobs",
        "/apis/scheduling.volcano.sh/v1beta1/queues",
        "/apis/scheduling.volcano.sh/v1beta1/podgroups",
    ):
        for item in requests.get(server.url + path, timeout=5).json()["items"]:
            meta = item["metadata"]
            found[f"{item['kind']}/{meta.get('namespace', '')}/{meta['name']}"] = item
    return found


def revision(server: Server) -> int:
    return int(requests.get(f"{server.url}/api/v1/namespaces", timeout=5).json()["metadata"]["resourceVersion"])


def populate(server: Server) -> None:
    with api(server) as k8s:
        core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
        core.create_namespace({"metadata": {"name": "team", "labels": {"owner": "me"}}})
        core.create_namespaced_config_map("team", {"metadata": {"name": "settings"}, "data": {"k": "v"}})
        core.patch_namespaced_config_map("settings", "team", {"data": {"k": "v2"}})
        core.create_node({"metadata": {"name": "node-1"}, "status": {"capacity": {"cpu": "4"}}})
        core.create_namespaced_pod(
            "team", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}
        )
        core.create_namespaced_pod_binding(
            "p",
            "team",
            client.V1Binding(
                metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(kind="Node", name="node-1")
            ),
            _preload_content=False,
        )
        custom.create_namespaced_custom_object(*BATCH, "team", "jobs", job("train"))
        custom.patch_namespaced_custom_object_status(
            *BATCH, "team", "jobs", "train", {"status": {"state": {"phase": "Running"}}}
        )
        custom.create_cluster_custom_object(*SCHED, "queues", {"metadata": {"name": "research"}, "spec": {"weight": 3}})
        core.create_namespaced_config_map("team", {"metadata": {"name": "doomed"}})
        core.delete_namespaced_config_map("doomed", "team")


def test_objects_and_versions_survive_a_restart(server: Server) -> None:
    populate(server)
    before, rev = snapshot(server), revision(server)
    for sig in (signal.SIGTERM, signal.SIGKILL):  # a clean stop, then a crash
        server.stop(sig)
        server.start()
        after = snapshot(server)
        assert after == before, sig  # every object, byte for byte: uids, resourceVersions, status, bindings
        assert revision(server) == rev
    assert after["Job/team/train"]["status"]["state"]["phase"] == "Running"
    assert after["Pod/team/p"]["spec"]["nodeName"] == "node-1"
    assert after["ConfigMap/team/settings"]["data"] == {"k": "v2"}
    assert "ConfigMap/team/doomed" not in after
    assert len([k for k in after if k == "Queue//default"]) == 1, "the default queue must not be duplicated"


def test_object_answered_just_before_sigkill_survives(server: Server) -> None:
    answers = []
    for i in range(20):
        response = requests.post(
            f"{server.url}/api/v1/namespaces/default/configmaps",
            json={"metadata": {"name": f"last-{i}"}, "data": {"i": str(i)}},
            timeout=5,
        )
        assert response.status_code == 201
        answers.append(response.json())
    assert server.proc is not None
    server.proc.kill()  # at once after the last 2xx, no clean shutdown
    server.proc.wait()
    server.start()
    for answer in answers:
        name = answer["metadata"]["name"]
        stored = requests.get(f"{server.url}/api/v1/namespaces/default/configmaps/{name}", timeout=5)
        assert stored.status_code == 200, name
        assert stored.json()["metadata"]["uid"] == answer["metadata"]["uid"]
        assert stored.json()["metadata"]["resourceVersion"] == answer["metadata"]["resourceVersion"]


def test_resource_versions_continue_above_the_old_ones(server: Server) -> None:
    """Above every stored object's and above the last delete's (a delete moves the revision on too,
    and populate() ends with one)."""
    populate(server)
    highest = max(int(o["metadata"]["resourceVersion"]) for o in snapshot(server).values())
    rev = revision(server)
    assert rev > highest, "the last write was a delete: the revision is above every stored object"
    server.stop(signal.SIGKILL)
    server.start()
    assert revision(server) == rev
    with api(server) as k8s:
        core = client.CoreV1Api(k8s)
        created = core.create_namespaced_config_map("team", {"metadata": {"name": "new"}})
        assert int(created.metadata.resource_version) > rev
        updated = core.patch_namespaced_config_map("settings", "team", {"data": {"k": "v3"}})
        assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
        # Stale writers from before the restart still get 409: their version is not the stored one.
        old = snapshot(server)["ConfigMap/team/new"]
        core.patch_namespaced_config_map("new", "team", {"data": {"x": "1"}})
        with pytest.raises(ApiException) as caught:
            core.replace_namespaced_config_map("new", "team", old)
        assert caught.value.status == 409


def test_watch_from_before_restart_is_410(server: Server) -> None:
    populate(server)
    old = str(revision(server) - 2)
    server.restart()
    with api(server) as k8s:
        core = client.CoreV1Api(k8s)
        with pytest.raises(ApiException) as caught:
            for _ in watch.Watch().stream(
                core.list_namespaced_config_map, "team", resource_version=old, timeout_seconds=1
            ):
                pass
        assert caught.value.status == 410
        with requests.get(
            f"{server.url}/api/v1/namespaces/team/configmaps",
            stream=True,
            timeout=5,
            params={"watch": "1", "resourceVersion": old, "timeoutSeconds": "2"},
        ) as response:
            first = json.loads(next(line for line in response.iter_lines() if line))
        assert first["type"] == "ERROR" and first["object"]["code"] == 410
        # From the restart's revision on, watching works: nothing was lost between the two.
        current = core.list_namespaced_config_map("team").metadata.resource_version
        core.create_namespaced_config_map("team", {"metadata": {"name": "after"}})
        stream = watch.Watch()
        seen = []
        for event in stream.stream(
            core.list_namespaced_config_map, "team", resource_version=current, timeout_seconds=1
        ):
            seen.append((event["type"], event["object"].metadata.name))
            stream.stop()
        assert seen == [("ADDED", "after")]


def test_pending_grace_period_ends_after_restart(server: Server) -> None:
    with api(server) as k8s:
        core = client.CoreV1Api(k8s)
        core.create_namespaced_pod(
            "default", {"metadata": {"name": "slow"}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}
        )
        core.create_namespaced_pod_binding(
            "slow",
            "default",
            client.V1Binding(
                metadata=client.V1ObjectMeta(name="slow"), target=client.V1ObjectReference(kind="Node", name="n")
            ),
            _preload_content=False,
        )
        core.delete_namespaced_pod("slow", "default", grace_period_seconds=1)
    server.stop(signal.SIGKILL)
    server.start()
    deadline = time.monotonic() + 3
    with api(server) as k8s:
        core = client.CoreV1Api(k8s)
        while True:
            try:
                pod = core.read_namespaced_pod("slow", "default")
            except ApiException as exc:
                assert exc.status == 404
                break
            assert pod.metadata.deletion_timestamp is not None
            assert time.monotonic() < deadline, "the terminating pod was never removed after the restart"
            time.sleep(0.1)


def test_fsync_full_mode_persists(tmp_path: Path, server_process: type[Server]) -> None:
    server = server_process(tmp_path / "data", extra_args=("--fsync", "full"))
    try:
        server.start()
        requests.post(
            f"{server.url}/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "durable"}}, timeout=5
        ).raise_for_status()
        server.stop(signal.SIGKILL)
        server.start()
        assert requests.get(f"{server.url}/api/v1/namespaces/default/configmaps/durable", timeout=5).status_code == 200
    finally:
        server.stop()


def test_sigterm_with_an_open_watch_stops_promptly(server: Server) -> None:
    """Components keep watches open for up to 30 minutes; Ctrl-C / SIGTERM must still stop the
    server at once (ending those streams), not wait for them."""
    import threading

    ended = threading.Event()

    def watch_forever() -> None:
        try:
            with requests.get(
                f"{server.url}/api/v1/pods", params={"watch": "true"}, stream=True, timeout=30
            ) as response:
                for _ in response.iter_lines():
                    pass
        except requests.RequestException:
            pass
        ended.set()

    watcher = threading.Thread(target=watch_forever, daemon=True)
    watcher.start()
    time.sleep(0.3)  # the watch is established
    assert server.proc is not None
    proc = server.proc
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(3)
    except subprocess.TimeoutExpired:
        proc.kill()  # do not leave the fixture waiting on it
        proc.wait()
        pytest.fail("the server did not stop within 3 s of SIGTERM while a watch was open")
    assert time.monotonic() - began < 3
    assert code == 0
    assert ended.wait(2), "the open watch stream should end when the server stops"
