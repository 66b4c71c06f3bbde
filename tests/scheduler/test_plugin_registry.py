"""Plugin and action lookup: the built-ins register once, later lookups are dictionary reads."""

from __future__ import annotations

import pkgutil
from typing import Any

import pytest

from lahar.scheduler.framework.plugin import ConfError, action_class, plugin_class


def test_lookups_after_the_first_list_no_package_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every session looks up each configured plugin and action: listing scheduler/plugins and
    scheduler/actions again each time cost ~1 ms a lookup, most of a small cycle's CPU."""
    plugin_class("gang")  # the first lookup imports the built-ins

    def listed(*_: Any) -> Any:
        raise AssertionError("the plugin packages were listed again")

    monkeypatch.setattr(pkgutil, "iter_modules", listed)
    assert plugin_class("proportion").name == "proportion"
    assert action_class("preempt").name == "preempt"
    with pytest.raises(ConfError, match="unknown plugin 'nope'"):
        plugin_class("nope")
