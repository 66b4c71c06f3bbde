"""kubelet's CPU manager checkpoint (`/var/lib/kubelet/cpu_manager_state`):

    {"policyName": "static", "defaultCpuSet": "0,3-7",
     "entries": {"<pod uid>": {"<container name>": "1-2"}}, "checksum": 1234}

Under the `static` policy kubelet pins Guaranteed containers with whole CPUs to the cores in
`entries` and every other container to `defaultCpuSet`, rewriting container cpusets itself."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lahar.agent.collectors.files import parse_cpulist, read_text

STATIC = "static"
log = logging.getLogger("lahar.agent.qos")


@dataclass(frozen=True)
class CpuManagerState:
    policy: str
    default_cpus: frozenset[int] = frozenset()
    # pod uid -> container name -> the CPUs kubelet gave it alone
    assignments: Mapping[str, Mapping[str, frozenset[int]]] = field(default_factory=dict)

    @property
    def static(self) -> bool:
        return self.policy == STATIC

    def exclusive_cpus(self, uid: str, container: str) -> frozenset[int]:
        return self.assignments.get(uid, {}).get(container, frozenset())


def parse_cpu_manager_state(text: str) -> CpuManagerState:
    """The checkpoint's JSON; ValueError when it is not one."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("policyName"), str):
        raise ValueError("not a CPU manager checkpoint: no policyName")
    entries = data.get("entries") or {}
    if not isinstance(entries, dict):
        raise ValueError("CPU manager checkpoint: entries is not an object")
    assignments = {
        uid: {name: frozenset(parse_cpulist(str(cpus))) for name, cpus in containers.items()}
        for uid, containers in entries.items()
        if isinstance(containers, dict)
    }
    return CpuManagerState(
        data["policyName"], frozenset(parse_cpulist(str(data.get("defaultCpuSet") or ""))), assignments
    )


class CpuManagerFile:
    """The checkpoint, re-parsed only when it changes; None when kubelet keeps none."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature: tuple[int, int] | None = None
        self._state: CpuManagerState | None = None

    def read(self) -> CpuManagerState | None:
        try:
            stat = self.path.stat()
        except OSError:
            self._signature, self._state = None, None
            return None
        signature = (stat.st_mtime_ns, stat.st_size)
        if signature != self._signature:
            self._signature = signature
            try:
                text = read_text(self.path)
                self._state = parse_cpu_manager_state(text) if text else None
            except (OSError, ValueError) as exc:  # half-written or foreign: no pinning known
                log.warning("ignoring the CPU manager checkpoint %s: %s", self.path, exc)
                self._state = None
        return self._state
