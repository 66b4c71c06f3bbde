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


def test_a_busy_child_shows_as_about_one_core() -> None:
    collector = CpuCollector(HOST)
    spinner = [sys.executable, "-c", BUSY_LOOP, "1.5"]
    with subprocess.Popen(spinner, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdout.readline() == "busy\n"
        collector.collect()  # the window starts once the child spins
        time.sleep(0.5)
        busy = collector.collect()
        child.kill()
    # An absolute bound rather than "baseline + 1": other tests may load this 2-CPU machine and
    # stop mid-window, while the spinning child alone guarantees about one busy core.
    assert busy.usage_cores >= 0.6, busy
    assert busy.usage_cores <= busy.cores + 1e-9


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
