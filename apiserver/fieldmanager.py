"""Field managers: `metadata.managedFields` and server-side apply, as kube-apiserver keeps them
(sigs.k8s.io/structured-merge-diff semantics), as pure functions over JSON objects.

Every write names a field manager (the `fieldManager` query parameter, else the first word of
the client's User-Agent). A write that is not an apply is an *Update*: its manager comes to own
the fields it added or changed, and other managers lose them, without conflicts. An *Apply*
(`application/apply-patch+yaml`) declares the complete set of fields its manager wants: the
configuration is merged into the live object, fields the manager applied before and no longer
applies are removed unless someone else owns them, and a field another manager owns whose value
the apply would change is a conflict (409) unless the request says `force=true`, which moves the
field to the applier.

Fields are paths of elements as FieldsV1 writes them: `f:<name>` a field or map key, `k:{...}`
an item of a list keyed by some of its fields (containers by name), `v:<json>` an item of a set,
`i:<n>` an index. What is a struct, a map, a keyed list, a set or an atomic value comes from the
kind's schema (built-in kinds: kube_types.json plus the list and atomicity markers below, which
k8s.io/api carries as comments; Volcano kinds: their CRD's openAPIV3Schema).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, Final

from lahar.api.kinds import Kind
from lahar.apiserver import openapi, protobuf

PathElement = tuple[str, str]  # (tag, text): ("f", "spec"), ("k", '{"name":"web"}'), ("v", '"x"'), ("i", "0")
Path = tuple[PathElement, ...]
FieldSet = frozenset[Path]

APPLY: Final = "Apply"
UPDATE: Final = "Update"
META: Final = "k8s.io.apimachinery.pkg.apis.meta.v1"
CORE: Final = "k8s.io.api.core.v1"
OBJECT_META: Final = f"{META}.ObjectMeta"
MAX_MANAGER_LENGTH: Final = 128


class FieldManagerError(ValueError):
    """An apply kube-apiserver refuses (the server answers 400)."""


class ConflictError(ValueError):
    """An apply that would change fields other managers own (the server answers 409)."""

    def __init__(
        self, conflicts: list[tuple[tuple[str, ...], Path]], entries: Mapping[tuple[str, ...], ManagerEntry]
    ) -> None:
        self.causes = [
            {
                "type": "FieldManagerConflict",
                "message": f"conflict with {_describe(entries[key])}",
                "field": path_text(path),
            }
            for key, path in conflicts
        ]
        super().__init__(_conflict_message(conflicts, entries))


# -- shapes: what each node of an object is ---------------------------------------------------------

SCALAR_TYPES: Final = {"string", "bytes", "bool", "int32", "int64"}
OPAQUE_TYPES: Final = {  # messages with their own JSON form: one value each
    f"{META}.Time",
    f"{META}.MicroTime",
    f"{META}.Duration",
    f"{META}.FieldsV1",
    "k8s.io.apimachinery.pkg.api.resource.Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
}
ANY_TYPES: Final = {"k8s.io.apimachinery.pkg.runtime.RawExtension"}
# +structType=atomic: replaced whole, owned as one field.
ATOMIC_STRUCTS: Final = {
    f"{META}.LabelSelector",
    f"{CORE}.NodeSelector",
    f"{CORE}.NodeSelectorTerm",
    f"{CORE}.ObjectReference",
    f"{CORE}.LocalObjectReference",
    f"{CORE}.TypedLocalObjectReference",
}
# +mapType=atomic
ATOMIC_MAPS: Final = {(f"{CORE}.PodSpec", "nodeSelector"), (f"{CORE}.ServiceSpec", "selector")}
# +listType=map with its +listMapKey fields (kube's patchMergeKey lists); every other list is
# atomic unless a set below. A `conditions` list whose items have a `type` is keyed by it.
LIST_MAP_KEYS: Final[Mapping[tuple[str, str], tuple[str, ...]]] = {
    (f"{CORE}.PodSpec", "containers"): ("name",),
    (f"{CORE}.PodSpec", "initContainers"): ("name",),
    (f"{CORE}.PodSpec", "ephemeralContainers"): ("name",),
    (f"{CORE}.PodSpec", "volumes"): ("name",),
    (f"{CORE}.PodSpec", "imagePullSecrets"): ("name",),
    (f"{CORE}.PodSpec", "hostAliases"): ("ip",),
    (f"{CORE}.PodSpec", "topologySpreadConstraints"): ("topologyKey", "whenUnsatisfiable"),
    (f"{CORE}.PodSpec", "schedulingGates"): ("name",),
    (f"{CORE}.PodSpec", "resourceClaims"): ("name",),
    (f"{CORE}.Container", "ports"): ("containerPort", "protocol"),
    (f"{CORE}.Container", "env"): ("name",),
    (f"{CORE}.Container", "volumeMounts"): ("mountPath",),
    (f"{CORE}.Container", "volumeDevices"): ("devicePath",),
    (f"{CORE}.EphemeralContainerCommon", "ports"): ("containerPort", "protocol"),
    (f"{CORE}.EphemeralContainerCommon", "env"): ("name",),
    (f"{CORE}.EphemeralContainerCommon", "volumeMounts"): ("mountPath",),
    (f"{CORE}.EphemeralContainerCommon", "volumeDevices"): ("devicePath",),
    (f"{CORE}.ServiceSpec", "ports"): ("port", "protocol"),
    (f"{CORE}.PodStatus", "podIPs"): ("ip",),
    (f"{CORE}.PodStatus", "hostIPs"): ("ip",),
    (f"{CORE}.NodeStatus", "addresses"): ("type",),
    (OBJECT_META, "ownerReferences"): ("uid",),
}
LIST_SETS: Final = {(OBJECT_META, "finalizers"), (f"{CORE}.NodeSpec", "podCIDRs")}
ATOMIC_LISTS: Final = {("k8s.io.api.batch.v1.JobStatus", "conditions")}
# Key fields a list item may leave out, with the default the schema gives them.
KEY_DEFAULTS: Final = {"protocol": "TCP"}


@dataclass(frozen=True)
class Shape:
    """One node's type: form is scalar, struct, map, list or any (not described: deduced from the
    value, maps granular and lists atomic). Built-in structs carry their message; CRD nodes their
    schema as a JSON text (hashable, so shapes cache)."""

    form: str
    message: str = ""
    schema: str = ""
    element: Shape | None = None  # a map's values, a list's items
    list_type: str = "atomic"  # atomic | set | map
    keys: tuple[str, ...] = ()
    atomic: bool = False  # a struct or map owned and replaced whole
    pointer: bool = True  # absent from Go's zero value of the parent (pointer, map, slice)


SCALAR: Final = Shape("scalar")
ANY: Final = Shape("any")


@cache
def shape_of(kind: Kind) -> Shape:
    """The kind's shape, once (the schemas are fixed while the server runs)."""
    message = protobuf.message_for(kind.api_version, kind.kind)
    if message is not None:
        return Shape("struct", message=message, pointer=False)
    schema = openapi.crd_schemas().get((kind.api_version, kind.kind))
    if schema is None:
        return ANY
    return Shape("struct", schema=json.dumps(schema, sort_keys=True), pointer=False)


@cache
def _message_fields(message: str) -> dict[str, tuple[str, tuple[str, ...], str]]:
    """json name -> (type, flags, declaring message), inline messages flattened."""
    fields: dict[str, tuple[str, tuple[str, ...], str]] = {}
    for _number, json_name, type_name, flags in protobuf.messages().get(message, []):
        if "inline" in flags:
            fields.update(_message_fields(type_name))
        else:
            fields[json_name] = (type_name, flags, message)
    return fields


def _type_shape(type_name: str, pointer: bool) -> Shape:
    if type_name in SCALAR_TYPES or type_name in OPAQUE_TYPES:
        return SCALAR
    if type_name in ANY_TYPES:
        return ANY
    return Shape("struct", message=type_name, atomic=type_name in ATOMIC_STRUCTS, pointer=pointer)


@cache
def _message_child(message: str, name: str) -> Shape | None:
    fields = _message_fields(message)
    if name not in fields:
        return SCALAR if name in ("apiVersion", "kind") else None
    type_name, flags, declared_in = fields[name]
    if "map" in flags:
        return Shape("map", element=_type_shape(type_name, True), atomic=(declared_in, name) in ATOMIC_MAPS)
    if "repeated" in flags:
        item = _type_shape(type_name, True)
        keys = LIST_MAP_KEYS.get((declared_in, name))
        if keys is None and name == "conditions" and "type" in _message_fields(type_name):
            keys = () if (declared_in, name) in ATOMIC_LISTS else ("type",)
        if keys:
            return Shape("list", element=item, list_type="map", keys=keys, pointer="omitempty" in flags)
        list_type = "set" if (declared_in, name) in LIST_SETS else "atomic"
        return Shape("list", element=item, list_type=list_type, pointer="omitempty" in flags)
    return _type_shape(type_name, "pointer" in flags)


@cache
def _parsed(text: str) -> dict[str, Any]:
    parsed = json.loads(text)
    return parsed if isinstance(parsed, dict) else {}


@cache
def _schema_shape(text: str) -> Shape:
    schema = _parsed(text)
    if schema.get("type") == "array":
        items = schema.get("items")
        keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
        list_type = schema.get("x-kubernetes-list-type", "atomic")
        element = _schema_shape(json.dumps(items, sort_keys=True)) if isinstance(items, dict) else ANY
        return Shape(
            "list", element=element, list_type=list_type if list_type in ("set", "map") else "atomic", keys=keys
        )
    atomic = schema.get("x-kubernetes-map-type") == "atomic"
    if isinstance(schema.get("properties"), dict):
        return Shape("struct", schema=text, atomic=atomic)
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        return Shape("map", element=_schema_shape(json.dumps(additional, sort_keys=True)), atomic=atomic)
    if schema.get("type") == "object" or schema.get("x-kubernetes-preserve-unknown-fields"):
        return ANY
    return SCALAR


def child_shape(shape: Shape, name: str) -> tuple[Shape, bool]:
    """(shape of a struct field or map value, whether it is a declared struct field)."""
    if shape.form == "map":
        return shape.element or ANY, False
    if shape.message:
        found = _message_child(shape.message, name)
        return (found, True) if found is not None else (ANY, False)
    if shape.schema:
        return _schema_child(shape.schema, name, not shape.pointer)
    return ANY, False


@cache
def _schema_child(text: str, name: str, root: bool) -> tuple[Shape, bool]:
    if root and name == "metadata":  # a custom resource's metadata is an ObjectMeta
        return Shape("struct", message=OBJECT_META, pointer=False), True
    schema = _parsed(text)
    properties = schema.get("properties") or {}
    if name in properties:
        return _schema_shape(json.dumps(properties[name], sort_keys=True)), True
    if name in ("apiVersion", "kind"):
        return SCALAR, True
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        return _schema_shape(json.dumps(additional, sort_keys=True)), False
    return ANY, False


def _form(shape: Shape, value: Any) -> str:
    """The node's form, the value deciding where the schema does not (or disagrees)."""
    if shape.form == "any" or value is None:
        if isinstance(value, dict):
            return "map"
        return "atomic" if isinstance(value, list) else "scalar"
    if shape.form in ("struct", "map"):
        if not isinstance(value, dict):
            return "scalar"
        return "atomic" if shape.atomic else shape.form
    if shape.form == "list":
        if not isinstance(value, list):
            return "scalar"
        return "atomic" if shape.list_type == "atomic" else "list"
    return "scalar"


# -- paths -------------------------------------------------------------------------------------------------


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def item_element(shape: Shape, item: Any, index: int) -> PathElement:
    """The path element naming a list item: its keys, its value (a set) or its index."""
    if shape.list_type == "map" and shape.keys:
        if not isinstance(item, dict):
            raise FieldManagerError(f"an item of a list keyed by {', '.join(shape.keys)} must be an object")
        key = {}
        for name in shape.keys:
            if name in item:
                key[name] = item[name]
            elif name in KEY_DEFAULTS:
                key[name] = KEY_DEFAULTS[name]
            else:
                raise FieldManagerError(f"associative list with keys has an element that omits key field {name!r}")
        return ("k", _canonical(key))
    if shape.list_type == "set":
        return ("v", _canonical(item))
    return ("i", str(index))


def path_text(path: Path) -> str:
    """As kube prints a field path: .spec.template.spec.containers[name="web"].image"""
    parts = []
    for tag, text in path:
        if tag == "f":
            parts.append(f".{text}")
        elif tag == "k":
            parts.append("[" + ",".join(f"{k}={_canonical(v)}" for k, v in json.loads(text).items()) + "]")
        elif tag == "v":
            parts.append(f"[={text}]")
        else:
            parts.append(f"[{text}]")
    return "".join(parts)


_TAG_ORDER: Final = {"f": 0, "k": 1, "v": 2, "i": 3}


def _element_order(element: PathElement) -> tuple[int, Any]:
    tag, text = element
    return _TAG_ORDER[tag], int(text) if tag == "i" else text


def _sorted_paths(paths: Iterable[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: [_element_order(e) for e in p])


# -- FieldsV1 ----------------------------------------------------------------------------------------------


def encode_fields(fields: Iterable[Path]) -> dict[str, Any]:
    """A set of paths as a FieldsV1 tree: `.` marks a node that is itself owned and has children."""
    members = set(fields)
    tree: dict[str, Any] = {}
    for path in members:
        node = tree
        for tag, text in path:
            node = node.setdefault(f"{tag}:{text}", {})
    tree = _in_order(tree)
    _mark_members(tree, (), members)
    return tree


def _in_order(node: dict[str, Any]) -> dict[str, Any]:
    """The tree with every node's keys in path order (what inserting the paths sorted gives),
    sorting each node's few keys rather than every path by all its elements."""
    items = sorted(node.items(), key=_key_order) if len(node) > 1 else node.items()
    return {key: _in_order(child) if child else {} for key, child in items}


def _key_order(item: tuple[str, Any]) -> tuple[int, Any]:
    tag, text = item[0][0], item[0][2:]
    return _TAG_ORDER[tag], int(text) if tag == "i" else text


def _mark_members(node: dict[str, Any], path: Path, members: set[Path]) -> None:
    for key, child in list(node.items()):
        tag, _, text = key.partition(":")
        child_path = (*path, (tag, text))
        _mark_members(child, child_path, members)  # first: the copy below must carry the marks made inside
        if child and child_path in members:
            node[key] = {".": {}, **child}


def decode_fields(tree: Any, path: Path = ()) -> frozenset[Path]:
    if not isinstance(tree, dict):
        raise FieldManagerError("fieldsV1 must be an object")
    found: set[Path] = set()
    if path and (not tree or "." in tree):
        found.add(path)
    for key, child in tree.items():
        if key == ".":
            continue
        tag, colon, text = key.partition(":")
        if not colon or tag not in _TAG_ORDER:
            raise FieldManagerError(f"invalid field path element {key!r} in fieldsV1")
        found |= decode_fields(child, (*path, (tag, text)))
    return frozenset(found)


# -- the three walks: field set, comparison, merge ------------------------------------------------------------


def field_set(value: dict[str, Any], shape: Shape) -> set[Path]:
    """The fields an applied configuration names (SMD's ToFieldSet): leaves, list items, and
    maps' own keys; a struct field holding a non-empty object is implied by its children."""
    found: set[Path] = set()
    _collect(value, shape, (), found)
    return found


def _collect(value: Any, shape: Shape, path: Path, found: set[Path]) -> None:
    form = _form(shape, value)
    if form in ("scalar", "atomic"):
        found.add(path)
    elif form == "list":
        for index, item in enumerate(value):
            item_path = (*path, item_element(shape, item, index))
            _collect(item, shape.element or ANY, item_path, found)
            found.add(item_path)
    else:
        for name, child in value.items():
            child_shape_, declared = child_shape(shape, name)
            child_path = (*path, ("f", name))
            _collect(child, child_shape_, child_path, found)
            if child is None or child == {} or not declared:
                found.add(child_path)
    if not path:
        found.discard(())


@dataclass
class Comparison:
    added: set[Path]
    modified: set[Path]
    removed: set[Path]

    def changed(self) -> set[Path]:
        return self.added | self.modified


_ABSENT: Final = object()


def compare(old: Any, new: Any, shape: Shape) -> Comparison:
    """What a write did, node by node: leaves added, changed or removed, and containers that
    appeared or went (which is how an Update comes to own a map itself: the `.` in FieldsV1)."""
    result = Comparison(set(), set(), set())
    _compare(old, new, shape, (), result)
    result.added.discard(())
    result.removed.discard(())
    return result


def _is_empty(value: Any) -> bool:
    return value is _ABSENT or value is None or value == {} or value == []


def _compare(old: Any, new: Any, shape: Shape, path: Path, result: Comparison) -> None:
    if old is new or (isinstance(old, (dict, list)) and old == new):
        return  # an unchanged subtree (most of an object, in most writes): nothing below it to walk
    form = _form(shape, new if new is not _ABSENT else old)
    if form in ("scalar", "atomic") or (_is_empty(old) and _is_empty(new)):
        if old is _ABSENT:
            result.added.add(path)
        elif new is _ABSENT:
            result.removed.add(path)
        elif old != new:
            result.modified.add(path)
        return
    if form == "list":
        old_items = _items(old, shape)
        new_items = _items(new, shape)
        for element in dict.fromkeys([*old_items, *new_items]):
            _compare(
                old_items.get(element, _ABSENT),
                new_items.get(element, _ABSENT),
                shape.element or ANY,
                (*path, element),
                result,
            )
    else:
        old_map = old if isinstance(old, dict) else {}
        new_map = new if isinstance(new, dict) else {}
        for name in dict.fromkeys([*old_map, *new_map]):
            _compare(
                old_map.get(name, _ABSENT),
                new_map.get(name, _ABSENT),
                child_shape(shape, name)[0],
                (*path, ("f", name)),
                result,
            )
    if old is _ABSENT:
        result.added.add(path)
    elif new is _ABSENT:
        result.removed.add(path)


def _items(value: Any, shape: Shape) -> dict[PathElement, Any]:
    if not isinstance(value, list):
        return {}
    return {item_element(shape, item, index): item for index, item in enumerate(value)}


def merge(live: Any, config: Any, shape: Shape) -> Any:
    """An applied configuration over the live object: structs and maps merge, keyed lists and
    sets merge item by item (the configuration's order for the items it names, the live object's
    other items where they were), everything else the configuration replaces."""
    form = _form(shape, config)
    if form in ("scalar", "atomic") or config is None:
        return config
    if form == "list":
        return _merge_list(live if isinstance(live, list) else [], config, shape)
    result = dict(live) if isinstance(live, dict) else {}
    for name, value in config.items():
        result[name] = merge(result.get(name), value, child_shape(shape, name)[0])
    return result


def _merge_list(live: list[Any], config: list[Any], shape: Shape) -> list[Any]:
    element_shape = shape.element or ANY
    live_items = _items(live, shape)
    config_items = _items(config, shape)
    result: list[Any] = []
    pending = list(config_items)  # config items not yet placed, in config order
    for element, item in live_items.items():
        if element not in config_items:
            result.append(item)
            continue
        # A live item the config names: first the config's items before it, then it, merged.
        while pending:
            next_element = pending.pop(0)
            result.append(merge(live_items.get(next_element), config_items[next_element], element_shape))
            if next_element == element:
                break
    result.extend(merge(live_items.get(e), config_items[e], element_shape) for e in pending)
    return result


def drop_nulls(value: Any) -> Any:
    """Nulls an apply leaves behind go, as the typed object they are decoded into drops them."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def remove_fields(obj: dict[str, Any], paths: set[Path], kept: set[Path], shape: Shape) -> dict[str, Any]:
    """Remove fields an applier no longer applies and nobody else owns (`paths`), keeping any part
    of them someone still owns (`kept`), and then the containers they leave empty and unowned."""
    result: Any = json.loads(json.dumps(obj))
    for path in sorted(paths, key=len, reverse=True):
        if any(len(k) > len(path) and k[: len(path)] == path for k in kept):
            continue
        _remove(result, path, shape, kept)
    return dict(result)


def _remove(node: Any, path: Path, shape: Shape, kept: set[Path]) -> None:
    """Remove path below node; afterwards remove the emptied container, unless kept."""
    if not path:
        return
    element, rest = path[0], path[1:]
    if isinstance(node, dict) and element[0] == "f" and element[1] in node:
        sub_shape = child_shape(shape, element[1])[0]
        if rest:
            _remove(node[element[1]], rest, sub_shape, {k[1:] for k in kept if k[:1] == (element,)})
        if not rest or (_is_empty(node[element[1]]) and not any(k[:1] == (element,) for k in kept)):
            del node[element[1]]
    elif isinstance(node, list):
        for index, item in enumerate(node):
            if item_element(shape, item, index) == element:
                if rest:
                    inner = {k[1:] for k in kept if k[:1] == (element,)}
                    _remove(item, rest, shape.element or ANY, inner)
                if not rest:
                    del node[index]
                break


# -- managedFields entries -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManagerEntry:
    manager: str
    operation: str
    api_version: str
    time: str
    fields: frozenset[Path]
    subresource: str = ""

    @property
    def key(self) -> tuple[str, ...]:
        """What makes two writes the same manager's (kube's manager identifier): an Update's
        API version counts, an Apply's does not."""
        version = self.api_version if self.operation == UPDATE else ""
        return (self.manager, self.operation, version, self.subresource)

    def to_json(self, tree: dict[str, Any] | None = None) -> dict[str, Any]:
        """The entry as managedFields hold it; `tree`: its fields already encoded."""
        entry: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode_fields(self.fields) if tree is None else tree,
        }
        if not self.time:  # a manager whose applies never changed the object has none
            del entry["time"]
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


def decode_entries(raw: Any) -> dict[tuple[str, ...], ManagerEntry]:
    if not isinstance(raw, list):
        raise FieldManagerError("managedFields must be a list")
    entries: dict[tuple[str, ...], ManagerEntry] = {}
    for item in raw:
        if not isinstance(item, dict) or item.get("fieldsType", "FieldsV1") != "FieldsV1":
            raise FieldManagerError("managedFields entries must be objects with fieldsType FieldsV1")
        entry = ManagerEntry(
            str(item.get("manager", "")),
            str(item.get("operation", UPDATE)),
            str(item.get("apiVersion", "")),
            str(item.get("time", "")),
            decode_fields(item.get("fieldsV1") or {}),
            str(item.get("subresource", "")),
        )
        entries[entry.key] = entry
    return entries


def encode_entries(entries: Iterable[ManagerEntry]) -> list[dict[str, Any]]:
    """In kube's order: Apply before Update, then oldest first, then by manager."""
    kept = [e for e in entries if e.fields]
    kept.sort(key=lambda e: (e.operation, e.time, e.manager, e.api_version, e.subresource))
    return [e.to_json() for e in kept]


def _describe(entry: ManagerEntry) -> str:
    text = json.dumps(entry.manager)
    if entry.subresource:
        text += f" with subresource {json.dumps(entry.subresource)}"
    if entry.operation == UPDATE:
        text += f" using {entry.api_version}"
    return text


def _conflict_message(
    conflicts: list[tuple[tuple[str, ...], Path]], entries: Mapping[tuple[str, ...], ManagerEntry]
) -> str:
    if len(conflicts) == 1:
        key, path = conflicts[0]
        return f"Apply failed with 1 conflict: conflict with {_describe(entries[key])}: {path_text(path)}"
    by_manager: dict[str, list[Path]] = {}
    for key, path in conflicts:
        by_manager.setdefault(_describe(entries[key]), []).append(path)
    lines = []
    for described in sorted(by_manager):
        lines.append(f"conflicts with {described}:")
        lines += [f"- {path_text(p)}" for p in by_manager[described]]
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


# -- what each write does to the managers -------------------------------------------------------------------------

# Fields no manager owns (kube's stripMeta set).
UNOWNED: Final[frozenset[Path]] = frozenset(
    {(("f", "apiVersion"),), (("f", "kind"),), (("f", "metadata"),)}
    | {
        (("f", "metadata"), ("f", name))
        for name in (
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        )
    }
)


def owned(paths: Iterable[Path], has_status: bool, subresource: str) -> frozenset[Path]:
    """The paths a write can own: not the identity fields, and on a kind with a status
    subresource not status through the main endpoint nor anything else through status."""
    status = ("f", "status")
    kept = set(paths) - UNOWNED
    if subresource == "status":
        return frozenset(p for p in kept if p[:1] == (status,))
    if has_status:
        return frozenset(p for p in kept if p[:1] != (status,))
    return frozenset(kept)


def now_time() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Manager:
    """Who writes, and how: the request's field manager, Apply or Update, the subresource."""

    name: str
    operation: str = UPDATE
    subresource: str = ""
    force: bool = False


def _without_managed(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def prior_entries(live: dict[str, Any] | None, sent: dict[str, Any] | None) -> dict[tuple[str, ...], ManagerEntry]:
    """The managers before a write: the body's managedFields where it carries valid ones (`[{}]`
    resets them), else the live object's, as kube-apiserver decides."""
    return _prior_entries(live, sent_managed_fields(sent))


def sent_managed_fields(sent: Any) -> Any:
    """The managedFields a request's object carries (None when it has none)."""
    metadata = sent.get("metadata") if isinstance(sent, dict) else None
    return metadata.get("managedFields") if isinstance(metadata, dict) else None


def _prior_entries(live: dict[str, Any] | None, sent_raw: Any) -> dict[tuple[str, ...], ManagerEntry]:
    if sent_raw == [{}]:
        return {}
    if sent_raw:
        try:
            return decode_entries(sent_raw)
        except FieldManagerError:
            pass
    try:
        return decode_entries(((live or {}).get("metadata") or {}).get("managedFields") or [])
    except FieldManagerError:
        return {}


def record_update(
    kind: Kind,
    old: dict[str, Any] | None,
    new: dict[str, Any],
    sent_raw: Any,
    manager: Manager,
) -> list[dict[str, Any]]:
    """The managedFields after an Update by `manager` from `old` (None: a create) to `new`; the
    managers before it are the request's managedFields (`sent_raw`, sent_managed_fields) where
    it carries valid ones, else `old`'s (prior_entries)."""
    shape = shape_of(kind)
    before = _without_managed(old) if old is not None else _zero_object(shape)
    comparison = compare(before, _without_managed(new), shape)
    changed = frozenset(owned(comparison.changed(), kind.has_status, manager.subresource))
    removed = frozenset(comparison.removed)
    live = _live_entries(old, sent_raw)
    if live is not None:
        return _update_encoded(live, changed, removed, kind.api_version, manager)
    return _update_decoded(_prior_entries(old, sent_raw), changed, removed, kind.api_version, manager)


def _update_decoded(
    entries: dict[tuple[str, ...], ManagerEntry],
    changed: FieldSet,
    removed: FieldSet,
    api_version: str,
    manager: Manager,
) -> list[dict[str, Any]]:
    """An Update's effect on the managers: `manager` comes to own what it changed, and every
    manager loses what the write changed or removed."""
    entry = ManagerEntry(manager.name, UPDATE, api_version, now_time(), frozenset(), manager.subresource)
    updated: dict[tuple[str, ...], ManagerEntry] = {}
    for key, other in entries.items():
        remaining = other.fields - changed - removed
        updated[key] = _with_fields(other, remaining)
    if changed:
        previous = updated.get(entry.key)
        fields = changed | (previous.fields if previous else frozenset())
        updated[entry.key] = _with_fields(entry, fields)
    return encode_entries(updated.values())


def _live_entries(old: dict[str, Any] | None, sent_raw: Any) -> list[dict[str, Any]] | None:
    """The live object's managedFields when they are the managers before a write (the request
    carries none, or the same): entries this module encoded, so already in canonical form. None
    when the request's own entries decide (_prior_entries reads them)."""
    if old is None:
        return None if sent_raw else []
    live = (old.get("metadata") or {}).get("managedFields") or []
    if sent_raw and sent_raw != live:
        return None
    return live if isinstance(live, list) and all(isinstance(item, dict) for item in live) else None


def _update_encoded(
    live: list[dict[str, Any]], changed: FieldSet, removed: FieldSet, api_version: str, manager: Manager
) -> list[dict[str, Any]]:
    """record_update on encoded entries: an entry the write takes no field from is kept as it
    was encoded (most writes touch one manager's entry), only the others are decoded and encoded
    again. Gives what decoding every entry, updating and encoding them all gives."""
    own_key = (manager.name, UPDATE, api_version, manager.subresource)
    gone = changed | removed
    kept: list[dict[str, Any]] = []
    own: dict[str, Any] | None = None
    for item in live:
        if _raw_key(item) == own_key:
            own = item
        elif not any(_tree_has(item.get("fieldsV1") or {}, path) for path in gone):
            kept.append(item)  # untouched: as it was
        else:
            remaining = decode_fields(item.get("fieldsV1") or {}) - gone
            if remaining:
                kept.append({**item, "fieldsV1": encode_fields(remaining)})
    own_tree = (own.get("fieldsV1") or {}) if own is not None else {}
    loses = own is not None and any(_tree_has(own_tree, path) for path in removed)
    if changed:
        # Its fields: what it changed, and what it had that the write did not remove.
        if own is not None and not loses and all(_tree_has(own_tree, path) for path in changed):
            tree = own_tree  # the same fields as before: only its time is new
        else:
            tree = encode_fields(changed | (decode_fields(own_tree) - removed))
        entry = ManagerEntry(manager.name, UPDATE, api_version, now_time(), frozenset(), manager.subresource)
        kept.append(entry.to_json(tree))
    elif own is not None and not loses:
        kept.append(own)  # the writer changed nothing it may own: its entry as it was
    elif own is not None and (remaining := decode_fields(own_tree) - removed):
        kept.append({**own, "fieldsV1": encode_fields(remaining)})
    kept.sort(key=_raw_order)
    return kept


def _raw_key(item: dict[str, Any]) -> tuple[str, ...]:
    """ManagerEntry.key of an encoded entry."""
    operation = str(item.get("operation", UPDATE))
    version = str(item.get("apiVersion", "")) if operation == UPDATE else ""
    return (str(item.get("manager", "")), operation, version, str(item.get("subresource", "")))


def _raw_order(item: dict[str, Any]) -> tuple[str, ...]:
    """encode_entries' order, of encoded entries."""
    return tuple(str(item.get(name, "")) for name in ("operation", "time", "manager", "apiVersion", "subresource"))


def _tree_has(tree: dict[str, Any], path: Path) -> bool:
    """Whether a FieldsV1 tree owns `path` (decode_fields(tree) would hold it), without decoding."""
    node: Any = tree
    for tag, text in path:
        node = node.get(f"{tag}:{text}")
        if not isinstance(node, dict):
            return False
    return not node or "." in node


def _with_time(entry: ManagerEntry, time: str) -> ManagerEntry:
    return ManagerEntry(entry.manager, entry.operation, entry.api_version, time, entry.fields, entry.subresource)


def _with_fields(entry: ManagerEntry, fields: frozenset[Path]) -> ManagerEntry:
    return ManagerEntry(entry.manager, entry.operation, entry.api_version, entry.time, fields, entry.subresource)


def apply(
    kind: Kind, live: dict[str, Any] | None, config: dict[str, Any], manager: Manager
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Server-side apply of `config` by `manager` to `live` (None: the object does not exist yet):
    (the new object, its managedFields). Raises ConflictError for fields others own."""
    shape = shape_of(kind)
    entries = prior_entries(live, None)
    base = _without_managed(live) if live is not None else {}
    config = _without_managed(config)
    applied = owned(field_set(config, shape), kind.has_status, manager.subresource)
    entry = ManagerEntry(manager.name, APPLY, kind.api_version, now_time(), applied, manager.subresource)
    previous = entries.get(entry.key)
    others = {key: e for key, e in entries.items() if key != entry.key}
    merged = merge(base, config, shape)
    if previous is not None:
        still_owned = set(applied).union(*(e.fields for e in others.values()))
        merged = remove_fields(merged, set(previous.fields) - still_owned, still_owned, shape)
    merged = drop_nulls(merged)
    if live is not None and merged == base:
        # An apply that changes nothing leaves the applier's time as it was (none for a new
        # manager), as kube-apiserver does: only a change of the object is a time to record.
        entry = _with_time(entry, previous.time if previous is not None else "")
    comparison = compare(base, merged, shape)
    changed = owned(comparison.changed(), kind.has_status, manager.subresource)
    conflicts = [(key, path) for key, other in others.items() for path in _sorted_paths(other.fields & changed)]
    if conflicts and not manager.force:
        raise ConflictError(conflicts, others)
    updated = {key: _with_fields(e, e.fields - changed - comparison.removed) for key, e in others.items()}
    updated[entry.key] = entry
    return merged, encode_entries(updated.values())


# -- Go's zero value: what a create is compared against -------------------------------------------------------


def zero_value(shape: Shape) -> dict[str, Any]:
    """The object a create starts from, as kube-apiserver builds it (an empty Go struct of the
    kind): structs held by value are there, pointers, maps and omitempty lists are not. A custom
    resource starts empty."""
    value = _zero(shape)
    return value if isinstance(value, dict) else {}


def _zero(shape: Shape) -> Any:
    if not shape.message:
        return {}
    result: dict[str, Any] = {}
    for name in _message_fields(shape.message):
        child = _message_child(shape.message, name)
        if child is None:
            continue
        if child.form == "struct" and not child.pointer and not child.atomic:
            result[name] = _zero(child)
        elif child.form == "list" and not child.pointer:
            result[name] = None
    return result


@cache
def _zero_object(shape: Shape) -> dict[str, Any]:
    """zero_value, once a shape: what every create is compared against (read, never changed)."""
    return zero_value(shape)
