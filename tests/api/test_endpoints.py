"""Which listening addresses may go without a token (issue 15): 127.0.0.1, ::1 and a `localhost`
that resolves to nothing else; any other address, 127.0.0.2 and wildcards included, needs one."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from lahar import endpoints
from lahar.apiserver.server import ConfigError, ServerConfig


def resolving(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> None:
    def getaddrinfo(host: str, *_: Any, **__: Any) -> list[tuple[Any, ...]]:
        assert host == "localhost"
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in addresses]

    monkeypatch.setattr(endpoints.socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]"])
def test_explicit_loopback_addresses(host: str) -> None:
    assert endpoints.is_explicit_loopback(host)


@pytest.mark.parametrize("host", ["127.0.0.2", "0.0.0.0", "::", "::ffff:127.0.0.1", "10.0.0.1", "example.com", ""])
def test_other_addresses_are_not_an_explicit_loopback_choice(host: str) -> None:
    assert not endpoints.is_explicit_loopback(host)


def test_localhost_counts_only_when_it_resolves_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    resolving(monkeypatch, "127.0.0.1", "::1")
    assert endpoints.is_explicit_loopback("localhost") and endpoints.is_loopback("localhost")
    resolving(monkeypatch, "127.0.0.1", "192.168.1.5")
    assert not endpoints.is_explicit_loopback("localhost") and not endpoints.is_loopback("localhost")


def test_unresolvable_localhost_is_not_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: Any, **__: Any) -> None:
        raise socket.gaierror("no")

    monkeypatch.setattr(endpoints.socket, "getaddrinfo", fail)
    assert not endpoints.is_loopback("localhost")


@pytest.mark.parametrize("host", ["127.0.0.2", "0.0.0.0", "::", "localhost"])
def test_server_refuses_to_run_tokenless_off_explicit_loopback(
    host: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    resolving(monkeypatch, "10.1.2.3")  # a localhost that /etc/hosts points elsewhere
    with pytest.raises(ConfigError, match="requires --token-file"):
        ServerConfig(data_dir=tmp_path, host=host).token()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_server_runs_tokenless_on_explicit_loopback(host: str, tmp_path: Path) -> None:
    assert ServerConfig(data_dir=tmp_path, host=host).token() is None
