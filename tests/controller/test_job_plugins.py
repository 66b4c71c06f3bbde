"""Volcano's job plugins (env, svc, ssh) as pure functions over pod and object dicts."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from lahar.controller.naming import JOB_NAME_KEY
from lahar.controller.plugins import (
    PLUGINS,
    UnknownPluginError,
    apply_on_pod,
    get_plugin,
    job_objects,
    job_plugins,
)
from lahar.controller.plugins import ssh as ssh_plugin
from lahar.controller.plugins.base import parse_flags

JOB_UID = "uid-1234"


def mpi_job(plugins: dict[str, list[str]] | None = None) -> dict[str, Any]:
    container = {"name": "main", "image": "mpi:latest", "env": [{"name": "KEEP", "value": "1"}]}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "lm", "namespace": "team", "uid": JOB_UID},
        "spec": {
            "plugins": plugins if plugins is not None else {"env": [], "svc": [], "ssh": []},
            "tasks": [
                {"name": "mpi-master", "replicas": 1, "template": {"spec": {"containers": [container]}}},
                {
                    "name": "mpi-worker",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "initContainers": [{"name": "init", "image": "busybox"}],
                            "containers": [copy.deepcopy(container), {"name": "sidecar", "image": "s"}],
                        }
                    },
                },
            ],
        },
    }


def build_pod(job: dict[str, Any], task_index: int, index: int) -> dict[str, Any]:
    task = job["spec"]["tasks"][task_index]
    pod = {"metadata": {"name": f"lm-{task['name']}-{index}"}, "spec": copy.deepcopy(task["template"]["spec"])}
    apply_on_pod(pod, job, task["name"], index)
    return pod


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    names = [entry["name"] for entry in container.get("env", [])]
    assert len(names) == len(set(names)), f"duplicate env entries: {names}"
    return {entry["name"]: entry["value"] for entry in container["env"]}


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [obj for obj in objects if obj["kind"] == kind]
    return found


def secret_text(secret: dict[str, Any]) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def assert_owned_by_job(obj: dict[str, Any]) -> None:
    [owner] = obj["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "lm",
        "uid": JOB_UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert obj["metadata"]["namespace"] == "team"


# --- registry ---------------------------------------------------------------------------------


def test_registry_holds_volcanos_three_plugins() -> None:
    assert set(PLUGINS) == {"env", "svc", "ssh"}
    assert all(PLUGINS[name].name == name for name in PLUGINS)


def test_unknown_plugin_is_a_clear_error() -> None:
    with pytest.raises(UnknownPluginError, match=r'unknown job plugin "tensorflow".*env, ssh, svc'):
        get_plugin("tensorflow")
    with pytest.raises(UnknownPluginError):
        job_plugins(mpi_job({"env": [], "pytorch": []}))


def test_parse_flags_reads_go_style_arguments() -> None:
    assert parse_flags(["--a=false", "-b", "--c=/x=y", "positional"]) == {"a": "false", "b": "true", "c": "/x=y"}


# --- env --------------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1])
def test_env_sets_task_index_on_every_container(index: int) -> None:
    pod = build_pod(mpi_job({"env": []}), 1, index)
    assert len(containers(pod)) == 3
    for container in containers(pod):
        env = env_of(container)
        assert env["VC_TASK_INDEX"] == str(index)
        assert env["VK_TASK_INDEX"] == str(index)
    assert env_of(pod["spec"]["containers"][0])["KEEP"] == "1"


def test_env_replaces_rather_than_duplicates_an_existing_entry() -> None:
    job = mpi_job({"env": []})
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "VC_TASK_INDEX", "value": "stale"}
    )
    pod = build_pod(job, 0, 0)
    assert env_of(pod["spec"]["containers"][0])["VC_TASK_INDEX"] == "0"


def test_env_needs_no_objects() -> None:
    assert job_objects(mpi_job({"env": []})) == []


# --- svc --------------------------------------------------------------------------------------


def test_svc_headless_service_shape() -> None:
    service = by_kind(job_objects(mpi_job({"svc": []})), "Service")
    assert service["apiVersion"] == "v1"
    assert service["metadata"]["name"] == "lm"
    assert service["spec"] == {"clusterIP": "None", "selector": {JOB_NAME_KEY: "lm"}, "publishNotReadyAddresses": True}
    assert_owned_by_job(service)


def test_svc_publish_not_ready_addresses_can_be_turned_off() -> None:
    job = mpi_job({"svc": ["--publish-not-ready-addresses=false", "--disable-network-policy"]})
    objects = job_objects(job)
    assert by_kind(objects, "Service")["spec"]["publishNotReadyAddresses"] is False
    assert {obj["kind"] for obj in objects} == {"Service", "ConfigMap"}  # never a NetworkPolicy


def test_svc_config_map_lists_hosts_per_task() -> None:
    config_map = by_kind(job_objects(mpi_job({"svc": []})), "ConfigMap")
    assert config_map["metadata"]["name"] == "lm-svc"
    assert config_map["data"] == {
        "mpi-master.host": "lm-mpi-master-0.lm",
        "mpi-master.num": "1",
        "mpi-worker.host": "lm-mpi-worker-0.lm\nlm-mpi-worker-1.lm",
        "mpi-worker.num": "2",
    }
    assert_owned_by_job(config_map)


def test_svc_pod_gets_hosts_env_hostname_and_config_mount() -> None:
    pod = build_pod(mpi_job({"svc": []}), 1, 1)
    assert pod["spec"]["hostname"] == "lm-mpi-worker-1"
    assert pod["spec"]["subdomain"] == "lm"
    assert pod["spec"]["volumes"] == [{"name": "lm-svc", "configMap": {"name": "lm-svc"}}]
    for container in containers(pod):
        env = env_of(container)
        assert env["VC_MPI_MASTER_HOSTS"] == "lm-mpi-master-0.lm"
        assert env["VC_MPI_WORKER_HOSTS"] == "lm-mpi-worker-0.lm,lm-mpi-worker-1.lm"
        assert env["VC_MPI_MASTER_NUM"] == "1"
        assert env["VC_MPI_WORKER_NUM"] == "2"
        assert container["volumeMounts"] == [{"name": "lm-svc", "mountPath": "/etc/volcano"}]


def test_svc_keeps_a_hostname_the_template_chose() -> None:
    job = mpi_job({"svc": []})
    job["spec"]["tasks"][0]["template"]["spec"]["hostname"] = "launcher"
    assert build_pod(job, 0, 0)["spec"]["hostname"] == "launcher"


def test_svc_names_unnamed_tasks_like_volcano() -> None:
    job = mpi_job({"svc": []})
    del job["spec"]["tasks"][1]["name"]
    data = by_kind(job_objects(job), "ConfigMap")["data"]
    assert data["default1.host"] == "lm-default1-0.lm\nlm-default1-1.lm"


# --- ssh --------------------------------------------------------------------------------------


def test_ssh_secret_holds_a_valid_key_pair() -> None:
    secret = by_kind(job_objects(mpi_job({"ssh": []})), "Secret")
    assert secret["metadata"]["name"] == "lm-ssh"
    assert_owned_by_job(secret)
    data = secret_text(secret)
    assert set(data) == {"id_rsa", "id_rsa.pub", "authorized_keys", "config"}
    private = serialization.load_pem_private_key(data["id_rsa"].encode(), password=None)
    public = serialization.load_ssh_public_key(data["id_rsa.pub"].encode())
    assert isinstance(private, rsa.RSAPrivateKey) and private.key_size == 2048
    assert private.public_key().public_numbers() == public.public_numbers()
    assert data["authorized_keys"] == data["id_rsa.pub"]
    assert data["id_rsa.pub"].startswith("ssh-rsa ")
    assert "StrictHostKeyChecking no" in data["config"].splitlines()
    assert "  HostName lm-mpi-worker-1.lm" in data["config"].splitlines()


def test_ssh_key_is_not_regenerated_when_the_secret_exists() -> None:
    job = mpi_job({"ssh": []})
    first = by_kind(job_objects(job), "Secret")
    # As read back from the API server: extra metadata and other objects around it.
    stored = copy.deepcopy(first)
    stored["metadata"]["resourceVersion"] = "7"
    other = {"kind": "ConfigMap", "metadata": {"name": "lm-ssh"}}
    again = by_kind(job_objects(job, existing=[other, stored]), "Secret")
    assert again["data"] == first["data"]


def test_ssh_new_job_gets_a_new_key() -> None:
    job = mpi_job({"ssh": []})
    first = secret_text(by_kind(job_objects(job), "Secret"))["id_rsa"]
    second = secret_text(by_kind(job_objects(job), "Secret"))["id_rsa"]
    assert first != second


def test_ssh_incomplete_existing_secret_is_replaced() -> None:
    job = mpi_job({"ssh": []})
    broken = {"kind": "Secret", "metadata": {"name": "lm-ssh"}, "data": {"config": ""}}
    data = secret_text(by_kind(job_objects(job, existing=[broken]), "Secret"))
    assert serialization.load_pem_private_key(data["id_rsa"].encode(), password=None)


def test_ssh_mounts_the_secret_in_every_container() -> None:
    pod = build_pod(mpi_job({"ssh": []}), 1, 0)
    assert pod["spec"]["volumes"] == [{"name": "lm-ssh", "secret": {"secretName": "lm-ssh", "defaultMode": 0o600}}]
    for container in containers(pod):
        assert container["volumeMounts"] == [{"name": "lm-ssh", "mountPath": "/root/.ssh"}]


def test_ssh_key_file_path_moves_the_mount() -> None:
    pod = build_pod(mpi_job({"ssh": ["--ssh-key-file-path=/home/mpi/.ssh"]}), 0, 0)
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "lm-ssh", "mountPath": "/home/mpi/.ssh"}]
    assert ssh_plugin.mount_path([]) == "/root/.ssh"


# --- all together -----------------------------------------------------------------------------


def test_all_plugins_applied_twice_change_nothing() -> None:
    job = mpi_job()
    pod = build_pod(job, 1, 1)
    once = copy.deepcopy(pod)
    apply_on_pod(pod, job, "mpi-worker", 1)
    assert pod == once
    for container in containers(pod):
        env_of(container)  # asserts no duplicates
        mounts = [mount["mountPath"] for mount in container["volumeMounts"]]
        assert sorted(mounts) == ["/etc/volcano", "/root/.ssh"]
    assert sorted(volume["name"] for volume in pod["spec"]["volumes"]) == ["lm-ssh", "lm-svc"]


def test_all_plugins_objects() -> None:
    objects = job_objects(mpi_job())
    assert sorted((obj["kind"], obj["metadata"]["name"]) for obj in objects) == [
        ("ConfigMap", "lm-svc"),
        ("Secret", "lm-ssh"),
        ("Service", "lm"),
    ]


def test_on_pod_does_not_touch_the_job() -> None:
    job = mpi_job()
    before = copy.deepcopy(job)
    build_pod(job, 0, 0)
    job_objects(job)
    assert job == before
