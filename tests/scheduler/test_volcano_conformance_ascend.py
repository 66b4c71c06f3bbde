"""Volcano's Ascend NPU tests as conformance cases (issue 17; docs/scheduler-conformance.md tallies
them): `pkg/scheduler/api/devices/ascend/hami/device_info_test.go` (volcano-sh/volcano ed72c7c),
run against `scheduler/framework/ascend.py` and the deviceshare plugin with
`deviceshare.AscendHAMiVNPUEnable`; then Lahar's own checks through whole cycles (the node's
registration annotation, the assignment written on the pod, pods already assigned, undone
placements, bad registrations)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from lahar.scheduler.framework import ascend
from lahar.scheduler.framework.device_config import (
    DEFAULT_VNPUS,
    DeviceConfigError,
    VNPUConfig,
    VNPUTemplate,
    parse_device_config,
)
from lahar.scheduler.framework.devices import BINPACK, SPREAD, WHOLE_CARD, Card, ContainerRequest, card_score
from tests.scheduler.preempt_builders import a_pod, cluster, conf, node, opened, run, task
from tests.scheduler.vgpu_cases import device_pod

Obj = dict[str, Any]

ASCEND310P = DEFAULT_VNPUS[0]  # the Go test's config_yaml gives 310P3 as Volcano's default does
# createTestAscendAllocateDevice's and createTestAscendDevice's configurations.
ASCEND910A = VNPUConfig(
    "Ascend910A", "", "huawei.com/Ascend910A", "huawei.com/Ascend910A-memory", 32768, 32768, 30, 0, ()
)
ASCEND910 = VNPUConfig("Ascend910", "", "huawei.com/Ascend910", "huawei.com/Ascend910Memory", 32000, 32000)


def npu(uuid: str, memory: int, cores: int, count: int = 1, index: int = 0, **usage: int) -> Card:
    """A DeviceInfo with its DeviceUsage (`used_pods`, `used_memory`, `used_cores`)."""
    return Card(index, uuid, count, memory, "Ascend", cores=cores, **usage)


def limits(config: VNPUConfig, count: str | None, memory: str | None, **more: str) -> Obj:
    asked = {
        **({config.resource_name: count} if count is not None else {}),
        **({config.resource_memory_name: memory} if memory is not None else {}),
        **more,
    }
    return {"containers": [{"name": "worker", "resources": {"limits": asked}}]}


def select(config: VNPUConfig, cards: list[Card], spec: Obj, annotations: dict[str, str] | None = None) -> Any:
    requests = ascend.container_requests(config, spec)
    return ascend.select(config, cards, ascend.TEMPLATE, requests, annotations or {}, BINPACK)


# -- Test_trimMemory ---------------------------------------------------------------------------------

TRIM = [
    ("test1", 0, 3072),
    ("test2", 1, 3072),
    ("test3", 100, 3072),
    ("test4", 3071, 3072),
    ("test5", 3072, 3072),
    ("test6", 3073, 6144),
    ("test7", 6143, 6144),
    ("test8", 6144, 6144),
    ("test9", 6144, 6144),
    ("test10", 6145, 12288),
    ("test11", 12288, 12288),
    ("test12", 12289, 21527),
    ("test13", 21527, 21527),
    ("test14", 21528, 21527),
    ("test15", 24576, 21527),
    ("test16", 24577, 0),
]


@pytest.mark.parametrize(("name", "memory", "want"), TRIM, ids=[row[0] for row in TRIM])
def test_volcano_trim_memory(name: str, memory: int, want: int) -> None:
    assert ascend.trim_memory(ASCEND310P, memory)[0] == want


# -- Test_fit ----------------------------------------------------------------------------------------

DEVICE_ID = "68496E64-20E05477-92C31323-6E78030A-BD003019"


def device_310p(used_pods: int = 0, used_memory: int = 0, used_cores: int = 0) -> Card:
    """The row's DeviceInfo: 7 pods may share it, 8 AI cores, 21527 MiB."""
    return npu(DEVICE_ID, 21527, 8, count=7, used_pods=used_pods, used_memory=used_memory, used_cores=used_cores)


def ask_310p(memory: int, cores: int = 0) -> ContainerRequest:
    return ContainerRequest(1, memory, WHOLE_CARD, cores, "Ascend310P")


FIT = [
    ("test1", ask_310p(1024), device_310p(1, 3072), False, False, True),
    ("test2", ask_310p(21527), device_310p(1, 3072), False, False, False),
    ("test3", ask_310p(6144), device_310p(1, 12288), False, False, True),
    ("test4", ask_310p(24576), device_310p(), False, False, False),
    ("test5_core", ask_310p(6144, 4), device_310p(1, 12288, 6), False, False, False),
    (
        "hami_core_mode_should_fail_when_node_not_support_hami_vnpu_core",
        ask_310p(1024, 20),
        device_310p(),
        True,
        False,
        False,
    ),
    (
        "hami_core_mode_should_fail_when_core_is_insufficient",
        ask_310p(1024, 20),
        device_310p(used_cores=90),
        True,
        True,
        False,
    ),
    (
        "hami_core_mode_should_pass_when_node_support_hami_vnpu_core",
        ask_310p(1024, 20),
        device_310p(),
        True,
        True,
        True,
    ),
]


@pytest.mark.parametrize(
    ("name", "request_", "card", "hami_core", "node_hami_core", "want"), FIT, ids=[row[0] for row in FIT]
)
def test_volcano_fit(
    name: str, request_: ContainerRequest, card: Card, hami_core: bool, node_hami_core: bool, want: bool
) -> None:
    assert ascend.fits_card(ASCEND310P, request_, card, hami_core, node_hami_core) is want


# -- TestAscendDevicesFilterNodeErrorClassification ----------------------------------------------------
# Volcano tells a retryable refusal (Unschedulable: evicting pods could make room) from an error
# (no devices, a request no NPU takes). Lahar's preempt and reclaim ask the predicates about a
# what-if view on which the node's pods are gone; the deviceshare plugin then decides on unused
# NPUs (`Card.unused`), so "retryable" is: refused now, taken on that view.

WITH_TEMPLATE = replace(ASCEND910A, templates=(VNPUTemplate("vir01", 4096, 1),))
CLASSIFICATION = [
    (
        "insufficient device capacity is retryable",
        ASCEND910A,
        [npu("device-1", 32768, 30, used_pods=1, used_memory=32768)],
        "1",
        True,
    ),
    ("missing device inventory is an error", ASCEND910A, [], "1", False),
    (
        "invalid multi-device partial memory request is an error",
        WITH_TEMPLATE,
        [npu("device-1", 32768, 30)],
        "2",
        False,
    ),
]


@pytest.mark.parametrize(
    ("name", "config", "cards", "count", "retryable"), CLASSIFICATION, ids=[row[0] for row in CLASSIFICATION]
)
def test_volcano_filter_node_error_classification(
    name: str, config: VNPUConfig, cards: list[Card], count: str, retryable: bool
) -> None:
    memory = "4096" if config is WITH_TEMPLATE else "32768"
    spec = limits(config, count, memory)
    assert not select(config, cards, spec).fits
    assert select(config, [card.unused() for card in cards], spec).fits is retryable


# -- TestAscendDevice_GetNodeDevices_HAMiVnpuCore -----------------------------------------------------

REGISTRATION = '[{"id":"dev-1","index":0,"count":1,"devmem":32768,"devcore":30}]'
NODE_MODES = [
    ("node_support_hami_vnpu_core", {ascend.NODE_HAMI_CORE: "true"}, ascend.HAMI_CORE),
    ("node_not_support_hami_vnpu_core", {ascend.NODE_HAMI_CORE: "false"}, ascend.TEMPLATE),
    ("node_without_hami_vnpu_core_annotation", {}, ascend.TEMPLATE),  # the Go test's VNPUsConfig is zero
]


@pytest.mark.parametrize(("name", "annotations", "mode"), NODE_MODES, ids=[row[0] for row in NODE_MODES])
def test_volcano_get_node_devices_hami_vnpu_core(name: str, annotations: dict[str, str], mode: str) -> None:
    cards = ascend.decode_node(ASCEND910A, REGISTRATION)
    assert [(card.uuid, card.sharing, card.memory, card.cores) for card in cards] == [("dev-1", 1, 32768, 30)]
    assert ascend.node_mode(annotations, default_hami_core=False) == mode


# -- Test_verifyReq ----------------------------------------------------------------------------------

VERIFY = [
    ("single_device_with_partial_memory_should_pass", 1, 1024, True),
    ("multiple_devices_with_partial_memory_should_fail", 2, 1024, False),
    ("multiple_devices_with_full_memory_should_pass", 2, 21527, True),
]


@pytest.mark.parametrize(("name", "cards", "memory", "passes"), VERIFY, ids=[row[0] for row in VERIFY])
def test_volcano_verify_req(name: str, cards: int, memory: int, passes: bool) -> None:
    problem = ascend.verify(ASCEND310P, ContainerRequest(cards, memory, 100, 0, "Ascend910B2C"))
    assert (problem == "") is passes


# -- TestAscendDevices_AddResource ----------------------------------------------------------------------

ALLOCATED = ascend.allocated_annotation(ASCEND910)


def fresh(*uuids: str) -> list[Card]:
    return [npu(uuid, 32000, 100, index=i) for i, uuid in enumerate(uuids)]


def holding_existing() -> list[Card]:
    card = npu("device-1", 32000, 100)
    card.add("existing-pod", 8000, 25)
    return [card]


ADD_RESOURCE = [
    (
        "Successfully add single device resource",
        fresh("device-1"),
        "device-1,Ascend910,16000,50",
        1,
        {"device-1": (1, 16000, 50)},
    ),
    (
        "Successfully add multiple device resources",
        fresh("device-1", "device-2"),
        "device-1,Ascend910,8000,25:device-2,Ascend910,8000,25",
        1,
        {"device-1": (1, 8000, 25), "device-2": (1, 8000, 25)},
    ),
    (
        "Add resource to existing device usage - accumulate",
        holding_existing(),
        "device-1,Ascend910,8000,25",
        1,
        {"device-1": (2, 16000, 50)},
    ),
    (
        "Add same pod multiple times - should not duplicate",
        fresh("device-1"),
        "device-1,Ascend910,16000,50",
        2,
        {"device-1": (1, 16000, 50)},
    ),
    ("Pod has invalid annotation format", fresh("device-1"), "invalid format", 1, {"device-1": (0, 0, 0)}),
    ("Pod missing required annotation", fresh("device-1"), None, 1, {"device-1": (0, 0, 0)}),
    (
        "Device not found in devices map",
        fresh("device-1"),
        "non-existent-device,Ascend910,16000,50",
        1,
        {"device-1": (0, 0, 0)},
    ),
    (
        "Multiple containers with different devices",
        fresh("device-1", "device-2", "device-3"),
        "device-1,Ascend910,4000,10:device-2,Ascend910,4000,10",
        1,
        {"device-1": (1, 4000, 10), "device-2": (1, 4000, 10), "device-3": (0, 0, 0)},
    ),
]
# Not expressible: "Nil AscendDevices receiver" (a Go method called on a nil pointer must not
# panic; Lahar keeps no per-node device object for a node without NPUs to call).


@pytest.mark.parametrize(
    ("name", "cards", "annotation", "times", "want"), ADD_RESOURCE, ids=[row[0] for row in ADD_RESOURCE]
)
def test_volcano_add_resource(
    name: str, cards: list[Card], annotation: str | None, times: int, want: dict[str, tuple[int, int, int]]
) -> None:
    annotations = {ALLOCATED: annotation} if annotation is not None else {}
    for _ in range(times):
        ascend.add_assigned(cards, "new-pod-uid", ascend.assigned(ASCEND910, annotations))
    assert {card.uuid: (card.used_pods, card.used_memory, card.used_cores) for card in cards} == want


# -- TestCalScore ------------------------------------------------------------------------------------

CAL_SCORE = [
    ("spread rewards idle device", SPREAD, 0, 0, 32768, 100.0),
    ("devmem is zero", SPREAD, 0, 0, 0, 0.0),
    ("binpack devmem is zero", BINPACK, 0, 0, 0, 0.0),
    ("spread does not reward shared device", SPREAD, 1, 0, 32768, 0.0),
    ("binpack rewards full device most", BINPACK, 0, 32768, 32768, 100.0),
    ("binpack does not reward idle device", BINPACK, 0, 0, 32768, 0.0),
    ("binpack scales with memory usage", BINPACK, 0, 16384, 32768, 50.0),
]


@pytest.mark.parametrize(
    ("name", "policy", "pods", "used", "memory", "want"), CAL_SCORE, ids=[row[0] for row in CAL_SCORE]
)
def test_volcano_cal_score(name: str, policy: str, pods: int, used: int, memory: int, want: float) -> None:
    assert card_score(policy, npu("d", memory, 0, used_pods=pods, used_memory=used)) == want


# -- Through whole cycles (Ascend310P, the built-in type) ---------------------------------------------

ALLOCATE_310P = ascend.allocated_annotation(ASCEND310P)
REGISTER_310P = ascend.register_annotation(ASCEND310P)
NPU = conf(
    "allocate",
    [
        "predicates",
        {
            "name": "deviceshare",
            "arguments": {"deviceshare.AscendHAMiVNPUEnable": True, "deviceshare.SchedulePolicy": "binpack"},
        },
    ],
)


def registration(*ids: str, count: int = 4) -> str:
    return json.dumps(
        [{"id": uuid, "index": i, "count": count, "devmem": 21527, "devcore": 8} for i, uuid in enumerate(ids)]
    )


def npu_node(name: str, register: str | None = None, **annotations: str) -> Obj:
    # Lahar counts the memory resource as any extended resource: the node advertises it.
    extended = {"huawei.com/Ascend310P": "8", "huawei.com/Ascend310P-memory": "43054"}
    obj = node(name, cpu="16", memory="64Gi", extended=extended)
    obj["metadata"]["annotations"] = {
        REGISTER_310P: registration("npu-0", "npu-1") if register is None else register,
        **annotations,
    }
    return obj


def npu_pod(name: str, memory: int | None = 3000, on: str = "", count: int = 1, **annotations: str) -> Obj:
    extended = {
        "huawei.com/Ascend310P": str(count),
        **({"huawei.com/Ascend310P-memory": str(memory)} if memory else {}),
    }
    return device_pod(name, extended, on, **annotations)


def written(session: Any, uid: str) -> str:
    return str(session.pod_annotations[uid][ALLOCATE_310P])


def test_a_placed_pod_gets_its_assignment() -> None:
    session = run(cluster(npu_node("n1"), npu_pod("p")), NPU)
    annotations = session.pod_annotations["uid-p"]
    assert annotations[ascend.ASSIGNED_NODE] == "n1" and annotations[ascend.BIND_PHASE] == "allocating"
    assert annotations[ascend.to_allocate_annotation(ASCEND310P)] == annotations[ALLOCATE_310P]
    # 3000 MiB is rounded up to the vir01 template (3072); the device plugin reads its name.
    assert annotations[ALLOCATE_310P] in ("npu-0,Ascend310P,3072,0:;", "npu-1,Ascend310P,3072,0:;")
    uuid = annotations[ALLOCATE_310P].split(",")[0]
    assert json.loads(annotations["huawei.com/Ascend310P"]) == [{"UUID": uuid, "temp": "vir01"}]


def test_binpack_stacks_on_the_npu_already_used() -> None:
    old = npu_pod("old", memory=12288, on="n1", **{ALLOCATE_310P: "npu-1,Ascend310P,12288,0:;"})
    session = run(cluster(npu_node("n1"), old, npu_pod("p", memory=6000)), NPU)
    assert written(session, "uid-p") == "npu-1,Ascend310P,6144,0:;"


def test_assigned_pods_count_on_their_npus() -> None:
    # Both NPUs hold 18432 of 21527: a 6144 slice fits on neither, a 3072 one on either.
    olds = [
        npu_pod(f"old{i}", memory=18432, on="n1", **{ALLOCATE_310P: f"npu-{i},Ascend310P,18432,0:;"}) for i in (0, 1)
    ]
    session = opened(cluster(npu_node("n1"), *olds, npu_pod("big", memory=6000), npu_pod("small", memory=3000)), NPU)
    assert session.predicate(task(session, "big")).tolist() == [False]
    assert session.explain(task(session, "big")) == {"Ascend310P: no enough ascend device available": 1}
    assert session.predicate(task(session, "small")).tolist() == [True]


def test_a_whole_npu_per_container_and_several_npus_whole() -> None:
    session = opened(cluster(npu_node("n1"), npu_pod("two", memory=None, count=2), npu_pod("partial", count=2)), NPU)
    assert session.predicate(task(session, "two")).tolist() == [True]
    assert session.explain(task(session, "partial")) == {
        "Ascend310P: vNPU does not support partial memory allocation when requesting multiple devices": 1
    }


def test_soft_slicing_needs_a_hami_core_node() -> None:
    soft = {ascend.MODE: ascend.HAMI_CORE}
    plain = opened(cluster(npu_node("n1"), npu_pod("p", **soft)), NPU)
    assert plain.predicate(task(plain, "p")).tolist() == [False]
    session = run(cluster(npu_node("n1", **{ascend.NODE_HAMI_CORE: "true"}), npu_pod("p", memory=3000, **soft)), NPU)
    # Soft-sliced: the memory as asked, the runtime info with memory (cores 0 left out).
    uuid = written(session, "uid-p").split(",")[0]
    assert written(session, "uid-p") == f"{uuid},Ascend310P,3000,0:;"
    assert json.loads(session.pod_annotations["uid-p"]["huawei.com/Ascend310P"]) == [{"UUID": uuid, "memory": 3000}]


def test_undone_placements_give_their_npus_back() -> None:
    """TestHAMiReleaseReturnsSpeculativeAnnotationKeys: a placement undone before its bind takes
    its NPU usage and every annotation it would have written back."""
    objects = [npu_node("n1", registration("npu-0", count=1)), npu_pod("a"), npu_pod("b")]
    session = opened(cluster(*objects), NPU)
    statement = session.statement()
    statement.allocate(task(session, "a"), 0)
    assert ALLOCATE_310P in session.pod_annotations["uid-a"]
    assert session.predicate(task(session, "b")).tolist() == [False]
    statement.discard()
    assert session.pod_annotations == {} and session.predicate(task(session, "b")).tolist() == [True]


def test_a_bad_registration_is_reported_and_other_nodes_schedule() -> None:
    bad = npu_node("bad", '[{"index": 0, "devmem": 21527}]')
    session = run(cluster(bad, npu_node("good"), npu_pod("p"), a_pod("plain", cpu="1", memory="1Gi")), NPU)
    assert session.pod_annotations["uid-p"][ascend.ASSIGNED_NODE] == "good"
    assert {t.name for batch in session.binds for t in batch.tasks} == {"p", "plain"}
    [event] = [e for e in session.events if e.reason == "InvalidDeviceRegistration"]
    assert event.name == "bad" and "hami.io/node-register-Ascend310P[0]: id is missing" in event.message


@pytest.mark.parametrize(
    "register",
    ["not json", '{"id": "x"}', '[{"id": "x", "count": -1}]', '[{"id": "x", "custominfo": {"NetworkID": "a"}}]'],
)
def test_malformed_registrations_say_what_is_wrong(register: str) -> None:
    with pytest.raises(ValueError, match=r"hami\.io/node-register-Ascend310P"):
        ascend.decode_node(ASCEND310P, register)


def test_a_type_the_configuration_lacks_is_reported() -> None:
    other = npu_node("n1", **{"hami.io/node-register-Ascend910B9": registration("x")})
    session = opened(cluster(other), NPU)
    [event] = [e for e in session.events if e.reason == "UnknownDeviceType"]
    assert "Ascend910B9" in event.message and "Ascend310P" in event.message


def test_unhealthy_npus_take_nothing() -> None:
    sick = json.dumps([{"id": "npu-0", "count": 4, "devmem": 21527, "devcore": 8, "health": False}])
    session = opened(cluster(npu_node("n1", sick), npu_pod("p")), NPU)
    assert session.predicate(task(session, "p")).tolist() == [False]


def test_npus_are_off_unless_enabled() -> None:
    session = run(cluster(npu_node("n1"), npu_pod("p")), conf("allocate", ["predicates", "deviceshare"]))
    assert [t.name for batch in session.binds for t in batch.tasks] == ["p"] and session.pod_annotations == {}


# -- Ascend910 networks (a configured 910 type; function level) ------------------------------------


def test_an_ascend910_pod_takes_npus_of_one_network() -> None:
    # Networks 0, 1, 1, 0, 1: two NPUs come from network 1 (three fit there), and the score adds
    # 10 × the share of them on one network.
    cards = [npu(f"d{i}", 32768, 30, index=i, network=net) for i, net in enumerate((0, 1, 1, 0, 1))]
    verdict = select(ASCEND910A, cards, limits(ASCEND910A, "2", None))
    assert verdict.fits and [d.uuid for d in verdict.devices[0]] == ["d1", "d2"]
    assert verdict.score == pytest.approx(10.0)


# -- A configured type (deviceshare.DeviceConfig's vnpus) through whole cycles -----------------------

DEVICE_CONFIG = """
vnpus:
  hamiVnpuCore: true
  configs:
  - chipName: 910B3
    commonWord: Ascend910B3
    resourceName: huawei.com/Ascend910B3
    resourceMemoryName: huawei.com/Ascend910B3-memory
    memoryAllocatable: 65536
    memoryCapacity: 65536
    aiCore: 20
    templates:
    - {name: vir05_1c_16g, memory: 16384, aiCore: 5}
    - {name: vir10_3c_32g, memory: 32768, aiCore: 10}
"""


def npu_910b3_node(name: str, networks: tuple[int, ...], **annotations: str) -> Obj:
    extended = {"huawei.com/Ascend910B3": "8", "huawei.com/Ascend910B3-memory": str(65536 * len(networks))}
    obj = node(name, cpu="16", memory="64Gi", extended=extended)
    npus = [
        {"id": f"{name}-{i}", "index": i, "count": 2, "devmem": 65536, "devcore": 20, "custominfo": {"NetworkID": net}}
        for i, net in enumerate(networks)
    ]
    obj["metadata"]["annotations"] = {"hami.io/node-register-Ascend910B3": json.dumps(npus), **annotations}
    return obj


def npu_910b3_pod(name: str, count: int, memory: int | None = None, **annotations: str) -> Obj:
    extended = {"huawei.com/Ascend910B3": str(count)}
    if memory is not None:
        extended["huawei.com/Ascend910B3-memory"] = str(memory)
    return device_pod(name, extended, **annotations)


NPU_910B3 = conf(
    "allocate",
    [
        "predicates",
        {
            "name": "deviceshare",
            "arguments": {
                "deviceshare.AscendHAMiVNPUEnable": True,
                "deviceshare.SchedulePolicy": "binpack",
                "deviceshare.DeviceConfig": DEVICE_CONFIG,
            },
        },
    ],
)


def test_a_configured_ascend910_type_takes_whole_npus_of_one_network() -> None:
    session = run(cluster(npu_910b3_node("n1", (0, 1, 1, 0, 1)), npu_910b3_pod("p", 2)), NPU_910B3)
    allocated = session.pod_annotations["uid-p"]["hami.io/Ascend910B3-devices-allocated"]
    assert allocated == "n1-1,Ascend910B3,65536,0:n1-2,Ascend910B3,65536,0:;"


def test_a_configured_type_slices_by_its_templates_and_its_nodes_run_hami_core() -> None:
    # hamiVnpuCore: true makes every node a hami-core one unless it says otherwise.
    soft = npu_910b3_pod("soft", 1, memory=10000, **{ascend.MODE: ascend.HAMI_CORE})
    session = run(cluster(npu_910b3_node("n1", (0,)), npu_910b3_pod("sliced", 1, memory=10000), soft), NPU_910B3)
    assert session.pod_annotations["uid-sliced"]["huawei.com/Ascend910B3"] == '[{"UUID":"n1-0","temp":"vir05_1c_16g"}]'
    assert session.pod_annotations["uid-soft"]["huawei.com/Ascend910B3"] == '[{"UUID":"n1-0","memory":10000}]'
    refusing = opened(cluster(npu_910b3_node("n1", (0,), **{ascend.NODE_HAMI_CORE: "false"}), soft), NPU_910B3)
    assert refusing.predicate(task(refusing, "soft")).tolist() == [False]


BAD_TYPES = [
    (
        "a type without commonWord",
        [{"resourceName": "huawei.com/x", "resourceMemoryName": "huawei.com/x-memory"}],
        "'commonWord'",
    ),
    (
        "a type without resourceMemoryName",
        [{"commonWord": "Ascend910B3", "resourceName": "huawei.com/x"}],
        "'resourceMemoryName'",
    ),
    (
        "a commonWord named twice",
        [
            {"commonWord": "AscendX", "resourceName": "huawei.com/x", "resourceMemoryName": "huawei.com/x-memory"},
            {"commonWord": "AscendX", "resourceName": "huawei.com/y", "resourceMemoryName": "huawei.com/y-memory"},
        ],
        "commonWord 'AscendX' is named twice",
    ),
]


@pytest.mark.parametrize(("name", "vnpus", "message"), BAD_TYPES, ids=[row[0] for row in BAD_TYPES])
def test_npu_types_without_their_names_are_refused(name: str, vnpus: list[Obj], message: str) -> None:
    with pytest.raises(DeviceConfigError, match=message):
        parse_device_config({"vnpus": vnpus})
