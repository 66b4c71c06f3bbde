"""What HAMi's shared devices have in common (Volcano's pkg/scheduler/api/devices): a card that
several pods share, counted once per pod however many of the pod's containers use it; the
`uuid,type,memory,cores:` form in which a pod's assignment is written (containers separated by
`;`); and the per-card binpack and spread scores. `vgpu.py` (NVIDIA vGPU) and `ascend.py`
(Ascend vNPU) decide with these; the deviceshare plugin keeps them per node.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lahar.api.quantity import QuantityError, parse_quantity
from lahar.scheduler.framework.device_config import Geometry

BINPACK, SPREAD = "binpack", "spread"
MULTIPLIER = 100.0
WHOLE_CARD = 101  # a percentage no request gives: "no percentage asked"


@dataclass(frozen=True)
class ContainerDevice:
    """One card given to one container: `uuid,type,memory,cores` in an assignment annotation."""

    uuid: str
    type: str
    memory: int
    cores: int


@dataclass(frozen=True)
class ContainerRequest:
    """One container's ask: `cards` devices, each with `memory` MiB (0: by percentage) or
    `percentage` of its memory (WHOLE_CARD when memory is asked instead) and `cores`."""

    cards: int
    memory: int
    percentage: int
    cores: int
    type: str


@dataclass
class Usage:
    memory: int = 0
    cores: int = 0
    group: str = ""
    rules: frozenset[int] = frozenset()  # the GPU exclusivity rules the pod matches
    slot: int | None = None  # the MIG instance (its position in the card's geometry) it holds


@dataclass
class Card:
    """One device and what the pods on it use. `sharing`: how many pods may share it; `memory`
    (MiB) and `cores` what it has (`cores`: Ascend's AI cores; vGPU counts percent of 100);
    `network`: the Ascend 910 network it sits on, when the node says. NVIDIA MIG (`vgpu.py`):
    `geometries` its model may be split by, the one in use (-1: none) and the positions taken."""

    index: int
    uuid: str
    sharing: int
    memory: int
    type: str
    healthy: bool = True
    used_pods: int = 0
    used_memory: int = 0
    used_cores: int = 0
    pods: dict[str, Usage] = field(default_factory=dict)
    cores: int = 0
    network: int | None = None
    geometries: tuple[Geometry, ...] = ()
    mig_geometry: int = -1
    mig_taken: set[int] = field(default_factory=set)

    def copy(self) -> Card:
        pods = {uid: replace(usage) for uid, usage in self.pods.items()}
        return replace(self, pods=pods, mig_taken=set(self.mig_taken))

    def unused(self) -> Card:
        """The card with nothing on it."""
        return replace(self, used_pods=0, used_memory=0, used_cores=0, pods={}, mig_geometry=-1, mig_taken=set())

    def add(
        self,
        uid: str,
        memory: int,
        cores: int,
        group: str = "",
        rules: frozenset[int] = frozenset(),
        slot: int | None = None,
    ) -> None:
        """HAMi's AddPod: a pod counts once per card, however many of its containers use it."""
        if uid in self.pods:
            return
        self.pods[uid] = Usage(memory, cores, group, rules, slot)
        self.used_pods += 1
        self.used_memory += memory
        self.used_cores += cores

    def remove(self, uid: str) -> None:
        usage = self.pods.pop(uid, None)
        if usage is not None:
            self.used_pods -= 1
            self.used_memory -= usage.memory
            self.used_cores -= usage.cores
            if usage.slot is not None:
                self.mig_taken.discard(usage.slot)
                if not self.mig_taken:
                    self.mig_geometry = -1


@dataclass(frozen=True)
class Fit:
    """A pod's answer on one node: whether it fits, the cards per container, the score, or why
    not."""

    fits: bool
    devices: tuple[tuple[ContainerDevice, ...], ...] = ()
    score: float = 0.0
    reason: str = ""


def card_score(policy: str, card: Card) -> float:
    """binpack: the share of the card's memory in use × 100; spread: 100 for a card nobody uses;
    0 otherwise, and for a card without memory."""
    if not card.memory:
        return 0.0
    if policy == BINPACK:
        return MULTIPLIER * card.used_memory / card.memory
    if policy == SPREAD:
        return MULTIPLIER if card.used_pods == 0 else 0.0
    return 0.0


# -- the pod's request -----------------------------------------------------------------------------


def _amount(resources: Mapping[str, Any] | None, name: str) -> int | None:
    value = (resources or {}).get(name)
    if value is None:
        return None
    try:
        return parse_quantity(str(value)).value()
    except QuantityError:
        return None


def limits_any(pod_spec: Mapping[str, Any], names: Collection[str]) -> bool:
    """Whether a container's limits name any of `names`."""
    for container in pod_spec.get("containers") or ():
        limits = (container.get("resources") or {}).get("limits") or {}
        if any(name in limits for name in names):
            return True
    return False


def container_requests(
    pod_spec: Mapping[str, Any], type_: str, count: str, memory: str, cores: str, percentage: str = ""
) -> list[ContainerRequest]:
    """Each asking container's request (Volcano's ExtractResourceRequest): `count` devices from
    its limits (1 when only `memory` is limited), `memory`, `percentage` and `cores` from its
    limits, else its requests; a container giving neither memory nor percentage takes each
    device's whole memory. Containers asking for none are left out."""
    found = []
    for container in pod_spec.get("containers") or ():
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        cards = _amount(limits, count)
        if cards is None:
            if _amount(limits, memory) is None:
                continue
            cards = 1
        asked = [_amount(limits, name) for name in (memory, percentage, cores)]
        mib, share, cores_asked = (
            _amount(requests, name) if amount is None else amount
            for amount, name in zip(asked, (memory, percentage, cores), strict=True)
        )
        mib, cores_asked = mib or 0, cores_asked or 0
        share = WHOLE_CARD if share is None or not percentage else share
        if share == WHOLE_CARD and mib == 0:
            share = 100
        found.append(ContainerRequest(cards, mib, share, cores_asked, type_))
    return found


# -- the pod's assignment annotation ----------------------------------------------------------------


def encode_pod_devices(devices: Sequence[Sequence[ContainerDevice]], container_end: str = "") -> str:
    """`uuid,type,memory,cores:` per card, containers separated by `;` (vGPU) or each ended by
    `container_end` (Ascend writes `;` after every container)."""
    containers = ["".join(f"{d.uuid},{d.type},{d.memory},{d.cores}:" for d in container) for container in devices]
    return "".join(part + container_end for part in containers) if container_end else ";".join(containers)


def decode_container_devices(text: str) -> list[ContainerDevice]:
    """One container's cards; entries with missing fields or usage that is not a count are skipped."""
    found = []
    for entry in text.split(":"):
        if "," not in entry:
            continue
        items = entry.split(",")
        if len(items) < 4 or not items[2].isdigit() or not items[3].isdigit():
            continue
        found.append(ContainerDevice(items[0], items[1], int(items[2]), int(items[3])))
    return found


def decode_pod_devices(text: str) -> list[list[ContainerDevice]]:
    return [decode_container_devices(part) for part in text.split(";")] if text else []


def add_assigned(
    cards: Sequence[Card],
    uid: str,
    group: str,
    devices: Sequence[Sequence[ContainerDevice]],
    same: Callable[[str, str], bool],
    rules: frozenset[int] = frozenset(),
    counted: Callable[[Card, ContainerDevice], tuple[int, int | None]] | None = None,
) -> None:
    """Count a pod's assigned cards on the node; `same(card uuid, entry uuid)` matches them
    (entries naming no card of the node are skipped). `counted(card, entry)`: the memory the
    entry counts and the MIG slot it takes (default: the entry's memory, no slot)."""
    for container in devices:
        for device in container:
            for card in cards:
                if card.uuid and same(card.uuid, device.uuid):
                    if uid not in card.pods:
                        memory, slot = counted(card, device) if counted else (device.memory, None)
                        card.add(uid, memory, device.cores, group, rules, slot)
                    break


def remove_assigned(cards: Sequence[Card], uid: str) -> None:
    for card in cards:
        card.remove(uid)
