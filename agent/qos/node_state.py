"""The QoS engine's inputs: NodeState and QosPods, from the fresh NodeReport, the API's pods and a
few cgroup reads (the driver in use, the CPUs pods may use, the knobs the kernel offers, pinned
cores, block device numbers). The only I/O before the strategies run."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lahar.agent.cgroups.layout import (
    CgroupDriver,
    CgroupVersion,
    KubeLayout,
    container_cgroups,
    pod_hierarchy,
)
from lahar.agent.collectors.files import parse_cpulist, read_text
from lahar.agent.collectors.host import Host
from lahar.agent.collectors.latency_probe import LatencyProbe, parse_probe
from lahar.agent.collectors.pods import cgroup_uid, container_names
from lahar.agent.qos.cpu_manager import CpuManagerFile, CpuManagerState
from lahar.agent.qos.executor import CgroupExecutor
from lahar.agent.qos.knobs import device_number
from lahar.agent.qos.model import NodeState, QosContainer, QosPod
from lahar.api.qos import QoSClass
from lahar.api.quantity import QuantityError
from lahar.api.resources import ResourceList, pod_limits, pod_requests
from lahar.rpc.report import NodeReport, PodUsage

log = logging.getLogger("lahar.agent.qos")

SUPPORTED_REFRESH_SECONDS = 60.0  # the kernel's knobs do not change; a new kubepods top is re-probed
CONTAINER_RESCAN_SECONDS = 10.0  # container dirs of a pod the API says nothing about


class NodeStateReader:
    def __init__(self, host: Host, executor: CgroupExecutor, kubepods: str) -> None:
        self.host = host
        self.executor = executor
        self.kubepods = kubepods
        self.hierarchy = pod_hierarchy(host.cgroup, executor.version)  # where pod and container dirs are listed
        self._supported: tuple[str, float, frozenset[str]] | None = None
        self._cpu_manager: CpuManagerFile | None = None
        self._preempt: str | None = None  # read once: the model is chosen at boot
        self._devices: dict[str, str | None] = {}
        self._specs: dict[str, tuple[Any, PodSpec]] = {}  # uid -> (resourceVersion, parsed)
        self._container_dirs: dict[str, tuple[frozenset[str], float, dict[str, str]]] = {}

    def layout(self) -> KubeLayout:
        """The driver whose kubepods directory exists (cgroupfs until one does)."""
        top = self.executor.existing_top()
        driver = CgroupDriver.SYSTEMD if top is not None and top.endswith(".slice") else CgroupDriver.CGROUPFS
        return KubeLayout(driver, self.kubepods)

    def node(self, report: NodeReport, devices: Sequence[str], cpu_manager_file: str | None, now: float) -> NodeState:
        layout = self.layout()
        return NodeState(
            version=self.executor.version,
            layout=layout,
            cpus=self._cpus(layout, report),
            cpu_usage_cores=report.cpu.usage_cores,
            memory_total_bytes=report.memory.total_bytes,
            memory_used_bytes=report.memory.used_bytes,
            supported=self._knobs(layout.top, now),
            devices=self._device_numbers(devices),
            cpu_manager=self._cpu_manager_state(cpu_manager_file),
            preempt_mode=self._preempt_mode(),
        )

    def _preempt_mode(self) -> str:
        if self._preempt is None:
            self._preempt = read_preempt_mode(self.host.sys / "kernel/debug/sched/preempt")
        return self._preempt

    def _cpus(self, layout: KubeLayout, report: NodeReport) -> frozenset[int]:
        """The CPUs pods may use: kubepods' cpuset (kubelet may reserve some), else all online ones."""
        if self.executor.version is CgroupVersion.V2:
            text = read_text(self.host.cgroup / layout.top / "cpuset.cpus.effective") or ""
            cpus = frozenset(parse_cpulist(text))
        else:
            cpus = self.executor.read(layout.top, "cpuset.cpus") or frozenset()
        if not cpus:
            cpus = frozenset(parse_cpulist(read_text(self.host.sys / "devices/system/cpu/online") or ""))
        return cpus or frozenset(range(report.cpu.cores))

    def _knobs(self, top: str, now: float) -> frozenset[str]:
        cached = self._supported
        if cached is not None and cached[0] == top and now - cached[1] < SUPPORTED_REFRESH_SECONDS and cached[2]:
            return cached[2]
        knobs = self.executor.supported(top)
        self._supported = (top, now, knobs)
        return knobs

    def _device_numbers(self, devices: Sequence[str]) -> dict[str, str]:
        numbers = {}
        for device in devices:
            if device not in self._devices:
                self._devices[device] = device_number(device, self.host.sys)
                if self._devices[device] is None:
                    log.warning("IO limits for %s skipped: no such block device on this node", device)
            number = self._devices[device]
            if number is not None:
                numbers[device] = number
        return numbers

    def _cpu_manager_state(self, path: str | None) -> CpuManagerState | None:
        if not path:
            return None
        resolved = self.host.root / path.lstrip("/")  # the host's file, under the agent's --root
        if self._cpu_manager is None or self._cpu_manager.path != resolved:
            self._cpu_manager = CpuManagerFile(resolved)
        return self._cpu_manager.read()

    # --- pods ------------------------------------------------------------------------------

    def pods(
        self, report: NodeReport, api_pods: Sequence[Mapping[str, Any]], node: NodeState, now: float
    ) -> list[QosPod]:
        """Every measured pod with its class, usage, requests, limits and containers. A pod the
        API does not know (standalone) is classed by its cgroup directory and has no spec."""
        by_uid = {str((p.get("metadata") or {}).get("uid") or ""): p for p in api_pods}
        pods = [self._pod(usage, self._spec(usage.uid, by_uid.get(usage.uid)), node, now) for usage in report.pods]
        # Only this tick's pods stay cached: ended ones do not accumulate.
        self._specs = {uid: self._specs[uid] for uid in by_uid.keys() & self._specs.keys()}
        cgroups = {usage.cgroup for usage in report.pods}
        self._container_dirs = {c: self._container_dirs[c] for c in cgroups & self._container_dirs.keys()}
        return pods

    def _spec(self, uid: str, pod: Mapping[str, Any] | None) -> PodSpec:
        """The pod's parsed spec, parsed again only when the API object changed."""
        if pod is None:
            return PodSpec(uid)
        key = (pod.get("metadata") or {}).get("resourceVersion") or id(pod)
        cached = self._specs.get(uid)
        if cached is None or cached[0] != key:
            cached = self._specs[uid] = (key, pod_spec(pod))
        return cached[1]

    def _containers(self, pod_cgroup: str, spec: PodSpec, now: float) -> dict[str, str]:
        """Container id -> cgroup, listed again when the pod's containers change (or every
        CONTAINER_RESCAN_SECONDS when the API does not say: standalone)."""
        known = frozenset(spec.container_names)
        cached = self._container_dirs.get(pod_cgroup)
        if cached is None or cached[0] != known or now - cached[1] >= CONTAINER_RESCAN_SECONDS:
            cached = self._container_dirs[pod_cgroup] = (known, now, container_cgroups(self.hierarchy, pod_cgroup))
        return cached[2]

    def _pod(self, usage: PodUsage, spec: PodSpec, node: NodeState, now: float) -> QosPod:
        qos = QoSClass(usage.qos_class)
        containers = []
        for container_id, path in sorted(self._containers(usage.cgroup, spec, now).items()):
            name = spec.container_names.get(container_id, "")
            exclusive = self._exclusive(spec.cgroup_uid, name, path, node) if qos is QoSClass.LC else frozenset()
            containers.append(QosContainer(container_id, name, path, spec.container_cpu_limits.get(name), exclusive))
        return QosPod(
            uid=usage.uid,
            namespace=usage.namespace,
            name=usage.name,
            qos=qos,
            kube_qos=usage.kube_qos_class,
            cgroup=usage.cgroup,
            cpu_usage_cores=usage.cpu_usage_cores,
            memory_working_set_bytes=usage.memory_working_set_bytes,
            cpu_request_millicores=spec.cpu_request_millicores,
            cpu_limit_millicores=spec.cpu_limit_millicores,
            memory_request_bytes=spec.memory_request_bytes,
            memory_limit_bytes=spec.memory_limit_bytes,
            containers=tuple(containers),
            latency_probe=spec.latency_probe,
        )

    def _exclusive(self, uid: str, name: str, path: str, node: NodeState) -> frozenset[int]:
        """Cores an LC container holds alone: kubelet's static assignment, or a cpuset narrower
        than the node's (pinned by whoever started it)."""
        assigned = node.cpu_manager.exclusive_cpus(uid, name) if node.cpu_manager is not None and name else frozenset()
        if assigned or not node.has("cpuset.cpus"):
            return assigned
        cpus = self.executor.read(path, "cpuset.cpus") or frozenset()
        return cpus if cpus and cpus < node.cpus else frozenset()


def read_preempt_mode(path: Path) -> str:
    """The active preemption model, the bracketed word of `none voluntary (full) lazy`; "" when
    the file is missing or unreadable (debugfs not mounted, or refused as it is on this VM)."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    for word in text.split():
        if word.startswith("(") and word.endswith(")"):
            return word[1:-1]
    return ""


@dataclass(frozen=True)
class PodSpec:
    """What QoS reads from a pod's API object, parsed once per version of it."""

    cgroup_uid: str  # the uid kubelet named its cgroup (and checkpoint entries) after
    cpu_request_millicores: int = 0
    cpu_limit_millicores: int | None = None  # kubelet sets a pod limit only when every container has one
    memory_request_bytes: int = 0
    memory_limit_bytes: int | None = None
    container_cpu_limits: Mapping[str, int] = field(default_factory=dict)  # container name -> millicores
    container_names: Mapping[str, str] = field(default_factory=dict)  # container id -> name
    latency_probe: LatencyProbe | None = None


def pod_spec(pod: Mapping[str, Any]) -> PodSpec:
    spec = pod.get("spec") or {}
    metadata = pod.get("metadata") or {}
    try:
        probe = parse_probe(metadata.get("annotations") or {})
    except ValueError as exc:  # the pod keeps running; its latency target is not used, and we say why
        log.warning("pod %s/%s: latency target ignored: %s", metadata.get("namespace"), metadata.get("name"), exc)
        probe = None
    containers = [c for c in spec.get("containers") or () if isinstance(c, Mapping)]
    try:
        requests, limits = pod_requests(pod), pod_limits(pod)
    except (QuantityError, ValueError, TypeError):  # the API validated it; a bad one limits nothing
        requests, limits = ResourceList(), ResourceList()
    cpu_limits = {str(c.get("name", "")): limit for c in containers if (limit := _cpu_limit(c)) is not None}
    return PodSpec(
        cgroup_uid=cgroup_uid(pod),
        cpu_request_millicores=requests.get("cpu", 0),
        cpu_limit_millicores=limits.get("cpu") if _all_limit(containers, "cpu") else None,
        memory_request_bytes=requests.get("memory", 0),
        memory_limit_bytes=limits.get("memory") if _all_limit(containers, "memory") else None,
        container_cpu_limits=cpu_limits,
        container_names=container_names(pod),
        latency_probe=probe,
    )


def _has_limit(container: Mapping[str, Any], resource: str) -> bool:
    return resource in ((container.get("resources") or {}).get("limits") or {})


def _all_limit(containers: Sequence[Mapping[str, Any]], resource: str) -> bool:
    return bool(containers) and all(_has_limit(c, resource) for c in containers)


def _cpu_limit(container: Mapping[str, Any]) -> int | None:
    if not _has_limit(container, "cpu"):
        return None
    try:
        return ResourceList.from_k8s(container["resources"]["limits"]).get("cpu") or None
    except (QuantityError, ValueError, TypeError):
        return None
