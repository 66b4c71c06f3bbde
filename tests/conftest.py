"""Shared fixtures: a real embedded API server process on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lahar.endpoints import free_loopback_port

# The real control plane's session fixture (`real_cluster`), for every test directory.
pytest_plugins = ["tests.kube.plugin"]


class ServerProcess:
    """`lahar apiserver` as a child process; restartable on the same data directory."""

    def __init__(self, data_dir: Path, port: int | None = None, extra_args: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.port = port or free_loopback_port()
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / f"{data_dir.name}-apiserver.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lahar",
                    "apiserver",
                    "--data-dir",
                    str(self.data_dir),
                    "--port",
                    str(self.port),
                    *self.extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"apiserver exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"apiserver did not answer within {timeout}s:\n{self.log.read_text()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: lahar\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: lahar\n  user: {}\n"
            "contexts:\n- name: lahar\n  context:\n    cluster: lahar\n    user: lahar\n"
            "current-context: lahar\n"
        )
        return path


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def k8s(apiserver: ServerProcess):  # type: ignore[no-untyped-def]
    """The official kubernetes client's ApiClient pointed at the embedded server."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = apiserver.url
    with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture(scope="module")
def module_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for all the tests of a module (they keep to their own names and namespaces):
    starting a server per test would make the API suite slow."""
    server = ServerProcess(tmp_path_factory.mktemp("apiserver") / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def module_k8s(module_apiserver: ServerProcess):  # type: ignore[no-untyped-def]
    """The official kubernetes client's ApiClient pointed at the module's server."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = module_apiserver.url
    with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture(scope="session")
def server_process() -> type[ServerProcess]:
    """The ServerProcess class, for tests that start servers with their own flags or data
    directories (test modules cannot import conftest under --import-mode=importlib)."""
    return ServerProcess


# --- test lanes (markers registered in pyproject.toml) ------------------------------------------
# Every test gets exactly one of unit / integration / e2e, and maybe slow, from the rules below
# unless it is marked itself, so files added later land in a lane without edits here.
LANES = ("unit", "integration", "e2e")
# Fixtures that start real processes (the embedded API server and what builds on it).
PROCESS_FIXTURES = {"apiserver", "module_apiserver", "server_process", "k8s", "module_k8s", "api_backend"}
# Whole-system folders and files: lahar up, a real control plane (kube-apiserver + etcd), clusters.
E2E_DIRS = {"up", "e2e", "kube", "kubectl_battery"}
# Real processes, sockets, cgroups or kernel interfaces on this machine.
INTEGRATION_DIRS = {"apiserver", "client", "cli", "leader", "node", "deploy", "helm", "admission", "bench"}
INTEGRATION_FILES = {
    "test_report_stream.py",  # a gRPC server on loopback
    "test_proto_generated.py",  # runs protoc
    "test_collectors_node.py",  # this machine's /proc and /sys
    "test_pod_cgroups.py",
    "test_qos_strategies.py",  # the QoS tree fixture includes the real cgroup hierarchy
    "test_qos_engine.py",
    "test_controller_metrics.py",
    "test_grafana_dashboard.py",
    "test_metrics_catalog.py",
    "test_simulated_nodes.py",
    "test_exporter.py",  # serves /metrics on a socket
    "test_accelerators.py",  # compiles the fake NVML/DCMI libraries with gcc
    "test_colocation_bench.py",  # real workloads, real CPU
}
# Load-sensitive (kernel timing, CPU measurements) or long (benchmarks, the demo).
SLOW_FILES = {"test_colocation_bench.py", "test_bench_scheduler.py", "test_prometheus_e2e.py"}


def lane_of(path: Path, fixtures: set[str]) -> str:
    folder, name = path.parent.name, path.name
    if folder in E2E_DIRS or name.endswith("_e2e.py"):
        return "e2e"
    if folder in INTEGRATION_DIRS or name in INTEGRATION_FILES or "_kernel" in name or fixtures & PROCESS_FIXTURES:
        return "integration"
    return "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if not any(item.get_closest_marker(lane) for lane in LANES):
            item.add_marker(lane_of(path, set(getattr(item, "fixturenames", ()))))
        if path.name in SLOW_FILES or "_kernel" in path.name or item.get_closest_marker("demo"):
            item.add_marker("slow")
