"""Volcano's `TestAllocateWithPartitionPolicyNetworkTopology` (pkg/scheduler/actions/allocate/
allocate_test.go, volcano-sh/volcano at the commit docs/scheduler-conformance.md names) as facts:
each row's PodGroup (`networkTopology` mode and highestTierAllowed, minMember, `subGroupPolicy`
with matchLabelKeys, subGroupSize, minSubGroups and each policy's `networkTopology`), pods,
nodes, HyperNodes by tier and expected binds, run through one allocate session with the Go
test's plugins (gang, predicates, network-topology-aware in one tier). The table has 37 rows at
that commit (a 38th `Name:` in the file belongs to the benchmark that follows it).

Carried over as written, except as `test_volcano_topology_conformance.py` does: each HyperNode
is given as an object with the Go test's nodes as `exactMatch` members, and the PodGroup's
recorded HyperNode (`BuildPodGroupWithSubGroupPolicy`' third argument) is not carried: Lahar
reads where a job and each sub-job run from their running pods (as Volcano recovers them after a
restart, `recoverAllocatedHyperNode`), which every such row has. Where a row sets
`MinimalBindCheck`, the Go test checks only the number of binds, though some such rows also
write the bind they mean (`ExpectBindMap`); both are checked here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
SPEC = "volcano.sh/task-spec"
INSTANCE = "volcano.sh/task-instance"


def policy(name: str, key: str, mode: str, tier: int, size: int = 1, min_groups: int = 0) -> dict[str, Any]:
    """util.BuildSubGroupPolicyWithMinSubGroups: one label key, a topology when `mode` is set."""
    entry: dict[str, Any] = {"name": name, "matchLabelKeys": [key], "subGroupSize": size, "minSubGroups": min_groups}
    if mode:
        entry["networkTopology"] = {"mode": mode, "highestTierAllowed": tier}
    return entry


@dataclass(frozen=True)
class Pod:
    name: str
    node: str  # "" pending, else running there
    key: str
    value: str
    request: tuple[str, str] = ("2", "4G")
    selector: dict[str, str] = field(default_factory=dict)


def pod(
    name: str,
    node: str,
    key: str,
    value: str,
    request: tuple[str, str] = ("2", "4G"),
    selector: dict[str, str] | None = None,
) -> Pod:
    return Pod(name, node, key, value, request, selector or {})


@dataclass(frozen=True)
class SubJobCase:
    name: str
    podgroup: tuple[str, int, int]  # networkTopology mode ("": none), highestTierAllowed, minMember
    policies: list[dict[str, Any]]
    pods: list[Pod]
    nodes: list[tuple[Any, ...]]  # (name, cpu, memory[, labels]), 10 pods each
    hypernodes: dict[str, tuple[int, list[str]]]  # name -> (tier, nodes under it)
    expected: int  # ExpectBindsNum
    bind_map: dict[str, str] | None = None  # ExpectBindMap
    minimal: bool = True  # MinimalBindCheck
    lahar_expected: int | None = None  # a deliberate disagreement: Lahar's bind count
    why: str = ""
    map_cannot_hold: str = ""  # why a written ExpectBindMap the Go test never checks cannot hold

    def objects(self) -> list[dict[str, Any]]:
        mode, tier, min_member = self.podgroup
        group = vc_podgroup("pg1", "c1", "q1", min_member, None, "Inqueue")
        if mode:
            group["spec"]["networkTopology"] = {"mode": mode, "highestTierAllowed": tier}
        group["spec"]["subGroupPolicy"] = self.policies
        objects = [vc_queue("q1", 1), group]
        for name, cpu, memory, *labels in self.nodes:
            objects.append(vc_node(name, cpu, memory, 10, labels[0] if labels else None))
        for p in self.pods:
            phase = "Running" if p.node else "Pending"
            objects.append(
                vc_pod("c1", p.name, p.node, phase, quantities(*p.request), "pg1", {p.key: p.value}, p.selector or None)
            )
        objects += [vc_hypernode(name, hn_tier, under) for name, (hn_tier, under) in self.hypernodes.items()]
        return objects


CASES = [
    SubJobCase(
        "podgroup hard network topology constrain and subGroup soft network topology constrain, can allocate "
        "job when resources are enough",
        podgroup=("hard", 2, 3),
        policies=[policy("task1", "volcano.sh/task-spec", "soft", 0, size=1, min_groups=0)],
        pods=[pod("p1", "", SPEC, "master"), pod("p2", "", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (0, ["s0-n1", "s0-n2"]),
            "s1": (0, ["s1-n3", "s1-n4"]),
            "s2": (1, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=3,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup soft network topology constrain, can allocate "
        "job when minavailable < replicas",
        podgroup=("hard", 1, 1),
        policies=[policy("task1", "volcano.sh/task-spec", "soft", 0, size=1, min_groups=0)],
        pods=[pod("p1", "", SPEC, "master"), pod("p2", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=2,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup soft network topology constrain, two available"
        " hyperNodes, can allocate job to nodes with affinity",
        podgroup=("hard", 1, 1),
        policies=[policy("task1", "volcano.sh/task-spec", "soft", 0, size=1, min_groups=0)],
        pods=[pod("p1", "", SPEC, "master", selector={"nodeRole": "master"})],
        nodes=[("s0-n1", "2", "4Gi"), ("s1-n2", "2", "4Gi", {"nodeRole": "master"})],
        hypernodes={"s0": (0, ["s0-n1"]), "s1": (0, ["s1-n2"])},
        expected=1,
        bind_map={"c1/p1": "s1-n2"},
        minimal=False,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup soft network topology constrain and tasks in "
        "job rescheduled, can allocate job when resources are enough",
        podgroup=("hard", 2, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "soft", 0, size=1, min_groups=0)],
        pods=[pod("p1", "s0-n1", SPEC, "master"), pod("p2", "s0-n2", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=1,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup soft network topology constrain and tasks in "
        "job rescheduled, can allocate job when resources are enough and minavailable = replicas",
        podgroup=("hard", 2, 3),
        policies=[policy("task1", "volcano.sh/task-spec", "soft", 0, size=1, min_groups=0)],
        pods=[pod("p1", "s0-n1", SPEC, "master"), pod("p2", "s0-n2", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=1,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup soft network topology constrain and tasks in "
        "job rescheduled, can allocate job when cross highestTierAllowed tier and hyperNodesInfo has three "
        "tier",
        podgroup=("hard", 2, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "soft", 0, size=1, min_groups=0)],
        pods=[pod("p1", "s3-n1", SPEC, "master"), pod("p2", "s3-n2", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[
            ("s3-n1", "2", "4Gi"),
            ("s3-n2", "2", "4Gi"),
            ("s4-n1", "2", "4Gi"),
            ("s4-n2", "2", "4Gi"),
            ("s5-n1", "2", "4Gi"),
            ("s5-n2", "2", "4Gi"),
            ("s6-n1", "2", "4Gi"),
            ("s6-n2", "2", "4Gi"),
        ],
        hypernodes={
            "s0": (3, ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s1": (2, ["s3-n1", "s3-n2", "s4-n1", "s4-n2"]),
            "s2": (2, ["s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s3": (1, ["s3-n1", "s3-n2"]),
            "s4": (1, ["s4-n1", "s4-n2"]),
            "s5": (1, ["s5-n1", "s5-n2"]),
            "s6": (1, ["s6-n1", "s6-n2"]),
        },
        expected=1,
    ),
    SubJobCase(
        "podgroup soft network topology constrain and subGroup hard network topology constrain, can allocate "
        "job when resources are enough",
        podgroup=("soft", 0, 3),
        policies=[
            policy("task1", "volcano.sh/task-spec", "hard", 1, size=2, min_groups=0),
            policy("task2", "volcano.sh/task-instance", "hard", 1, size=1, min_groups=0),
        ],
        pods=[pod("p1", "", SPEC, "master"), pod("p2", "", SPEC, "master"), pod("p3", "", INSTANCE, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi")],
        hypernodes={"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3"])},
        expected=3,
        bind_map={"c1/p1": "s1-n3"},
        map_cannot_hold=(
            "p1 and p2 form sub-job task1-master of size 2 with highestTierAllowed 1, which only s0 (two"
            " nodes) can hold; p1 on s1-n3 would leave p2 alone in its sub-job (the Go row sets"
            " MinimalBindCheck, so only the count is checked there)"
        ),
    ),
    SubJobCase(
        "podgroup soft network topology constrain and subGroup hard network topology constrain, can allocate "
        "job when minavailable < replicas",
        podgroup=("soft", 0, 1),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=0)],
        pods=[pod("p1", "", SPEC, "master"), pod("p2", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=2,
    ),
    SubJobCase(
        "podgroup soft network topology constrain and subGroup hard network topology constrain, can not "
        "allocate job when cross highestTierAllowed tier",
        podgroup=("soft", 0, 3),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=0)],
        pods=[
            pod("p1", "", SPEC, "master"),
            pod("p2", "", SPEC, "worker"),
            pod("p3", "", SPEC, "worker"),
            pod("p4", "", SPEC, "worker"),
        ],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=0,
    ),
    SubJobCase(
        "podgroup soft network topology constrain and subGroup hard network topology constrain and tasks in "
        "job rescheduled, can allocate job when resources are enough",
        podgroup=("soft", 0, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=0)],
        pods=[pod("p1", "s0-n1", SPEC, "master"), pod("p2", "s1-n3", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=1,
        bind_map={"c1/p3": "s1-n4"},
    ),
    SubJobCase(
        "podgroup soft network topology constrain and subGroup hard network topology constrain and tasks in "
        "job rescheduled, can not allocate job when cross highestTierAllowed tier and hyperNodesInfo has "
        "three tier",
        podgroup=("soft", 0, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 2, size=1, min_groups=0)],
        pods=[
            pod("p1", "s3-n1", SPEC, "master"),
            pod("p2", "s3-n2", SPEC, "worker"),
            pod("p3", "s4-n1", SPEC, "worker"),
            pod("p4", "s4-n2", SPEC, "worker"),
            pod("p5", "", SPEC, "worker"),
        ],
        nodes=[
            ("s3-n1", "2", "4Gi"),
            ("s3-n2", "2", "4Gi"),
            ("s4-n1", "2", "4Gi"),
            ("s4-n2", "2", "4Gi"),
            ("s5-n1", "2", "4Gi"),
            ("s5-n2", "2", "4Gi"),
            ("s6-n1", "2", "4Gi"),
            ("s6-n2", "2", "4Gi"),
        ],
        hypernodes={
            "s0": (3, ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s1": (2, ["s3-n1", "s3-n2", "s4-n1", "s4-n2"]),
            "s2": (2, ["s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s3": (1, ["s3-n1", "s3-n2"]),
            "s4": (1, ["s4-n1", "s4-n2"]),
            "s5": (1, ["s5-n1", "s5-n2"]),
            "s6": (1, ["s6-n1", "s6-n2"]),
        },
        expected=0,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain, can allocate "
        "job when highestTierAllowed not reached",
        podgroup=("hard", 2, 3),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=0)],
        pods=[pod("p1", "", SPEC, "master"), pod("p2", "", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=3,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain, can allocate "
        "job according to the network topology constrain of subGroup policy",
        podgroup=("hard", 2, 3),
        policies=[
            policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=0),
            policy("task2", "volcano.sh/task-instance", "hard", 1, size=2, min_groups=0),
        ],
        pods=[pod("p1", "", SPEC, "master"), pod("p2", "", INSTANCE, "worker"), pod("p3", "", INSTANCE, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi")],
        hypernodes={"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3"])},
        expected=3,
        bind_map={"c1/p1": "s1-n3"},
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain, can allocate "
        "job when multi hyperNodes are available",
        podgroup=("hard", 2, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=0)],
        pods=[pod("p1", "", SPEC, "master"), pod("p2", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=2,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain, can allocate "
        "job when minavailable < replicas",
        podgroup=("hard", 2, 1),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=0)],
        pods=[pod("p1", "", SPEC, "master"), pod("p2", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=2,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain and tasks in "
        "job rescheduled, two available hyperNodes, can allocate job to nodes with affinity",
        podgroup=("hard", 2, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=0)],
        pods=[pod("p1", "s0-n1", SPEC, "master"), pod("p2", "s1-n3", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=1,
        bind_map={"c1/p3": "s1-n4"},
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain and tasks in "
        "job rescheduled, can allocate job when highestTierAllowed not reached and minavailable = replicas",
        podgroup=("hard", 2, 3),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 2, size=1, min_groups=0)],
        pods=[pod("p1", "s0-n1", SPEC, "master"), pod("p2", "s0-n2", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=1,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain and tasks in "
        "job rescheduled, can allocate job when highestTierAllowed not reached and hyperNodesInfo has three "
        "tier",
        podgroup=("hard", 3, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 2, size=1, min_groups=0)],
        pods=[pod("p1", "s3-n1", SPEC, "master"), pod("p2", "s3-n2", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[
            ("s3-n1", "2", "4Gi"),
            ("s3-n2", "2", "4Gi"),
            ("s4-n1", "2", "4Gi"),
            ("s4-n2", "2", "4Gi"),
            ("s5-n1", "2", "4Gi"),
            ("s5-n2", "2", "4Gi"),
            ("s6-n1", "2", "4Gi"),
            ("s6-n2", "2", "4Gi"),
        ],
        hypernodes={
            "s0": (3, ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s1": (2, ["s3-n1", "s3-n2", "s4-n1", "s4-n2"]),
            "s2": (2, ["s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s3": (1, ["s3-n1", "s3-n2"]),
            "s4": (1, ["s4-n1", "s4-n2"]),
            "s5": (1, ["s5-n1", "s5-n2"]),
            "s6": (1, ["s6-n1", "s6-n2"]),
        },
        expected=1,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain and tasks in "
        "job rescheduled, can not allocate job when cross highestTierAllowed tier",
        podgroup=("hard", 2, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=0)],
        pods=[pod("p1", "s0-n1", SPEC, "master"), pod("p2", "s0-n2", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=0,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain and tasks in "
        "job rescheduled, can not allocate job when cross highestTierAllowed tier and hyperNodesInfo has "
        "three tier",
        podgroup=("hard", 3, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 2, size=1, min_groups=0)],
        pods=[
            pod("p1", "s3-n1", SPEC, "master"),
            pod("p2", "s3-n2", SPEC, "worker"),
            pod("p3", "s4-n1", SPEC, "worker"),
            pod("p4", "s4-n2", SPEC, "worker"),
            pod("p5", "", SPEC, "worker"),
        ],
        nodes=[
            ("s3-n1", "2", "4Gi"),
            ("s3-n2", "2", "4Gi"),
            ("s4-n1", "2", "4Gi"),
            ("s4-n2", "2", "4Gi"),
            ("s5-n1", "2", "4Gi"),
            ("s5-n2", "2", "4Gi"),
            ("s6-n1", "2", "4Gi"),
            ("s6-n2", "2", "4Gi"),
        ],
        hypernodes={
            "s0": (3, ["s3-n1", "s3-n2", "s4-n1", "s4-n2", "s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s1": (2, ["s3-n1", "s3-n2", "s4-n1", "s4-n2"]),
            "s2": (2, ["s5-n1", "s5-n2", "s6-n1", "s6-n2"]),
            "s3": (1, ["s3-n1", "s3-n2"]),
            "s4": (1, ["s4-n1", "s4-n2"]),
            "s5": (1, ["s5-n1", "s5-n2"]),
            "s6": (1, ["s6-n1", "s6-n2"]),
        },
        expected=0,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain and tasks in "
        "job rescheduled, can allocate job when LCAHyperNode is empty",
        podgroup=("hard", 3, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 2, size=1, min_groups=0)],
        pods=[pod("p1", "s0-n1", SPEC, "master"), pod("p2", "s0-n2", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3", "s1-n4"])},
        expected=1,
        lahar_expected=0,
        why=(
            "as TestAllocateWithNetWorkTopologies' row of the same name (disagreement 4): p1 and p2 run"
            " in s0 (full), s0 and s1 are tier 1 and no HyperNode holds both; Volcano's virtual cluster-top"
            " HyperNode (tier 2 here) is within the job's highestTierAllowed 3 and the sub-job's 2, so it"
            " binds p3 in s1; Lahar keeps a hard job (and sub-job) under one real HyperNode of an allowed"
            " tier, and binds nothing"
        ),
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain, can allocate "
        "job according to the network topology constrain of subGroup policy with minSubGroups",
        podgroup=("hard", 2, 5),
        policies=[
            policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=1),
            policy("task2", "volcano.sh/task-instance", "hard", 1, size=2, min_groups=2),
        ],
        pods=[
            pod("p1", "", SPEC, "master", request=("2", "4Gi")),
            pod("p2", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p3", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p4", "", INSTANCE, "worker2", request=("2", "4Gi")),
            pod("p5", "", INSTANCE, "worker2", request=("2", "4Gi")),
        ],
        nodes=[
            ("s0-n1", "2", "4Gi"),
            ("s0-n2", "2", "4Gi"),
            ("s1-n3", "2", "4Gi"),
            ("s1-n4", "2", "4Gi"),
            ("s2-n5", "2", "4Gi"),
        ],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (1, ["s2-n5"]),
            "s3": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4", "s2-n5"]),
        },
        expected=5,
        bind_map={"c1/p1": "s2-n5"},
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain, can allocate "
        "job according to the network topology constrain of subGroup policy with minSubGroups and "
        "minavailable = replicas",
        podgroup=("hard", 2, 3),
        policies=[
            policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=1),
            policy("task2", "volcano.sh/task-instance", "hard", 1, size=2, min_groups=1),
        ],
        pods=[
            pod("p1", "", SPEC, "master", request=("2", "4Gi")),
            pod("p2", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p3", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p4", "", INSTANCE, "worker2", request=("2", "4Gi")),
            pod("p5", "", INSTANCE, "worker2", request=("2", "4Gi")),
        ],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi")],
        hypernodes={"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3"])},
        expected=3,
        bind_map={"c1/p1": "s1-n3"},
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain, can allocate "
        "job according to the network topology constrain of subGroup policy with minSubGroups and hypernode "
        "resources meet minSubGroups",
        podgroup=("hard", 2, 3),
        policies=[
            policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=2),
            policy("task2", "volcano.sh/task-instance", "hard", 1, size=2, min_groups=1),
        ],
        pods=[
            pod("p1", "", SPEC, "master", request=("2", "4Gi")),
            pod("p2", "", SPEC, "master2", request=("2", "4Gi")),
            pod("p3", "", SPEC, "master3", request=("2", "4Gi")),
            pod("p4", "", SPEC, "master4", request=("2", "4Gi")),
            pod("p5", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p6", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p7", "", INSTANCE, "worker2", request=("2", "4Gi")),
            pod("p8", "", INSTANCE, "worker2", request=("2", "4Gi")),
        ],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=4,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain, can not "
        "allocate job when minMember is not satisfied",
        podgroup=("hard", 2, 5),
        policies=[
            policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=1),
            policy("task2", "volcano.sh/task-instance", "hard", 1, size=2, min_groups=1),
        ],
        pods=[
            pod("p1", "", SPEC, "master", request=("2", "4Gi")),
            pod("p2", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p3", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p4", "", INSTANCE, "worker2", request=("2", "4Gi")),
            pod("p5", "", INSTANCE, "worker2", request=("2", "4Gi")),
        ],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=0,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain, can not "
        "allocate job when minSubGroups is not satisfied",
        podgroup=("hard", 2, 3),
        policies=[
            policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=1),
            policy("task2", "volcano.sh/task-instance", "hard", 1, size=2, min_groups=2),
        ],
        pods=[
            pod("p1", "", SPEC, "master", request=("2", "4Gi")),
            pod("p2", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p3", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p4", "", INSTANCE, "worker2", request=("2", "4Gi")),
            pod("p5", "", INSTANCE, "worker2", request=("2", "4Gi")),
        ],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=0,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain with "
        "minSubGroups and tasks in job rescheduled, two available hyperNodes, can allocate job to nodes with "
        "affinity",
        podgroup=("hard", 2, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=2, min_groups=1)],
        pods=[pod("p1", "s0-n1", SPEC, "master"), pod("p2", "s1-n3", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=1,
        bind_map={"c1/p3": "s1-n4"},
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain with "
        "minSubGroups and tasks in job rescheduled, can not allocate job when hypernode resources are "
        "insufficient.",
        podgroup=("hard", 2, 2),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=2, min_groups=1)],
        pods=[
            pod("p1", "s0-n1", SPEC, "master"),
            pod("p2", "s1-n3", SPEC, "worker"),
            pod("p3", "s1-n4", SPEC, "worker"),
            pod("p4", "", SPEC, "worker"),
        ],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=0,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain with "
        "minSubGroups and tasks in job rescheduled, can allocate job when highestTierAllowed not reached and "
        "minAvailable = replicas",
        podgroup=("hard", 2, 4),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 2, size=2, min_groups=2)],
        pods=[
            pod("p1", "s0-n1", SPEC, "master"),
            pod("p2", "s0-n2", SPEC, "worker"),
            pod("p3", "", SPEC, "worker"),
            pod("p4", "", SPEC, "master"),
        ],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=2,
    ),
    SubJobCase(
        "podgroup hard network topology constrain and subGroup hard network topology constrain with "
        "minSubGroups and tasks in job rescheduled, can allocate job when subGroup is rescheduled",
        podgroup=("hard", 2, 3),
        policies=[
            policy("task1", "volcano.sh/task-spec", "hard", 1, size=1, min_groups=2),
            policy("task2", "volcano.sh/task-instance", "hard", 1, size=2, min_groups=1),
        ],
        pods=[
            pod("p1", "", SPEC, "master", request=("2", "4Gi")),
            pod("p2", "", SPEC, "master2", request=("2", "4Gi")),
            pod("p3", "s0-n1", SPEC, "master3", request=("2", "4Gi")),
            pod("p4", "s0-n2", SPEC, "master4", request=("2", "4Gi")),
            pod("p5", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p6", "", INSTANCE, "worker", request=("2", "4Gi")),
            pod("p7", "", INSTANCE, "worker2", request=("2", "4Gi")),
            pod("p8", "", INSTANCE, "worker2", request=("2", "4Gi")),
        ],
        nodes=[("s0-n1", "2", "4Gi"), ("s0-n2", "2", "4Gi"), ("s1-n3", "2", "4Gi"), ("s1-n4", "2", "4Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=2,
    ),
    SubJobCase(
        "rescheduling scenario: SubJob with multiple pending tasks, GetMinResources returns sum of all "
        "pending tasks resources",
        podgroup=("hard", 2, 4),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=4, min_groups=0)],
        pods=[
            pod("p1", "s0-n1", SPEC, "worker"),
            pod("p2", "s0-n2", SPEC, "worker"),
            pod("p3", "", SPEC, "worker"),
            pod("p4", "", SPEC, "worker"),
        ],
        nodes=[("s0-n1", "4", "8Gi"), ("s0-n2", "4", "8Gi"), ("s1-n3", "4", "8Gi"), ("s1-n4", "4", "8Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=2,
    ),
    SubJobCase(
        "rescheduling scenario: SubJob with single pending task",
        podgroup=("hard", 2, 3),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=3, min_groups=0)],
        pods=[pod("p1", "s0-n1", SPEC, "worker"), pod("p2", "s0-n2", SPEC, "worker"), pod("p3", "", SPEC, "worker")],
        nodes=[("s0-n1", "4", "8Gi"), ("s0-n2", "4", "8Gi"), ("s1-n3", "4", "8Gi")],
        hypernodes={"s0": (1, ["s0-n1", "s0-n2"]), "s1": (1, ["s1-n3"]), "s2": (2, ["s0-n1", "s0-n2", "s1-n3"])},
        expected=1,
    ),
    SubJobCase(
        "rescheduling scenario: multiple SubJobs with different pending task counts",
        podgroup=("hard", 2, 6),
        policies=[
            policy("task1", "volcano.sh/task-spec", "hard", 1, size=3, min_groups=0),
            policy("task2", "volcano.sh/task-instance", "hard", 1, size=3, min_groups=0),
        ],
        pods=[
            pod("p1", "s0-n1", SPEC, "master"),
            pod("p2", "s0-n2", SPEC, "master"),
            pod("p3", "", SPEC, "master"),
            pod("p4", "s1-n3", INSTANCE, "worker"),
            pod("p5", "", INSTANCE, "worker"),
            pod("p6", "", INSTANCE, "worker"),
        ],
        nodes=[("s0-n1", "4", "8Gi"), ("s0-n2", "4", "8Gi"), ("s1-n3", "4", "8Gi"), ("s1-n4", "4", "8Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=3,
    ),
    SubJobCase(
        "rescheduling scenario: pending tasks with different resource requirements",
        podgroup=("hard", 1, 3),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=3, min_groups=0)],
        pods=[
            pod("p1-running", "s0-n1", SPEC, "worker"),
            pod("p2-pending-small", "", SPEC, "worker"),
            pod("p3-pending-large", "", SPEC, "worker", request=("4", "8G")),
        ],
        nodes=[("s0-n1", "10", "20Gi"), ("s0-n2", "10", "20Gi")],
        hypernodes={"s0": (1, ["s0-n1", "s0-n2"])},
        expected=2,
    ),
    SubJobCase(
        "rescheduling scenario: insufficient resources for pending tasks allocation",
        podgroup=("hard", 1, 3),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 1, size=3, min_groups=0)],
        pods=[
            pod("p1", "s0-n1", SPEC, "worker", request=("4", "4G")),
            pod("p2", "", SPEC, "worker", request=("4", "4G")),
            pod("p3", "", SPEC, "worker", request=("4", "4G")),
        ],
        nodes=[("s0-n1", "4", "8Gi"), ("s0-n2", "4", "8Gi")],
        hypernodes={"s0": (1, ["s0-n1", "s0-n2"])},
        expected=0,
    ),
    SubJobCase(
        "rescheduling scenario: SubJob rescheduling within tier-2 HyperNode constraint",
        podgroup=("hard", 2, 4),
        policies=[policy("task1", "volcano.sh/task-spec", "hard", 2, size=4, min_groups=0)],
        pods=[
            pod("p1", "s0-n1", SPEC, "worker"),
            pod("p2", "s0-n2", SPEC, "worker"),
            pod("p3", "", SPEC, "worker"),
            pod("p4", "", SPEC, "worker"),
        ],
        nodes=[("s0-n1", "4", "8Gi"), ("s0-n2", "4", "8Gi"), ("s1-n3", "4", "8Gi"), ("s1-n4", "4", "8Gi")],
        hypernodes={
            "s0": (1, ["s0-n1", "s0-n2"]),
            "s1": (1, ["s1-n3", "s1-n4"]),
            "s2": (2, ["s0-n1", "s0-n2", "s1-n3", "s1-n4"]),
        },
        expected=2,
    ),
    SubJobCase(
        "no network topology at job or subgroup level but has SubJobPolicy, can allocate job successfully",
        podgroup=("", 0, 2),
        policies=[policy("worker", "volcano.sh/task-spec", "", 0, size=1, min_groups=2)],
        pods=[pod("p1", "", SPEC, "worker-0"), pod("p2", "", SPEC, "worker-1")],
        nodes=[("n1", "2", "4Gi"), ("n2", "2", "4Gi")],
        hypernodes={},
        expected=2,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_volcano_allocate_with_partition_policy_network_topology(case: SubJobCase) -> None:
    placed = binds(outcome(case.objects(), "allocate", TIERS))
    assert case.lahar_expected is None or case.why, "a disagreement says why"
    expected = case.expected if case.lahar_expected is None else case.lahar_expected
    assert len(placed) == expected, placed
    if case.bind_map and not case.map_cannot_hold and case.lahar_expected is None:
        assert {pod: placed.get(pod) for pod in case.bind_map} == case.bind_map
