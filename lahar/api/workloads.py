"""Deployment and ReplicaSet (`apps/v1`): Kubernetes' defaults and the validation that keeps a
controller sane: a selector that is not empty and matches the template's labels, replica counts
not negative, a known strategy with surge and unavailability not both zero, and a selector that
never changes (it is immutable in apps/v1). The template is defaulted and validated as a pod."""

from __future__ import annotations

import re
from typing import Any

from lahar.api.errors import Field, FieldError, child_dict, json_copy, set_default
from lahar.api.pod import default_pod_spec, validate_pod_template
from lahar.api.selectors import SelectorError, label_selector_from_dict

ROLLING_UPDATE, RECREATE, ON_DELETE = "RollingUpdate", "Recreate", "OnDelete"
ORDERED_READY, PARALLEL = "OrderedReady", "Parallel"
DEFAULT_SURGE = DEFAULT_UNAVAILABLE = "25%"
_PERCENT = re.compile(r"^(\d+)%$")


def _default_template(spec: dict[str, Any]) -> None:
    template = child_dict(spec, "template")
    pod_spec = child_dict(template, "spec")
    if pod_spec is not None:
        default_pod_spec(pod_spec)


def _default_rolling_update(spec: dict[str, Any], field: str, rolling_defaults: dict[str, Any]) -> None:
    """The update strategy under `field` defaults to RollingUpdate, whose parameters default as given."""
    strategy = child_dict(spec, field, create=True)
    if strategy is None:
        return
    set_default(strategy, "type", ROLLING_UPDATE)
    if strategy["type"] == ROLLING_UPDATE:
        rolling = child_dict(strategy, "rollingUpdate", create=True)
        if rolling is not None:
            for key, value in rolling_defaults.items():
                set_default(rolling, key, value)


def replica_set_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    result = json_copy(obj)
    spec = child_dict(result, "spec")
    if spec is not None:
        set_default(spec, "replicas", 1)
        _default_template(spec)
    return result


def statefulset_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    result = json_copy(obj)
    spec = child_dict(result, "spec")
    if spec is None:
        return result
    set_default(spec, "replicas", 1)
    set_default(spec, "podManagementPolicy", ORDERED_READY)
    set_default(spec, "revisionHistoryLimit", 10)
    _default_rolling_update(spec, "updateStrategy", {"partition": 0})
    _default_template(spec)
    return result


def daemonset_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    result = json_copy(obj)
    spec = child_dict(result, "spec")
    if spec is None:
        return result
    set_default(spec, "revisionHistoryLimit", 10)
    _default_rolling_update(spec, "updateStrategy", {"maxUnavailable": 1, "maxSurge": 0})
    _default_template(spec)
    return result


def deployment_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    result = json_copy(obj)
    spec = child_dict(result, "spec")
    if spec is None:
        return result
    set_default(spec, "replicas", 1)
    set_default(spec, "revisionHistoryLimit", 10)
    set_default(spec, "progressDeadlineSeconds", 600)
    _default_rolling_update(spec, "strategy", {"maxSurge": DEFAULT_SURGE, "maxUnavailable": DEFAULT_UNAVAILABLE})
    _default_template(spec)
    return result


def scaled(value: int | str, total: int, round_up: bool) -> int:
    """An int-or-percent (maxSurge, maxUnavailable) as a count of `total` replicas."""
    if isinstance(value, int):
        return value
    found = _PERCENT.match(value)
    if found is None:
        raise ValueError(f"invalid value {value!r}: must be an integer or a percentage")
    share = int(found.group(1)) * total
    return -(-share // 100) if round_up else share // 100


def _validate_int_or_percent(field: Field) -> int | str | None:
    value = field.value
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        field.report("must be an integer or a percentage")
        return None
    if isinstance(value, int) and value < 0:
        field.report("must be greater than or equal to 0")
        return None
    if isinstance(value, str) and _PERCENT.match(value) is None:
        field.report("a valid percent string must be a numeric string followed by an ending '%'")
        return None
    return value


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _validate_replicated(root: Field, old: dict[str, Any] | None) -> None:
    spec = root.child("spec")
    if not spec.require_present():
        return
    spec_map = spec.as_mapping()
    if spec_map is None:
        return
    template = _mapping(spec_map.get("template"))
    template_meta, template_spec = _mapping(template.get("metadata")), _mapping(template.get("spec"))
    spec.child("replicas").as_int(minimum=0)
    spec.child("minReadySeconds").as_int(minimum=0)
    selector_field = spec.child("selector")
    selector = selector_field.as_mapping()
    if selector is None:
        selector_field.require_present()
    else:
        try:
            parsed = label_selector_from_dict(selector)
        except SelectorError as exc:
            selector_field.report(str(exc))
            parsed = None
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            selector_field.report("empty selector is invalid for deployment")
        labels = template_meta.get("labels") or {}
        if parsed is not None and isinstance(labels, dict) and not parsed.matches(labels):
            spec.child("template").child("metadata").child("labels").report(
                "`selector` does not match template `labels`"
            )
        if old is not None and (old.get("spec") or {}).get("selector") != selector:
            selector_field.report("field is immutable")
    validate_pod_template(spec.child("template"))
    restart = template_spec.get("restartPolicy")
    if restart not in (None, "Always"):
        spec.child("template").child("spec").child("restartPolicy").report(
            f'Unsupported value: "{restart}": supported values: "Always"'
        )


def validate_replica_set(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    _validate_replicated(root, old)
    return root.errors


def validate_deployment(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    _validate_replicated(root, old)
    spec = root.child("spec")
    if spec.as_mapping() is None:
        return root.errors
    spec.child("revisionHistoryLimit").as_int(minimum=0)
    spec.child("progressDeadlineSeconds").as_int(minimum=1)
    strategy = spec.child("strategy")
    kind = strategy.child("type").as_choice((ROLLING_UPDATE, RECREATE), "strategy type")
    rolling = strategy.child("rollingUpdate")
    if kind == RECREATE and rolling.value is not None:
        rolling.report("may not be specified when strategy `type` is 'Recreate'", "FieldValueForbidden")
    elif kind == ROLLING_UPDATE and rolling.as_mapping() is not None:
        surge = _validate_int_or_percent(rolling.child("maxSurge"))
        unavailable = _validate_int_or_percent(rolling.child("maxUnavailable"))
        if surge in (0, "0%") and unavailable in (0, "0%"):
            rolling.child("maxUnavailable").report("may not be 0 when `maxSurge` is 0")
    return root.errors


def validate_statefulset(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    _validate_replicated(root, old)
    spec = root.child("spec")
    if spec.as_mapping() is None:
        return root.errors
    spec.child("podManagementPolicy").as_choice((ORDERED_READY, PARALLEL), "pod management policy")
    spec.child("revisionHistoryLimit").as_int(minimum=0)
    rolling = _validate_update_strategy(spec.child("updateStrategy"))
    if rolling is not None:
        rolling.child("partition").as_int(minimum=0)
    if old is not None:
        for name in ("serviceName", "podManagementPolicy"):
            if (old.get("spec") or {}).get(name) != (obj.get("spec") or {}).get(name):
                spec.child(name).report("field is immutable")
    return root.errors


def validate_daemonset(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    """A DaemonSet has no replicas (one pod per node); the rest is a replicated workload's."""
    root = Field(obj)
    replicas = (obj.get("spec") or {}).get("replicas") if isinstance(obj.get("spec"), dict) else None
    if replicas is not None:
        root.child("spec").child("replicas").report("a DaemonSet has no replicas: it runs one pod per node")
    _validate_replicated(root, old)
    spec = root.child("spec")
    if spec.as_mapping() is not None:
        spec.child("revisionHistoryLimit").as_int(minimum=0)
        rolling = _validate_update_strategy(spec.child("updateStrategy"))
        if rolling is not None:
            surge = _validate_int_or_percent(rolling.child("maxSurge"))
            unavailable = _validate_int_or_percent(rolling.child("maxUnavailable"))
            if surge in (0, "0%", None) and unavailable in (0, "0%"):
                rolling.child("maxUnavailable").report("cannot be 0 when maxSurge is 0")
            elif surge not in (0, "0%", None) and unavailable not in (0, "0%", None):
                rolling.child("maxSurge").report("may not be set when maxUnavailable is non-zero")
    return root.errors


def _validate_update_strategy(strategy: Field) -> Field | None:
    """A StatefulSet's or DaemonSet's updateStrategy: RollingUpdate (its rollingUpdate returned to
    check) or OnDelete, which takes no rollingUpdate."""
    kind = strategy.child("type").as_choice((ROLLING_UPDATE, ON_DELETE), "update strategy type")
    rolling = strategy.child("rollingUpdate")
    if kind == ON_DELETE and rolling.value is not None:
        rolling.report("only allowed for updateStrategy 'RollingUpdate'", "FieldValueForbidden")
    return rolling if kind == ROLLING_UPDATE and rolling.as_mapping() is not None else None
