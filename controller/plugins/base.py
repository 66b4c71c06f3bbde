"""What the job plugins share: the plugin protocol and the pod/object helpers. The plugins import
this module, never the package, so the registry in `__init__` can import them without a cycle."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from lahar.api.job import Job
from lahar.controller.naming import JOB_NAME_KEY, JOB_NAMESPACE_KEY, job_owner_reference

Obj = dict[str, Any]


class JobPlugin(Protocol):
    """What the controller calls for each plugin named in a Job's `spec.plugins`."""

    name: str

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        """Mutate `pod` (the pod of `task_name` number `index`) in place; idempotent."""

    def objects(self, job: Mapping[str, Any], args: list[str], existing: Iterable[Mapping[str, Any]] = ()) -> list[Obj]:
        """The objects the job needs. `existing` holds objects already in the cluster (any kinds,
        e.g. those owned by the job); a plugin reuses what it must not regenerate."""


class UnknownPluginError(ValueError):
    """A Job names a plugin Lahar does not implement."""

    def __init__(self, name: str, supported: Iterable[str]) -> None:
        super().__init__(f'unknown job plugin "{name}": supported plugins are {", ".join(sorted(supported))}')
        self.plugin_name = name


# --- helpers shared by the plugins -------------------------------------------------------------


def owned_metadata(job: Mapping[str, Any], name: str) -> Obj:
    """Metadata for an object belonging to `job`: same namespace, labelled, owned by it."""
    meta = job.get("metadata") or {}
    metadata: Obj = {
        "name": name,
        "labels": {JOB_NAME_KEY: meta.get("name", "")},
        "ownerReferences": [job_owner_reference(Job.from_dict(job))],
    }
    if meta.get("namespace"):
        metadata["namespace"] = meta["namespace"]
        metadata["labels"][JOB_NAMESPACE_KEY] = meta["namespace"]
    return metadata


def job_name(job: Mapping[str, Any]) -> str:
    return (job.get("metadata") or {}).get("name", "")


def find_existing(existing: Iterable[Mapping[str, Any]], kind: str, name: str) -> Mapping[str, Any] | None:
    return next(
        (obj for obj in existing if obj.get("kind") == kind and (obj.get("metadata") or {}).get("name") == name), None
    )


def parse_flags(args: Iterable[str]) -> dict[str, str]:
    """Go-flag style arguments as {name: value}; a bare `--flag` reads as "true"."""
    flags: dict[str, str] = {}
    for arg in args:
        if not arg.startswith("-"):
            continue
        name, _, value = arg.lstrip("-").partition("=")
        flags[name] = value if "=" in arg else "true"
    return flags


def flag_bool(flags: Mapping[str, str], name: str, default: bool) -> bool:
    """A Go boolean flag (Go's strconv.ParseBool spellings); unparsable values keep the default."""
    value = flags.get(name)
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return default


def pod_containers(pod: Mapping[str, Any]) -> list[Obj]:
    """Every container and initContainer of a pod."""
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def set_env(container: Obj, name: str, value: str) -> None:
    """Set an env entry, replacing one of the same name rather than adding a second."""
    env: list[Obj] = container.setdefault("env", [])
    entry = {"name": name, "value": value}
    for position, existing in enumerate(env):
        if existing.get("name") == name:
            env[position] = entry
            return
    env.append(entry)


def set_volume(pod: Obj, volume: Obj) -> None:
    """Add a pod volume, replacing one of the same name."""
    volumes: list[Obj] = pod.setdefault("spec", {}).setdefault("volumes", [])
    for position, existing in enumerate(volumes):
        if existing.get("name") == volume["name"]:
            volumes[position] = volume
            return
    volumes.append(volume)


def set_volume_mount(container: Obj, mount: Obj) -> None:
    """Add a volumeMount, replacing one of the same volume name."""
    mounts: list[Obj] = container.setdefault("volumeMounts", [])
    for position, existing in enumerate(mounts):
        if existing.get("name") == mount["name"]:
            mounts[position] = mount
            return
    mounts.append(mount)


def task_replicas(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(task name, replicas) for every task, with Volcano's default task names."""
    return [(task.name, task.replicas) for task in Job.from_dict(job).tasks]
