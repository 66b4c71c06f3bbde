"""Node CPU usage from `/proc/stat`, per CPU and in total, over the interval between two reads.

Fields of a `cpuN` line, in jiffies: user nice system idle iowait irq softirq steal guest
guest_nice. The kernel already counts guest time inside user and guest_nice inside nice, so the
total is the sum of the first eight fields only (adding guest again would count it twice).
Busy = total - idle - iowait, as psutil and top compute it; steal stays in busy (the vCPU wanted
to run). Ratios are ticks over ticks of the same CPU, so neither USER_HZ nor the wall clock enter.

The aggregate `cpu` line is not used: it sums every *possible* CPU, including offline ones, while
the node total here is the sum of the per-CPU values, so it always equals the sum over NUMA nodes.
"""

from __future__ import annotations

from typing import NamedTuple

from lahar.agent.collectors.files import read_text
from lahar.agent.collectors.host import Host
from lahar.rpc.report import CpuUsage

_COUNTED_FIELDS = 8  # user .. steal; guest and guest_nice are already inside user and nice
_IDLE, _IOWAIT = 3, 4
_MIN_FIELDS = 4  # the oldest kernels print user nice system idle only


class CpuTicks(NamedTuple):
    busy: int
    total: int


CpuSample = dict[int, CpuTicks]  # CPU number -> cumulative ticks since boot


def parse_cpu_line(line: str) -> tuple[int, CpuTicks] | None:
    """(CPU number, ticks) of one `cpuN ...` line; None for the aggregate or a malformed line."""
    name, *fields = line.split() or [""]
    if not name.startswith("cpu") or not name[3:].isdigit() or len(fields) < _MIN_FIELDS:
        return None
    try:
        values = [int(value) for value in fields[:_COUNTED_FIELDS]]
    except ValueError:
        return None
    total = sum(values)
    idle = values[_IDLE] + (values[_IOWAIT] if len(values) > _IOWAIT else 0)
    return int(name[3:]), CpuTicks(busy=total - idle, total=total)


def parse_proc_stat(text: str) -> CpuSample:
    """Per-CPU ticks of a `/proc/stat` text; other lines (intr, ctxt, ...) are not split."""
    sample: CpuSample = {}
    for line in text.splitlines():
        if line.startswith("cpu"):
            parsed = parse_cpu_line(line)
            if parsed is not None:
                sample[parsed[0]] = parsed[1]
    return sample


def core_ratio(before: CpuTicks | None, after: CpuTicks) -> float:
    """Busy fraction of one CPU between two samples, within 0..1. A CPU new since the last
    sample, or whose counters went backwards (hot-unplugged and back), reads 0. iowait itself
    may step backwards on NOHZ kernels, hence the clamp."""
    if before is None:
        return 0.0
    busy, total = after.busy - before.busy, after.total - before.total
    if busy < 0 or total <= 0:
        return 0.0
    return min(busy / total, 1.0)


def usage_by_cpu(before: CpuSample, after: CpuSample) -> dict[int, float]:
    """CPU number -> cores used over the interval, for each CPU present in `after`."""
    return {cpu: core_ratio(before.get(cpu), ticks) for cpu, ticks in after.items()}


def cpu_usage(by_cpu: dict[int, float]) -> CpuUsage:
    """The report's view: per_core_ratio is indexed by CPU number (a CPU missing from the sample,
    e.g. offline, reads 0 there), so its length can exceed `cores` on a machine with holes."""
    cores = len(by_cpu)
    usage_cores = sum(by_cpu.values())
    per_core = [by_cpu.get(cpu, 0.0) for cpu in range(max(by_cpu) + 1)] if by_cpu else []
    return CpuUsage(
        cores=cores,
        usage_cores=usage_cores,
        usage_ratio=usage_cores / cores if cores else 0.0,
        per_core_ratio=per_core,
    )


class CpuCollector:
    """Reads `/proc/stat` once per collect() and reports usage since the previous collect()
    (the first one: since construction)."""

    name = "cpu"

    def __init__(self, host: Host) -> None:
        self._stat = host.proc / "stat"
        text = read_text(self._stat)  # unreadable now: the first collect() reports the error
        self._previous: CpuSample = parse_proc_stat(text) if text is not None else {}
        self._latest: dict[int, float] = {}

    def collect(self) -> CpuUsage:
        current = parse_proc_stat(self._stat.read_text())
        if not current:
            raise ValueError(f"no cpuN lines in {self._stat}")
        self._latest = usage_by_cpu(self._previous, current)
        self._previous = current
        return cpu_usage(self._latest)

    def usage_by_cpu(self) -> dict[int, float]:
        """CPU number -> cores used (0..1) over the last collect()'s interval, from the same
        /proc/stat read, so other collectors (NUMA, cpusets) never read it again."""
        return dict(self._latest)
