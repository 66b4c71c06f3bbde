"""helm, built from tools/helm by scripts/build-helm.sh (cached by go.sum's hash). Without a Go
toolchain the chart tests are skipped, saying so, except in CI, where that is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.real_backend import lahar_admin_kubeconfig, lahar_installed_cluster  # noqa: F401 - fixtures

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def helm() -> Path:
    if shutil.which("go") is None and not os.environ.get("CI"):
        pytest.skip("no Go toolchain: helm cannot be built (scripts/build-helm.sh); CI requires it")
    build = subprocess.run(
        [str(REPO / "scripts" / "build-helm.sh")], capture_output=True, text=True, timeout=1800, check=False
    )
    if build.returncode != 0:
        pytest.fail(f"scripts/build-helm.sh failed:\n{build.stderr[-4000:]}")
    return Path(build.stdout.strip().splitlines()[-1])
