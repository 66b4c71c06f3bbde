"""Node memory from `/proc/meminfo`.

- used = MemTotal - MemAvailable: what the kernel itself estimates cannot be freed without
  swapping, the same figure koordlet and the kubelet's eviction signal use.
- page_cache = Cached: file pages in the page cache (tmpfs/shmem included, SwapCached excluded).
  Buffers (block-device metadata) and SReclaimable (slab) are left out, so this is smaller than
  free(1)'s "buff/cache", which adds both.
- Kernels before 3.14 have no MemAvailable: it is estimated as MemFree + Cached + Buffers (the
  classic "free + reclaimable cache" figure; it overstates a little since not all cache is
  reclaimable), capped at MemTotal.
"""

from __future__ import annotations

import functools
import re

from lahar.agent.collectors.host import Host
from lahar.rpc.report import MemoryUsage

_UNIT_BYTES = {"kB": 1024}  # every sized field says kB; counts (HugePages_Total) have no unit
USED_FIELDS = ("MemTotal", "MemAvailable", "MemFree", "Cached", "Buffers")  # what memory_usage reads


@functools.cache
def _fields_pattern(names: tuple[str, ...] | None) -> re.Pattern[str]:
    key = r"[^\s:]+" if names is None else "|".join(re.escape(name) for name in names)
    return re.compile(rf"^(?:Node \d+ )?({key}):[ \t]*(\d+)(?:[ \t]+(\S+))?[ \t]*$", re.MULTILINE)


def parse_meminfo(text: str, names: tuple[str, ...] | None = None) -> dict[str, int]:
    """Field -> bytes (counts stay counts) of `/proc/meminfo`, or of a NUMA node's `meminfo`
    whose lines carry a `Node N ` prefix; only `names` (those present) when given, which the
    collectors' every-tick reads use. Malformed lines are skipped. One regular-expression scan."""
    return {key: int(value) * _UNIT_BYTES.get(unit, 1) for key, value, unit in _fields_pattern(names).findall(text)}


def available_bytes(fields: dict[str, int]) -> int:
    """MemAvailable, or the pre-3.14 estimate MemFree + Cached + Buffers capped at MemTotal."""
    if "MemAvailable" in fields:
        return fields["MemAvailable"]
    estimate = fields.get("MemFree", 0) + fields.get("Cached", 0) + fields.get("Buffers", 0)
    return min(estimate, fields["MemTotal"])


def memory_usage(fields: dict[str, int]) -> MemoryUsage:
    if "MemTotal" not in fields:
        raise ValueError("meminfo has no MemTotal")
    total = fields["MemTotal"]
    available = available_bytes(fields)
    return MemoryUsage(
        total_bytes=total,
        used_bytes=max(total - available, 0),
        available_bytes=available,
        page_cache_bytes=fields.get("Cached", 0),
    )


class MemoryCollector:
    name = "memory"

    def __init__(self, host: Host) -> None:
        self._meminfo = host.proc / "meminfo"

    def collect(self) -> MemoryUsage:
        return memory_usage(parse_meminfo(self._meminfo.read_text(), USED_FIELDS))
