"""Logs an SRE can run with (issue 19): logfmt-like text or JSON lines, `-v` and `--log-format`
passed by `lahar up` to every program, and the agent quiet at steady state (it was 2 lines a second
with a flapping BE cap)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from lahar.agent.qos.engine import ChangeSummary
from lahar.agent.qos.strategies.cpu_suppress import Signal
from lahar.apiserver.server import ServerConfig
from lahar.log_format import JsonFormatter, TextFormatter, formatter
from lahar.up.system import System, UpOptions
from tests.agent.conftest import QosTree
from tests.agent.test_qos_engine import LAW, Node, config, engine_for


def record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord("lahar.agent", logging.WARNING, __file__, 1, message, args, exc_info)


def test_text_lines_are_logfmt_and_json_lines_are_objects() -> None:
    text = TextFormatter().format(record("collector %s failed: %s", "gpu", 'no "NVML"'))
    assert text.startswith("time=") and text.endswith('msg="collector gpu failed: no \\"NVML\\""')
    assert " level=warning logger=lahar.agent " in text
    line = json.loads(JsonFormatter().format(record("tick failed", exc=True)))
    assert (line["level"], line["logger"], line["msg"]) == ("warning", "lahar.agent", "tick failed")
    assert line["time"].endswith("Z") and "RuntimeError: boom" in line["error"]
    assert "\n" not in TextFormatter().format(record("tick failed", exc=True))  # one line, error quoted
    with pytest.raises(ValueError, match="--log-format"):
        formatter("xml")


def test_lahar_up_passes_verbose_and_the_log_format_to_every_program(tmp_path: Path) -> None:
    options = UpOptions(ServerConfig(tmp_path), verbose=True, log_format="json")
    system = System(options)
    for name in ("scheduler", "controller", "agent"):
        argv = system._program(name, ["--x"]).argv
        assert argv[argv.index("lahar") + 1 : argv.index(name)] == ["-v", "--log-format", "json"]
    argv = System(UpOptions(ServerConfig(tmp_path)))._program("agent", []).argv
    assert argv[argv.index("lahar") + 1 : argv.index("agent")] == []  # the defaults: no flags


def test_a_repeated_change_is_said_at_most_once_a_period() -> None:
    summary = ChangeSummary("BE CPU cap", period=60.0)
    assert summary.changed(0.0, "now 1.00 cores") == "BE CPU cap changed: now 1.00 cores"
    assert [summary.changed(t, "x") for t in range(1, 60)] == [None] * 59
    assert summary.changed(61.0, "now 0.80 cores") == "BE CPU cap changed 60 times since the last line: now 0.80 cores"


@pytest.fixture
def node(qos_tree: QosTree) -> Node:
    return Node(qos_tree)


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and r.name.startswith("lahar.agent")]


def test_the_agent_is_quiet_at_steady_state(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="lahar.agent")
    engine = engine_for(node, config(**LAW))
    engine.step(node.report(), node.pods, 1.0)
    first = info_lines(caplog)
    assert len(first) == 1 and first[0].startswith("QoS wrote ")  # setting the node up: one line
    caplog.clear()
    for tick in range(2, 12):
        engine.step(node.report(), node.pods, float(tick))
    assert info_lines(caplog) == []  # nothing changed: nothing said
    # A flapping cap: cut and grow, again and again, within a minute: one line, every change counted.
    at = 12.0
    for _ in range(10):
        for share in (0.9, 0.01):
            at += 1.5
            engine.interference_step(Signal(at, share, be_cores=1.5))
    assert engine.cap_changes >= 10
    for tick in range(12, 16):  # the ticks between write the moving cap too: summed up with the rest
        engine.step(node.report(), node.pods, float(tick))
    lines = info_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("BE CPU cap changed: now "), lines
    assert any(r.levelno == logging.DEBUG and r.getMessage().startswith("cgroup ") for r in caplog.records)
    engine.close()
