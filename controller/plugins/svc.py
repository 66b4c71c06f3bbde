"""The `svc` plugin: pods of a job find each other by name.

- a headless Service named after the job selects its pods, so `<pod>.<job>` resolves to a pod;
- each pod gets `hostname` = its name and `subdomain` = the job name (what makes that DNS name);
- env `VC_<TASK>_HOSTS` (comma-separated) and `VC_<TASK>_NUM` for every task of the job;
- a ConfigMap `<job>-svc` with `<task>.host` (one host a line) and `<task>.num`, mounted at
  `/etc/volcano` (MPI hostfiles are read from there).

Arguments (Volcano's): `--publish-not-ready-addresses=false` (default true: ranks must resolve
each other before every pod is ready); `--disable-network-policy` is accepted and has no effect,
because Lahar never creates Volcano's NetworkPolicy (that policy only admits traffic between the
job's pods, and enforcing it is the CNI's business, not the batch system's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lahar.controller.naming import JOB_NAME_KEY, pod_name
from lahar.controller.plugins.base import (
    Obj,
    flag_bool,
    job_name,
    owned_metadata,
    parse_flags,
    pod_containers,
    set_env,
    set_volume,
    set_volume_mount,
    task_replicas,
)

CONFIG_MOUNT_PATH = "/etc/volcano"
PUBLISH_NOT_READY_FLAG = "publish-not-ready-addresses"


def config_map_name(job: str) -> str:
    return f"{job}-svc"


def volume_name(job: str) -> str:
    return f"{job}-svc"


def env_task_name(task_name: str) -> str:
    """`mpi-worker` → `MPI_WORKER` (env names cannot hold dashes)."""
    return task_name.upper().replace("-", "_")


def task_hosts(job: str, task_name: str, replicas: int) -> list[str]:
    """The DNS names of a task's pods: `<job>-<task>-<i>.<job>`."""
    return [f"{pod_name(job, task_name, index)}.{job}" for index in range(replicas)]


def hosts_env(job: Mapping[str, Any]) -> dict[str, str]:
    """`VC_<TASK>_HOSTS` and `VC_<TASK>_NUM` for every task of the job."""
    name = job_name(job)
    env: dict[str, str] = {}
    for task_name, replicas in task_replicas(job):
        env[f"VC_{env_task_name(task_name)}_HOSTS"] = ",".join(task_hosts(name, task_name, replicas))
        env[f"VC_{env_task_name(task_name)}_NUM"] = str(replicas)
    return env


def headless_service(job: Mapping[str, Any], publish_not_ready: bool = True) -> Obj:
    name = job_name(job)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned_metadata(job, name),
        "spec": {"clusterIP": "None", "selector": {JOB_NAME_KEY: name}, "publishNotReadyAddresses": publish_not_ready},
    }


def hosts_config_map(job: Mapping[str, Any]) -> Obj:
    name = job_name(job)
    data: dict[str, str] = {}
    for task_name, replicas in task_replicas(job):
        data[f"{task_name}.host"] = "\n".join(task_hosts(name, task_name, replicas))
        data[f"{task_name}.num"] = str(replicas)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(job, config_map_name(name)),
        "data": data,
    }


class SvcPlugin:
    name = "svc"

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        name = job_name(job)
        spec = pod.setdefault("spec", {})
        # A template may choose its own hostname; Volcano keeps it, and so do we.
        spec.setdefault("hostname", pod_name(name, task_name, index))
        spec.setdefault("subdomain", name)
        set_volume(pod, {"name": volume_name(name), "configMap": {"name": config_map_name(name)}})
        env = hosts_env(job)
        for container in pod_containers(pod):
            set_volume_mount(container, {"name": volume_name(name), "mountPath": CONFIG_MOUNT_PATH})
            for env_name, value in env.items():
                set_env(container, env_name, value)

    def objects(self, job: Mapping[str, Any], args: list[str], existing: Iterable[Mapping[str, Any]] = ()) -> list[Obj]:
        publish_not_ready = flag_bool(parse_flags(args), PUBLISH_NOT_READY_FLAG, default=True)
        return [headless_service(job, publish_not_ready), hosts_config_map(job)]
