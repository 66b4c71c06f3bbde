"""Volcano's job plugins (`spec.plugins`: `env`, `svc`, `ssh`, and the distributed-framework
plugins `pytorch`, `tensorflow`, `mpi`, `ray`, `hcclrank`) as pure functions.

A plugin does two things, and neither touches the API server:
- `on_pod` mutates a pod the controller is building for `<job>-<task>-<index>`;
- `objects` returns the extra objects the job needs (Service, ConfigMap, Secret), each owned by the
  job so that deleting the job deletes them.
The reconcile loop creates or updates what `objects` returns and builds pods through `on_pod`.
Both are idempotent: applying them to an already-mutated pod changes nothing, and `objects` given
what already exists (`existing`) returns the same objects again (the ssh key is not regenerated).

Arguments are Go-flag style (`--flag`, `--flag=value`, `-flag`), as Volcano parses them; like
Volcano, a plugin ignores arguments it does not know.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lahar.controller.plugins.base import JobPlugin, Obj, UnknownPluginError
from lahar.controller.plugins.env import EnvPlugin
from lahar.controller.plugins.frameworks import HcclRankPlugin, MpiPlugin, PytorchPlugin, RayPlugin, TensorflowPlugin
from lahar.controller.plugins.ssh import SshPlugin
from lahar.controller.plugins.svc import SvcPlugin

__all__ = ["PLUGINS", "JobPlugin", "UnknownPluginError", "apply_on_pod", "get_plugin", "job_objects", "job_plugins"]

# In the order they edit a pod: hcclrank last, since it reads the RANK a framework plugin set.
PLUGINS: dict[str, JobPlugin] = {
    plugin.name: plugin
    for plugin in (
        EnvPlugin(),
        SvcPlugin(),
        SshPlugin(),
        PytorchPlugin(),
        TensorflowPlugin(),
        MpiPlugin(),
        RayPlugin(),
        HcclRankPlugin(),
    )
}


def get_plugin(name: str) -> JobPlugin:
    """The plugin called `name`; UnknownPluginError names the supported ones otherwise."""
    try:
        return PLUGINS[name]
    except KeyError:
        raise UnknownPluginError(name, PLUGINS) from None


def job_plugins(job: Mapping[str, Any]) -> list[tuple[JobPlugin, list[str]]]:
    """The job's plugins with their arguments, in PLUGINS' order (so pods built twice come out
    the same); unknown names raise UnknownPluginError."""
    plugins = (job.get("spec") or {}).get("plugins") or {}
    for name in plugins:
        get_plugin(name)
    return [(PLUGINS[name], list(plugins[name] or ())) for name in PLUGINS if name in plugins]


def apply_on_pod(pod: Obj, job: Mapping[str, Any], task_name: str, index: int) -> None:
    """Run every plugin of the job on one pod."""
    for plugin, args in job_plugins(job):
        plugin.on_pod(pod, job, task_name, index, args)


def job_objects(job: Mapping[str, Any], existing: Iterable[Mapping[str, Any]] = ()) -> list[Obj]:
    """Every extra object the job's plugins need."""
    existing = list(existing)
    return [obj for plugin, args in job_plugins(job) for obj in plugin.objects(job, args, existing)]
