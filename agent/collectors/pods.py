"""Per-pod and per-container usage from cgroups: CPU (cores over the last interval), memory working
set, CFS throttling and IO bytes, for cgroup v1 and v2 and both kubelet drivers.

What each number is read from (the same sources cAdvisor and kubelet use):

    | value             | v1                                              | v2                              |
    |-------------------|-------------------------------------------------|---------------------------------|
    | CPU time          | cpuacct.usage (ns)                              | cpu.stat usage_usec             |
    | working set       | memory.usage_in_bytes - total_inactive_file     | memory.current - inactive_file  |
    | throttling        | cpu.stat nr_throttled, throttled_time (ns)      | cpu.stat nr_throttled, throttled_usec |
    | IO bytes          | blkio.throttle.io_service_bytes(_recursive)     | io.stat rbytes, wbytes          |

A pod that ends while it is being read is left out of the cycle, never an error. The cost is a
handful of small reads per pod and container, from files kept open between cycles (`OpenFiles`),
to keep a 100-pod cycle within the agent's budget."""

from __future__ import annotations

import functools
import os
import re
import resource
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lahar.agent.cgroups.layout import (
    DEFAULT_KUBEPODS,
    CgroupVersion,
    PodCgroup,
    container_cgroups,
    detect_version,
    pod_hierarchy,
    scan_pod_cgroups,
    v1_controller_dirs,
)
from lahar.agent.collectors.host import Host, require_inside
from lahar.api.qos import k8s_qos_class, qos_class
from lahar.rpc.report import ContainerUsage, PodUsage

NANOSECONDS = 1_000_000_000
MICROSECONDS = 1_000_000
# Kubelet runs a static pod under the uid it hashed from the manifest; the API's mirror pod has its
# own uid and carries the hash in this annotation.
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
CONTAINER_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
# v1 IO byte counters, first present wins: the recursive ones count the containers' IO, which is
# where a pod's processes run. blk-throttle's count every bio whatever the IO scheduler, but recent
# kernels (6.x, this machine's) count only on a device where some throttle limit was ever set;
# before that they read 0, like the CFQ/BFQ ones under mq-deadline.
V1_IO_FILES = (
    "blkio.throttle.io_service_bytes_recursive",
    "blkio.throttle.io_service_bytes",
    "blkio.io_service_bytes_recursive",
)

_V1_IO_LINE = re.compile(rb"^\S+ (Read|Write) (\d+)$", re.MULTILINE)  # `8:0 Read 4096`
_V2_IO_READ = re.compile(rb"\brbytes=(\d+)")  # `8:0 rbytes=4096 wbytes=0 rios=1 ...`
_V2_IO_WRITE = re.compile(rb"\bwbytes=(\d+)")


# --- reading ------------------------------------------------------------------------------------

READ_SIZE = 65536  # memory.stat, the largest file read, is under 2 KiB
MAX_KEPT_OPEN = 4096


def default_max_open() -> int:
    """How many files to keep open: half the descriptor limit, leaving the rest to the agent."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_KEPT_OPEN if soft == resource.RLIM_INFINITY else max(0, min(MAX_KEPT_OPEN, soft // 2))


class OpenFiles:
    """Cgroup files kept open between cycles and re-read from offset 0 with `pread`: one syscall
    a read instead of three and no path walk, which is most of a read's cost (open ~8 us, pread
    ~3 us on this machine). A file not read in a cycle is closed at its end, so the descriptors
    of removed cgroups (which keep them pinned in the kernel) last one interval at most."""

    def __init__(self, max_open: int | None = None, confine_to: Path | None = None) -> None:
        self.max_open = default_max_open() if max_open is None else max_open
        self.confine_to = confine_to  # a file opened must resolve under it (no symlink out)
        self._fds: dict[str, int] = {}
        self._read: set[str] = set()

    def read(self, path: str) -> bytes:
        """The file's content; OSError when it is gone (ENOENT, or ENODEV once removed)."""
        fd = self._fds.get(path)
        if fd is not None:
            try:
                data = os.pread(fd, READ_SIZE, 0)
            except OSError:  # removed; another cgroup may exist at the path now
                self._close(path)
            else:
                self._read.add(path)
                return data
        if self.confine_to is not None:
            require_inside(self.confine_to, path)  # checked once per open, not per read
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            data = os.pread(fd, READ_SIZE, 0)
        except BaseException:
            os.close(fd)
            raise
        if len(self._fds) < self.max_open:
            self._fds[path] = fd
            self._read.add(path)
        else:
            os.close(fd)
        return data

    def read_optional(self, path: str) -> bytes | None:
        """A file some kernels or configurations lack (cpu.stat without CFS bandwidth, blkio)."""
        try:
            return self.read(path)
        except OSError:
            return None

    def close_unread(self) -> None:
        """End of a cycle: close what was not read in it."""
        for path in self._fds.keys() - self._read:
            self._close(path)
        self._read = set()

    def close(self) -> None:
        for path in list(self._fds):
            self._close(path)

    def __len__(self) -> int:
        return len(self._fds)

    def _close(self, path: str) -> None:
        os.close(self._fds.pop(path))


@functools.cache
def _key_pattern(key: bytes) -> re.Pattern[bytes]:
    return re.compile(rb"^" + re.escape(key) + rb" (\d+)$", re.MULTILINE)


def keyed_int(text: bytes | None, key: bytes) -> int:
    """The value of a `key value` line in a flat keyed file (cpu.stat, memory.stat); 0 if absent."""
    if text is None:
        return 0
    match = _key_pattern(key).search(text)
    return int(match.group(1)) if match else 0


def working_set_bytes(usage: int, inactive_file: int) -> int:
    """Usage less the page cache the kernel would drop first, floored at 0: cAdvisor's and
    kubelet's working set, what eviction and the OOM killer care about."""
    return max(0, usage - inactive_file)


@dataclass(frozen=True, slots=True)
class CpuStat:
    usage_seconds: float
    throttled_periods: int = 0
    throttled_seconds: float = 0.0


class CgroupReader(ABC):
    """The cgroup files of one version behind one interface. `cgroup` arguments are paths
    relative to the hierarchy (the same for every v1 controller)."""

    version: ClassVar[CgroupVersion]

    def __init__(self, root: Path, files: OpenFiles | None = None) -> None:
        self.root = root
        self.hierarchy = pod_hierarchy(root, self.version)  # where pod cgroups are listed
        self.files = files if files is not None else OpenFiles(confine_to=root)

    @abstractmethod
    def cpu(self, cgroup: str) -> CpuStat:
        """Cumulative CPU time and throttling; OSError when the cgroup is gone."""

    @abstractmethod
    def usage_seconds(self, cgroup: str) -> float:
        """Cumulative CPU time only (the interference loop's 20 reads a second): on v1 one file
        fewer than `cpu`; OSError when the cgroup is gone."""

    @abstractmethod
    def memory_working_set_bytes(self, cgroup: str) -> int:
        """OSError when the cgroup is gone."""

    @abstractmethod
    def io_bytes(self, cgroup: str) -> tuple[int, int]:
        """Cumulative (read, write) bytes over all devices; zeros where IO is not accounted."""


class V1Reader(CgroupReader):
    version = CgroupVersion.V1

    def __init__(self, root: Path, files: OpenFiles | None = None) -> None:
        super().__init__(root, files)
        controllers = v1_controller_dirs(root)

        def mount(controller: str) -> str:
            # A missing mount reads as a vanished cgroup: the pods are skipped, not the agent.
            return str(controllers.get(controller, root / controller))

        self._cpu, self._cpuacct = mount("cpu"), mount("cpuacct")
        self._memory, self._blkio = mount("memory"), mount("blkio")
        self._io_file: str | None = None

    def cpu(self, cgroup: str) -> CpuStat:
        usage = int(self.files.read(f"{self._cpuacct}/{cgroup}/cpuacct.usage"))
        stat = self.files.read_optional(f"{self._cpu}/{cgroup}/cpu.stat")
        return CpuStat(
            usage / NANOSECONDS, keyed_int(stat, b"nr_throttled"), keyed_int(stat, b"throttled_time") / NANOSECONDS
        )

    def usage_seconds(self, cgroup: str) -> float:
        return int(self.files.read(f"{self._cpuacct}/{cgroup}/cpuacct.usage")) / NANOSECONDS

    def memory_working_set_bytes(self, cgroup: str) -> int:
        usage = int(self.files.read(f"{self._memory}/{cgroup}/memory.usage_in_bytes"))
        stat = self.files.read(f"{self._memory}/{cgroup}/memory.stat")
        return working_set_bytes(usage, keyed_int(stat, b"total_inactive_file"))

    def io_bytes(self, cgroup: str) -> tuple[int, int]:
        for name in (self._io_file,) if self._io_file else V1_IO_FILES:
            text = self.files.read_optional(f"{self._blkio}/{cgroup}/{name}")
            if text is not None:
                self._io_file = name  # the kernel's choice does not change: stop probing
                return _sum_v1_io(text)
        return 0, 0


def _sum_v1_io(text: bytes) -> tuple[int, int]:
    totals = {b"Read": 0, b"Write": 0}
    for operation, value in _V1_IO_LINE.findall(text):
        totals[operation] += int(value)
    return totals[b"Read"], totals[b"Write"]


class V2Reader(CgroupReader):
    version = CgroupVersion.V2

    def __init__(self, root: Path, files: OpenFiles | None = None) -> None:
        super().__init__(root, files)
        self._root = str(root)

    def cpu(self, cgroup: str) -> CpuStat:
        # One file: usage is always there; throttling only where the cpu controller is enabled.
        stat = self.files.read(f"{self._root}/{cgroup}/cpu.stat")
        return CpuStat(
            keyed_int(stat, b"usage_usec") / MICROSECONDS,
            keyed_int(stat, b"nr_throttled"),
            keyed_int(stat, b"throttled_usec") / MICROSECONDS,
        )

    def usage_seconds(self, cgroup: str) -> float:
        return keyed_int(self.files.read(f"{self._root}/{cgroup}/cpu.stat"), b"usage_usec") / MICROSECONDS

    def memory_working_set_bytes(self, cgroup: str) -> int:
        usage = int(self.files.read(f"{self._root}/{cgroup}/memory.current"))
        stat = self.files.read(f"{self._root}/{cgroup}/memory.stat")
        return working_set_bytes(usage, keyed_int(stat, b"inactive_file"))

    def io_bytes(self, cgroup: str) -> tuple[int, int]:
        text = self.files.read_optional(f"{self._root}/{cgroup}/io.stat")
        if text is None:
            return 0, 0
        return (sum(map(int, _V2_IO_READ.findall(text))), sum(map(int, _V2_IO_WRITE.findall(text))))


def cgroup_reader(root: Path, files: OpenFiles | None = None) -> CgroupReader:
    """The reader for the cgroup version mounted at `root`."""
    reader = V2Reader if detect_version(root) is CgroupVersion.V2 else V1Reader
    return reader(root, files)


# --- CPU rates ----------------------------------------------------------------------------------


class CpuRates:
    """Cores used since the previous collect, per cgroup. Only the cgroups seen in the latest
    cycle are remembered, so ended pods and containers do not accumulate."""

    def __init__(self) -> None:
        self._previous: dict[str, tuple[float, float]] = {}  # cgroup -> (usage seconds, now)
        self._current: dict[str, tuple[float, float]] = {}

    def start_cycle(self) -> None:
        self._previous, self._current = self._current, {}

    def cores(self, cgroup: str, usage_seconds: float, now: float) -> float:
        """0 on a cgroup's first sample; 0 if the counter went back (the path was reused)."""
        self._current[cgroup] = (usage_seconds, now)
        last = self._previous.get(cgroup)
        if last is None or now <= last[1]:
            return 0.0
        return max(0.0, usage_seconds - last[0]) / (now - last[1])


# --- pods ---------------------------------------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def cgroup_uid(pod: Mapping[str, Any]) -> str:
    """The uid kubelet named the pod's cgroup after: the manifest hash for a static pod."""
    metadata = _mapping(pod.get("metadata"))
    return str(_mapping(metadata.get("annotations")).get(MIRROR_POD_ANNOTATION) or metadata.get("uid") or "")


def container_names(pod: Mapping[str, Any]) -> dict[str, str]:
    """Container id -> name from the pod's statuses (`containerd://<id>`, `docker://`, `cri-o://`)."""
    status = _mapping(pod.get("status"))
    names: dict[str, str] = {}
    for list_name in CONTAINER_STATUS_LISTS:
        for container in map(_mapping, status.get(list_name) or ()):
            container_id = container.get("containerID") or ""
            if container_id:
                names[container_id.partition("://")[2] or container_id] = container.get("name", "")
    return names


def kube_qos_of(pod: Mapping[str, Any]) -> str:
    return _mapping(pod.get("status")).get("qosClass") or k8s_qos_class(_mapping(pod.get("spec")))


class PodCollector:
    name = "pods"

    def __init__(self, host: Host, kubepods: str = DEFAULT_KUBEPODS) -> None:
        self.host = host
        self.kubepods = kubepods
        self.reader = cgroup_reader(host.cgroup)  # the version is fixed for the host's uptime
        self._cpu_rates = CpuRates()

    def collect(self, pods: Sequence[Mapping[str, Any]], now: float) -> list[PodUsage]:
        """Usage of the given pods (the API's pods on this node) that have a cgroup; with no pods
        (standalone), of every pod cgroup found, named by uid. `now` is any monotonic clock in
        seconds; CPU is averaged over the time since the previous collect."""
        by_uid = {cgroup_uid(pod): pod for pod in pods}
        self._cpu_rates.start_cycle()
        usages: list[PodUsage] = []
        for cgroup in scan_pod_cgroups(self.reader.hierarchy, self.kubepods):
            pod = by_uid.get(cgroup.uid)
            if pod is None and by_uid:
                continue  # not (or no longer) the API's pod on this node
            try:
                usages.append(self._pod_usage(cgroup, pod, now))
            except (OSError, ValueError):  # ended while being read: it will not be back
                continue
        self.reader.files.close_unread()
        return usages

    def close(self) -> None:
        """Close the files kept open; the next collect opens them again."""
        self.reader.files.close()

    def _pod_usage(self, cgroup: PodCgroup, pod: Mapping[str, Any] | None, now: float) -> PodUsage:
        cpu = self.reader.cpu(cgroup.path)
        io_read, io_write = self.reader.io_bytes(cgroup.path)
        if pod is None:
            metadata: Mapping[str, Any] = {"uid": cgroup.uid, "name": cgroup.uid, "namespace": ""}
            pod = {"metadata": metadata, "status": {"qosClass": cgroup.kube_qos_class}}
        else:
            metadata = _mapping(pod.get("metadata"))
        return PodUsage(
            namespace=metadata.get("namespace", ""),
            name=metadata.get("name", ""),
            uid=metadata.get("uid", cgroup.uid),
            qos_class=str(qos_class(pod)),
            kube_qos_class=kube_qos_of(pod),
            cgroup=cgroup.path,
            cpu_usage_cores=self._cpu_rates.cores(cgroup.path, cpu.usage_seconds, now),
            memory_working_set_bytes=self.reader.memory_working_set_bytes(cgroup.path),
            cpu_throttled_periods_total=cpu.throttled_periods,
            cpu_throttled_seconds_total=cpu.throttled_seconds,
            io_read_bytes_total=io_read,
            io_write_bytes_total=io_write,
            containers=self._containers(cgroup.path, container_names(pod), now),
            cpu_usage_seconds_total=cpu.usage_seconds,
        )

    def _containers(self, pod_path: str, names: dict[str, str], now: float) -> list[ContainerUsage]:
        """The pod's containers under their names; when the API names some, the others (the
        sandbox, ended containers) are left out, as kubelet does; otherwise named by id."""
        containers: list[ContainerUsage] = []
        for container_id, path in container_cgroups(self.reader.hierarchy, pod_path).items():
            name = names.get(container_id, container_id if not names else "")
            if not name:
                continue
            try:
                cpu = self.reader.cpu(path)
                working_set = self.reader.memory_working_set_bytes(path)
            except (OSError, ValueError):  # the container ended while being read
                continue
            containers.append(
                ContainerUsage(
                    name=name,
                    cpu_usage_cores=self._cpu_rates.cores(path, cpu.usage_seconds, now),
                    memory_working_set_bytes=working_set,
                    cpu_throttled_periods_total=cpu.throttled_periods,
                    cpu_throttled_seconds_total=cpu.throttled_seconds,
                    cpu_usage_seconds_total=cpu.usage_seconds,
                )
            )
        return containers
