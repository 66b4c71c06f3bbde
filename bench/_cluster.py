"""`lahar up` as a child process for the benchmarks that need a whole cluster: the embedded API
server, the scheduler, the controller and simulated nodes, each its own process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.endpoints import free_loopback_port

START_TIMEOUT = 120.0


class Cluster:
    """`lahar up` with simulated nodes only, as a child process; with `clusters`, a federation
    (`lahar up --clusters N`: a hub and N members of their own sizes) instead."""

    def __init__(
        self, data_dir: Path, nodes: int, *extra: str, clusters: int = 0, start_timeout: float = START_TIMEOUT
    ) -> None:
        self.data_dir = data_dir
        self.port = free_loopback_port()
        self.start_timeout = start_timeout
        common = [sys.executable, "-m", "lahar", "up", "--data-dir", str(data_dir), "--port", str(self.port)]
        if clusters:
            self.argv = [*common, "--clusters", str(clusters), *extra]
            self.ready = "The federation is up"
        else:
            self.argv = [*common, "--no-local-node", "--sim-nodes", str(nodes), *extra]
            self.ready = "Lahar is up"
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> KubeApi:
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while not any(self.ready in line for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("lahar up did not start:\n" + "".join(self.lines[-40:]))
            time.sleep(0.1)
        return KubeApi(new_api_client(str(self.data_dir / "kubeconfig")), timeout=60)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def pid_of(self, program: str) -> int:
        for line in (self.data_dir / "components" / "pids").read_text().splitlines():
            pid, _, name = line.partition(" ")
            if name.strip() == program:
                return int(pid)
        raise RuntimeError(f"no {program} in lahar up's programs")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
