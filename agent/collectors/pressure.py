"""Pressure stall information: `/proc/pressure/{cpu,memory,io}` for the node; `parse_pressure`
also reads a cgroup v2 `<resource>.pressure` file, which has the same format:

    some avg10=1.54 avg60=0.57 avg300=1.10 total=76687798
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

avgN are percentages of wall time; total is cumulative microseconds, reported in seconds.
A kernel without PSI (or booted with it disabled) has no such files: that is an empty list.
"""

from __future__ import annotations

from typing import NamedTuple

from lahar.agent.collectors.files import read_text
from lahar.agent.collectors.host import Host
from lahar.rpc.report import Pressure

RESOURCES = ("cpu", "memory", "io")
_MICROSECONDS = 1_000_000


class PressureLine(NamedTuple):
    avg10: float
    avg60: float
    avg300: float
    total_seconds: float


_NO_STALL = PressureLine(0.0, 0.0, 0.0, 0.0)


def parse_pressure_line(line: str) -> tuple[str, PressureLine] | None:
    """("some" | "full", values) of one line; None if malformed."""
    kind, *pairs = line.split() or [""]
    if kind not in ("some", "full"):
        return None
    values: dict[str, float] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            values[key] = float(value)
        except ValueError:
            return None
    try:
        return kind, PressureLine(values["avg10"], values["avg60"], values["avg300"], values["total"] / _MICROSECONDS)
    except KeyError:
        return None


def parse_pressure(text: str, resource: str) -> Pressure:
    """One pressure file. Malformed lines are skipped; a missing "full" line (cpu before 5.13)
    reads as zeros; a file without a valid "some" line is an error, not a silent zero."""
    lines: dict[str, PressureLine] = {}
    for line in text.splitlines():
        parsed = parse_pressure_line(line)
        if parsed is not None:
            lines[parsed[0]] = parsed[1]
    if "some" not in lines:
        raise ValueError(f"{resource} pressure has no valid 'some' line")
    some, full = lines["some"], lines.get("full", _NO_STALL)
    return Pressure(
        resource=resource,
        some_avg10=some.avg10,
        some_avg60=some.avg60,
        some_avg300=some.avg300,
        some_total_seconds=some.total_seconds,
        full_avg10=full.avg10,
        full_avg60=full.avg60,
        full_avg300=full.avg300,
        full_total_seconds=full.total_seconds,
    )


class PressureCollector:
    name = "pressure"

    def __init__(self, host: Host) -> None:
        self._files = [(resource, host.proc / "pressure" / resource) for resource in RESOURCES]

    def collect(self) -> list[Pressure]:
        readings = []
        for resource, path in self._files:
            text = read_text(path)
            if text is not None:
                readings.append(parse_pressure(text, resource))
        return readings
