"""`lahar logs`: the logs lahar up's local runtime keeps under its data directory."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.cli.main import main
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.node import logs
from lahar.node.runtime import LocalNode
from tests.support import wait_for

UID = "4f1c0d2e-0000-4000-8000-000000000001"


def write_pod_logs(
    data_dir: Path,
    name: str,
    containers: dict[str, str],
    init: dict[str, str] | None = None,
    namespace: str = "default",
) -> Path:
    """A log directory as the runtime leaves it."""
    directory = logs.pod_log_dir(data_dir, namespace, name, UID)
    directory.mkdir(parents=True)
    pod = {
        "metadata": {"name": name, "namespace": namespace, "uid": UID},
        "spec": {"containers": [{"name": c} for c in containers], "initContainers": [{"name": c} for c in init or {}]},
    }
    logs.write_manifest(directory, pod)
    for container, text in {**containers, **(init or {})}.items():
        logs.container_log(directory, container).write_text(text)
    return directory


def lahar_logs(data_dir: Path, *args: str) -> list[str]:
    return ["logs", *args, "--data-dir", str(data_dir)]


def test_prints_the_only_container(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    write_pod_logs(tmp_path, "web", {"main": "line 1\nline 2\n"})

    assert main(lahar_logs(tmp_path, "web")) == 0

    out, err = capfdbinary.readouterr()
    assert (out, err) == (b"line 1\nline 2\n", b"")


def test_defaults_to_the_first_container_and_says_so(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    write_pod_logs(tmp_path, "web", {"app": "from app\n", "sidecar": "from sidecar\n"}, {"setup": "from init\n"})

    assert main(lahar_logs(tmp_path, "web")) == 0
    out, err = capfdbinary.readouterr()
    assert out == b"from app\n"
    assert b'Defaulted container "app" out of: app, sidecar' in err

    assert main(lahar_logs(tmp_path, "web", "-c", "setup")) == 0
    assert capfdbinary.readouterr().out == b"from init\n"


def test_refuses_unknown_pods_and_containers(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    write_pod_logs(tmp_path, "web", {"app": ""}, {"setup": ""}, namespace="team")

    assert main(lahar_logs(tmp_path, "web")) == 1  # another namespace
    assert b"no logs of pod default/web" in capfdbinary.readouterr().err
    assert main(lahar_logs(tmp_path, "web", "-n", "team", "-c", "db")) == 1
    assert b"choose one of app, setup (init)" in capfdbinary.readouterr().err


def test_follow_ends_when_the_container_does(tmp_path: Path) -> None:
    directory = write_pod_logs(tmp_path, "job", {"main": "started\n"})
    container = subprocess.Popen(["sleep", "60"])  # stands for the running container
    logs.running_marker(directory, "main").write_text(str(container.pid))
    try:
        follower = subprocess.Popen(
            [sys.executable, "-m", "lahar", *lahar_logs(tmp_path, "job", "-f")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        time.sleep(0.5)
        with open(logs.container_log(directory, "main"), "a") as log:
            log.write("working\n")
        time.sleep(0.5)
        assert follower.poll() is None, "follow ended while the container runs"
        with open(logs.container_log(directory, "main"), "a") as log:
            log.write("done\n")
    finally:
        container.kill()
        container.wait()

    out, err = follower.communicate(timeout=10)
    assert (follower.returncode, err) == (0, b"")
    assert out == b"started\nworking\ndone\n"


def test_logs_of_a_pod_the_local_runtime_ran(
    apiserver: Any, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    api = KubeApi(new_api_client(str(apiserver.kubeconfig(tmp_path / "kubeconfig"))))
    node = LocalNode(api, tmp_path / "data", "logs-node", use_cgroups=False)
    node.start()
    try:
        api.create(
            kinds.POD,
            {
                "metadata": {"name": "hello"},
                "spec": {
                    "nodeName": "logs-node",
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox", "command": ["sh", "-c", "echo hi; echo oops >&2"]}
                    ],
                },
            },
        )
        wait_for(
            lambda: (api.get(kinds.POD, "hello", "default").get("status") or {}).get("phase") == "Succeeded",
            what="the pod to succeed",
        )
    finally:
        node.stop()
        api.api_client.close()

    assert main(lahar_logs(tmp_path / "data", "hello")) == 0
    assert capfdbinary.readouterr().out == b"hi\noops\n"
