"""deviceshare: whole GPUs and shares of one GPU's memory (Volcano's deviceshare plugin, GPU
number and GPU share).

Two spellings of the same two requests, one per node's device inventory:

- Lahar's: whole GPUs with `nvidia.com/gpu: N`, a share of one GPU's memory with
  `lahar.dev/gpu-memory: <bytes>`; the device a share gets is written on the pod as
  `lahar.dev/gpu-index` before its bind (whole GPUs are the NVIDIA device plugin's to assign);
- Volcano's gpushare: whole GPUs with `volcano.sh/gpu-number: N`, a share with
  `volcano.sh/gpu-memory: <amount>` (the unit is the node's: Volcano's device plugin advertises
  MiB); the devices chosen, for either, are written on the pod as `volcano.sh/gpu-index` ("0" or
  "0,1") with `volcano.sh/predicate-time` (the session's time in nanoseconds), which Volcano's
  GPU-share device plugin reads.

A share must fit on ONE device (a pod asking for both a share and more than one GPU is refused:
shares are per device). The node-level totals of these resources are the one fit rule's business
(`NodeTable.fits`); this plugin keeps the per-device view: for each node a device inventory and,
per device, the share memory in use and how many share pods use it, and how many whole-GPU pods
hold it. A share goes on a device no whole-GPU pod holds whose free memory takes it; a whole-GPU
pod needs devices free of shares and of other whole-GPU pods (the lowest-numbered free ones).
Unlike Volcano, which refuses a configuration with both `GPUSharingEnable` and `GPUNumberEnable`
on, the two mix on one node: each device is either shared or held whole.

Inventory: a node advertising `volcano.sh/gpu-number` has that many devices of
`volcano.sh/gpu-memory` ÷ number each (Volcano's even split), less those its annotation
`volcano.sh/gpu-unhealthy-ids` ("1,3") names, which take nothing. Otherwise the device count is
the node's allocatable `nvidia.com/gpu` (for share-only nodes that do not advertise it: the
fresh report's GPU count, else allocatable `lahar.dev/gpu-memory` ÷ the
`lahar.dev/gpu-memory-per-device` label, else one device). Each device's memory is the fresh
report's (NVML's total), else the label, else allocatable `lahar.dev/gpu-memory` ÷ count.

Pods already on the node count on the devices their index annotation names (for shares placed
in the session: where this plugin put them); a pod without a usable annotation counts where this
plugin would have put it. Evicted pods (releasing) still hold their devices, except on a what-if
view (preempt, reclaim), which counts them gone; on the rows a view marks `assumed_free` only the
inventory is checked.

Score (`deviceshare.SchedulePolicy`): `binpack` (default) prefers the node whose device would be
fullest after the placement and puts a share on the fullest device it fits; `spread` prefers the
node with the most GPU memory free over all its devices and puts a share on the emptiest device;
whole GPUs likewise by the devices left free. × 100 × `deviceshare.ScheduleWeight`. Pods
without GPUs get no opinion. (Volcano's gpushare scores nothing and takes the lowest-numbered
device that fits.)
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np

from lahar.api.node import Node
from lahar.api.quantity import QuantityError, parse_quantity
from lahar.rpc.report import NodeReport
from lahar.scheduler.framework import ascend, device_config, vgpu
from lahar.scheduler.framework.device_config import VNPUConfig
from lahar.scheduler.framework.devices import Card, ContainerDevice, Fit, remove_assigned
from lahar.scheduler.framework.plugin import (
    Arguments,
    ConfError,
    Plugin,
    boolean,
    choice,
    number,
    register_plugin,
    text,
)
from lahar.scheduler.framework.session import REPORT_STALENESS_SECONDS, Session
from lahar.scheduler.model import NodeTable, Rows, TaskInfo, TaskStatus

GPU = "nvidia.com/gpu"
GPU_MEMORY = "lahar.dev/gpu-memory"
GPU_INDEX_ANNOTATION = "lahar.dev/gpu-index"
PER_DEVICE_LABEL = "lahar.dev/gpu-memory-per-device"
# Volcano's gpushare (pkg/scheduler/api/devices/nvidia/gpushare).
VOLCANO_GPU_NUMBER = "volcano.sh/gpu-number"
VOLCANO_GPU_MEMORY = "volcano.sh/gpu-memory"
VOLCANO_GPU_INDEX = "volcano.sh/gpu-index"
VOLCANO_PREDICATE_TIME = "volcano.sh/predicate-time"
VOLCANO_UNHEALTHY = "volcano.sh/gpu-unhealthy-ids"
BINPACK, SPREAD = "binpack", "spread"
MAX_SCORE = 100.0


def device_memory(node: Node, report: NodeReport | None, label: str | None) -> list[int]:
    """The memory of each of the node's devices, in the unit of its share resource (an empty
    list: no devices). Volcano's inventory when the node advertises `volcano.sh/gpu-number`."""
    allocatable = node.allocatable
    volcano_count = allocatable.get(VOLCANO_GPU_NUMBER, 0)
    if volcano_count:
        return [allocatable.get(VOLCANO_GPU_MEMORY, 0) // volcano_count] * volcano_count
    count, total = allocatable.get(GPU, 0), allocatable.get(GPU_MEMORY, 0)
    reported = (
        [gpu.memory_total_bytes for gpu in sorted(report.gpu.gpus, key=lambda gpu: gpu.index)]
        if report is not None and report.gpu.available
        else []
    )
    per_device = 0
    if label:
        try:
            per_device = parse_quantity(label).value()
        except QuantityError:
            per_device = 0
    if not count and total:
        count = len(reported) or (total // per_device if per_device else 1)
    fallback = per_device or (total // count if count else 0)
    return [reported[i] if i < len(reported) else fallback for i in range(count)]


def unhealthy_devices(node: Node) -> set[int]:
    """The device numbers `volcano.sh/gpu-unhealthy-ids` names ("1,3"; unreadable entries are
    skipped, as Volcano does)."""
    value = node.meta.annotations.get(VOLCANO_UNHEALTHY, "")
    return {int(part) for part in value.split(",") if part.strip().isdigit()}


def device_indexes(value: str) -> list[int] | None:
    """An index annotation ("0" or "0,1") as device numbers; None when any entry is unreadable
    (Volcano's GetGPUIndex then gives none)."""
    parts = value.split(",") if value else []
    if not parts or not all(part.strip().isdigit() for part in parts):
        return None
    return [int(part) for part in parts]


@functools.lru_cache(maxsize=8)
def _device_config_text(contents: str, source: str) -> device_config.DeviceConfig:
    return device_config.parse_device_config_text(contents, source)


def _device_config(value: Any, source: str = "deviceshare.DeviceConfig") -> device_config.DeviceConfig:
    """`deviceshare.DeviceConfig`: the device configuration as a mapping or as its YAML text
    (parsed once per text: every session reads its plugins' arguments anew)."""
    if isinstance(value, device_config.DeviceConfig):
        return value
    if isinstance(value, str):
        return _device_config_text(value, source)
    return device_config.parse_device_config(value, source)


@dataclass
class _Holding:
    """What a task holds on its node: a share of one device, or whole devices."""

    row: int
    devices: list[int]
    memory: int  # 0 for whole devices
    releasing: bool = False


@register_plugin
class DeviceShare(Plugin):
    name = "deviceshare"
    ARGUMENTS: ClassVar[Arguments] = {
        "deviceshare.SchedulePolicy": choice(BINPACK, SPREAD),
        "deviceshare.ScheduleWeight": number(minimum=0),
        "deviceshare.GPUSharingEnable": boolean,
        "deviceshare.GPUNumberEnable": boolean,
        "deviceshare.VGPUEnable": boolean,
        "deviceshare.AscendHAMiVNPUEnable": boolean,
        "deviceshare.GPUExclusiveRules": vgpu.parse_exclusive_rules,
        # Volcano's volcano-vgpu-device-config (its `device-config.yaml`): inline, as a mapping or
        # its text, or the file holding it (a mounted ConfigMap), read when the configuration is.
        "deviceshare.DeviceConfig": _device_config,
        "deviceshare.DeviceConfigFile": text,
        "staleness": number(minimum=0),
    }

    @classmethod
    def read_files(cls, arguments: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...], list[str]]:
        """`deviceshare.DeviceConfigFile`'s text in place of the path (`deviceshare.DeviceConfig`),
        the file watched, and the device configuration's warnings (keys it does not know)."""
        path = arguments.get("deviceshare.DeviceConfigFile")
        files: tuple[str, ...] = ()
        if path is not None:
            if "deviceshare.DeviceConfig" in arguments:
                raise ConfError(
                    "plugin deviceshare: give deviceshare.DeviceConfig or deviceshare.DeviceConfigFile, not both"
                )
            try:
                contents = Path(str(path)).read_text()
            except OSError as exc:
                raise ConfError(
                    f"plugin deviceshare: deviceshare.DeviceConfigFile {path}: cannot read: {exc.strerror or exc}"
                ) from None
            arguments = {key: value for key, value in arguments.items() if key != "deviceshare.DeviceConfigFile"}
            arguments["deviceshare.DeviceConfig"] = contents
            files = (str(path),)
        warnings: list[str] = []
        if "deviceshare.DeviceConfig" in arguments:
            try:
                warnings = list(
                    _device_config(
                        arguments["deviceshare.DeviceConfig"], str(path or "deviceshare.DeviceConfig")
                    ).warnings
                )
            except ValueError as exc:
                raise ConfError(f"plugin deviceshare: {exc}") from None
        return arguments, files, warnings

    def on_session_open(self, session: Session) -> None:
        columns = session.resources.column
        # Per request kind, the columns of its two spellings (Lahar's, Volcano's) present.
        self._whole_columns = [c for c in (columns.get(GPU), columns.get(VOLCANO_GPU_NUMBER)) if c is not None]
        self._share_columns = [c for c in (columns.get(GPU_MEMORY), columns.get(VOLCANO_GPU_MEMORY)) if c is not None]
        self._volcano_columns = {
            c for c in (columns.get(VOLCANO_GPU_NUMBER), columns.get(VOLCANO_GPU_MEMORY)) if c is not None
        }
        self._sharing = bool(self.argument("deviceshare.GPUSharingEnable", True))
        self._numbers = bool(self.argument("deviceshare.GPUNumberEnable", True))
        self._binpack = self.argument("deviceshare.SchedulePolicy", BINPACK) == BINPACK
        self._weight = float(self.argument("deviceshare.ScheduleWeight", 1.0))
        device_configuration = self.argument("deviceshare.DeviceConfig", device_config.DEFAULT_DEVICE_CONFIG)
        if self.argument("deviceshare.VGPUEnable", False):
            rules = self.argument("deviceshare.GPUExclusiveRules", ())
            policy = self.argument("deviceshare.SchedulePolicy", "")
            VirtualGPUs(session, policy, self._weight, device_configuration.nvidia, rules).register()
        if self.argument("deviceshare.AscendHAMiVNPUEnable", False):
            self._register_npus(session, device_configuration.vnpus, device_configuration.hami_vnpu_core)
        if not self._whole_columns and not self._share_columns:
            return  # no node has GPUs and no pod asks for one
        self._session = session
        self._rows = session.nodes.index
        self._build(session)
        session.add_predicate_fn(self._predicate, self._explain)
        if self._weight:
            session.add_node_order_fn(self._score)
        session.add_event_handler(self._on_allocate, self._on_deallocate)

    def _register_npus(self, session: Session, configs: tuple[VNPUConfig, ...], hami_core: bool) -> None:
        """One AscendNPUs per configured type; a node registering a type the configuration does
        not name gets a Warning event (its NPUs of that type take no pods)."""
        policy = self.argument("deviceshare.SchedulePolicy", "")
        for config in configs:
            AscendNPUs(session, policy, self._weight, config, hami_core).register()
        configured = {config.common_word for config in configs}
        for node in session.nodes.nodes:
            for unknown in unconfigured_npus(node, configured):
                session.record_event(
                    "Node",
                    "",
                    node.name,
                    "Warning",
                    "UnknownDeviceType",
                    f"the node registers Ascend type {unknown}, which the device configuration's vnpus do "
                    f"not name (known: {', '.join(sorted(configured)) or 'none'}); its NPUs of that type take no pods",
                )

    # -- state ---------------------------------------------------------------------------------

    def _build(self, session: Session) -> None:
        nodes = session.nodes
        gpu_columns = self._whole_columns + self._share_columns
        reports = session.fresh_reports(float(self.argument("staleness", REPORT_STALENESS_SECONDS)))
        inventory: dict[int, list[int]] = {}
        broken: dict[int, set[int]] = {}
        for row in np.flatnonzero((nodes.allocatable[:, gpu_columns] > 0).any(axis=1)):
            node = nodes.nodes[row]
            inventory[int(row)] = device_memory(node, reports[row], nodes.labels[row].get(PER_DEVICE_LABEL))
            broken[int(row)] = unhealthy_devices(node) if node.allocatable.get(VOLCANO_GPU_NUMBER, 0) else set()
        width = max((len(devices) for devices in inventory.values()), default=0) or 1
        n = len(nodes)
        self._count = np.zeros(n, dtype=np.int64)
        self._total = np.zeros((n, width), dtype=np.int64)  # padding and unhealthy devices: no memory
        # Devices that take pods: present, healthy, with memory or on a node without share memory.
        self._usable = np.zeros((n, width), dtype=bool)
        # Per device: share memory held and share pods on it, whole-GPU pods holding it, and the
        # part of each being released.
        shape = (n, width)
        self._used, self._used_releasing = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
        self._sharers, self._sharers_releasing = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
        self._holders, self._holders_releasing = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
        for at, devices in inventory.items():
            self._count[at] = len(devices)
            self._total[at, : len(devices)] = devices
            self._usable[at, : len(devices)] = True
            for device in broken[at]:
                if device < len(devices):
                    self._total[at, device], self._usable[at, device] = 0, False
        self._held: dict[str, _Holding] = {}
        placed = (nodes.used + nodes.be_used)[:, gpu_columns].any(axis=1)
        for row in np.flatnonzero(placed):
            for task in nodes.tasks[row].values():
                if self._asks(task):
                    self._hold(task, int(row), self._annotated(task), task.status is TaskStatus.RELEASING)

    def _asks(self, task: TaskInfo) -> tuple[int, int] | None:
        """(whole GPUs, share memory) the task asks this plugin about, None if nothing."""
        request = task.request
        gpus = sum(int(request[c]) for c in self._whole_columns)
        memory = sum(int(request[c]) for c in self._share_columns)
        if memory and self._sharing:
            return gpus, memory
        if gpus and not memory and self._numbers:
            return gpus, 0
        return None

    def _volcano(self, task: TaskInfo) -> bool:
        """Whether the task asks in Volcano's spelling (its devices go to `volcano.sh/gpu-index`)."""
        return any(task.request[c] for c in self._volcano_columns)

    def _annotated(self, task: TaskInfo) -> list[int] | None:
        key = VOLCANO_GPU_INDEX if self._volcano(task) else GPU_INDEX_ANNOTATION
        return device_indexes(task.pod.meta.annotations.get(key, ""))

    def _free(self, rows: Rows, future: bool) -> np.ndarray:
        """Per row and device: usable and free of shares and of whole-GPU pods."""
        sharers, holders = self._sharers[rows], self._holders[rows]
        if future:
            sharers, holders = sharers - self._sharers_releasing[rows], holders - self._holders_releasing[rows]
        return cast("np.ndarray", self._usable[rows] & (sharers == 0) & (holders == 0))

    def _free_whole(self, rows: Rows, future: bool) -> np.ndarray:
        """Devices free of shares and of whole-GPU pods, per row."""
        return cast("np.ndarray", self._free(rows, future).sum(axis=1))

    def _share_room(self, rows: Rows, memory: int, future: bool) -> tuple[np.ndarray, np.ndarray]:
        """Per row and device: whether a share of `memory` may go there, and how full the
        device would be after it (0..1)."""
        used, holders, total = self._used[rows], self._holders[rows], self._total[rows]
        if future:
            used, holders = used - self._used_releasing[rows], holders - self._holders_releasing[rows]
        after = used + memory
        room = (after <= total) & self._usable[rows] & (holders == 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            fullness = np.where(total > 0, after / total, 0.0)
        return room, fullness

    def _choose_share(self, row: int, memory: int, future: bool) -> int:
        room, fullness = self._share_room(np.array([row]), memory, future)
        room, fullness = room[0], fullness[0]
        if not room.any():  # placed without the predicate (or annotated elsewhere): least full
            return int(np.argmin(np.where(self._total[row] > 0, fullness, np.inf)))
        preference = fullness if self._binpack else -fullness
        return int(np.argmax(np.where(room, preference, -np.inf)))

    def _choose_whole(self, row: int, whole: int, future: bool) -> list[int]:
        """The lowest-numbered free devices; when too few are free (placed without the
        predicate), the lowest-numbered usable ones make up the rest."""
        free = np.flatnonzero(self._free(np.array([row]), future)[0]).tolist()
        if len(free) < whole:
            free += [d for d in np.flatnonzero(self._usable[row]).tolist() if d not in free]
        return free[:whole]

    def _hold(self, task: TaskInfo, row: int, devices: list[int] | None, releasing: bool) -> _Holding:
        whole, memory = self._asks(task) or (0, 0)
        count = int(self._count[row])
        if devices is not None and not all(0 <= d < count for d in devices):
            devices = None
        if memory:
            device = devices[0] if devices else self._choose_share(row, memory, future=False)
            holding = _Holding(row, [device], memory)
            self._used[row, device] += memory
            self._sharers[row, device] += 1
        else:
            if devices is None or len(devices) != whole:
                devices = self._choose_whole(row, whole, future=False)
            holding = _Holding(row, list(devices), 0)
            self._holders[row, holding.devices] += 1
        self._held[task.uid] = holding
        if releasing:
            self._mark_releasing(holding, +1)
        return holding

    def _mark_releasing(self, holding: _Holding, sign: int) -> None:
        holding.releasing = sign > 0
        if holding.memory:
            self._used_releasing[holding.row, holding.devices[0]] += sign * holding.memory
            self._sharers_releasing[holding.row, holding.devices[0]] += sign
        else:
            self._holders_releasing[holding.row, holding.devices] += sign

    def _release(self, uid: str) -> None:
        holding = self._held.pop(uid)
        if holding.releasing:
            self._mark_releasing(holding, -1)
        if holding.memory:
            self._used[holding.row, holding.devices[0]] -= holding.memory
            self._sharers[holding.row, holding.devices[0]] -= 1
        else:
            self._holders[holding.row, holding.devices] -= 1

    def _record(self, task: TaskInfo, holding: _Holding) -> None:
        """Leave the devices chosen for the binder to write on the pod."""
        session = self._session
        if self._volcano(task):
            session.pod_annotations[task.uid] = {
                VOLCANO_GPU_INDEX: ",".join(str(d) for d in holding.devices),
                VOLCANO_PREDICATE_TIME: str(int(session.now * 1e9)),
            }
        elif holding.memory:
            session.pod_annotations[task.uid] = {GPU_INDEX_ANNOTATION: str(holding.devices[0])}

    def _on_allocate(self, task: TaskInfo) -> None:
        holding = self._held.get(task.uid)
        if holding is not None:
            if holding.releasing and task.status is not TaskStatus.RELEASING:  # an eviction undone
                self._mark_releasing(holding, -1)
            return
        wanted = self._asks(task)
        if wanted is not None and task.status in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED):
            row = self._rows[task.node]
            # A pipelined task goes where the evicted tasks' devices will be free.
            future = task.status is TaskStatus.PIPELINED
            whole, memory = wanted
            devices = [self._choose_share(row, memory, future)] if memory else self._choose_whole(row, whole, future)
            self._record(task, self._hold(task, row, devices, False))

    def _on_deallocate(self, task: TaskInfo) -> None:
        holding = self._held.get(task.uid)
        if holding is None:
            return
        if task.status is TaskStatus.RELEASING:
            if not holding.releasing:
                self._mark_releasing(holding, +1)
        else:  # a placement undone
            self._release(task.uid)
            self._session.pod_annotations.pop(task.uid, None)

    # -- callbacks -----------------------------------------------------------------------------

    def _predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        count = self._count[rows]
        wanted = self._asks(task)
        if wanted is None:
            return np.ones(len(count), dtype=bool)
        whole, memory = wanted
        assumed_free = nodes.assumed_free
        future = assumed_free is not None
        if memory:
            if whole > 1:
                return np.zeros(len(count), dtype=bool)
            fits = self._share_room(rows, memory, future)[0].any(axis=1)
            capacity = ((self._total[rows] >= memory) & self._usable[rows]).any(axis=1)
        else:
            fits = self._free_whole(rows, future) >= whole
            capacity = self._usable[rows].sum(axis=1) >= whole
        if assumed_free is not None:
            fits = np.where(assumed_free[rows], capacity, fits)
        return cast("np.ndarray", fits)  # .any(axis=1) of a 2-d array is an array; numpy types it "bool or array"

    def _explain(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        wanted = self._asks(task)
        refused = int((~self._predicate(task, nodes, slice(None)) & nodes.schedulable).sum())
        if wanted is None or not refused:
            return Counter()
        whole, memory = wanted
        if memory and whole > 1:
            return Counter({"a GPU memory share cannot span more than one GPU": refused})
        reason = (
            "node(s) without a GPU that has the memory share free"
            if memory
            else "node(s) without enough free whole GPUs"
        )
        return Counter({reason: refused})

    def _score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        count = self._count[rows]
        wanted = self._asks(task)
        if wanted is None:
            return np.zeros(len(count))
        whole, memory = wanted
        if memory:
            room, fullness = self._share_room(rows, memory, False)
            if self._binpack:  # the fullest device it fits on
                best = np.where(room, fullness, -np.inf).max(axis=1)
                score = np.where(np.isfinite(best), best, 0.0)
            else:  # the emptiest node, all its devices' memory together
                total = self._total[rows].sum(axis=1)
                with np.errstate(divide="ignore", invalid="ignore"):
                    after = (self._used[rows].sum(axis=1) + memory) / total
                score = np.where(room.any(axis=1), 1.0 - after, 0.0)
        else:
            usable = self._usable[rows].sum(axis=1)
            free = self._free_whole(rows, False)
            with np.errstate(divide="ignore", invalid="ignore"):
                taken = np.where(usable > 0, (usable - free + whole) / usable, 0.0)
            score = np.where(free >= whole, taken if self._binpack else 1.0 - taken, 0.0)
        return np.clip(score, 0.0, 1.0) * MAX_SCORE * self._weight


class SharedDevices:
    """One kind of HAMi-shared device (NVIDIA vGPU, an Ascend vNPU type): per node the cards its
    registration annotation lists with what the pods on it use, a predicate and a score for the
    pods asking for it, and the assignment written on each placed pod. A subclass reads the
    node's registration and the pod's assignment and says what fits (a plain decision function
    of `vgpu.py` or `ascend.py`). A node whose registration cannot be read takes none of these
    pods and gets a Warning event saying why; every other node and pod is scheduled as usual."""

    label = ""  # what `explain` prefixes its reasons with

    def __init__(self, session: Session, policy: str, weight: float) -> None:
        self.session, self.policy, self.weight = session, policy, weight
        self.cards: dict[int, tuple[str, list[Card]]] = {}  # row -> (mode, cards)
        self.held: dict[str, int] = {}  # task uid -> row
        self.releasing: dict[int, set[str]] = {}  # row -> uids being evicted
        self._asks: dict[str, bool] = {}  # per placement class
        nodes = session.nodes
        for row, node in enumerate(nodes.nodes):
            try:
                found = self.read_node(node)
            except ValueError as error:
                message = f"{error}; the node takes no {self.label} pod"
                session.record_event("Node", "", node.name, "Warning", "InvalidDeviceRegistration", message)
                continue
            if found is None:
                continue
            self.cards[row] = found
            for task in nodes.tasks[row].values():
                assigned = self.assigned(task) if self.asks(task) else []
                if assigned:
                    self.count(task, *found, assigned)
                    self.held[task.uid] = row
                    if task.status is TaskStatus.RELEASING:
                        self.releasing.setdefault(row, set()).add(task.uid)

    # -- what a kind of device says ---------------------------------------------------------------

    def read_node(self, node: Node) -> tuple[str, list[Card]] | None:
        """The node's sharing mode and cards; None when it has none of this kind; ValueError
        (the event's message) when its registration cannot be read."""
        raise NotImplementedError

    def asks_spec(self, pod_spec: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def assigned(self, task: TaskInfo) -> list[list[ContainerDevice]]:
        """The cards the pod's assignment annotation names, per container."""
        raise NotImplementedError

    def decide(self, task: TaskInfo, mode: str, cards: list[Card]) -> Fit:
        raise NotImplementedError

    def annotations(self, node: str, task: TaskInfo, verdict: Fit) -> dict[str, str]:
        """What the binder writes on the placed pod."""
        raise NotImplementedError

    def request_key(self, task: TaskInfo) -> Hashable:
        """What `decide` reads of the pod beyond its placement class."""
        raise NotImplementedError

    def count(self, task: TaskInfo, mode: str, cards: list[Card], devices: Sequence[Sequence[ContainerDevice]]) -> None:
        """Count a pod's assigned cards on its node's (of the node's sharing mode)."""
        raise NotImplementedError

    def group(self, task: TaskInfo) -> str:
        return ""

    # -- the session's callbacks --------------------------------------------------------------------

    def register(self) -> None:
        session = self.session
        # A device pod's answers depend on its containers' requests and its annotations, which
        # its placement class does not cover.
        session.add_class_key_fn(lambda task: self.request_key(task) if self.asks(task) else None)
        session.add_predicate_fn(self.predicate, self.explain, applies=self.asks)
        if self.weight:
            session.add_node_order_fn(self.score, applies=self.asks)
        session.add_event_handler(self.on_allocate, self.on_deallocate)

    def asks(self, task: TaskInfo) -> bool:
        found = self._asks.get(task.placement)
        if found is None:
            found = self._asks[task.placement] = self.asks_spec(task.pod.spec)
        return found

    def _cards(self, row: int, nodes: NodeTable | None, future: bool) -> tuple[str, list[Card]] | None:
        """The row's cards as the question sees them: as they are; without the pods being evicted
        (`future`, or a what-if view); without any pod on the rows a view assumes freed."""
        found = self.cards.get(row)
        if found is None:
            return None
        mode, cards = found
        if nodes is not None and nodes.assumed_free is not None:
            if nodes.assumed_free[row]:
                return mode, [card.unused() for card in cards]
            future = True
        gone = self.releasing.get(row) if future else None
        if not gone:
            return found
        copies = [card.copy() for card in cards]
        for uid in gone:
            remove_assigned(copies, uid)
        return mode, copies

    def fit(self, task: TaskInfo, row: int, nodes: NodeTable | None = None, future: bool = False) -> Fit:
        found = self._cards(row, nodes, future)
        if found is None:
            return Fit(False, reason=f"node has no registered {self.label}")
        return self.decide(task, *found)

    def predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        return np.array([self.fit(task, row, nodes).fits for row in np.arange(len(nodes))[rows].tolist()], dtype=bool)

    def explain(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        reasons: Counter[str] = Counter()
        for row in np.flatnonzero(nodes.schedulable).tolist():
            verdict = self.fit(task, row, nodes)
            if not verdict.fits:
                reasons[f"{self.label}: {verdict.reason}"] += 1
        return reasons

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        # Volcano rounds the device score to a whole number before weighting it.
        return np.array(
            [np.floor(self.fit(task, row).score + 0.5) * self.weight for row in np.arange(len(nodes))[rows].tolist()],
            dtype=np.float64,
        )

    def on_allocate(self, task: TaskInfo) -> None:
        row = self.held.get(task.uid)
        if row is not None:
            if task.status is not TaskStatus.RELEASING:  # an eviction undone
                self.releasing.get(row, set()).discard(task.uid)
            return
        if not self.asks(task) or task.status not in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED):
            return
        row = self.session.nodes.index[task.node]
        if row not in self.cards:
            return
        # A pipelined task goes where the evicted pods' cards will be free.
        verdict = self.fit(task, row, future=task.status is TaskStatus.PIPELINED)
        if not verdict.fits:
            return  # placed without this predicate: nothing to assign
        self.count(task, *self.cards[row], verdict.devices)
        self.held[task.uid] = row
        written = self.session.pod_annotations.setdefault(task.uid, {})
        written.update(self.annotations(self.session.nodes.names[row], task, verdict))

    def on_deallocate(self, task: TaskInfo) -> None:
        row = self.held.get(task.uid)
        if row is None:
            return
        if task.status is TaskStatus.RELEASING:
            self.releasing.setdefault(row, set()).add(task.uid)
            return
        remove_assigned(self.cards[row][1], task.uid)  # a placement undone
        del self.held[task.uid]
        self.releasing.get(row, set()).discard(task.uid)
        self.session.pod_annotations.pop(task.uid, None)


class VirtualGPUs(SharedDevices):
    """Volcano's vGPU device (HAMi-core sharing; `scheduler/framework/vgpu.py` decides). The
    policy is Volcano's: `binpack`, `spread`, or none (cards tried from the highest index)."""

    label = "vGPU"

    def __init__(
        self,
        session: Session,
        policy: str,
        weight: float,
        config: device_config.NvidiaConfig = device_config.DEFAULT_DEVICE_CONFIG.nvidia,
        rules: tuple[dict[str, str], ...] = (),
    ) -> None:
        self.config, self.rules = config, rules  # read by read_node and add_assigned from here on
        super().__init__(session, policy, weight)

    def read_node(self, node: Node) -> tuple[str, list[Card]] | None:
        annotation = node.meta.annotations.get(vgpu.REGISTER)
        config = self.config
        names = (config.resource_count_name, config.resource_memory_name, config.resource_core_name)
        if annotation is None or not all(node.allocatable.get(name, 0) > 0 for name in names):
            return None
        decoded = vgpu.decode_node(annotation, config)
        if decoded is None:
            raise ValueError(
                f"{vgpu.REGISTER} cannot be read (cards as uuid,count,memory,type,health,mode separated by ':')"
            )
        return decoded

    def asks_spec(self, pod_spec: Mapping[str, Any]) -> bool:
        return vgpu.has_vgpu_request(pod_spec, self.config)

    def assigned(self, task: TaskInfo) -> list[list[ContainerDevice]]:
        return vgpu.decode_pod_devices(task.pod.meta.annotations.get(vgpu.ASSIGNED_IDS, ""))

    def count(self, task: TaskInfo, mode: str, cards: list[Card], devices: Sequence[Sequence[ContainerDevice]]) -> None:
        factor = self.config.gpu_memory_factor
        vgpu.add_assigned(cards, task.uid, self.group(task), devices, mode, self.exclusive(task), factor)

    def group(self, task: TaskInfo) -> str:
        return vgpu.pod_group_key(task.namespace, task.pod.meta.annotations)

    def exclusive(self, task: TaskInfo) -> frozenset[int]:
        """The exclusivity rules the task's labels match."""
        return vgpu.matching_rules(task.pod.meta.labels, self.rules) if self.rules else frozenset()

    def request_key(self, task: TaskInfo) -> Hashable:
        annotations = task.pod.meta.annotations
        read = (vgpu.MODE, vgpu.USE_TYPE, vgpu.NOUSE_TYPE, vgpu.USE_UUID, vgpu.NOUSE_UUID, vgpu.GROUP_POLICY)
        # Under the spread-group policy the answers depend on the pod's PodGroup too.
        return (
            tuple(vgpu.container_requests(task.pod.spec, self.config)),
            tuple(annotations.get(key) for key in read),
            self.group(task),
            self.exclusive(task),
        )

    def decide(self, task: TaskInfo, mode: str, cards: list[Card]) -> Fit:
        requests = vgpu.container_requests(task.pod.spec, self.config)
        annotations, group, factor = task.pod.meta.annotations, self.group(task), self.config.gpu_memory_factor
        return vgpu.fit(cards, mode, requests, annotations, group, self.policy, self.exclusive(task), factor)

    def annotations(self, node: str, task: TaskInfo, verdict: Fit) -> dict[str, str]:
        return vgpu.assignment_annotations(node, verdict.devices, self.session.now)


class AscendNPUs(SharedDevices):
    """One Ascend vNPU type of the device configuration (Volcano's HAMi Ascend device;
    `scheduler/framework/ascend.py` decides): its NPUs on the nodes that register them and
    allocate its resource, for pods asking for its resource or its memory."""

    def __init__(self, session: Session, policy: str, weight: float, config: VNPUConfig, hami_core: bool) -> None:
        self.config, self.hami_core, self.label = config, hami_core, config.common_word
        super().__init__(session, policy, weight)

    def read_node(self, node: Node) -> tuple[str, list[Card]] | None:
        config = self.config
        annotation = node.meta.annotations.get(ascend.register_annotation(config))
        if annotation is None or node.allocatable.get(config.resource_name, 0) <= 0:
            return None
        cards = ascend.decode_node(config, annotation)
        return (ascend.node_mode(node.meta.annotations, self.hami_core), cards) if cards else None

    def asks_spec(self, pod_spec: Mapping[str, Any]) -> bool:
        return ascend.has_request(self.config, pod_spec)

    def assigned(self, task: TaskInfo) -> list[list[ContainerDevice]]:
        return ascend.assigned(self.config, task.pod.meta.annotations)

    def count(self, task: TaskInfo, mode: str, cards: list[Card], devices: Sequence[Sequence[ContainerDevice]]) -> None:
        ascend.add_assigned(cards, task.uid, devices)

    def request_key(self, task: TaskInfo) -> Hashable:
        return (
            tuple(ascend.container_requests(self.config, task.pod.spec)),
            ascend.hami_core_pod(task.pod.meta.annotations),
        )

    def decide(self, task: TaskInfo, mode: str, cards: list[Card]) -> Fit:
        requests = ascend.container_requests(self.config, task.pod.spec)
        return ascend.select(self.config, cards, mode, requests, task.pod.meta.annotations, self.policy)

    def annotations(self, node: str, task: TaskInfo, verdict: Fit) -> dict[str, str]:
        hami_core = ascend.hami_core_pod(task.pod.meta.annotations)
        return ascend.assignment_annotations(self.config, node, verdict.devices, hami_core, self.session.now)


def unconfigured_npus(node: Node, configured: Collection[str]) -> list[str]:
    """The Ascend types the node registers (`hami.io/node-register-Ascend...`) that the device
    configuration does not name."""
    prefix = "hami.io/node-register-"
    return sorted(
        key[len(prefix) :]
        for key in node.meta.annotations
        if key.startswith(prefix + ascend.ASCEND) and key[len(prefix) :] not in configured
    )
