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
memberLease: 30s              # the lease each heartbeat renews in a member (whole seconds; default
                              # half of redispatchAfter): past it the member stops the hub's Jobs
actions: "dispatch, preempt, reclaim"   # preempt/reclaim: evict lower-priority federated Jobs
```

Every key is checked when the text is read; a bad one is refused with its name, so a policy that
loads is one the federation can run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from lahar.api.job import parse_duration

SCORERS = ("free-capacity", "queue-share", "cost")
TOP_LEVEL_KEYS = ("plugins", "heartbeatPeriod", "unreachableAfter", "redispatchAfter", "memberLease", "actions")
ACTIONS = ("dispatch", "preempt", "reclaim")
# How often a member's fence (`lahar federation member`) looks at the lease: the margin between the
# lease and redispatchAfter must cover it, and a heartbeat (see Policy.lease_margin).
FENCE_PERIOD = 1.0


class PolicyError(ValueError):
    """A refused policy; the message names the key at fault."""


@dataclass(frozen=True)
class Policy:
    weights: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(SCORERS, 1.0))
    heartbeat_period: float = 2.0
    unreachable_after: float = 10.0
    redispatch_after: float = 60.0
    member_lease: int = 30  # seconds (a Lease holds whole seconds)
    actions: tuple[str, ...] = ACTIONS

    @property
    def lease_margin(self) -> float:
        """How long after a member's lease ran out the hub may place its Jobs elsewhere. It must
        cover the member's fence noticing (FENCE_PERIOD) and a heartbeat: a federation that
        crashed between renewing a lease and recording the heartbeat judges by the one before.
        Clock skew between hub and member must fit in what is left."""
        return self.redispatch_after - self.member_lease


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


def _actions(value: Any) -> tuple[str, ...]:
    """`actions: "dispatch, preempt, reclaim"`, as the scheduler's configuration names its actions."""
    if not isinstance(value, str):
        raise PolicyError('actions: must be a comma-separated string such as "dispatch, preempt"')
    listed = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in listed if name not in ACTIONS]
    if unknown:
        raise PolicyError(f"actions: unknown action {unknown[0]!r} (known: {', '.join(ACTIONS)})")
    if "dispatch" not in listed or len(set(listed)) != len(listed):
        raise PolicyError("actions: must name dispatch, and each action once")
    return listed


def _member_lease(document: Mapping[str, Any], redispatch_after: float) -> int:
    if document.get("memberLease") is None:
        return max(1, int(redispatch_after // 2))
    seconds = _seconds(document, "memberLease", 0.0)
    if seconds != int(seconds):
        raise PolicyError(f"memberLease: must be whole seconds (a Lease holds no fractions), not {seconds:g}s")
    return int(seconds)


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
        actions=_actions(document["actions"]) if "actions" in document else defaults.actions,
    )
    policy = replace(policy, member_lease=_member_lease(document, policy.redispatch_after))
    if policy.unreachable_after < policy.heartbeat_period:
        raise PolicyError(f"{source}: unreachableAfter must be at least heartbeatPeriod")
    check_lease(policy, source)
    return policy


def check_lease(policy: Policy, source: str = "policy") -> None:
    """The member's lease must outlive a late heartbeat and end before the hub re-dispatches."""
    if policy.member_lease < 2 * policy.heartbeat_period:
        raise PolicyError(
            f"{source}: memberLease ({policy.member_lease}s) must be at least two heartbeatPeriods "
            f"({2 * policy.heartbeat_period:g}s): one late heartbeat must not stop a member's Jobs"
        )
    needed = policy.heartbeat_period + FENCE_PERIOD
    if policy.lease_margin < needed:
        raise PolicyError(
            f"{source}: redispatchAfter ({policy.redispatch_after:g}s) must be at least memberLease "
            f"({policy.member_lease}s) + heartbeatPeriod + {FENCE_PERIOD:g}s ({policy.member_lease + needed:g}s): "
            "a lost member must have stopped its copies before they are placed elsewhere"
        )


def load_policy(path: Path | None) -> Policy:
    if path is None:
        return Policy()
    try:
        text = path.read_text()
    except OSError as exc:
        raise PolicyError(f"cannot read the federation policy {path}: {exc.strerror}") from None
    return parse_policy(text, str(path))
