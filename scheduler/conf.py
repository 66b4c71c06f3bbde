"""The scheduler configuration, in Volcano's `volcano-scheduler.conf` format:

```yaml
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
- plugins:
  - name: nodeorder
    arguments: {leastrequested.weight: 1}
configurations:
- name: preempt
  arguments: {...}
```

Every action, plugin, switch and argument is checked when the text is parsed (plugins and actions
are instantiated once with their arguments), so a configuration that parses is one a session can
run. `ConfWatcher` reloads the file when it changes and keeps the last good configuration when
the new one is refused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lahar.scheduler.framework.plugin import ConfError, action_class, plugin_class

log = logging.getLogger("lahar.scheduler.conf")

# Volcano's per-plugin switches -> the session callback kind each one gates.
SWITCHES: dict[str, str] = {
    "enableJobOrder": "job_order",
    "enableQueueOrder": "queue_order",
    "enableTaskOrder": "task_order",
    "enablePredicate": "predicate",
    "enableNodeOrder": "node_order",
    "enablePreemptable": "preemptable",
    "enableReclaimable": "reclaimable",
    "enablePreemptive": "preemptive",
    "enableJobReady": "job_ready",
    "enableJobPipelined": "job_pipelined",
    "enableJobEnqueued": "job_enqueueable",
    "enableJobStarving": "job_starving",
    "enabledOverused": "overused",
    "enableOverused": "overused",
    "enabledAllocatable": "allocatable",
    "enableAllocatable": "allocatable",
}
# Volcano switches Lahar accepts for compatibility but has no callbacks for.
IGNORED_SWITCHES = frozenset(
    {
        "enableHierarchy",
        "enableBestNode",
        "enableTargetJob",
        "enableReservedNodes",
        "enableVictim",
        "enableClusterOrder",
        "enabledHyperNodeOrder",
    }
)

DEFAULT_CONF = """\
actions: "enqueue, allocate, backfill, preempt, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
- plugins:
  - name: usage
  - name: oversubscription
  - name: numa-aware
  - name: deviceshare
"""


@dataclass(frozen=True)
class PluginOption:
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    disabled: frozenset[str] = frozenset()  # callback kinds switched off for this plugin

    def enabled(self, kind: str) -> bool:
        return kind not in self.disabled


@dataclass(frozen=True)
class SchedulerConf:
    actions: tuple[str, ...]
    tiers: tuple[tuple[PluginOption, ...], ...]
    action_arguments: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: str = "<default>"

    @property
    def plugin_names(self) -> list[str]:
        return [option.name for tier in self.tiers for option in tier]


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfError(f"{where}: must be a mapping, not {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfError(f"{where}: must be a list, not {type(value).__name__}")
    return value


def _plugin_option(raw: Any, where: str) -> PluginOption:
    entry = _mapping(raw, where)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfError(f"{where}.name: a plugin needs a name")
    disabled: set[str] = set()
    for key, value in entry.items():
        if key in ("name", "arguments"):
            continue
        if key not in SWITCHES and key not in IGNORED_SWITCHES:
            raise ConfError(f"{where} ({name}): unknown key {key!r}")
        if not isinstance(value, bool):
            raise ConfError(f"{where} ({name}).{key}: must be true or false, not {value!r}")
        if key in SWITCHES and not value:
            disabled.add(SWITCHES[key])
    arguments = dict(_mapping(entry.get("arguments"), f"{where} ({name}).arguments"))
    try:
        plugin_class(name)(arguments)  # refuses unknown plugins and bad arguments now
    except ConfError as exc:
        raise ConfError(f"{where}: {exc}") from None
    return PluginOption(name, arguments, frozenset(disabled))


def parse_conf(text: str, source: str = "<text>") -> SchedulerConf:
    """Parse and check a configuration; raise ConfError naming the problem."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfError(f"{source}: not valid YAML: {exc}") from None
    document = _mapping(document, source)
    unknown = set(document) - {"actions", "tiers", "configurations", "metrics"}
    if unknown:
        raise ConfError(f"{source}: unknown top-level keys {sorted(unknown)}")
    raw_actions = document.get("actions")
    if not isinstance(raw_actions, str) or not raw_actions.strip():
        raise ConfError(f'{source}: actions must be a comma-separated string such as "enqueue, allocate"')
    actions = tuple(part.strip() for part in raw_actions.split(",") if part.strip())
    if len(set(actions)) != len(actions):
        raise ConfError(f"{source}: actions lists an action twice: {raw_actions!r}")
    action_arguments: dict[str, Mapping[str, Any]] = {}
    for i, raw in enumerate(_list(document.get("configurations"), f"{source}: configurations")):
        entry = _mapping(raw, f"{source}: configurations[{i}]")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ConfError(f"{source}: configurations[{i}].name: an action configuration needs a name")
        action_arguments[name] = dict(_mapping(entry.get("arguments"), f"{source}: configurations[{i}].arguments"))
    for name in set(actions) | set(action_arguments):
        action_class(name)(action_arguments.get(name, {}))
    tiers: list[tuple[PluginOption, ...]] = []
    seen: set[str] = set()
    for t, raw_tier in enumerate(_list(document.get("tiers"), f"{source}: tiers")):
        tier = _mapping(raw_tier, f"{source}: tiers[{t}]")
        options = tuple(
            _plugin_option(raw, f"{source}: tiers[{t}].plugins[{p}]")
            for p, raw in enumerate(_list(tier.get("plugins"), f"{source}: tiers[{t}].plugins"))
        )
        for option in options:
            if option.name in seen:
                raise ConfError(f"{source}: plugin {option.name!r} appears twice")
            seen.add(option.name)
        tiers.append(options)
    return SchedulerConf(actions, tuple(tiers), action_arguments, source)


def load_conf(path: Path) -> SchedulerConf:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_conf(text, str(path))


def default_conf() -> SchedulerConf:
    return parse_conf(DEFAULT_CONF, "<default>")


class ConfWatcher:
    """The configuration in force, reloaded from `path` when the file changes. A refused file is
    logged (and kept in `error`) and the last good configuration stays."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.error: str | None = None
        self.reloads = 0
        self.failures = 0
        self._stamp: tuple[int, int] | None = None
        # The first load must succeed: starting on a bad file would hide the mistake.
        self.conf = load_conf(path) if path is not None else default_conf()
        self._stamp = self._file_stamp()

    def _file_stamp(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def current(self) -> SchedulerConf:
        """The configuration to use now; reloads first if the file changed since the last look."""
        stamp = self._file_stamp()
        if self.path is not None and stamp != self._stamp:
            self._stamp = stamp
            try:
                conf = load_conf(self.path)
            except ConfError as exc:
                self.error = str(exc)
                self.failures += 1
                log.error("scheduler configuration refused, keeping the last good one: %s", exc)
            else:
                self.conf, self.error = conf, None
                self.reloads += 1
                log.info(
                    "scheduler configuration reloaded from %s: actions %s, plugins %s",
                    self.path,
                    ", ".join(conf.actions),
                    ", ".join(conf.plugin_names),
                )
        return self.conf
