"""The federation's policy, in the style of the scheduler's configuration (scheduler/conf.py): a
YAML document naming the scoring plugins with their arguments, and the fault timings.

```yaml
plugins:                      # how a member is scored among those the Job fits; omitted: all, weight 1
- name: free-capacity         # more room left after placing the Job: better (spreads the load)
  arguments: {weight: 2}
- name: queue-share           # the Job's queue uses less of this member already: better
  arguments: {weight: 1}
- name: cost                  # a cheaper member (Cluster spec.cost): better
  arguments: {weight: 1}
heartbeatPeriod: 2s           # how often each member is asked how it is
unreachableAfter: 10s         # no answer for this long: the member is marked unreachable
redispatchAfter: 60s          # unreachable for this long: its Jobs are placed elsewhere
```

Every key is checked when the text is read; a bad one is refused with its name, so a policy that
loads is one the federation can run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lahar.api.job import parse_duration

SCORERS = ("free-capacity", "queue-share", "cost")
TOP_LEVEL_KEYS = ("plugins", "heartbeatPeriod", "unreachableAfter", "redispatchAfter")


class PolicyError(ValueError):
    """A refused policy; the message names the key at fault."""


@dataclass(frozen=True)
class Policy:
    weights: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(SCORERS, 1.0))
    heartbeat_period: float = 2.0
    unreachable_after: float = 10.0
    redispatch_after: float = 60.0


def _seconds(document: Mapping[str, Any], key: str, default: float) -> float:
    value = document.get(key)
    if value is None:
        return default
    try:
        seconds = parse_duration(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"{key}: {exc}") from None
    if isinstance(value, bool) or not seconds > 0:
        raise PolicyError(f"{key}: must be a positive duration, not {value!r}")
    return seconds


def _weights(plugins: Any) -> dict[str, float]:
    if not isinstance(plugins, list) or not plugins:
        raise PolicyError("plugins: must be a non-empty list of {name, arguments}")
    weights: dict[str, float] = {}
    for index, plugin in enumerate(plugins):
        where = f"plugins[{index}]"
        if not isinstance(plugin, Mapping) or set(plugin) - {"name", "arguments"}:
            raise PolicyError(f"{where}: must be a mapping of name and arguments")
        name = plugin.get("name")
        if name not in SCORERS:
            raise PolicyError(f"{where}.name: unknown scorer {name!r} (known: {', '.join(SCORERS)})")
        if name in weights:
            raise PolicyError(f"{where}.name: {name} is listed twice")
        arguments = plugin.get("arguments") or {}
        if not isinstance(arguments, Mapping) or set(arguments) - {"weight"}:
            raise PolicyError(f"{where}.arguments: only weight is taken")
        weight = arguments.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise PolicyError(f"{where}.arguments.weight: must be a number >= 0, not {weight!r}")
        weights[name] = float(weight)
    return weights


def parse_policy(text: str, source: str = "policy") -> Policy:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {exc}") from None
    if document is None:
        return Policy()
    if not isinstance(document, Mapping):
        raise PolicyError(f"{source}: must be a mapping of {', '.join(TOP_LEVEL_KEYS)}")
    unknown = sorted(set(document) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise PolicyError(f"{source}: unknown keys {', '.join(map(str, unknown))} (known: {', '.join(TOP_LEVEL_KEYS)})")
    defaults = Policy()
    policy = Policy(
        weights=_weights(document["plugins"]) if "plugins" in document else defaults.weights,
        heartbeat_period=_seconds(document, "heartbeatPeriod", defaults.heartbeat_period),
        unreachable_after=_seconds(document, "unreachableAfter", defaults.unreachable_after),
        redispatch_after=_seconds(document, "redispatchAfter", defaults.redispatch_after),
    )
    if policy.unreachable_after < policy.heartbeat_period:
        raise PolicyError(f"{source}: unreachableAfter must be at least heartbeatPeriod")
    return policy


def load_policy(path: Path | None) -> Policy:
    if path is None:
        return Policy()
    try:
        text = path.read_text()
    except OSError as exc:
        raise PolicyError(f"cannot read the federation policy {path}: {exc.strerror}") from None
    return parse_policy(text, str(path))
