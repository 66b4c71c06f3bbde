"""`meta.k8s.io/v1 Table` answers (what `kubectl get` asks for): built-in kinds print their
columns from lahar/api/printing.py; custom resources print their CRD's additionalPrinterColumns,
as kube-apiserver does, so `kubectl get -w` and `-o wide` show the same columns on both."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from lahar.api import printing
from lahar.api.kinds import Kind
from lahar.apiserver import openapi
from lahar.apiserver.views import VIEWS

_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]")


def json_path(obj: Any, path: str) -> Any:
    """A simple JSONPath (`.spec.queue`, `.status.conditions[0].type`); None where it leads nowhere."""
    value = obj
    for name, index in _STEP.findall(path):
        if name and isinstance(value, dict):
            value = value.get(name)
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return None
    return value


def _cell(column: dict[str, Any], obj: dict[str, Any]) -> Any:
    value = json_path(obj, column.get("jsonPath", ""))
    if value is None:
        return None
    if column.get("type") == "date":
        return printing.human_age(value) if isinstance(value, str) else None
    return value


def table(
    kind: Kind, objects: Iterable[dict[str, Any]], resource_version: str, include_object: bool, continue_token: str = ""
) -> dict[str, Any]:
    view = VIEWS.get(kind)
    if view is not None:  # printed as the kind stored (kube prints its internal object), shown in its own shape
        shown = list(objects)
        printed = printing.table(
            view.stored, [view.to_stored(o) for o in shown], resource_version, include_object, continue_token
        )
        if include_object:
            for row, obj in zip(printed["rows"], shown, strict=True):
                row["object"] = obj
        return printed
    columns = openapi.crd_printer_columns().get((kind.api_version, kind.kind))
    if columns is None:
        return printing.table(kind, objects, resource_version, include_object, continue_token)
    rows = []
    for obj in objects:
        cells = [obj["metadata"].get("name"), *(_cell(column, obj) for column in columns)]
        partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}
        rows.append({"cells": cells, "object": obj if include_object else partial})
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    definitions = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
    definitions += [
        {
            "name": column["name"],
            "type": column.get("type", "string"),
            "format": column.get("format", ""),
            "description": column.get("description", ""),
            "priority": column.get("priority", 0),
        }
        for column in columns
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    }
