"""Helpers of the node tests (importable as `tests.node.support`; conftest cannot be imported
under --import-mode=importlib)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from lahar.agent.cgroups.layout import v1_write_problem
from lahar.node.cgroups import CGROUP_ROOT, CgroupTree
from lahar.node.runtime import LocalNode

MARK_ENV = "LAHAR_NODE_TEST_MARK"
# Runtime threads by name: the loop, the API writer, the pod informer.
RUNTIME_THREADS = ("lahar-node-", "node-local-", "informer-pods", "lahar-sim", "sim-writer", "sim-register")


def cgroups_skip_reason() -> str | None:
    return v1_write_problem(CGROUP_ROOT, ("cpu", "cpuacct", "memory"))


def processes_marked(mark: str) -> list[int]:
    """Live (not zombie) processes whose environment holds the mark."""
    found = []
    needle = f"{MARK_ENV}={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0") and alive(int(entry)):
                found.append(int(entry))
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (orphans may wait for a reaper here)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def runtime_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(RUNTIME_THREADS)]


def force_remove(parent: str) -> list[str]:
    """Remove a cgroup parent in every hierarchy (killing its tasks); what had to be removed."""
    tree = CgroupTree(CGROUP_ROOT, parent)
    left = [str(h / parent) for h in tree.hierarchies if (h / parent).exists()]
    if left:
        tree.teardown()
    return left


NodeFactory = Callable[..., LocalNode]


class Startable(Protocol):
    def start(self) -> None: ...

    def wait_for_sync(self, timeout: float | None = None) -> bool: ...


S = TypeVar("S", bound=Startable)


def start_synced(component: S, started: list[S]) -> S:
    """Start a LocalNode or SimulatedNodes, keep it for the teardown, wait for its pod cache."""
    component.start()
    started.append(component)
    assert component.wait_for_sync(10), f"{component} never listed its pods"
    return component
