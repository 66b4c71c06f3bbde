"""Sub-jobs (a PodGroup's `subGroupPolicy`, scheduler/framework/subjobs.py): which pods form which
sub-job, and a Volcano Job whose task has a `partitionPolicy` placed end to end: the controller's
PodGroup and pods, then one allocate session over HyperNodes (docs/scheduler.md, "Sub-jobs")."""

from __future__ import annotations

from typing import Any

from lahar.api.job import Job
from lahar.api.job import defaults as job_defaults
from lahar.controller.desired import desired_podgroup, desired_pods
from lahar.scheduler.framework.session import Session
from lahar.scheduler.framework.subjobs import DEFAULT
from tests.scheduler.preempt_builders import cluster, opened
from tests.scheduler.volcano_cases import (
    PREEMPTABLE,
    binds,
    conf,
    outcome,
    quantities,
    vc_hypernode,
    vc_node,
    vc_pod,
    vc_podgroup,
    vc_priority_class,
    vc_queue,
)

Obj = dict[str, Any]
TIERS = (["gang", "predicates", "network-topology-aware"],)


def test_pods_join_the_first_policy_that_takes_them_and_the_rest_the_default_sub_job() -> None:
    group = vc_podgroup("pg1", "c1", "q1", 1, None, "Inqueue")
    group["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 2}
    group["spec"]["subGroupPolicy"] = [
        {"name": "nothing", "subGroupSize": 5},  # no matchLabelKeys: groups nothing
        {"name": "workers", "matchLabelKeys": ["rack"], "labelSelector": {"matchLabels": {"role": "worker"}}},
        {"name": "any", "matchLabelKeys": ["rack", "zone"], "subGroupSize": 2, "minSubGroups": 1},
    ]
    labels = {
        "a": {"role": "worker", "rack": "r1"},
        "b": {"role": "worker", "rack": "r1", "zone": "z"},  # the first policy that takes it wins
        "c": {"role": "worker", "rack": "r2"},
        "d": {"role": "ps", "rack": "r1", "zone": "z"},  # not a worker: the next policy
        "e": {"role": "ps", "rack": "r1"},  # no zone: no policy takes it
        "f": {"role": "worker", "rack": ""},  # an empty value takes no part
    }
    objects = [vc_queue("q1"), group, vc_node("n1", "8", "8Gi")]
    objects += [
        vc_pod("c1", name, "", "Pending", quantities("1", "1Gi"), "pg1", pod_labels)
        for name, pod_labels in labels.items()
    ]
    session = opened(cluster(*objects), conf("allocate", TIERS[0]))
    job = session.jobs["c1/pg1"]
    parts = session.sub_jobs(job)
    assert parts is not None
    members = {key: sorted(job.tasks[uid].name for uid in sub.uids) for key, sub in parts.sub_jobs.items()}
    assert members == {"workers-r1": ["a", "b"], "workers-r2": ["c"], "any-r1-z": ["d"], DEFAULT: ["e", "f"]}
    assert parts.sub_jobs["any-r1-z"].size == 2
    assert parts.sub_jobs[DEFAULT].size == 1
    assert parts.sub_jobs[DEFAULT].topology == {"mode": "hard", "highestTierAllowed": 2}  # the job's
    assert parts.min_groups == {"any": 1}
    # A job without policies has no sub-jobs.
    plain = [vc_queue("q1"), vc_podgroup("pg2", "c1", "q1", 1, None, "Inqueue"), vc_node("n1", "8", "8Gi")]
    plain.append(vc_pod("c1", "x", "", "Pending", quantities("1", "1Gi"), "pg2"))
    other = opened(cluster(*plain), conf("allocate", TIERS[0]))
    assert other.sub_jobs(other.jobs["c1/pg2"]) is None


def partitioned_job(total: int, size: int, minimum: int) -> list[Obj]:
    """The PodGroup and pending pods Lahar's controller makes for a Volcano Job whose one task is
    split in `total` partitions of `size` pods, each within one tier-1 HyperNode."""
    partition = {
        "totalPartitions": total,
        "partitionSize": size,
        "minPartitions": minimum,
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
    }
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    task = {
        "name": "worker",
        "replicas": total * size,
        "partitionPolicy": partition,
        "template": {"spec": {"containers": [container], "restartPolicy": "Never"}},
    }
    raw = {"metadata": {"name": "train", "namespace": "c1", "uid": "u-1"}, "spec": {"queue": "q1", "tasks": [task]}}
    job = Job.from_dict(job_defaults(raw))
    group = desired_podgroup(job)
    group["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    group["status"] = {"phase": "Inqueue"}
    objects = [group]
    for name, pod in desired_pods(job, 0).items():
        pod["metadata"].update(uid=f"c1-{name}", creationTimestamp="2024-01-01T00:00:00Z")
        pod["status"] = {"phase": "Pending"}
        objects.append(pod)
    return objects


def cluster_of_racks(busy: int) -> list[Obj]:
    """Three racks (tier-1 HyperNodes) of two nodes, one pod's room each, under one tier-2
    HyperNode; `busy` nodes of the last rack already full."""
    objects: list[Obj] = [vc_queue("q1"), vc_podgroup("other", "c1", "q1", 1, None, "Running")]
    racks = {f"rack{r}": [f"r{r}-n{i}" for i in (1, 2)] for r in (1, 2, 3)}
    for nodes in racks.values():
        objects += [vc_node(node, "1", "1Gi") for node in nodes]
    objects += [vc_hypernode(name, 1, nodes) for name, nodes in racks.items()]
    objects.append(vc_hypernode("spine", 2, [node for nodes in racks.values() for node in nodes]))
    for i in range(busy):
        objects.append(vc_pod("c1", f"busy{i}", f"r3-n{i + 1}", "Running", quantities("1", "1Gi"), "other"))
    return objects


def rack_of(node: str) -> str:
    return node.split("-")[0]


def test_a_partitioned_job_places_each_partition_within_one_rack() -> None:
    # Three partitions of two pods, two needed; the third rack has room for one pod only.
    session = outcome(cluster_of_racks(busy=1) + partitioned_job(3, 2, 2), "allocate", TIERS)
    placed = binds(session)
    by_partition: dict[str, set[str]] = {}
    for pod, node in placed.items():
        index = int(pod.rsplit("-", 1)[1])
        by_partition.setdefault(str(index // 2), set()).add(rack_of(node))
    assert len(placed) == 4  # the third partition cannot be placed whole
    assert sorted(len(racks) for racks in by_partition.values()) == [1, 1]  # each within one rack
    assert set().union(*by_partition.values()) == {"r1", "r2"}


def test_a_job_short_of_its_minimum_partitions_places_nothing_and_says_why() -> None:
    # Two partitions needed, but two of the three racks are full: only one partition fits whole.
    objects = cluster_of_racks(busy=2) + partitioned_job(3, 2, 2)
    objects += [vc_pod("c1", "busy-r2", node, "Running", quantities("1", "1Gi"), "other") for node in ("r2-n1",)]
    session = outcome(objects, "allocate", TIERS)
    assert binds(session) == {}
    job = session.jobs["c1/train"]
    assert job.unschedulable_message == (
        "4/6 tasks in gang unschedulable: 1 of the 2 sub-groups of policy worker could be placed whole;"
        " sub-job worker-2: no HyperNode of tier at most 1 can hold it"
    )


PREEMPT_TIERS = (["priority", "gang", "conformance"], ["predicates", "network-topology-aware"])
RECLAIM_TIERS = (["priority", "gang", "conformance"], ["predicates", "proportion", "network-topology-aware"])


def full_racks_and_a_partitioned_job(queue: str) -> list[Obj]:
    """Every node runs a pod of `other` (queue q1), the one on r1-n2 not preemptable; a
    high-priority job in `queue` of two partitions of two pods, each within one rack."""
    objects = cluster_of_racks(busy=0)
    objects += [
        vc_pod("c1", f"low-{node}", node, "Running", quantities("1", "1Gi"), "other")
        for node in ("r1-n1", "r2-n1", "r2-n2", "r3-n1", "r3-n2")
    ]
    objects.append(vc_pod("c1", "kept", "r1-n2", "Running", quantities("1", "1Gi"), "other", {PREEMPTABLE: "false"}))
    objects.append(vc_priority_class("high", 1000))
    for obj in partitioned_job(2, 2, 2):
        if obj["kind"] == "PodGroup":
            obj["spec"].update(priorityClassName="high", queue=queue)
        else:
            obj["spec"]["priority"] = 1000
        objects.append(obj)
    return objects


def assert_one_rack_per_partition(session: Session) -> None:
    """Each partition's pipelined pods in one rack (racks 2 and 3), and the victims exactly there:
    taken as a whole, node by node, the job evicted r1-n1's pod too, for a partition split across
    two racks."""
    racks_of_partition: dict[int, set[str]] = {}
    for task in session.pipelined:
        racks_of_partition.setdefault(int(task.name.rsplit("-", 1)[1]) // 2, set()).add(rack_of(task.node))
    assert sorted(len(racks) for racks in racks_of_partition.values()) == [1, 1]
    assert set().union(*racks_of_partition.values()) == {"r2", "r3"}
    assert sorted(e.task.node for e in session.evictions) == ["r2-n1", "r2-n2", "r3-n1", "r3-n2"]


def test_preempt_makes_room_for_each_partition_within_a_rack_of_its_own() -> None:
    assert_one_rack_per_partition(outcome(full_racks_and_a_partitioned_job("q1"), "preempt", PREEMPT_TIERS))


def test_reclaim_makes_room_for_each_partition_within_a_rack_of_its_own() -> None:
    # q2 (weight 2) deserves 4 of the 6 nodes, and q1 holds them all.
    objects = [*full_racks_and_a_partitioned_job("q2"), vc_queue("q2", weight=2)]
    assert_one_rack_per_partition(outcome(objects, "reclaim", RECLAIM_TIERS))
