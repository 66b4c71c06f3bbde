"""Volcano's JobFlow controller (flow.volcano.sh): a DAG of Volcano Jobs made from JobTemplates.

- each flow's Job is `<jobflow>-<flow>`, from the JobTemplate named like the flow (same
  namespace), with the flow's `patch.spec` merged over the template's spec (maps key by key,
  `tasks` by task name), labelled and annotated `volcano.sh/createdByJobFlow` and
  `volcano.sh/createdByJobTemplate` (`<namespace>.<name>`), owned by the JobFlow;
- a flow with `dependsOn.targets` is made once every target's Job is Completed (Volcano's rule);
  a missing JobTemplate holds its flow, with a Warning saying which;
- status as Volcano's: `pendingJobs`, `runningJobs`, `completedJobs`, `failedJobs`,
  `terminatedJobs`, `unKnowJobs`, `jobStatusList` (name, state, startTimestamp, restartCount),
  and `state.phase`: Succeed when every flow's Job completed, Failed once one failed or was
  terminated, Running once one runs or completed, else Pending;
- `jobRetainPolicy: delete` deletes the flow's Jobs once it succeeded.

JobTemplate status: `jobDependsOnList`, the Jobs made from it.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lahar.api import kinds
from lahar.api.job import job_phase
from lahar.api.jobflow import DELETE
from lahar.client.api import KubeApi
from lahar.client.errors import AlreadyExists, NotFound
from lahar.client.events import EventRecorder, ObjectRef
from lahar.client.informer import Informer, by_owner
from lahar.controller.workqueue import Key, ReconcileLoop, object_key

CREATED_BY_FLOW = "volcano.sh/createdByJobFlow"
CREATED_BY_TEMPLATE = "volcano.sh/createdByJobTemplate"
OWNER_INDEX = "owner"
SUCCEED, FAILED, RUNNING, PENDING = "Succeed", "Failed", "Running", "Pending"
STATUS_LISTS = {
    "Pending": "pendingJobs",
    "Running": "runningJobs",
    "Completed": "completedJobs",
    "Failed": "failedJobs",
    "Terminated": "terminatedJobs",
}


@dataclass
class FlowDecision:
    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    missing_templates: list[str] = field(default_factory=list)


def flow_job_name(jobflow: str, flow: str) -> str:
    return f"{jobflow}-{flow}"


def merge_spec(base: Any, patch: Any) -> Any:
    """`patch` over `base`: maps key by key, a `tasks` list task by task (by name, new tasks
    appended), anything else replaced."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        merged = dict(base)
        for key, value in patch.items():
            if key == "tasks" and isinstance(value, list) and isinstance(base.get(key), list):
                merged[key] = _merge_tasks(base[key], value)
            else:
                merged[key] = merge_spec(base.get(key), value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(patch)


def _merge_tasks(base: list[Any], patch: list[Any]) -> list[Any]:
    by_name = {t.get("name"): t for t in patch if isinstance(t, Mapping)}
    merged = [merge_spec(t, by_name.pop(t.get("name"))) if t.get("name") in by_name else t for t in base]
    return merged + [copy.deepcopy(t) for t in by_name.values()]


def flow_phase(status: Mapping[str, list[str]], flows: int) -> str:
    """Volcano's JobFlow state machine, read off the Jobs' lists."""
    if len(status.get("completedJobs") or ()) == flows:
        return SUCCEED
    if status.get("failedJobs") or status.get("terminatedJobs"):
        return FAILED
    if status.get("runningJobs") or status.get("completedJobs"):
        return RUNNING
    return PENDING


def flow_step(
    jobflow: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]], templates: Mapping[str, Mapping[str, Any]]
) -> FlowDecision:
    meta, spec = jobflow.get("metadata") or {}, jobflow.get("spec") or {}
    name = str(meta.get("name", ""))
    flows = [f for f in spec.get("flows") or () if isinstance(f, Mapping) and f.get("name")]
    existing = {j["metadata"]["name"]: j for j in jobs}
    decision = FlowDecision()
    phase_of = {job_name: str(job_phase(job).value) for job_name, job in existing.items()}
    for flow in flows:
        job_name = flow_job_name(name, flow["name"])
        if job_name in existing:
            continue
        targets = (flow.get("dependsOn") or {}).get("targets") or ()
        if not all(phase_of.get(flow_job_name(name, t)) == "Completed" for t in targets):
            continue
        template = templates.get(flow["name"])
        if template is None:
            decision.missing_templates.append(flow["name"])
            continue
        decision.create.append(_job(jobflow, flow, template, job_name))
    lists: dict[str, list[str]] = {key: [] for key in (*STATUS_LISTS.values(), "unKnowJobs")}
    for job_name in sorted(existing):
        lists[STATUS_LISTS.get(phase_of[job_name], "unKnowJobs")].append(job_name)
    phase = flow_phase(lists, len(flows))
    decision.status = {
        **lists,
        "jobStatusList": [
            {
                "name": job_name,
                "state": phase_of[job_name],
                "startTimestamp": existing[job_name]["metadata"].get("creationTimestamp"),
                "restartCount": (existing[job_name].get("status") or {}).get("retryCount", 0),
            }
            for job_name in sorted(existing)
        ],
        "state": {"phase": phase},
    }
    if phase == SUCCEED and spec.get("jobRetainPolicy") == DELETE:
        decision.delete = sorted(existing)
    return decision


def _job(jobflow: Mapping[str, Any], flow: Mapping[str, Any], template: Mapping[str, Any], name: str) -> dict[str, Any]:
    meta = jobflow.get("metadata") or {}
    namespace = meta.get("namespace", "")
    marks = {
        CREATED_BY_TEMPLATE: f"{namespace}.{flow['name']}",
        CREATED_BY_FLOW: f"{namespace}.{meta.get('name', '')}",
    }
    spec = merge_spec(template.get("spec") or {}, ((flow.get("patch") or {}).get("spec")) or {})
    return {
        "apiVersion": kinds.JOB.api_version,
        "kind": kinds.JOB.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(marks),
            "annotations": dict(marks),
            "ownerReferences": [
                {
                    "apiVersion": kinds.JOBFLOW.api_version,
                    "kind": kinds.JOBFLOW.kind,
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


class JobFlowController(ReconcileLoop):
    """Watches JobFlows, JobTemplates and Jobs; each change reconciles the JobFlows involved."""

    name = "jobflow-controller"

    def __init__(self, api: KubeApi) -> None:
        super().__init__()
        self.api = api
        self.events = EventRecorder(api, "lahar-controller")
        enqueue = lambda obj, *_: self.queue.add(object_key(obj))  # noqa: E731
        self.jobflows = Informer(kinds.JOBFLOW, api, on_change=enqueue)
        self.templates = Informer(
            kinds.JOBTEMPLATE,
            api,
            on_add=self._template_changed,
            on_update=lambda old, new: self._template_changed(new),
        )
        self.jobs = Informer(kinds.JOB, api, on_change=self._job_changed)
        self.jobs.add_index(OWNER_INDEX, by_owner)
        self.informers = [self.jobflows, self.templates, self.jobs]

    def _job_changed(self, job: dict[str, Any], *_: Any) -> None:
        meta = job.get("metadata") or {}
        for ref in meta.get("ownerReferences") or ():
            if ref.get("kind") == kinds.JOBFLOW.kind:
                self.queue.add((meta.get("namespace", ""), ref.get("name", "")))
        template = (meta.get("labels") or {}).get(CREATED_BY_TEMPLATE)
        if template:
            self.queue.add(("#template", template))

    def _template_changed(self, template: dict[str, Any], *_: Any) -> None:
        """A template that appears may release a held flow: reconcile its namespace's flows."""
        namespace = (template.get("metadata") or {}).get("namespace", "")
        for jobflow in self.jobflows.list():
            if jobflow["metadata"].get("namespace") == namespace:
                self.queue.add(object_key(jobflow))

    def reconcile(self, key: Key) -> FlowDecision | None:
        namespace, name = key
        if namespace == "#template":
            self._template_status(name)
            return None
        jobflow = self.jobflows.get(name, namespace)
        if jobflow is None:
            return None
        owned = self.jobs.by_index(OWNER_INDEX, jobflow["metadata"].get("uid", ""))
        templates = {
            t["metadata"]["name"]: t for t in self.templates.list() if t["metadata"].get("namespace") == namespace
        }
        decision = flow_step(jobflow, owned, templates)
        about = ObjectRef(kinds.JOBFLOW, namespace, name, jobflow["metadata"].get("uid", ""))
        for job in decision.create:
            with contextlib.suppress(AlreadyExists):
                self.api.create(kinds.JOB, job, namespace)
                self.events.record(about, "Normal", "Created", f"create a job named {job['metadata']['name']}!")
        for missing in decision.missing_templates:
            self.events.record(about, "Warning", "JobTemplateNotFound", f'no JobTemplate "{missing}" in {namespace}')
        for victim in decision.delete:
            with contextlib.suppress(NotFound):
                self.api.delete(kinds.JOB, victim, namespace)
        if decision.status != {k: v for k, v in (jobflow.get("status") or {}).items() if k in decision.status}:
            with contextlib.suppress(NotFound):
                self.api.patch(kinds.JOBFLOW, name, {"status": decision.status}, namespace, subresource="status")
        return decision

    def _template_status(self, marked: str) -> None:
        """`jobDependsOnList` of the JobTemplate `<namespace>.<name>`: the Jobs made from it."""
        namespace, _, name = marked.partition(".")
        template = self.templates.get(name, namespace)
        if template is None:
            return
        made = sorted(
            j["metadata"]["name"]
            for j in self.jobs.list()
            if (j["metadata"].get("labels") or {}).get(CREATED_BY_TEMPLATE) == marked
        )
        if (template.get("status") or {}).get("jobDependsOnList") != made:
            with contextlib.suppress(NotFound):
                self.api.patch(
                    kinds.JOBTEMPLATE, name, {"status": {"jobDependsOnList": made}}, namespace, subresource="status"
                )
