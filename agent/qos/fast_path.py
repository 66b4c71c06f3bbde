"""The pressure fast path: between ticks, every `fast_interval_seconds` (~100 ms), read the CPU
time of kubepods and of the BE groups (so online usage = the difference) and the node's CPU
pressure stall time (`/proc/pressure/cpu` "some" total), average them over the last
`fast_window_seconds`, and hand them to the engine, which tightens the BE cap at once when online
load stepped up or pressure passed its mark (cpu_suppress.fast_cap). Each sample is a handful of
`pread`s on files kept open, so ten a second cost little; it never loosens anything."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, Protocol

from lahar.agent.collectors.files import read_text
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.pods import cgroup_reader
from lahar.agent.collectors.pressure import parse_pressure

log = logging.getLogger("lahar.agent.qos")


class FastTargets(NamedTuple):
    """What to watch, from the engine's last tick."""

    kubepods: str  # the kubepods directory
    be_cgroups: tuple[str, ...]  # the BE groups under it
    interval: float
    window: float


class Sample(NamedTuple):
    at: float
    kubepods_seconds: float  # cumulative CPU time
    be_seconds: float
    stall_seconds: float  # cumulative PSI cpu "some" time
    be_cgroups: tuple[str, ...]  # samples over other BE groups do not compare


class FastPathEngine(Protocol):
    def fast_targets(self) -> FastTargets | None: ...
    def fast_tighten(self, online_cores: float, stall_ratio: float) -> bool: ...


def rates(old: Sample, new: Sample) -> tuple[float, float]:
    """(online cores, stall ratio) between two samples."""
    elapsed = new.at - old.at
    if elapsed <= 0:
        return 0.0, 0.0
    online = (new.kubepods_seconds - old.kubepods_seconds) - (new.be_seconds - old.be_seconds)
    return max(online, 0.0) / elapsed, max(new.stall_seconds - old.stall_seconds, 0.0) / elapsed


class PressureFastPath:
    def __init__(self, engine: FastPathEngine, host: Host, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.clock = clock
        self.pressure_file = host.proc / "pressure" / "cpu"
        self.reader = cgroup_reader(host.cgroup)
        self.samples: deque[Sample] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name="qos-fast-path", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        self.reader.files.close()

    def sample(self, targets: FastTargets) -> Sample | None:
        """One reading; None when kubepods or a BE group is not there (a BE pod that ended takes
        its time out of the BE sum but not out of kubepods': no rate across that)."""
        try:
            kubepods = self.reader.cpu(targets.kubepods).usage_seconds
            be = sum(self.reader.cpu(cgroup).usage_seconds for cgroup in targets.be_cgroups)
        except (OSError, ValueError):
            return None
        finally:
            self.reader.files.close_unread()  # an ended pod's file must not pin its cgroup
        text = read_text(self.pressure_file)
        stall = parse_pressure(text, "cpu").some_total_seconds if text else 0.0
        return Sample(self.clock(), kubepods, be, stall, targets.be_cgroups)

    def step(self) -> float:
        """Take a sample and let the engine act on the window; the seconds until the next one."""
        targets = self.engine.fast_targets()
        if targets is None:
            self.samples.clear()
            return 1.0
        sample = self.sample(targets)
        if sample is None or (self.samples and self.samples[-1].be_cgroups != sample.be_cgroups):
            self.samples.clear()
        if sample is None:
            return targets.interval
        self.samples.append(sample)
        while len(self.samples) > 2 and sample.at - self.samples[1].at >= targets.window:
            self.samples.popleft()
        if len(self.samples) >= 2 and sample.at - self.samples[0].at >= targets.window * 0.5:
            self.engine.fast_tighten(*rates(self.samples[0], sample))
        return targets.interval

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self.step()
            except Exception:  # the fast path is a bonus: the tick still enforces the cap
                log.exception("QoS fast path failed")
                delay = 1.0
            self._stop.wait(delay)
