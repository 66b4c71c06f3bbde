"""The OpenAPI documents of the served kinds (`/openapi/v3`, `/openapi/v3/<group-version>`,
`/openapi/v2`) and the server-side field validation (`fieldValidation=Strict|Warn|Ignore`) that
kubectl relies on them for, both from one set of schemas:

- built-in kinds: the field tables of kube_types.json (what the protobuf decoder reads too);
- Volcano kinds: the `openAPIV3Schema` of deploy/crds, the CRDs a real cluster installs.

kubectl `apply` asks /openapi/v3 whether a kind's PATCH takes `fieldValidation`; when it does it
sends `fieldValidation=Strict` and leaves validation to the server instead of downloading the
schema. `kubectl explain` walks the per-group-version documents. Descriptions of built-in fields
are not shipped (the tables carry the wire contract only); the CRDs' own descriptions are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

import lahar
from lahar.api.kinds import ALL_KINDS, Kind
from lahar.apiserver import errors, protobuf

CRD_DIR = Path(__file__).resolve().parent.parent / "deploy" / "crds"
META = "k8s.io.apimachinery.pkg.apis.meta.v1"
SCALARS = {
    "string": {"type": "string"},
    "bytes": {"type": "string", "format": "byte"},
    "bool": {"type": "boolean"},
    "int32": {"type": "integer", "format": "int32"},
    "int64": {"type": "integer", "format": "int64"},
}
SPECIAL: dict[str, dict[str, Any]] = {
    f"{META}.Time": {"type": "string", "format": "date-time"},
    f"{META}.MicroTime": {"type": "string", "format": "date-time"},
    f"{META}.Duration": {"type": "string"},
    f"{META}.FieldsV1": {"type": "object"},
    "k8s.io.apimachinery.pkg.runtime.RawExtension": {"type": "object"},
    "k8s.io.apimachinery.pkg.api.resource.Quantity": {"x-kubernetes-int-or-string": True},
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
}
QUERY_PARAMETERS = ("fieldValidation", "fieldManager", "dryRun", "force", "pretty")


# -- schemas ------------------------------------------------------------------------------------------


def schema_name(message: str) -> str:
    """kube-apiserver's definition name: k8s.io.api.core.v1.Pod -> io.k8s.api.core.v1.Pod."""
    return message.replace("k8s.io.", "io.k8s.", 1) if message.startswith("k8s.io.") else message


def _crd_name(kind: Kind) -> str:
    return ".".join(reversed(kind.group.split("."))) + f".{kind.version}.{kind.kind}"


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the CRD version's openAPIV3Schema; empty where deploy/ is not beside
    the package (an installed wheel): the Volcano kinds are then served without schemas."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")) if CRD_DIR.is_dir() else []:
        for document in yaml.safe_load_all(path.read_text()):
            if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document["spec"]
            for version in spec.get("versions", []):
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema:
                    found[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return found


@cache
def crd_printer_columns() -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(apiVersion, kind) -> the CRD version's additionalPrinterColumns (Table columns)."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")) if CRD_DIR.is_dir() else []:
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                spec = document["spec"]
                for version in spec.get("versions", []):
                    if "additionalPrinterColumns" in version:
                        key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                        found[key] = version["additionalPrinterColumns"]
    return found


def _field_schema(type_name: str, flags: tuple[str, ...]) -> dict[str, Any]:
    if type_name in SCALARS:
        item: dict[str, Any] = dict(SCALARS[type_name])
    elif type_name in SPECIAL:
        item = {"$ref": f"#/components/schemas/{schema_name(type_name)}"}
    else:
        item = {"allOf": [{"$ref": f"#/components/schemas/{schema_name(type_name)}"}]}
    if "map" in flags:
        return {"type": "object", "additionalProperties": item}
    if "repeated" in flags:
        return {"type": "array", "items": item}
    return item


def _message_properties(message: str) -> dict[str, dict[str, Any]]:
    properties: dict[str, dict[str, Any]] = {}
    for _number, json_name, type_name, flags in protobuf.messages()[message]:
        if "inline" in flags:
            properties.update(_message_properties(type_name))
        else:
            properties[json_name] = _field_schema(type_name, flags)
    return properties


def _message_schema(message: str) -> dict[str, Any]:
    if message in SPECIAL:
        return dict(SPECIAL[message])
    properties = _message_properties(message)
    if "metadata" in properties:  # a kind or a list: TypeMeta is inline in Go and has no protobuf field
        properties = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, **properties}
    return {"type": "object", "properties": properties}


def _references(message: str) -> Iterable[str]:
    for _number, _name, type_name, _flags in protobuf.messages().get(message, []):
        if type_name.startswith("k8s.io."):
            yield type_name


def _closure(roots: Iterable[str]) -> list[str]:
    seen: list[str] = []
    pending = list(roots)
    while pending:
        message = pending.pop()
        if message not in seen:
            seen.append(message)
            pending.extend(_references(message))
    return sorted(seen)


def _gvk(kind: Kind) -> list[dict[str, str]]:
    return [{"group": kind.group, "version": kind.version, "kind": kind.kind}]


def kind_schema(kind: Kind) -> tuple[str, dict[str, Any]] | None:
    """(definition name, schema) of a served kind; None for a custom resource without its CRD."""
    message = protobuf.message_for(kind.api_version, kind.kind)
    if message is not None:
        return schema_name(message), _message_schema(message)
    schema = crd_schemas().get((kind.api_version, kind.kind))
    return (_crd_name(kind), schema) if schema is not None else None


def _schemas(kinds: Iterable[Kind]) -> dict[str, dict[str, Any]]:
    kinds = list(kinds)
    messages = [m for k in kinds if (m := protobuf.message_for(k.api_version, k.kind)) is not None]
    # Every kind's document also has what its operations name: DeleteOptions, Status.
    schemas = {schema_name(m): _message_schema(m) for m in _closure([*messages, f"{META}.DeleteOptions"])}
    for kind in kinds:
        found = kind_schema(kind)
        if found is not None:
            name, schema = found
            schema = dict(schema)
            if protobuf.message_for(kind.api_version, kind.kind) is None:
                # A custom resource's metadata is ObjectMeta whatever its CRD says.
                properties = dict(schema.get("properties") or {})
                properties["metadata"] = {"allOf": [{"$ref": f"#/components/schemas/{schema_name(META)}.ObjectMeta"}]}
                schema["properties"] = properties
                schemas.update({schema_name(m): _message_schema(m) for m in _closure([f"{META}.ObjectMeta"])})
            schema["x-kubernetes-group-version-kind"] = _gvk(kind)
            schemas[name] = schema
    return schemas


# -- documents ------------------------------------------------------------------------------------------


def _served() -> dict[str, list[Kind]]:
    by_version: dict[str, list[Kind]] = {}
    for kind in ALL_KINDS:
        by_version.setdefault(kind.api_version, []).append(kind)
    return by_version


def _document_path(api_version: str) -> str:
    return "api/v1" if api_version == "v1" else f"apis/{api_version}"


def _operation(kind: Kind, action: str, writes: bool) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": f"{action}{kind.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(kind)[0],
        "responses": {"200": {"description": "OK"}},
    }
    if writes:
        operation["parameters"] = [
            {"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
            for name in QUERY_PARAMETERS
        ]
    return operation


def _paths(kinds: Iterable[Kind]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for kind in kinds:
        collection = kind.base_path("{namespace}")
        paths[collection] = {"get": _operation(kind, "list", False), "post": _operation(kind, "post", True)}
        paths[f"{collection}/{{name}}"] = {
            "get": _operation(kind, "get", False),
            "put": _operation(kind, "put", True),
            "patch": _operation(kind, "patch", True),
            "delete": _operation(kind, "delete", False),
        }
    return paths


@cache
def v3_group_version(api_version: str) -> bytes | None:
    """The OpenAPI 3 document of one group-version (None: not served)."""
    kinds = _served().get(api_version)
    if kinds is None:
        return None
    document = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"lahar-{lahar.__version__}"},
        "paths": _paths(kinds),
        "components": {"schemas": _schemas(kinds)},
    }
    return json.dumps(document, separators=(",", ":")).encode()


def v3_root() -> dict[str, Any]:
    """/openapi/v3: each group-version's document with a hash of its content, as kube-apiserver
    lists them (clients cache by the hash)."""
    paths = {}
    for api_version in _served():
        body = v3_group_version(api_version) or b""
        digest = hashlib.sha512(body).hexdigest()[:128].upper()
        paths[_document_path(api_version)] = {
            "serverRelativeURL": f"/openapi/v3/{_document_path(api_version)}?hash={digest}"
        }
    return {"paths": paths}


def v3_for_path(path: str) -> bytes | None:
    """The document at /openapi/v3/<path> (api/v1, apis/<group>/<version>)."""
    parts = path.strip("/").split("/")
    if parts == ["api", "v1"]:
        return v3_group_version("v1")
    if len(parts) == 3 and parts[0] == "apis":
        return v3_group_version(f"{parts[1]}/{parts[2]}")
    return None


@cache
def v2_document() -> bytes:
    """/openapi/v2 (Swagger 2.0, JSON): every kind's definition; references point at definitions."""
    kinds = list(ALL_KINDS)
    text = json.dumps(
        {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": f"lahar-{lahar.__version__}"},
            "paths": _paths(kinds),
            "definitions": _schemas(kinds),
        },
        separators=(",", ":"),
    ).replace("#/components/schemas/", "#/definitions/")
    return text.encode()


# -- field validation -------------------------------------------------------------------------------------


def field_problems(kind: Kind, obj: Any, directive: str) -> list[str]:
    """Server-side field validation of a body: Strict refuses unknown fields (400, nothing
    changes), Warn (the default) returns them as warnings, Ignore says nothing."""
    if directive not in ("", "Strict", "Warn", "Ignore"):
        raise errors.bad_request(f"fieldValidation must be one of Ignore, Warn or Strict, got {directive!r}")
    if directive == "Ignore":
        return []
    unknown = unknown_fields(kind, obj)
    if unknown and directive == "Strict":
        listed = ", ".join(f'unknown field "{f}"' for f in unknown)
        handled = f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}'
        raise errors.bad_request(f"{handled}: strict decoding error: {listed}")
    return [f'unknown field "{f}"' for f in unknown]


def unknown_fields(kind: Kind, obj: Any) -> list[str]:
    """The paths of fields the kind's schema does not have (kube's strict decoding errors). Patch
    directives (`$patch`, `$setElementOrder/...`) are not fields. A kind without a schema has none."""
    message = protobuf.message_for(kind.api_version, kind.kind)
    if message is not None:
        return _unknown_in_message(message, obj, "")
    schema = crd_schemas().get((kind.api_version, kind.kind))
    return _unknown_in_schema(schema, obj, "") if schema is not None else []


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _unknown_in_message(message: str, value: Any, prefix: str) -> list[str]:
    if message in SPECIAL or not isinstance(value, dict):
        return []  # a type mismatch is validation's to report, not an unknown field
    fields = _fields(message)
    type_meta = prefix == "" or "metadata" in fields  # apiVersion and kind go with an object's metadata
    found = []
    for key, item in value.items():
        if key.startswith("$"):
            continue
        if key not in fields:
            if not (type_meta and key in ("apiVersion", "kind")):
                found.append(_join(prefix, key))
            continue
        type_name, flags = fields[key]
        if not type_name.startswith("k8s.io."):
            continue
        path = _join(prefix, key)
        if "map" in flags and isinstance(item, dict):
            for map_key, element in item.items():
                found += _unknown_in_message(type_name, element, f"{path}[{map_key}]")
        elif "repeated" in flags and isinstance(item, list):
            for index, element in enumerate(item):
                found += _unknown_in_message(type_name, element, f"{path}[{index}]")
        else:
            found += _unknown_in_message(type_name, item, path)
    return found


@cache
def _fields(message: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """A message's fields by JSON name, inlined ones included (every write asks: computed once).
    Shared: never mutate it."""
    fields: dict[str, tuple[str, tuple[str, ...]]] = {}
    _collect_fields(message, fields)
    return fields


def _collect_fields(message: str, into: dict[str, tuple[str, tuple[str, ...]]]) -> None:
    for _number, json_name, type_name, flags in protobuf.messages().get(message, []):
        if "inline" in flags:
            _collect_fields(type_name, into)
        else:
            into[json_name] = (type_name, flags)


def _unknown_in_schema(schema: dict[str, Any], value: Any, prefix: str) -> list[str]:
    if schema.get("x-kubernetes-preserve-unknown-fields") or not isinstance(value, dict | list):
        return []
    if isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return []
        return [p for i, element in enumerate(value) for p in _unknown_in_schema(items, element, f"{prefix}[{i}]")]
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    found = []
    for key, item in value.items():
        if key.startswith("$"):
            continue
        path = _join(prefix, key)
        if prefix == "" and key == "metadata":
            found += _unknown_in_message(f"{META}.ObjectMeta", item, "metadata")
        elif isinstance(properties, dict) and key in properties:
            found += _unknown_in_schema(properties[key], item, path)
        elif isinstance(additional, dict):
            found += _unknown_in_schema(additional, item, f"{prefix}[{key}]")
        elif properties is not None or additional is False:
            found.append(path)
    return found
