"""The `scale` subresource of Deployments and ReplicaSets: an `autoscaling/v1 Scale` view of the
object (what `kubectl scale` reads and patches). Writing it changes `spec.replicas` alone."""

from __future__ import annotations

import json
from typing import Any

from lahar.apiserver import errors
from lahar.apiserver.errors import ApiError
from lahar.apiserver.patch import MalformedPatchError, PatchError, UnsupportedPatchError, apply_patch


def selector_text(selector: dict[str, Any] | None) -> str:
    """A LabelSelector in its string form (Scale.status.selector): `a=b,c in (x,y),!d`."""
    selector = selector or {}
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In":
            parts.append(f"{key} in ({','.join(sorted(values))})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(values))})")
        elif operator == "Exists":
            parts.append(str(key))
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": spec.get("replicas", 0)},
        "status": {"replicas": status.get("replicas", 0), "selector": selector_text(spec.get("selector"))},
    }


def replicas_of(scale: Any) -> int:
    """The replicas a Scale body asks for; a bad body is 400/422 and changes nothing."""
    if not isinstance(scale, dict):
        raise errors.bad_request("the request body must be a Scale object")
    spec = scale.get("spec") or {}
    replicas = spec.get("replicas", 0) if isinstance(spec, dict) else None
    name = (scale.get("metadata") or {}).get("name", "")
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ApiError(
            422,
            "Invalid",
            f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: {json.dumps(replicas)}: '
            "must be an integer",
        )
    if replicas < 0:
        raise ApiError(
            422,
            "Invalid",
            f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: {replicas}: '
            "must be greater than or equal to 0",
        )
    return replicas


def patched_scale(obj: dict[str, Any], body: bytes, content_type: str) -> dict[str, Any]:
    """A patch applied to the object's Scale view."""
    try:
        return apply_patch(scale_of(obj), body, content_type, "Scale", True)
    except UnsupportedPatchError as exc:
        raise ApiError(415, "UnsupportedMediaType", str(exc)) from exc
    except MalformedPatchError as exc:
        raise errors.bad_request(str(exc)) from exc
    except PatchError as exc:
        raise ApiError(422, "Invalid", str(exc)) from exc
