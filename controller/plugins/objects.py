"""How the plugins' objects (Services, ConfigMaps, Secrets, NetworkPolicies) get to what the
plugins want: a pure diff of what exists against what is wanted, as a list of writes that the
controller performs. Only the fields a plugin sets are compared, so what the API server adds
(a Service's clusterIPs, defaults) never reads as a change."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from lahar.api import kinds
from lahar.api.kinds import Kind

PLUGIN_KINDS: dict[str, Kind] = {
    "Service": kinds.SERVICE,
    "ConfigMap": kinds.CONFIGMAP,
    "Secret": kinds.SECRET,
    "NetworkPolicy": kinds.NETWORK_POLICY,
}
# The top-level fields a plugin object's content lives in (metadata aside).
CONTENT_FIELDS = ("spec", "data", "type")


@dataclass(frozen=True, slots=True)
class Write:
    verb: Literal["create", "patch", "delete"]
    kind: str
    name: str
    body: dict[str, Any]


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return str(obj.get("kind", "")), str((obj.get("metadata") or {}).get("name", ""))


def _differs(wanted: Any, current: Any) -> bool:
    """Whether `current` lacks or changes anything `wanted` sets (maps compared key by key;
    `data` compared whole, since a removed key matters there)."""
    if isinstance(wanted, Mapping) and isinstance(current, Mapping):
        return any(_differs(value, current.get(key)) for key, value in wanted.items())
    return bool(wanted != current)


def plugin_object_writes(existing: Iterable[Mapping[str, Any]], wanted: Iterable[Mapping[str, Any]]) -> list[Write]:
    """Create what is wanted and missing, patch what differs, delete what exists and is no
    longer wanted (a job that finished wants nothing)."""
    have = {_key(obj): obj for obj in existing if _key(obj)[0] in PLUGIN_KINDS}
    writes: list[Write] = []
    wanted_keys = set()
    for obj in wanted:
        key = _key(obj)
        wanted_keys.add(key)
        current = have.get(key)
        if current is None:
            writes.append(Write("create", *key, dict(obj)))
            continue
        patch: dict[str, Any] = {}
        for field in CONTENT_FIELDS:
            if field not in obj:
                continue
            if field == "data":
                if obj["data"] != current.get("data"):
                    # A merge patch keeps keys it does not name: drop the old ones explicitly.
                    patch["data"] = {
                        **{k: None for k in current.get("data") or {} if k not in obj["data"]},
                        **obj["data"],
                    }
            elif _differs(obj[field], current.get(field)):
                patch[field] = obj[field]
        if patch:
            writes.append(Write("patch", *key, patch))
    writes += [Write("delete", *key, {}) for key in sorted(have) if key not in wanted_keys]
    return writes
