"""Secret (`v1`): what kube-apiserver's Secret strategy does on every write. `stringData` is a
write-only convenience: its values are base64-encoded into `data` (winning over `data` on the same
key) and it is never stored; `type` defaults to Opaque. Values of `data` must be base64."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from lahar.api.errors import Field, FieldError, json_copy

OPAQUE = "Opaque"


def defaults(obj: dict[str, Any]) -> dict[str, Any]:
    result = json_copy(obj)
    string_data = result.pop("stringData", None)
    if isinstance(string_data, dict):
        given = result.get("data")
        data: dict[str, Any] = given if isinstance(given, dict) else {}
        for key, value in string_data.items():
            if isinstance(value, str):
                data[key] = base64.b64encode(value.encode()).decode()
        result["data"] = data
    elif string_data is not None:
        result["stringData"] = string_data  # left for validate to report
    if not result.get("type"):
        result["type"] = OPAQUE
    return result


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    root.child("type").as_str()
    root.child("stringData").as_mapping()
    data = root.child("data")
    for key, value in (data.as_mapping() or {}).items():
        entry = data.child(key)
        if entry.as_str() is None:
            continue
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            entry.report("must be base64-encoded")
    if old is not None and old.get("type", OPAQUE) != obj.get("type", OPAQUE):
        root.child("type").report("field is immutable")
    return root.errors
