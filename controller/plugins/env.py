"""The `env` plugin: every container learns its pod's index within its task.

Volcano sets both names (`VK_` is the pre-rename spelling, still read by old images)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lahar.controller.plugins.base import Obj, pod_containers, set_env

TASK_INDEX_ENV_NAMES = ("VC_TASK_INDEX", "VK_TASK_INDEX")


class EnvPlugin:
    name = "env"

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        for container in pod_containers(pod):
            for env_name in TASK_INDEX_ENV_NAMES:
                set_env(container, env_name, str(index))

    def objects(self, job: Mapping[str, Any], args: list[str], existing: Iterable[Mapping[str, Any]] = ()) -> list[Obj]:
        return []
