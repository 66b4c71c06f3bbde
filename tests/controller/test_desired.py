"""The PodGroup and pods a Job should have."""

from __future__ import annotations

from typing import Any

from lahar.api.job import Job
from lahar.api.job import defaults as job_defaults
from lahar.api.job import validate as job_validate
from lahar.controller.desired import desired_podgroup, desired_pods
from lahar.controller.naming import (
    GROUP_NAME_KEY,
    JOB_NAME_KEY,
    PARTITION_ID_KEY,
    TASK_INDEX_KEY,
    TASK_SPEC_KEY,
    pod_index,
    pod_task_name,
)


def _task(name: str, replicas: int, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [container], "restartPolicy": "OnFailure"},
        },
        **extra,
    }


def _job(**spec: Any) -> Job:
    return Job.from_dict(
        {"metadata": {"name": "train", "namespace": "ml", "uid": "u-1"}, "spec": {"queue": "research", **spec}}
    )


def test_podgroup_min_resources_takes_task_minimums_then_fills_in_task_order() -> None:
    job = _job(
        minAvailable=3,
        priorityClassName="high",
        tasks=[_task("ps", 2, "1", "1Gi", minAvailable=1), _task("worker", 4, "2", "2Gi", minAvailable=1)],
    )
    group = desired_podgroup(job)
    # ps minimum (1 cpu) + worker minimum (2 cpu) + one more ps (1 cpu) = 4 cpu, 4Gi.
    assert group["spec"]["minResources"] == {"cpu": "4", "memory": "4Gi"}
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["minTaskMember"] == {"ps": 1, "worker": 1}
    assert group["spec"]["queue"] == "research"
    assert group["spec"]["priorityClassName"] == "high"
    assert group["metadata"]["name"] == "train"
    owner = group["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == ("Job", "u-1", True, True)


def test_the_jobs_network_topology_goes_to_its_podgroup_as_volcano_copies_it() -> None:
    tasks = [_task("worker", 2, "1", "1Gi")]
    assert "networkTopology" not in desired_podgroup(_job(tasks=tasks))["spec"]
    by_tier = _job(tasks=tasks, networkTopology={"mode": "soft", "highestTierAllowed": 2, "highestTierName": "x"})
    assert desired_podgroup(by_tier)["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 2}
    by_name = _job(tasks=tasks, networkTopology={"highestTierName": "spine"})
    assert desired_podgroup(by_name)["spec"]["networkTopology"] == {"mode": "hard", "highestTierName": "spine"}
    bad = Job.from_dict({"metadata": {"name": "t"}, "spec": {"tasks": tasks, "networkTopology": {"mode": "x"}}})
    assert any("networkTopology.mode" in str(error) for error in job_validate(bad.raw))


def test_a_tasks_partition_policy_becomes_a_sub_group_policy_and_labels_its_pods() -> None:
    """Volcano's job controller: a partitioned task is a sub-group policy of the PodGroup (one
    sub-job per partition, found by the pods' `volcano.sh/partition-id`), its pods labelled
    index // partitionSize, its minAvailable minPartitions * partitionSize when not given."""
    partition = {
        "totalPartitions": 3,
        "partitionSize": 2,
        "minPartitions": 2,
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
    }
    raw = {
        "metadata": {"name": "train", "namespace": "ml", "uid": "u-1"},
        "spec": {"tasks": [_task("worker", 6, "1", "1Gi", partitionPolicy=partition), _task("ps", 1, "1", "1Gi")]},
    }
    job = Job.from_dict(job_defaults(raw))
    spec = desired_podgroup(job)["spec"]
    assert spec["subGroupPolicy"] == [
        {
            "name": "worker",
            "subGroupSize": 2,
            "minSubGroups": 2,
            "labelSelector": {"matchLabels": {TASK_SPEC_KEY: "worker"}},
            "matchLabelKeys": [PARTITION_ID_KEY],
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
        }
    ]
    assert spec["minTaskMember"] == {"worker": 4, "ps": 1}
    pods = desired_pods(job, 0)
    partitions = {name: pod["metadata"]["labels"].get(PARTITION_ID_KEY) for name, pod in pods.items()}
    assert partitions == {
        "train-worker-0": "0",
        "train-worker-1": "0",
        "train-worker-2": "1",
        "train-worker-3": "1",
        "train-worker-4": "2",
        "train-worker-5": "2",
        "train-ps-0": None,
    }
    assert "subGroupPolicy" not in desired_podgroup(_job(tasks=[_task("ps", 1, "1", "1Gi")]))["spec"]


def test_a_bad_partition_policy_is_refused_naming_the_field() -> None:
    def errors(partition: dict[str, Any], **extra: Any) -> list[tuple[str, str]]:
        raw = {
            "metadata": {"name": "t"},
            "spec": {"tasks": [_task("w", 4, "1", "1Gi", partitionPolicy=partition, **extra)]},
        }
        return [(e.field, e.message) for e in job_validate(job_defaults(raw))]

    assert errors({"totalPartitions": 2, "partitionSize": 2, "minPartitions": 1}) == []
    assert errors({"totalPartitions": 2, "partitionSize": 3}) == [
        ("spec.tasks[0].partitionPolicy", "totalPartitions * partitionSize (2 * 3) must equal replicas (4)")
    ]
    assert errors({"partitionSize": 2}) == [("spec.tasks[0].partitionPolicy.totalPartitions", "is required")]
    assert errors({"totalPartitions": 0, "partitionSize": 2}) == [
        ("spec.tasks[0].partitionPolicy.totalPartitions", "must be greater than or equal to 1")
    ]
    assert errors({"totalPartitions": 2, "partitionSize": 2, "minPartitions": 1}, minAvailable=4) == [
        (
            "spec.tasks[0].partitionPolicy",
            "minPartitions * partitionSize (1 * 2) must equal the task's minAvailable (4)",
        )
    ]
    assert errors({"totalPartitions": 2, "partitionSize": 2, "networkTopology": {"mode": "x"}}) == [
        ("spec.tasks[0].partitionPolicy.networkTopology.mode", 'unsupported mode "x" (supported: "hard", "soft")')
    ]


def test_min_resources_of_default_min_available_is_all_replicas() -> None:
    job = _job(tasks=[_task("a", 2, "500m", "1Gi"), _task("b", 1, "250m", "512Mi")])
    assert desired_podgroup(job)["spec"]["minResources"] == {"cpu": "1250m", "memory": "2560Mi"}


def test_a_be_tasks_cpu_and_memory_are_borrowed_not_asked_of_admission() -> None:
    """BE pods place on the nodes' reclaimable capacity (docs/oversubscription.md): their cpu and
    memory are not queue quota, so the PodGroup's minResources leaves them out; other resources
    (GPUs) and online tasks' requests stay."""
    be = _task("be", 2, "900m", "1Gi")
    be["template"]["metadata"]["annotations"] = {"lahar.dev/qos-class": "BE"}
    be["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    volcano_be = _task("vbe", 1, "1", "1Gi")
    volcano_be["template"]["metadata"]["annotations"] = {"volcano.sh/qos-level": "BE"}
    job = _job(tasks=[be, volcano_be, _task("ls", 1, "250m", "512Mi")])
    assert desired_podgroup(job)["spec"]["minResources"] == {"cpu": "250m", "memory": "512Mi", "nvidia.com/gpu": "2"}
    only_be = _job(tasks=[_task("x", 2, "1", "1Gi") | {"template": be["template"]}])
    assert "cpu" not in desired_podgroup(only_be)["spec"]["minResources"]


def test_desired_pods_are_named_labelled_and_annotated_like_volcano() -> None:
    job = _job(
        schedulerName="lahar",
        priorityClassName="high",
        tasks=[_task("ps", 1, "1", "1Gi"), _task("worker", 2, "1", "1Gi")],
    )
    pods = desired_pods(job, retry_count=2)
    assert list(pods) == ["train-ps-0", "train-worker-0", "train-worker-1"]
    pod = pods["train-worker-1"]
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels[JOB_NAME_KEY] == "train" and labels[TASK_SPEC_KEY] == "worker"
    assert labels["volcano.sh/job-namespace"] == "ml" and labels[TASK_INDEX_KEY] == "1"
    assert labels["app"] == "worker"  # the template's labels are kept
    assert annotations[GROUP_NAME_KEY] == "train"
    assert annotations["volcano.sh/job-retry-count"] == "2"
    assert pod["spec"]["schedulerName"] == "lahar"
    assert pod["spec"]["priorityClassName"] == "high"
    assert pod["spec"]["restartPolicy"] == "OnFailure"
    assert pod["metadata"]["ownerReferences"][0]["name"] == "train"
    assert (pod_task_name(pod), pod_index(pod)) == ("worker", 1)


def test_template_priority_class_wins_and_mutators_run() -> None:
    task = _task("w", 1, "1", "1Gi")
    task["template"]["spec"]["priorityClassName"] = "low"
    job = _job(priorityClassName="high", tasks=[task])
    seen: list[tuple[str, int]] = []

    def add_env(pod: dict[str, Any], job: Job, task: Any, index: int) -> None:
        seen.append((task.name, index))
        pod["spec"]["containers"][0]["env"] = [{"name": "VC_TASK_INDEX", "value": str(index)}]

    pod = desired_pods(job, 0, [add_env])["train-w-0"]
    assert pod["spec"]["priorityClassName"] == "low"
    assert pod["spec"]["containers"][0]["env"] == [{"name": "VC_TASK_INDEX", "value": "0"}]
    assert seen == [("w", 0)]
    # The template itself is not touched by the mutator.
    assert "env" not in task["template"]["spec"]["containers"][0]
