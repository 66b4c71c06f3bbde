"""The interference loop: every `interval_seconds` (50 ms) read online pods' CPU wait and CPU time
(collectors/cpu_wait.py) and the BE groups' CPU time, turn the last `window_seconds` (1 s) and
`fast_window_seconds` (200 ms) into a Signal (online wait shares, BE cores) and hand it to the
engine, whose CPU suppress controller decides (strategies/cpu_suppress.control). A sample is a
few `pread`s per online pod on files kept open, so twenty a second cost little."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol

from lahar.agent.collectors.cpu_wait import CpuWait, CpuWaitReader
from lahar.agent.collectors.host import Host
from lahar.agent.qos import own_threads
from lahar.agent.qos.strategies.cpu_suppress import Signal

log = logging.getLogger("lahar.agent.qos")


class LoopTargets(NamedTuple):
    """What to watch, from the engine's last tick."""

    online: tuple[str, ...]  # online (LC, LS) pod cgroups
    best_effort: tuple[str, ...]  # BE groups
    interval: float
    window: float
    min_online_runnable_seconds: float
    fast_window: float = 0.2
    cpu_policy: str = own_threads.DEFAULT_POLICY  # the loop thread's own scheduling policy (own_threads.py)


class Sample(NamedTuple):
    at: float
    online: Mapping[str, CpuWait]  # by pod cgroup
    be_seconds: float  # cumulative CPU time of the BE groups
    best_effort: tuple[str, ...]  # samples over other BE groups do not compare


class InterferenceEngine(Protocol):
    def interference_targets(self) -> LoopTargets | None: ...
    def interference_step(self, signal: Signal) -> str: ...


def signal_between(old: Sample, new: Sample, min_online_runnable_seconds: float) -> Signal:
    """The Signal of a window: online pods present at both ends count (one that started or ended
    within it has no rate), a negative wait step (a thread exited with its delay) counts as 0."""
    return Signal(new.at, *window_figures(old, new, min_online_runnable_seconds))


def window_figures(old: Sample, new: Sample, min_online_runnable_seconds: float) -> tuple[float | None, float]:
    """(online wait share, BE cores) of the window from `old` to `new` (signal_between's figures)."""
    elapsed = new.at - old.at
    be_cores = max(new.be_seconds - old.be_seconds, 0.0) / elapsed if elapsed > 0 else 0.0
    waited = ran = 0.0
    for cgroup, after in new.online.items():
        before = old.online.get(cgroup)
        if before is None:
            continue
        waited += max(after.wait_seconds - before.wait_seconds, 0.0)
        ran += max(after.cpu_seconds - before.cpu_seconds, 0.0)
    runnable = waited + ran
    share = waited / runnable if runnable >= min_online_runnable_seconds and runnable > 0 else None
    return share, be_cores


class InterferenceLoop:
    def __init__(self, engine: InterferenceEngine, host: Host, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.clock = clock
        self.reader = CpuWaitReader(host, clock)
        self.samples: deque[Sample] = deque()
        self.last_signal: Signal | None = None
        self.latest: Sample | None = None  # the last reading, for /metrics (online pods' CPU wait)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self.run, name="qos-interference", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        self.reader.close()

    def sample(self, targets: LoopTargets) -> Sample:
        """One reading. A BE group that is not there (kubelet makes the BestEffort directory with
        its first BestEffort pod) adds nothing; the groups read are part of the sample, so no BE
        rate is taken across one appearing or going."""
        online = {}
        for cgroup in targets.online:
            wait = self.reader.read(cgroup)
            if wait is not None:
                online[cgroup] = wait
        be_seconds, present = 0.0, []
        for cgroup in targets.best_effort:
            be = self.reader.read_cpu(cgroup)
            if be is not None:
                be_seconds += be
                present.append(cgroup)
        self.reader.end_cycle()
        return Sample(self.clock(), online, be_seconds, tuple(present))

    def step(self) -> float:
        """Take a sample, hand the window's signal to the engine; the seconds until the next one."""
        targets = self.engine.interference_targets()
        if targets is None:
            self.samples.clear()
            return 0.5
        own_threads.hold(targets.cpu_policy)
        sample = self.latest = self.sample(targets)
        if self.samples and self.samples[-1].best_effort != sample.best_effort:
            self.samples.clear()
        self.samples.append(sample)
        while len(self.samples) > 2 and sample.at - self.samples[1].at >= targets.window:
            self.samples.popleft()
        fast_start = next((s for s in reversed(self.samples) if sample.at - s.at >= targets.fast_window * 0.75), None)
        if fast_start is not None:
            share, be_cores = window_figures(self.samples[0], sample, targets.min_online_runnable_seconds)
            fast_share = window_figures(fast_start, sample, targets.min_online_runnable_seconds)[0]
            # Until the long window has filled, the fast one stands in for it. One Signal a step,
            # made directly (twenty times a second: no intermediate ones, no dataclasses.replace).
            self.last_signal = Signal(sample.at, share, be_cores, fast_wait_share=fast_share)
            self.engine.interference_step(self.last_signal)
        return targets.interval

    def run(self) -> None:
        next_at = self.clock()
        while not self._stop.is_set():
            try:
                interval = self.step()
            except Exception:  # the tick still runs; the loop tries again
                log.exception("QoS interference loop failed")
                interval = 1.0
            next_at += interval
            delay = next_at - self.clock()
            if delay < 0:  # late (a busy machine): the next sample now, not a burst to catch up
                next_at, delay = self.clock(), 0.0
            time.sleep(delay)  # cheaper than Event.wait at 20 Hz; stop() waits out one interval
