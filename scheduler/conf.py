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
run. Volcano's own files must load unchanged: a plugin, argument or key Lahar does not have is
left out with a warning (`SchedulerConf.warnings`, logged and counted by the
`lahar_scheduler_conf_warnings` gauge); a bad value, bad YAML or an unknown action is refused.
`ConfWatcher` reloads the file when it changes and keeps the last good configuration when the new
one is refused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from lahar.scheduler.framework.options import PluginOption, SchedulerConf
from lahar.scheduler.framework.plugin import ConfError, action_class, plugin_class, split_arguments

# PluginOption and SchedulerConf are re-exported: parse_conf returns them (the framework defines them).
__all__ = [
    "DEFAULT_CONF",
    "SWITCHES",
    "ConfError",
    "ConfWatcher",
    "PluginOption",
    "SchedulerConf",
    "default_conf",
    "load_conf",
    "parse_conf",
]

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
    "enableHyperNodeOrder": "hypernode_order",
    "enabledHyperNodeOrder": "hypernode_order",
}
# Volcano switches for callbacks Lahar's plugins do not register: accepted (in both of Volcano's
# spellings, `enable...` and `enabled...`), and they change nothing. `enabledVictim` is Volcano's
# spelling of the victim switch (its YAML key); `enableVictim` is kept for earlier Lahar files.
IGNORED_SWITCHES = frozenset(
    f"{prefix}{name}"
    for prefix in ("enable", "enabled")
    for name in (
        "Hierarchy",
        "BestNode",
        "TargetJob",
        "ReservedNodes",
        "Victim",
        "ClusterOrder",
        "HyperNodeGradient",
        "SubJobReady",
        "SubJobPipelined",
        "SubJobOrder",
    )
)
# Switches whose `true` asks for something Lahar does not do: reported, never silently dropped
# (unless the plugin says it honours the switch: `Plugin.SWITCHES_HONOURED`).
UNSUPPORTED_WHEN_ON = {
    "enableHierarchy": "hierarchy is not implemented by this plugin (drf and capacity have it)",
    "enabledHierarchy": "hierarchy is not implemented by this plugin (drf and capacity have it)",
}
TOP_LEVEL_KEYS = frozenset({"actions", "tiers", "configurations", "metrics"})

DEFAULT_CONF = """\
actions: "enqueue, allocate, backfill, preempt, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
  - name: sla
  - name: pdb
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
  - name: task-topology
- plugins:
  - name: usage
  - name: oversubscription
  - name: numa-aware
  - name: deviceshare
"""


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


def _plugin_option(raw: Any, where: str, warnings: list[str], files: list[str]) -> PluginOption | None:
    """One plugin entry; None (with a warning) for a plugin Lahar does not have."""
    entry = _mapping(raw, where)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfError(f"{where}.name: a plugin needs a name")
    try:
        cls = plugin_class(name)
    except ConfError as exc:
        warnings.append(f"{where}: {exc}; the plugin is left out")
        return None
    disabled: set[str] = set()
    honoured: set[str] = set()
    for key, value in entry.items():
        if key in ("name", "arguments"):
            continue
        if key not in SWITCHES and key not in IGNORED_SWITCHES:
            warnings.append(f"{where} ({name}): unknown key {key!r} ignored")
            continue
        if not isinstance(value, bool):
            raise ConfError(f"{where} ({name}).{key}: must be true or false, not {value!r}")
        if key in SWITCHES and not value:
            disabled.add(SWITCHES[key])
        if value and key in cls.SWITCHES_HONOURED:
            honoured.add(key)
        if value and key in UNSUPPORTED_WHEN_ON and key not in cls.SWITCHES_HONOURED:
            warnings.append(f"{where} ({name}).{key}: {UNSUPPORTED_WHEN_ON[key]}")
    given = dict(_mapping(entry.get("arguments"), f"{where} ({name}).arguments"))
    arguments, unknown = split_arguments(f"{where}: plugin {name}", cls.ARGUMENTS, given, cls.ARGUMENT_PREFIXES)
    warnings.extend(unknown)
    try:
        arguments, read, more = cls.read_files(arguments)
        files.extend(read)
        warnings.extend(f"{where} ({name}): {warning}" for warning in more)
        cls(arguments)  # refuses bad argument values now
    except ConfError as exc:
        raise ConfError(f"{where}: {exc}") from None
    return PluginOption(name, arguments, frozenset(disabled), frozenset(honoured))


def parse_conf(text: str, source: str = "<text>") -> SchedulerConf:
    """Parse and check a configuration; raise ConfError naming the problem. What Lahar does not
    have (a plugin, an argument, a key) is left out with a warning in `SchedulerConf.warnings`;
    what it cannot read (bad YAML, a bad value, an unknown action) is refused."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfError(f"{source}: not valid YAML: {exc}") from None
    document = _mapping(document, source)
    warnings: list[str] = []
    files: list[str] = []  # read for the plugins' arguments (deviceshare.DeviceConfigFile)
    for key in sorted(set(document) - TOP_LEVEL_KEYS, key=str):
        warnings.append(f"{source}: unknown top-level key {key!r} ignored")
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
        given = dict(_mapping(entry.get("arguments"), f"{source}: configurations[{i}].arguments"))
        if name not in actions:
            try:
                action_class(name)
            except ConfError:
                warnings.append(f"{source}: configurations[{i}]: arguments for unknown action {name!r} ignored")
                continue
        known, unknown = split_arguments(f"{source}: action {name}", action_class(name).ARGUMENTS, given)
        warnings.extend(unknown)
        action_arguments[name] = known
    for name in set(actions) | set(action_arguments):
        action_class(name)(action_arguments.get(name, {}))
    tiers: list[tuple[PluginOption, ...]] = []
    seen: set[str] = set()
    for t, raw_tier in enumerate(_list(document.get("tiers"), f"{source}: tiers")):
        tier = _mapping(raw_tier, f"{source}: tiers[{t}]")
        found = (
            _plugin_option(raw, f"{source}: tiers[{t}].plugins[{p}]", warnings, files)
            for p, raw in enumerate(_list(tier.get("plugins"), f"{source}: tiers[{t}].plugins"))
        )
        options = tuple(option for option in found if option is not None)
        for option in options:
            if option.name in seen:
                raise ConfError(f"{source}: plugin {option.name!r} appears twice")
            seen.add(option.name)
        tiers.append(options)
    return SchedulerConf(actions, tuple(tiers), action_arguments, source, tuple(warnings), tuple(files))


def load_conf(path: Path) -> SchedulerConf:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfError(f"{path}: cannot read: {exc.strerror or exc}") from None
    conf = parse_conf(text, str(path))
    for warning in conf.warnings:
        log.warning("scheduler configuration: %s", warning)
    return conf


def default_conf() -> SchedulerConf:
    return parse_conf(DEFAULT_CONF, "<default>")


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


class ConfWatcher:
    """The configuration in force, reloaded from `path` when the file changes. A refused file is
    logged (and kept in `error`) and the last good configuration stays."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.error: str | None = None
        self.reloads = 0
        self.failures = 0
        self._stamp: tuple[tuple[int, int] | None, ...] | None = None
        # The first load must succeed: starting on a bad file would hide the mistake.
        self.conf = load_conf(path) if path is not None else default_conf()
        self._stamp = self._file_stamp()

    def _file_stamp(self) -> tuple[tuple[int, int] | None, ...] | None:
        """The stamps of the file and of the files its plugins read (a device configuration)."""
        if self.path is None:
            return None
        return tuple(_stamp(path) for path in (str(self.path), *self.conf.files))

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
                self._stamp = self._file_stamp()  # the new configuration may read other files
                self.reloads += 1
                log.info(
                    "scheduler configuration reloaded from %s: actions %s, plugins %s",
                    self.path,
                    ", ".join(conf.actions),
                    ", ".join(conf.plugin_names),
                )
        return self.conf
