"""`lahar scheduler`: --check-conf in process, and the command itself as a process against the
embedded API server (its /metrics, /healthz and report endpoint, and a clean stop on SIGTERM)."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lahar.cli.main import main
from lahar.scheduler.conf import DEFAULT_CONF, load_conf
from tests.support import wait_for


def test_check_conf_prints_the_parsed_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "scheduler.conf"
    conf.write_text(
        'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n    enableJobOrder: false\n'
        "  - name: binpack\n    arguments: {binpack.weight: 2}\n"
    )
    assert main(["scheduler", "--check-conf", str(conf)]) == 0
    out = capsys.readouterr().out
    assert f"# {conf}: ok" in out and "actions: enqueue, allocate" in out
    assert "binpack.weight: 2" in out and "enableJobOrder: false" in out
    printed = tmp_path / "printed.conf"
    printed.write_text(out)  # what it prints is a configuration file that gives the same
    assert load_conf(printed).tiers == load_conf(conf).tiers


def test_check_conf_refuses_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    conf = tmp_path / "scheduler.conf"
    conf.write_text(
        DEFAULT_CONF.replace("name: drf\n    enablePreemptable: false", "name: drf\n    enablePreemptable: no way")
    )
    assert main(["scheduler", "--check-conf", str(conf)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "enablePreemptable: must be true or false" in captured.err
    # A plugin Lahar does not have is left out with a warning, not refused (issue 17).
    conf.write_text(DEFAULT_CONF.replace("name: drf", "name: dfr"))
    assert main(["scheduler", "--check-conf", str(conf)]) == 0
    captured = capsys.readouterr()
    assert "unknown plugin 'dfr'" in caplog.text and "dfr" not in captured.out
    assert main(["scheduler", "--check-conf", str(tmp_path / "missing.conf")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_bad_flags_and_a_bad_configuration_at_start_are_refused(
    module_apiserver: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scheduler", "--period", "0"]) == 1
    assert "--period must be positive" in capsys.readouterr().err
    conf = tmp_path / "scheduler.conf"
    conf.write_text('actions: "allocate, allocate"\n')
    kubeconfig = module_apiserver.kubeconfig(tmp_path / "kubeconfig")
    assert main(["scheduler", "--conf", str(conf), "--kubeconfig", str(kubeconfig)]) == 1
    assert "lists an action twice" in capsys.readouterr().err


def fetch(port: int, path: str) -> tuple[int, str]:
    """GET a path of the scheduler's metrics server: status and body, whatever the status."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_the_command_serves_metrics_and_reports_and_stops_cleanly(module_apiserver: Any, tmp_path: Path) -> None:
    kubeconfig = module_apiserver.kubeconfig(tmp_path / "kubeconfig")
    tokens = tmp_path / "tokens"
    tokens.write_text("secret-token *\n")
    log = tmp_path / "scheduler.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lahar",
                "scheduler",
                "--kubeconfig",
                str(kubeconfig),
                "--period",
                "0.2",
                "--metrics-port",
                "0",
                "--metrics-address",
                "127.0.0.1",
                "--token-file",
                str(tokens),
                "--report-address",
                "127.0.0.1:0",
                "--scheduler-name",
                "lahar",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        port = int(
            wait_for(
                lambda: re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log.read_text()),
                20,
                "the metrics address",
            ).group(1)
        )
        assert re.search(r"agent reports on 127\.0\.0\.1:\d+ \(loopback, no TLS\)", log.read_text())
        assert "lahar scheduler for lahar using" in log.read_text()
        wait_for(lambda: fetch(port, "/healthz")[0] == 200, 20, "a healthy scheduler")
        status, body = fetch(port, "/metrics")
        assert status == 200 and "lahar_scheduler_e2e_scheduling_duration_seconds_count" in body
        assert 'lahar_scheduler_node_reports{state="missing"}' in body
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    assert code == 0, log.read_text()
    assert "lahar scheduler stopped" in log.read_text()


def test_lahar_up_takes_a_scheduler_configuration_and_refuses_a_bad_one_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "scheduler.conf"
    conf.write_text('actions: "allocate"\ntiers:\n- plugins:\n  - name: gang\n    enableJobReady: perhaps\n')
    assert main(["up", "--scheduler-conf", str(conf)]) == 1
    assert "enableJobReady: must be true or false" in capsys.readouterr().err
