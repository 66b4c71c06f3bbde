"""A control loop's health from its progress, for /livez and /readyz: a loop is live while it
keeps turning (a reconcile stuck for minutes is a wedged process that a restart cures) and ready
while its work succeeds (a loop whose every pass fails, the API gone for instance, is not ready,
but restarting it would not help). Shared by the controller, the scheduler and the agent; each
calls `turned()` at the top of a pass and `succeeded()`/`failed()` at its end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_STALL_SECONDS = 60.0  # a pass running longer than this is wedged
DEFAULT_FAILING_SECONDS = 60.0  # only failures for this long: not ready


class LoopHealth:
    def __init__(
        self,
        what: str,
        stall_seconds: float = DEFAULT_STALL_SECONDS,
        failing_seconds: float = DEFAULT_FAILING_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.stall_seconds = stall_seconds
        self.failing_seconds = failing_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._turned_at: float | None = None
        self._working_on = ""
        self._succeeded_at: float | None = None
        self._failing_since: float | None = None
        self._last_error = ""
        self.failures = 0

    def turned(self, working_on: str = "") -> None:
        """A pass begins (or an idle loop woke up): the loop is alive."""
        with self._lock:
            self._turned_at = self.clock()
            self._working_on = working_on

    def succeeded(self) -> None:
        with self._lock:
            self._succeeded_at = self._turned_at = self.clock()
            self._failing_since = None
            self._working_on = ""

    def failed(self, error: str) -> None:
        with self._lock:
            now = self.clock()
            self._turned_at = now
            self.failures += 1
            self._last_error = error
            self._working_on = ""
            if self._failing_since is None:
                self._failing_since = now

    def live(self) -> tuple[bool, str]:
        """False when the current pass has run past the stall limit (or none ever began)."""
        with self._lock:
            if self._turned_at is None:
                return False, f"the {self.what} has not started"
            age = self.clock() - self._turned_at
            if age > self.stall_seconds:
                on = f" on {self._working_on}" if self._working_on else ""
                return (
                    False,
                    f"the {self.what} is stuck{on}: no progress for {age:.0f}s (limit {self.stall_seconds:.0f}s)",
                )
            return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Live, and not failing every pass for longer than the failing limit."""
        alive, why = self.live()
        if not alive:
            return alive, why
        with self._lock:
            if self._failing_since is not None:
                failing = self.clock() - self._failing_since
                if failing > self.failing_seconds:
                    return False, f"every {self.what} pass has failed for {failing:.0f}s: {self._last_error}"
            return True, "ok"
