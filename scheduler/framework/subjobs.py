"""Sub-jobs: a PodGroup's `spec.subGroupPolicy` (Volcano's partition policy) splits a job's pods
into sub-groups, each placed as a gang of its own and, where the policy asks, within one HyperNode.

    spec:
      minMember: 4
      networkTopology: {mode: hard, highestTierAllowed: 2}   # bounds every sub-job
      subGroupPolicy:
      - name: workers                  # a policy; its sub-jobs are its pods by label values
        matchLabelKeys: [volcano.sh/task-spec]
        labelSelector: {...}           # optional: only the pods it matches
        subGroupSize: 2                # pods each sub-job needs placed together (default 1)
        minSubGroups: 2                # sub-jobs of this policy the job needs ready (default 0)
        networkTopology: {mode: hard, highestTierAllowed: 1}

As Volcano reads them (pkg/scheduler/api/sub_job_info.go): a pod belongs to the first policy
whose `labelSelector` (if any) matches it and under which it carries a non-empty value for every
`matchLabelKeys` key; the pods with the same values form one sub-job. A policy without
`matchLabelKeys` groups nothing. The job's other pods form its default sub-job, of size 1 (a job
without policies has none: it is placed as a whole, as before). A sub-job's topology is its
policy's `networkTopology`; the default sub-job's is the job's. Plain functions of the PodGroup
and the pods: the session computes a job's partition once (`Session.sub_jobs`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lahar.api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from lahar.scheduler.model import READY, JobInfo, TaskInfo, TaskStatus

DEFAULT = ""  # the default sub-job's key and policy name


@dataclass(frozen=True)
class SubGroupPolicy:
    """One entry of `spec.subGroupPolicy`, defaults applied."""

    name: str
    size: int  # subGroupSize
    min_groups: int  # minSubGroups
    match_label_keys: tuple[str, ...]
    selector: LabelSelector | None  # None: every pod
    topology: Mapping[str, Any] | None  # networkTopology as given


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def sub_group_policies(spec: Mapping[str, Any]) -> tuple[SubGroupPolicy, ...]:
    """The PodGroup spec's sub-group policies (validation refuses malformed ones; a malformed
    entry that reached the scheduler anyway is skipped, a malformed selector matches nothing)."""
    found = []
    for entry in spec.get("subGroupPolicy") or ():
        if not isinstance(entry, Mapping):
            continue
        keys = entry.get("matchLabelKeys") or ()
        selector: LabelSelector | None = None
        if entry.get("labelSelector") is not None:
            try:
                selector = label_selector_from_dict(entry.get("labelSelector"))
            except SelectorError:
                selector = LabelSelector.nothing()
        topology = entry.get("networkTopology")
        found.append(
            SubGroupPolicy(
                name=str(entry.get("name") or ""),
                size=max(_count(entry.get("subGroupSize"), 1), 1),
                min_groups=_count(entry.get("minSubGroups"), 0),
                match_label_keys=tuple(str(key) for key in keys if isinstance(key, str)),
                selector=selector,
                topology=topology if isinstance(topology, Mapping) else None,
            )
        )
    return tuple(found)


def match_values(policy: SubGroupPolicy, labels: Mapping[str, str]) -> tuple[str, ...] | None:
    """The pod's values for the policy's keys, None when the policy does not take the pod."""
    if not policy.match_label_keys:
        return None
    if policy.selector is not None and not policy.selector.matches(labels):
        return None
    values = tuple(labels.get(key) or "" for key in policy.match_label_keys)
    return None if "" in values else values


@dataclass
class SubJob:
    """A sub-group of a job's pods: placed as a gang of `size` within its own topology. It holds
    task uids: the session may replace a job's TaskInfo objects (copy on first change), so
    states are read from the job as it is now."""

    key: str  # "<policy>-<value>-..."; DEFAULT for the default sub-job
    policy: str
    size: int
    topology: Mapping[str, Any] | None
    uids: list[str] = field(default_factory=list)

    def tasks(self, job: JobInfo) -> list[TaskInfo]:
        return [job.tasks[uid] for uid in self.uids if uid in job.tasks]

    def ready_count(self, job: JobInfo) -> int:
        return sum(1 for task in self.tasks(job) if _occupied(task))

    def ready(self, job: JobInfo) -> bool:
        return self.ready_count(job) >= self.size

    def pipelined(self, job: JobInfo) -> bool:
        tasks = self.tasks(job)
        waiting = sum(1 for task in tasks if task.status is TaskStatus.PIPELINED)
        return sum(1 for task in tasks if _occupied(task)) + waiting >= self.size

    def pending(self, job: JobInfo) -> list[TaskInfo]:
        return [task for task in self.tasks(job) if task.status is TaskStatus.PENDING]


def _occupied(task: TaskInfo) -> bool:
    """Ready, or pending and asking for nothing (backfill places it): the gang's count."""
    return task.status in READY or (task.no_request and task.status is TaskStatus.PENDING)


@dataclass
class Partition:
    """A job's sub-jobs, which sub-job each task is in, and each policy's minSubGroups."""

    sub_jobs: dict[str, SubJob]
    of_task: dict[str, str]  # task uid -> sub-job key
    min_groups: dict[str, int]  # policy name -> minSubGroups (those above 0)

    def of(self, task: TaskInfo) -> SubJob:
        return self.sub_jobs[self.of_task[task.uid]]

    def groups_short(self, counted: Iterable[SubJob]) -> dict[str, tuple[int, int]]:
        """The policies with fewer of `counted` than their minSubGroups: name -> (have, need)."""
        have = Counter(sub_job.policy for sub_job in counted)
        return {name: (have[name], need) for name, need in self.min_groups.items() if have[name] < need}

    def short_of_valid(self) -> dict[str, tuple[int, int]]:
        """Policies with fewer sub-jobs than minSubGroups (Volcano's CheckSubJobValid)."""
        return self.groups_short(self.sub_jobs.values())

    def turn_order(self, job: JobInfo, keys: Iterable[str]) -> list[str]:
        """The sub-jobs `keys` in the order Volcano's worksheets place them (allocate, and the
        gang eviction's simulation): those each policy still needs for its minSubGroups first,
        then those not ready, by name."""
        ordered = sorted(keys)
        ready = Counter(sub_job.policy for sub_job in self.sub_jobs.values() if sub_job.ready(job))
        required = set()
        for key in ordered:
            sub_job = self.sub_jobs[key]
            if not sub_job.ready(job) and ready[sub_job.policy] < self.min_groups.get(sub_job.policy, 0):
                required.add(key)
                ready[sub_job.policy] += 1
        return sorted(ordered, key=lambda key: (key not in required, self.sub_jobs[key].ready(job), key))

    def ready(self, job: JobInfo) -> bool:
        """Each policy has minSubGroups ready sub-jobs (Volcano's CheckSubJobReady)."""
        return not self.min_groups or not self.groups_short(s for s in self.sub_jobs.values() if s.ready(job))

    def pipelined(self, job: JobInfo) -> bool:
        return not self.min_groups or not self.groups_short(s for s in self.sub_jobs.values() if s.pipelined(job))


def job_policies(job: JobInfo) -> tuple[SubGroupPolicy, ...]:
    if job.podgroup is None:
        return ()
    spec: Any = job.podgroup.raw.get("spec") or {}
    return sub_group_policies(spec) if spec.get("subGroupPolicy") else ()


def partition(job: JobInfo) -> Partition | None:
    """The job's sub-jobs; None when its PodGroup has no sub-group policy."""
    policies = job_policies(job)
    if not policies:
        return None
    spec: Any = job.podgroup.raw.get("spec") or {} if job.podgroup is not None else {}
    job_topology = spec.get("networkTopology")
    sub_jobs: dict[str, SubJob] = {}
    of_task: dict[str, str] = {}
    for task in sorted(job.tasks.values(), key=lambda t: t.name):
        labels = task.pod.meta.labels
        for policy in policies:
            values = match_values(policy, labels)
            if values is not None:
                key = "-".join((policy.name, *values))
                sub_job = sub_jobs.get(key)
                if sub_job is None:
                    sub_job = sub_jobs[key] = SubJob(key, policy.name, policy.size, policy.topology)
                break
        else:
            sub_job = sub_jobs.get(DEFAULT)
            if sub_job is None:
                topology = job_topology if isinstance(job_topology, Mapping) else None
                sub_job = sub_jobs[DEFAULT] = SubJob(DEFAULT, DEFAULT, 1, topology)
        sub_job.uids.append(task.uid)
        of_task[task.uid] = sub_job.key
    min_groups = {policy.name: policy.min_groups for policy in policies if policy.min_groups > 0}
    return Partition(sub_jobs, of_task, min_groups)
