"""The QoS engine's configuration: a YAML file (a ConfigMap in a cluster) with global values and
per-node-selector overrides for every threshold and strategy switch (DESIGN.md, "Config").

    reassert_seconds: 10
    cpu_suppress: {wait_threshold: 0.5, floor_ratio: 0.05}
    memory: {threshold: 0.8}
    io: {devices: [{device: vda, write_bps: 50Mi}]}
    eviction: {memory_threshold: 0.9}      # parsed by EvictionConfig.from_mapping
    reclaimable: {cpu_margin_ratio: 0.1}   # parsed by ReclaimableConfig.from_mapping
    node_configs:
      - name: big-nodes
        node_selector: {matchLabels: {node.kubernetes.io/instance-type: m5.8xlarge}}
        cpu_suppress: {ceiling_ratio: 0.8}

Keys are the config dataclasses' field names; byte sizes may be quantities ("64Mi"). Overrides
apply in order over the global values, deep-merged per section. Every override is validated
against the global values at load time, so a file that would be bad on some node is bad
everywhere, and the error names the key (`node_configs[0] (big-nodes): cpu_suppress.wait_threshold:
must be in (0, 1], got 1.5`). `QosConfigFile` reloads the file when it changes; a bad file is
refused with that error and the last good config stays in force."""

from __future__ import annotations

import logging
import os
import threading
import time
import typing
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from lahar.agent.qos.eviction import EvictionConfig, config_from_mapping
from lahar.agent.qos.executor import DEFAULT_REASSERT_SECONDS
from lahar.agent.qos.own_threads import DEFAULT_POLICY, POLICY_KEY, parse_policy
from lahar.agent.qos.reclaimable import ReclaimableConfig
from lahar.agent.qos.strategies import STRATEGIES
from lahar.api.kinds import NODE
from lahar.api.selectors import LabelSelector, SelectorError, label_selector_from_dict

if TYPE_CHECKING:
    from lahar.client.api import KubeApi

log = logging.getLogger("lahar.agent.qos")
RELOAD_OK, RELOAD_REFUSED = "ok", "refused"  # lahar_qos_config_reloads_total{result}
RELOAD_RESULTS = (RELOAD_OK, RELOAD_REFUSED)

EVICTION, RECLAIMABLE = "eviction", "reclaimable"
SECTION_TYPES: dict[str, type] = {
    **{s.name: s.config_type for s in STRATEGIES},
    EVICTION: EvictionConfig,
    RECLAIMABLE: ReclaimableConfig,
}
# Sections whose parsing belongs to their own module (agent/qos/eviction.py, reclaimable.py).
DELEGATED: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    EVICTION: EvictionConfig.from_mapping,
    RECLAIMABLE: ReclaimableConfig.from_mapping,
}
REASSERT = "reassert_seconds"
NODE_CONFIGS = "node_configs"
OVERRIDE_KEYS = ("name", "node_selector")


def parse_section(cls: type, data: Any) -> Any:
    """A section dataclass from its mapping: text and list fields here, the rest (numbers,
    switches, quantities) by the shared `config_from_mapping`. ValueError names the key."""
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a mapping of settings, got {type(data).__name__}: {data!r}")
    hints = typing.get_type_hints(cls)
    plain: dict[str, Any] = {}
    special: dict[str, Any] = {}
    for key, value in data.items():
        hint = hints.get(key)
        if hint is str:
            if not isinstance(value, str):
                raise ValueError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
            special[key] = value
        elif typing.get_origin(hint) is tuple:
            if not isinstance(value, list):
                raise ValueError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
            special[key] = tuple(
                _nested(f"{key}[{index}]", typing.get_args(hint)[0], item) for index, item in enumerate(value)
            )
        else:
            plain[key] = value
    parsed: Any = config_from_mapping(cls, plain)
    return replace(parsed, **special) if special else parsed


def _within(where: str, exc: ValueError) -> ValueError:
    """An error of a nested setting, named by its path: `io.devices[0].write_bps: ...`."""
    text = str(exc)
    about_the_whole = text.startswith(("unknown key", "expected a mapping"))
    return ValueError(f"{where}{': ' if about_the_whole else '.'}{text}")


def _nested(where: str, cls: type, data: Any) -> Any:
    try:
        return parse_section(cls, data)
    except ValueError as exc:
        raise _within(where, exc) from None


def _parse_sections(data: Mapping[str, Any]) -> dict[str, Any]:
    sections = {}
    for name, cls in SECTION_TYPES.items():
        value = data.get(name)
        value = {} if value is None else value
        try:
            sections[name] = DELEGATED[name](value) if name in DELEGATED else parse_section(cls, value)
        except ValueError as exc:
            raise _within(name, exc) from None
    return sections


def _reassert(data: Mapping[str, Any]) -> float:
    value = data.get(REASSERT, DEFAULT_REASSERT_SECONDS)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{REASSERT}: expected a positive number of seconds, got {value!r}")
    return float(value)


def _cpu_policy(data: Mapping[str, Any]) -> str:
    return parse_policy(data.get(POLICY_KEY, DEFAULT_POLICY))


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`, mappings merged key by key, anything else replaced."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


@dataclass(frozen=True)
class NodeOverride:
    name: str
    selector: LabelSelector
    settings: Mapping[str, Any]  # partial sections, merged over the global ones


@dataclass(frozen=True)
class QosConfig:
    """Parsed settings: one config dataclass per section, plus the node overrides still to apply."""

    sections: Mapping[str, Any] = field(default_factory=lambda: _parse_sections({}))
    reassert_seconds: float = DEFAULT_REASSERT_SECONDS
    agent_cpu_policy: str = DEFAULT_POLICY  # the agent's own threads (own_threads.py)
    overrides: tuple[NodeOverride, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)  # the global settings, for merging

    @property
    def eviction(self) -> EvictionConfig:
        return self.sections[EVICTION]

    @property
    def reclaimable(self) -> ReclaimableConfig:
        return self.sections[RECLAIMABLE]

    def section(self, name: str) -> Any:
        return self.sections[name]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> QosConfig:
        """The config of a parsed YAML document; ValueError naming the key when it is bad."""
        data = {} if data is None else data
        if not isinstance(data, Mapping):
            raise ValueError(f"the QoS config must be a mapping, got {type(data).__name__}")
        known = (*SECTION_TYPES, REASSERT, POLICY_KEY, NODE_CONFIGS)
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
        base = {key: value for key, value in data.items() if key != NODE_CONFIGS}
        config = cls(_parse_sections(base), _reassert(base), _cpu_policy(base), raw=base)
        overrides = data.get(NODE_CONFIGS) or []
        if not isinstance(overrides, list):
            raise ValueError(f"{NODE_CONFIGS}: expected a list, got {type(overrides).__name__}")
        return replace(config, overrides=tuple(_override(index, item, base) for index, item in enumerate(overrides)))

    def for_node(self, labels: Mapping[str, str]) -> QosConfig:
        """The settings for a node with these labels: every matching override, in order."""
        matching = [o for o in self.overrides if o.selector.matches(labels)]
        if not matching:
            return replace(self, overrides=())
        data = dict(self.raw)
        for override in matching:
            data = merged(data, override.settings)
        return QosConfig(_parse_sections(data), _reassert(data), _cpu_policy(data), raw=data)


def _override(index: int, item: Any, base: Mapping[str, Any]) -> NodeOverride:
    where = f"{NODE_CONFIGS}[{index}]"
    if not isinstance(item, Mapping):
        raise ValueError(f"{where}: expected a mapping with name, node_selector and sections")
    name = str(item.get("name") or index)
    where = f"{where} ({name})"
    unknown = sorted(str(key) for key in item if key not in (*OVERRIDE_KEYS, *SECTION_TYPES, REASSERT, POLICY_KEY))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}")
    if "node_selector" not in item:
        raise ValueError(f"{where}: node_selector is required (an empty one, {{}}, matches every node)")
    try:
        selector = label_selector_from_dict(item["node_selector"])
    except SelectorError as exc:
        raise ValueError(f"{where}: node_selector: {exc}") from None
    settings = {key: value for key, value in item.items() if key not in OVERRIDE_KEYS}
    try:
        data = merged(base, settings)
        _parse_sections(data)
        _reassert(data)
        _cpu_policy(data)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return NodeOverride(name, selector, settings)


def load_config(path: Path) -> QosConfig:
    """The config in a YAML file; ValueError naming the file and the key."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML: {exc}") from None
    try:
        return QosConfig.from_mapping(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


class QosConfigFile:
    """A config file, reloaded when it changes (a ConfigMap update swaps the file behind a
    symlink: the signature follows it). A bad version is refused, logged with its error, and
    the last good config stays; `error` says why until a good one arrives."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._signature = self._stat()
        self.config = load_config(path)  # no last good one yet: a bad file stops the start
        self.loaded_at = clock()
        self.error: str | None = None
        self.reloads: Counter[str] = Counter()  # ok, refused
        self._lock = threading.Lock()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def poll(self) -> bool:
        """Reload if the file changed; True when a new config took effect."""
        with self._lock:
            signature = self._stat()
            if signature == self._signature:
                return False
            self._signature = signature
            try:
                config = load_config(self.path)
            except ValueError as exc:
                self.error = str(exc)
                self.reloads[RELOAD_REFUSED] += 1
                log.error(
                    "QoS config refused, keeping the one loaded at %s: %s",
                    time.strftime("%H:%M:%S", time.localtime(self.loaded_at)),
                    exc,
                )
                return False
            self.config, self.loaded_at, self.error = config, self.clock(), None
            self.reloads[RELOAD_OK] += 1
            log.info("QoS config reloaded from %s", self.path)
            return True


class NodeLabels:
    """This node's labels from the API, fetched in the background every `refresh_seconds`, so a
    slow or absent API never holds up a tick; the last known ones (none at first) meanwhile."""

    def __init__(self, api: KubeApi, node: str, refresh_seconds: float = 60.0) -> None:
        self.api = api
        self.node = node
        self.refresh_seconds = refresh_seconds
        self._labels: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self) -> Mapping[str, str]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="node-labels", daemon=True)
            self._thread.start()
        return self._labels

    def refresh(self) -> None:
        try:
            node = self.api.get(NODE, self.node)
        except Exception as exc:  # the API being away must not stop QoS: keep the last labels
            log.warning("node labels of %s not read (keeping the last ones): %s", self.node, exc)
            return
        self._labels = dict((node.get("metadata") or {}).get("labels") or {})

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.refresh_seconds)

    def close(self) -> None:
        self._stop.set()
