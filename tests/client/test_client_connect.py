"""Connection resolution: explicit kubeconfig > $KUBECONFIG > in-cluster > the embedded server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lahar.api.kinds import NAMESPACE
from lahar.client import connect as connect_module
from lahar.client.api import KubeApi
from lahar.client.connect import ConnectionConfigError, describe_source, load_configuration, new_api_client
from lahar.client.errors import Unauthorized
from lahar.client.kubeconfig import embedded_kubeconfig
from lahar.tls import ensure_self_signed

ServerProcess = Any  # tests/conftest.py's class; test modules cannot import it (--import-mode=importlib)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)


def write_kubeconfig(path: Path, server: str, token: str | None = None, ca: bytes | None = None) -> Path:
    path.write_text(embedded_kubeconfig(server, token, ca))
    return path


@pytest.fixture
def service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A mounted service account as Kubernetes gives pods, and the service's address."""
    directory = tmp_path / "serviceaccount"
    directory.mkdir()
    (directory / "token").write_text("in-cluster-token")
    (directory / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(connect_module, "SERVICE_ACCOUNT_DIR", directory)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return directory


def test_explicit_path_wins_over_env_and_in_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_account: Path
) -> None:
    explicit = write_kubeconfig(tmp_path / "explicit", "http://explicit.example:1")
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "env", "http://env.example:2")))
    assert load_configuration(str(explicit)).host == "http://explicit.example:1"
    assert describe_source(str(explicit)) == f"kubeconfig {explicit}"


def test_kubeconfig_env_wins_over_in_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_account: Path
) -> None:
    from_env = write_kubeconfig(tmp_path / "env", "http://env.example:2", token="secret")
    monkeypatch.setenv("KUBECONFIG", str(from_env))
    configuration = load_configuration()
    assert configuration.host == "http://env.example:2"
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer secret"
    assert describe_source() == f"kubeconfig {from_env} (from $KUBECONFIG)"


def test_in_cluster_when_service_host_is_set(service_account: Path) -> None:
    configuration = load_configuration()
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.ssl_ca_cert == str(service_account / "ca.crt")
    assert configuration.auth_settings()["BearerToken"]["value"] == "bearer in-cluster-token"
    assert describe_source() == "in-cluster service account (10.96.0.1:443)"


def test_in_cluster_without_token_is_refused(service_account: Path) -> None:
    (service_account / "token").unlink()
    with pytest.raises(ConnectionConfigError, match=r"in-cluster.*token file does not exist"):
        load_configuration()


def test_default_is_the_embedded_server() -> None:
    from lahar.apiserver.server import DEFAULT_HOST, DEFAULT_PORT

    assert load_configuration().host == f"http://{DEFAULT_HOST}:{DEFAULT_PORT}" == "http://127.0.0.1:6443"
    assert "embedded API server at http://127.0.0.1:6443" in describe_source()


def test_missing_kubeconfig_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConnectionConfigError, match=f"kubeconfig {missing} does not exist"):
        load_configuration(str(missing))
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(ConnectionConfigError, match=rf"kubeconfig {missing} \(from \$KUBECONFIG\) does not exist"):
        load_configuration()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("clusters: [unclosed\n", "is not valid YAML"),
        ("just a string\n", "is not a kubeconfig"),
        ("apiVersion: v1\nkind: Config\nclusters: []\n", "invalid kubeconfig"),  # no context to use
    ],
)
def test_invalid_kubeconfig_names_the_file(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(content)
    with pytest.raises(ConnectionConfigError, match=problem) as caught:
        load_configuration(str(path))
    assert str(path) in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_unreadable_kubeconfig_names_the_file(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    with pytest.raises(ConnectionConfigError, match=f"cannot read kubeconfig {directory}"):
        load_configuration(str(directory))


def test_kubeconfig_token_and_ca_reach_a_guarded_server(
    apiserver: ServerProcess, server_process: type[ServerProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --token-file the server speaks HTTPS with its own CA: the kubeconfig's CA and token
    must both reach it through KubeApi."""
    apiserver.stop()
    # Made before the start (the server keeps existing files) so the fixture's health probe can trust them.
    tls = ensure_self_signed(apiserver.data_dir / "tls", ["127.0.0.1"])
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")

    class GuardedServer(server_process):  # type: ignore[misc,valid-type]
        @property
        def url(self) -> str:
            return f"https://127.0.0.1:{self.port}"

    guarded = GuardedServer(apiserver.data_dir, port=apiserver.port, extra_args=("--token-file", str(token_file)))
    guarded.start()
    try:
        ca = tls.ca.read_bytes()
        with_token = write_kubeconfig(tmp_path / "with-token", guarded.url, token="s3cret", ca=ca)
        assert KubeApi(new_api_client(str(with_token))).get(NAMESPACE, "default")["metadata"]["name"] == "default"
        without_token = write_kubeconfig(tmp_path / "without-token", guarded.url, ca=ca)
        with pytest.raises(Unauthorized) as caught:
            KubeApi(new_api_client(str(without_token))).get(NAMESPACE, "default")
        assert caught.value.status == 401
    finally:
        guarded.stop()
