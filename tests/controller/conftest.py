"""Fixtures of the controller's end-to-end tests: a KubeApi on a fresh embedded API server and a
running JobController (no gang scheduler: pods are created without waiting for admission)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.controller.controller import JobController


@pytest.fixture
def kubeconfig(apiserver, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    return apiserver.kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api(kubeconfig: Path) -> KubeApi:
    return KubeApi(new_api_client(str(kubeconfig)))


@pytest.fixture
def controller(api: KubeApi) -> Iterator[JobController]:
    running = JobController(api, admission_required=False, resync_seconds=2.0)
    running.start()
    yield running
    running.stop()
