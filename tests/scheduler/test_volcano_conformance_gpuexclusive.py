"""Volcano's GPU exclusivity tests as conformance cases (issue 17; docs/scheduler-conformance.md
tallies them): deviceshare's `gpuexclusive_test.go`, against the rules in
`scheduler/framework/vgpu.py` and the deviceshare plugin's `deviceshare.GPUExclusiveRules`. Volcano
caps the reserved cards (sets their pod limit to their pod count) around its allocator; here a
card holding a pod of one of the same rules is skipped by the fit, so the Go rows about capping
ask which cards a matching pod may still take, and which an unrelated pod may."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.scheduler.conf import parse_conf
from lahar.scheduler.framework import vgpu
from lahar.scheduler.plugins.deviceshare import DeviceShare
from tests.scheduler.preempt_builders import cluster, opened, run, task
from tests.scheduler.vgpu_cases import (
    DEVICE_CONFIG,
    MIG_REGISTER,
    assigned,
    make_cards,
    try_fit,
    vgpu_conf,
    vgpu_node,
    vgpu_pod,
)
from tests.scheduler.volcano_cases import AGREE, DISAGREE

RULES = vgpu.parse_exclusive_rules([{"app": "training", "team": "ml"}, {"workload": "inference"}])
TRAINING = {"app": "training", "team": "ml"}
INFERENCE = {"workload": "inference"}
BOTH = {**TRAINING, **INFERENCE}
SERVING = {"app": "serving"}

# -- TestPodMatchesRule ----------------------------------------------------------------------------------------

MATCHES_RULE = [
    ("pod matches rule 0 (app=training, team=ml)", TRAINING, 0, True),
    ("pod matches rule 0 with extra labels", {**TRAINING, "env": "prod"}, 0, True),
    ("pod missing one label from rule 0", {"app": "training"}, 0, False),
    ("pod has wrong value for rule 0", {"app": "training", "team": "data"}, 0, False),
    ("pod matches rule 1 (workload=inference)", INFERENCE, 1, True),
    ("pod with nil labels matches nothing", None, 0, False),
]


@pytest.mark.parametrize(("name", "labels", "rule", "want"), MATCHES_RULE, ids=[r[0] for r in MATCHES_RULE])
def test_volcano_pod_matches_rule(name: str, labels: dict[str, str] | None, rule: int, want: bool) -> None:
    assert vgpu.matches_rule(labels, RULES[rule]) is want


# -- TestMatchingRules -----------------------------------------------------------------------------------------

MATCHING_RULES = [
    ("matches rule 0 only", TRAINING, {0}),
    ("matches rule 1 only", INFERENCE, {1}),
    ("matches both rules", BOTH, {0, 1}),
    ("matches no rules", SERVING, set()),
    ("nil labels matches nothing", None, set()),
]


@pytest.mark.parametrize(("name", "labels", "want"), MATCHING_RULES, ids=[r[0] for r in MATCHING_RULES])
def test_volcano_matching_rules(name: str, labels: dict[str, str] | None, want: set[int]) -> None:
    assert vgpu.matching_rules(labels, RULES) == want


# -- TestLoadGPUExclusiveConfig and TestParseExclusiveRulesHandlesEdgeCases: the argument ------------------------

TWO_RULES = [{"app": "training", "team": "ml"}, {"workload": "inference"}]
ARGUMENT_YAML = """\
actions: allocate
tiers:
- plugins:
  - name: deviceshare
    arguments:
      deviceshare.VGPUEnable: true
      deviceshare.GPUExclusiveRules:
      - app: training
"""
LOADS = [
    # name, the argument (absent: no key), the rules read or the refusal's words, verdict
    ("defaults with no rules", "absent", (), AGREE),
    ("rules from map[string]interface{}", TWO_RULES, tuple(TWO_RULES), AGREE),
    ("nil input", None, (), AGREE),
    ("empty slice", [], (), AGREE),
    # Volcano reads no rule from either and runs without exclusivity: here the configuration is
    # refused, naming the argument (an empty rule would match every pod).
    ("wrong type", "not a slice", "must be a list of label mappings", DISAGREE),
    ("empty map skipped", [{}], "rule 0 must be a non-empty mapping", DISAGREE),
]


@pytest.mark.parametrize(("name", "given", "want", "verdict"), LOADS, ids=[r[0] for r in LOADS])
def test_volcano_load_gpu_exclusive_config(name: str, given: Any, want: Any, verdict: str) -> None:
    arguments = {} if given == "absent" else {"deviceshare.GPUExclusiveRules": given}
    if isinstance(want, str):
        with pytest.raises(ValueError, match=want):
            DeviceShare(arguments)
    else:
        assert DeviceShare(arguments).argument("deviceshare.GPUExclusiveRules", ()) == want


def test_volcano_load_gpu_exclusive_config_from_yaml() -> None:
    """ "rules from map[interface{}]interface{}": the mapping as a YAML decoder hands it over."""
    option = parse_conf(ARGUMENT_YAML).tiers[0][0]
    assert DeviceShare(option.arguments).argument("deviceshare.GPUExclusiveRules", ()) == ({"app": "training"},)


# -- TestReservedGPUsForPod, TestPodMatchingMultipleRulesSeesUnionOfReservedGPUs, TestNonMatchingPodDoesNotReserve,
#    TestCapGPUsOnlyAffectsSpecifiedIndices, TestEndToEndExclusive ------------------------------------------------


def cards_held(*holders: frozenset[int]) -> list[vgpu.Card]:
    """Cards GPU-0000A... of 16384 MiB shared by 10, card i holding one pod matching `holders[i]`;
    the cards past the holders are empty."""
    cards = make_cards(4, 16384, 10)
    for i, rules in enumerate(holders):
        cards[i].add(f"uid-pod-{i}", 1024, 0, rules=rules)
    return cards


A_AND_B = (frozenset({0}), frozenset({1}))  # pod-a (rule 0) on card 0, pod-b (rule 1) on card 1
RESERVED = [
    ("TestReservedGPUsForPod: same rule only", A_AND_B, TRAINING, {0}),
    ("TestReservedGPUsForPod: a pod matching no rule", A_AND_B, SERVING, set()),
    ("TestPodMatchingMultipleRulesSeesUnionOfReservedGPUs", A_AND_B, BOTH, {0, 1}),
    ("TestNonMatchingPodDoesNotReserve", (), SERVING, set()),
    ("TestCapGPUsOnlyAffectsSpecifiedIndices", (frozenset({0}), frozenset({0})), TRAINING, {0, 1}),
]


@pytest.mark.parametrize(("name", "holders", "labels", "want"), RESERVED, ids=[r[0] for r in RESERVED])
def test_volcano_reserved_gpus_for_pod(
    name: str, holders: tuple[frozenset[int], ...], labels: dict[str, str], want: set[int]
) -> None:
    cards = cards_held(*holders)
    rules = vgpu.matching_rules(labels, RULES)
    assert vgpu.reserved_cards(cards, rules) == want
    # The pod is given any card but those (all four asked: only the free ones fit), and nothing
    # is left capped for the next pod (the cards are as they were).
    free = 4 - len(want)
    annotations: dict[str, str] = {}
    for count, fits in ((free, True), (free + 1, False)):
        verdict = vgpu.fit(
            cards, vgpu.HAMI_CORE, vgpu.container_requests(vgpu_spec_for(count)), annotations, "", "", rules
        )
        assert verdict.fits is fits
    assert [card.used_pods for card in cards] == [1] * len(holders) + [0] * (4 - len(holders))


def vgpu_spec_for(count: int) -> dict[str, Any]:
    return {"containers": [{"resources": {"limits": {vgpu.NUMBER: str(count), vgpu.MEMORY: "1024"}}}]}


def test_volcano_end_to_end_exclusive() -> None:
    cards = cards_held(*A_AND_B)
    training = vgpu.matching_rules(TRAINING, RULES)
    assert try_fit(cards, memory=1024, cards=3, cores=0).fits  # the unrelated pod: every card
    assert try_fit(cards, memory=1024, cards=4, cores=0).fits
    three = vgpu.fit(cards, vgpu.HAMI_CORE, vgpu.container_requests(vgpu_spec_for(3)), {}, "", "", training)
    assert three.fits and "GPU-0000A" not in [device.uuid for device in three.devices[0]]
    assert not vgpu.fit(cards, vgpu.HAMI_CORE, vgpu.container_requests(vgpu_spec_for(4)), {}, "", "", training).fits


# -- TestOnSessionOpenWrapsDevices (and Lahar's own: the rules through whole cycles) -----------------------------------

EXCLUSIVE = vgpu_conf(**{"deviceshare.GPUExclusiveRules": TWO_RULES})


def labelled(pod: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    pod["metadata"]["labels"] = dict(labels)
    return pod


def training_on(card: str, name: str) -> dict[str, Any]:
    """A running rule-0 pod its assignment puts on GPU-`card`."""
    return labelled(vgpu_pod(name, on="n1", **{vgpu.ASSIGNED_IDS: f"GPU-{card},NVIDIA,4096,25:"}), TRAINING)


def test_volcano_on_session_open_reads_the_rules_of_running_pods() -> None:
    """pod-a (rule 0) runs on card GPU-a: a pending rule-0 pod gets GPU-b, though binpack would
    put it on the fuller GPU-a."""
    session = run(cluster(vgpu_node("n1"), training_on("a", "pod-a"), labelled(vgpu_pod("pod-c"), TRAINING)), EXCLUSIVE)
    assert assigned(session, "uid-pod-c").startswith("GPU-b,")


def test_pods_of_one_rule_placed_in_one_cycle_take_different_cards() -> None:
    pods = [labelled(vgpu_pod(f"t{i}"), TRAINING) for i in range(3)]
    session = run(cluster(vgpu_node("n1"), *pods, labelled(vgpu_pod("serve"), SERVING)), EXCLUSIVE)
    placed = [uid for uid in ("uid-t0", "uid-t1", "uid-t2") if uid in session.pod_annotations]
    assert sorted(assigned(session, uid)[:5] for uid in placed) == ["GPU-a", "GPU-b"]  # the third waits
    assert "uid-serve" in session.pod_annotations  # an unrelated pod shares a card
    both_held = opened(
        cluster(vgpu_node("n1"), training_on("a", "x"), training_on("b", "y"), labelled(vgpu_pod("t"), TRAINING)),
        EXCLUSIVE,
    )
    assert both_held.explain(task(both_held, "t")) == {"vGPU: not enough gpu fitted on this node": 1}


def test_exclusivity_does_not_apply_to_mig_nodes() -> None:
    """Volcano skips MIG nodes (their instances are isolated already): two rule-0 pods share a card."""
    mig = vgpu_conf(**{"deviceshare.GPUExclusiveRules": TWO_RULES, "deviceshare.DeviceConfig": DEVICE_CONFIG})
    pods = [labelled(vgpu_pod(f"t{i}", memory=3000), TRAINING) for i in range(3)]
    session = run(cluster(vgpu_node("n1", MIG_REGISTER), *pods), mig)
    assert sorted(assigned(session, f"uid-t{i}") for i in range(3)) == [
        f"GPU-a[group1-{slot}],NVIDIA,3000,25:" for slot in range(3)
    ]
