"""What the agent measures and the scheduler reads: one NodeReport per interval, assembled from
the agent's collectors' samples. The wire types of the report stream, shared by both ends, so
neither the scheduler nor the gRPC conversion imports the agent.

Plain dataclasses in base units (cores, bytes, seconds, ratios 0-1, watts, degrees Celsius). The
same report becomes JSON (`lahar agent --once -o json`), Prometheus samples and the gRPC
`NodeReport` message, so every consumer sees the same numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CpuUsage:
    cores: int  # logical CPUs online
    usage_cores: float  # busy CPU time per second over the last interval
    usage_ratio: float  # usage_cores / cores
    per_core_ratio: list[float] = field(default_factory=list)  # by CPU number


@dataclass
class MemoryUsage:
    total_bytes: int
    used_bytes: int  # total - available
    available_bytes: int
    page_cache_bytes: int


@dataclass
class NumaNode:
    id: int
    cpus: list[int]
    memory_total_bytes: int
    memory_used_bytes: int
    cpu_usage_cores: float


@dataclass
class Pressure:
    """One /proc/pressure/<resource> file (or a cgroup's <resource>.pressure)."""

    resource: str  # cpu, memory, io
    some_avg10: float  # percent of wall time, as the kernel reports it
    some_avg60: float
    some_avg300: float
    some_total_seconds: float
    full_avg10: float = 0.0  # cpu has no "full" line on older kernels
    full_avg60: float = 0.0
    full_avg300: float = 0.0
    full_total_seconds: float = 0.0


@dataclass
class ContainerUsage:
    name: str
    cpu_usage_cores: float
    memory_working_set_bytes: int
    cpu_throttled_periods_total: int = 0
    cpu_throttled_seconds_total: float = 0.0
    cpu_usage_seconds_total: float = 0.0  # cumulative CPU time, for counters (rate() loses nothing)


@dataclass
class PodUsage:
    namespace: str
    name: str
    uid: str
    qos_class: str  # Lahar's: LC, LS, BE, SYSTEM
    kube_qos_class: str  # Guaranteed, Burstable, BestEffort
    cgroup: str  # the pod's cgroup path relative to the controller root
    cpu_usage_cores: float
    memory_working_set_bytes: int
    cpu_throttled_periods_total: int = 0
    cpu_throttled_seconds_total: float = 0.0
    io_read_bytes_total: int = 0
    io_write_bytes_total: int = 0
    containers: list[ContainerUsage] = field(default_factory=list)
    cpu_usage_seconds_total: float = 0.0  # cumulative CPU time of the pod's cgroup


@dataclass
class GpuProcess:
    pid: int
    memory_bytes: int
    namespace: str = ""  # the pod that owns the process, when its cgroup names one
    pod: str = ""


@dataclass
class GpuDevice:
    index: int
    uuid: str
    model: str
    utilization_ratio: float
    memory_used_bytes: int
    memory_total_bytes: int
    power_watts: float
    temperature_celsius: float
    processes: list[GpuProcess] = field(default_factory=list)


@dataclass
class NpuDevice:
    id: int  # card/device id as npu-smi numbers it
    chip: int
    model: str
    aicore_utilization_ratio: float
    hbm_used_bytes: int
    hbm_total_bytes: int
    power_watts: float
    temperature_celsius: float
    health: str  # OK, Warning, Alarm, Critical, ...

    @property
    def healthy(self) -> bool:
        return self.health.upper() == "OK"


@dataclass
class Accelerators:
    """GPUs or NPUs: `available` is False with a reason when the hardware or library is absent,
    which is a normal state, not an error."""

    available: bool
    reason: str = ""
    source: str = ""  # nvml, dcmi, npu-smi
    gpus: list[GpuDevice] = field(default_factory=list)
    npus: list[NpuDevice] = field(default_factory=list)


@dataclass
class AgentHealth:
    version: str
    collect_seconds: float  # wall time of the last collection
    errors: dict[str, str] = field(default_factory=dict)  # collector name -> last error


@dataclass
class NodeReport:
    node: str
    sequence: int
    timestamp: float  # unix seconds
    cpu: CpuUsage
    memory: MemoryUsage
    numa: list[NumaNode] = field(default_factory=list)
    pressure: list[Pressure] = field(default_factory=list)
    pods: list[PodUsage] = field(default_factory=list)
    gpu: Accelerators = field(default_factory=lambda: Accelerators(False, "not collected"))
    npu: Accelerators = field(default_factory=lambda: Accelerators(False, "not collected"))
    # What BE pods may borrow, per resource in base units (cpu: millicores, memory: bytes).
    reclaimable: dict[str, int] = field(default_factory=dict)
    health: AgentHealth = field(default_factory=lambda: AgentHealth("", 0.0))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
