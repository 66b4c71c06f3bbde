"""Online pods' own latency targets (lahar.dev/latency-probe, lahar.dev/latency-target): parsing,
timing real TCP and HTTP probes on loopback, the slack, and what the CPU controller does with it."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from lahar.agent.collectors.latency_probe import (
    PROBE_ANNOTATION,
    TARGET_ANNOTATION,
    LatencyProbe,
    LatencyProber,
    parse_probe,
    slack,
    time_probe,
)
from lahar.agent.qos.node_state import pod_spec
from lahar.agent.qos.strategies import cpu_suppress
from lahar.agent.qos.strategies.cpu_suppress import ControlState, CpuSuppressConfig, Signal


def annotations(probe: str | None, target: str | None) -> dict[str, str]:
    found = {PROBE_ANNOTATION: probe, TARGET_ANNOTATION: target}
    return {key: value for key, value in found.items() if value is not None}


def test_parse_probe() -> None:
    assert parse_probe({}) is None
    assert parse_probe(annotations("tcp://127.0.0.1:6379", "5ms")) == LatencyProbe("tcp", "127.0.0.1", 6379, "/", 0.005)
    assert parse_probe(annotations("http://web:8080/healthz", "1.5s")) == LatencyProbe(
        "http", "web", 8080, "/healthz", 1.5
    )


@pytest.mark.parametrize(
    ("probe", "target", "message"),
    [
        ("tcp://127.0.0.1:6379", None, "must be given together"),
        (None, "5ms", "must be given together"),
        ("tcp://127.0.0.1:6379", "5", "lahar.dev/latency-target: invalid duration"),
        ("tcp://127.0.0.1:6379", "0s", r"must be in \(0, 10s\]"),
        ("tcp://127.0.0.1:6379", "1h", r"must be in \(0, 10s\]"),
        ("udp://127.0.0.1:53", "5ms", 'expected "tcp://HOST:PORT"'),
        ("tcp://127.0.0.1", "5ms", "a port is required"),
        ("tcp://127.0.0.1:99999", "5ms", "lahar.dev/latency-probe: Port out of range"),
    ],
)
def test_a_bad_probe_is_refused_naming_the_annotation(probe: str | None, target: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_probe(annotations(probe, target))


def test_a_pod_with_a_bad_probe_keeps_running_without_one(caplog: pytest.LogCaptureFixture) -> None:
    pod = {"metadata": {"name": "web", "namespace": "shop", "uid": "u1", "annotations": annotations("x", "5ms")}}
    assert pod_spec(pod).latency_probe is None
    assert "pod shop/web: latency target ignored: lahar.dev/latency-probe" in caplog.text


def test_slack_is_one_minus_p90_over_target() -> None:
    assert slack([], 0.01) is None
    assert slack([0.001] * 9 + [0.02], 0.01) == pytest.approx(0.9)  # p90 of ten is the ninth
    assert slack([0.001] * 8 + [0.02] * 2, 0.01) == pytest.approx(-1.0)


@pytest.fixture
def http_server() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_probes_time_real_servers_and_count_failures_as_twice_the_target(http_server: int) -> None:
    target = 0.5
    http_probe = LatencyProbe("http", "127.0.0.1", http_server, "/healthz", target)
    tcp_probe = LatencyProbe("tcp", "127.0.0.1", http_server, "/", target)
    assert 0 < time_probe(http_probe) < target
    assert 0 < time_probe(tcp_probe) < target
    closed = LatencyProbe("tcp", "127.0.0.1", free_port(), "/", target)  # nothing listens: refused
    assert time_probe(closed) == 2 * target


def test_the_prober_reports_the_worst_pods_slack() -> None:
    fast, slow = LatencyProbe("tcp", "a", 1, "/", 0.01), LatencyProbe("tcp", "b", 1, "/", 0.01)
    timings = {fast: 0.001, slow: 0.02}
    prober = LatencyProber(probe=lambda probe: timings[probe])
    try:
        assert prober.slack() is None
        prober.set_probes({"u1": fast, "u2": slow})
        prober.step()
        assert prober.slack() == pytest.approx(-1.0)
        prober.set_probes({"u1": fast})  # the slow pod ended
        assert prober.slack() == pytest.approx(0.9)
    finally:
        prober.stop()


def test_a_missed_target_cuts_be_and_the_cap_grows_only_with_room() -> None:
    config = CpuSuppressConfig()
    state, action = cpu_suppress.control(ControlState(), Signal(1.0, 0.05, 1.6, slo_slack=-0.3), config, 2)
    assert action == "cut" and state.cap == pytest.approx(0.8)  # the wait alone says nothing
    state, action = cpu_suppress.control(state, Signal(1.25, 0.05, 0.8, slo_slack=-0.5), config, 2)
    assert action == "" and state.cap == pytest.approx(0.8)  # the cut did not help the target: not again
    state, action = cpu_suppress.control(state, Signal(1.5, 0.05, 0.8, slo_slack=0.1), config, 2)
    assert action == "" and state.cap == pytest.approx(0.8)  # met, but with no room to spare: hold
    state, action = cpu_suppress.control(state, Signal(2.5, 0.05, 0.8, slo_slack=0.5), config, 2)
    assert action == "grow" and state.cap == pytest.approx(1.0)
