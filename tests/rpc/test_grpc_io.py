"""gRPC's polling I/O is chosen before grpcio loads, and an operator's own setting is kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lahar.grpc_io import EXPERIMENTS_VARIABLE, POLLING_IO, polling_io_setting, use_polling_io


def test_the_polling_io_is_set_when_nothing_else_is() -> None:
    assert polling_io_setting({}, grpc_loaded=False) == POLLING_IO


@pytest.mark.parametrize("operators", ["", "-event_engine_client", "some_experiment"])
def test_an_operators_setting_is_kept(operators: str) -> None:
    assert polling_io_setting({EXPERIMENTS_VARIABLE: operators}, grpc_loaded=False) is None
    environ = {EXPERIMENTS_VARIABLE: operators}
    assert not use_polling_io(environ, {})
    assert environ == {EXPERIMENTS_VARIABLE: operators}


def test_nothing_is_set_once_grpc_is_loaded() -> None:
    """grpcio has read the variable by then: setting it would only mislead a reader of the environment."""
    environ: dict[str, str] = {}
    assert not use_polling_io(environ, {"grpc": sys})
    assert environ == {}
    assert use_polling_io(environ, {})
    assert environ == {EXPERIMENTS_VARIABLE: POLLING_IO}


def _experiments_seen_by_grpc(environment: dict[str, str]) -> tuple[str, str]:
    """A fresh process that imports lahar, then grpc, then starts a server: the variable then,
    and what grpcio logged (it names an experiment it does not know as an error)."""
    script = (
        "import os, asyncio, lahar, grpc\n"
        "async def serve():\n"
        "    server = grpc.aio.server()\n"
        "    server.add_insecure_port('127.0.0.1:0')\n"
        "    await server.start()\n"
        "    await server.stop(0)\n"
        "asyncio.run(serve())\n"
        f"print(os.environ.get({EXPERIMENTS_VARIABLE!r}, '<unset>'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip(), done.stderr


def test_a_lahar_process_gets_the_polling_io_and_grpcio_knows_every_experiment_named() -> None:
    environment = {key: value for key, value in os.environ.items() if key != EXPERIMENTS_VARIABLE}
    seen, logged = _experiments_seen_by_grpc(environment)
    assert seen == POLLING_IO
    assert "Unknown experiment" not in logged, logged


def test_a_lahar_process_keeps_the_operators_setting() -> None:
    seen, _ = _experiments_seen_by_grpc({**os.environ, EXPERIMENTS_VARIABLE: ""})
    assert seen == ""
