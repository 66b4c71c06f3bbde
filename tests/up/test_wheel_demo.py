"""A built wheel is all `lahar up --demo` needs: the wheel is built from this checkout, installed
(without its dependencies, which this test environment's site-packages lends through a .pth path
line) into a fresh virtual environment, and the demo's first step runs from a directory outside
the checkout: the example manifests and the workloads (lahar.examples, lahar.bench) come from the
installed package, and the installed version is the one pyproject.toml says."""

from __future__ import annotations

import secrets
import site
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from tests.up.test_lahar_up_e2e import LaharUp

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(out: Path) -> Path:
    # --no-build-isolation: setuptools and wheel come from this environment (no index needed).
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = out.glob("lahar-*.whl")
    return wheel


def fresh_venv(directory: Path, wheel: Path) -> Path:
    venv.EnvBuilder(with_pip=False).create(directory)
    python = directory / "bin" / "python"
    purelib = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    # The dependencies: this environment's site-packages as a plain path (its .pth files, the
    # editable checkout's finder among them, are not run), after the venv's own.
    (purelib / "lahar-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return python


@pytest.mark.timeout(600)
def test_the_wheel_runs_the_demos_first_step(tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv", build_wheel(tmp_path / "dist"))
    where = subprocess.check_output(
        [
            python,
            "-c",
            "import importlib.metadata as m, lahar, lahar.examples; print(lahar.__file__, m.version('lahar'))",
        ],
        cwd=tmp_path,
        text=True,
    ).split()
    assert where[0].startswith(str(tmp_path / "venv")), where  # the wheel's copy, not the checkout
    assert where[1] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

    up = LaharUp(tmp_path / "data", secrets.token_hex(5), "--demo", "--sim-nodes", "0")
    # The console script, not `python -m lahar`: -m would put the working directory (this
    # checkout) first on the path.
    assert up.argv[1:3] == ["-m", "lahar"]
    up.argv[0:3] = [str(python.parent / "lahar")]
    try:
        up.start(ready="Lahar is up")
        up.wait_for_output("1/4", 60)
        up.wait_for_output("alone: p50", 180)  # the pod ran `lahar workload online-server` from the wheel
        up.stop()  # SIGTERM mid-demo; whatever the narration was doing, nothing may be left (below)
    finally:
        left = up.close()
        assert not left, f"left behind: {left}"
