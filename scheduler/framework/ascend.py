"""Ascend NPUs as Volcano's HAMi Ascend device (pkg/scheduler/api/devices/ascend/hami): the
device types of the device configuration's `vnpus` section, a node's NPUs of one type from its
registration annotation, a pod's per-container requests, and which NPUs a pod's containers get.
Plain functions and small value types, no I/O: the deviceshare plugin keeps the per-node state
(one `AscendNPUs` per configured type) and writes the assignment on the pod.

Device types (`vnpus`, Volcano's VNPUConfig): per type a `commonWord` (Ascend910B3), the pod
resource `resourceName` (huawei.com/Ascend910B3) and `resourceMemoryName`
(huawei.com/Ascend910B3-memory, MiB per NPU), the cores resource `<resourceName>-core`, the
memory one NPU allocates whole (`memoryAllocatable`) and the most a request may ask
(`memoryCapacity`), and the virtual templates (vNPU slices: name, memory, AI cores) a request is
rounded up to. Without a configuration, Volcano's default: Ascend310P alone.

Node: `hami.io/node-register-<commonWord>`, a JSON list of NPUs (`id`, `index`, `count`: how
many pods may share it, `devmem` MiB, `devcore` AI cores, optional `health` and
`custominfo.NetworkID`), on a node whose allocatable has the type's resource.
`hami-vnpu-core: "true"|"false"` on the node overrides the configuration's `hamiVnpuCore` (whether
the node runs HAMi's soft slicing).

Pod, per container (limits, else requests): `<resourceName>` NPUs (1 when only the memory is
given), `<resourceMemoryName>` MiB per NPU (none: the NPU's whole memory), `<resourceName>-core`.
A pod annotated `huawei.com/vnpu-mode: hami-core` is soft-sliced: memory and cores as asked
(cores out of 100), only on nodes running hami-core. Otherwise memory is rounded up to the
smallest template that holds it (above every template, the whole NPU; above `memoryCapacity`,
nothing), cores are out of the NPU's `devcore`, and a container asking for more than one NPU must
take them whole.

Each container's NPUs are tried best first by the policy (binpack: the most used memory share;
spread: unused first; none: registration order), skipping those an earlier container of the pod
took, taking an NPU with a free sharing slot, the memory and the cores. On an Ascend910 type whose
every NPU names its network, all fitting NPUs are gathered and the request is taken from the
networks with the most of them first. Score: per NPU taken, binpack's used memory share × 100 or
spread's 100 for an unused NPU, plus, on such an Ascend910 node, 10 × the share of the pod's NPUs
on its most used network.

Unlike Volcano: an NPU registered `"health": false` takes nothing (Volcano ignores the flag), ties
between equally scored NPUs go by registration order (Volcano's map order is random), the score
counts every NPU taken (Volcano scores each container's first NPU only, so its network bonus is
always 10 for a one-container pod), and a registration that cannot be read is reported (the
deviceshare plugin's Warning event on the Node).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from lahar.scheduler.framework import devices as shared
from lahar.scheduler.framework.device_config import VNPUConfig
from lahar.scheduler.framework.devices import BINPACK as BINPACK
from lahar.scheduler.framework.devices import SPREAD as SPREAD
from lahar.scheduler.framework.devices import Card, ContainerDevice, ContainerRequest, Fit

# Pod and node annotations read.
MODE, HAMI_CORE, TEMPLATE = "huawei.com/vnpu-mode", "hami-core", "template"
NODE_HAMI_CORE = "hami-vnpu-core"
# Pod annotations written at bind (what HAMi's Ascend device plugin reads).
ASSIGNED_NODE = "hami.io/vgpu-node"
ASSIGNED_TIME = "hami.io/vgpu-time"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
PREDICATE_TIME = "predicate-time"

ASCEND, ASCEND910 = "Ascend", "Ascend910"
NETWORK_WEIGHT = 10.0
NETWORK_ID = "NetworkID"


def core_resource(config: VNPUConfig) -> str:
    return f"{config.resource_name}-core"


def register_annotation(config: VNPUConfig) -> str:
    return f"hami.io/node-register-{config.common_word}"


def to_allocate_annotation(config: VNPUConfig) -> str:
    return f"hami.io/{config.common_word}-devices-to-allocate"


def allocated_annotation(config: VNPUConfig) -> str:
    return f"hami.io/{config.common_word}-devices-allocated"


def runtime_annotation(config: VNPUConfig) -> str:
    return f"huawei.com/{config.common_word}"


def trim_memory(config: VNPUConfig, memory: int) -> tuple[int, str]:
    """The memory a request of `memory` MiB takes and the template's name: the smallest template
    that holds it; above them all, the whole NPU's allocatable memory (no name); above the
    capacity, 0."""
    for template in sorted(config.templates, key=lambda t: t.memory):
        if memory <= template.memory:
            return template.memory, template.name
    if memory <= config.memory_capacity:
        return config.memory_allocatable, ""
    return 0, ""


# -- reading the node and the pod --------------------------------------------------------------------


def node_mode(annotations: Mapping[str, str], default_hami_core: bool) -> str:
    """HAMI_CORE when the node runs HAMi's soft slicing (`hami-vnpu-core`, else the default)."""
    value = annotations.get(NODE_HAMI_CORE)
    hami_core = default_hami_core if value is None else value == "true"
    return HAMI_CORE if hami_core else TEMPLATE


def _field(entry: Mapping[str, Any], key: str, where: str, kind: type, required: bool = True) -> Any:
    """`entry[key]` checked to be a `kind` (a whole number not below 0, or a non-empty string);
    an optional one left out is `kind()`."""
    value = entry.get(key)
    if value is None:
        if required:
            raise ValueError(f"{where}: {key} is missing")
        return kind()
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{where}: {key} must be a whole number not below 0, not {value!r}")
    if kind is str and (not isinstance(value, str) or not value):
        raise ValueError(f"{where}: {key} must be a non-empty string, not {value!r}")
    return value


def decode_node(config: VNPUConfig, value: str) -> list[Card]:
    """The NPUs of a registration annotation (an empty list: none). ValueError says what is
    wrong with it."""
    where = register_annotation(config)
    try:
        listed = json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where} is not JSON: {error}") from None
    if not isinstance(listed, list):
        raise ValueError(f"{where} must be a JSON list of NPUs")
    cards = []
    for number, entry in enumerate(listed):
        at = f"{where}[{number}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{at} must be an object")
        uuid = _field(entry, "id", at, str)
        custom = entry.get("custominfo") or {}
        if not isinstance(custom, dict):
            raise ValueError(f"{at}: custominfo must be an object")
        network = custom.get(NETWORK_ID)
        if network is not None and (isinstance(network, bool) or not isinstance(network, int | float)):
            raise ValueError(f"{at}: custominfo.NetworkID must be a number, not {network!r}")
        healthy = entry.get("health", True)
        if not isinstance(healthy, bool):
            raise ValueError(f"{at}: health must be true or false, not {healthy!r}")
        cards.append(
            Card(
                _field(entry, "index", at, int, required=False),
                uuid,
                _field(entry, "count", at, int, required=False),
                _field(entry, "devmem", at, int, required=False),
                entry.get("type") or config.common_word,
                healthy,
                cores=_field(entry, "devcore", at, int, required=False),
                network=None if network is None else int(network),
            )
        )
    return cards


def has_request(config: VNPUConfig, pod_spec: Mapping[str, Any]) -> bool:
    """Whether a container limits the type's resource or its memory."""
    return shared.limits_any(pod_spec, (config.resource_name, config.resource_memory_name))


def container_requests(config: VNPUConfig, pod_spec: Mapping[str, Any]) -> list[ContainerRequest]:
    return shared.container_requests(
        pod_spec, config.common_word, config.resource_name, config.resource_memory_name, core_resource(config)
    )


def hami_core_pod(annotations: Mapping[str, str]) -> bool:
    return annotations.get(MODE) == HAMI_CORE


def sized(config: VNPUConfig, request: ContainerRequest, card_memory: int, hami_core: bool) -> ContainerRequest:
    """The request as it takes memory: a percentage of `card_memory`, then, unless soft-sliced,
    rounded up to its template (Volcano's ResourceReqs)."""
    memory = request.memory
    if memory == 0 and request.percentage != 0:
        memory = card_memory * request.percentage // 100
    if memory > 0 and not hami_core:
        memory = trim_memory(config, memory)[0]
    return ContainerRequest(request.cards, memory, request.percentage, request.cores, request.type)


def verify(config: VNPUConfig, request: ContainerRequest) -> str:
    """Why a template-sliced request cannot be met anywhere ("" when it can): several NPUs must
    each be taken whole."""
    if request.cards > 1 and trim_memory(config, request.memory)[0] != config.memory_allocatable:
        return "vNPU does not support partial memory allocation when requesting multiple devices"
    return ""


def fits_card(config: VNPUConfig, request: ContainerRequest, card: Card, hami_core: bool, node_hami_core: bool) -> bool:
    """Whether one NPU takes one container's (sized) request (Volcano's fit): a free sharing
    slot, the memory, the cores (out of 100 soft-sliced, else of the NPU's AI cores), not an NPU
    asked whole while shared, nor a request for no cores on an NPU whose cores are all taken."""
    if request.type != config.common_word or (hami_core and not node_hami_core) or not card.healthy:
        return False
    if card.sharing <= card.used_pods or card.memory - card.used_memory < request.memory:
        return False
    cores = 100 if hami_core else card.cores
    if cores - card.used_cores < request.cores:
        return False
    if cores == 100 and request.cores == 100 and card.used_pods > 0:
        return False
    return not (cores != 0 and card.used_cores == cores and request.cores == 0)


# -- choosing NPUs ----------------------------------------------------------------------------------


def policy_order(cards: Sequence[Card], policy: str) -> list[int]:
    """The positions of `cards`, best scored first (registration order among equals)."""
    return sorted(range(len(cards)), key=lambda i: (-shared.card_score(policy, cards[i]), i))


def by_network(cards: Sequence[Card], fitting: Sequence[int], wanted: int) -> list[int]:
    """`wanted` of the fitting positions of `cards` (in their order), from the networks holding
    the most of them first (the lower network number among equals)."""
    groups: dict[int, list[int]] = {}
    for i in fitting:
        network = cards[i].network
        if network is not None:
            groups.setdefault(network, []).append(i)
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return [i for _, members in ordered for i in members][:wanted]


def network_score(cards: Sequence[Card]) -> float:
    """10 × the share of `cards` on the network holding the most of them."""
    counts: dict[int, int] = {}
    for card in cards:
        if card.network is not None:
            counts[card.network] = counts.get(card.network, 0) + 1
    total = sum(counts.values())
    return NETWORK_WEIGHT * max(counts.values()) / total if total else 0.0


def select(
    config: VNPUConfig,
    cards: Sequence[Card],
    mode: str,
    requests: Sequence[ContainerRequest],
    annotations: Mapping[str, str],
    policy: str,
) -> Fit:
    """Which NPUs each container gets, and the node's score (Volcano's selectDevices and
    ScoreNode). `cards` are left as they are. (Volcano tells a refusal no eviction changes, no
    NPUs or a request no NPU takes, from one for want of room; here a what-if view with the
    node's pods gone answers the same.)"""
    if not cards:
        return Fit(False, reason="no ascend device available")
    order = policy_order(cards, policy)
    hami_core = hami_core_pod(annotations)
    topology = config.common_word.startswith(ASCEND910) and all(card.network is not None for card in cards)
    taken: set[int] = set()
    given: list[tuple[ContainerDevice, ...]] = []
    chosen: list[Card] = []
    for asked in requests:
        request = sized(config, asked, cards[order[0]].memory, hami_core)
        problem = "" if hami_core else verify(config, request)
        if problem:
            return Fit(False, reason=problem)
        fitting = []
        for i in order:
            if i in taken or not fits_card(config, request, cards[i], hami_core, mode == HAMI_CORE):
                continue
            fitting.append(i)
            if len(fitting) == request.cards and not topology:
                break
        if len(fitting) < request.cards:
            return Fit(False, reason="no enough ascend device available")
        positions = by_network(cards, fitting, request.cards) if topology else fitting
        taken.update(positions)
        picked = [cards[i] for i in positions]
        chosen.extend(picked)
        given.append(tuple(ContainerDevice(c.uuid, config.common_word, request.memory, request.cores) for c in picked))
    score = sum(shared.card_score(policy, card) for card in chosen)
    if topology:
        score += network_score(chosen)
    return Fit(True, tuple(given), score)


# -- the pod's assignment annotations ---------------------------------------------------------------


def runtime_info(config: VNPUConfig, devices: Sequence[Sequence[ContainerDevice]], hami_core: bool) -> str:
    """`huawei.com/<commonWord>`: per NPU its UUID and, soft-sliced, the memory and cores, else the
    template's name (fields left out when empty or 0, as Go's omitempty writes them)."""
    infos = []
    for container in devices:
        for device in container:
            info: dict[str, Any] = {"UUID": device.uuid}
            if hami_core:
                info.update({"memory": device.memory, "core": device.cores})
            else:
                info["temp"] = trim_memory(config, device.memory)[1]
            infos.append({key: value for key, value in info.items() if value})
    return json.dumps(infos, separators=(",", ":"))


def assignment_annotations(
    config: VNPUConfig, node: str, devices: Sequence[Sequence[ContainerDevice]], hami_core: bool, now: float
) -> dict[str, str]:
    """What the binder writes on the pod (Volcano's Allocate): the NPUs per container twice (to
    allocate, allocated), the runtime info, the node, the phase `allocating`, and the times."""
    encoded, seconds = shared.encode_pod_devices(devices, container_end=";"), str(int(now))
    return {
        to_allocate_annotation(config): encoded,
        allocated_annotation(config): encoded,
        runtime_annotation(config): runtime_info(config, devices, hami_core),
        PREDICATE_TIME: seconds,
        ASSIGNED_NODE: node,
        ASSIGNED_TIME: seconds,
        BIND_PHASE: "allocating",
        BIND_TIME: seconds,
    }


def assigned(config: VNPUConfig, annotations: Mapping[str, str]) -> list[list[ContainerDevice]]:
    """The NPUs a placed pod's `hami.io/<commonWord>-devices-allocated` names, per container."""
    return shared.decode_pod_devices(annotations.get(allocated_annotation(config), ""))


def add_assigned(cards: Sequence[Card], uid: str, devices: Sequence[Sequence[ContainerDevice]]) -> None:
    """Count a pod's assigned NPUs on the node's (an entry names an NPU by its exact id; entries
    naming none of the node's are skipped)."""
    shared.add_assigned(cards, uid, "", devices, operator.eq)
