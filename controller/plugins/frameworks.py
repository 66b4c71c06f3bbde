"""Volcano's distributed-framework plugins: what PyTorch, TensorFlow, MPI, Ray and Ascend HCCL
jobs need to find their peers, set as Volcano's plugins set it (same env names, ports, port
names, ranks and services), so a manifest written for Volcano runs unchanged. Each reads its
role task names from Go-style flags, with Volcano's defaults. Hosts are the pods' DNS names
(`<job>-<task>-<i>.<job>`, or the template's own hostname/subdomain), which the svc plugin
makes resolvable; Lahar's admission adds `svc` to a job with pytorch, tensorflow, mpi or ray,
and `ssh` to one with mpi, as Volcano's mutating webhook does.

- pytorch (`--master=master --worker=worker --port=23456`, `--wait-master-enabled`,
  `--wait-master-timeout=300`, `--wait-master-image=busybox:1.36.1`): every container gets
  MASTER_ADDR (master pod 0), MASTER_PORT, WORLD_SIZE (master + worker replicas) and RANK
  (master 0, worker i → i+1), and the port `pytorchjob-port`; workers optionally wait for the
  master in an init container.
- tensorflow (`--ps=ps --worker=worker --chief=chief --evaluator=evaluator --port=2222`):
  TF_CONFIG `{"cluster": {...}, "task": {"type", "index"}}` in every container, unless the job
  is a single pod.
- mpi (`--master=master --worker=worker --port=22`): the port `mpijob-port` on every container,
  and MPI_HOST (the workers' hosts, comma-separated) on the master's.
- ray (`--head=head --headContainer=head --worker=worker --workerContainer=worker --port=6379
  --dashboardPort=8265 --clientPort=10001`): the head container runs `ray start --head`, with
  ports gcs/dashboard/client-server; workers run `ray start --address=<head>:<port>`; a Service
  `<job>-head-svc` exposes the head's three ports.
- hcclrank (`--master=master --worker=worker`): the annotation `hccl/rankIndex` — the pod's RANK
  env when a plugin set one, else master i → i, worker i → master replicas + i.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from lahar.api.goflags import PLUGIN_FLAGS, FlagValue, parse_go_flags
from lahar.controller.naming import JOB_NAME_KEY, JOB_NAMESPACE_KEY, TASK_SPEC_KEY
from lahar.controller.plugins.base import (
    Obj,
    add_container_port,
    domain_name,
    job_name,
    job_tasks,
    owned_metadata,
    set_annotation,
    set_env,
    task_hosts,
    task_named,
)


def _containers(pod: Obj) -> list[Obj]:
    containers: list[Obj] = (pod.get("spec") or {}).get("containers") or []
    return containers


def _flags(args: list[str], defaults: Mapping[str, FlagValue]) -> dict[str, Any]:
    return parse_go_flags(args, defaults)


class _NoObjects:
    def objects(self, job: Mapping[str, Any], args: list[str], existing: Iterable[Mapping[str, Any]] = ()) -> list[Obj]:
        return []


# --- pytorch ------------------------------------------------------------------------------------

PYTORCH_FLAGS = PLUGIN_FLAGS["pytorch"]
WAIT_FOR_MASTER = "wait-for-master"


def wait_for_master_script(address: str, port: int, timeout: int) -> str:
    """The init container's loop: until the master's port answers, or `timeout` seconds."""
    return (
        f'echo "Waiting for master node {address}:{port} to be ready..."\n'
        f"TIMEOUT={timeout}\nELAPSED=0\n"
        f"until {{ nc -z {address} {port} || echo > /dev/tcp/{address}/{port}; }} 2>/dev/null; do\n"
        '  if [ $ELAPSED -ge $TIMEOUT ]; then\n    echo "Timeout waiting for master after ${TIMEOUT} seconds"\n'
        "    exit 1\n  fi\n  sleep 2\n  ELAPSED=$((ELAPSED + 2))\ndone\n"
        'echo "Master node is ready!"'
    )


class PytorchPlugin(_NoObjects):
    name = "pytorch"

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        flags = _flags(args, PYTORCH_FLAGS)
        master = task_named(job, flags["master"])
        if master is None:  # Volcano logs and leaves the pod alone
            return
        address, port = domain_name(job, master, 0), flags["port"]
        world_size = sum(t.replicas for t in job_tasks(job) if t.name in (flags["master"], flags["worker"]))
        rank = {flags["master"]: 0, flags["worker"]: index + 1}.get(task_name)
        if task_name == flags["worker"] and flags["wait-master-enabled"]:
            init: list[Obj] = pod.setdefault("spec", {}).setdefault("initContainers", [])
            if not any(c.get("name") == WAIT_FOR_MASTER for c in init):
                script = wait_for_master_script(address, port, flags["wait-master-timeout"])
                init.append(
                    {"name": WAIT_FOR_MASTER, "image": flags["wait-master-image"], "command": ["sh", "-c", script]}
                )
        for container in _containers(pod):
            add_container_port(container, "pytorchjob-port", port)
            set_env(container, "MASTER_ADDR", address)
            set_env(container, "MASTER_PORT", str(port))
            set_env(container, "WORLD_SIZE", str(world_size))
            if rank is not None:
                set_env(container, "RANK", str(rank))


# --- tensorflow ---------------------------------------------------------------------------------

TENSORFLOW_FLAGS = PLUGIN_FLAGS["tensorflow"]
TF_ROLES = ("ps", "worker", "chief", "evaluator")  # TF_CONFIG's cluster keys, in Volcano's order


def tf_config(job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> str:
    """TF_CONFIG for the pod `index` of `task_name`, as Volcano writes it."""
    flags = _flags(args, TENSORFLOW_FLAGS)
    role_of = {flags[role]: role for role in TF_ROLES}
    cluster: dict[str, list[str]] = {}
    for task in job_tasks(job):
        role = role_of.get(task.name)
        if role is not None:
            hosts = [f"{domain_name(job, task, i)}:{flags['port']}" for i in range(task.replicas)]
            if hosts:
                cluster[role] = hosts
    ordered = {role: cluster[role] for role in TF_ROLES if role in cluster}
    return json.dumps(
        {"cluster": ordered, "task": {"type": role_of.get(task_name, task_name), "index": index}},
        separators=(",", ":"),
    )


class TensorflowPlugin(_NoObjects):
    name = "tensorflow"

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        tasks = job_tasks(job)
        if len(tasks) == 1 and tasks[0].replicas == 1:  # a single pod needs no cluster
            return
        config = tf_config(job, task_name, index, args)
        for container in _containers(pod):
            set_env(container, "TF_CONFIG", config)


# --- mpi ----------------------------------------------------------------------------------------

MPI_FLAGS = PLUGIN_FLAGS["mpi"]


class MpiPlugin(_NoObjects):
    name = "mpi"

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        flags = _flags(args, MPI_FLAGS)
        hosts: str | None = None
        if task_name == flags["master"]:
            worker = task_named(job, flags["worker"])
            if worker is None:
                return
            hosts = ",".join(task_hosts(job, worker))
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            add_container_port(container, "mpijob-port", flags["port"])
            if hosts is not None:
                set_env(container, "MPI_HOST", hosts)


# --- ray ----------------------------------------------------------------------------------------

RAY_FLAGS = PLUGIN_FLAGS["ray"]
RAY_PORTS = (("gcs", "port"), ("dashboard", "dashboardPort"), ("client-server", "clientPort"))


def head_service_name(job: str) -> str:
    return f"{job}-head-svc"


class RayPlugin:
    name = "ray"

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        flags = _flags(args, RAY_FLAGS)
        head = task_named(job, flags["head"])
        if head is None:  # admission refuses such a job; Volcano fails the pod's creation
            return
        for container in _containers(pod):
            if task_name == flags["head"] and container.get("name") == flags["headContainer"]:
                for port_name, flag in RAY_PORTS:
                    add_container_port(container, port_name, flags[flag])
                container["command"] = [
                    "sh",
                    "-c",
                    f"ray start --head --block --dashboard-host=0.0.0.0 --port={flags['port']} "
                    f"--dashboard-port={flags['dashboardPort']} --ray-client-server-port={flags['clientPort']}",
                ]
            if task_name == flags["worker"] and container.get("name") == flags["workerContainer"]:
                address = f"{domain_name(job, head, 0)}:{flags['port']}"
                container["command"] = ["sh", "-c", f"ray start --block --address={address}"]

    def objects(self, job: Mapping[str, Any], args: list[str], existing: Iterable[Mapping[str, Any]] = ()) -> list[Obj]:
        flags = _flags(args, RAY_FLAGS)
        meta = job.get("metadata") or {}
        selector = {
            JOB_NAME_KEY: meta.get("name", ""),
            JOB_NAMESPACE_KEY: meta.get("namespace") or "default",
            TASK_SPEC_KEY: flags["head"],
        }
        ports = [
            {"name": port_name, "port": flags[flag], "targetPort": port_name, "protocol": "TCP"}
            for port_name, flag in RAY_PORTS
        ]
        return [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": owned_metadata(job, head_service_name(job_name(job))),
                "spec": {"selector": selector, "ports": ports},
            }
        ]


# --- hcclrank -----------------------------------------------------------------------------------

HCCLRANK_FLAGS = PLUGIN_FLAGS["hcclrank"]
HCCL_RANK_ANNOTATION = "hccl/rankIndex"


class HcclRankPlugin(_NoObjects):
    name = "hcclrank"

    def on_pod(self, pod: Obj, job: Mapping[str, Any], task_name: str, index: int, args: list[str]) -> None:
        if (pod.get("metadata") or {}).get("annotations", {}).get(HCCL_RANK_ANNOTATION):
            return
        rank = next(
            (
                entry.get("value")
                for container in _containers(pod)
                for entry in container.get("env") or ()
                if entry.get("name") == "RANK" and entry.get("value")
            ),
            None,
        )
        if rank is None:
            flags = _flags(args, HCCLRANK_FLAGS)
            if task_name == flags["master"]:
                rank = str(index)
            elif task_name == flags["worker"]:
                master = task_named(job, flags["master"])
                rank = str((master.replicas if master else 0) + index)
            else:
                return
        set_annotation(pod, HCCL_RANK_ANNOTATION, rank)
