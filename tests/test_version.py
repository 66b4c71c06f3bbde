"""One version: pyproject.toml's. The package reads it back (importlib.metadata); the places that
must repeat it (image tags, the Helm chart) are checked against it here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

import lahar

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_package_reports_pyprojects_version() -> None:
    assert lahar.__version__ == VERSION


def test_images_and_the_chart_carry_the_same_version() -> None:
    kustomization = yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())
    assert [image["newTag"] for image in kustomization["images"] if image["name"] == "lahar"] == [VERSION]
    tags = {
        str(path.relative_to(ROOT)): tag
        for path in (ROOT / "deploy").rglob("*.yaml")
        for tag in re.findall(r"image: lahar:(\S+)", path.read_text())
    }
    assert tags and set(tags.values()) == {VERSION}, tags
    chart = ROOT / "deploy" / "helm" / "lahar" / "Chart.yaml"
    if chart.exists():
        assert yaml.safe_load(chart.read_text())["appVersion"] == VERSION
