"""Node collectors against the real kernel of the machine running the tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lahar.agent.collectors.cpu import CpuCollector
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.memory import MemoryCollector, parse_meminfo
from lahar.agent.collectors.numa import NumaCollector
from lahar.agent.collectors.pressure import RESOURCES, PressureCollector
from tests.support import agrees_within, process_cpu_seconds

HOST = Host()
BUSY_LOOP = """
import sys, time
print("busy", flush=True)
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    pass
"""


def test_cpu_count_matches_the_os() -> None:
    collector = CpuCollector(HOST)
    time.sleep(0.05)
    usage = collector.collect()
    assert usage.cores == os.cpu_count()
    assert len(usage.per_core_ratio) == os.cpu_count()
    assert all(0.0 <= ratio <= 1.0 for ratio in usage.per_core_ratio)
    assert 0.0 <= usage.usage_cores <= usage.cores


def test_a_busy_child_shows_in_the_node_usage() -> None:
    collector = CpuCollector(HOST)
    spinner = [sys.executable, "-c", BUSY_LOOP, "30"]
    with subprocess.Popen(spinner, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdout.readline() == "busy\n"

        def measure(window: float) -> tuple[float, float]:
            # The node's usage covers the child's: compared with what the child itself got in the
            # same window, not with a fixed core count a loaded machine may not give it.
            collector.collect()
            before, started = process_cpu_seconds(child.pid), time.monotonic()
            time.sleep(window)
            busy = collector.collect()
            child_cores = (process_cpu_seconds(child.pid) - before) / (time.monotonic() - started)
            assert busy.usage_cores <= busy.cores + 1e-9
            return min(busy.usage_cores, child_cores), child_cores

        try:
            agrees_within(measure, rel=0.15)
        finally:
            child.kill()


def test_memory_total_matches_meminfo() -> None:
    memory = MemoryCollector(HOST).collect()
    assert memory.total_bytes == parse_meminfo(Path("/proc/meminfo").read_text())["MemTotal"]
    assert memory.used_bytes + memory.available_bytes == memory.total_bytes
    assert 0 < memory.available_bytes <= memory.total_bytes
    assert 0 <= memory.page_cache_bytes < memory.total_bytes


def test_numa_nodes_match_sysfs_and_cover_every_cpu() -> None:
    node_dirs = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    cpu = CpuCollector(HOST)
    time.sleep(0.05)
    usage = cpu.collect()
    nodes = NumaCollector(HOST).collect(usage.per_core_ratio)
    assert len(nodes) == max(len(node_dirs), 1)
    assert sorted(c for node in nodes for c in node.cpus) == sorted(cpu.usage_by_cpu())
    assert sum(node.cpu_usage_cores for node in nodes) == pytest.approx(usage.usage_cores)
    for node in nodes:
        assert 0 <= node.memory_used_bytes <= node.memory_total_bytes
        assert node.memory_total_bytes > 0


def test_pressure_matches_the_kernel() -> None:
    readings = PressureCollector(HOST).collect()
    present = [resource for resource in RESOURCES if Path("/proc/pressure", resource).exists()]
    assert [reading.resource for reading in readings] == present
    later = PressureCollector(HOST).collect()
    for before, after in zip(readings, later, strict=True):
        assert after.some_total_seconds >= before.some_total_seconds  # cumulative counters
        assert 0.0 <= before.some_avg10 <= 100.0
