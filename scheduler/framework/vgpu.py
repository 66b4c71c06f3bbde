"""Virtual GPUs as Volcano's vGPU device (pkg/scheduler/api/devices/nvidia/vgpu, HAMi-core
sharing): the node's cards from its registration annotation, a pod's per-container requests, and
which cards a pod's containers get. Plain functions and small value types, no I/O: the
deviceshare plugin keeps the per-node state and writes the assignment on the pod.

Node: `volcano.sh/node-vgpu-register` lists the cards, `uuid,count,memory,type,health,mode` each,
separated by `:` (count: how many pods may share the card; memory in MiB); the node must also
advertise `volcano.sh/vgpu-number`, `volcano.sh/vgpu-memory` and `volcano.sh/vgpu-cores`.

Pod, per container (limits, else requests): `volcano.sh/vgpu-number` cards (1 when only
`volcano.sh/vgpu-memory` is given), `volcano.sh/vgpu-memory` MiB per card or
`volcano.sh/vgpu-memory-percentage` of each card (a container giving neither takes the whole
card's memory), `volcano.sh/vgpu-cores` percent of each card's cores (100: the card alone).
Annotations: `volcano.sh/vgpu-mode` (the node's sharing mode it needs), `nvidia.com/use-gputype` /
`nvidia.com/nouse-gputype` (card types, case-insensitive substrings), `volcano.sh/vgpu-use-gpuuuid`
/ `volcano.sh/vgpu-nouse-gpuuuid` (exact card UUIDs), `volcano.sh/vgpu-podgroup-policy: spread`
(no two pods of its PodGroup on one card).

Each container's cards are tried in the policy's order (binpack: most memory used first; spread:
fewest pods first; none: highest index first), taking a card that has a free sharing slot, the
memory and the cores, is not taken exclusively, passes the type and UUID filters and holds no pod
of the same spread group. The score sums, per card taken, binpack's used memory share × 100, or
spread's 100 for a card nobody used. A node registering MIG mode takes no vGPU pod (Volcano
splits its cards by the geometries of a ConfigMap Lahar does not read). Unlike Volcano, unhealthy
cards take nothing (Volcano reads the health flag and ignores it), and spread's score is of the
card before the pod (Volcano counts the pod first, so no card ever looks unused and spread scores
every node 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lahar.scheduler.framework import devices as shared
from lahar.scheduler.framework.devices import BINPACK as BINPACK
from lahar.scheduler.framework.devices import MULTIPLIER as MULTIPLIER
from lahar.scheduler.framework.devices import SPREAD as SPREAD
from lahar.scheduler.framework.devices import WHOLE_CARD as WHOLE_CARD
from lahar.scheduler.framework.devices import Card as Card
from lahar.scheduler.framework.devices import ContainerDevice as ContainerDevice
from lahar.scheduler.framework.devices import ContainerRequest as ContainerRequest
from lahar.scheduler.framework.devices import Fit as Fit
from lahar.scheduler.framework.devices import Usage as Usage
from lahar.scheduler.framework.devices import decode_container_devices as decode_container_devices
from lahar.scheduler.framework.devices import decode_pod_devices as decode_pod_devices
from lahar.scheduler.framework.devices import encode_pod_devices as encode_pod_devices
from lahar.scheduler.framework.devices import remove_assigned as remove_assigned

REGISTER = "volcano.sh/node-vgpu-register"
NUMBER = "volcano.sh/vgpu-number"
MEMORY = "volcano.sh/vgpu-memory"
MEMORY_PERCENTAGE = "volcano.sh/vgpu-memory-percentage"
CORES = "volcano.sh/vgpu-cores"
NODE_RESOURCES = (NUMBER, MEMORY, CORES)
# Pod annotations read.
MODE = "volcano.sh/vgpu-mode"
USE_TYPE, NOUSE_TYPE = "nvidia.com/use-gputype", "nvidia.com/nouse-gputype"
USE_UUID, NOUSE_UUID = "volcano.sh/vgpu-use-gpuuuid", "volcano.sh/vgpu-nouse-gpuuuid"
GROUP_POLICY, SPREAD_GROUP = "volcano.sh/vgpu-podgroup-policy", "spread"
KUBE_GROUP, VOLCANO_GROUP = "scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name"
# Pod annotations written at bind (what Volcano's vGPU device plugin reads).
ASSIGNED_NODE = "volcano.sh/vgpu-node"
ASSIGNED_TIME = "volcano.sh/vgpu-time"
ASSIGNED_IDS = "volcano.sh/vgpu-ids-new"
IDS_TO_ALLOCATE = "volcano.sh/devices-to-allocate"
BIND_PHASE = "volcano.sh/bind-phase"
BIND_TIME = "volcano.sh/bind-time"

HAMI_CORE, MIG = "hami-core", "mig"
NVIDIA = "NVIDIA"


# -- reading the node and the pod --------------------------------------------------------------------


def decode_node(value: str) -> tuple[str, list[Card]] | None:
    """The sharing mode and the cards of a registration annotation; None when it cannot be read
    (an entry with fewer than six fields spoils the whole list, as in Volcano)."""
    if ":" not in value:
        return None
    cards: list[Card] = []
    mode = HAMI_CORE
    for index, entry in enumerate(value.split(":")):
        if "," not in entry:
            continue
        items = entry.split(",")
        if len(items) < 6:
            return None
        cards.append(
            Card(
                index,
                items[0],
                _int(items[1]),
                _int(items[2]),
                items[3],
                items[4].strip().lower() in ("true", "1", "t"),
            )
        )
        mode = MIG if items[5] == MIG else HAMI_CORE
    return (mode, cards) if cards else None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def has_vgpu_request(pod_spec: Mapping[str, Any]) -> bool:
    """Whether a container limits `volcano.sh/vgpu-memory` or `volcano.sh/vgpu-number`."""
    return shared.limits_any(pod_spec, (MEMORY, NUMBER))


def container_requests(pod_spec: Mapping[str, Any]) -> list[ContainerRequest]:
    """Each asking container's request (Volcano's ExtractResourceRequest); containers asking for
    no vGPU are left out."""
    return shared.container_requests(pod_spec, NVIDIA, NUMBER, MEMORY, CORES, MEMORY_PERCENTAGE)


def pod_group_key(namespace: str, annotations: Mapping[str, str]) -> str:
    """`namespace/group` of the pod's PodGroup (Kubernetes' annotation first), "" without one."""
    group = annotations.get(KUBE_GROUP) or annotations.get(VOLCANO_GROUP) or ""
    return f"{namespace}/{group}" if group else ""


def check_gpu_type(annotations: Mapping[str, str] | None, card_type: str) -> bool:
    """`nvidia.com/use-gputype` (any listed type within the card's) or, without it,
    `nvidia.com/nouse-gputype` (none listed within it); case-insensitive."""
    annotations = annotations or {}
    upper = card_type.upper()
    if USE_TYPE in annotations:
        return any(value.upper() in upper for value in annotations[USE_TYPE].split(","))
    if NOUSE_TYPE in annotations:
        return not any(value.upper() in upper for value in annotations[NOUSE_TYPE].split(","))
    return True


def uuid_list(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


@dataclass(frozen=True)
class UUIDFilter:
    allow: tuple[str, ...]
    deny: tuple[str, ...]

    @classmethod
    def of(cls, annotations: Mapping[str, str] | None) -> UUIDFilter:
        annotations = annotations or {}
        return cls(tuple(uuid_list(annotations.get(USE_UUID))), tuple(uuid_list(annotations.get(NOUSE_UUID))))

    @property
    def enabled(self) -> bool:
        return bool(self.allow or self.deny)

    def matches(self, uuid: str) -> bool:
        if not uuid and self.enabled:
            return False
        if self.allow and uuid not in self.allow:
            return False
        return uuid not in self.deny


def holds_group(card: Card, group: str) -> bool:
    """Whether a pod of `group` uses the card (one whose usage was given back does not count)."""
    return bool(group) and any(u.group == group and (u.memory or u.cores) for u in card.pods.values())


# -- choosing cards ---------------------------------------------------------------------------------


def policy_order(cards: Sequence[Card], policy: str) -> list[int]:
    """The positions of `cards` in the order the policy tries them."""
    positions = range(len(cards))
    if policy == BINPACK:
        return sorted(positions, key=lambda i: (-cards[i].used_memory, i))
    if policy == SPREAD:
        return sorted(positions, key=lambda i: (cards[i].used_pods, i))
    return list(reversed(positions))


def gpu_score(policy: str, card: Card) -> float:
    return shared.card_score(policy, card)


def fit(
    cards: Sequence[Card],
    mode: str,
    requests: Sequence[ContainerRequest],
    annotations: Mapping[str, str],
    group: str,
    policy: str,
) -> Fit:
    """Which cards each container gets (Volcano's checkNodeGPUSharingPredicateAndScore), on
    copies: `cards` are left as they are. `group` is the pod's PodGroup key."""
    wanted_mode = annotations.get(MODE)
    if wanted_mode is not None and wanted_mode != mode:
        return Fit(False, reason=f"pod required sharing mode {wanted_mode} is not the same as the node mode {mode}")
    if not requests:
        return Fit(True)
    if mode == MIG:  # Volcano's MIG sharing needs its geometry ConfigMap, which Lahar does not read
        return Fit(False, reason="the node's cards are in MIG mode, which this scheduler does not place vGPU pods on")
    trial = [card.copy() for card in cards]
    spread_group = group if annotations.get(GROUP_POLICY) == SPREAD_GROUP else ""
    uuids = UUIDFilter.of(annotations)
    score = 0.0
    given: list[tuple[ContainerDevice, ...]] = []
    for request in requests:
        if request.cards > len(trial):
            return Fit(False, reason="no enough gpu cards on node")
        left, matched, taken = request.cards, False, []
        for i in policy_order(trial, policy):
            card = trial[i]
            if not uuids.matches(card.uuid):
                continue
            matched = True
            memory = card.memory * request.percentage // 100 if request.percentage != WHOLE_CARD else request.memory
            if (
                not card.healthy
                or card.sharing <= card.used_pods
                or (spread_group and holds_group(card, spread_group))
                or card.memory - card.used_memory < memory
                or card.used_cores + request.cores > 100
                or (request.cores == 100 and card.used_pods > 0)
                or (card.used_cores == 100 and request.cores == 0)
                or request.type not in card.type
                or not check_gpu_type(annotations, card.type)
            ):
                continue
            before = gpu_score(policy, card)
            card.used_pods += 1  # HAMi-core's TryAddPod
            card.used_memory += memory
            card.used_cores += request.cores
            score += before if policy == SPREAD else gpu_score(policy, card)
            taken.append(ContainerDevice(card.uuid, request.type, memory, request.cores))
            left -= 1
            if left == 0:
                break
        if left > 0:
            if uuids.enabled and not matched:
                return Fit(
                    False,
                    reason=f"no GPU matches UUID constraints {USE_UUID}={annotations.get(USE_UUID, '')!r}, "
                    f"{NOUSE_UUID}={annotations.get(NOUSE_UUID, '')!r}",
                )
            return Fit(False, reason="not enough gpu fitted on this node")
        given.append(tuple(taken))
    return Fit(True, tuple(given), score)


# -- the pod's assignment annotation ----------------------------------------------------------------


def assignment_annotations(node: str, devices: Sequence[Sequence[ContainerDevice]], now: float) -> dict[str, str]:
    """What the binder writes on the pod (Volcano's Allocate): the node, the cards per container
    twice (the device plugin consumes one copy), the phase `allocating`, and the times."""
    encoded, seconds = encode_pod_devices(devices), str(int(now))
    return {
        ASSIGNED_NODE: node,
        ASSIGNED_TIME: seconds,
        ASSIGNED_IDS: encoded,
        IDS_TO_ALLOCATE: encoded,
        BIND_PHASE: "allocating",
        BIND_TIME: seconds,
    }


def add_assigned(cards: Sequence[Card], uid: str, group: str, devices: Sequence[Sequence[ContainerDevice]]) -> None:
    """Count a pod's assigned cards on the node (a card is matched by the UUID the entry holds,
    as Volcano's vGPU does)."""
    shared.add_assigned(cards, uid, group, devices, lambda card, entry: card in entry)
