"""NVIDIA GPUs through NVML, by way of nvidia-ml-py's `pynvml` module.

No GPU, no driver or no library is a normal state: `collect()` then answers
`Accelerators(available=False, reason=...)` and never raises. Each GPU process is attributed to
the pod whose cgroup it runs in, read from `<proc>/<pid>/cgroup` of the collector's host.

NVML state is process-wide (pynvml keeps one library handle in `pynvml.nvmlLib`), so a
`library_path` is honoured by loading that file with ctypes and handing the handle to pynvml,
which then skips its own `CDLL("libnvidia-ml.so.1")` lookup; `close()` hands it back."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from lahar.agent.collectors.files import AbsentFor
from lahar.agent.collectors.host import Host
from lahar.rpc.report import Accelerators, GpuDevice, GpuProcess

log = logging.getLogger(__name__)

NVML_LIBRARY = "libnvidia-ml.so.1"  # the name pynvml itself loads when no path is given

# pod uid -> (namespace, name), for the pods on this node.
PodsByUid = Mapping[str, tuple[str, str]]

T = TypeVar("T")

# The pod's cgroup directory, as either cgroup driver names it:
#   cgroupfs  .../kubepods/burstable/pod1b2c...-.../<container>
#   systemd   .../kubepods-burstable-pod1b2c..._....slice/<container>.scope
# Static (mirror) pods carry a 32-hex-digit uid without dashes.
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?=\.slice|/|$)",
    re.IGNORECASE | re.MULTILINE,
)

# Newest first: the _v3 calls exist from driver R510, _v2 before that.
_COMPUTE_PROCESS_CALLS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")
_GRAPHICS_PROCESS_CALLS = ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2")


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod uid named by a `/proc/<pid>/cgroup` file (v1 or v2, either cgroup driver), with
    the systemd driver's underscores turned back into dashes; None for a process in no pod."""
    match = _POD_UID.search(text)
    return match.group(1).replace("_", "-").lower() if match else None


def pod_of_process(proc: Path, pid: int, pods_by_uid: PodsByUid) -> tuple[str, str]:
    """(namespace, name) of the pod running `pid`, or ("", "") when the process has gone, runs
    outside any pod, or belongs to a pod this node does not know (yet)."""
    try:
        text = (proc / str(pid) / "cgroup").read_text(encoding="ascii", errors="replace")
    except OSError:  # the process exited between NVML's answer and this read
        return "", ""
    uid = pod_uid_from_cgroup(text)
    return pods_by_uid.get(uid, ("", "")) if uid else ("", "")


class _LibraryBinding:
    """Which NVML library pynvml uses in this process, when a collector asked for a path.

    Counted, so several collectors on the same path share it; the last one out restores pynvml's
    own lookup. pynvml caches function pointers by name, so the cache goes with each swap."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: str | None = None
        self._library: ctypes.CDLL | None = None
        self._users = 0

    def acquire(self, path: str) -> None:
        """Load `path` (OSError when it cannot be) and make pynvml use it."""
        with self._lock:
            if self._path == path and self._library is not None and pynvml.nvmlLib is self._library:
                self._users += 1
                return
            library = ctypes.CDLL(path)
            if self._users:
                log.warning("NVML library %s replaces %s for this process", path, self._path)
            _install_in_pynvml(library)
            self._path, self._library, self._users = path, library, 1

    def release(self, path: str) -> None:
        with self._lock:
            if self._path != path or self._users == 0:
                return  # another path has taken over since
            self._users -= 1
            if self._users == 0:
                if pynvml.nvmlLib is self._library:
                    _install_in_pynvml(None)
                self._path, self._library = None, None


def _install_in_pynvml(library: ctypes.CDLL | None) -> None:
    with pynvml.libLoadLock:
        pynvml.nvmlLib = library
        cache = getattr(pynvml, "_nvmlGetFunctionPointer_cache", None)
        if isinstance(cache, dict):
            cache.clear()  # pointers into the previous library


_binding = _LibraryBinding()


class _Unavailable(Exception):
    """NVML cannot be used now; the message is the reason reported."""


def _zero_if_unsupported(read: Callable[[], T], zero: T) -> T:
    """A field this GPU does not offer (NVML_ERROR_NOT_SUPPORTED) reads as zero; other NVML
    errors mean the session is broken and propagate."""
    try:
        return read()
    except pynvml.NVMLError_NotSupported:
        return zero


class GpuCollector:
    """Samples every GPU NVML sees. Initialises NVML once and keeps the device handles; after an
    NVML error it shuts down, initialises again and retries once before reporting unavailable."""

    def __init__(
        self, host: Host, library_path: str | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.host = host
        self.library_path = library_path
        self._absent: AbsentFor[Accelerators] = AbsentFor(clock=clock)  # no NVML here: probed again later
        self._bound = False
        self._initialized = False  # nvmlInit succeeded and nvmlShutdown is owed
        self._handles: list[Any] | None = None  # pynvml device handles, by index
        self._memory_v2 = True  # nvmlDeviceGetMemoryInfo_v2, until the driver says otherwise

    def collect(self, pods_by_uid: PodsByUid | None = None) -> Accelerators:
        absent = self._absent.cached()
        if absent is not None:
            return absent
        pods = pods_by_uid or {}
        try:
            return self._collect(pods)
        except Exception as exc:  # the contract: a report, never an exception out of collect()
            log.exception("GPU collection failed")
            self._reset()
            return Accelerators(False, f"GPU collection failed: {exc!r}", "nvml")

    def close(self) -> None:
        """Shut NVML down and give back the library binding this collector made."""
        self._reset()
        if self._bound and self.library_path is not None:
            _binding.release(self.library_path)
            self._bound = False

    def _collect(self, pods: PodsByUid) -> Accelerators:
        error = ""
        for attempt in (1, 2):
            try:
                handles = self._start()
                if not handles:
                    return Accelerators(False, "NVML reports no GPUs on this node", "nvml")
                return Accelerators(True, source="nvml", gpus=self._read_devices(handles, pods))
            except _Unavailable as exc:  # no library, or no driver to initialise: not every tick again
                return self._absent.remember(Accelerators(False, str(exc), "nvml"))
            except pynvml.NVMLError as exc:
                log.warning("NVML error (attempt %d): %s; initialising again", attempt, exc)
                self._reset()
                error = str(exc)
        return Accelerators(False, f"NVML error: {error}", "nvml")

    def _start(self) -> list[Any]:
        """The device handles, initialising NVML first when needed."""
        if self._handles is not None:
            return self._handles
        self._bind_library()
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            raise _Unavailable(f"NVML library {NVML_LIBRARY} not found: no NVIDIA driver on this node") from None
        except pynvml.NVMLError as exc:
            raise _Unavailable(f"NVML initialisation failed: {exc}") from None
        self._initialized = True
        count = pynvml.nvmlDeviceGetCount()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
        return self._handles

    def _bind_library(self) -> None:
        if self.library_path is None or self._bound:
            return
        try:
            _binding.acquire(self.library_path)
        except OSError as exc:
            raise _Unavailable(f"NVML library {self.library_path} could not be loaded: {exc}") from None
        self._bound = True

    def _reset(self) -> None:
        """Forget the session; the next collect initialises NVML again."""
        self._handles = None
        if not self._initialized:
            return
        self._initialized = False
        # NVMLError: already shut down underneath us, nothing left to release
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()

    def _read_devices(self, handles: list[Any], pods: PodsByUid) -> list[GpuDevice]:
        return [self._read_device(index, handle, pods) for index, handle in enumerate(handles)]

    def _read_device(self, index: int, handle: Any, pods: PodsByUid) -> GpuDevice:
        used_bytes, total_bytes = self._memory(handle)
        return GpuDevice(
            index=index,
            uuid=_zero_if_unsupported(lambda: str(pynvml.nvmlDeviceGetUUID(handle)), ""),
            model=_zero_if_unsupported(lambda: str(pynvml.nvmlDeviceGetName(handle)), ""),
            utilization_ratio=_utilization_ratio(handle),
            memory_used_bytes=used_bytes,
            memory_total_bytes=total_bytes,
            power_watts=_power_watts(handle),
            temperature_celsius=_temperature_celsius(handle),
            processes=self._processes(handle, pods),
        )

    def _memory(self, handle: Any) -> tuple[int, int]:
        """(used, total) bytes. The v2 call keeps driver-reserved memory out of `used`, as
        nvidia-smi shows it; drivers before R510 only have v1."""
        version = getattr(pynvml, "nvmlMemory_v2", None)
        if self._memory_v2 and version is not None:
            try:
                return _used_and_total(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle, version=version))
            except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch):
                self._memory_v2 = False
        return _used_and_total(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))

    def _processes(self, handle: Any, pods: PodsByUid) -> list[GpuProcess]:
        # A process doing both compute and graphics is listed twice with the same memory.
        memory_by_pid: dict[int, int] = {}
        for calls in (_COMPUTE_PROCESS_CALLS, _GRAPHICS_PROCESS_CALLS):
            for info in _running_processes(handle, calls):
                used = info.usedGpuMemory or 0  # None where the driver cannot tell (WDDM)
                memory_by_pid[info.pid] = max(memory_by_pid.get(info.pid, 0), int(used))
        processes = []
        for pid, memory in sorted(memory_by_pid.items()):
            namespace, name = pod_of_process(self.host.proc, pid, pods)
            processes.append(GpuProcess(pid=pid, memory_bytes=memory, namespace=namespace, pod=name))
        return processes


def _utilization_ratio(handle: Any) -> float:
    return _zero_if_unsupported(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu, 0) / 100  # percent


def _power_watts(handle: Any) -> float:
    return _zero_if_unsupported(lambda: pynvml.nvmlDeviceGetPowerUsage(handle), 0) / 1000  # milliwatts


def _temperature_celsius(handle: Any) -> float:
    return float(_zero_if_unsupported(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU), 0))


def _used_and_total(read: Callable[[], Any]) -> tuple[int, int]:
    info = _zero_if_unsupported(read, None)
    return (int(info.used), int(info.total)) if info is not None else (0, 0)


def _running_processes(handle: Any, calls: tuple[str, ...]) -> list[Any]:
    """The first process-list call this driver (and this nvidia-ml-py) offers."""
    for name in calls:
        call = getattr(pynvml, name, None)
        if call is None:
            continue
        try:
            return list(call(handle))
        except pynvml.NVMLError_FunctionNotFound:
            continue  # an older driver: try the previous struct version
        except pynvml.NVMLError_NotSupported:
            return []
    return []
