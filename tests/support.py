"""Helpers shared by test modules (importable as `tests.support`; pytest puts the repository root
on the path, see pyproject.toml)."""

from __future__ import annotations

import time
from collections.abc import Callable
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
