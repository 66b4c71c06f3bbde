"""Volcano's GPU-share tests as conformance cases (issue 17; docs/scheduler-conformance.md tallies
them): gpushare's `TestGetGPUMemoryOfPod`, `TestGetGPUNumberOfPod`,
`TestReleaseReturnsRemovedAnnotationKeys` and the over-subscribed card of `share_test.go`, then
Lahar's own checks of Volcano's spelling in the deviceshare plugin (`volcano.sh/gpu-number`,
`volcano.sh/gpu-memory`, the unhealthy-GPU annotation, `volcano.sh/gpu-index` on the pod)."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.api.resources import pod_requests
from lahar.scheduler.framework.session import Session
from tests.scheduler.preempt_builders import a_pod, annotate, cluster, conf, node, opened, run, running, task

Obj = dict[str, Any]
NUMBER, MEMORY = "volcano.sh/gpu-number", "volcano.sh/gpu-memory"
INDEX, PREDICATE_TIME, UNHEALTHY = "volcano.sh/gpu-index", "volcano.sh/predicate-time", "volcano.sh/gpu-unhealthy-ids"
DEVICESHARE = conf("allocate", ["predicates", "deviceshare"])


def limits_pod(containers: list[str], init: list[str], resource: str) -> Obj:
    """A pod whose containers and init containers limit `resource` (Volcano's test pods set
    limits only: a limit without a request requests it)."""

    def container(amount: str) -> Obj:
        return {"name": "c", "image": "busybox", "resources": {"limits": {resource: amount}}}

    return {"spec": {"containers": [container(a) for a in containers], "initContainers": [container(a) for a in init]}}


# -- gpushare/device_info_test.go: TestGetGPUMemoryOfPod, TestGetGPUNumberOfPod ------------------------

AMOUNT_CASES = [
    ("GPUs required only in Containers", ["1", "3"], [], 4),
    ("GPUs required both in initContainers and Containers", ["2"], ["1", "3"], 3),
]


@pytest.mark.parametrize("resource", [MEMORY, NUMBER])
@pytest.mark.parametrize(("name", "containers", "init", "want"), AMOUNT_CASES, ids=[c[0] for c in AMOUNT_CASES])
def test_volcano_gpu_amount_of_pod(resource: str, name: str, containers: list[str], init: list[str], want: int) -> None:
    # The plugin reads a pod's request vector: Kubernetes' effective request (the sum over the
    # containers, or the largest init container when that is more), as Volcano's getGPU*OfPod.
    assert pod_requests(limits_pod(containers, init, resource)).get(resource) == want


# -- builders --------------------------------------------------------------------------------------------


def volcano_node(name: str, gpus: int = 2, memory: int = 2000, unhealthy: str | None = None) -> Obj:
    obj = node(name, cpu="16", memory="64Gi", extended={NUMBER: str(gpus), MEMORY: str(memory)})
    if unhealthy is not None:
        obj["metadata"]["annotations"] = {UNHEALTHY: unhealthy}
    return obj


def share(name: str, memory: int, on: str = "", index: str | None = None) -> Obj:
    extended = {MEMORY: str(memory)}
    if not on:
        return a_pod(name, cpu="1", memory="1Gi", extended=extended)
    pod = running(name, on, cpu="1", memory="1Gi", extended=extended)
    return annotate(pod, **{INDEX: index}) if index is not None else pod


def whole(name: str, gpus: int, on: str = "", index: str | None = None) -> Obj:
    extended = {NUMBER: str(gpus)}
    if not on:
        return a_pod(name, cpu="1", memory="1Gi", extended=extended)
    pod = running(name, on, cpu="1", memory="1Gi", extended=extended)
    return annotate(pod, **{INDEX: index}) if index is not None else pod


def chosen(session: Session) -> dict[str, str]:
    return {uid: annotations[INDEX] for uid, annotations in session.pod_annotations.items()}


# -- gpushare/share_test.go: the over-subscribed card ------------------------------------------------------


def test_volcano_over_subscribed_card_offers_nothing() -> None:
    """TestGetDevicesIdleGPUMemory_OverSubscribedCardReportsZero and
    TestPredicateGPUbyMemory_OverSubscribedCardNotOffered: a 1000 card holding a 3000 share has no
    idle memory, so a 500 share is not offered it."""
    objects = [volcano_node("n1", gpus=1, memory=1000), share("p1", 3000, "n1", "0"), share("p2", 500)]
    session = opened(cluster(*objects), DEVICESHARE)
    reasons = session.explain(task(session, "p2"))
    assert reasons["node(s) without a GPU that has the memory share free"] == 1


# -- gpushare/device_info_test.go: TestReleaseReturnsRemovedAnnotationKeys ---------------------------------


def test_volcano_released_placement_leaves_no_annotations() -> None:
    """Releasing a placement takes the device back and drops `volcano.sh/gpu-index` and
    `volcano.sh/predicate-time` from what the binder would write."""
    session = opened(cluster(volcano_node("n1", gpus=1), whole("w", 1), whole("other", 1)), DEVICESHARE)
    statement = session.statement()
    statement.allocate(task(session, "w"), 0)
    assert set(session.pod_annotations["uid-w"]) == {INDEX, PREDICATE_TIME}
    assert session.predicate(task(session, "other")).tolist() == [False]
    statement.discard()
    assert session.pod_annotations == {} and session.predicate(task(session, "other")).tolist() == [True]


# -- Lahar's own: Volcano's spelling through whole cycles --------------------------------------------------


def test_devices_split_the_node_memory_evenly() -> None:
    # Two cards of 1000 each: 1200 fits on neither, 900 on one.
    objects = [volcano_node("n1", memory=2000), share("big", 1200), share("fits", 900)]
    session = opened(cluster(*objects), DEVICESHARE)
    assert session.predicate(task(session, "big")).tolist() == [False]
    assert session.predicate(task(session, "fits")).tolist() == [True]


def test_the_chosen_device_is_written_as_volcano_reads_it() -> None:
    session = run(cluster(volcano_node("n1"), share("on-1", 600, "n1", "1"), share("p", 300)), DEVICESHARE)
    # binpack: the fuller card that takes it, card 1.
    annotations = session.pod_annotations["uid-p"]
    assert annotations[INDEX] == "1" and annotations[PREDICATE_TIME] == str(int(session.now * 1e9))
    assert session.pod_annotations == {"uid-p": annotations}  # Lahar's own is not written for Volcano's spelling


def test_whole_gpus_take_the_lowest_free_cards() -> None:
    objects = [volcano_node("n1", gpus=4, memory=4000), whole("held", 1, "n1", "0"), share("s", 100, "n1", "2")]
    # Card 0 held whole, card 2 shared: two cards go to 1 and 3.
    assert chosen(run(cluster(*objects, whole("two", 2)), DEVICESHARE)) == {"uid-two": "1,3"}
    # One card goes to 1; then two cards find only card 3 free.
    assert chosen(run(cluster(*objects, whole("one", 1), whole("two", 2)), DEVICESHARE)) == {"uid-one": "1"}


def test_unhealthy_cards_take_nothing() -> None:
    objects = [volcano_node("n1", gpus=2, unhealthy="0,x"), share("s", 900), whole("w", 2)]
    session = opened(cluster(*objects), DEVICESHARE)
    assert session.predicate(task(session, "w")).tolist() == [False]  # one healthy card
    placed = run(cluster(volcano_node("n1", gpus=2, unhealthy="0"), share("s", 900)), DEVICESHARE)
    assert chosen(placed) == {"uid-s": "1"}


def test_a_card_held_whole_takes_no_share() -> None:
    objects = [volcano_node("n1", gpus=2), whole("w", 1, "n1", "1"), share("a", 600), share("b", 600)]
    session = run(cluster(*objects), DEVICESHARE)
    # Card 1 is held whole: both shares would need card 0, where only one fits.
    assert list(chosen(session).values()) == ["0"]


def test_an_unannotated_pod_counts_where_it_would_have_gone() -> None:
    objects = [volcano_node("n1", gpus=1), whole("w", 1, "n1"), whole("x", 1)]
    session = opened(cluster(*objects), DEVICESHARE)
    assert session.predicate(task(session, "x")).tolist() == [False]


def test_volcano_switches_turn_either_off() -> None:
    arguments = {"deviceshare.GPUNumberEnable": False}
    configuration = conf("allocate", ["predicates", {"name": "deviceshare", "arguments": arguments}])
    # Whole cards are then only counted by the node-level fit (two on the node), not per card.
    session = opened(cluster(volcano_node("n1"), whole("w", 1, "n1", "0"), whole("x", 1)), configuration)
    assert session.predicate(task(session, "x")).tolist() == [True]
