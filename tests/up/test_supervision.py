"""`lahar up` keeps its programs running (issue 15): the restart back-off as a function, and the
supervisor restarting a program that exits or stops being live while the others keep running,
with stand-in programs (no API server needed)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lahar.endpoints import free_loopback_port
from lahar.up import system
from lahar.up.system import Program, System, UpOptions, restart_delay
from tests.support import wait_for


def test_restart_delay_doubles_to_a_cap() -> None:
    assert [restart_delay(n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert restart_delay(10_000) == 60


class Sleeper(Program):
    """A program that sleeps (or exits at once), with a /livez the test controls."""

    def __init__(self, name: str, log_dir: Path, exit_at_once: bool = False) -> None:
        super().__init__(name, [], free_loopback_port(), log_dir / f"{name}.log")
        self.exit_at_once = exit_at_once
        self.live = True

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-c", "raise SystemExit(3)" if self.exit_at_once else "import time; time.sleep(600)"]

    def health(self, path: str = "/healthz") -> tuple[bool, str]:
        return self.live, "ok" if self.live else "stuck on ns/job"


@pytest.fixture
def supervised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from lahar.apiserver.server import ServerConfig

    monkeypatch.setattr(system, "READY_TIMEOUT_SECONDS", 0.0)
    monkeypatch.setattr(system, "LIVENESS_PERIOD_SECONDS", 0.1)
    monkeypatch.setattr(system, "RESTART_INITIAL_SECONDS", 0.2)
    up = System(UpOptions(server=ServerConfig(data_dir=tmp_path / "data")))
    up.components_dir.mkdir(parents=True)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def run(programs: list[Program]) -> System:
        up.programs = programs
        for program in programs:
            program.start()
        thread = threading.Thread(target=up.supervise, args=(stop, 0.05), daemon=True)
        thread.start()
        threads.append(thread)
        return up

    yield run
    stop.set()
    for thread in threads:
        thread.join(5)
    System._stop_programs(up.programs)


def test_a_program_that_exits_is_restarted_and_the_rest_keep_running(supervised: Any, tmp_path: Path) -> None:
    steady, crashing = Sleeper("scheduler", tmp_path), Sleeper("controller", tmp_path, exit_at_once=True)
    up = supervised([steady, crashing])
    steady_pid = steady.process.pid if steady.process else 0
    wait_for(lambda: crashing.restarts >= 3, 15, "three restarts of a crashing program")
    assert steady.process is not None and steady.process.pid == steady_pid and steady.poll() is None
    assert crashing.crash_loop >= 3  # the back-off grows: 0.2, 0.4, 0.8 s ...
    assert f"{crashing.process.pid if crashing.process else ''} controller" in up.pids_file.read_text()


def test_a_program_that_is_not_live_is_killed_and_restarted(supervised: Any, tmp_path: Path) -> None:
    wedged = Sleeper("controller", tmp_path)
    supervised([wedged])
    first = wedged.process.pid if wedged.process else 0
    wedged.live = False
    wait_for(lambda: wedged.restarts >= 1, 15, "the wedged program's restart")
    wedged.live = True
    # The supervisor thread counts a restart only once the new process is started.
    assert wedged.process is not None and wedged.process.pid != first
    assert wedged.process.poll() is None
