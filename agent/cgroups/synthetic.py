"""Synthetic kubelet cgroup trees in the kernel's file formats (v1 and v2, both drivers): what
benchmarks, tests and simulated nodes measure when there is no real pod to read."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lahar.agent.cgroups.layout import CgroupDriver, CgroupVersion, KubeLayout, pod_cgroup_dir


@dataclass
class Usage:
    """What a fake cgroup reports; each value lands in its version's file and unit."""

    cpu_seconds: float = 0.0
    memory_bytes: int = 0
    inactive_file_bytes: int = 0
    throttled_periods: int = 0
    throttled_seconds: float = 0.0
    io_read_bytes: list[int] = field(default_factory=list)  # one entry per device
    io_write_bytes: list[int] = field(default_factory=list)


DEVICES = ("8:0", "253:0", "253:1")


def v1_files(usage: Usage) -> dict[str, dict[str, str]]:
    """controller -> file -> content, as a v1 kernel writes them."""
    io_lines = []
    for device, read, write in zip(DEVICES, usage.io_read_bytes, usage.io_write_bytes, strict=False):
        io_lines += [
            f"{device} Read {read}",
            f"{device} Write {write}",
            f"{device} Sync {read + write}",
            f"{device} Async 0",
            f"{device} Discard 0",
            f"{device} Total {read + write}",
        ]
    io_lines.append(f"Total {sum(usage.io_read_bytes) + sum(usage.io_write_bytes)}")
    return {
        "cpuacct": {"cpuacct.usage": f"{round(usage.cpu_seconds * 1e9)}\n", "cpuacct.stat": "user 10\nsystem 5\n"},
        "cpu": {
            "cpu.stat": (
                f"nr_periods {usage.throttled_periods * 3}\nnr_throttled {usage.throttled_periods}\n"
                f"throttled_time {round(usage.throttled_seconds * 1e9)}\nnr_bursts 0\nburst_time 0\n"
            ),
            "cpu.shares": "1024\n",
        },
        "memory": {
            "memory.usage_in_bytes": f"{usage.memory_bytes}\n",
            # The local inactive_file differs from the hierarchical total_ one, which is what counts.
            "memory.stat": (
                f"cache 4096\nrss 8192\ninactive_anon 0\nactive_anon 8192\ninactive_file 7\n"
                f"active_file 0\nunevictable 0\nhierarchical_memory_limit 9223372036854771712\n"
                f"total_cache {usage.inactive_file_bytes}\ntotal_rss 8192\ntotal_inactive_anon 0\n"
                f"total_active_anon 8192\ntotal_inactive_file {usage.inactive_file_bytes}\n"
                f"total_active_file 4096\ntotal_unevictable 0\n"
            ),
        },
        "blkio": {
            "blkio.throttle.io_service_bytes_recursive": "\n".join(io_lines) + "\n",
            "blkio.throttle.io_service_bytes": "Total 0\n",
        },
    }


def v2_files(usage: Usage) -> dict[str, str]:
    usec = round(usage.cpu_seconds * 1e6)
    return {
        "cpu.stat": (
            f"usage_usec {usec}\nuser_usec {usec // 2}\nsystem_usec {usec - usec // 2}\n"
            f"nr_periods {usage.throttled_periods * 3}\nnr_throttled {usage.throttled_periods}\n"
            f"throttled_usec {round(usage.throttled_seconds * 1e6)}\nnr_bursts 0\nburst_usec 0\n"
        ),
        "memory.current": f"{usage.memory_bytes}\n",
        "memory.stat": (
            f"anon 8192\nfile {usage.inactive_file_bytes}\nkernel 0\nshmem 0\ninactive_anon 0\n"
            f"active_anon 8192\ninactive_file {usage.inactive_file_bytes}\nactive_file 4096\n"
            f"unevictable 0\nworkingset_refault_file 3\n"
        ),
        "io.stat": "".join(
            f"{device} rbytes={read} wbytes={write} rios=1 wios=2 dbytes=0 dios=0\n"
            for device, read, write in zip(DEVICES, usage.io_read_bytes, usage.io_write_bytes, strict=False)
        ),
        "cgroup.procs": "",
    }


class FakeCgroups:
    """A cgroup root in a temporary directory, laid out as kubelet does for one driver."""

    def __init__(self, root: Path, version: CgroupVersion, driver: CgroupDriver, kubepods: str = "kubepods") -> None:
        self.root = root
        self.version = version
        self.layout = KubeLayout(driver, kubepods)
        root.mkdir(parents=True, exist_ok=True)
        if version is CgroupVersion.V2:
            (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
        else:
            for controller in ("cpu", "cpuacct", "memory", "blkio"):
                (root / controller).mkdir(exist_ok=True)

    def write(self, path: str, usage: Usage) -> None:
        if self.version is CgroupVersion.V2:
            self._write_files(self.root / path, v2_files(usage))
            return
        for controller, files in v1_files(usage).items():
            self._write_files(self.root / controller / path, files)

    @staticmethod
    def _write_files(directory: Path, files: Mapping[str, str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (directory / name).write_text(content)

    def container_dir(self, container_id: str) -> str:
        if self.layout.driver is CgroupDriver.SYSTEMD:
            return f"cri-containerd-{container_id}.scope"
        return container_id

    def add_pod(self, uid: str, kube_qos: str, usage: Usage, containers: Mapping[str, Usage] | None = None) -> str:
        path = pod_cgroup_dir(self.layout, uid, kube_qos)
        self.write(path, usage)
        for container_id, container_usage in (containers or {}).items():
            self.write(f"{path}/{self.container_dir(container_id)}", container_usage)
        return path

    def hierarchies(self) -> list[Path]:
        if self.version is CgroupVersion.V2:
            return [self.root]
        return [self.root / c for c in ("cpu", "cpuacct", "memory", "blkio")]

    def remove(self, path: str, controllers: tuple[str, ...] | None = None) -> None:
        """Remove a cgroup (all of it, or under some v1 controllers only)."""
        for hierarchy in self.hierarchies():
            if controllers is None or hierarchy.name in controllers:
                shutil.rmtree(hierarchy / path, ignore_errors=True)
