"""Volcano's job plugins (env, svc, ssh and the framework plugins) as pure functions over pod and
object dicts; the expected values are Volcano's (pkg/controllers/job/plugins)."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from lahar.api.goflags import parse_go_flags
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


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """Env values by name; an entry from a ConfigMap reads as ("configMap", name, key)."""
    names = [entry["name"] for entry in container.get("env", [])]
    assert len(names) == len(set(names)), f"duplicate env entries: {names}"
    return {
        entry["name"]: entry["value"]
        if "value" in entry
        else ("configMap", entry["valueFrom"]["configMapKeyRef"]["name"], entry["valueFrom"]["configMapKeyRef"]["key"])
        for entry in container["env"]
    }


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


def test_registry_holds_volcanos_eight_plugins() -> None:
    assert set(PLUGINS) == {"env", "svc", "ssh", "pytorch", "tensorflow", "mpi", "ray", "hcclrank"}
    assert all(PLUGINS[name].name == name for name in PLUGINS)


def test_unknown_plugin_is_a_clear_error() -> None:
    with pytest.raises(UnknownPluginError, match=r'unknown job plugin "paddle".*env, hcclrank, mpi'):
        get_plugin("paddle")
    with pytest.raises(UnknownPluginError):
        job_plugins(mpi_job({"env": [], "mxnet": []}))


def test_go_flags_are_parsed_as_gos_flag_package_does() -> None:
    defaults = {"a": True, "b": False, "path": "/root", "port": 22}
    parsed = parse_go_flags(["--a=false", "-b", "--path=/x=y"], defaults)
    assert parsed == {"a": False, "b": True, "path": "/x=y", "port": 22}
    # A non-boolean flag takes the next argument as its value (Volcano manifests write it so).
    assert parse_go_flags(["--path", "/home/u/.ssh", "-port", "2222"], defaults)["path"] == "/home/u/.ssh"
    assert parse_go_flags(["--path", "/home/u/.ssh", "-port", "2222"], defaults)["port"] == 2222
    # Parsing stops at a positional argument or an unknown flag, keeping what came before.
    assert parse_go_flags(["-b", "positional", "--port=1"], defaults) == {**defaults, "b": True}
    assert parse_go_flags(["--port=1", "--nope", "--b"], defaults) == {**defaults, "port": 1}


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
    assert service["spec"] == {
        "clusterIP": "None",
        "selector": {JOB_NAME_KEY: "lm", "volcano.sh/job-namespace": "team"},
        "publishNotReadyAddresses": False,  # Volcano's default
    }
    assert_owned_by_job(service)


def test_svc_flags_are_honoured() -> None:
    job = mpi_job({"svc": ["--publish-not-ready-addresses", "--disable-network-policy"]})
    objects = job_objects(job)
    assert by_kind(objects, "Service")["spec"]["publishNotReadyAddresses"] is True
    assert {obj["kind"] for obj in objects} == {"Service", "ConfigMap"}
    policy = by_kind(job_objects(mpi_job({"svc": []})), "NetworkPolicy")
    selector = {"matchLabels": {JOB_NAME_KEY: "lm", "volcano.sh/job-namespace": "team"}}
    assert policy["spec"] == {
        "podSelector": selector,
        "ingress": [{"from": [{"podSelector": selector}]}],
        "policyTypes": ["Ingress"],
    }
    no_env = build_pod(mpi_job({"svc": ["--inject-hosts-env=false"]}), 0, 0)
    assert "VC_MPI_WORKER_HOSTS" not in env_of(no_env["spec"]["containers"][0])


def test_svc_config_map_keys_are_volcanos() -> None:
    config_map = by_kind(job_objects(mpi_job({"svc": []})), "ConfigMap")
    assert config_map["metadata"]["name"] == "lm-svc"
    assert config_map["data"] == {
        "mpi_master.host": "lm-mpi-master-0.lm",
        "VC_MPI_MASTER_HOSTS": "lm-mpi-master-0.lm",
        "VC_MPI_MASTER_NUM": "1",
        "mpi_worker.host": "lm-mpi-worker-0.lm\nlm-mpi-worker-1.lm",
        "VC_MPI_WORKER_HOSTS": "lm-mpi-worker-0.lm,lm-mpi-worker-1.lm",
        "VC_MPI_WORKER_NUM": "2",
    }
    assert_owned_by_job(config_map)


def test_svc_pod_gets_hosts_env_hostname_and_config_mount() -> None:
    pod = build_pod(mpi_job({"svc": []}), 1, 1)
    assert pod["spec"]["hostname"] == "lm-mpi-worker-1"
    assert pod["spec"]["subdomain"] == "lm"
    assert pod["spec"]["volumes"] == [{"name": "lm-svc", "configMap": {"name": "lm-svc"}}]
    for container in containers(pod):
        env = env_of(container)
        for key in ("VC_MPI_MASTER_HOSTS", "VC_MPI_WORKER_HOSTS", "VC_MPI_MASTER_NUM", "VC_MPI_WORKER_NUM"):
            assert env[key] == ("configMap", "lm-svc", key)  # read from the ConfigMap, as Volcano
        assert container["volumeMounts"] == [{"name": "lm-svc", "mountPath": "/etc/volcano"}]


def test_svc_hosts_follow_a_template_hostname_and_scaling() -> None:
    job = mpi_job({"svc": []})
    job["spec"]["tasks"][0]["template"]["spec"].update(hostname="launcher", subdomain="sub")
    job["spec"]["tasks"][1]["replicas"] = 3
    data = by_kind(job_objects(job), "ConfigMap")["data"]
    assert data["mpi_master.host"] == "launcher.sub"
    assert data["VC_MPI_WORKER_NUM"] == "3"
    assert data["mpi_worker.host"].splitlines()[-1] == "lm-mpi-worker-2.lm"


def test_svc_keeps_a_hostname_the_template_chose() -> None:
    job = mpi_job({"svc": []})
    job["spec"]["tasks"][0]["template"]["spec"]["hostname"] = "launcher"
    assert build_pod(job, 0, 0)["spec"]["hostname"] == "launcher"


def test_svc_names_unnamed_tasks_like_volcano() -> None:
    job = mpi_job({"svc": []})
    del job["spec"]["tasks"][1]["name"]
    data = by_kind(job_objects(job), "ConfigMap")["data"]
    assert data["default1.host"] == "lm-default1-0.lm\nlm-default1-1.lm"
    assert data["VC_DEFAULT1_NUM"] == "2"


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
    lines = data["config"].splitlines()
    assert lines[:2] == ["StrictHostKeyChecking no", "UserKnownHostsFile /dev/null"]
    at = lines.index("Host lm-mpi-worker-1")
    assert lines[at + 1 : at + 3] == ["  HostName lm-mpi-worker-1.lm", "  Port 22"]


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


SSH_ITEMS = [{"key": k, "path": f".ssh/{k}"} for k in ("id_rsa", "id_rsa.pub", "authorized_keys", "config")]


def test_ssh_mounts_the_secret_in_every_container() -> None:
    pod = build_pod(mpi_job({"ssh": []}), 1, 0)
    secret = {"secretName": "lm-ssh", "items": SSH_ITEMS, "defaultMode": 0o600}
    assert pod["spec"]["volumes"] == [{"name": "lm-ssh", "secret": secret}]
    for container in containers(pod):
        assert container["volumeMounts"] == [{"name": "lm-ssh", "mountPath": "/root/.ssh", "subPath": ".ssh"}]


@pytest.mark.parametrize("args", [["--ssh-key-file-path=/home/mpi/.ssh"], ["--ssh-key-file-path", "/home/mpi/.ssh"]])
def test_ssh_key_file_path_moves_the_mount(args: list[str]) -> None:
    pod = build_pod(mpi_job({"ssh": args}), 0, 0)
    mount = {"name": "lm-ssh", "mountPath": "/home/mpi/.ssh", "subPath": ".ssh"}
    assert pod["spec"]["containers"][0]["volumeMounts"] == [mount]
    assert pod["spec"]["volumes"][0]["secret"]["defaultMode"] == 0o644  # readable by a non-root user
    assert ssh_plugin.mount_path([]) == "/root/.ssh"


def test_ssh_user_key_and_port_flags() -> None:
    job = mpi_job({"ssh": ["--ssh-private-key=PRIVATE", "--ssh-public-key=ssh-rsa AAA", "--ssh-port=2222"]})
    data = secret_text(by_kind(job_objects(job), "Secret"))
    assert (data["id_rsa"], data["id_rsa.pub"], data["authorized_keys"]) == ("PRIVATE", "ssh-rsa AAA", "ssh-rsa AAA")
    assert "  Port 2222" in data["config"].splitlines()
    bad_port = secret_text(by_kind(job_objects(mpi_job({"ssh": ["--ssh-port=70000"]})), "Secret"))
    assert "  Port 22" in bad_port["config"].splitlines()


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
        ("NetworkPolicy", "lm"),
        ("Secret", "lm-ssh"),
        ("Service", "lm"),
    ]


def test_on_pod_does_not_touch_the_job() -> None:
    job = mpi_job()
    before = copy.deepcopy(job)
    build_pod(job, 0, 0)
    job_objects(job)
    assert job == before


# --- distributed-framework plugins (expected values as Volcano's plugin tests and sources) ------


def framework_job(plugins: dict[str, list[str]], **tasks: int) -> dict[str, Any]:
    container = {"name": "main", "image": "trainer"}
    return {
        "metadata": {"name": "tr", "namespace": "team", "uid": JOB_UID},
        "spec": {
            "plugins": plugins,
            "tasks": [
                {"name": name, "replicas": replicas, "template": {"spec": {"containers": [copy.deepcopy(container)]}}}
                for name, replicas in tasks.items()
            ],
        },
    }


def pod_of(job: dict[str, Any], task_name: str, index: int) -> dict[str, Any]:
    task = next(t for t in job["spec"]["tasks"] if t["name"] == task_name)
    pod = {"metadata": {"name": f"tr-{task_name}-{index}"}, "spec": copy.deepcopy(task["template"]["spec"])}
    apply_on_pod(pod, job, task_name, index)
    return pod


def test_pytorch_sets_master_world_size_rank_and_port() -> None:
    job = framework_job({"pytorch": []}, master=1, worker=3)
    master = pod_of(job, "master", 0)["spec"]["containers"][0]
    worker = pod_of(job, "worker", 2)["spec"]["containers"][0]
    assert env_of(master) == {"MASTER_ADDR": "tr-master-0.tr", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "RANK": "0"}
    assert env_of(worker)["RANK"] == "3"
    assert master["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]


def test_pytorch_flags_rename_roles_change_the_port_and_wait_for_the_master() -> None:
    args = ["--master=trainer", "--worker=helper", "--port=30000", "--wait-master-enabled"]
    job = framework_job({"pytorch": args}, trainer=1, helper=2)
    worker = pod_of(job, "helper", 0)
    env = env_of(worker["spec"]["containers"][0])
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["RANK"]) == ("tr-trainer-0.tr", "30000", "1")
    [init] = worker["spec"]["initContainers"]
    assert init["name"] == "wait-for-master" and init["image"] == "busybox:1.36.1"
    assert "nc -z tr-trainer-0.tr 30000" in init["command"][2] and "TIMEOUT=300" in init["command"][2]
    assert "initContainers" not in pod_of(job, "trainer", 0)["spec"]  # only workers wait


def test_tensorflow_tf_config_lists_the_cluster_and_the_pods_role() -> None:
    job = framework_job({"tensorflow": []}, ps=1, worker=2)
    config = json.loads(env_of(pod_of(job, "worker", 1)["spec"]["containers"][0])["TF_CONFIG"])
    assert config == {
        "cluster": {"ps": ["tr-ps-0.tr:2222"], "worker": ["tr-worker-0.tr:2222", "tr-worker-1.tr:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    single = framework_job({"tensorflow": []}, worker=1)
    assert "env" not in pod_of(single, "worker", 0)["spec"]["containers"][0]  # one pod needs no cluster


def test_mpi_gives_the_master_the_worker_hosts_and_everyone_the_port() -> None:
    job = framework_job({"mpi": ["--master=launcher", "--port=2222"]}, launcher=1, worker=2)
    launcher = pod_of(job, "launcher", 0)["spec"]["containers"][0]
    assert env_of(launcher) == {"MPI_HOST": "tr-worker-0.tr,tr-worker-1.tr"}
    worker = pod_of(job, "worker", 0)["spec"]["containers"][0]
    assert "env" not in worker and worker["ports"] == [{"name": "mpijob-port", "containerPort": 2222}]


def test_ray_starts_head_and_workers_and_exposes_the_head() -> None:
    job = framework_job({"ray": []}, head=1, worker=2)
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["name"] = "head"
    job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["name"] = "worker"
    head = pod_of(job, "head", 0)["spec"]["containers"][0]
    assert head["command"][2] == (
        "ray start --head --block --dashboard-host=0.0.0.0 --port=6379 --dashboard-port=8265"
        " --ray-client-server-port=10001"
    )
    assert [p["name"] for p in head["ports"]] == ["gcs", "dashboard", "client-server"]
    worker = pod_of(job, "worker", 1)["spec"]["containers"][0]
    assert worker["command"] == ["sh", "-c", "ray start --block --address=tr-head-0.tr:6379"]
    service = by_kind(job_objects(job), "Service")
    assert service["metadata"]["name"] == "tr-head-svc"
    assert service["spec"]["selector"]["volcano.sh/task-spec"] == "head"
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [
        ("gcs", 6379),
        ("dashboard", 8265),
        ("client-server", 10001),
    ]


def test_hcclrank_takes_the_rank_a_framework_set_or_counts_masters_first() -> None:
    alone = framework_job({"hcclrank": []}, master=2, worker=2)
    assert pod_of(alone, "worker", 1)["metadata"]["annotations"] == {"hccl/rankIndex": "3"}
    assert pod_of(alone, "master", 1)["metadata"]["annotations"] == {"hccl/rankIndex": "1"}
    with_pytorch = framework_job({"hcclrank": [], "pytorch": []}, master=1, worker=2)
    assert pod_of(with_pytorch, "worker", 0)["metadata"]["annotations"] == {"hccl/rankIndex": "1"}
