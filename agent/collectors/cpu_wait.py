"""CPU wait of a pod: how long its runnable tasks waited for a CPU, the signal the CPU
interference controller acts on (DESIGN.md, "CPU interference control"; docs/qos.md).

Per pod cgroup, best source first:

1. **PSI**: the cgroup's own `cpu.pressure` "some" total (time in which at least one of its tasks
   waited). On v2 that is the pod's cgroup; on a v1 node with the cgroup2 hierarchy mounted at
   `<root>/unified` (systemd's hybrid mode, Lahar's local runtime and its bench) it is the pod's
   mirror there, at the same relative path, used only while that mirror holds the pod's tasks
   (`cgroup.events` says populated). One read per pod.
2. **schedstat**: the run delay of every task in the pod's cgroup tree, summed from
   `/proc/<tid>/schedstat`. One read per task. A task that exits takes its delay with it, so a
   window in which the sum went down reads as no wait rather than a negative one.

CPU time, for the share of runnable time spent waiting, comes from the cgroup's own accounting
(cpuacct.usage / cpu.stat usage_usec). Everything is cumulative; the controller takes rates."""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from lahar.agent.cgroups.layout import CgroupVersion, detect_version, pod_hierarchy
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.pods import MICROSECONDS, NANOSECONDS, OpenFiles, cgroup_reader

UNIFIED = "unified"  # where a v1 host mounts the cgroup2 hierarchy beside its controllers
SOURCE_RECHECK_SECONDS = 10.0  # a mirror that was empty may be joined later, and the other way round


class WaitSource(enum.StrEnum):
    PSI = "psi"
    SCHEDSTAT = "schedstat"


class CpuWait(NamedTuple):  # made 20 times a second per online pod: a tuple is the cheapest record
    wait_seconds: float  # cumulative time runnable tasks waited for a CPU
    cpu_seconds: float  # cumulative CPU time
    source: WaitSource


def parse_some_total(text: bytes) -> float:
    """Seconds of the "some" line's total in a pressure file; ValueError when there is none."""
    if text.startswith(b"some "):  # where the kernel puts it: the first line, read without splitting
        newline = text.find(b"\n")
        line = text if newline < 0 else text[:newline]
        start = line.find(b" total=")
        if start >= 0:
            digits = line[start + 7 :].partition(b" ")[0]
            if digits.isdigit():
                return int(digits) / MICROSECONDS
    for line in text.splitlines():
        if line.startswith(b"some "):
            for pair in line.split()[1:]:
                if pair.startswith(b"total="):
                    return int(pair[6:]) / MICROSECONDS
    raise ValueError("no 'some ... total=' line in the pressure file")


def parse_schedstat(text: bytes) -> tuple[int, int]:
    """(CPU time, run delay) in nanoseconds from `/proc/<tid>/schedstat`."""
    fields = text.split()
    if len(fields) < 2:
        raise ValueError(f"malformed schedstat {text!r}")
    return int(fields[0]), int(fields[1])


class CpuWaitReader:
    """Reads the cumulative CPU wait of pod cgroups (paths relative to the hierarchy, as in
    NodeState and the reports); files are kept open between reads like the pod collector's."""

    def __init__(self, host: Host, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.version = detect_version(host.cgroup)
        self.hierarchy = pod_hierarchy(host.cgroup, self.version)
        self.files = OpenFiles()
        self.cpu = cgroup_reader(host.cgroup, self.files)
        self.clock = clock
        self._sources: dict[str, tuple[WaitSource, float]] = {}  # cgroup -> (source, when decided)
        self._pressure_files: dict[str, str] = {}  # cgroup -> its cpu.pressure path (pathlib is slow)

    def psi_dir(self, cgroup: str) -> Path:
        base = self.host.cgroup if self.version is CgroupVersion.V2 else self.host.cgroup / UNIFIED
        return base / cgroup

    def source(self, cgroup: str) -> WaitSource:
        now = self.clock()
        known = self._sources.get(cgroup)
        if known is None or now - known[1] >= SOURCE_RECHECK_SECONDS:
            known = (self._probe(cgroup), now)
            self._sources[cgroup] = known
        return known[0]

    def _probe(self, cgroup: str) -> WaitSource:
        directory = self.psi_dir(cgroup)
        try:
            events = (directory / "cgroup.events").read_bytes()
            (directory / "cpu.pressure").read_bytes()
        except OSError:
            return WaitSource.SCHEDSTAT
        # On v2 the pod's own cgroup always counts; a v1 mirror only while the pod's tasks are in it.
        if self.version is CgroupVersion.V2 or b"populated 1" in events:
            return WaitSource.PSI
        return WaitSource.SCHEDSTAT

    def read(self, cgroup: str) -> CpuWait | None:
        """The pod's cumulative wait and CPU time; None when its cgroup is gone."""
        try:
            cpu_seconds = self.cpu.usage_seconds(cgroup)
            source = self.source(cgroup)
            if source is WaitSource.PSI:
                path = self._pressure_files.get(cgroup)
                if path is None:
                    path = self._pressure_files[cgroup] = str(self.psi_dir(cgroup) / "cpu.pressure")
                wait = parse_some_total(self.files.read(path))
            else:
                wait = self._run_delay_seconds(cgroup)
        except (OSError, ValueError):
            self._sources.pop(cgroup, None)
            self._pressure_files.pop(cgroup, None)
            return None
        return CpuWait(wait, cpu_seconds, source)

    def read_cpu(self, cgroup: str) -> float | None:
        """Cumulative CPU seconds of a cgroup; None when it is gone."""
        try:
            return self.cpu.usage_seconds(cgroup)
        except (OSError, ValueError):
            return None

    def _run_delay_seconds(self, cgroup: str) -> float:
        delay = 0
        for tid in self._tasks(cgroup):
            try:
                with open(f"{self.host.proc}/{tid}/schedstat", "rb") as file:
                    delay += parse_schedstat(file.read())[1]
            except (OSError, ValueError):  # the task exited between the listing and the read
                continue
        return delay / NANOSECONDS

    def _tasks(self, cgroup: str) -> list[str]:
        """Every thread in the cgroup's tree (v1 `tasks`, v2 `cgroup.threads`)."""
        name = "tasks" if self.version is CgroupVersion.V1 else "cgroup.threads"
        tids: list[str] = []
        for directory, _, _ in os.walk(self.hierarchy / cgroup):
            try:
                with open(os.path.join(directory, name), "rb") as file:
                    tids += file.read().decode().split()
            except OSError:
                continue
        return tids

    def end_cycle(self) -> None:
        """Close the files of pods not read since the last call (ended pods must not stay pinned)."""
        self.files.close_unread()

    def close(self) -> None:
        self.files.close()
