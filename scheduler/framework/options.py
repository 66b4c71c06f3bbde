"""What a session is configured with: the actions in order and the plugins in tiers, each with its
arguments. scheduler/conf.py parses Volcano's configuration files into these; the session reads
them. In the framework, so the session does not import the parser (which imports the framework's
plugin registry to check names and arguments)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PluginOption:
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    disabled: frozenset[str] = frozenset()  # callback kinds switched off for this plugin
    switches: frozenset[str] = frozenset()  # switches the plugin honours itself that are on (enableHierarchy)

    def enabled(self, kind: str) -> bool:
        return kind not in self.disabled


@dataclass(frozen=True)
class SchedulerConf:
    actions: tuple[str, ...]
    tiers: tuple[tuple[PluginOption, ...], ...]
    action_arguments: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: str = "<default>"
    # What the file asks for that Lahar does not have (unknown plugins, arguments, keys): left out
    # of the configuration, logged and counted (lahar_scheduler_conf_warnings), never fatal.
    warnings: tuple[str, ...] = ()
    # Files the plugins' arguments named, read with the configuration: a change reloads it.
    files: tuple[str, ...] = ()

    @property
    def plugin_names(self) -> list[str]:
        return [option.name for tier in self.tiers for option in tier]
