"""Volcano's `TestAllocateWithNetWorkTopologies` (pkg/scheduler/actions/allocate/allocate_test.go,
volcano-sh/volcano at the commit docs/scheduler-conformance.md names) as facts: each row's
PodGroup (`networkTopology` mode and highestTierAllowed, minMember), pods, nodes, HyperNodes by
tier and expected binds, run through one allocate session with the Go test's plugins (gang,
predicates, network-topology-aware in one tier).

Carried over as written, except how HyperNodes are given: the Go test hands the session each
HyperNode's tier and the set of nodes under it; here each becomes a HyperNode object with those
nodes as `exactMatch` members (the same nodes under the same tiers). The PodGroup's recorded
HyperNode (`BuildPodGroupWithNetWorkTopologies`' third argument) is not carried: Lahar reads where
a job runs from its running pods, which every such row has. The 8 rows giving `highestTierName`
name the tiers on the HyperNodes (`spec.tierName`, as the Go test's `HyperNodesTierNameMap`);
one of them runs p1 and p2 on nodes the cluster does not have (s0-n1, s0-n2 with s3..s6 nodes),
carried as written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.scheduler.volcano_cases import (
    binds,
    outcome,
    quantities,
    vc_hypernode,
    vc_node,
    vc_pod,
    vc_podgroup,
    vc_queue,
)

TIERS = (["gang", "predicates", "network-topology-aware"],)
REQUEST = quantities("2", "4G")
ROLE = "volcano.sh/task-spec"
MASTER_LABEL = {"nodeRole": "master"}


@dataclass(frozen=True)
class TopologyCase:
    name: str
    mode: str
    highest_tier: int
    min_member: int
    pods: list[str]  # "p1" pending, "p1@node" running there; p1 is the master, the rest workers
    nodes: list[str]  # 2 CPUs, 4Gi, 10 pods each
    hypernodes: dict[str, tuple[int, list[str]]]  # name -> (tier, nodes under it)
    expected: int | dict[str, str]  # how many binds, or which
    master_node: str = ""  # labelled nodeRole=master; the master pod then selects it
    lahar_expected: int | dict[str, str] | None = None  # a deliberate disagreement: Lahar's decision
    why: str = ""  # and the reason for it
    tier_name: str = ""  # the PodGroup's highestTierName (instead of highestTierAllowed)
    tier_names: tuple[tuple[int, str], ...] = ()  # each tier's HyperNodes' spec.tierName

    def objects(self) -> list[dict[str, Any]]:
        group = vc_podgroup("pg1", "c1", "q1", self.min_member, None, "Inqueue")
        limit = {"highestTierName": self.tier_name} if self.tier_name else {"highestTierAllowed": self.highest_tier}
        group["spec"]["networkTopology"] = {"mode": self.mode, **limit}
        tier_names = dict(self.tier_names)
        objects = [vc_queue("q1", 1), group]
        for name in self.nodes:
            objects.append(vc_node(name, "2", "4Gi", 10, MASTER_LABEL if name == self.master_node else None))
        for spec in self.pods:
            name, _, node = spec.partition("@")
            role = "master" if name == "p1" else "worker"
            selector = MASTER_LABEL if role == "master" and self.master_node else None
            phase = "Running" if node else "Pending"
            objects.append(vc_pod("c1", name, node, phase, REQUEST, "pg1", {ROLE: role}, selector))
        objects += [
            vc_hypernode(name, tier, under, tier_name=tier_names.get(tier, ""))
            for name, (tier, under) in self.hypernodes.items()
        ]
        return objects


CASES = [
    TopologyCase(
        "soft network topology constrain, can allocate job when resources are enough",
        "soft",
        0,
        3,
        ["p1", "p2", "p3"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (0, ["s0-n1", "s0-n2"]), "s1": (0, ["s1-n3", "s1-n4"]), "s2": (1, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        3,
    ),
    TopologyCase(
        "soft network topology constrain, can allocate job when minavailable < replicas",
        "soft",
        0,
        1,
        ["p1", "p2"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        2,
    ),
    TopologyCase(
        "soft network topology constrain, two available hyperNodes, can allocate job to nodes with affinity",
        "soft",
        0,
        1,
        ["p1"],
        ["s0-n1", "s1-n2"],
        {"s0": (0, ["s0-n1"]), "s1": (0, ["s1-n2"])},
        {"c1/p1": "s1-n2"},
        master_node="s1-n2",
    ),
    TopologyCase(
        "soft network topology constrain and tasks in job rescheduled, can allocate job when resources are enough",
        "soft",
        0,
        2,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        1,
    ),
    TopologyCase(
        "soft network topology constrain and tasks in job rescheduled, can allocate job when resources are"
        " enough and minavailable = replicas",
        "soft",
        0,
        3,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        1,
    ),
    TopologyCase(
        "soft network topology constrain and tasks in job rescheduled, can allocate job when cross"
        " highestTierAllowed tier and hyperNodesInfo has three tier",
        "soft",
        0,
        2,
        ["p1@s3-n1", "p2@s3-n2", "p3"],
        ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"],
        {
            "s0": (3, ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s1": (2, ["s3-n1", "s3-n2", "s4-n1", "s4-n2"]),
            "s2": (2, ["s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s3": (1, ["s3-n1", "s3-n2"]),
            "s4": (1, ["s4-n1", "s4-n2"]),
            "s5": (1, ["s5-n1", "s5-n2"]),
            "s6": (1, ["s6-n1", "s6-n2"]),
        },
        1,
    ),
    TopologyCase(
        "hard network topology constrain, can not allocate job when cross highestTierAllowed tier",
        "hard",
        1,
        3,
        ["p1", "p2", "p3"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        0,
    ),
    TopologyCase(
        "hard network topology constrain, can allocate job when highestTierAllowed not reached",
        "hard",
        2,
        3,
        ["p1", "p2", "p3"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        3,
    ),
    TopologyCase(
        "hard network topology constrain, can allocate job when multi hyperNodes are available",
        "hard",
        1,
        2,
        ["p1", "p2"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        2,
    ),
    TopologyCase(
        "hard network topology constrain, can allocate job when minavailable < replicas",
        "hard",
        1,
        1,
        ["p1", "p2"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        2,
    ),
    TopologyCase(
        "hard network topology constrain, two available hyperNodes, can allocate job to nodes with affinity",
        "hard",
        1,
        1,
        ["p1"],
        ["s0-n1", "s1-n2"],
        {"s0": (0, ["s0-n1"]), "s1": (0, ["s1-n2"])},
        {"c1/p1": "s1-n2"},
        master_node="s1-n2",
    ),
    TopologyCase(
        "hard network topology constrain and tasks in job rescheduled, can allocate job when"
        " highestTierAllowed not reached",
        "hard",
        2,
        2,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        1,
    ),
    TopologyCase(
        "hard network topology constrain and tasks in job rescheduled, can allocate job when"
        " highestTierAllowed not reached and minavailable = replicas",
        "hard",
        2,
        3,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        1,
    ),
    TopologyCase(
        "hard network topology constrain and tasks in job rescheduled, can allocate job when"
        " highestTierAllowed not reached and hyperNodesInfo has three tier",
        "hard",
        2,
        2,
        ["p1@s3-n1", "p2@s3-n2", "p3"],
        ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"],
        {
            "s0": (3, ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s1": (2, ["s3-n1", "s3-n2", "s4-n1", "s4-n2"]),
            "s2": (2, ["s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s3": (1, ["s3-n1", "s3-n2"]),
            "s4": (1, ["s4-n1", "s4-n2"]),
            "s5": (1, ["s5-n1", "s5-n2"]),
            "s6": (1, ["s6-n1", "s6-n2"]),
        },
        1,
    ),
    TopologyCase(
        "hard network topology constrain and tasks in job rescheduled, can not allocate job when cross"
        " highestTierAllowed tier",
        "hard",
        1,
        2,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])},
        0,
    ),
    TopologyCase(
        "hard network topology constrain and tasks in job rescheduled, can not allocate job when cross"
        " highestTierAllowed tier and hyperNodesInfo has three tier",
        "hard",
        1,
        2,
        ["p1@s3-n1", "p2@s3-n2", "p3"],
        ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"],
        {
            "s0": (3, ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s1": (2, ["s3-n1", "s3-n2", "s4-n1", "s4-n2"]),
            "s2": (2, ["s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s3": (1, ["s3-n1", "s3-n2"]),
            "s4": (1, ["s4-n1", "s4-n2"]),
            "s5": (1, ["s5-n1", "s5-n2"]),
            "s6": (1, ["s6-n1", "s6-n2"]),
        },
        0,
    ),
    TopologyCase(
        "hard network topology constrain and tasks in job rescheduled, can allocate job when LCAHyperNode is empty",
        "hard",
        2,
        2,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        ["s0-n1", "s0-n2", "s1-n3", "s1-n4"],
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"])},
        1,
        lahar_expected=0,
        why=(
            "p1 and p2 run in s0, which is full; no HyperNode of tier 2 holds both s0 and s1. Volcano"
            " binds p3 in s1, splitting a hard job across HyperNodes with no common one of an allowed"
            " tier; Lahar keeps every task of a hard job under one HyperNode of tier <= highestTierAllowed"
            " and binds nothing."
        ),
    ),
]


TWO_TIER_NAMES = ((1, "volcano.sh/task-spec"), (2, "volcano.sh/job-spec"))
SPLIT = {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"])}
FOUR = ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]
THREE = {
    "s0": (3, ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
    "s1": (2, ["s3-n1", "s3-n2", "s4-n1", "s4-n2"]),
    "s2": (2, ["s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
    **{f"s{i}": (1, [f"s{i}-n1", f"s{i}-n2"]) for i in (3, 4, 5, 6)},
}
TASK_SPEC, JOB_SPEC = "volcano.sh/task-spec", "volcano.sh/job-spec"
CASES += [
    TopologyCase(
        "hard network topology constrain, can not allocate job when cross highestTierName tier",
        "hard",
        0,
        3,
        ["p1", "p2", "p3"],
        FOUR,
        SPLIT,
        0,
        tier_name=TASK_SPEC,
        tier_names=TWO_TIER_NAMES,
    ),
    TopologyCase(
        "hard network topology constrain, can allocate job when the tier corresponding to highestTierName not reached",
        "hard",
        0,
        3,
        ["p1", "p2", "p3"],
        FOUR,
        SPLIT,
        3,
        tier_name=JOB_SPEC,
        tier_names=TWO_TIER_NAMES,
    ),
    TopologyCase(
        "hard network topology constrain, can allocate job when multi hyperNodes are available (highestTierName)",
        "hard",
        0,
        2,
        ["p1", "p2"],
        FOUR,
        SPLIT,
        2,
        tier_name=TASK_SPEC,
        tier_names=TWO_TIER_NAMES,
    ),
    TopologyCase(
        "hard network topology constrain and task in job rescheduled, can allocate job when the tier corresponding"
        " to highestTierName not reached",
        "hard",
        0,
        2,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        FOUR,
        SPLIT,
        1,
        tier_name=JOB_SPEC,
        tier_names=TWO_TIER_NAMES,
    ),
    TopologyCase(
        "hard network topology constrain and task in job rescheduled, can allocate job when the tier corresponding"
        " to highestTierName not reached and minavailable = replicas",
        "hard",
        0,
        3,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        FOUR,
        SPLIT,
        1,
        tier_name=JOB_SPEC,
        tier_names=TWO_TIER_NAMES,
    ),
    TopologyCase(
        "hard network topology constrain and task in job rescheduled, can allocate job when the tier corresponding"
        " to highestTierName not reached and hyperNodesInfo has three tier",
        "hard",
        0,
        2,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"],
        THREE,
        1,
        tier_name=JOB_SPEC,
        tier_names=(*TWO_TIER_NAMES, (3, "volcano.sh/hypernode-spec")),
    ),
    TopologyCase(
        "hard network topology constrain and tasks in job rescheduled, can not allocate job when cross the tier"
        " corresponding to highestTierName",
        "hard",
        0,
        2,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        FOUR,
        SPLIT,
        0,
        tier_name=TASK_SPEC,
        tier_names=TWO_TIER_NAMES,
    ),
    TopologyCase(
        "hard network topology with highestTierName constrain and tasks in job rescheduled, can allocate job when"
        " here is no corresponding highestTierAllowed for highestTierName",
        "hard",
        0,
        2,
        ["p1@s0-n1", "p2@s0-n2", "p3"],
        FOUR,
        {"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"])},
        1,
        tier_name="volcano.sh/hypercluster",
        tier_names=((1, TASK_SPEC),),
        lahar_expected=0,
        why=(
            "no HyperNode carries the tier name volcano.sh/hypercluster. Volcano logs it and drops the"
            " limit, binding p3 in s1 while p1 and p2 run in s0 (no HyperNode holds both); Lahar cannot"
            " honour a limit it cannot read, so the hard job waits, its message naming the tier name."
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_volcano_allocate_with_network_topologies(case: TopologyCase) -> None:
    placed = binds(outcome(case.objects(), "allocate", TIERS))
    expected = case.expected if case.lahar_expected is None else case.lahar_expected
    assert case.lahar_expected is None or case.why, "a disagreement says why"
    if isinstance(expected, int):
        assert len(placed) == expected
    else:
        assert placed == expected
