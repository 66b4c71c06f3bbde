"""Client-layer fixtures. Test modules cannot import each other or conftest (the suite runs with
--import-mode=importlib), so shared helpers are handed out as fixtures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lahar.client.api import KubeApi, Obj
from lahar.client.connect import new_api_client

ServerProcess = Any  # tests/conftest.py's class (not importable here, see above)
Connect = Callable[[ServerProcess], KubeApi]


@pytest.fixture
def connect_to(tmp_path: Path) -> Iterator[Connect]:
    """Make a KubeApi reaching a server the way components do: through a kubeconfig file."""
    opened: list[KubeApi] = []

    def connect(server: ServerProcess) -> KubeApi:
        kubeconfig = server.kubeconfig(tmp_path / f"kubeconfig-{len(opened)}")
        opened.append(KubeApi(new_api_client(str(kubeconfig)), timeout=10))
        return opened[-1]

    yield connect
    for api in opened:
        api.api_client.close()


@pytest.fixture
def api(apiserver: ServerProcess, connect_to: Connect) -> KubeApi:
    return connect_to(apiserver)


@pytest.fixture
def restart_with() -> Callable[..., ServerProcess]:
    """Restart a server (same port and data) with extra command-line flags."""

    def restart(server: ServerProcess, *flags: str) -> ServerProcess:
        server.stop()
        server.extra_args = (*server.extra_args, *flags)
        server.start()
        return server

    return restart


@pytest.fixture
def short_history_server(apiserver: ServerProcess, restart_with: Callable[..., ServerProcess]) -> ServerProcess:
    """The test's server keeping only 5 changes for watches: resuming from older versions gets 410."""
    return restart_with(apiserver, "--watch-history", "5")


@pytest.fixture
def pod() -> Callable[..., Obj]:
    """A factory of minimal valid Pod manifests."""

    def manifest(name: str, labels: dict[str, str] | None = None, namespace: str = "default") -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "1"]}]},
        }

    return manifest
