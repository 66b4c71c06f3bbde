"""Kubernetes' protobuf encoding of built-in kinds, read into the JSON form the server stores.

kubectl's typed commands (`create namespace`, `create configmap`, `create deployment`, `auth
can-i`, ...) send `application/vnd.kubernetes.protobuf` bodies and accept JSON answers, as they
do from kube-apiserver. A body is the 4-byte magic `k8s\\0` and a runtime.Unknown message whose
TypeMeta names the kind and whose `raw` is the kind's own message. The field tables come from
kube_types.json (scripts/gen-kube-types.py); how a decoded value becomes JSON follows the Go
structs: zero values of `omitempty` non-pointer fields vanish, pointer fields keep theirs, and
embedded structs are promoted into their parent. Custom resources have no protobuf form
(kube-apiserver answers 415 for them too).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
META = "k8s.io.apimachinery.pkg.apis.meta.v1"
# apiVersion -> protobuf package of its kinds
PACKAGES = {
    "v1": "k8s.io.api.core.v1",
    "apps/v1": "k8s.io.api.apps.v1",
    "batch/v1": "k8s.io.api.batch.v1",
    "coordination.k8s.io/v1": "k8s.io.api.coordination.v1",
    "events.k8s.io/v1": "k8s.io.api.events.v1",
    "policy/v1": "k8s.io.api.policy.v1",
    "scheduling.k8s.io/v1": "k8s.io.api.scheduling.v1",
    "authorization.k8s.io/v1": "k8s.io.api.authorization.v1",
    "autoscaling/v1": "k8s.io.api.autoscaling.v1",
    "meta.k8s.io/v1": META,
}
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


class ProtobufError(ValueError):
    """A body that is not well-formed protobuf."""


class NoProtobufFormError(ProtobufError):
    """A kind with no protobuf form here (custom resources, kinds not served)."""


@cache
def messages() -> dict[str, list[tuple[int, str, str, tuple[str, ...]]]]:
    document = json.loads((Path(__file__).parent / "kube_types.json").read_text())
    return {
        name: [(number, json_name, type_name, tuple(flags)) for number, json_name, type_name, flags in fields]
        for name, fields in document["messages"].items()
    }


def message_for(api_version: str, kind: str) -> str | None:
    """The protobuf message of a kind (None: not a built-in kind the server knows)."""
    for package in (PACKAGES.get(api_version), META):
        if package and f"{package}.{kind}" in messages():
            return f"{package}.{kind}"
    return None


def decode_body(body: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object kube-apiserver would have read from it."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf prefix")
    unknown = _fields(body[len(MAGIC) :])
    type_meta = _fields(_last(unknown, 1, b""))
    api_version = _text(_last(type_meta, 1, b""))
    kind = _text(_last(type_meta, 2, b""))
    name = message_for(api_version, kind)
    if name is None:
        raise NoProtobufFormError(f"no protobuf form is served for kind {kind!r} in version {api_version!r}")
    obj = _message(name, _last(unknown, 2, b""))
    return {"apiVersion": api_version, "kind": kind, **obj}


# -- wire format -----------------------------------------------------------------------------------


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise ProtobufError("a varint runs past the end of the message")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise ProtobufError("a varint is longer than 10 bytes")


def _fields(data: bytes) -> dict[int, list[int | bytes]]:
    """Field number -> its values in order (varints as ints, length-delimited as bytes)."""
    found: dict[int, list[int | bytes]] = {}
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == VARINT:
            value, position = _varint(data, position)
        elif wire == LENGTH:
            length, position = _varint(data, position)
            if position + length > len(data):
                raise ProtobufError(f"field {number} runs past the end of the message")
            value, position = data[position : position + length], position + length
        elif wire == FIXED64:
            value, position = int.from_bytes(data[position : position + 8], "little"), position + 8
        elif wire == FIXED32:
            value, position = int.from_bytes(data[position : position + 4], "little"), position + 4
        else:
            raise ProtobufError(f"field {number} has wire type {wire}, which Kubernetes kinds do not use")
        found.setdefault(number, []).append(value)
    return found


def _last(fields: dict[int, list[int | bytes]], number: int, default: Any) -> Any:
    values = fields.get(number)
    return values[-1] if values else default


def _text(value: Any) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("a string field is not length-delimited")
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise ProtobufError(f"a string field is not UTF-8: {exc}") from exc


def _signed(value: int, bits: int) -> int:
    value &= (1 << 64) - 1
    if value >= 1 << 63:
        value -= 1 << 64
    return value if bits == 64 else max(min(value, 2**31 - 1), -(2**31))


# -- values ---------------------------------------------------------------------------------------------


def _scalar(type_name: str, value: int | bytes) -> Any:
    if type_name == "string":
        return _text(value)
    if type_name == "bytes":
        if not isinstance(value, bytes):
            raise ProtobufError("a bytes field is not length-delimited")
        return base64.b64encode(value).decode()
    if isinstance(value, bytes):
        raise ProtobufError(f"a {type_name} field is length-delimited")
    if type_name == "bool":
        return bool(value)
    if type_name in ("int32", "int64"):
        return _signed(value, 32 if type_name == "int32" else 64)
    raise ProtobufError(f"unknown scalar type {type_name}")


def _values(type_name: str, raw_values: list[int | bytes]) -> list[Any]:
    """Every value of a field; packed repeated scalars are unpacked."""
    values: list[Any] = []
    for raw in raw_values:
        if type_name.startswith("k8s.io."):
            if not isinstance(raw, bytes):
                raise ProtobufError(f"a {type_name} field is not length-delimited")
            values.append(_message(type_name, raw))
        elif isinstance(raw, bytes) and type_name in ("int32", "int64", "bool"):
            position = 0
            while position < len(raw):
                number, position = _varint(raw, position)
                values.append(_scalar(type_name, number))
        else:
            values.append(_scalar(type_name, raw))
    return values


def _is_zero(value: Any) -> bool:
    return value is None or value in ("", 0, False) or value == {} or value == []


def _message(name: str, data: bytes) -> Any:
    special = _SPECIAL.get(name)
    if special is not None:
        return special(_fields(data))
    table = messages().get(name)
    if table is None:
        raise ProtobufError(f"no field table for {name}")
    fields = _fields(data)
    obj: dict[str, Any] = {}
    for number, json_name, type_name, flags in table:
        raw_values = fields.get(number)
        if not raw_values:
            continue
        if "map" in flags:
            value: Any = {}
            for entry in raw_values:
                if not isinstance(entry, bytes):
                    raise ProtobufError(f"map field {json_name} entry is not length-delimited")
                pair = _fields(entry)
                key = _text(_last(pair, 1, b""))
                value[key] = _values(type_name, pair.get(2) or [b"" if type_name != "bool" else 0])[-1]
        elif "repeated" in flags:
            value = _values(type_name, raw_values)
        else:
            value = _values(type_name, raw_values[-1:])[-1]
        if "inline" in flags and isinstance(value, dict):
            obj.update(value)
        elif value is None or ("pointer" not in flags and "omitempty" in flags and _is_zero(value)):
            continue
        else:
            obj[json_name] = value
    return obj


def _time(fields: dict[int, list[int | bytes]], micro: bool = False) -> str | None:
    seconds = _signed(_last(fields, 1, 0), 64)
    nanos = _signed(_last(fields, 2, 0), 32)
    if not seconds and not nanos:
        return None  # the zero time is null in JSON
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos // 1000:06d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(fields: dict[int, list[int | bytes]]) -> str:
    """Go's time.Duration.String() of the nanoseconds (e.g. 1h2m3s, 1.5s, 0s)."""
    nanos = _signed(_last(fields, 1, 0), 64)
    sign, nanos = ("-", -nanos) if nanos < 0 else ("", nanos)
    if nanos < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size or unit == "ns":
                return f"{sign}{_trim(nanos / size)}{unit}" if nanos else "0s"
    hours, rest = divmod(nanos, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = _trim(rest / 1_000_000_000)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "") + f"{seconds}s"
    return sign + text


def _trim(number: float) -> str:
    return f"{number:.9f}".rstrip("0").rstrip(".")


def _int_or_string(fields: dict[int, list[int | bytes]]) -> int | str:
    if _last(fields, 1, 0) == 1:
        return _text(_last(fields, 3, b""))
    return _signed(_last(fields, 2, 0), 32)


def _raw_json(fields: dict[int, list[int | bytes]]) -> Any:
    raw = _last(fields, 1, b"")
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtobufError(f"an embedded object is not JSON: {exc}") from exc


_SPECIAL = {
    f"{META}.Time": _time,
    f"{META}.MicroTime": lambda fields: _time(fields, micro=True),
    f"{META}.Duration": _duration,
    f"{META}.FieldsV1": _raw_json,
    "k8s.io.apimachinery.pkg.runtime.RawExtension": _raw_json,
    "k8s.io.apimachinery.pkg.api.resource.Quantity": lambda fields: _text(_last(fields, 1, b"")),
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": _int_or_string,
}
