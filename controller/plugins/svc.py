"""The `svc` plugin: pods of a job find each other by name (Volcano's svc plugin).

- a headless Service named after the job selects its pods (labels `volcano.sh/job-name` and
  `volcano.sh/job-namespace`), so `<pod>.<job>` resolves to a pod;
- each pod gets `hostname` = its name and `subdomain` = the job name (what makes that DNS name),
  unless its template chose its own;
- a ConfigMap `<job>-svc` holds, for every task (`T` = the task name with `-` as `_`):
  `T.host` (one host a line, the MPI hostfile), `VC_<T upper>_HOSTS` (comma-separated) and
  `VC_<T upper>_NUM`; it is mounted at `/etc/volcano`, and the two `VC_` keys are every
  container's env (from the ConfigMap, so a pod made after scaling reads the new hosts);
- a NetworkPolicy named after the job that admits ingress to its pods from its pods only.

Flags (Go-flag style, Volcano's names and defaults): `--publish-not-ready-addresses` (default
false) publishes pods before they are ready; `--disable-network-policy` (default false) makes no
NetworkPolicy; `--inject-hosts-env=false` (default true) leaves the `VC_` env out.

The ConfigMap follows the job: scaling rewrites it (OnJobUpdate).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lahar.api.goflags import PLUGIN_FLAGS, parse_go_flags
from lahar.controller.naming import JOB_NAME_KEY, JOB_NAMESPACE_KEY, pod_name
from lahar.controller.plugins.base import (
    Obj,
    add_env,
    job_name,
    job_tasks,
    owned_metadata,
    pod_containers,
    set_volume,
    set_volume_mount,
    task_hosts,
)

CONFIG_MOUNT_PATH = "/etc/volcano"
PUBLISH_NOT_READY_FLAG = "publish-not-ready-addresses"
DISABLE_NETWORK_POLICY_FLAG = "disable-network-policy"
INJECT_HOSTS_ENV_FLAG = "inject-hosts-env"
FLAGS = PLUGIN_FLAGS["svc"]


def config_map_name(job: str) -> str:
    return f"{job}-svc"


def volume_name(job: str) -> str:
    return f"{job}-svc"


def key_task_name(task_name: str) -> str:
    """`mpi-worker` → `mpi_worker` (Volcano's key form: env names cannot hold dashes)."""
    return task_name.replace("-", "_")


def hosts_key(task_name: str) -> str:
    return f"{key_task_name(task_name)}.host"


def hosts_env_name(task_name: str) -> str:
    return f"VC_{key_task_name(task_name).upper()}_HOSTS"


def num_env_name(task_name: str) -> str:
    return f"VC_{key_task_name(task_name).upper()}_NUM"


def hosts_data(job: Mapping[str, Any]) -> dict[str, str]:
    """The ConfigMap's data (Volcano's GenerateHosts)."""
    data: dict[str, str] = {}
    for task in job_tasks(job):
        hosts = task_hosts(job, task)
        data[hosts_key(task.name)] = "\n".join(hosts)
        data[hosts_env_name(task.name)] = ",".join(hosts)
        data[num_env_name(task.name)] = str(len(hosts))
    return data


def _selector(job: Mapping[str, Any]) -> dict[str, str]:
    meta = job.get("metadata") or {}
    return {JOB_NAME_KEY: meta.get("name", ""), JOB_NAMESPACE_KEY: meta.get("namespace") or "default"}


def headless_service(job: Mapping[str, Any], publish_not_ready: bool = False) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned_metadata(job, job_name(job)),
        "spec": {"clusterIP": "None", "selector": _selector(job), "publishNotReadyAddresses": publish_not_ready},
    }


def hosts_config_map(job: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(job, config_map_name(job_name(job))),
        "data": hosts_data(job),
    }


def network_policy(job: Mapping[str, Any]) -> Obj:
    """Ingress to the job's pods from the job's pods only."""
    selector = {"matchLabels": _selector(job)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": owned_metadata(job, job_name(job)),
        "spec": {
            "podSelector": selector,
            "ingress": [{"from": [{"podSelector": selector}]}],
            "policyTypes": ["Ingress"],
        },
    }


class SvcPlugin:
    name = "svc"

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        name = job_name(job)
        flags = parse_go_flags(args, FLAGS)
        spec = pod.setdefault("spec", {})
        # A template may choose its own hostname; Volcano keeps it, and so do we.
        spec.setdefault("hostname", pod_name(name, task_name, index))
        spec.setdefault("subdomain", name)
        set_volume(pod, {"name": volume_name(name), "configMap": {"name": config_map_name(name)}})
        env_names = [env for task in job_tasks(job) for env in (hosts_env_name(task.name), num_env_name(task.name))]
        for container in pod_containers(pod):
            set_volume_mount(container, {"name": volume_name(name), "mountPath": CONFIG_MOUNT_PATH})
            if flags[INJECT_HOSTS_ENV_FLAG]:
                for env_name in env_names:
                    ref = {"configMapKeyRef": {"name": config_map_name(name), "key": env_name}}
                    add_env(container, {"name": env_name, "valueFrom": ref})

    def objects(self, job: Mapping[str, Any], args: list[str], existing: Iterable[Mapping[str, Any]] = ()) -> list[Obj]:
        flags = parse_go_flags(args, FLAGS)
        objects = [headless_service(job, bool(flags[PUBLISH_NOT_READY_FLAG])), hosts_config_map(job)]
        if not flags[DISABLE_NETWORK_POLICY_FLAG]:
            objects.append(network_policy(job))
        return objects
