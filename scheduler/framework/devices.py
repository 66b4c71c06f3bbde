"""What HAMi's shared devices have in common (Volcano's pkg/scheduler/api/devices): a card that
several pods share, counted once per pod however many of the pod's containers use it; the
`uuid,type,memory,cores:` form in which a pod's assignment is written (containers separated by
`;`); and the per-card binpack and spread scores. `vgpu.py` (NVIDIA vGPU) and `ascend.py`
(Ascend vNPU) decide with these; the deviceshare plugin keeps them per node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

BINPACK, SPREAD = "binpack", "spread"
MULTIPLIER = 100.0


@dataclass(frozen=True)
class ContainerDevice:
    """One card given to one container: `uuid,type,memory,cores` in an assignment annotation."""

    uuid: str
    type: str
    memory: int
    cores: int


@dataclass
class Usage:
    memory: int = 0
    cores: int = 0
    group: str = ""


@dataclass
class Card:
    """One device and what the pods on it use. `sharing`: how many pods may share it; `memory`
    (MiB) and `cores` what it has (`cores`: Ascend's AI cores; vGPU counts percent of 100);
    `network`: the Ascend 910 network it sits on, when the node says."""

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

    def copy(self) -> Card:
        return replace(self, pods={uid: replace(usage) for uid, usage in self.pods.items()})

    def unused(self) -> Card:
        """The card with nothing on it."""
        return replace(self, used_pods=0, used_memory=0, used_cores=0, pods={})

    def add(self, uid: str, memory: int, cores: int, group: str = "") -> None:
        """HAMi's AddPod: a pod counts once per card, however many of its containers use it."""
        if uid in self.pods:
            return
        self.pods[uid] = Usage(memory, cores, group)
        self.used_pods += 1
        self.used_memory += memory
        self.used_cores += cores

    def remove(self, uid: str) -> None:
        usage = self.pods.pop(uid, None)
        if usage is not None:
            self.used_pods -= 1
            self.used_memory -= usage.memory
            self.used_cores -= usage.cores


@dataclass(frozen=True)
class Fit:
    """A pod's answer on one node: whether it fits, the cards per container, the score, or why
    not. `lasting`: the refusal is about the pod or the node's inventory, so evicting pods would
    not change it (Volcano's Error status, against Unschedulable)."""

    fits: bool
    devices: tuple[tuple[ContainerDevice, ...], ...] = ()
    score: float = 0.0
    reason: str = ""
    lasting: bool = False


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
) -> None:
    """Count a pod's assigned cards on the node; `same(card uuid, entry uuid)` matches them
    (entries naming no card of the node are skipped)."""
    for container in devices:
        for device in container:
            for card in cards:
                if card.uuid and same(card.uuid, device.uuid):
                    card.add(uid, device.memory, device.cores, group)
                    break


def remove_assigned(cards: Sequence[Card], uid: str) -> None:
    for card in cards:
        card.remove(uid)
