"""How the long-running commands stop: SIGINT (Ctrl-C) and SIGTERM (kubelet, `lahar up`) both
ask for a clean shutdown."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


def on_stop_signals(handler: Callable[[], None]) -> None:
    """Call `handler` on SIGINT or SIGTERM (main thread only, as Python requires)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: handler())


def stop_event() -> threading.Event:
    """An event set by SIGINT or SIGTERM, for a command's main thread to wait on."""
    stop = threading.Event()
    on_stop_signals(stop.set)
    return stop


def run_until_signalled(
    stopped: threading.Event,
    name: str,
    start: Callable[[], None],
    stop: Callable[[], None],
    *cleanups: Callable[[], None],
) -> int:
    """Start a program, wait for `stopped` (a `stop_event()` made before the program announced
    itself, so a signal right after the announcement is not lost), then stop it and run
    `cleanups` (its servers)."""
    try:
        start()
        stopped.wait()
    finally:
        stop()
        for cleanup in cleanups:
            cleanup()
        print(f"lahar {name} stopped", flush=True)
    return 0
