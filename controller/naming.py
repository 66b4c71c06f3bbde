"""Names, labels, annotations and owner references the controller puts on a Job's objects.

The keys are Volcano's (`volcano.sh/*`), so tools written for Volcano (kubectl selectors,
dashboards, `vcctl`) find Lahar's pods the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lahar.api.job import Job
from lahar.api.podgroup import GROUP_NAME_ANNOTATION

JOB_API_VERSION = "batch.volcano.sh/v1alpha1"
JOB_KIND = "Job"

JOB_NAME_KEY = "volcano.sh/job-name"
JOB_NAMESPACE_KEY = "volcano.sh/job-namespace"
TASK_SPEC_KEY = "volcano.sh/task-spec"
TASK_INDEX_KEY = "volcano.sh/task-index"
PARTITION_ID_KEY = "volcano.sh/partition-id"  # a partitioned task's pods: the partition (sub-job) they are in
QUEUE_NAME_KEY = "volcano.sh/queue-name"
JOB_VERSION_KEY = "volcano.sh/job-version"
JOB_RETRY_COUNT_KEY = "volcano.sh/job-retry-count"
GROUP_NAME_KEY = GROUP_NAME_ANNOTATION


def pod_name(job_name: str, task_name: str, index: int) -> str:
    """`<job>-<task>-<index>`, Volcano's MakePodName."""
    return f"{job_name}-{task_name}-{index}"


def podgroup_name(job: Job) -> str:
    """The Job's PodGroup carries the Job's name (one group per job)."""
    return job.name


def job_owner_reference(job: Job) -> dict[str, Any]:
    """The reference that makes the Job the controller of its pods and PodGroup, so deleting
    the Job garbage-collects them and nothing else adopts them."""
    return {
        "apiVersion": JOB_API_VERSION,
        "kind": JOB_KIND,
        "name": job.name,
        "uid": job.meta.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_labels(job: Job, task_name: str, index: int) -> dict[str, str]:
    labels = {
        JOB_NAME_KEY: job.name,
        JOB_NAMESPACE_KEY: job.namespace,
        TASK_SPEC_KEY: task_name,
        TASK_INDEX_KEY: str(index),
        QUEUE_NAME_KEY: job.queue,
    }
    task = job.task(task_name)
    if task is not None and task.partition is not None:
        labels[PARTITION_ID_KEY] = str(task.partition.partition_of(index))
    return labels


def pod_annotations(job: Job, task_name: str, index: int, version: int, retry_count: int) -> dict[str, str]:
    return {
        JOB_NAME_KEY: job.name,
        TASK_SPEC_KEY: task_name,
        TASK_INDEX_KEY: str(index),
        QUEUE_NAME_KEY: job.queue,
        GROUP_NAME_KEY: podgroup_name(job),
        JOB_VERSION_KEY: str(version),
        JOB_RETRY_COUNT_KEY: str(retry_count),
    }


def _metadata(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def pod_task_name(pod: Mapping[str, Any]) -> str | None:
    """The task a job pod belongs to: the task-spec label, else the annotation."""
    meta = _metadata(pod)
    return (meta.get("labels") or {}).get(TASK_SPEC_KEY) or (meta.get("annotations") or {}).get(TASK_SPEC_KEY)


def pod_index(pod: Mapping[str, Any]) -> int | None:
    """The pod's index within its task: the task-index label/annotation, else the name's
    trailing `-<index>` (pods created before the label existed)."""
    meta = _metadata(pod)
    text = (meta.get("labels") or {}).get(TASK_INDEX_KEY) or (meta.get("annotations") or {}).get(TASK_INDEX_KEY)
    if text is None:
        text = (meta.get("name") or "").rpartition("-")[2]
    return int(text) if text.isdigit() else None
