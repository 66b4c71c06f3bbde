"""docs/qos-tuning.md keeps to the code: a row for every key of the agent's QoS configuration (and
none for a key that does not exist) with the code's default, every panel it names is a panel of the
Grafana dashboard, every metric it names is exported, and its links resolve."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from lahar.agent.qos.config import REASSERT, SECTION_TYPES
from lahar.agent.qos.eviction import QUANTITY_UNIT
from lahar.agent.qos.executor import DEFAULT_REASSERT_SECONDS
from lahar.agent.qos.strategies.io import DeviceLimit
from lahar.metrics_catalog import all_families, catalog, names_in
from tests.observability.dashboard_support import all_panels, load_dashboard

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "qos-tuning.md"
# A threshold row: | `section.key` | `default` | ...
ROW = re.compile(r"^\| `([a-z_]+(?:\.[a-z_\[\]]+)*)` \| `([^`]*)` \|", re.M)
PANEL = re.compile(r"“([^”]+)”")
MiB = 1 << 20


def shown(value: Any, quantity_unit: str | None) -> str:
    """A default as the guide writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return "[]" if not value else repr(list(value))
    if isinstance(value, str):
        return value or "(required)"
    if quantity_unit == "bytes" and value and value % MiB == 0:
        return f"{value // MiB}Mi"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def code_defaults() -> dict[str, str]:
    defaults = {REASSERT: shown(DEFAULT_REASSERT_SECONDS, None)}
    for prefix, cls in [*SECTION_TYPES.items(), ("io.devices[]", DeviceLimit)]:
        for field in dataclasses.fields(cls):
            value = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
            defaults[f"{prefix}.{field.name}"] = shown(value, field.metadata.get(QUANTITY_UNIT))
    return defaults


def test_every_config_key_has_a_row_with_the_codes_default() -> None:
    rows = ROW.findall(GUIDE.read_text())
    documented = dict(rows)
    assert len(documented) == len(rows), "a key has two rows"
    expected = code_defaults()
    assert sorted(set(expected) - set(documented)) == [], "keys of the QoS config the guide leaves out"
    assert sorted(set(documented) - set(expected)) == [], "rows for keys the QoS config does not have"
    wrong = {key: (documented[key], expected[key]) for key in expected if documented[key] != expected[key]}
    assert wrong == {}, "defaults in the guide (guide, code) that differ from the code's"


def test_panels_the_guide_names_are_on_the_dashboard() -> None:
    titles = {panel["title"] for panel in all_panels(load_dashboard())}
    named = {" ".join(title.split()) for title in PANEL.findall(GUIDE.read_text())}  # titles may wrap
    assert named, "the guide names dashboard panels as “Title”"
    assert sorted(named - titles) == []


def test_metrics_the_guide_names_are_exported() -> None:
    known = names_in(all_families(catalog()))
    named = set(re.findall(r"`(lahar_[a-z0-9_]+)", GUIDE.read_text()))
    assert sorted(named - known) == []


def test_links_resolve() -> None:
    text = GUIDE.read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert {"qos.md", "metrics.md"} <= set(links)
    for link in links:
        assert (GUIDE.parent / link).exists(), link
    for path in re.findall(r"`((?:deploy|docs)/[^`\s]+)`", text):
        assert (REPO / path).exists(), path
