"""Python's cyclic garbage collector set for Lahar's long-running programs (the API server, the
scheduler, the controller, the simulated nodes), and for the benchmarks that stand in for them
(`lahar bench ingest`'s report server process, which measures what the scheduler's runs).

Each of them keeps a cache of a few dozen objects per pod (informers, the API server's store) and
replaces objects in it on every event. With the default thresholds (700, 10, 10) the collector
ran every 700 net allocations and went over the whole heap, that cache included, every time a
quarter of it was new: with 1,000 Jobs of 10 pods (`lahar bench controller`) it took about a
fifth of the controller's and the simulated nodes' CPU and a tenth of the API server's. Almost
everything these programs allocate is freed by reference counting anyway; the collector only
has cycles left to find, and finds them all the same, less often.
"""

from __future__ import annotations

import gc

# Young objects collected every 100,000 net allocations, older generations 50 and 100 times
# less often.
THRESHOLDS = (100_000, 50, 100)


def collect_rarely() -> None:
    """Set the collector's thresholds for a program that keeps large caches (call at start)."""
    gc.set_threshold(*THRESHOLDS)


# Whether the `lahar` entry point turned the collector off for the program's start (hold()).
_held = False


def hold() -> None:
    """Called by the `lahar` entry point before it imports the command line: no collections while
    the program starts. Its imports and set-up allocate a few hundred thousand objects that live
    as long as the program (modules, classes, functions), and the collector went over them some
    150 times meanwhile: about 0.05 CPU-s of `lahar scheduler`'s start, a tenth of it."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release(freeze: bool = False) -> None:
    """End what hold() started (nothing if it did not: a test or a program that embeds Lahar
    keeps its own settings). With `freeze`, what the program holds by then moves to the
    collector's permanent generation, which no collection goes over again: for a long-running
    program, once its modules are imported and its set-up is done."""
    global _held
    if not _held:
        return
    _held = False
    if freeze:
        gc.freeze()
    gc.enable()
