"""KubeApi against the embedded server: CRUD on core and Volcano kinds, error mapping, binding,
eviction, watches."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lahar.api.kinds import CONFIGMAP, NODE, POD, PODGROUP, QUEUE
from lahar.client.api import KubeApi, Obj
from lahar.client.connect import new_api_client
from lahar.client.errors import (
    AlreadyExists,
    ApiUnavailable,
    BadRequest,
    Conflict,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    TooManyRequests,
    error_from_status,
)
from lahar.client.kubeconfig import embedded_kubeconfig

ServerProcess = Any  # tests/conftest.py's class; test modules cannot import it (--import-mode=importlib)
PodFactory = Callable[..., Obj]


def configmap(name: str, value: str = "1") -> Obj:
    return {"metadata": {"name": name}, "data": {"value": value}}


def unused_local_url() -> str:
    """A loopback URL nothing listens on (the port was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- CRUD ----------------------------------------------------------------------------------------


def test_pod_round_trip(api: KubeApi, pod: PodFactory) -> None:
    created = api.create(POD, pod("web", {"app": "web"}))
    assert created["metadata"]["uid"] and created["metadata"]["namespace"] == "default"
    assert api.get(POD, "web", "default")["metadata"]["uid"] == created["metadata"]["uid"]

    api.create(POD, pod("other", {"app": "other"}))
    selected = api.list(POD, "default", label_selector="app=web")
    assert [p["metadata"]["name"] for p in selected["items"]] == ["web"]
    assert int(selected["metadata"]["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])

    created["metadata"]["labels"]["tier"] = "front"
    updated = api.update(POD, created)
    assert updated["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])

    patched = api.patch(POD, "web", {"metadata": {"annotations": {"note": "merged"}}}, "default")
    assert patched["metadata"]["annotations"] == {"note": "merged"}
    strategic = api.patch(POD, "web", {"metadata": {"labels": {"tier": None}}}, "default", patch_type="strategic")
    assert strategic["metadata"]["labels"] == {"app": "web"}

    strategic["status"] = {"phase": "Running"}
    assert api.update_status(POD, strategic)["status"]["phase"] == "Running"
    status_patch = api.patch(POD, "web", {"status": {"phase": "Succeeded"}}, "default", subresource="status")
    assert status_patch["status"]["phase"] == "Succeeded"

    api.delete(POD, "web", "default", grace_period_seconds=0)
    with pytest.raises(NotFound):
        api.get(POD, "web", "default")
    assert [p["metadata"]["name"] for p in api.list(POD, "default")["items"]] == ["other"]


def test_queue_round_trip_cluster_scoped(api: KubeApi) -> None:
    created = api.create(QUEUE, {"metadata": {"name": "research"}, "spec": {"weight": 2}})
    assert "namespace" not in created["metadata"]
    assert api.get(QUEUE, "research")["spec"]["weight"] == 2
    names = [q["metadata"]["name"] for q in api.list_all(QUEUE)["items"]]
    assert names == ["default", "research"]

    patched = api.patch(QUEUE, "research", [{"op": "replace", "path": "/spec/weight", "value": 5}], patch_type="json")
    assert patched["spec"]["weight"] == 5
    patched["status"] = {"state": "Closed"}
    assert api.update_status(QUEUE, patched)["status"]["state"] == "Closed"

    api.delete(QUEUE, "research")
    with pytest.raises(NotFound):
        api.get(QUEUE, "research")


def test_podgroup_round_trip(api: KubeApi) -> None:
    group = {"metadata": {"name": "gang"}, "spec": {"minMember": 3, "queue": "default"}}
    created = api.create(PODGROUP, group, namespace="default")
    assert created["apiVersion"] == "scheduling.volcano.sh/v1beta1" and created["kind"] == "PodGroup"
    created["status"] = {"phase": "Inqueue"}
    api.update_status(PODGROUP, created)
    current = api.get(PODGROUP, "gang", "default")
    assert current["status"]["phase"] == "Inqueue" and current["spec"]["minMember"] == 3
    api.patch(PODGROUP, "gang", {"spec": {"minMember": 2}}, "default")
    assert api.get(PODGROUP, "gang", "default")["spec"]["minMember"] == 2
    api.delete(PODGROUP, "gang", "default")
    assert api.list(PODGROUP, "default")["items"] == []


def test_pagination_and_list_all(api: KubeApi) -> None:
    for index in range(5):
        api.create(CONFIGMAP, configmap(f"cm-{index}"), namespace="default")
    first = api.list(CONFIGMAP, "default", limit=2)
    assert [c["metadata"]["name"] for c in first["items"]] == ["cm-0", "cm-1"]
    second = api.list(CONFIGMAP, "default", limit=2, continue_token=first["metadata"]["continue"])
    assert [c["metadata"]["name"] for c in second["items"]] == ["cm-2", "cm-3"]

    everything = api.list_all(CONFIGMAP, "default", limit=2)
    assert [c["metadata"]["name"] for c in everything["items"]] == [f"cm-{i}" for i in range(5)]
    assert "continue" not in everything["metadata"]
    assert everything["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_namespaced_kind_needs_a_namespace(api: KubeApi) -> None:
    with pytest.raises(ValueError, match="pods are namespaced"):
        api.get(POD, "web")


# -- errors --------------------------------------------------------------------------------------


def test_missing_object_is_not_found(api: KubeApi) -> None:
    with pytest.raises(NotFound) as caught:
        api.get(POD, "ghost", "default")
    assert (caught.value.status, caught.value.reason) == (404, "NotFound")
    assert caught.value.message == 'pods "ghost" not found'


def test_creating_twice_is_already_exists(api: KubeApi, pod: PodFactory) -> None:
    api.create(POD, pod("twin"))
    with pytest.raises(AlreadyExists) as caught:
        api.create(POD, pod("twin"))
    assert (caught.value.status, caught.value.reason) == (409, "AlreadyExists")
    assert not isinstance(caught.value, Conflict)


def test_stale_update_is_conflict(api: KubeApi, pod: PodFactory) -> None:
    created = api.create(POD, pod("racer"))
    api.patch(POD, "racer", {"metadata": {"labels": {"moved": "yes"}}}, "default")
    created["metadata"]["labels"] = {"stale": "yes"}
    with pytest.raises(Conflict) as caught:
        api.update(POD, created)
    assert (caught.value.status, caught.value.reason) == (409, "Conflict")
    assert "has been modified" in caught.value.message
    assert api.get(POD, "racer", "default")["metadata"]["labels"] == {"moved": "yes"}


def test_invalid_object_is_invalid_with_causes(api: KubeApi, pod: PodFactory) -> None:
    with pytest.raises(Invalid) as caught:
        api.create(POD, pod("Not_A_Valid_Name"))
    assert caught.value.status == 422
    assert "metadata.name" in [cause["field"] for cause in caught.value.causes]


def test_bad_patch_type_is_refused_before_sending(api: KubeApi) -> None:
    with pytest.raises(ValueError, match="patch_type"):
        api.patch(POD, "x", {}, "default", patch_type="apply")
    with pytest.raises(ValueError, match="list of operations"):
        api.patch(POD, "x", {"spec": {}}, "default", patch_type="json")


def test_bad_selector_is_bad_request(api: KubeApi) -> None:
    with pytest.raises(BadRequest) as caught:
        api.list(POD, "default", label_selector="app in (unclosed")
    assert caught.value.status == 400


def test_unreachable_server_is_api_unavailable(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(embedded_kubeconfig(unused_local_url()))
    unreachable = KubeApi(new_api_client(str(kubeconfig)), timeout=2)
    started = time.monotonic()
    with pytest.raises(ApiUnavailable) as caught:
        unreachable.get(POD, "x", "default")
    assert time.monotonic() - started < 5
    assert isinstance(caught.value, KubeError) and caught.value.status == 0
    assert "refused" in caught.value.message.lower()


def test_error_from_status_prefers_the_reason() -> None:
    assert type(error_from_status(409, {"kind": "Status", "reason": "AlreadyExists", "message": "m"})) is AlreadyExists
    assert type(error_from_status(409, b'{"kind":"Status","reason":"Conflict","code":409}')) is Conflict
    assert type(error_from_status(410, {"kind": "Status", "reason": "Expired", "code": 410})) is Gone
    assert type(error_from_status(429, b"")) is TooManyRequests
    plain = error_from_status(502, b"<html>bad gateway</html>")
    assert type(plain) is KubeError and plain.status == 502 and "bad gateway" in plain.message


# -- binding and eviction ------------------------------------------------------------------------


def test_bind_twice_is_conflict(api: KubeApi, pod: PodFactory) -> None:
    api.create(NODE, {"metadata": {"name": "node-a"}})
    api.create(NODE, {"metadata": {"name": "node-b"}})
    uid = api.create(POD, pod("job-0"))["metadata"]["uid"]
    status = api.bind("default", "job-0", "node-a", uid=uid)
    assert status["status"] == "Success"
    assert api.get(POD, "job-0", "default")["spec"]["nodeName"] == "node-a"
    with pytest.raises(Conflict) as caught:
        api.bind("default", "job-0", "node-b")
    assert "already assigned" in caught.value.message
    assert api.get(POD, "job-0", "default")["spec"]["nodeName"] == "node-a"


def test_bind_with_another_uid_is_conflict(api: KubeApi, pod: PodFactory) -> None:
    api.create(POD, pod("job-1"))
    with pytest.raises(Conflict):
        api.bind("default", "job-1", "node-a", uid="not-the-pods-uid")
    assert not api.get(POD, "job-1", "default")["spec"].get("nodeName")


def test_evict_checks_the_uid_then_deletes(api: KubeApi, pod: PodFactory) -> None:
    uid = api.create(POD, pod("victim"))["metadata"]["uid"]
    with pytest.raises(Conflict):
        api.evict("default", "victim", uid="someone-else")
    assert api.evict("default", "victim", uid=uid, grace_period_seconds=0)["status"] == "Success"
    with pytest.raises(NotFound):
        api.get(POD, "victim", "default")


def test_delete_with_stale_uid_precondition_is_conflict(api: KubeApi, pod: PodFactory) -> None:
    api.create(POD, pod("keep"))
    with pytest.raises(Conflict, match="Precondition failed"):
        api.delete(POD, "keep", "default", uid="old-incarnation")
    assert api.get(POD, "keep", "default")


# -- watch ---------------------------------------------------------------------------------------


def test_watch_yields_changes_in_order(api: KubeApi, pod: PodFactory) -> None:
    start = api.list(POD, "default")["metadata"]["resourceVersion"]
    with api.watch(POD, "default", resource_version=start, timeout_seconds=3, allow_bookmarks=False) as events:
        created = api.create(POD, pod("watched"))
        api.patch(POD, "watched", {"metadata": {"labels": {"step": "2"}}}, "default")
        api.delete(POD, "watched", "default", grace_period_seconds=0)
        seen = []
        for event_type, obj in events:
            seen.append((event_type, obj["metadata"]["name"], obj["metadata"].get("labels", {}).get("step")))
            if event_type == "DELETED":
                break
    assert seen == [("ADDED", "watched", None), ("MODIFIED", "watched", "2"), ("DELETED", "watched", "2")]
    assert created["metadata"]["uid"]


def test_watch_replays_history_then_ends_with_a_bookmark(api: KubeApi) -> None:
    start = api.list(CONFIGMAP, "default")["metadata"]["resourceVersion"]
    api.create(CONFIGMAP, configmap("a"), namespace="default")
    api.create(CONFIGMAP, configmap("b"), namespace="default")
    events = list(api.watch(CONFIGMAP, "default", resource_version=start, timeout_seconds=1))
    assert [(t, o["metadata"]["name"]) for t, o in events[:2]] == [("ADDED", "a"), ("ADDED", "b")]
    assert events[-1][0] == "BOOKMARK"
    assert int(events[-1][1]["metadata"]["resourceVersion"]) >= int(events[1][1]["metadata"]["resourceVersion"])


def test_watch_from_an_expired_version_raises_gone(short_history_server: ServerProcess, api: KubeApi) -> None:
    start = api.list(CONFIGMAP, "default")["metadata"]["resourceVersion"]
    for index in range(7):
        api.create(CONFIGMAP, configmap(f"c{index}"), namespace="default")
    with pytest.raises(Gone) as caught:
        for _ in api.watch(CONFIGMAP, "default", resource_version=start, timeout_seconds=5):
            pass
    assert caught.value.status == 410


def test_close_from_another_thread_ends_a_blocked_watch(api: KubeApi) -> None:
    stream = api.watch(
        POD,
        "default",
        resource_version=api.list(POD)["metadata"]["resourceVersion"],
        timeout_seconds=60,
        allow_bookmarks=False,
    )
    finished = threading.Event()

    def consume() -> None:
        for _ in stream:
            pass
        finished.set()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    time.sleep(0.2)  # let the reader block in the socket read
    stream.close()
    assert finished.wait(2), "the watch did not end after close()"
    assert stream.closed
    assert api.list(POD, "default")["items"] == []  # the pool serves the next request


def test_threads_share_one_client(api: KubeApi) -> None:
    errors: list[BaseException] = []

    def create_many(worker: int) -> None:
        try:
            for index in range(15):
                api.create(CONFIGMAP, configmap(f"w{worker}-{index}"), namespace="default")
                api.get(CONFIGMAP, f"w{worker}-{index}", "default")
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=create_many, args=(n,)) for n in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(20)
    assert errors == []
    assert len(api.list(CONFIGMAP, "default")["items"]) == 8 * 15


def test_requests_go_straight_to_the_pool_with_the_clients_host_headers_and_auth() -> None:
    """A request is one call of the client's urllib3 pool: the body dumped once, never walked by
    the client's serializer (`param_serialize`, a tenth of a preemption wave's scheduler CPU),
    with the client's host, default headers and bearer token, and the query quoted as the client
    quotes it."""
    import io

    import urllib3
    from kubernetes import client

    configuration = client.Configuration(host="https://api.example:6443")
    configuration.api_key = {"BearerToken": "secret"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    api_client = client.ApiClient(configuration)
    api_client.user_agent = "lahar/test"

    def walked(obj: Any) -> Any:
        raise AssertionError(f"the client's serializer walked {obj!r}")

    api_client.sanitize_for_serialization = walked  # type: ignore[method-assign]
    sent: list[dict[str, Any]] = []

    class Pool:
        def urlopen(self, method: str, url: str, **kwargs: Any) -> urllib3.HTTPResponse:
            sent.append({"method": method, "url": url, **kwargs})
            return urllib3.HTTPResponse(io.BytesIO(b'{"kind": "Pod"}'), status=201, preload_content=False)

    api_client.rest_client.pool_manager = Pool()
    api = KubeApi(api_client, timeout=7)
    assert api.create(CONFIGMAP, configmap("c"), "default") == {"kind": "Pod"}
    assert api.list(POD, "default", label_selector="app in (a,b)") == {"kind": "Pod"}
    create, listing = sent
    assert (create["method"], create["url"]) == (
        "POST",
        "https://api.example:6443/api/v1/namespaces/default/configmaps",
    )
    assert json.loads(create["body"]) == {"apiVersion": "v1", "kind": "ConfigMap", **configmap("c")}
    assert create["headers"] == {
        "Accept": "application/json",
        "User-Agent": "lahar/test",
        "Content-Type": "application/json",
        "authorization": "Bearer secret",
    }
    assert create["timeout"].connect_timeout == 5.0 and create["timeout"].read_timeout == 7
    assert create["preload_content"] is False
    assert (
        listing["url"] == "https://api.example:6443/api/v1/namespaces/default/pods?labelSelector=app%20in%20%28a%2Cb%29"
    )
    assert listing["body"] is None and "Content-Type" not in listing["headers"]
