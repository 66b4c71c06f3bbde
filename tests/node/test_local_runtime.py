"""The local pod runtime against the embedded API server: real processes, real statuses, real
logs, and (where this machine allows it) real cgroup v1 directories under a unique parent."""

from __future__ import annotations

import os
import re
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import NotFound
from lahar.node import logs
from lahar.node.cgroups import CGROUP_ROOT
from lahar.node.runtime import CGROUPS_CONDITION
from tests.node.support import MARK_ENV, NodeFactory, alive, cgroups_skip_reason
from tests.support import wait_for

CGROUPS_SKIP = cgroups_skip_reason()
NAMESPACE = "default"


def pod(name: str, node: str, mark: str, command: list[str], restart: str = "Never", **spec: Any) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "busybox",
        "command": command,
        "env": [{"name": MARK_ENV, "value": mark}, *spec.pop("env", [])],
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"nodeName": node, "restartPolicy": restart, "containers": [container], **spec},
    }


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def status_of(api: KubeApi, name: str) -> dict[str, Any]:
    return api.get(kinds.POD, name, NAMESPACE).get("status") or {}


def phase_is(api: KubeApi, name: str, phase: str) -> dict[str, Any] | None:
    status = status_of(api, name)
    return status if status.get("phase") == phase else None


def main_status(status: dict[str, Any]) -> dict[str, Any]:
    return status["containerStatuses"][0]


def log_of(node_data: Path, name: str, uid: str, container: str = "main") -> str:
    return logs.container_log(logs.pod_log_dir(node_data, NAMESPACE, name, uid), container).read_text()


def gone(api: KubeApi, name: str) -> bool:
    try:
        api.get(kinds.POD, name, NAMESPACE)
    except NotFound:
        return True
    return False


def test_registers_this_machine_as_a_ready_node(api: KubeApi, local_node: NodeFactory) -> None:
    node = local_node()

    obj = api.get(kinds.NODE, node.node_name)
    labels, status = obj["metadata"]["labels"], obj["status"]
    assert labels["kubernetes.io/hostname"] == node.node_name
    assert labels["kubernetes.io/os"] == "linux" and labels["kubernetes.io/arch"]
    assert labels["lahar.dev/local"] == "true"
    assert int(status["capacity"]["cpu"]) == len(os.sched_getaffinity(0))
    assert status["capacity"]["pods"] == "110" and status["capacity"]["memory"].endswith("Ki")
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions[CGROUPS_CONDITION]["status"] == ("True" if CGROUPS_SKIP is None else "False")


def test_failed_container_reports_its_exit_code_and_log(
    api: KubeApi, local_node: NodeFactory, mark: str, tmp_path: Path
) -> None:
    node = local_node()
    name = unique("fails")
    created = api.create(kinds.POD, pod(name, node.node_name, mark, ["sh", "-c", "echo hi; exit 3"]))

    status = wait_for(lambda: phase_is(api, name, "Failed"), what="the pod to fail")

    terminated = main_status(status)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert main_status(status)["restartCount"] == 0
    assert main_status(status)["containerID"].startswith("lahar://")
    assert status["podIP"] == "127.0.0.1" and status["startTime"]
    assert "hi" in log_of(tmp_path / "data", name, created["metadata"]["uid"])


def test_on_failure_restarts_until_the_container_succeeds(
    api: KubeApi, local_node: NodeFactory, mark: str, tmp_path: Path
) -> None:
    node = local_node()
    name = unique("retries")
    # Counts its attempts in the pod's scratch directory (the working directory) and fails twice.
    script = 'n=$(( $(cat attempts 2>/dev/null || echo 0) + 1 )); echo $n > attempts; echo "attempt $n"; [ $n -ge 3 ]'
    created = api.create(kinds.POD, pod(name, node.node_name, mark, ["sh", "-c", script], restart="OnFailure"))

    status = wait_for(lambda: phase_is(api, name, "Succeeded"), timeout=20, what="the third attempt to succeed")

    container = main_status(status)
    assert container["restartCount"] == 2
    assert container["state"]["terminated"]["exitCode"] == 0
    assert container["state"]["terminated"]["reason"] == "Completed"
    assert container["lastState"]["terminated"]["exitCode"] == 1
    log = log_of(tmp_path / "data", name, created["metadata"]["uid"])
    assert re.findall(r"attempt \d", log) == ["attempt 1", "attempt 2", "attempt 3"]


def test_always_backs_off_between_restarts(api: KubeApi, local_node: NodeFactory, mark: str) -> None:
    node = local_node()
    name = unique("crashloop")
    api.create(kinds.POD, pod(name, node.node_name, mark, ["false"], restart="Always"))

    status = wait_for(
        lambda: (s := status_of(api, name)).get("containerStatuses") and main_status(s)["restartCount"] >= 2 and s,
        timeout=20,
        what="two restarts",
    )

    assert status["phase"] == "Running"  # Always: never finished, however often it ends


def test_env_args_and_init_containers(api: KubeApi, local_node: NodeFactory, mark: str, tmp_path: Path) -> None:
    node = local_node()
    name = unique("env")
    env = [
        {"name": "GREETING", "value": "hello"},
        {"name": "FULL", "value": "$(GREETING) world"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    manifest = pod(
        name,
        node.node_name,
        mark,
        ["sh", "-c"],
        env=env,
        container={
            "args": ['echo "$FULL|$POD_NAME|$POD_NS|$POD_IP|$HOSTNAME|$1|$(cat prepared)"', "sh", "$(GREETING)-arg"]
        },
    )
    manifest["spec"]["initContainers"] = [
        {
            "name": "prepare",
            "image": "busybox",
            "command": ["sh", "-c", "echo ready > prepared"],
            "env": [{"name": MARK_ENV, "value": mark}],
        }
    ]
    created = api.create(kinds.POD, manifest)

    status = wait_for(lambda: phase_is(api, name, "Succeeded"), what="the pod to succeed")

    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Initialized"] == "True" and conditions["PodScheduled"] == "True"
    line = log_of(tmp_path / "data", name, created["metadata"]["uid"]).strip()
    assert line == f"hello world|{name}|{NAMESPACE}|127.0.0.1|{name}|hello-arg|ready"


def test_missing_executable_is_a_start_error(api: KubeApi, local_node: NodeFactory, mark: str) -> None:
    node = local_node()
    name = unique("noexec")
    api.create(kinds.POD, pod(name, node.node_name, mark, ["no-such-program-here"]))

    status = wait_for(lambda: phase_is(api, name, "Failed"), what="the pod to fail")

    terminated = main_status(status)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (128, "StartError")
    assert "no-such-program-here" in terminated["message"]


def _child_pid(node_data: Path, name: str, uid: str) -> int:
    found = wait_for(lambda: re.search(r"child=(\d+)", log_of(node_data, name, uid)), what="the child's pid")
    return int(found.group(1))


# The shell and its child both ignore SIGTERM: only the SIGKILL after the grace period ends them.
STUBBORN = ["sh", "-c", 'trap "" TERM; sleep 300 & echo "child=$!"; wait']


def test_deletion_kills_the_whole_process_group(
    api: KubeApi, local_node: NodeFactory, mark: str, tmp_path: Path
) -> None:
    node = local_node()
    name = unique("deleted")
    created = api.create(kinds.POD, pod(name, node.node_name, mark, STUBBORN, terminationGracePeriodSeconds=1))
    uid = created["metadata"]["uid"]
    wait_for(lambda: phase_is(api, name, "Running"), what="the pod to run")
    child = _child_pid(tmp_path / "data", name, uid)
    assert alive(child)

    api.delete(kinds.POD, name, NAMESPACE)

    wait_for(lambda: gone(api, name), what="the pod object to be removed")
    wait_for(lambda: not alive(child), what="the container's child to die")
    wait_for(
        lambda: not logs.pod_log_dir(tmp_path / "data", NAMESPACE, name, uid).exists(),
        what="the pod's logs to be removed with it",
    )


def test_eviction_kills_the_pod(api: KubeApi, local_node: NodeFactory, mark: str, tmp_path: Path) -> None:
    node = local_node()
    name = unique("evicted")
    created = api.create(kinds.POD, pod(name, node.node_name, mark, STUBBORN, terminationGracePeriodSeconds=1))
    wait_for(lambda: phase_is(api, name, "Running"), what="the pod to run")
    child = _child_pid(tmp_path / "data", name, created["metadata"]["uid"])

    api.evict(NAMESPACE, name, uid=created["metadata"]["uid"])

    wait_for(lambda: gone(api, name), what="the evicted pod to be removed")
    wait_for(lambda: not alive(child), what="the evicted pod's processes to die")


def test_restart_readopts_pods_per_restart_policy(api: KubeApi, local_node: NodeFactory, mark: str) -> None:
    node = local_node()
    always, never = unique("always"), unique("never")
    api.create(kinds.POD, pod(always, node.node_name, mark, ["sleep", "300"], restart="Always"))
    api.create(kinds.POD, pod(never, node.node_name, mark, ["sleep", "300"], restart="Never"))
    for name in (always, never):
        wait_for(lambda name=name: phase_is(api, name, "Running"), what=f"{name} to run")

    node.stop()  # the processes end; the pod objects stay as they were, the node turns NotReady
    assert phase_is(api, always, "Running") and phase_is(api, never, "Running")
    ready = {c["type"]: c for c in api.get(kinds.NODE, node.node_name)["status"]["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")
    local_node()

    restarted = wait_for(
        lambda: (
            (s := phase_is(api, always, "Running"))
            and main_status(s)["restartCount"] == 1
            and main_status(s)["state"].get("running")
            and s
        ),
        what="the Always pod to restart",
    )
    assert main_status(restarted)["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown"
    failed = wait_for(lambda: phase_is(api, never, "Failed"), what="the Never pod to fail")
    assert main_status(failed)["state"]["terminated"]["exitCode"] == 137


# --- cgroups (this machine's cgroup v1) -------------------------------------------------------------


def _container_dir(controller: str, parent: str, qos_dir: str, uid: str, container_id: str) -> Path:
    return CGROUP_ROOT / controller / parent / qos_dir / f"pod{uid}" / container_id.removeprefix("lahar://")


@pytest.mark.skipif(CGROUPS_SKIP is not None, reason=CGROUPS_SKIP or "")
def test_pods_run_in_kubelet_cgroups(api: KubeApi, local_node: NodeFactory, mark: str) -> None:
    node = local_node()
    parent = node.cgroups.top  # type: ignore[union-attr]
    best_effort, guaranteed = unique("be"), unique("guaranteed")
    api.create(kinds.POD, pod(best_effort, node.node_name, mark, ["sleep", "300"]))
    limits = {"cpu": "500m", "memory": "64Mi"}
    api.create(
        kinds.POD,
        pod(
            guaranteed,
            node.node_name,
            mark,
            ["sleep", "300"],
            container={"resources": {"limits": limits, "requests": limits}},
        ),
    )

    be_status = wait_for(lambda: phase_is(api, best_effort, "Running"), what="the BE pod to run")
    g_status = wait_for(lambda: phase_is(api, guaranteed, "Running"), what="the Guaranteed pod to run")

    be_uid = api.get(kinds.POD, best_effort, NAMESPACE)["metadata"]["uid"]
    be_dir = _container_dir("cpu", parent, "besteffort", be_uid, main_status(be_status)["containerID"])
    assert (be_dir / "cpu.shares").read_text().strip() == "2"
    assert (be_dir.parent / "cpu.shares").read_text().strip() == "2"
    assert (CGROUP_ROOT / "cpu" / parent / "besteffort" / "cpu.shares").read_text().strip() == "2"
    [pid] = (be_dir / "cgroup.procs").read_text().split()
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"300"]
    memory_dir = _container_dir("memory", parent, "besteffort", be_uid, main_status(be_status)["containerID"])
    assert (memory_dir / "cgroup.procs").read_text().split() == [pid]

    g_uid = api.get(kinds.POD, guaranteed, NAMESPACE)["metadata"]["uid"]
    g_dir = _container_dir("cpu", parent, "", g_uid, main_status(g_status)["containerID"])
    assert (g_dir / "cpu.shares").read_text().strip() == "512"
    assert (g_dir / "cpu.cfs_quota_us").read_text().strip() == "50000"
    g_memory = _container_dir("memory", parent, "", g_uid, main_status(g_status)["containerID"])
    assert (g_memory / "memory.limit_in_bytes").read_text().strip() == str(64 << 20)

    api.delete(kinds.POD, best_effort, NAMESPACE, grace_period_seconds=0)
    wait_for(lambda: not be_dir.parent.exists(), what="the deleted pod's cgroup to be removed")
    wait_for(lambda: not alive(int(pid)), what="the deleted pod's process to die")


def test_without_cgroups_pods_still_run_and_the_node_says_so(
    api: KubeApi, local_node: NodeFactory, mark: str, tmp_path: Path
) -> None:
    node = local_node(cgroup_root=tmp_path / "no-cgroups-here")
    name = unique("plain")
    api.create(kinds.POD, pod(name, node.node_name, mark, ["true"]))

    wait_for(lambda: phase_is(api, name, "Succeeded"), what="the pod to succeed")

    conditions = {c["type"]: c for c in api.get(kinds.NODE, node.node_name)["status"]["conditions"]}
    assert conditions[CGROUPS_CONDITION]["status"] == "False"
    assert "without cgroups" in conditions[CGROUPS_CONDITION]["message"]
    assert "not mounted" in conditions[CGROUPS_CONDITION]["message"]


@pytest.mark.skipif(CGROUPS_SKIP is not None, reason=CGROUPS_SKIP or "")
def test_memory_limit_kills_with_oom_killed(api: KubeApi, local_node: NodeFactory, mark: str) -> None:
    node = local_node()
    name = unique("oom")
    limits = {"memory": "48Mi"}
    api.create(
        kinds.POD,
        pod(
            name,
            node.node_name,
            mark,
            [sys.executable, "-c", "data = b'x' * (256 << 20)"],
            container={"resources": {"limits": limits}},
        ),
    )

    status = wait_for(lambda: phase_is(api, name, "Failed"), what="the pod to be OOM-killed")

    terminated = main_status(status)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled")
