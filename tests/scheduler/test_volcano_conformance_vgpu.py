"""Volcano's vGPU tests as conformance cases (issue 17; docs/scheduler-conformance.md tallies
them): vgpu's `utils_test.go`, `spread_integration_test.go`, `hamicore_test.go`,
`device_info_test.go` and deviceshare's `deviceshare_test.go`, run against
`scheduler/framework/vgpu.py` and the deviceshare plugin with `deviceshare.VGPUEnable`; then
Lahar's own checks through whole cycles (the node's registration annotation, the assignment
written on the pod, pods already assigned, undone placements)."""

from __future__ import annotations

import pytest

from lahar.scheduler.framework import vgpu
from lahar.scheduler.plugins.deviceshare import DeviceShare
from tests.scheduler.preempt_builders import cluster, conf, node, opened, run, task
from tests.scheduler.vgpu_cases import (
    REGISTER,
    VGPU,
    allocate,
    assigned,
    make_cards,
    try_fit,
    vgpu_annotations,
    vgpu_node,
    vgpu_pod,
)

# -- utils_test.go: TestCheckGPUtype ---------------------------------------------------------------------

GPU_TYPE = [
    ("Single GPUInUse value matches", {vgpu.USE_TYPE: "NVIDIA"}, True),
    ("GPUInUse mixed case matches", {vgpu.USE_TYPE: "nvidia"}, True),
    ("Multiple GPUInUse values, one matches", {vgpu.USE_TYPE: "AMD,NVIDIA,INTEL"}, True),
    ("Multiple GPUInUse values, none matches", {vgpu.USE_TYPE: "AMD,INTEL,MLU"}, False),
    ("Single GPUNoUse value matches", {vgpu.NOUSE_TYPE: "NVIDIA"}, False),
    ("GPUNoUse mixed case matches", {vgpu.NOUSE_TYPE: "nvidia"}, False),
    ("Multiple GPUNoUse values, one matches", {vgpu.NOUSE_TYPE: "AMD,NVIDIA,INTEL"}, False),
    ("Multiple GPUNoUse values, none matches", {vgpu.NOUSE_TYPE: "AMD,INTEL,MLU"}, True),
    ("Empty annotations map", {}, True),
    ("Nil annotations map", None, True),
]


@pytest.mark.parametrize(("name", "annotations", "want"), GPU_TYPE, ids=[c[0] for c in GPU_TYPE])
def test_volcano_check_gpu_type(name: str, annotations: dict[str, str] | None, want: bool) -> None:
    assert vgpu.check_gpu_type(annotations, "NVIDIA") is want


# -- utils_test.go: TestCheckGPUUUID, TestGPUUUIDConstraints ----------------------------------------------

UUID_FILTER = [
    ("no constraint", None, "GPU-0", True),
    ("empty allowlist is ignored", {vgpu.USE_UUID: "  "}, "GPU-0", True),
    ("separator-only allowlist is ignored", {vgpu.USE_UUID: ", ,"}, "GPU-0", True),
    ("allowlist exact match", {vgpu.USE_UUID: "GPU-0, GPU-1"}, "GPU-1", True),
    ("allowlist ignores empty entries", {vgpu.USE_UUID: "GPU-0,, GPU-1,"}, "GPU-1", True),
    ("allowlist rejects partial match", {vgpu.USE_UUID: "GPU-10"}, "GPU-1", False),
    ("allowlist rejects empty device UUID", {vgpu.USE_UUID: "GPU-0,"}, "", False),
    ("denylist rejects match", {vgpu.NOUSE_UUID: "GPU-0, GPU-1"}, "GPU-1", False),
    ("denylist constraint rejects empty device UUID", {vgpu.NOUSE_UUID: "GPU-0,"}, "", False),
    ("denylist wins over allowlist", {vgpu.USE_UUID: "GPU-1", vgpu.NOUSE_UUID: "GPU-1"}, "GPU-1", False),
]


@pytest.mark.parametrize(("name", "annotations", "uuid", "want"), UUID_FILTER, ids=[c[0] for c in UUID_FILTER])
def test_volcano_check_gpu_uuid(name: str, annotations: dict[str, str] | None, uuid: str, want: bool) -> None:
    assert vgpu.UUIDFilter.of(annotations).matches(uuid) is want


UUID_CONSTRAINTS = [
    ("allowlist selects requested GPU", {vgpu.USE_UUID: "GPU-0000A"}, "GPU-0000A", ""),
    ("denylist excludes GPU", {vgpu.NOUSE_UUID: "GPU-0000B"}, "GPU-0000A", ""),
    ("unknown allowed UUID is unschedulable", {vgpu.USE_UUID: "GPU-unknown"}, "", vgpu.USE_UUID),
    ("denylist excludes all GPUs", {vgpu.NOUSE_UUID: "GPU-0000A,GPU-0000B"}, "", vgpu.NOUSE_UUID),
]


@pytest.mark.parametrize(
    ("name", "annotations", "uuid", "error"), UUID_CONSTRAINTS, ids=[c[0] for c in UUID_CONSTRAINTS]
)
def test_volcano_gpu_uuid_constraints(name: str, annotations: dict[str, str], uuid: str, error: str) -> None:
    verdict = try_fit(make_cards(2, 16384, 4), "", annotations)
    if uuid:
        assert verdict.fits and verdict.devices[0][0].uuid == uuid
    else:
        assert not verdict.fits and error in verdict.reason


# -- utils_test.go: TestGetPodGroupKey, TestDeviceHasPodFromSameGroup -------------------------------------

GROUP_KEYS = [
    ("nil pod", "", None, ""),
    ("nil annotations", "ns", None, ""),
    ("scheduling.k8s.io/group-name", "default", {vgpu.KUBE_GROUP: "my-pg"}, "default/my-pg"),
    ("scheduling.volcano.sh/group-name (Volcano API)", "ns1", {vgpu.VOLCANO_GROUP: "job-pg"}, "ns1/job-pg"),
    (
        "k8s annotation takes precedence over volcano",
        "ns",
        {vgpu.KUBE_GROUP: "k8s-pg", vgpu.VOLCANO_GROUP: "volcano-pg"},
        "ns/k8s-pg",
    ),
]


@pytest.mark.parametrize(("name", "namespace", "annotations", "want"), GROUP_KEYS, ids=[c[0] for c in GROUP_KEYS])
def test_volcano_pod_group_key(name: str, namespace: str, annotations: dict[str, str] | None, want: str) -> None:
    assert vgpu.pod_group_key(namespace, annotations or {}) == want


def card_with(uid: str, group: str, memory: int, cores: int = 0) -> vgpu.Card:
    card = make_cards(1, 16384, 4)[0]
    card.pods[uid] = vgpu.Usage(memory, cores, group)
    return card


SAME_GROUP = [
    ("empty currentKey", card_with("uid1", "ns/pg", 1000), "", False),
    ("no pod from same group", card_with("uid1", "ns/other", 1000), "ns/my-pg", False),
    ("same group with non-zero usage", card_with("uid1", "ns/my-pg", 1000, 50), "ns/my-pg", True),
    ("same group but zero usage (released)", card_with("uid1", "ns/my-pg", 0, 0), "ns/my-pg", False),
    ("empty PodMap", make_cards(1, 16384, 4)[0], "ns/pg", False),
]


@pytest.mark.parametrize(("name", "card", "group", "want"), SAME_GROUP, ids=[c[0] for c in SAME_GROUP])
def test_volcano_device_has_pod_from_same_group(name: str, card: vgpu.Card, group: str, want: bool) -> None:
    assert vgpu.holds_group(card, group) is want


# -- utils_test.go: TestSortedDeviceIndicesByPolicy_PicksExpectedDevice, TestGPUScore, -------------------
# TestBinpackStacksSequentialPods, TestDecodeContainerDevicesRejectsInvalidUsage


def busy_first(cards: list[vgpu.Card]) -> list[vgpu.Card]:
    cards[0].used_memory, cards[0].used_pods = 4096, 1
    return cards


POLICY_PICKS = [
    ("binpack picks busier device", busy_first(make_cards(2, 16384, 4)), vgpu.BINPACK, 0),
    ("spread picks idle device over shared one", busy_first(make_cards(2, 16384, 4)), vgpu.SPREAD, 1),
    ("unset policy preserves legacy descending-index order", make_cards(3, 16384, 4), "", 2),
]


@pytest.mark.parametrize(("name", "cards", "policy", "want"), POLICY_PICKS, ids=[c[0] for c in POLICY_PICKS])
def test_volcano_sorted_device_indices_by_policy(name: str, cards: list[vgpu.Card], policy: str, want: int) -> None:
    verdict = try_fit(cards, policy)
    assert verdict.fits and verdict.devices[0][0].uuid == cards[want].uuid


def shaped(pods: int, memory: int) -> vgpu.Card:
    card = make_cards(1, 16384, 4)[0]
    card.used_pods, card.used_memory = pods, memory
    return card


IDLE, SHARED, FULL = shaped(0, 0), shaped(1, 4096), shaped(4, 16384)
GPU_SCORES = [
    ("spread rewards idle GPU", vgpu.SPREAD, IDLE, 100.0),
    ("spread does not reward shared GPU", vgpu.SPREAD, SHARED, 0.0),
    ("spread does not reward full GPU", vgpu.SPREAD, FULL, 0.0),
    ("binpack rewards full GPU most", vgpu.BINPACK, FULL, 100.0),
    ("binpack does not reward idle GPU", vgpu.BINPACK, IDLE, 0.0),
    ("unset policy returns zero", "", SHARED, 0.0),
]


@pytest.mark.parametrize(("name", "policy", "card", "want"), GPU_SCORES, ids=[c[0] for c in GPU_SCORES])
def test_volcano_gpu_score(name: str, policy: str, card: vgpu.Card, want: float) -> None:
    assert vgpu.gpu_score(policy, card) == want


def test_volcano_binpack_stacks_sequential_pods() -> None:
    cards = make_cards(3, 16384, 4)
    assert len({allocate(cards, uid, {}) for uid in ("a", "b", "c")}) == 1


D = vgpu.ContainerDevice
DECODED = [
    ("valid entry", "GPU-0,NVIDIA,4096,30:", [D("GPU-0", "NVIDIA", 4096, 30)]),
    ("negative memory is skipped", "GPU-0,NVIDIA,-5,30:", []),
    ("negative cores is skipped", "GPU-0,NVIDIA,4096,-1:", []),
    ("non-numeric usage is skipped", "GPU-0,NVIDIA,abc,30:", []),
    ("entry with missing fields is skipped", "GPU-0,NVIDIA:", []),
    (
        "valid entry kept when mixed with invalid",
        "GPU-0,NVIDIA,-5,30:GPU-1,NVIDIA,2048,10:",
        [D("GPU-1", "NVIDIA", 2048, 10)],
    ),
]


@pytest.mark.parametrize(("name", "text", "want"), DECODED, ids=[c[0] for c in DECODED])
def test_volcano_decode_container_devices(name: str, text: str, want: list[vgpu.ContainerDevice]) -> None:
    assert vgpu.decode_container_devices(text) == want


# -- spread_integration_test.go ------------------------------------------------------------------------


def test_volcano_spread_prevents_co_location() -> None:
    cards = make_cards(2, 16384, 4)
    first = allocate(cards, "aaa", vgpu_annotations(True, "job-1"))
    second = allocate(cards, "bbb", vgpu_annotations(True, "job-1"))
    assert first and second and first != second


def test_volcano_binpack_allows_co_location() -> None:
    cards = make_cards(2, 16384, 4)
    assert allocate(cards, "aaa", vgpu_annotations(False, "job-1"))
    assert allocate(cards, "bbb", vgpu_annotations(False, "job-1"))


def test_volcano_spread_different_groups_can_share() -> None:
    cards = make_cards(1, 16384, 4)
    first = allocate(cards, "aaa", vgpu_annotations(True, "job-1"))
    assert first is not None and allocate(cards, "bbb", vgpu_annotations(True, "job-2")) == first


def test_volcano_spread_with_no_room_fails() -> None:
    cards = make_cards(1, 16384, 4)
    assert allocate(cards, "aaa", vgpu_annotations(True, "job-1"))
    assert allocate(cards, "bbb", vgpu_annotations(True, "job-1")) is None


def test_volcano_mixed_annotations() -> None:
    cards = make_cards(2, 16384, 4)
    assert allocate(cards, "aaa", vgpu_annotations(True, "job-1"))
    assert allocate(cards, "bbb", vgpu_annotations(False, "job-1"))


# -- hamicore_test.go ------------------------------------------------------------------------------------


def hami_card() -> vgpu.Card:
    return vgpu.Card(0, "GPU-HAMI", 10, 16384, "NVIDIA")


def test_volcano_hami_add_pod() -> None:
    """Fresh add; duplicate add is a no-op; add after the allocation counted the pod already."""
    fresh = hami_card()
    fresh.add("pod-a", 1000, 25, "")
    assert (fresh.used_pods, fresh.used_memory, fresh.used_cores) == (1, 1000, 25) and "pod-a" in fresh.pods
    fresh.add("pod-a", 1000, 25, "")
    assert (fresh.used_pods, fresh.used_memory, fresh.used_cores) == (1, 1000, 25)


def test_volcano_hami_add_pod_distinct_uids_accumulate() -> None:
    card = hami_card()
    for uid in ("pod-a", "pod-b", "pod-c"):
        card.add(uid, 1000, 25, "")
    assert (card.used_pods, card.used_memory, card.used_cores) == (3, 3000, 75)


def test_volcano_hami_sub_pod_removes_entry() -> None:
    card = hami_card()
    card.add("pod-a", 1000, 25, "")
    card.remove("pod-a")
    assert "pod-a" not in card.pods and (card.used_pods, card.used_memory, card.used_cores) == (0, 0, 0)
    card.add("pod-a", 1000, 25, "")
    assert (card.used_pods, card.used_memory) == (1, 1000)


# -- device_info_test.go: TestGetGPUMemoryOfPod, TestAddResource, TestAddResourceSetsPodGroupKey -------------


def test_volcano_vgpu_requests_per_container() -> None:
    spec = {
        "containers": [
            {"resources": {"limits": {vgpu.NUMBER: "1", vgpu.MEMORY: "3000"}}},
            {"resources": {"limits": {vgpu.NUMBER: "3", vgpu.MEMORY: "5000"}}},
        ]
    }
    got = vgpu.container_requests(spec)
    assert [(r.cards, r.memory) for r in got] == [(1, 3000), (3, 5000)]


@pytest.mark.parametrize(
    ("assigned", "added"),
    [("GPU-1234,NVIDIA,16384,0", True), ("GPU-5678,NVIDIA,16384,0", False), ("", False)],
    ids=["Pod assigned to known GPU UUID", "Pod assigned to unknown GPU UUID", "Pod without AssignedIDsAnnotations"],
)
def test_volcano_add_resource(assigned: str, added: bool) -> None:
    cards = [vgpu.Card(0, "GPU-1234", 10, 16384, "NVIDIA")]
    vgpu.add_assigned(cards, "pod-abc", "", vgpu.decode_pod_devices(assigned))
    assert ("pod-abc" in cards[0].pods) is added


def test_volcano_add_resource_sets_pod_group_key() -> None:
    cards = [vgpu.Card(0, "GPU-1234", 10, 16384, "NVIDIA")]
    group = vgpu.pod_group_key("default", {vgpu.KUBE_GROUP: "pg-1"})
    vgpu.add_assigned(cards, "uid", group, vgpu.decode_pod_devices("GPU-1234,NVIDIA,1024,10:"))
    assert cards[0].pods["uid"].group == "default/pg-1"


# -- deviceshare_test.go: TestArguments, TestVgpuScore, Test_FilterNode ---------------------------------------


def test_volcano_deviceshare_arguments() -> None:
    arguments = {
        "deviceshare.VGPUEnable": True,
        "deviceshare.SchedulePolicy": "binpack",
        "deviceshare.ScheduleWeight": 10,
    }
    plugin = DeviceShare(arguments)
    assert plugin.argument("deviceshare.ScheduleWeight", 0) == 10
    assert plugin.argument("deviceshare.SchedulePolicy", "") == "binpack"


def test_volcano_vgpu_score() -> None:
    busy = vgpu.Card(0, "GPU-0", 10, 30000, "NVIDIA", used_pods=1, used_memory=3000)
    verdict = try_fit([busy], vgpu.BINPACK, memory=1000, cores=None)
    assert verdict.fits and verdict.score == pytest.approx(4000 * 100 / 30000)
    idle = vgpu.Card(0, "GPU-0", 10, 30000, "NVIDIA")
    spread = try_fit([idle], vgpu.SPREAD, memory=1000, cores=None)
    # Volcano asserts only that the score is at most 100 (its own comes out 0: the card is
    # counted used before it is scored); an idle card scores 100 here.
    assert spread.fits and spread.score == 100.0


def test_volcano_filter_node_three_cards_of_different_memory() -> None:
    cards = [vgpu.Card(i, f"GPU-{i}", 10, memory, "NVIDIA") for i, memory in enumerate((30000, 20000, 30000))]
    verdict = try_fit(cards, vgpu.BINPACK, memory=None, cards=3, cores=100)
    assert verdict.fits and sorted(d.uuid for d in verdict.devices[0]) == ["GPU-0", "GPU-1", "GPU-2"]


# -- Lahar's own: the plugin through whole cycles ----------------------------------------------------------


def test_a_placed_pod_gets_its_assignment() -> None:
    session = run(cluster(vgpu_node("n1"), vgpu_pod("p")), VGPU)
    written = session.pod_annotations["uid-p"]
    assert written[vgpu.ASSIGNED_NODE] == "n1" and written[vgpu.BIND_PHASE] == "allocating"
    assert written[vgpu.ASSIGNED_IDS] == written[vgpu.IDS_TO_ALLOCATE]
    assert written[vgpu.ASSIGNED_IDS] in ("GPU-a,NVIDIA,4096,25:", "GPU-b,NVIDIA,4096,25:")


def test_assigned_pods_count_on_their_cards() -> None:
    # Card a is 16000 used by a running pod; binpack puts the next pod on it, a 1000 one fits
    # nowhere but b after it (card a has 384 left).
    on_a = vgpu_pod("old", memory=16000, cores=10, on="n1", **{vgpu.ASSIGNED_IDS: "GPU-a,NVIDIA,16000,10:"})
    session = run(cluster(vgpu_node("n1"), on_a, vgpu_pod("small", memory=300), vgpu_pod("big", memory=1000)), VGPU)
    assert assigned(session, "uid-small").startswith("GPU-a,")
    assert assigned(session, "uid-big").startswith("GPU-b,")


def test_cards_exclusively_taken_refuse_more() -> None:
    objects = [vgpu_node("n1"), vgpu_pod("x", cores=100), vgpu_pod("y", cores=100), vgpu_pod("z", cores=100)]
    session = run(cluster(*objects), VGPU)
    # Two cards, each taken whole by one pod: the third waits, and says why.
    assert len(session.pod_annotations) == 2
    taken = [
        vgpu_pod(name, cores=100, on="n1", **{vgpu.ASSIGNED_IDS: f"GPU-{card},NVIDIA,4096,100:"})
        for name, card in (("x", "a"), ("y", "b"))
    ]
    waiting = opened(cluster(vgpu_node("n1"), *taken, vgpu_pod("z", cores=100)), VGPU)
    assert waiting.explain(task(waiting, "z")) == {"vGPU: not enough gpu fitted on this node": 1}


def test_a_node_without_registration_takes_no_vgpu_pod() -> None:
    bare = node("bare", cpu="16", memory="64Gi", extended={vgpu.NUMBER: "20", vgpu.MEMORY: "32768", vgpu.CORES: "200"})
    session = opened(cluster(bare, vgpu_pod("p")), VGPU)
    assert session.predicate(task(session, "p")).tolist() == [False]
    assert session.explain(task(session, "p")) == {"vGPU: node has no registered vGPU": 1}


def test_unhealthy_cards_take_nothing() -> None:
    sick = REGISTER.replace("GPU-a,10,16384,NVIDIA-A100,true", "GPU-a,10,16384,NVIDIA-A100,false")
    session = run(cluster(vgpu_node("n1", sick), vgpu_pod("p", memory=10000), vgpu_pod("q", memory=10000)), VGPU)
    assert [assigned(session, uid)[:5] for uid in sorted(session.pod_annotations)] == ["GPU-b"]


def test_the_pod_mode_must_match_the_node() -> None:
    session = opened(cluster(vgpu_node("n1"), vgpu_pod("p", **{vgpu.MODE: "mig"})), VGPU)
    assert session.explain(task(session, "p")) == {
        "vGPU: pod required sharing mode mig is not the same as the node mode hami-core": 1
    }


def test_undone_placements_give_their_cards_back() -> None:
    session = opened(
        cluster(vgpu_node("n1"), vgpu_pod("a", cores=100), vgpu_pod("b", cores=100), vgpu_pod("c", cores=100)), VGPU
    )
    statement = session.statement()
    statement.allocate(task(session, "a"), 0)
    statement.allocate(task(session, "b"), 0)
    assert session.predicate(task(session, "c")).tolist() == [False]
    statement.discard()
    assert session.pod_annotations == {} and session.predicate(task(session, "c")).tolist() == [True]


def test_vgpu_is_off_unless_enabled() -> None:
    session = opened(cluster(vgpu_node("n1"), vgpu_pod("p")), conf("allocate", ["predicates", "deviceshare"]))
    assert session.predicate(task(session, "p")).tolist() == [True] and session.pod_annotations == {}


def test_a_pod_being_bound_holds_its_card_in_the_next_cycle() -> None:
    """Between the bind and the watch showing the assignment, the cache's pod shows it already."""
    cache = cluster(vgpu_node("n1"), vgpu_pod("x", cores=100))
    first = run(cache, VGPU)
    for batch in first.binds:
        cache.assume(batch, first.pod_annotations)
    cache.add_pod(vgpu_pod("y", cores=100))
    second = run(cache, VGPU)
    assert {assigned(first, "uid-x")[:5], assigned(second, "uid-y")[:5]} == {"GPU-a", "GPU-b"}
