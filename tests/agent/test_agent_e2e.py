"""End to end: a real `lahar agent` process watches its pods on the embedded API server and streams
reports over gRPC to the scheduler's report server; the server is killed and restarted and the
agent reconnects by itself; an agent reporting for another node or with a bad token is refused
and counted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lahar.scheduler.node_reports import NodeReportStore
from lahar.scheduler.report_server import ReportServer
from tests.support import stop_process, wait_for

TOKENS = {"token-of-n1": "n1"}


class AgentProcess:
    def __init__(self, tmp_path: Path, node: str, token: str, port: int, kubeconfig: Path) -> None:
        token_file = tmp_path / f"{node}-{token}.token"
        token_file.write_text(token + "\n")
        self.log = tmp_path / f"agent-{node}-{token}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lahar",
                    "agent",
                    "--node",
                    node,
                    "--interval",
                    "0.3",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--scheduler-address",
                    f"127.0.0.1:{port}",
                    "--token-file",
                    str(token_file),
                    "--metrics-address",
                    "127.0.0.1",
                    "--metrics-port",
                    "0",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def metrics_port(self) -> int:
        found = wait_for(
            lambda: re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", self.log.read_text()),
            20,
            "the agent to print its metrics address",
        )
        return int(found.group(1))

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port()}/metrics", timeout=5) as response:
            text = response.read().decode()
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}

    def stop(self) -> None:
        stop_process(self.proc, 10)


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        agent.stop()


def test_agent_streams_reports_and_reconnects(apiserver: Any, tmp_path: Path, agents: list[AgentProcess]) -> None:
    kubeconfig = apiserver.kubeconfig(tmp_path / "kubeconfig")
    store = NodeReportStore()
    server = ReportServer(store, TOKENS)
    port = server.start("127.0.0.1:0")
    try:
        agent = AgentProcess(tmp_path, "n1", "token-of-n1", port, kubeconfig)
        agents.append(agent)
        report = wait_for(lambda: store.latest("n1"), 20, "the first report of n1")
        assert report.cpu.cores == os.cpu_count()
        assert report.memory.total_bytes > 0 and report.health.errors == {}
        assert store.age("n1") is not None and store.age("n1") < 5

        # The scheduler side dies; a new one comes up on the same port, with an empty store.
        server.stop()
        first_sequence = store.latest("n1").sequence
        restarted = NodeReportStore()
        server = ReportServer(restarted, TOKENS)
        assert server.start(f"127.0.0.1:{port}") == port
        again = wait_for(lambda: restarted.latest("n1"), 30, "the agent to reconnect to the new server")
        assert again.sequence > first_sequence
        metrics = agent.metrics()
        assert metrics["lahar_agent_stream_reconnects_total"] >= 1
        assert metrics["lahar_agent_stream_connected"] == 1.0
        assert metrics["lahar_node_cpu_cores"] == os.cpu_count()

        # A node reporting for another (n2 holds n1's token), and a bad token: refused, counted.
        agents.append(AgentProcess(tmp_path, "n2", "token-of-n1", port, kubeconfig))
        agents.append(AgentProcess(tmp_path, "n3", "not-a-token", port, kubeconfig))
        wait_for(lambda: server.counts.get("forbidden", 0) >= 1, 20, "the report for another node to be refused")
        wait_for(lambda: server.counts.get("unauthenticated", 0) >= 1, 20, "the bad token to be refused")
        assert restarted.latest("n2") is None and restarted.latest("n3") is None
        assert agents[1].proc.poll() is None and agents[2].proc.poll() is None, "refused agents keep running"
    finally:
        server.stop()
