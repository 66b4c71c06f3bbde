"""NUMA nodes from `/sys/devices/system/node/node<N>/{cpulist,meminfo}`, with each node's CPU
usage summed from the CPU collector's per-core ratios (no second `/proc/stat` read).

A node's used memory mirrors the node-level "total - available": available is
MemFree + Active(file) + Inactive(file) + SReclaimable, the per-node terms of the kernel's
MemAvailable (without its watermark reserve) and what koordlet uses. Shared memory (tmpfs) counts
as used, as it does in MemAvailable, which is why FilePages (shmem included) is not subtracted.

A kernel without NUMA support has no `/sys/devices/system/node`: the whole machine is then one
node 0, with the online CPUs (`/sys/devices/system/cpu/online`, else every CPU of the per-core
list) and the memory of `/proc/meminfo` (read a second time per cycle, only on such machines).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from lahar.agent.collectors.files import parse_cpulist, read_text
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.memory import USED_FIELDS, memory_usage, parse_meminfo
from lahar.rpc.report import NumaNode

_NODE_AVAILABLE_FIELDS = ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable")
_NODE_FIELDS = ("MemTotal", *_NODE_AVAILABLE_FIELDS)


def node_ids(node_root: Path) -> list[int]:
    """Numbers of the `node<N>` directories, sorted; empty when the directory is absent."""
    try:
        entries = os.scandir(node_root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    with entries:
        names = [entry.name for entry in entries]
    return sorted(int(name[4:]) for name in names if name.startswith("node") and name[4:].isdigit())


def node_memory(fields: dict[str, int]) -> tuple[int, int]:
    """(total, used) bytes of one node's meminfo fields; used stays within 0..total."""
    total = fields.get("MemTotal", 0)
    available = sum(fields.get(name, 0) for name in _NODE_AVAILABLE_FIELDS)
    return total, min(max(total - available, 0), total)


def cpu_usage_of(cpus: Sequence[int], per_core_ratio: Sequence[float]) -> float:
    """Cores used by the given CPUs; a CPU beyond the per-core list (just onlined) counts 0."""
    return sum(per_core_ratio[cpu] for cpu in cpus if cpu < len(per_core_ratio))


class NumaCollector:
    name = "numa"

    def __init__(self, host: Host) -> None:
        self._node_root = host.sys / "devices" / "system" / "node"
        self._cpu_online = host.sys / "devices" / "system" / "cpu" / "online"
        self._proc_meminfo = host.proc / "meminfo"

    def collect(self, per_core_ratio: Sequence[float]) -> list[NumaNode]:
        """Nodes by id; `per_core_ratio` is CpuUsage.per_core_ratio (index = CPU number)."""
        ids = node_ids(self._node_root)
        if not ids:
            return [self._whole_machine(per_core_ratio)]
        return [self._node(node_id, per_core_ratio) for node_id in ids]

    def _node(self, node_id: int, per_core_ratio: Sequence[float]) -> NumaNode:
        directory = self._node_root / f"node{node_id}"
        cpus = parse_cpulist(read_text(directory / "cpulist") or "")
        total, used = node_memory(parse_meminfo(read_text(directory / "meminfo") or "", _NODE_FIELDS))
        return NumaNode(node_id, cpus, total, used, cpu_usage_of(cpus, per_core_ratio))

    def _whole_machine(self, per_core_ratio: Sequence[float]) -> NumaNode:
        online = read_text(self._cpu_online)
        cpus = parse_cpulist(online) if online is not None else list(range(len(per_core_ratio)))
        memory = memory_usage(parse_meminfo(self._proc_meminfo.read_text(), USED_FIELDS))
        return NumaNode(0, cpus, memory.total_bytes, memory.used_bytes, cpu_usage_of(cpus, per_core_ratio))
