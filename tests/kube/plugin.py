"""The `real_cluster` session fixture (loaded by tests/conftest.py, so every test directory sees
it): the real control plane of tests/kube/control_plane.py, built and started once per session.

Skipped, saying why, only where no Go toolchain exists and CI is not set; otherwise a failure to
build or start fails the tests that need it."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.control_plane import ControlPlane, ControlPlaneError, k8s_bin_dir

NO_GO = "no Go toolchain: the real control plane cannot be built (scripts/build-k8s.sh); CI requires it"
_build_failure: ControlPlaneError | None = None


def may_skip() -> bool:
    return shutil.which("go") is None and not os.environ.get("CI")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build (or find in the cache) the control plane before the first test runs, where the
    per-test timeout does not count a cold build's minutes against one test."""
    global _build_failure
    if may_skip() or not any("k8s_binaries" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("real control plane: scripts/build-k8s.sh (cached by go.sum; cold, tens of minutes)")
    try:
        k8s_bin_dir()
    except ControlPlaneError as exc:
        _build_failure = exc


@pytest.fixture(scope="session")
def k8s_binaries() -> Path:
    """The bin directory of scripts/build-k8s.sh (built once per go.sum, cached)."""
    if may_skip():
        pytest.skip(NO_GO)
    try:
        if _build_failure is not None:
            raise _build_failure
        return k8s_bin_dir()
    except ControlPlaneError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def real_cluster(k8s_binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager on loopback, for the whole session."""
    with contextlib.ExitStack() as stack:
        try:
            plane = stack.enter_context(ControlPlane(tmp_path_factory.mktemp("real-cluster"), bin_dir=k8s_binaries))
        except ControlPlaneError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield plane
