"""Reading kernel files and parsing the formats several collectors share."""

from __future__ import annotations

import errno
from pathlib import Path

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
