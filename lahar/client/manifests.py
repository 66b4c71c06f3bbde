"""Manifests: YAML or JSON files of API objects, read, defaulted and checked as the embedded server
would store them, then applied (create, or replace the desired state). Shared by `lahar apply` and
`lahar up --demo`."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from lahar.api import admission, kinds
from lahar.api.errors import ValidationError
from lahar.api.kinds import Kind, UnknownKindError
from lahar.client.errors import NotFound

if TYPE_CHECKING:
    from lahar.client.api import KubeApi

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(ValueError):
    """A manifest that cannot be read or is refused; the message names the file and document."""


def manifest_files(paths: list[str]) -> Iterator[tuple[str, str]]:
    """(source name, text) of every manifest named: files, directories (sorted), or stdin."""
    for path_text in paths:
        if path_text == "-":
            yield "<stdin>", sys.stdin.read()
            continue
        path = Path(path_text)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES)
            if not found:
                raise ManifestError(f"{path}: no .yaml, .yml or .json files in this directory")
            for file in found:
                yield str(file), file.read_text()
        elif path.exists():
            yield str(path), path.read_text()
        else:
            raise ManifestError(f"{path}: no such file or directory")


def load_manifests(paths: list[str], namespace: str | None) -> list[tuple[Kind, dict[str, Any]]]:
    """Parse and check every document first, so a bad one stops the command before anything is written."""
    objects: list[tuple[Kind, dict[str, Any]]] = []
    for source, text in manifest_files(paths):
        try:
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise ManifestError(f"{source}: not valid YAML: {exc}") from exc
        for index, doc in enumerate(documents):
            where = f"{source} (document {index + 1})"
            for obj in (
                doc.get("items", []) if isinstance(doc, dict) and doc.get("kind", "").endswith("List") else [doc]
            ):
                objects.append(checked_manifest(obj, namespace, where))
    if not objects:
        raise ManifestError("no objects found in " + ", ".join(paths))
    return objects


def checked_manifest(obj: Any, namespace: str | None, where: str) -> tuple[Kind, dict[str, Any]]:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: a manifest must be a mapping, not {type(obj).__name__}")
    for field in ("apiVersion", "kind"):
        if not obj.get(field):
            raise ManifestError(f"{where}: {field} is required")
    try:
        kind = kinds.for_object(obj["apiVersion"], obj["kind"])
    except UnknownKindError as exc:
        raise ManifestError(f"{where}: {exc}") from exc
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ManifestError(f"{where}: metadata.name is required")
    if kind.namespaced:
        meta.setdefault("namespace", namespace or "default")
    # Defaulted as the embedded server would store it, so re-applying an unchanged file changes nothing.
    obj = admission.apply_defaults(kind, obj)
    try:
        admission.validate(kind, obj)
    except ValidationError as exc:
        raise ManifestError(f'{where}: {kind.kind} "{meta["name"]}" is invalid: {exc}') from exc
    return kind, obj


def display_name(kind: Kind, name: str) -> str:
    return f"{kind.singular}.{kind.group}/{name}" if kind.group else f"{kind.singular}/{name}"


def apply_object(api: KubeApi, kind: Kind, obj: dict[str, Any]) -> str:
    """Create the object, or replace its desired state (everything but status) when it exists."""
    meta = obj["metadata"]
    try:
        current = api.get(kind, meta["name"], meta.get("namespace"))
    except NotFound:
        api.create(kind, obj, meta.get("namespace"))
        return "created"
    desired = {**current, **{k: v for k, v in obj.items() if k not in ("metadata", "status")}}
    desired["metadata"] = {**current["metadata"], "labels": meta.get("labels"), "annotations": meta.get("annotations")}
    for field in ("labels", "annotations"):
        if desired["metadata"][field] is None:
            desired["metadata"].pop(field)
    if desired == current:
        return "unchanged"
    api.update(kind, desired)
    return "configured"
