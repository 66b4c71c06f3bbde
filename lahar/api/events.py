"""events.k8s.io/v1 Event validation, as Kubernetes' ValidateEventCreate/Update apply it to that
API: the reporting fields are required, and a new Event must be written the new way (eventTime
set, type Normal or Warning, none of the deprecated core/v1 fields)."""

from __future__ import annotations

from typing import Any

from lahar.api.errors import Field, FieldError

EVENT_TYPES = ("Normal", "Warning")
MAX_NOTE_LENGTH = 1024  # bytes, as kube's noteLengthLimit
MAX_FIELD_LENGTH = 128


def validate_v1(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    for name in ("reportingController", "reportingInstance", "action", "reason"):
        value = root.child(name)
        text = value.as_str()
        if not text:
            value.required("Required value")
        elif len(text) > MAX_FIELD_LENGTH and name != "reportingController":
            value.report(f"must have at most {MAX_FIELD_LENGTH} bytes")
    note = root.child("note")
    text = note.as_str()
    if text is not None and len(text.encode()) > MAX_NOTE_LENGTH:
        note.report(f"must have at most {MAX_NOTE_LENGTH} bytes")
    if old is None:
        _validate_new(root)
    return root.errors


def _validate_new(root: Field) -> None:
    event_time = root.child("eventTime")
    if event_time.value is None:
        event_time.required("Required value")
    else:
        event_time.as_str()
    kind = root.child("type")
    if kind.value not in EVENT_TYPES:
        kind.report(f"has invalid value: {kind.value if kind.value is not None else ''}")
    for name in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp"):
        if root.child(name).value is not None:
            root.child(name).report("needs to be unset")
    if root.child("deprecatedCount").value not in (None, 0):
        root.child("deprecatedCount").report("needs to be unset")
    source = root.child("deprecatedSource").value
    if isinstance(source, dict) and (source.get("component") or source.get("host")):
        root.child("deprecatedSource").report("needs to be unset")
