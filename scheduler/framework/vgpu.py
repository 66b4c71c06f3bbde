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
spread's 100 for a card nobody used. Unlike Volcano, unhealthy
cards take nothing (Volcano reads the health flag and ignores it), and spread's score is of the
card before the pod (Volcano counts the pod first, so no card ever looks unused and spread scores
every node 0).

The resource names are the device configuration's (`scheduler/framework/device_config.py`,
Volcano's `volcano-vgpu-device-config`); the names above are its defaults.

MIG (a node registering mode `mig`): each card whose type contains a model of the configuration's
`knownMigGeometries` is split by one of that model's geometries (Volcano's dynamic MIG). A card
with nothing on it takes the first geometry, in the written order, that has an instance of at least
the request (× `gpuMemoryFactor`); once a geometry is in use, the card keeps it while any instance
is taken. Within the geometry the smallest instance that holds the request and has a free slot is
given, its lowest free slot, and the card counts the instance's memory (÷ the factor), not the
request. The device a container gets is named `<card uuid>[<group>-<position>]`, the position
counting the geometry's instances in order. Unlike Volcano, which in a geometry in use offers only
kinds of instance already taken (so a 1g.10gb left free beside three taken 2g.20gb of one geometry
is never given), every free instance of the geometry is offered. A card of a model the
configuration does not list falls back to HAMi-core sharing, as in Volcano (the node's mode is its
last card's).

GPU exclusivity (`deviceshare.GPUExclusiveRules`, HAMi-core nodes only): each rule is a set of
label values; a pod carrying all of a rule's labels matches it, and is not given a card that holds
a pod matching one of the same rules (pods of different rules, and pods matching none, share
cards as usual).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from lahar.scheduler.framework import devices as shared
from lahar.scheduler.framework.device_config import Geometry, MigTemplate, NvidiaConfig
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
DEFAULT_NVIDIA = NvidiaConfig()

HAMI_CORE, MIG = "hami-core", "mig"
NVIDIA = "NVIDIA"


# -- reading the node and the pod --------------------------------------------------------------------


def decode_node(value: str, config: NvidiaConfig = DEFAULT_NVIDIA) -> tuple[str, list[Card]] | None:
    """The sharing mode and the cards of a registration annotation; None when it cannot be read
    (an entry with fewer than six fields spoils the whole list, as in Volcano). A card registered
    in MIG mode gets its model's geometries from `config`; without them the card is shared by
    HAMi-core, and the node's mode is its last card's."""
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
        geometries = config.geometries_for(items[3]) if items[5] == MIG else None
        cards.append(
            Card(
                index,
                items[0],
                _int(items[1]),
                _int(items[2]),
                items[3],
                items[4].strip().lower() in ("true", "1", "t"),
                geometries=geometries or (),
            )
        )
        mode = MIG if geometries is not None else HAMI_CORE
    return (mode, cards) if cards else None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def has_vgpu_request(pod_spec: Mapping[str, Any], config: NvidiaConfig = DEFAULT_NVIDIA) -> bool:
    """Whether a container limits the vGPU memory or number resource (`volcano.sh/vgpu-memory`,
    `volcano.sh/vgpu-number` by default)."""
    return shared.limits_any(pod_spec, (config.resource_memory_name, config.resource_count_name))


def container_requests(pod_spec: Mapping[str, Any], config: NvidiaConfig = DEFAULT_NVIDIA) -> list[ContainerRequest]:
    """Each asking container's request (Volcano's ExtractResourceRequest); containers asking for
    no vGPU are left out."""
    names = (config.resource_count_name, config.resource_memory_name, config.resource_core_name)
    return shared.container_requests(pod_spec, NVIDIA, *names, config.resource_memory_percentage_name)


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


# -- GPU exclusivity --------------------------------------------------------------------------------


def parse_exclusive_rules(value: Any) -> tuple[dict[str, str], ...]:
    """`deviceshare.GPUExclusiveRules`: a list of label mappings (none: no rules). Volcano drops
    what it cannot read (a value that is not a list, a label value that is not a string, an empty
    rule) without a word; here each is refused, naming it: dropping a label widens its rule to more
    pods, and an empty rule would match every pod."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"must be a list of label mappings, not {value!r}")
    rules = []
    for i, rule in enumerate(value):
        if not isinstance(rule, Mapping) or not rule:
            raise ValueError(f"rule {i} must be a non-empty mapping of label to value, not {rule!r}")
        for key, label in rule.items():
            if not isinstance(key, str) or not isinstance(label, str):
                raise ValueError(f"rule {i}: label {key!r}: {label!r} must be text (quote numbers and booleans)")
        rules.append(dict(rule))
    return tuple(rules)


def matches_rule(labels: Mapping[str, str] | None, rule: Mapping[str, str]) -> bool:
    """Whether the pod carries every label of the rule with its value."""
    if not labels:
        return False
    return all(labels.get(key) == value for key, value in rule.items())


def matching_rules(labels: Mapping[str, str] | None, rules: Sequence[Mapping[str, str]]) -> frozenset[int]:
    """The indexes of the rules the pod matches."""
    return frozenset(i for i, rule in enumerate(rules) if matches_rule(labels, rule))


def reserved_cards(cards: Sequence[Card], rules: frozenset[int]) -> set[int]:
    """The positions of the cards a pod matching `rules` may not take: those holding a pod that
    matches one of the same rules."""
    if not rules:
        return set()
    return {i for i, card in enumerate(cards) if any(usage.rules & rules for usage in card.pods.values())}


# -- MIG ---------------------------------------------------------------------------------------------


def instance_at(geometry: Geometry, position: int) -> MigTemplate | None:
    """The instance kind of a position in the geometry (positions count instances in order)."""
    start = 0
    for instance in geometry.instances:
        if 0 <= position - start < instance.count:
            return instance
        start += instance.count
    return None


def pick_instance(geometry: Geometry, memory: int, taken: Set[int]) -> tuple[int, int] | None:
    """(position, instance memory) of the smallest instance of at least `memory` with a free
    slot (its lowest); the first written wins among equal sizes. None if there is none."""
    starts = [sum(instance.count for instance in geometry.instances[:i]) for i in range(len(geometry.instances))]
    for i in sorted(range(len(geometry.instances)), key=lambda i: geometry.instances[i].memory):
        instance = geometry.instances[i]
        if instance.memory < memory:
            continue
        free = next((starts[i] + slot for slot in range(instance.count) if starts[i] + slot not in taken), None)
        if free is not None:
            return free, instance.memory
    return None


def find_mig_instance(
    memory: int, geometries: Sequence[Geometry], in_use: int, taken: Set[int]
) -> tuple[int, int, int] | None:
    """(geometry, position, instance memory) for a request of `memory` on a card: within the
    geometry in use, or the first geometry that has such an instance when none is."""
    if in_use >= 0:
        picked = pick_instance(geometries[in_use], memory, taken) if in_use < len(geometries) else None
        return (in_use, *picked) if picked else None
    for index, geometry in enumerate(geometries):
        picked = pick_instance(geometry, memory, frozenset())
        if picked:
            return (index, *picked)
    return None


def encode_mig_id(uuid: str, group: str, position: int) -> str:
    return f"{uuid}[{group}-{position}]"


def decode_mig_id(device: str) -> tuple[str, int] | None:
    """(group, position) of `<uuid>[<group>-<position>]`; None when it is not one (a group name
    may hold dashes: the position is after the last)."""
    start, end = device.find("["), device.find("]")
    if start < 0 or end < start:
        return None
    group, dash, position = device[start + 1 : end].rpartition("-")
    if not dash or not position.isdigit():
        return None
    return group, int(position)


def mig_usage(card: Card, device: str, factor: int) -> tuple[int, int | None]:
    """(memory counted, position) of a MIG device on the card: its instance's memory ÷ the factor;
    nothing for a device naming a group or position the card's geometries lack (as Volcano)."""
    decoded = decode_mig_id(device)
    if decoded is None:
        return 0, None
    group, position = decoded
    index = next((i for i, geometry in enumerate(card.geometries) if geometry.group == group), None)
    instance = instance_at(card.geometries[index], position) if index is not None else None
    if index is None or instance is None:
        return 0, None
    card.mig_geometry = index
    card.mig_taken.add(position)
    return instance.memory // factor, position


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


def try_add_pod(card: Card, memory: int, cores: int, mode: str, memory_factor: int = 1) -> str | None:
    """Count one container's share on a trial card (Volcano's TryAddPod) and name the device it
    gets: the card, or on a MIG node an instance of the card's geometry (counted whole, its memory
    ÷ the factor); None when no instance of the geometry holds the request."""
    device, counted = card.uuid, memory
    if mode == MIG:
        found = find_mig_instance(memory * memory_factor, card.geometries, card.mig_geometry, card.mig_taken)
        if found is None:
            return None
        card.mig_geometry, position, instance_memory = found
        card.mig_taken.add(position)
        device = encode_mig_id(card.uuid, card.geometries[card.mig_geometry].group, position)
        counted = instance_memory // memory_factor
    card.used_pods += 1
    card.used_memory += counted
    card.used_cores += cores
    return device


def fit(
    cards: Sequence[Card],
    mode: str,
    requests: Sequence[ContainerRequest],
    annotations: Mapping[str, str],
    group: str,
    policy: str,
    rules: frozenset[int] = frozenset(),
    memory_factor: int = 1,
) -> Fit:
    """Which cards each container gets (Volcano's checkNodeGPUSharingPredicateAndScore), on
    copies: `cards` are left as they are. `group` is the pod's PodGroup key, `rules` the
    exclusivity rules it matches (HAMi-core nodes only)."""
    wanted_mode = annotations.get(MODE)
    if wanted_mode is not None and wanted_mode != mode:
        return Fit(False, reason=f"pod required sharing mode {wanted_mode} is not the same as the node mode {mode}")
    if not requests:
        return Fit(True)
    trial = [card.copy() for card in cards]
    reserved = reserved_cards(trial, rules) if mode == HAMI_CORE else set()
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
                or i in reserved
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
            device = try_add_pod(card, memory, request.cores, mode, memory_factor)
            if device is None:
                continue
            score += before if policy == SPREAD else gpu_score(policy, card)
            taken.append(ContainerDevice(device, request.type, memory, request.cores))
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


def add_assigned(
    cards: Sequence[Card],
    uid: str,
    group: str,
    devices: Sequence[Sequence[ContainerDevice]],
    mode: str = HAMI_CORE,
    rules: frozenset[int] = frozenset(),
    memory_factor: int = 1,
) -> None:
    """Count a pod's assigned cards on the node (a card is matched by the UUID the entry holds,
    as Volcano's vGPU does; on a MIG node the entry names an instance, which counts with its own
    memory ÷ the factor)."""
    counted = (lambda card, device: mig_usage(card, device.uuid, memory_factor)) if mode == MIG else None
    shared.add_assigned(cards, uid, group, devices, same_card, rules, counted)


def same_card(card: str, entry: str) -> bool:
    """Whether an assignment entry names the card: its UUID within the entry's (a MIG instance's
    name holds its card's UUID)."""
    return card in entry
