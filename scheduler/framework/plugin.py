"""Plugins and actions: the two things a scheduler configuration names.

A plugin is one file under `scheduler/plugins/` holding a `Plugin` subclass decorated with
`@register_plugin`; on session open it registers callbacks on the session and keeps nothing else
(state for one session lives on the plugin instance, which is made anew per session). An action
is one file under `scheduler/actions/` holding an `Action` subclass decorated with
`@register_action`; it drives the session. Both are looked up by the name the configuration uses.

Arguments come from the configuration as a mapping; each plugin declares what it accepts in
`ARGUMENTS` (name -> parser), so an unknown key or a bad value is refused when the configuration
is loaded, before any session runs with it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from lahar.scheduler.framework.session import Session


class ConfError(ValueError):
    """A scheduler configuration that cannot be used; the message names the offending part."""


ArgumentParser = Callable[[Any], Any]
Arguments = Mapping[str, ArgumentParser]  # a plugin's or action's declared arguments, name -> parser


def number(minimum: float | None = None, maximum: float | None = None) -> ArgumentParser:
    """An argument parser for a float in [minimum, maximum]."""

    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"must be a number, not {value!r}")
        try:
            result = float(value)
        except ValueError:
            raise ValueError(f"must be a number, not {value!r}") from None
        if minimum is not None and result < minimum:
            raise ValueError(f"must be at least {minimum}, not {result:g}")
        if maximum is not None and result > maximum:
            raise ValueError(f"must be at most {maximum}, not {result:g}")
        return result

    return parse


def integer(minimum: int | None = None) -> ArgumentParser:
    """An argument parser for a whole number at least `minimum` (`2` or `2.0`, not `2.5`)."""
    within = number(minimum)

    def parse(value: Any) -> int:
        result = within(value)
        if not result.is_integer():
            raise ValueError(f"must be a whole number, not {value!r}")
        return int(result)

    return parse


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"must be true or false, not {value!r}")


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {value!r}")
    return value


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def go_duration(value: Any) -> float:
    """A duration in Go's notation (`1h2m3s`, `90s`, `1.5h`), as seconds; Volcano's plugins take
    their durations so (sla's `sla-waiting-time`)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a duration such as 1h30m, not {value!r}")
    text = value[1:] if value[0] in "+-" else value
    position, seconds = 0, 0.0
    for match in _GO_DURATION.finditer(text):
        if match.start() != position:
            break
        seconds += float(match.group(1)) * _GO_UNITS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ValueError(f"must be a duration such as 1h30m, not {value!r}")
    return -seconds if value[0] == "-" else seconds


def epoch_seconds(timestamp: str) -> float | None:
    """An RFC 3339 timestamp (`2024-01-01T00:00:00Z`, as the API writes them) as seconds since the
    epoch, or None when it cannot be read."""
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def choice(*allowed: str) -> ArgumentParser:
    """An argument parser for one of `allowed` (case as written)."""

    def parse(value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, not {value!r}")
        return str(value)

    return parse


def parse_arguments(
    owner: str,
    declared: Mapping[str, ArgumentParser],
    given: Mapping[str, Any],
    prefixes: Mapping[str, ArgumentParser] | None = None,
) -> dict[str, Any]:
    """Parse `given` against `declared` (exact names) and `prefixes` (e.g. `binpack.resources.`
    for per-resource keys); raise ConfError naming `owner` and the key on anything else."""
    parsed: dict[str, Any] = {}
    for key, value in given.items():
        parser = declared.get(key)
        if parser is None:
            parser = next((p for prefix, p in (prefixes or {}).items() if str(key).startswith(prefix)), None)
        if parser is None:
            known = ", ".join(sorted(list(declared) + [f"{p}*" for p in prefixes or {}])) or "none"
            raise ConfError(f"{owner}: unknown argument {key!r} (accepted: {known})")
        try:
            parsed[key] = parser(value)
        except ValueError as exc:
            raise ConfError(f"{owner}: argument {key!r} {exc}") from None
    return parsed


def split_arguments(
    owner: str,
    declared: Mapping[str, ArgumentParser],
    given: Mapping[str, Any],
    prefixes: Mapping[str, ArgumentParser] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The keys of `given` that `declared` or `prefixes` accept, and a warning per key that
    neither does (a Volcano configuration names arguments Lahar's plugins do not have: they are
    reported, not fatal). Values are not parsed here: `parse_arguments` refuses bad ones."""
    known: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in given.items():
        if key in declared or any(str(key).startswith(prefix) for prefix in prefixes or {}):
            known[key] = value
        else:
            accepted = ", ".join(sorted(list(declared) + [f"{p}*" for p in prefixes or {}])) or "none"
            warnings.append(f"{owner}: unknown argument {key!r} ignored (accepted: {accepted})")
    return known, warnings


class Plugin:
    """Base of every scheduler plugin. Subclasses set `name` and `ARGUMENTS`, read their parsed
    arguments from `self.arguments` and register callbacks in `on_session_open`."""

    name: ClassVar[str] = ""
    ARGUMENTS: ClassVar[Arguments] = {}
    ARGUMENT_PREFIXES: ClassVar[Mapping[str, ArgumentParser]] = {}
    # Whether BE tasks borrow the agents' reclaimable cpu/memory instead of queue quota while this
    # plugin is configured (the session must know before any plugin opens, whatever its tier).
    LENDS_TO_BE: ClassVar[bool] = False
    # Volcano switches without a session callback that this plugin honours (capacity's
    # `enableHierarchy`); the configuration does not report them as unsupported.
    SWITCHES_HONOURED: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.arguments = parse_arguments(f"plugin {self.name}", self.ARGUMENTS, arguments or {}, self.ARGUMENT_PREFIXES)
        self.switches_on: frozenset[str] = frozenset()  # of SWITCHES_HONOURED, those the configuration turned on

    @classmethod
    def read_files(cls, arguments: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...], list[str]]:
        """Read what the arguments name outside the configuration, when it is loaded (the one
        place a plugin may do I/O): the arguments with the contents in place of the names, the
        files read (the configuration is reloaded when one changes) and warnings. Raise ConfError
        on a file that cannot be read or used."""
        return arguments, (), []

    def argument(self, key: str, default: Any) -> Any:
        return self.arguments.get(key, default)

    def enforces(self) -> frozenset[str]:
        """The pod constraints (model.hard_constraints names) this plugin's predicate enforces with
        its arguments; the session refuses a pod carrying one that no configured plugin enforces."""
        return frozenset()

    def scores(self) -> frozenset[str]:
        """The pod preferences (model.soft_constraints names) this plugin's node order scores."""
        return frozenset()

    def on_session_open(self, session: Session) -> None:
        """Register callbacks (session.add_*); must not do I/O."""

    def on_session_close(self, session: Session) -> None:
        """Leave results for the status writer on the session (conditions, shares)."""


class Action:
    """Base of every action: `execute` drives one session."""

    name: ClassVar[str] = ""
    ARGUMENTS: ClassVar[Arguments] = {}

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.arguments = parse_arguments(f"action {self.name}", self.ARGUMENTS, arguments or {})

    def execute(self, session: Session) -> None:
        raise NotImplementedError


P = TypeVar("P", bound=type[Plugin])
A = TypeVar("A", bound=type[Action])

PLUGINS: dict[str, type[Plugin]] = {}
ACTIONS: dict[str, type[Action]] = {}


def register_plugin(cls: P) -> P:
    if not cls.name or cls.name in PLUGINS:
        raise RuntimeError(f"plugin {cls.__name__}: missing or duplicate name {cls.name!r}")
    PLUGINS[cls.name] = cls
    return cls


def register_action(cls: A) -> A:
    if not cls.name or cls.name in ACTIONS:
        raise RuntimeError(f"action {cls.__name__}: missing or duplicate name {cls.name!r}")
    ACTIONS[cls.name] = cls
    return cls


@functools.cache
def load_builtins() -> None:
    """Import every module under scheduler/plugins and scheduler/actions so they register. Once:
    every session looks its plugins and actions up, and listing the packages' folders again cost
    about 1 ms a lookup, some 40 ms a cycle (most of a small cycle's CPU)."""
    for package_name in ("lahar.scheduler.plugins", "lahar.scheduler.actions"):
        package = importlib.import_module(package_name)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package_name}.{module.name}")


def plugin_class(name: str) -> type[Plugin]:
    load_builtins()
    if name not in PLUGINS:
        raise ConfError(f"unknown plugin {name!r} (known: {', '.join(sorted(PLUGINS))})")
    return PLUGINS[name]


def action_class(name: str) -> type[Action]:
    load_builtins()
    if name not in ACTIONS:
        raise ConfError(f"unknown action {name!r} (known: {', '.join(sorted(ACTIONS))})")
    return ACTIONS[name]
