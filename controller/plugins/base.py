"""What the job plugins share: the plugin protocol and the pod/object helpers. The plugins import
this module, never the package, so the registry in `__init__` can import them without a cycle."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from lahar.api.job import Job, TaskSpec
from lahar.controller.naming import JOB_NAME_KEY, JOB_NAMESPACE_KEY, job_owner_reference, pod_name

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


def pod_containers(pod: Mapping[str, Any]) -> list[Obj]:
    """Every container and initContainer of a pod."""
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def set_env(container: Obj, name: str, value: str) -> None:
    """Set an env value, replacing an entry of the same name rather than adding a second."""
    add_env(container, {"name": name, "value": value})


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


def domain_name(job: Mapping[str, Any], task: TaskSpec, index: int) -> str:
    """The DNS name of a task's pod, `<hostname>.<subdomain>`: the template's own hostname and
    subdomain when it sets them, else `<job>-<task>-<index>.<job>` (Volcano's MakeDomainName,
    which the svc plugin's headless Service makes resolvable)."""
    spec = task.template.get("spec") or {}
    name = job_name(job)
    return f"{spec.get('hostname') or pod_name(name, task.name, index)}.{spec.get('subdomain') or name}"


def task_hosts(job: Mapping[str, Any], task: TaskSpec) -> list[str]:
    """Every pod's DNS name in the task; a template with its own hostname gives every pod that
    one name, so it is listed once (as Volcano's GenerateHosts)."""
    if (task.template.get("spec") or {}).get("hostname"):
        return [domain_name(job, task, 0)] if task.replicas else []
    return [domain_name(job, task, index) for index in range(task.replicas)]


def job_tasks(job: Mapping[str, Any]) -> tuple[TaskSpec, ...]:
    return Job.from_dict(job).tasks


def task_named(job: Mapping[str, Any], name: str) -> TaskSpec | None:
    return Job.from_dict(job).task(name)


def add_container_port(container: Obj, name: str, port: int) -> None:
    """Open `port` on the container unless it already lists it (Volcano's openContainerPort)."""
    ports: list[Obj] = container.setdefault("ports", [])
    if not any(existing.get("containerPort") == port for existing in ports):
        ports.append({"name": name, "containerPort": port})


def add_env(container: Obj, entry: Obj) -> None:
    """Set an env entry (a value or a valueFrom), replacing one of the same name."""
    env: list[Obj] = container.setdefault("env", [])
    for position, existing in enumerate(env):
        if existing.get("name") == entry["name"]:
            env[position] = entry
            return
    env.append(entry)


def set_annotation(pod: Obj, key: str, value: str) -> None:
    pod.setdefault("metadata", {}).setdefault("annotations", {})[key] = value
