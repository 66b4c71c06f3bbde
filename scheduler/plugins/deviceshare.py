"""deviceshare: whole GPUs and shares of one GPU's memory (Volcano's deviceshare plugin, GPU
number and GPU share).

A pod asks for whole GPUs with `nvidia.com/gpu: N` or for a share of one GPU's memory with
`lahar.dev/gpu-memory: <bytes>`; a share must fit on ONE device (a pod asking for both a share
and more than one GPU is refused: shares are per device). The node-level totals of both
resources are the one fit rule's business (`NodeTable.fits`); this plugin keeps the per-device
view: for each node a device inventory and, per device, the share memory in use and how many
share pods use it, plus how many devices whole-GPU pods hold. A share goes on a device that
already has shares or, while a device is free of everything, a fresh one; a whole-GPU pod needs
devices free of shares and of other whole-GPU pods.

Inventory: the device count is the node's allocatable `nvidia.com/gpu` (for share-only nodes that
do not advertise it: the fresh report's GPU count, else allocatable `lahar.dev/gpu-memory` ÷ the
`lahar.dev/gpu-memory-per-device` label, else one device). Each device's memory is the fresh
report's (NVML's total), else the label, else allocatable `lahar.dev/gpu-memory` ÷ count.

Pods already on the node count on the device their `lahar.dev/gpu-index` annotation names
(written at bind from `session.device_choices`, where this plugin leaves the device chosen
for each share placed in the session); a share pod without a usable annotation counts on the
device this plugin would have chosen. Evicted pods (releasing) still hold their device, except
on a what-if view (preempt, reclaim), which counts them gone; on the rows a view marks
`assumed_free` only the inventory is checked.

Score (`deviceshare.SchedulePolicy`): `binpack` (default) prefers the node whose device would be
fullest after the placement and puts a share on the fullest device it fits; `spread` prefers the
node with the most GPU memory free over all its devices and puts a share on the emptiest device;
whole GPUs likewise by the devices left free. × 100 × `deviceshare.ScheduleWeight`. Pods
without GPUs get no opinion.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar, cast

import numpy as np

from lahar.api.node import Node
from lahar.api.quantity import QuantityError, parse_quantity
from lahar.rpc.report import NodeReport
from lahar.scheduler.framework.plugin import Arguments, Plugin, boolean, choice, number, register_plugin
from lahar.scheduler.framework.session import REPORT_STALENESS_SECONDS, Session
from lahar.scheduler.model import NodeTable, Rows, TaskInfo, TaskStatus

GPU = "nvidia.com/gpu"
GPU_MEMORY = "lahar.dev/gpu-memory"
GPU_INDEX_ANNOTATION = "lahar.dev/gpu-index"
PER_DEVICE_LABEL = "lahar.dev/gpu-memory-per-device"
BINPACK, SPREAD = "binpack", "spread"
MAX_SCORE = 100.0


def device_memory(node: Node, report: NodeReport | None, label: str | None) -> list[int]:
    """The memory of each of the node's devices, in bytes (an empty list: no devices)."""
    allocatable = node.allocatable
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


@dataclass
class _Holding:
    """What a task holds on its node: one device's share, or a number of whole devices."""

    row: int
    device: int  # -1 for whole devices
    memory: int
    whole: int
    releasing: bool = False


@register_plugin
class DeviceShare(Plugin):
    name = "deviceshare"
    ARGUMENTS: ClassVar[Arguments] = {
        "deviceshare.SchedulePolicy": choice(BINPACK, SPREAD),
        "deviceshare.ScheduleWeight": number(minimum=0),
        "deviceshare.GPUSharingEnable": boolean,
        "deviceshare.GPUNumberEnable": boolean,
        "staleness": number(minimum=0),
    }

    def on_session_open(self, session: Session) -> None:
        columns = session.resources.column
        self._gpu_column, self._memory_column = columns.get(GPU), columns.get(GPU_MEMORY)
        self._sharing = bool(self.argument("deviceshare.GPUSharingEnable", True))
        self._numbers = bool(self.argument("deviceshare.GPUNumberEnable", True))
        if self._gpu_column is None and self._memory_column is None:
            return  # no node has GPUs and no pod asks for one
        self._binpack = self.argument("deviceshare.SchedulePolicy", BINPACK) == BINPACK
        self._weight = float(self.argument("deviceshare.ScheduleWeight", 1.0))
        self._data = session.device_choices
        self._rows = session.nodes.index
        self._build(session)
        session.add_predicate_fn(self._predicate, self._explain)
        if self._weight:
            session.add_node_order_fn(self._score)
        session.add_event_handler(self._on_allocate, self._on_deallocate)

    # -- state ---------------------------------------------------------------------------------

    def _build(self, session: Session) -> None:
        nodes = session.nodes
        gpu_columns = [c for c in (self._gpu_column, self._memory_column) if c is not None]
        reports = session.fresh_reports(float(self.argument("staleness", REPORT_STALENESS_SECONDS)))
        inventory: dict[int, list[int]] = {}
        for row in np.flatnonzero((nodes.allocatable[:, gpu_columns] > 0).any(axis=1)):
            inventory[int(row)] = device_memory(nodes.nodes[row], reports[row], nodes.labels[row].get(PER_DEVICE_LABEL))
        width = max((len(devices) for devices in inventory.values()), default=0) or 1
        n = len(nodes)
        self._count = np.zeros(n, dtype=np.int64)
        self._total = np.zeros((n, width), dtype=np.int64)  # padding devices have no memory
        # Per device: share memory held and share pods on it, and the part of both being released;
        # per node: devices whole-GPU pods hold, and the part of them being released.
        self._used, self._used_releasing = np.zeros((n, width), dtype=np.int64), np.zeros((n, width), dtype=np.int64)
        self._sharers, self._sharers_releasing = (
            np.zeros((n, width), dtype=np.int64),
            np.zeros((n, width), dtype=np.int64),
        )
        self._whole, self._whole_releasing = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for at, devices in inventory.items():
            self._count[at] = len(devices)
            self._total[at, : len(devices)] = devices
        self._held: dict[str, _Holding] = {}
        placed = (nodes.used + nodes.be_used)[:, gpu_columns].any(axis=1)
        for row in np.flatnonzero(placed):
            for task in nodes.tasks[row].values():
                if self._asks(task):
                    self._hold(task, int(row), _annotated_device(task), task.status is TaskStatus.RELEASING)

    def _asks(self, task: TaskInfo) -> tuple[int, int] | None:
        """(whole GPUs, share memory) the task asks this plugin about, None if nothing."""
        gpus = int(task.request[self._gpu_column]) if self._gpu_column is not None else 0
        memory = int(task.request[self._memory_column]) if self._memory_column is not None else 0
        if memory and self._sharing:
            return gpus, memory
        if gpus and not memory and self._numbers:
            return gpus, 0
        return None

    def _free_whole(self, rows: Rows, future: bool) -> np.ndarray:
        """Devices free of shares and of whole-GPU pods, per row."""
        sharers, whole = self._sharers[rows], self._whole[rows]
        if future:
            sharers, whole = sharers - self._sharers_releasing[rows], whole - self._whole_releasing[rows]
        return self._count[rows] - whole - (sharers > 0).sum(axis=1)

    def _share_room(self, rows: Rows, memory: int, future: bool) -> tuple[np.ndarray, np.ndarray]:
        """Per row and device: whether a share of `memory` may go there, and how full the
        device would be after it (0..1)."""
        used, sharers, total = self._used[rows], self._sharers[rows], self._total[rows]
        if future:
            used, sharers = used - self._used_releasing[rows], sharers - self._sharers_releasing[rows]
        after = used + memory
        room = (after <= total) & (total > 0) & ((sharers > 0) | (self._free_whole(rows, future) > 0)[:, None])
        with np.errstate(divide="ignore", invalid="ignore"):
            fullness = np.where(total > 0, after / total, 0.0)
        return room, fullness

    def _choose_device(self, row: int, memory: int, future: bool) -> int:
        room, fullness = self._share_room(np.array([row]), memory, future)
        room, fullness = room[0], fullness[0]
        if not room.any():  # placed without the predicate (or annotated elsewhere): least full
            return int(np.argmin(np.where(self._total[row] > 0, fullness, np.inf)))
        preference = fullness if self._binpack else -fullness
        return int(np.argmax(np.where(room, preference, -np.inf)))

    def _hold(self, task: TaskInfo, row: int, device: int | None, releasing: bool) -> _Holding:
        whole, memory = self._asks(task) or (0, 0)
        if memory:
            if device is None or not 0 <= device < self._count[row]:
                device = self._choose_device(row, memory, future=False)
            holding = _Holding(row, device, memory, 0)
            self._used[row, device] += memory
            self._sharers[row, device] += 1
        else:
            holding = _Holding(row, -1, 0, whole)
            self._whole[row] += whole
        self._held[task.uid] = holding
        if releasing:
            self._mark_releasing(holding, +1)
        return holding

    def _mark_releasing(self, holding: _Holding, sign: int) -> None:
        holding.releasing = sign > 0
        if holding.device >= 0:
            self._used_releasing[holding.row, holding.device] += sign * holding.memory
            self._sharers_releasing[holding.row, holding.device] += sign
        else:
            self._whole_releasing[holding.row] += sign * holding.whole

    def _release(self, uid: str) -> None:
        holding = self._held.pop(uid)
        if holding.releasing:
            self._mark_releasing(holding, -1)
        if holding.device >= 0:
            self._used[holding.row, holding.device] -= holding.memory
            self._sharers[holding.row, holding.device] -= 1
        else:
            self._whole[holding.row] -= holding.whole

    def _on_allocate(self, task: TaskInfo) -> None:
        holding = self._held.get(task.uid)
        if holding is not None:
            if holding.releasing and task.status is not TaskStatus.RELEASING:  # an eviction undone
                self._mark_releasing(holding, -1)
            return
        wanted = self._asks(task)
        if wanted is not None and task.status in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED):
            row = self._rows[task.node]
            # A pipelined task goes where the evicted tasks' shares will be free.
            device = self._choose_device(row, wanted[1], task.status is TaskStatus.PIPELINED) if wanted[1] else None
            holding = self._hold(task, row, device, False)
            if holding.device >= 0:
                self._data[task.uid] = holding.device

    def _on_deallocate(self, task: TaskInfo) -> None:
        holding = self._held.get(task.uid)
        if holding is None:
            return
        if task.status is TaskStatus.RELEASING:
            if not holding.releasing:
                self._mark_releasing(holding, +1)
        else:  # a placement undone
            self._release(task.uid)
            self._data.pop(task.uid, None)

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
            capacity = (self._total[rows] >= memory).any(axis=1)
        else:
            fits = self._free_whole(rows, future) >= whole
            capacity = count >= whole
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
            with np.errstate(divide="ignore", invalid="ignore"):
                taken = np.where(count > 0, (count - self._free_whole(rows, False) + whole) / count, 0.0)
            score = np.where(self._free_whole(rows, False) >= whole, taken if self._binpack else 1.0 - taken, 0.0)
        return np.clip(score, 0.0, 1.0) * MAX_SCORE * self._weight


def _annotated_device(task: TaskInfo) -> int | None:
    value = task.pod.meta.annotations.get(GPU_INDEX_ANNOTATION, "")
    return int(value) if value.isdigit() else None
