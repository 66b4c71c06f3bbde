"""Listening address and bearer token: off loopback the embedded API server refuses to start without
a token; with a token it speaks HTTPS (its own CA unless given a certificate) and every request but
the health checks must carry the token. Every request here goes to 127.0.0.1, even when the server
listens on 0.0.0.0."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client, watch
from kubernetes.client import ApiException

from lahar.endpoints import free_loopback_port

Server = Any  # conftest.ServerProcess (conftest is not importable under --import-mode=importlib)

TOKEN = "s3cret-token-for-tests"


def run_server(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `lahar apiserver` expecting it to refuse its settings and exit on its own."""
    return subprocess.run(
        [sys.executable, "-m", "lahar", "apiserver", "--data-dir", str(tmp_path / "data"), *args],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class SecuredServer:
    """`lahar apiserver --token-file` as a child process. With a token the server speaks HTTPS with
    a CA it makes under <data-dir>/tls/ (client-go sends tokens only over TLS); every request here
    goes to https://127.0.0.1 and verifies that CA."""

    def __init__(self, home: Path, address: str) -> None:
        self.home = home
        self.address = address
        self.port = free_loopback_port()
        self.token_file = home / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.ca = home / "data" / "tls" / "ca.crt"
        self.url = f"https://127.0.0.1:{self.port}"
        self.log = home / "apiserver.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lahar",
                    "apiserver",
                    "--data-dir",
                    str(self.home / "data"),
                    "--port",
                    str(self.port),
                    "--address",
                    self.address,
                    "--token-file",
                    str(self.token_file),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"apiserver exited with {self.proc.returncode}:\n{self.log.read_text()}")
            if self.ca.exists():
                try:
                    if requests.get(f"{self.url}/healthz", verify=str(self.ca), timeout=1).status_code == 200:
                        return
                except requests.RequestException:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"apiserver did not answer within {timeout}s:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.url + path, verify=str(self.ca), timeout=5, **kwargs)

    def configuration(self, token: str | None) -> client.Configuration:
        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.ca)
        if token is not None:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return configuration


@pytest.fixture(scope="module", params=["127.0.0.1", "0.0.0.0"])
def secured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    """A server that requires the token (one per address for the module: starting one per test is slow)."""
    server = SecuredServer(tmp_path_factory.mktemp("secured"), request.param)
    try:
        server.start()  # its readiness probe is /healthz, which needs no token
        yield server
    finally:
        server.stop()  # also when it never became ready: leave no process behind


def test_any_address_without_token_refuses_to_start(tmp_path: Path) -> None:
    port = free_loopback_port()
    result = run_server(tmp_path, "--address", "0.0.0.0", "--port", str(port))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "--token-file" in output, output
    assert "0.0.0.0" in output, output
    assert "Traceback" not in output, "a refused setting is a message, not a crash"
    assert not listening(port)
    assert not (tmp_path / "data" / "lahar.db").exists(), "nothing should be created before the check"


@pytest.mark.parametrize("address", ["::", "127.0.0.2", "::ffff:127.0.0.1"])
def test_other_non_loopback_addresses_need_a_token_too(tmp_path: Path, address: str) -> None:
    result = run_server(tmp_path, "--address", address, "--port", str(free_loopback_port()))
    assert result.returncode != 0
    assert "--token-file" in result.stdout + result.stderr


@pytest.mark.parametrize("content", ["   \n"])
def test_empty_token_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    port = free_loopback_port()
    result = run_server(tmp_path, "--address", "0.0.0.0", "--port", str(port), "--token-file", str(path))
    assert result.returncode != 0
    assert "empty" in result.stdout + result.stderr
    assert not listening(port)


def test_missing_token_file_is_refused(tmp_path: Path) -> None:
    port = free_loopback_port()
    result = run_server(tmp_path, "--port", str(port), "--token-file", str(tmp_path / "nowhere"))
    assert result.returncode != 0
    assert "nowhere" in result.stdout + result.stderr
    assert not listening(port)


def test_loopback_without_token_needs_none(apiserver: Server) -> None:
    response = requests.get(f"{apiserver.url}/api/v1/namespaces", timeout=5)
    assert response.status_code == 200


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}", "Bearer "])
def test_requests_without_the_token_get_401(secured: SecuredServer, header: str | None) -> None:
    authorized = {"Authorization": f"Bearer {TOKEN}"}
    headers = {} if header is None else {"Authorization": header}
    for method, path in (
        ("GET", "/api/v1/namespaces"),
        ("GET", "/api"),
        ("GET", "/apis"),
        ("GET", "/apis/scheduling.volcano.sh/v1beta1/queues/default"),
        ("POST", "/api/v1/namespaces/default/configmaps"),
        ("DELETE", "/apis/scheduling.volcano.sh/v1beta1/queues/default"),
    ):
        response = secured.request(
            method, path, headers=headers, json={"metadata": {"name": "intruder"}} if method == "POST" else None
        )
        assert response.status_code == 401, (method, path, response.text)
        status = response.json()
        assert status["kind"] == "Status" and status["code"] == 401 and status["reason"] == "Unauthorized"
    missing = secured.request("GET", "/api/v1/namespaces/default/configmaps/intruder", headers=authorized)
    assert missing.status_code == 404, "an unauthenticated create must not store anything"


def test_watch_without_the_token_gets_401(secured: SecuredServer) -> None:
    response = secured.request("GET", "/api/v1/pods", params={"watch": "1", "timeoutSeconds": "1"})
    assert response.status_code == 401


def test_requests_with_the_token_succeed(secured: SecuredServer) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    name = f"allowed-{uuid.uuid4().hex[:6]}"
    created = secured.request(
        "POST", "/api/v1/namespaces/default/configmaps", headers=headers, json={"metadata": {"name": name}}
    )
    assert created.status_code == 201, created.text
    fetched = secured.request("GET", f"/api/v1/namespaces/default/configmaps/{name}", headers=headers)
    assert fetched.json()["metadata"]["name"] == name


def test_token_server_speaks_only_https(secured: SecuredServer) -> None:
    """A token never travels in clear text: plain HTTP on the port gets no API answer."""
    try:
        response = requests.get(
            f"http://127.0.0.1:{secured.port}/api/v1/namespaces",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=5,
        )
    except requests.RequestException:
        return
    assert response.status_code >= 400
    assert "items" not in response.text


def test_official_client_with_bearer_token(secured: SecuredServer) -> None:
    with client.ApiClient(secured.configuration(TOKEN)) as api:
        core = client.CoreV1Api(api)
        namespace = f"t-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": namespace}})
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "typed"}})
        assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == ["typed"]
        stream = watch.Watch()
        seen = []
        for event in stream.stream(core.list_namespaced_config_map, namespace, timeout_seconds=1):
            seen.append(event["type"])
            stream.stop()
        assert seen == ["ADDED"]
        queues = client.CustomObjectsApi(api).list_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues")
        assert "default" in [q["metadata"]["name"] for q in queues["items"]]
    with client.ApiClient(secured.configuration(None)) as api:
        with pytest.raises(ApiException) as caught:
            client.CoreV1Api(api).list_namespaced_config_map("default")
        assert caught.value.status == 401
        assert json.loads(caught.value.body)["reason"] == "Unauthorized"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/livez"])
def test_health_checks_stay_open(secured: SecuredServer, path: str) -> None:
    response = secured.request("GET", path)
    assert response.status_code == 200
    wrong = secured.request("GET", path, headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 200


def test_health_check_lookalikes_are_not_open(secured: SecuredServer) -> None:
    for path in ("/healthz/../api/v1/namespaces", "/api/v1/namespaces?x=/healthz", "/healthzz"):
        response = secured.request("GET", path)
        assert response.status_code in (401, 404), (path, response.status_code)
        assert response.status_code == 401 or "items" not in response.text


def test_kubectl_with_the_token_kubeconfig(secured: SecuredServer, tmp_path: Path) -> None:
    """kubectl through the kubeconfig `lahar kubeconfig` prints for a token-guarded server (token
    and CA); a wrong token is refused."""
    import shutil

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lahar",
            "kubeconfig",
            "--server",
            secured.url,
            "--token-file",
            str(secured.token_file),
            "--ca-file",
            str(secured.ca),
        ],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert printed.returncode == 0, printed.stderr
    config = tmp_path / "kc"
    config.write_text(printed.stdout)
    ok = subprocess.run(
        [kubectl, "--kubeconfig", str(config), "get", "queues", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert ok.returncode == 0, ok.stderr
    assert "queue.scheduling.volcano.sh/default" in ok.stdout
    refused = subprocess.run(
        [kubectl, "--kubeconfig", str(config), "--token", "wrong-token", "get", "queues"],
        capture_output=True,
        text=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )
    assert refused.returncode != 0
    assert "Unauthorized" in refused.stderr or "credentials" in refused.stderr, refused.stderr


def test_tls_certificate_without_key_is_refused(tmp_path: Path) -> None:
    cert = tmp_path / "server.crt"
    cert.write_text("not a certificate")
    port = free_loopback_port()
    result = run_server(tmp_path, "--port", str(port), "--tls-cert-file", str(cert))
    assert result.returncode != 0
    assert "--tls-private-key-file" in result.stdout + result.stderr
    assert not listening(port)


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_bearer_scheme_is_case_insensitive(secured: SecuredServer, scheme: str) -> None:
    response = secured.request("GET", "/api/v1/namespaces", headers={"Authorization": f"{scheme} {TOKEN}"})
    assert response.status_code == 200, response.text
