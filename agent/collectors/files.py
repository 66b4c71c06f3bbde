"""Reading kernel files and parsing the formats several collectors share."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
ABSENT_RECHECK_SECONDS = 30.0  # a driver installed later is seen within this

# Errors that mean "this kernel does not offer the file" rather than "something is wrong":
# PSI disabled at boot answers EOPNOTSUPP on some kernels, a vanished device ENODEV.
_ABSENT_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EOPNOTSUPP, errno.ENODEV})


def read_text(path: Path) -> str | None:
    """The file's whole text, or None when the kernel does not provide it. Other failures
    (permission denied, I/O errors) propagate: they are faults to report, not absent features."""
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read()
    except OSError as exc:
        if exc.errno in _ABSENT_ERRNOS:
            return None
        raise


def parse_cpulist(text: str) -> list[int]:
    """The kernel's list format (`0-3,8-11`, `5`, or empty) as sorted CPU numbers.
    Malformed or reversed items are skipped, never fatal."""
    cpus: set[int] = set()
    for item in text.strip().split(","):
        first, _, last = item.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if last else low
        except ValueError:
            continue
        if 0 <= low <= high:
            cpus.update(range(low, high + 1))
    return sorted(cpus)


class AbsentFor(Generic[T]):
    """The answer of a probe that found a source absent (no driver library, no tool on PATH),
    given again for `seconds` instead of probing every tick: each probe is a failed dlopen search
    or a PATH walk (GPU and NPU together ~0.6 ms of CPU a tick on a node without either)."""

    def __init__(self, seconds: float = ABSENT_RECHECK_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self._value: T | None = None
        self._until = 0.0

    def cached(self) -> T | None:
        """The remembered answer while it holds, else None (probe again)."""
        if self._value is not None and self.clock() < self._until:
            return self._value
        self._value = None
        return None

    def remember(self, value: T) -> T:
        self._value, self._until = value, self.clock() + self.seconds
        return value
