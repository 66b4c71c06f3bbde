"""Object metadata: the Kubernetes name, label and annotation rules (with Kubernetes' lengths and
wording), metadata validation shared by every kind, and a cheap `ObjectMeta` view."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lahar.api.errors import FORBIDDEN, INVALID, TOO_LONG, Field

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
ANNOTATIONS_TOTAL_MAX = 256 * 1024

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(rf"^{_LABEL}$")
_DNS1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME = re.compile(rf"^{_QUALIFIED_PART}$")
_LABEL_VALUE = re.compile(rf"^({_QUALIFIED_PART})?$")

# A checker returns the problems of a value, empty when it is fine (Kubernetes' IsDNS1123Label style).
NameCheck = Callable[[str], list[str]]


def _too_long(value: str, limit: int) -> list[str]:
    return [f"must be no more than {limit} characters"] if len(value) > limit else []


def dns1123_label_problems(value: str) -> list[str]:
    problems = _too_long(value, DNS1123_LABEL_MAX)
    if not _DNS1123_LABEL.match(value):
        problems.append(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')"
        )
    return problems


def dns1123_subdomain_problems(value: str) -> list[str]:
    problems = _too_long(value, DNS1123_SUBDOMAIN_MAX)
    if not _DNS1123_SUBDOMAIN.match(value):
        problems.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
            "or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
        )
    return problems


def dns1035_label_problems(value: str) -> list[str]:
    problems = _too_long(value, DNS1123_LABEL_MAX)
    if not _DNS1035_LABEL.match(value):
        problems.append(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
            "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name' or 'abc-123')"
        )
    return problems


def path_segment_problems(value: str) -> list[str]:
    """Names that only have to be usable in a URL path (Events)."""
    if value in (".", ".."):
        return [f'may not be "{value}"']
    return [f'may not contain "{c}"' for c in "/%" if c in value]


def qualified_name_problems(value: str) -> list[str]:
    """Label and annotation keys: an optional DNS subdomain prefix and '/', then a name."""
    prefix, slash, name = value.rpartition("/")
    if slash and not prefix:
        return ["prefix part must be non-empty"]
    problems = [f"prefix part {p}" for p in dns1123_subdomain_problems(prefix)] if slash else []
    if not name:
        return [*problems, "name part must be non-empty"]
    problems += [f"name part {p}" for p in _too_long(name, QUALIFIED_NAME_MAX)]
    if not _QUALIFIED_NAME.match(name):
        problems.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
            "end with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')"
        )
    return problems


def label_value_problems(value: str) -> list[str]:
    problems = _too_long(value, LABEL_VALUE_MAX)
    if not _LABEL_VALUE.match(value):
        problems.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
            "or '.', and must start and end with an alphanumeric character"
        )
    return problems


def check_name(field: Field, check: NameCheck, allow_empty: bool = False) -> str | None:
    """Read a string at `field` and report each problem `check` finds; the string when valid.
    `allow_empty` is for optional references, where "" means "none"."""
    value = field.as_str()
    if value is None or (allow_empty and value == ""):
        return None
    problems = check(value)
    for problem in problems:
        field.report(
            f'invalid value "{value}": {problem}', TOO_LONG if problem.startswith("must be no more than") else INVALID
        )
    return None if problems else value


def validate_labels(labels: Field) -> None:
    for key, value in labels.entries():
        for problem in qualified_name_problems(key):
            value.report(f'invalid label key "{key}": {problem}')
        check_name(value, label_value_problems)


def validate_annotations(annotations: Field) -> None:
    total = 0
    for key, value in annotations.entries():
        # Kubernetes lowercases annotation keys before checking them.
        for problem in qualified_name_problems(key.lower()):
            value.report(f'invalid annotation key "{key}": {problem}')
        text = value.as_str()
        total += len(key) + len(text or "")
    if total > ANNOTATIONS_TOTAL_MAX:
        annotations.report(
            f"annotations may not be larger than {ANNOTATIONS_TOTAL_MAX} bytes (they are {total})", TOO_LONG
        )


def validate_owner_references(references: Field) -> None:
    controllers = 0
    for reference in references.elements():
        for name in ("apiVersion", "kind", "name", "uid"):
            reference.child(name).require_str()
        if reference.child("controller").as_bool():
            controllers += 1
        reference.child("blockOwnerDeletion").as_bool()
    if controllers > 1:
        references.report("only one reference can have controller set to true")


def _mask_trailing_dash(name: str) -> str:
    """generateName prefixes may end in '-': check them as if a suffix followed (as Kubernetes does)."""
    return name[:-1] + "a" if len(name) > 1 and name.endswith("-") else name


def validate_object_meta(metadata: Field, namespaced: bool, name_check: NameCheck = dns1123_subdomain_problems) -> None:
    """The rules every object's metadata follows, whatever its kind."""
    if not metadata.require_present():
        return
    name = metadata.child("name")
    generate_name = metadata.child("generateName")
    if name.as_str():
        check_name(name, name_check)
    elif generate_name.as_str():
        prefix = generate_name.as_str() or ""
        for problem in name_check(_mask_trailing_dash(prefix)):
            generate_name.report(f'invalid value "{prefix}": {problem}')
    else:
        name.required("name or generateName is required")

    namespace = metadata.child("namespace")
    if namespaced:
        if namespace.require_str():
            check_name(namespace, dns1123_label_problems)
    elif namespace.as_str():
        namespace.report("not allowed on this type", FORBIDDEN)

    validate_labels(metadata.child("labels"))
    validate_annotations(metadata.child("annotations"))
    validate_owner_references(metadata.child("ownerReferences"))
    for finalizer in metadata.child("finalizers").elements():
        check_name(finalizer, qualified_name_problems)
    for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
        metadata.child(key).as_str()
    metadata.child("generation").as_int(minimum=0, bits=64)


IMMUTABLE_META_FIELDS = ("name", "namespace", "uid", "creationTimestamp")


def validate_object_meta_update(metadata: Field, old_metadata: Mapping[str, Any]) -> None:
    """Identity fields never change once an object exists (an empty new value means "unchanged")."""
    for key in IMMUTABLE_META_FIELDS:
        new_value = metadata.child(key).value
        old_value = old_metadata.get(key)
        if new_value not in (None, "") and old_value not in (None, "") and new_value != old_value:
            metadata.child(key).report("field is immutable", FORBIDDEN)


@dataclass(frozen=True, slots=True)
class OwnerReference:
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False
    block_owner_deletion: bool = False

    @classmethod
    def from_dict(cls, ref: Mapping[str, Any]) -> OwnerReference:
        return cls(
            ref.get("apiVersion", ""),
            ref.get("kind", ""),
            ref.get("name", ""),
            ref.get("uid", ""),
            bool(ref.get("controller")),
            bool(ref.get("blockOwnerDeletion")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": self.controller,
            "blockOwnerDeletion": self.block_owner_deletion,
        }


_EMPTY: Mapping[str, Any] = {}


class ObjectMeta:
    """A read-only view over an object's `metadata` dict: no copy, nothing parsed until asked."""

    __slots__ = ("raw",)

    def __init__(self, metadata: Mapping[str, Any] | None) -> None:
        self.raw: Mapping[str, Any] = metadata if isinstance(metadata, Mapping) else _EMPTY

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectMeta:
        return cls(obj.get("metadata"))

    @property
    def name(self) -> str:
        return self.raw.get("name") or ""

    @property
    def namespace(self) -> str:
        return self.raw.get("namespace") or ""

    @property
    def key(self) -> str:
        """`namespace/name`, or `name` for cluster-scoped objects (the informer cache key)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def uid(self) -> str:
        return self.raw.get("uid") or ""

    @property
    def labels(self) -> Mapping[str, str]:
        return self.raw.get("labels") or _EMPTY

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.raw.get("annotations") or _EMPTY

    @property
    def owner_references(self) -> tuple[OwnerReference, ...]:
        return tuple(OwnerReference.from_dict(r) for r in self.raw.get("ownerReferences") or ())

    @property
    def controller_ref(self) -> OwnerReference | None:
        return next((r for r in self.owner_references if r.controller), None)

    @property
    def resource_version(self) -> str:
        return self.raw.get("resourceVersion") or ""

    @property
    def generation(self) -> int:
        return self.raw.get("generation") or 0

    @property
    def creation_timestamp(self) -> str | None:
        return self.raw.get("creationTimestamp")

    @property
    def deletion_timestamp(self) -> str | None:
        return self.raw.get("deletionTimestamp")

    @property
    def is_deleting(self) -> bool:
        return self.deletion_timestamp is not None

    def __repr__(self) -> str:
        return f"ObjectMeta({self.key!r})"


class MetaAccessors:
    """Identity accessors shared by the typed views, each of which holds `meta: ObjectMeta`."""

    __slots__ = ()
    meta: ObjectMeta

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def namespace(self) -> str:
        return self.meta.namespace

    @property
    def key(self) -> str:
        return self.meta.key

    @property
    def uid(self) -> str:
        return self.meta.uid

    @property
    def labels(self) -> Mapping[str, str]:
        return self.meta.labels

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.meta.annotations


_NO_FIELDS: Mapping[str, Any] = {}


class ObjectView(MetaAccessors):
    """A read-only typed view over an object dict: its metadata, spec and status (empty if absent)."""

    __slots__ = ("meta", "raw", "spec", "status")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.raw = obj
        self.meta = ObjectMeta.of(obj)
        self.spec: Mapping[str, Any] = obj.get("spec") or _NO_FIELDS
        self.status: Mapping[str, Any] = obj.get("status") or _NO_FIELDS
