"""PATCH semantics of the embedded API server: pure functions over JSON objects.

Four patch formats, chosen by the request's Content-Type (see :func:`apply_patch`):

* ``application/merge-patch+json`` - RFC 7386 JSON merge patch (:func:`json_merge_patch`);
* ``application/json-patch+json`` - RFC 6902 JSON patch (:func:`json_patch`, via ``jsonpatch``);
* ``application/strategic-merge-patch+json`` - Kubernetes strategic merge patch
  (:func:`strategic_merge_patch`), only for built-in kinds: for custom resources the server
  answers 415 like the real apiserver, so :func:`apply_patch` raises :class:`UnsupportedPatchError`;
* ``application/apply-patch+yaml`` - server-side apply, which the registry runs with field
  managers (fieldmanager.py); :func:`decode_apply` reads its body. Here (the scale subresource,
  which has no managedFields of its own) it is read as a JSON merge patch.

No function mutates its inputs, and results share no structure with them.  Every failure raises
:class:`PatchError` (the server answers 422, or 400 for an unreadable body) with a message naming
the problem and, where there is one, the field path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import jsonpatch
import jsonpointer
import yaml

from lahar.api.errors import json_copy
from lahar.apiserver import limits


class PatchError(ValueError):
    """A patch that cannot be applied; the server answers 422 (or 400 for a malformed body)."""


class MalformedPatchError(PatchError):
    """A patch body that does not parse; the server answers 400."""


class UnsupportedPatchError(PatchError):
    """A patch Content-Type the target does not accept; the server answers 415."""


MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"


# --------------------------------------------------------------------------------------------
# Dispatch on Content-Type
# --------------------------------------------------------------------------------------------


def apply_patch(
    target: dict[str, Any],
    body: bytes | str,
    content_type: str,
    kind: str,
    strategic_supported: bool,
) -> dict[str, Any]:
    """Apply a PATCH request body to ``target`` according to its Content-Type."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == MERGE_PATCH:
        return json_merge_patch(target, _expect_object(_decode_json(body, "merge patch"), "merge patch"))
    if media_type == STRATEGIC_MERGE_PATCH and strategic_supported:
        patch = _expect_object(_decode_json(body, "strategic merge patch"), "strategic merge patch")
        return strategic_merge_patch(target, patch, kind)
    if media_type == JSON_PATCH:
        operations = _decode_json(body, "JSON patch")
        if not isinstance(operations, list):
            raise PatchError(f"a JSON patch must be a JSON array of operations, got {_json_type(operations)}")
        return json_patch(target, operations)
    if media_type == APPLY_PATCH:
        return json_merge_patch(target, _expect_object(decode_apply(body), "apply patch"))
    raise UnsupportedPatchError(
        f"the body of the request was in an unknown format ({content_type!r}) - accepted media types "
        f"include: {', '.join(_accepted_media_types(strategic_supported))}"
    )


def _accepted_media_types(strategic_supported: bool) -> list[str]:
    accepted = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
    return [*accepted, STRATEGIC_MERGE_PATCH] if strategic_supported else accepted


def _body_text(body: bytes | str) -> str:
    if isinstance(body, str):
        return body
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise MalformedPatchError(f"patch body is not valid UTF-8: {error}") from error


def _decode_json(body: bytes | str, what: str) -> Any:
    text = _body_text(body)
    if not text.strip():
        raise MalformedPatchError(f"{what} body is empty")
    try:
        return limits.loads(text)  # as Go decodes: no NaN, no number past float64/int64, bounded depth
    except ValueError as error:
        raise MalformedPatchError(f"{what} body is not valid JSON: {error}") from error


class _JsonCompatibleLoader(yaml.SafeLoader):
    """YAML loader that leaves timestamps as strings, as sigs.k8s.io/yaml does."""


_JsonCompatibleLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def decode_apply(body: bytes | str) -> Any:
    """An applied configuration (YAML or JSON), bounded and JSON-compatible as kube reads it."""
    text = _body_text(body)
    if not text.strip():
        raise MalformedPatchError("apply patch body is empty")
    if limits.flow_too_deep(text.encode()):
        raise MalformedPatchError(f"apply patch body is nested more than {limits.MAX_JSON_DEPTH} levels deep")
    try:
        document = yaml.load(text, Loader=_JsonCompatibleLoader)
    except RecursionError:
        raise MalformedPatchError(f"apply patch body is nested more than {limits.MAX_JSON_DEPTH} levels deep") from None
    except yaml.YAMLError as error:
        raise MalformedPatchError(f"apply patch body is not valid YAML or JSON: {error}") from error
    if limits.value_depth(document) > limits.MAX_JSON_DEPTH:
        raise MalformedPatchError(f"apply patch body is nested more than {limits.MAX_JSON_DEPTH} levels deep")
    if _has_non_finite(document):
        raise MalformedPatchError("apply patch body holds .nan or .inf, which JSON cannot carry")
    return document


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _expect_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PatchError(f"a {what} must be a JSON object, got {_json_type(value)}")
    return value


def _expect_object_result(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PatchError(f"the {what} turns the object into {_json_type(value)}; the result must be an object")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


# --------------------------------------------------------------------------------------------
# RFC 7386 JSON merge patch
# --------------------------------------------------------------------------------------------


def json_merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386: ``null`` deletes a member, objects merge recursively, anything else replaces."""
    return _expect_object_result(_merge_patch_value(json_copy(target), patch), "merge patch")


def _merge_patch_value(target: Any, patch: Any) -> Any:
    # ``target`` is already a private copy, so its untouched subtrees can be reused as they are.
    if not isinstance(patch, dict):
        return json_copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch_value(result.get(key), value)
    return result


# --------------------------------------------------------------------------------------------
# RFC 6902 JSON patch
# --------------------------------------------------------------------------------------------


def json_patch(target: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
    """RFC 6902, one operation at a time so that a failure names the operation that failed."""
    if not isinstance(operations, list):
        raise PatchError(f"a JSON patch must be an array of operations, got {_json_type(operations)}")
    document: Any = json_copy(target)
    for index, operation in enumerate(json_copy(operations)):
        document = _apply_json_patch_operation(document, index, operation)
    return _expect_object_result(document, "JSON patch")


def _pointer_text(pointer: Any) -> str:
    return '""' if pointer == "" else str(pointer)  # "" is the whole document


def _apply_json_patch_operation(document: Any, index: int, operation: Any) -> Any:
    if not isinstance(operation, dict):
        raise PatchError(f"JSON patch operation {index} must be an object, got {_json_type(operation)}")
    source = f"{_pointer_text(operation['from'])} -> " if "from" in operation else ""
    target_path = _pointer_text(operation.get("path"))
    where = f"JSON patch operation {index} ({operation.get('op')} {source}{target_path})"
    try:
        return jsonpatch.JsonPatch([operation]).apply(document, in_place=True)
    except jsonpatch.JsonPatchTestFailed as error:
        expected = json.dumps(operation.get("value"))
        message = f"{where}: test failed: the value at {operation.get('path')} is not {expected}"
        raise PatchError(message) from error
    except jsonpatch.JsonPatchPathNotFound as error:
        raise PatchError(f"{where}: path does not exist ({error})") from error
    except jsonpatch.InvalidJsonPatch as error:
        raise PatchError(f"{where}: invalid operation: {error}") from error
    except jsonpatch.JsonPatchException as error:
        raise PatchError(f"{where}: {error}") from error
    except jsonpointer.JsonPointerException as error:
        # jsonpointer appends the whole document to "not found" messages; keep only the reason.
        reason, not_found, _document = str(error).partition(" not found in ")
        if not_found:
            raise PatchError(f"{where}: path does not exist ({reason} not found)") from error
        if "does not support indexing" in reason or "non-container type" in reason:
            reason = "path goes through a value that is neither an object nor an array"
        raise PatchError(f"{where}: {reason}") from error
    except (TypeError, KeyError, IndexError) as error:
        raise PatchError(f"{where}: cannot be applied: {error}") from error


# --------------------------------------------------------------------------------------------
# Kubernetes strategic merge patch: the merge-key table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeList:
    """A list whose Kubernetes patch strategy is ``merge``.

    ``merge_key`` names the field identifying elements of a list of objects
    (``x-kubernetes-patch-merge-key``); ``None`` marks a list of primitives merged as a set.
    ``item`` is the schema of the elements.  Lists not described by a MergeList are replaced.
    """

    merge_key: str | None = None
    item: Schema = field(default_factory=dict)


# A schema maps a field name to the schema of an object-valued field or to a MergeList.  It only
# names what strategic merge needs: fields not listed are plain maps (merged recursively) or
# plain lists (replaced).  Nesting makes the table path-aware: a container's ``ports`` merge by
# ``containerPort`` while a Service's ``spec.ports`` merge by ``port``.  To support another kind,
# add its schema to KIND_SCHEMAS; to support another list, add it where it sits in its schema.
Schema: TypeAlias = Mapping[str, "Schema | MergeList"]

OBJECT_META: Schema = {
    "finalizers": MergeList(),
    "ownerReferences": MergeList("uid"),
}

CONTAINER: Schema = {
    "env": MergeList("name"),
    "ports": MergeList("containerPort"),
    "volumeMounts": MergeList("mountPath"),
    "volumeDevices": MergeList("devicePath"),
}

POD_SPEC: Schema = {
    "containers": MergeList("name", CONTAINER),
    "initContainers": MergeList("name", CONTAINER),
    "ephemeralContainers": MergeList("name", CONTAINER),
    "volumes": MergeList("name"),
    "imagePullSecrets": MergeList("name"),
    "hostAliases": MergeList("ip"),
    "topologySpreadConstraints": MergeList("topologyKey"),
    "schedulingGates": MergeList("name"),
    "resourceClaims": MergeList("name"),
}

POD_TEMPLATE_SPEC: Schema = {"metadata": OBJECT_META, "spec": POD_SPEC}

CONDITIONS_BY_TYPE: Final = MergeList("type")

POD: Schema = {
    "metadata": OBJECT_META,
    "spec": POD_SPEC,
    "status": {
        "conditions": CONDITIONS_BY_TYPE,
        "podIPs": MergeList("ip"),
        "hostIPs": MergeList("ip"),
    },
}

SERVICE: Schema = {
    "metadata": OBJECT_META,
    "spec": {"ports": MergeList("port")},
    "status": {"conditions": CONDITIONS_BY_TYPE},
}

NODE: Schema = {
    "metadata": OBJECT_META,
    "spec": {"podCIDRs": MergeList()},
    "status": {"conditions": CONDITIONS_BY_TYPE, "addresses": MergeList("type")},
}

WITH_CONDITIONS: Schema = {"metadata": OBJECT_META, "status": {"conditions": CONDITIONS_BY_TYPE}}

JUST_METADATA: Schema = {"metadata": OBJECT_META}

WORKLOAD: Schema = {
    "metadata": OBJECT_META,
    "spec": {"template": POD_TEMPLATE_SPEC},
    "status": {"conditions": CONDITIONS_BY_TYPE},
}

KIND_SCHEMAS: Mapping[str, Schema] = {
    "Pod": POD,
    "Service": SERVICE,
    "Node": NODE,
    "Namespace": WITH_CONDITIONS,
    "PodDisruptionBudget": WITH_CONDITIONS,
    "ConfigMap": JUST_METADATA,
    "Secret": JUST_METADATA,
    "Event": JUST_METADATA,
    "PriorityClass": JUST_METADATA,
    "PodTemplate": {"metadata": OBJECT_META, "template": POD_TEMPLATE_SPEC},
    "ReplicationController": WORKLOAD,
    "ReplicaSet": WORKLOAD,
    "Deployment": WORKLOAD,
    "StatefulSet": WORKLOAD,
    "DaemonSet": WORKLOAD,
    "Job": WORKLOAD,
    "CronJob": {
        "metadata": OBJECT_META,
        "spec": {"jobTemplate": {"metadata": OBJECT_META, "spec": {"template": POD_TEMPLATE_SPEC}}},
    },
}

# Consulted wherever the schema names no field: in built-in kinds every ``metadata`` is an
# ObjectMeta, every ``template`` a PodTemplateSpec and every ``conditions`` list merges by type,
# so pod templates nested anywhere (and kinds missing from KIND_SCHEMAS) still merge correctly.
ANYWHERE: Schema = {
    "metadata": OBJECT_META,
    "template": POD_TEMPLATE_SPEC,
    "conditions": CONDITIONS_BY_TYPE,
}


def _field_schema(schema: Schema, key: str) -> Schema | MergeList | None:
    return schema.get(key) or ANYWHERE.get(key)


# --------------------------------------------------------------------------------------------
# Kubernetes strategic merge patch: the merge
# --------------------------------------------------------------------------------------------

PATCH_DIRECTIVE: Final = "$patch"
RETAIN_KEYS: Final = "$retainKeys"
DELETE_FROM_PRIMITIVE_LIST: Final = "$deleteFromPrimitiveList/"
SET_ELEMENT_ORDER: Final = "$setElementOrder/"
_PATCH_DIRECTIVE_VALUES: Final = ("replace", "merge", "delete")


class _Deleted:
    """Marks a map removed by ``$patch: delete``."""


_DELETED: Final = _Deleted()


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any], kind: str) -> dict[str, Any]:
    """Kubernetes strategic merge patch of an object of ``kind``.

    Maps merge recursively and ``null`` deletes a key.  Lists with a merge key (see the schemas
    above) merge element-wise by that key: existing elements keep their place, new ones are
    appended in patch order; lists of primitives with strategy merge (``finalizers``) are set
    unions; other lists are replaced.  Directives: ``$patch: replace|merge|delete`` in a map or
    as a list element, ``$retainKeys``, ``$deleteFromPrimitiveList/<field>`` and
    ``$setElementOrder/<field>`` (listed elements first in the given order, the others after in
    their relative order).  Any other ``$`` key is an error.  A top-level ``$patch: delete``
    yields an empty object.
    """
    if not isinstance(patch, dict):
        raise PatchError(f"a strategic merge patch must be a JSON object, got {_json_type(patch)}")
    schema = KIND_SCHEMAS.get(kind, JUST_METADATA)
    merged = _merge_map(json_copy(target), patch, schema, path="")
    return {} if isinstance(merged, _Deleted) else merged


def _merge_map(original: dict[str, Any], patch: dict[str, Any], schema: Schema, path: str) -> dict[str, Any] | _Deleted:
    # ``original`` is a private copy (see strategic_merge_patch), so untouched subtrees are reused.
    _reject_unknown_directives(patch, path)
    directive = patch.get(PATCH_DIRECTIVE)
    if directive == "delete":
        return _DELETED
    result = {} if directive == "replace" else dict(original)
    fields = {key: value for key, value in patch.items() if not key.startswith("$")}
    if RETAIN_KEYS in patch:
        result = _retain_keys(result, patch[RETAIN_KEYS], fields, path)
    for name, values in _prefixed_directives(patch, DELETE_FROM_PRIMITIVE_LIST):
        remaining = _delete_from_primitive_list(result.get(name), values, _join(path, name))
        if name in result:
            result[name] = remaining
    for key, value in fields.items():
        if value is None:
            result.pop(key, None)
            continue
        merged = _merge_value(result.get(key), value, _field_schema(schema, key), _join(path, key))
        if isinstance(merged, _Deleted):
            result.pop(key, None)
        else:
            result[key] = merged
    for name, order in _prefixed_directives(patch, SET_ELEMENT_ORDER):
        ordered = _apply_element_order(result.get(name), order, _field_schema(schema, name), _join(path, name))
        if name in result:
            result[name] = ordered
    return result


def _merge_value(original: Any, patch: Any, field_schema: Schema | MergeList | None, path: str) -> Any:
    if isinstance(patch, dict):
        schema = field_schema if isinstance(field_schema, Mapping) else {}
        return _merge_map(original if isinstance(original, dict) else {}, patch, schema, path)
    if isinstance(patch, list) and isinstance(field_schema, MergeList):
        return _merge_list(original if isinstance(original, list) else [], patch, field_schema, path)
    return json_copy(patch)  # primitives and lists without a merge strategy replace


def _reject_unknown_directives(patch: dict[str, Any], path: str) -> None:
    for key in patch:
        if not key.startswith("$"):
            continue
        if key in (PATCH_DIRECTIVE, RETAIN_KEYS):
            continue
        if key.startswith((DELETE_FROM_PRIMITIVE_LIST, SET_ELEMENT_ORDER)) and key.split("/", 1)[1]:
            continue
        raise PatchError(f"unknown strategic merge patch directive {key!r} at {path or '<root>'}")
    directive = patch.get(PATCH_DIRECTIVE)
    if directive is not None and directive not in _PATCH_DIRECTIVE_VALUES:
        raise PatchError(
            f"unknown $patch value {directive!r} at {path or '<root>'}; expected one of "
            f"{', '.join(_PATCH_DIRECTIVE_VALUES)}"
        )


def _prefixed_directives(patch: dict[str, Any], prefix: str) -> list[tuple[str, Any]]:
    return [(key.removeprefix(prefix), value) for key, value in patch.items() if key.startswith(prefix)]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _retain_keys(result: dict[str, Any], retain: Any, fields: dict[str, Any], path: str) -> dict[str, Any]:
    """Clear the fields ``$retainKeys`` does not list (how kubectl switches a union's member)."""
    where = path or "<root>"
    if not isinstance(retain, list) or not all(isinstance(key, str) for key in retain):
        raise PatchError(f"$retainKeys at {where} must be a list of field names")
    # Fields set by the patch must be retained, else the patch contradicts itself; nulls may not be.
    unlisted = sorted(key for key, value in fields.items() if value is not None and key not in retain)
    if unlisted:
        raise PatchError(f"$retainKeys at {where} does not list patched fields: {', '.join(unlisted)}")
    return {key: value for key, value in result.items() if key in retain}


def _delete_from_primitive_list(current: Any, values: Any, path: str) -> Any:
    if not isinstance(values, list):
        raise PatchError(f"$deleteFromPrimitiveList/{path.rsplit('.', 1)[-1]} at {path} must be a list")
    if not isinstance(current, list):
        return current
    return [item for item in current if item not in values]


def _merge_list(original: list[Any], patch: list[Any], spec: MergeList, path: str) -> list[Any]:
    if spec.merge_key is None:
        return _merge_primitive_list(original, patch, path)
    return _merge_keyed_list(original, patch, spec, spec.merge_key, path)


def _merge_primitive_list(original: list[Any], patch: list[Any], path: str) -> list[Any]:
    """Set union keeping first occurrences; a ``{"$patch": "replace"}`` element drops the original."""
    result: list[Any] = []
    replace = False
    additions: list[Any] = []
    for element in patch:
        directive = element.get(PATCH_DIRECTIVE) if isinstance(element, dict) else None
        if directive is None:
            additions.append(element)
        elif directive == "replace":
            replace = True
        elif directive != "merge":
            raise PatchError(
                f"$patch: {directive} is not supported in the list of primitives {path}; "
                f"use $deleteFromPrimitiveList/{path.rsplit('.', 1)[-1]}"
            )
    for element in ([] if replace else original) + additions:
        if element not in result:
            result.append(json_copy(element))
    return result


def _merge_keyed_list(original: list[Any], patch: list[Any], spec: MergeList, key: str, path: str) -> list[Any]:
    """Merge element-wise by ``key``: deletions first, then merges in place, then appends."""
    items = list(original)
    updates: list[dict[str, Any]] = []
    replace = False
    for element in patch:
        if not isinstance(element, dict):
            raise PatchError(f"{path}: elements must be objects identified by {key!r}, got {_json_type(element)}")
        directive = element.get(PATCH_DIRECTIVE)
        if directive == "delete":
            identity = _require_merge_key(element, key, path)
            items = [item for item in items if not _has_identity(item, key, identity)]
        elif directive == "replace":
            replace = True  # the list becomes the patch's other elements
        elif directive in (None, "merge"):
            if directive is None or key in element:  # a bare {"$patch": "merge"} changes nothing
                updates.append(element)
        else:
            raise PatchError(
                f"unknown $patch value {directive!r} in list {path}; "
                f"expected one of {', '.join(_PATCH_DIRECTIVE_VALUES)}"
            )
    if replace:
        items = []
    for element in updates:
        identity = _require_merge_key(element, key, path)
        element_path = f"{path}[{key}={identity}]"
        index = next((i for i, item in enumerate(items) if _has_identity(item, key, identity)), None)
        # "$patch: delete" elements were handled above, so these merges always yield a map.
        if index is None:
            items.append(_merge_map({}, element, spec.item, element_path))
        else:
            items[index] = _merge_map(items[index], element, spec.item, element_path)
    return items


def _require_merge_key(element: dict[str, Any], key: str, path: str) -> Any:
    if key not in element:
        raise PatchError(f"{path}: element {element!r} does not contain its merge key {key!r}")
    return element[key]


def _has_identity(item: Any, key: str, identity: Any) -> bool:
    return isinstance(item, dict) and item.get(key) == identity


def _apply_element_order(current: Any, order: Any, field_schema: Schema | MergeList | None, path: str) -> Any:
    """Put the elements ``$setElementOrder`` lists first, in its order; the rest keep theirs."""
    if not isinstance(order, list):
        raise PatchError(f"$setElementOrder/{path.rsplit('.', 1)[-1]} at {path} must be a list")
    if not isinstance(current, list):
        return current
    key = field_schema.merge_key if isinstance(field_schema, MergeList) else _single_key(order)
    identities = [_order_identity(entry, key, path) for entry in order]
    remaining = list(current)
    ordered: list[Any] = []
    for identity in identities:
        matching = [item for item in remaining if _element_identity(item, key) == identity]
        ordered.extend(matching)
        remaining = [item for item in remaining if _element_identity(item, key) != identity]
    return ordered + remaining


def _single_key(order: list[Any]) -> str | None:
    """For lists missing from the schema: ``[{"name": "a"}, ...]`` orders by ``name``."""
    keys = {next(iter(entry)) for entry in order if isinstance(entry, dict) and len(entry) == 1}
    return keys.pop() if len(keys) == 1 else None


def _order_identity(entry: Any, key: str | None, path: str) -> Any:
    if key is None:
        return entry
    if not isinstance(entry, dict) or key not in entry:
        raise PatchError(f"$setElementOrder at {path}: entry {entry!r} does not contain merge key {key!r}")
    return entry[key]


def _element_identity(item: Any, key: str | None) -> Any:
    if key is None:
        return item
    return item.get(key) if isinstance(item, dict) else item
