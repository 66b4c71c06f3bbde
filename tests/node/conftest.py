"""Fixtures of the node tests: a KubeApi on the module's embedded API server, local nodes with a
unique name and cgroup parent per test, and the checks that nothing is left behind: no process
carrying the test's marker, no runtime thread, no cgroup (removed by force and reported even
when the test failed)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.node.lifecycle import RestartBackoff
from lahar.node.runtime import LocalNode
from tests.node.support import (
    NodeFactory,
    cgroups_skip_reason,
    force_remove,
    processes_marked,
    runtime_threads,
    start_synced,
)


@pytest.fixture(scope="module")
def api(module_apiserver: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    kubeconfig = module_apiserver.kubeconfig(tmp_path_factory.mktemp("kubeconfig") / "config")
    client = KubeApi(new_api_client(str(kubeconfig)), timeout=10)
    yield client
    client.api_client.close()


@pytest.fixture
def mark() -> str:
    """A value every pod of the test carries in its env, to find its processes afterwards."""
    return secrets.token_hex(6)


@pytest.fixture
def local_node(api: KubeApi, tmp_path: Path, mark: str) -> Iterator[NodeFactory]:
    """Start LocalNodes (unique node name and cgroup parent; short restart backoff); all are
    stopped after the test and nothing of theirs may remain."""
    started: list[LocalNode] = []
    token = secrets.token_hex(4)
    parent = f"lahar-test-{token}"

    def make(**overrides: Any) -> LocalNode:
        settings: dict[str, Any] = {
            "node_name": f"local-{token}",
            "cgroup_parent": parent,
            "restart_backoff": RestartBackoff(0.2, 1.0, 60.0),
            "stop_grace": 2.0,
        }
        settings.update(overrides)
        return start_synced(LocalNode(api, tmp_path / "data", **settings), started)

    try:
        yield make
    finally:
        for node in started:
            node.stop()
        left_cgroups = force_remove(parent) if cgroups_skip_reason() is None else []
        left_processes = processes_marked(mark)
        for pid in left_processes:
            os.kill(pid, 9)
        threads = runtime_threads()
        assert not left_cgroups, f"cgroups left behind: {left_cgroups}"
        assert not left_processes, f"processes left behind: {left_processes}"
        assert not threads, f"threads left behind: {threads}"
