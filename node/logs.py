"""Where the local runtime keeps container logs, shared by the runtime that writes them and
`lahar logs` that reads them:

    <data-dir>/logs/<namespace>_<pod>_<uid>/<container>.log      stdout and stderr, every instance appended
    <data-dir>/logs/<namespace>_<pod>_<uid>/<container>.running  the running instance's pid (gone once it ends)
    <data-dir>/logs/<namespace>_<pod>_<uid>/pod.json             the pod's names and its containers in spec order

Namespaces and pod names cannot hold '_', so the directory name splits back unambiguously."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOGS_DIR = "logs"
MANIFEST = "pod.json"


def logs_root(data_dir: Path) -> Path:
    return Path(data_dir) / LOGS_DIR


def pod_log_dir(data_dir: Path, namespace: str, name: str, uid: str) -> Path:
    return logs_root(data_dir) / f"{namespace}_{name}_{uid}"


def container_log(pod_dir: Path, container: str) -> Path:
    return pod_dir / f"{container}.log"


def running_marker(pod_dir: Path, container: str) -> Path:
    return pod_dir / f"{container}.running"


def write_manifest(pod_dir: Path, pod: Mapping[str, Any]) -> None:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    manifest = {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "containers": [c.get("name") for c in spec.get("containers") or []],
        "initContainers": [c.get("name") for c in spec.get("initContainers") or []],
    }
    (pod_dir / MANIFEST).write_text(json.dumps(manifest))


@dataclass(frozen=True)
class PodLogs:
    """One pod's log directory, as `lahar logs` finds it."""

    directory: Path
    containers: tuple[str, ...]  # app containers in spec order
    init_containers: tuple[str, ...]

    def running(self, container: str) -> bool:
        """Whether an instance of the container runs now (its marker names a live process)."""
        try:
            pid = int(running_marker(self.directory, container).read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return False
        return True


def find_pod_logs(data_dir: Path, namespace: str, name: str) -> PodLogs | None:
    """The newest log directory of the pod (a pod re-created under the same name has a new uid)."""
    prefix = f"{namespace}_{name}_"
    try:
        candidates = [
            entry
            for entry in logs_root(data_dir).iterdir()
            if entry.name.startswith(prefix) and "_" not in entry.name[len(prefix) :] and entry.is_dir()
        ]
    except OSError:
        return None
    if not candidates:
        return None
    directory = max(candidates, key=lambda entry: entry.stat().st_mtime)
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):  # written by an older runtime, or cut short: the files say enough
        manifest = {"containers": sorted(p.stem for p in directory.glob("*.log"))}
    return PodLogs(directory, tuple(manifest.get("containers") or ()), tuple(manifest.get("initContainers") or ()))
