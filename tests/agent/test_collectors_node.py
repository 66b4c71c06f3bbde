"""Node collectors (cpu, memory, numa, pressure) against fake roots in the real file formats.

The fixture texts are copied from the development machine (Linux 6.18, 2 CPUs, one NUMA node);
the 8-CPU, 2-node tree is built in the same formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from lahar.agent.collectors.cpu import CpuCollector, CpuTicks, parse_cpu_line, parse_proc_stat
from lahar.agent.collectors.files import parse_cpulist, read_text
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.memory import MemoryCollector, parse_meminfo
from lahar.agent.collectors.numa import NumaCollector, node_ids
from lahar.agent.collectors.pressure import PressureCollector, parse_pressure

KIB = 1024

REAL_PROC_STAT = """\
cpu  145633 0 22521 523411 589 0 1045 25 0 0
cpu0 67046 0 11067 267812 110 0 602 9 0 0
cpu1 78586 0 11454 255599 478 0 443 15 0 0
intr 2161861 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 13 0 0 0 0 695 1306 0 69 1 97684
ctxt 2240316
btime 1795253082
processes 27363
procs_running 4
procs_blocked 0
softirq 1413447 0 193401 3 455108 97683 0 3 287012 35 380202
"""

REAL_MEMINFO = """\
MemTotal:       24684084 kB
MemFree:        24410964 kB
MemAvailable:   24381408 kB
Buffers:            2240 kB
Cached:           126972 kB
SwapCached:            0 kB
Active:            74032 kB
Inactive:          52816 kB
Active(file):      72496 kB
Inactive(file):    47860 kB
SReclaimable:      64544 kB
HugePages_Total:       0
HugePages_Free:        0
Hugepagesize:       2048 kB
"""

REAL_NODE0_MEMINFO = """\
Node 0 MemTotal:        4548812 kB
Node 0 MemFree:         4275240 kB
Node 0 MemUsed:          273572 kB
Node 0 Active(file):      72496 kB
Node 0 Inactive(file):    47860 kB
Node 0 FilePages:        129212 kB
Node 0 Shmem:              8872 kB
Node 0 SReclaimable:      64544 kB
Node 0 HugePages_Total:     0
"""

REAL_PSI_CPU = """\
some avg10=1.54 avg60=0.57 avg300=1.10 total=76687798
full avg10=0.00 avg60=0.00 avg300=0.00 total=0
"""
REAL_PSI_IO = """\
some avg10=0.00 avg60=0.01 avg300=0.04 total=4841972
full avg10=0.00 avg60=0.00 avg300=0.02 total=4198310
"""
REAL_PSI_MEMORY = """\
some avg10=0.00 avg60=0.00 avg300=0.00 total=0
full avg10=0.00 avg60=0.00 avg300=0.00 total=0
"""


# --- fake tree builders ---------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def stat_line(cpu: int, user: int, system: int, idle: int, iowait: int = 0, guest: int = 0) -> str:
    # user nice system idle iowait irq softirq steal guest guest_nice
    return f"cpu{cpu} {user} 0 {system} {idle} {iowait} 0 0 0 {guest} 0"


def write_stat(root: Path, lines: list[str]) -> None:
    aggregate = "cpu  1 1 1 1 1 1 1 1 0 0"  # ignored by design; deliberately inconsistent
    write(root / "proc" / "stat", "\n".join([aggregate, *lines, "intr 1 0 0", "ctxt 5", ""]))


def node_meminfo(
    node: int, total_kib: int, free_kib: int, active_file_kib: int, inactive_file_kib: int, slab_kib: int
) -> str:
    return (
        f"Node {node} MemTotal:       {total_kib} kB\n"
        f"Node {node} MemFree:        {free_kib} kB\n"
        f"Node {node} MemUsed:        {total_kib - free_kib} kB\n"
        f"Node {node} Active(file):   {active_file_kib} kB\n"
        f"Node {node} Inactive(file): {inactive_file_kib} kB\n"
        f"Node {node} FilePages:      {active_file_kib + inactive_file_kib + 100} kB\n"
        f"Node {node} SReclaimable:   {slab_kib} kB\n"
    )


@pytest.fixture
def two_node_root(tmp_path: Path) -> Path:
    """8 CPUs, node0 = 0-3 (16 GiB), node1 = 4-7 (8 GiB), with the sysfs noise files."""
    nodes = tmp_path / "sys" / "devices" / "system" / "node"
    write(nodes / "node0" / "cpulist", "0-3\n")
    write(nodes / "node0" / "meminfo", node_meminfo(0, 16 * 1024 * 1024, 8 * 1024 * 1024, 1024, 2048, 512))
    write(nodes / "node1" / "cpulist", "4-7\n")
    write(nodes / "node1" / "meminfo", node_meminfo(1, 8 * 1024 * 1024, 1024 * 1024, 0, 0, 0))
    for name in ("online", "possible", "has_cpu", "has_memory"):
        write(nodes / name, "0-1\n")
    write(tmp_path / "sys" / "devices" / "system" / "cpu" / "online", "0-7\n")
    write(tmp_path / "proc" / "meminfo", REAL_MEMINFO)
    return tmp_path


# --- shared helpers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8-11", [0, 1, 2, 3, 8, 9, 10, 11]),
        ("0-3,8-11\n", [0, 1, 2, 3, 8, 9, 10, 11]),
        ("5", [5]),
        ("", []),
        ("\n", []),
        ("0,2-3,1", [0, 1, 2, 3]),
        ("0-1,x,7,5-3,-2,", [0, 1, 7]),  # malformed and reversed items skipped
    ],
)
def test_parse_cpulist(text: str, cpus: list[int]) -> None:
    assert parse_cpulist(text) == cpus


def test_read_text_is_none_for_absent_files(tmp_path: Path) -> None:
    write(tmp_path / "file", "x")
    assert read_text(tmp_path / "missing") is None
    assert read_text(tmp_path / "file" / "under-a-file") is None
    assert read_text(tmp_path / "file") == "x"


# --- cpu ------------------------------------------------------------------------------------


def test_parse_real_proc_stat() -> None:
    sample = parse_proc_stat(REAL_PROC_STAT)
    assert sorted(sample) == [0, 1]  # aggregate "cpu" line and intr/ctxt/... are not CPUs
    total0 = 67046 + 11067 + 267812 + 110 + 602 + 9
    assert sample[0] == CpuTicks(busy=total0 - 267812 - 110, total=total0)
    total1 = 78586 + 11454 + 255599 + 478 + 443 + 15
    assert sample[1] == CpuTicks(busy=total1 - 255599 - 478, total=total1)


def test_guest_time_is_not_counted_twice() -> None:
    # the kernel already adds guest (field 9) into user and guest_nice (field 10) into nice
    ticks = parse_cpu_line("cpu0 100 20 0 100 0 0 0 0 80 20")
    assert ticks == (0, CpuTicks(busy=120, total=220))


def test_old_kernel_line_with_four_fields() -> None:
    assert parse_cpu_line("cpu3 10 0 5 85") == (3, CpuTicks(busy=15, total=100))


@pytest.mark.parametrize(
    "line",
    [
        "",
        "cpu  1 2 3 4 5 6 7 8",
        "cpuX 1 2 3 4",
        "cpu3 a b c d",
        "cpu4 1 2",
        "cpu5",
        "intr 1 2 3 4",
    ],
)
def test_malformed_cpu_lines_are_skipped(line: str) -> None:
    assert parse_cpu_line(line) is None
    assert parse_proc_stat(f"{line}\ncpu1 1 0 1 8\n") == {1: CpuTicks(busy=2, total=10)}


def test_cpu_usage_is_the_delta_between_two_samples(two_node_root: Path) -> None:
    write_stat(two_node_root, [stat_line(cpu, user=1000, system=500, idle=10_000) for cpu in range(8)])
    collector = CpuCollector(Host(root=two_node_root))
    busy_ticks = [100, 50, 0, 25, 100, 100, 0, 75]  # out of 100 ticks per CPU
    write_stat(
        two_node_root,
        [
            stat_line(cpu, user=1000 + busy - busy // 5, system=500 + busy // 5, idle=10_000 + 100 - busy)
            for cpu, busy in enumerate(busy_ticks)
        ],
    )

    usage = collector.collect()

    assert usage.cores == 8
    assert usage.per_core_ratio == [1.0, 0.5, 0.0, 0.25, 1.0, 1.0, 0.0, 0.75]
    assert usage.usage_cores == pytest.approx(4.5)
    assert usage.usage_ratio == pytest.approx(4.5 / 8)
    assert collector.usage_by_cpu() == dict(enumerate(usage.per_core_ratio))


def test_iowait_counts_as_idle(tmp_path: Path) -> None:
    write_stat(tmp_path, [stat_line(0, user=0, system=0, idle=0)])
    collector = CpuCollector(Host(root=tmp_path))
    write_stat(tmp_path, [stat_line(0, user=30, system=10, idle=40, iowait=20)])
    assert collector.collect().per_core_ratio == [0.4]


def test_each_collect_measures_since_the_previous_one(tmp_path: Path) -> None:
    write_stat(tmp_path, [stat_line(0, user=0, system=0, idle=0)])
    collector = CpuCollector(Host(root=tmp_path))
    write_stat(tmp_path, [stat_line(0, user=100, system=0, idle=0)])
    assert collector.collect().usage_cores == 1.0
    write_stat(tmp_path, [stat_line(0, user=100, system=0, idle=100)])
    assert collector.collect().usage_cores == 0.0


def test_no_ticks_elapsed_gives_zero_not_a_division_error(tmp_path: Path) -> None:
    write_stat(tmp_path, [stat_line(0, user=5, system=5, idle=5), stat_line(1, user=5, system=5, idle=5)])
    usage = CpuCollector(Host(root=tmp_path)).collect()
    assert (usage.cores, usage.usage_cores, usage.usage_ratio) == (2, 0.0, 0.0)
    assert usage.per_core_ratio == [0.0, 0.0]


def test_counters_going_backwards_or_new_cpus_read_zero(tmp_path: Path) -> None:
    write_stat(tmp_path, [stat_line(cpu, user=500, system=0, idle=500) for cpu in (0, 1)])
    collector = CpuCollector(Host(root=tmp_path))
    write_stat(
        tmp_path,
        [
            stat_line(0, user=550, system=0, idle=550),  # normal: 50 busy of 100
            stat_line(1, user=10, system=0, idle=10),  # unplugged and back: counters restarted
            stat_line(2, user=90, system=0, idle=10),  # hot-plugged since the last sample
        ],
    )
    usage = collector.collect()
    assert usage.per_core_ratio == [0.5, 0.0, 0.0]
    assert usage.cores == 3
    assert usage.usage_cores == 0.5


def test_iowait_stepping_back_is_clamped_to_one_core(tmp_path: Path) -> None:
    write_stat(tmp_path, [stat_line(0, user=0, system=0, idle=100, iowait=50)])
    collector = CpuCollector(Host(root=tmp_path))
    # busy grows by 100 while total grows by 60: iowait went back by 40 (NOHZ accounting)
    write_stat(tmp_path, [stat_line(0, user=100, system=0, idle=100, iowait=10)])
    assert collector.collect().per_core_ratio == [1.0]


def test_per_core_ratio_is_indexed_by_cpu_number(tmp_path: Path) -> None:
    lines = [stat_line(0, 0, 0, 0), stat_line(1, 0, 0, 0), stat_line(3, 0, 0, 0)]  # cpu2 offline
    write_stat(tmp_path, lines)
    collector = CpuCollector(Host(root=tmp_path))
    write_stat(tmp_path, [stat_line(0, 10, 0, 90), stat_line(1, 20, 0, 80), stat_line(3, 40, 0, 60)])
    usage = collector.collect()
    assert usage.cores == 3
    assert usage.per_core_ratio == [0.1, 0.2, 0.0, 0.4]
    assert usage.usage_cores == pytest.approx(0.7)


def test_unreadable_proc_stat_fails_collect_not_construction(tmp_path: Path) -> None:
    collector = CpuCollector(Host(root=tmp_path))
    with pytest.raises(FileNotFoundError):
        collector.collect()
    write(tmp_path / "proc" / "stat", "intr 1 2 3\n")
    with pytest.raises(ValueError, match="no cpuN lines"):
        collector.collect()


# --- memory ---------------------------------------------------------------------------------


def test_memory_from_real_meminfo(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "meminfo", REAL_MEMINFO)
    memory = MemoryCollector(Host(root=tmp_path)).collect()
    assert memory.total_bytes == 24684084 * KIB
    assert memory.available_bytes == 24381408 * KIB
    assert memory.used_bytes == (24684084 - 24381408) * KIB
    assert memory.page_cache_bytes == 126972 * KIB  # Cached only, not Buffers or SReclaimable


def test_memory_without_mem_available_is_estimated(tmp_path: Path) -> None:
    text = "MemTotal: 1000 kB\nMemFree: 300 kB\nBuffers: 50 kB\nCached: 150 kB\n"
    write(tmp_path / "proc" / "meminfo", text)
    memory = MemoryCollector(Host(root=tmp_path)).collect()
    assert memory.available_bytes == 500 * KIB
    assert memory.used_bytes == 500 * KIB


def test_memory_estimate_never_exceeds_total(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "meminfo", "MemTotal: 100 kB\nMemFree: 90 kB\nCached: 50 kB\n")
    memory = MemoryCollector(Host(root=tmp_path)).collect()
    assert (memory.available_bytes, memory.used_bytes) == (100 * KIB, 0)


def test_meminfo_malformed_lines_skipped_and_counts_not_scaled() -> None:
    text = REAL_MEMINFO + "garbage\nBroken: lots kB\nEmpty:\n: 5 kB\n"
    fields = parse_meminfo(text)
    assert fields["MemTotal"] == 24684084 * KIB
    assert fields["HugePages_Total"] == 0 and fields["Hugepagesize"] == 2048 * KIB
    assert "Broken" not in fields and "Empty" not in fields and "garbage" not in fields


def test_meminfo_node_prefix_is_stripped() -> None:
    fields = parse_meminfo(REAL_NODE0_MEMINFO)
    assert fields["MemTotal"] == 4548812 * KIB
    assert fields["Active(file)"] == 72496 * KIB


def test_meminfo_without_mem_total_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "meminfo", "MemFree: 5 kB\n")
    with pytest.raises(ValueError, match="MemTotal"):
        MemoryCollector(Host(root=tmp_path)).collect()


# --- numa -----------------------------------------------------------------------------------


def test_node_ids_ignore_other_entries_and_sort_numerically(tmp_path: Path) -> None:
    for name in ("node10", "node2", "node0", "nodeX", "has_cpu", "online"):
        (tmp_path / name).mkdir()
    assert node_ids(tmp_path) == [0, 2, 10]
    assert node_ids(tmp_path / "absent") == []


def test_two_numa_nodes(two_node_root: Path) -> None:
    per_core = [1.0, 0.5, 0.0, 0.25, 1.0, 1.0, 0.0, 0.75]
    node0, node1 = NumaCollector(Host(root=two_node_root)).collect(per_core)

    assert (node0.id, node0.cpus, node0.cpu_usage_cores) == (0, [0, 1, 2, 3], 1.75)
    assert (node1.id, node1.cpus, node1.cpu_usage_cores) == (1, [4, 5, 6, 7], 2.75)
    assert node0.memory_total_bytes == 16 * 1024 * 1024 * KIB
    # used = total - (free + active file + inactive file + reclaimable slab)
    assert node0.memory_used_bytes == (16 * 1024 * 1024 - 8 * 1024 * 1024 - 1024 - 2048 - 512) * KIB
    assert node1.memory_used_bytes == (8 - 1) * 1024 * 1024 * KIB


def test_real_node_meminfo_used(tmp_path: Path) -> None:
    write(tmp_path / "sys" / "devices" / "system" / "node" / "node0" / "cpulist", "0-1\n")
    write(tmp_path / "sys" / "devices" / "system" / "node" / "node0" / "meminfo", REAL_NODE0_MEMINFO)
    (node,) = NumaCollector(Host(root=tmp_path)).collect([0.5, 0.25])
    assert node.memory_used_bytes == (4548812 - 4275240 - 72496 - 47860 - 64544) * KIB
    assert node.cpu_usage_cores == 0.75


def test_numa_usage_sums_to_node_usage_from_one_stat_read(two_node_root: Path) -> None:
    write_stat(two_node_root, [stat_line(cpu, 0, 0, 0) for cpu in range(8)])
    cpu = CpuCollector(Host(root=two_node_root))
    write_stat(two_node_root, [stat_line(cpu, 10 * cpu, system=0, idle=100 - 10 * cpu) for cpu in range(8)])
    usage = cpu.collect()
    nodes = NumaCollector(Host(root=two_node_root)).collect(usage.per_core_ratio)
    assert [node.cpu_usage_cores for node in nodes] == pytest.approx([0.6, 2.2])
    assert sum(node.cpu_usage_cores for node in nodes) == pytest.approx(usage.usage_cores)


def test_memory_only_node_and_short_per_core_list(two_node_root: Path) -> None:
    nodes = two_node_root / "sys" / "devices" / "system" / "node"
    write(nodes / "node1" / "cpulist", "\n")  # CXL / memory-only node
    write(nodes / "node2" / "cpulist", "8-9\n")  # CPUs onlined after the last /proc/stat read
    node0, node1, node2 = NumaCollector(Host(root=two_node_root)).collect([0.5] * 8)
    assert (node1.cpus, node1.cpu_usage_cores) == ([], 0.0)
    assert (node2.cpus, node2.cpu_usage_cores, node2.memory_total_bytes) == ([8, 9], 0.0, 0)
    assert node0.cpu_usage_cores == 2.0


def test_without_numa_sysfs_the_machine_is_node_zero(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "meminfo", REAL_MEMINFO)
    write(tmp_path / "sys" / "devices" / "system" / "cpu" / "online", "0-2\n")
    (node,) = NumaCollector(Host(root=tmp_path)).collect([0.5, 0.5, 0.25, 0.0])
    assert (node.id, node.cpus, node.cpu_usage_cores) == (0, [0, 1, 2], 1.25)
    assert node.memory_total_bytes == 24684084 * KIB
    assert node.memory_used_bytes == (24684084 - 24381408) * KIB


def test_without_numa_or_cpu_sysfs_every_listed_cpu_is_node_zero(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "meminfo", REAL_MEMINFO)
    (node,) = NumaCollector(Host(root=tmp_path)).collect([0.5, 0.5])
    assert (node.cpus, node.cpu_usage_cores) == ([0, 1], 1.0)


# --- pressure -------------------------------------------------------------------------------


def test_parse_real_pressure_lines() -> None:
    cpu = parse_pressure(REAL_PSI_CPU, "cpu")
    assert (cpu.resource, cpu.some_avg10, cpu.some_avg60, cpu.some_avg300) == ("cpu", 1.54, 0.57, 1.10)
    assert cpu.some_total_seconds == pytest.approx(76.687798)
    io = parse_pressure(REAL_PSI_IO, "io")
    assert (io.full_avg300, io.full_total_seconds) == (0.02, pytest.approx(4.19831))


def test_pressure_without_full_line_reads_zero_full() -> None:
    pressure = parse_pressure("some avg10=2.50 avg60=1.00 avg300=0.50 total=2000000\n", "cpu")
    assert pressure.some_total_seconds == 2.0
    assert (pressure.full_avg10, pressure.full_total_seconds) == (0.0, 0.0)


def test_pressure_malformed_lines_skipped() -> None:
    text = "garbage\nsome avg10=x avg60=0 avg300=0 total=1\nfull avg10=1.0\n" + REAL_PSI_IO.splitlines()[0]
    pressure = parse_pressure(text, "io")
    assert pressure.some_avg60 == 0.01  # the valid some line, not the malformed one
    assert pressure.full_avg10 == 0.0  # the incomplete full line was skipped


def test_pressure_without_some_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="memory pressure"):
        parse_pressure("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "memory")


def test_pressure_collector_reads_the_three_files(tmp_path: Path) -> None:
    for resource, text in (("cpu", REAL_PSI_CPU), ("io", REAL_PSI_IO), ("memory", REAL_PSI_MEMORY)):
        write(tmp_path / "proc" / "pressure" / resource, text)
    readings = PressureCollector(Host(root=tmp_path)).collect()
    assert [reading.resource for reading in readings] == ["cpu", "memory", "io"]
    assert readings[2].some_total_seconds == pytest.approx(4.841972)


def test_kernel_without_psi_gives_an_empty_list(tmp_path: Path) -> None:
    assert PressureCollector(Host(root=tmp_path)).collect() == []
    write(tmp_path / "proc" / "pressure" / "cpu", REAL_PSI_CPU)  # partial support
    assert [reading.resource for reading in PressureCollector(Host(root=tmp_path)).collect()] == ["cpu"]
