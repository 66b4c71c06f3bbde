"""What the embedded API server refuses and bounds (issue 15): malformed requests get a 4xx
Status and change nothing; objects, watch history and Events are bounded; slow or too many
connections are cut; the data directory is its owner's alone."""

from __future__ import annotations

import json
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import wait_for

Server = Any  # conftest.ServerProcess (conftest is not importable under --import-mode=importlib)


@pytest.fixture(scope="module")
def bounded(server_process: type[Server], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with small limits, so each can be reached quickly."""
    server = server_process(
        tmp_path_factory.mktemp("bounded") / "data",
        extra_args=(
            "--watch-history-mib",
            "1",
            "--event-ttl",
            "1",
            "--max-connections",
            "8",
            "--request-header-timeout",
            "1",
            "--request-body-timeout",
            "1",
        ),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def status_of(response: requests.Response) -> dict[str, Any]:
    body = response.json()
    assert body["kind"] == "Status" and body["code"] == response.status_code, body
    return body


def configmaps(server: Server) -> list[str]:
    response = requests.get(f"{server.url}/api/v1/namespaces/default/configmaps", timeout=10)
    assert response.status_code == 200
    return [item["metadata"]["name"] for item in response.json()["items"]]


def post_raw(server: Server, path: str, body: bytes) -> requests.Response:
    return requests.post(f"{server.url}{path}", data=body, headers={"Content-Type": "application/json"}, timeout=10)


# --- malformed requests: 4xx, nothing stored ------------------------------------------------------


@pytest.mark.parametrize("depth", [101, 500, 100_000])
def test_deep_json_is_a_400(bounded: Server, depth: int) -> None:
    name = f"deep-{depth}"
    body = b'{"metadata":{"name":"' + name.encode() + b'"},"data":{"x":' + b"[" * depth + b"]" * depth + b"}}"
    response = post_raw(bounded, "/api/v1/namespaces/default/configmaps", body)
    assert response.status_code == 400
    assert "nested" in status_of(response)["message"]
    assert name not in configmaps(bounded)


@pytest.mark.parametrize(
    "value", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"99999999999999999999", b"-9223372036854775809"]
)
def test_numbers_go_cannot_decode_are_a_400(bounded: Server, value: bytes) -> None:
    name = f"num-{uuid.uuid4().hex[:6]}"
    body = b'{"metadata":{"name":"' + name.encode() + b'","labels":{}},"binaryData":{},"extra":' + value + b"}"
    response = post_raw(bounded, "/api/v1/namespaces/default/configmaps", body)
    assert response.status_code == 400, response.text
    assert name not in configmaps(bounded)
    # and every list stays valid JSON
    assert requests.get(f"{bounded.url}/api/v1/configmaps", timeout=10).json()["kind"] == "ConfigMapList"


def test_merge_patch_with_nan_is_a_400(bounded: Server) -> None:
    url = f"{bounded.url}/api/v1/namespaces/default/configmaps"
    assert requests.post(url, json={"metadata": {"name": "patched"}}, timeout=10).status_code == 201
    response = requests.patch(
        f"{url}/patched", data=b'{"x": NaN}', headers={"Content-Type": "application/merge-patch+json"}, timeout=10
    )
    assert response.status_code == 400
    deep = b'{"x":' + b"[" * 500 + b"]" * 500 + b"}"
    response = requests.patch(
        f"{url}/patched", data=deep, headers={"Content-Type": "application/merge-patch+json"}, timeout=10
    )
    assert response.status_code == 400
    yaml_deep = ("x: " + "[" * 2000 + "]" * 2000).encode()
    response = requests.patch(
        f"{url}/patched?fieldManager=t",
        data=yaml_deep,
        headers={"Content-Type": "application/apply-patch+yaml"},
        timeout=10,
    )
    assert response.status_code == 400
    assert "x" not in requests.get(f"{url}/patched", timeout=10).json()


@pytest.mark.parametrize(
    "query",
    [
        "limit=-1",
        "limit=abc",
        "limit=1e3",
        "watch=1&timeoutSeconds=nan",
        "watch=1&timeoutSeconds=-1",
        "watch=1&timeoutSeconds=inf",
        "watch=1&resourceVersion=abc",
        "watch=1&resourceVersion=" + "9" * 5000,
    ],
)
def test_bad_query_numbers_are_a_400(bounded: Server, query: str) -> None:
    response = requests.get(f"{bounded.url}/api/v1/namespaces/default/configmaps?{query}", timeout=10)
    assert response.status_code == 400, response.text
    status_of(response)


def test_bad_grace_period_is_a_400(bounded: Server) -> None:
    url = f"{bounded.url}/api/v1/namespaces/default/configmaps"
    requests.post(url, json={"metadata": {"name": "graceful"}}, timeout=10)
    response = requests.delete(f"{url}/graceful?gracePeriodSeconds=nan", timeout=10)
    assert response.status_code == 400
    assert "graceful" in configmaps(bounded)


def test_out_of_range_quantity_is_a_422(bounded: Server) -> None:
    pod = {
        "metadata": {"name": "huge"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1e400"}}}]},
    }
    response = requests.post(f"{bounded.url}/api/v1/namespaces/default/pods", json=pod, timeout=10)
    assert response.status_code == 422
    assert "spec.containers[0].resources.requests.cpu" in status_of(response)["message"]


# --- bounded objects, history and events --------------------------------------------------------------


def test_objects_past_one_and_a_half_mib_are_a_413(bounded: Server) -> None:
    url = f"{bounded.url}/api/v1/namespaces/default/configmaps"
    response = requests.post(url, json={"metadata": {"name": "big"}, "data": {"x": "a" * (1536 * 1024)}}, timeout=10)
    assert response.status_code == 413
    assert "too large" in status_of(response)["message"]
    assert "big" not in configmaps(bounded)
    fits = requests.post(url, json={"metadata": {"name": "big"}, "data": {"x": "a" * (1400 * 1024)}}, timeout=10)
    assert fits.status_code == 201


def test_watch_history_is_bounded_by_bytes(bounded: Server) -> None:
    """1 MiB of history: three writes of 600 KiB push the first out; a watch from before it gets
    410 Gone, as after an etcd compaction, and one from the latest version still works."""
    url = f"{bounded.url}/api/v1/namespaces/default/configmaps"
    created = requests.post(url, json={"metadata": {"name": "churn"}, "data": {"x": "0"}}, timeout=10).json()
    first = created["metadata"]["resourceVersion"]
    for round_ in range(3):
        patch = {"data": {"x": str(round_) * (600 * 1024)}}
        response = requests.patch(
            f"{url}/churn", json=patch, headers={"Content-Type": "application/merge-patch+json"}, timeout=10
        )
        assert response.status_code == 200
    latest = response.json()["metadata"]["resourceVersion"]
    gone = requests.get(f"{url}?watch=1&resourceVersion={first}&timeoutSeconds=1", timeout=10)
    event = json.loads(gone.text.splitlines()[0])
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    fresh = requests.get(f"{url}?watch=1&resourceVersion={latest}&timeoutSeconds=1", timeout=10)
    assert fresh.status_code == 200 and "ERROR" not in fresh.text


def test_events_expire_after_their_ttl(bounded: Server) -> None:
    url = f"{bounded.url}/api/v1/namespaces/default/events"
    event = {"metadata": {"name": "short-lived"}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Test"}
    assert requests.post(url, json=event, timeout=10).status_code == 201
    wait_for(
        lambda: requests.get(f"{url}/short-lived", timeout=10).status_code == 404,
        timeout=10,
        what="the event to expire after --event-ttl 1",
    )


# --- connections ------------------------------------------------------------------------------------


def closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_slow_request_head_is_cut(bounded: Server) -> None:
    with socket.create_connection(("127.0.0.1", bounded.port)) as sock:
        sock.sendall(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n")  # never the blank line
        began = time.monotonic()
        assert closed_by_server(sock, within=10)
        assert time.monotonic() - began < 5
    with socket.create_connection(("127.0.0.1", bounded.port)) as sock:  # a trickle is no better
        deadline = time.monotonic() + 10
        cut = False
        while time.monotonic() < deadline and not cut:
            try:
                sock.sendall(b"X")
            except OSError:
                cut = True
                break
            cut = closed_by_server(sock, within=0.3)
        assert cut


def test_slow_body_is_a_408(bounded: Server) -> None:
    with socket.create_connection(("127.0.0.1", bounded.port)) as sock:
        sock.sendall(
            b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        sock.settimeout(10)
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]


def test_connections_past_the_cap_are_closed(bounded: Server) -> None:
    idle = [socket.create_connection(("127.0.0.1", bounded.port)) for _ in range(8)]
    try:
        extra = socket.create_connection(("127.0.0.1", bounded.port))
        with extra:
            assert closed_by_server(extra, within=5)
    finally:
        for sock in idle:
            sock.close()
    # once they are gone (or cut for sending nothing), the server serves again
    wait_for(lambda: requests.get(f"{bounded.url}/api", timeout=5).status_code == 200, what="service after the cap")


# --- the data directory ---------------------------------------------------------------------------


def test_data_directory_and_files_are_private(bounded: Server) -> None:
    data = Path(bounded.data_dir)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for path in data.glob("lahar.db*"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_an_open_data_directory_is_narrowed(server_process: type[Server], tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "lahar.db").touch(mode=0o644)
    server = server_process(data)
    server.start()
    try:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert stat.S_IMODE((data / "lahar.db").stat().st_mode) == 0o600
    finally:
        server.stop()
