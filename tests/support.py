"""Helpers shared by test modules (importable as `tests.support`; pytest puts the repository root
on the path, see pyproject.toml)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def wait_for(
    condition: Callable[[], Any], timeout: float = 10.0, what: str = "the condition", interval: float = 0.05
) -> Any:
    """Poll until condition() is truthy and return its value; fail naming what and the last value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (/proc/<pid>/stat), the reference a measurement
    taken over the same window is compared with."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def agrees_within(
    measure: Callable[[float], tuple[float, float]], rel: float, windows: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
) -> tuple[float, float]:
    """Load-proof timing checks: `measure(window)` returns (measured, reference) taken over the same
    window of one run; a busy machine shifts both alike, so their ratio is what is asserted. A miss
    is retried over longer windows (more samples, less tick noise); the last pair fails the test."""
    measured = reference = 0.0
    for window in windows:
        measured, reference = measure(window)
        if reference > 0 and abs(measured - reference) <= rel * reference:
            return measured, reference
    raise AssertionError(f"measured {measured:.3f} vs reference {reference:.3f}: off by more than {rel:.0%}")


def stop_process(proc: subprocess.Popen[Any], grace: float = 20.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace` seconds; always reaped."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
