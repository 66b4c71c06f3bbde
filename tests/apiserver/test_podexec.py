"""`pods/exec` and `pods/attach` (apiserver/podexec.py) driven by the real kubectl over its
WebSocket protocol: stdout, stderr, stdin with its close (v5), exit codes, the container's
environment and working directory, refusals, and attach following a container's output. The
server runs in process with a finder over local processes, as lahar up hands it the local node's."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from aiohttp import web

from lahar.apiserver.app import ApiServer
from lahar.apiserver.store import Store
from lahar.endpoints import free_loopback_port

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@dataclass
class Container:
    cwd: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    live: bool = True

    def argv(self, command: Sequence[str]) -> list[str]:
        return list(command)

    def running(self) -> bool:
        return self.live


@dataclass
class Served:
    url: str
    kubeconfig: Path
    container: Container


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("exec")
    container = Container(folder, folder / "main.log", {"PATH": "/usr/bin:/bin", "GREETING": "hello from web"})
    container.log_path.write_bytes(b"before\n")
    finder = lambda namespace, name, c: container if (name, c) == ("web", "main") else None  # noqa: E731
    port = free_loopback_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(ApiServer(Store(folder / "db.sqlite"), pod_exec=finder).make_app())
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: l\n  cluster:\n    server: {url}\n"
        "users:\n- name: l\n  user: {}\n"
        "contexts:\n- name: l\n  context:\n    cluster: l\n    user: l\n"
        "current-context: l\n"
    )
    for name, containers, phase in (
        ("web", ["main"], "Running"),
        ("pair", ["a", "b"], "Running"),
        ("done", ["main"], "Succeeded"),
    ):
        pod = {
            "metadata": {"name": name},
            "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers], "nodeName": "vm"},
        }
        requests.post(f"{url}/api/v1/namespaces/default/pods", json=pod, timeout=10).raise_for_status()
        requests.patch(
            f"{url}/api/v1/namespaces/default/pods/{name}/status",
            data=b'{"status":{"phase":"%s"}}' % phase.encode(),
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=10,
        ).raise_for_status()
    try:
        yield Served(url, kubeconfig, container)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def kubectl(served: Served, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, f"--kubeconfig={served.kubeconfig}", *args], input=stdin, capture_output=True, text=True, timeout=30
    )


def test_exec_streams_and_exit_code(served: Served) -> None:
    done = kubectl(served, "exec", "web", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert done.stdout == "out\n"
    assert "err\n" in done.stderr and "command terminated with exit code 3" in done.stderr
    assert done.returncode == 3


def test_exec_runs_in_the_containers_environment(served: Served) -> None:
    done = kubectl(served, "exec", "web", "-c", "main", "--", "sh", "-c", 'echo "$GREETING"; pwd')
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["hello from web", str(served.container.cwd)]


def test_exec_stdin_reaches_the_command_and_its_close_ends_it(served: Served) -> None:
    done = kubectl(served, "exec", "-i", "web", "--", "sh", "-c", "tr a-z A-Z; echo end", stdin="")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "end\n", "an empty stdin is closed at once, so tr ends"
    typed = kubectl(served, "exec", "-i", "web", "--", "sh", "-c", "tr a-z A-Z", stdin="quiet please\n")
    assert typed.stdout == "QUIET PLEASE\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("exec", "done", "--", "true"), "cannot exec into a container in a completed pod"),
        (("exec", "web", "-c", "nope", "--", "true"), "container nope is not valid for pod web"),
        (("exec", "pair", "-c", "a", "--", "true"), 'container not found ("a")'),
        (("exec", "missing", "--", "true"), 'pods "missing" not found'),
    ],
)
def test_exec_refusals(served: Served, args: tuple[str, ...], message: str) -> None:
    done = kubectl(served, *args)
    assert done.returncode == 1 and message in done.stderr, done.stderr


def test_a_command_that_cannot_start_fails_in_the_error_channel(served: Served) -> None:
    done = kubectl(served, "exec", "web", "--", "/no/such/program")
    assert done.returncode == 1 and "failed to exec in container" in done.stderr, done.stderr


def test_exec_without_an_upgrade_is_refused(served: Served) -> None:
    plain = requests.get(f"{served.url}/api/v1/namespaces/default/pods/web/exec?command=true&stdout=true", timeout=10)
    assert plain.status_code == 400 and "WebSocket" in plain.json()["message"]


def test_attach_follows_output_until_the_container_ends(served: Served) -> None:
    assert KUBECTL is not None
    attach = subprocess.Popen(
        [KUBECTL, f"--kubeconfig={served.kubeconfig}", "attach", "web", "-c", "main"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.5)  # connected: what is written from now on is followed
        with open(served.container.log_path, "a") as log:
            log.write("after one\nafter two\n")
        time.sleep(1.0)
        served.container.live = False
        stdout, stderr = attach.communicate(timeout=15)
    finally:
        served.container.live = True
        if attach.poll() is None:
            attach.kill()
    assert stdout == "after one\nafter two\n", stderr
    assert attach.returncode == 0
