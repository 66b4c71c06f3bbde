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
