"""One table of bad Jobs, Queues, PodGroups, JobTemplates, JobFlows and CronJobs, refused by
both backends: the embedded API server (lahar/api admission) and a real kube-apiserver with
deploy/'s CRDs (schema) and deploy/admission's ValidatingAdmissionPolicies (CEL). Each case
names the field and the message both servers must say; where the real server words a schema
error its own way, `real_message` is what it says instead (docs/admission.md describes these
differences)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

JOBS = ("batch.volcano.sh", "v1alpha1", "jobs")
PODGROUPS = ("scheduling.volcano.sh", "v1beta1", "podgroups")
QUEUES = ("scheduling.volcano.sh", "v1beta1", "queues")
TEMPLATES = ("flow.volcano.sh", "v1alpha1", "jobtemplates")
FLOWS = ("flow.volcano.sh", "v1alpha1", "jobflows")
CRONJOBS = ("batch.volcano.sh", "v1alpha1", "cronjobs")


def pod_template(name: str = "main") -> Obj:
    return {"spec": {"restartPolicy": "Never", "containers": [{"name": name, "image": "busybox"}]}}


def job(**spec: Any) -> Obj:
    base: Obj = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "bad-job"},
        "spec": {
            "minAvailable": 3,
            "tasks": [
                {"name": "master", "replicas": 1, "template": pod_template()},
                {"name": "worker", "replicas": 2, "template": pod_template()},
            ],
        },
    }
    base["spec"].update(spec)
    return base


def with_task(index: int, **changes: Any) -> Obj:
    obj = job()
    obj["spec"]["tasks"][index].update(changes)
    return obj


def template(**spec: Any) -> Obj:
    """A JobTemplate: a Job's spec under another kind."""
    return {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobTemplate",
        "metadata": {"name": "bad-template"},
        "spec": job(**spec)["spec"],
    }


def template_task(index: int, **changes: Any) -> Obj:
    obj = template()
    obj["spec"]["tasks"][index].update(changes)
    return obj


def jobflow(*flows: Obj, **spec: Any) -> Obj:
    return {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobFlow",
        "metadata": {"name": "bad-flow"},
        "spec": {"flows": list(flows), **spec},
    }


def flow(name: str, *targets: str) -> Obj:
    return {"name": name, "dependsOn": {"targets": list(targets)}} if targets else {"name": name}


def cronjob(schedule: str = "*/5 * * * *", name: str = "bad-cron", **job_spec: Any) -> Obj:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": job(**job_spec)["spec"]}},
    }


def cron_task(index: int, **changes: Any) -> Obj:
    obj = cronjob()
    obj["spec"]["jobTemplate"]["spec"]["tasks"][index].update(changes)
    return obj


def podgroup(**spec: Any) -> Obj:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "bad-pg"},
        "spec": {"minMember": 2, **spec},
    }


def queue(name: str = "bad-queue", **spec: Any) -> Obj:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


@dataclass(frozen=True)
class Case:
    name: str
    resource: tuple[str, str, str]
    obj: Obj
    field: str
    message: str
    # What the real server says instead, where its schema validation words it differently.
    real_message: str | None = None
    # For an update: the object created first; `obj` then replaces it.
    before: Obj | None = None
    enforced_by: str = "policy"  # "policy" (deploy/admission) or "schema" (deploy/crds)
    notes: str = field(default="", compare=False)

    @property
    def namespaced(self) -> bool:
        return self.resource != QUEUES

    def expected(self, backend: str) -> str:
        """The text the backend's error must contain."""
        message = self.real_message if backend == "real" and self.real_message else self.message
        return f"{self.field}: {message}"


def _updated(obj: Obj, edit: Callable[[Obj], None]) -> Obj:
    changed = copy.deepcopy(obj)
    edit(changed)
    return changed


CASES: list[Case] = [
    # --- Jobs: the cross-field rules (ValidatingAdmissionPolicy lahar-job) -----------------------
    Case(
        "job minAvailable above its replicas",
        JOBS,
        job(minAvailable=5),
        "spec.minAvailable",
        "minAvailable (5) must not be greater than the total replicas (3)",
    ),
    Case(
        "job minSuccess above its replicas",
        JOBS,
        job(minSuccess=4),
        "spec.minSuccess",
        "minSuccess (4) must not be greater than the total replicas (3)",
    ),
    Case(
        "task minAvailable above its replicas",
        JOBS,
        with_task(1, minAvailable=3),
        "spec.tasks[1].minAvailable",
        "minAvailable (3) must not be greater than replicas (2)",
    ),
    Case(
        "duplicate task names",
        JOBS,
        with_task(1, name="master"),
        "spec.tasks[1].name",
        'duplicate task name "master"',
    ),
    Case(
        "policy with an event and an exit code",
        JOBS,
        job(policies=[{"event": "PodFailed", "exitCode": 3, "action": "RestartJob"}]),
        "spec.policies[0]",
        "must not specify event(s) and exitCode together",
    ),
    Case(
        "policy with neither event nor exit code",
        JOBS,
        job(policies=[{"action": "RestartJob"}]),
        "spec.policies[0]",
        "one of event, events or exitCode is required",
    ),
    Case(
        "the same event in two policies",
        JOBS,
        job(policies=[{"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodEvicted", "action": "AbortJob"}]),
        "spec.policies[1].event",
        'duplicate policy event "PodEvicted"',
    ),
    Case(
        "the same event in events lists",
        JOBS,
        job(
            policies=[
                {"events": ["PodFailed"], "action": "RestartJob"},
                {"events": ["TaskCompleted", "PodFailed"], "action": "AbortJob"},
            ]
        ),
        "spec.policies[1].events[1]",
        'duplicate policy event "PodFailed"',
    ),
    Case(
        "any-event combined with another",
        JOBS,
        job(policies=[{"event": "*", "action": "RestartJob"}, {"event": "PodFailed", "action": "AbortJob"}]),
        "spec.policies",
        '"*" cannot be combined with other events',
    ),
    Case(
        "exit code 0",
        JOBS,
        job(policies=[{"exitCode": 0, "action": "RestartJob"}]),
        "spec.policies[0].exitCode",
        "0 is not a valid exit code (it means success)",
    ),
    Case(
        "the same exit code twice",
        JOBS,
        job(policies=[{"exitCode": 3, "action": "RestartJob"}, {"exitCode": 3, "action": "AbortJob"}]),
        "spec.policies[1].exitCode",
        "duplicate policy exitCode 3",
    ),
    Case(
        "PodPending without a timeout",
        JOBS,
        job(policies=[{"event": "PodPending", "action": "RestartJob"}]),
        "spec.policies[0].timeout",
        'is required for the "PodPending" event',
    ),
    Case(
        "task policy with an event and an exit code",
        JOBS,
        with_task(1, policies=[{"event": "PodFailed", "exitCode": 3, "action": "RestartTask"}]),
        "spec.tasks[1].policies[0]",
        "must not specify event(s) and exitCode together",
    ),
    Case(
        "task policy with a duplicate event",
        JOBS,
        with_task(
            0, policies=[{"event": "PodFailed", "action": "RestartTask"}, {"event": "PodFailed", "action": "AbortJob"}]
        ),
        "spec.tasks[0].policies[1].event",
        'duplicate policy event "PodFailed"',
    ),
    Case(
        "task depending on itself",
        JOBS,
        with_task(1, dependsOn={"name": ["worker"]}),
        "spec.tasks[1].dependsOn.name[0]",
        "a task cannot depend on itself",
    ),
    Case(
        "task depending on an unknown task",
        JOBS,
        with_task(1, dependsOn={"name": ["launcher"]}),
        "spec.tasks[1].dependsOn.name[0]",
        'unknown task "launcher"',
    ),
    Case(
        "changing a job's queue",
        JOBS,
        _updated(job(), lambda o: o["spec"].update(queue="elsewhere")),
        "spec.queue",
        "field is immutable",
        before=job(),
    ),
    Case(
        "changing a task's template",
        JOBS,
        _updated(job(), lambda o: o["spec"]["tasks"][0].update(template=pod_template("other"))),
        "spec.tasks[0].template",
        "field is immutable",
        before=job(),
    ),
    Case(
        "adding a task",
        JOBS,
        _updated(
            job(), lambda o: o["spec"]["tasks"].append({"name": "extra", "replicas": 1, "template": pod_template()})
        ),
        "spec.tasks",
        "tasks may not be added or removed",
        before=job(),
    ),
    # --- Jobs: what the schema says (deploy/crds) ------------------------------------------------
    Case(
        "negative task replicas",
        JOBS,
        with_task(0, replicas=-1),
        "spec.tasks[0].replicas",
        "must be greater than or equal to 0",
        real_message="Invalid value: -1: spec.tasks[0].replicas in body should be greater than or equal to 0",
        enforced_by="schema",
    ),
    Case(
        "job name longer than a label value",
        JOBS,
        _updated(job(), lambda o: o["metadata"].update(name="j" * 64)),
        "metadata.name",
        "must be no more than 63 characters (it is used as a label value)",
        real_message="Too long: may not be more than 63 bytes",
        enforced_by="schema",
    ),
    # --- PodGroups (lahar-podgroup) ----------------------------------------------------------------
    Case(
        "podgroup negative minResources",
        PODGROUPS,
        podgroup(minResources={"cpu": "-1"}),
        "spec.minResources.cpu",
        'invalid quantity "-1": must be greater than or equal to 0',
    ),
    Case(
        "podgroup minTaskMember for a nameless task",
        PODGROUPS,
        podgroup(minTaskMember={"": 1}),
        "spec.minTaskMember[]",
        "task name must not be empty",
    ),
    Case(
        "podgroup negative minMember",
        PODGROUPS,
        podgroup(minMember=-1),
        "spec.minMember",
        "must be greater than or equal to 0",
        real_message="Invalid value: -1: spec.minMember in body should be greater than or equal to 0",
        enforced_by="schema",
    ),
    Case(
        "podgroup sub-group policies of the same name",
        PODGROUPS,
        podgroup(subGroupPolicy=[{"name": "w", "matchLabelKeys": ["role"]}, {"name": "w"}]),
        "spec.subGroupPolicy[1].name",
        'duplicate policy name "w": minSubGroups is counted per name',
    ),
    Case(
        "podgroup sub-group of no pods",
        PODGROUPS,
        podgroup(subGroupPolicy=[{"name": "w", "subGroupSize": 0}]),
        "spec.subGroupPolicy[0].subGroupSize",
        "must be greater than or equal to 1",
        real_message=(
            "Invalid value: 0: spec.subGroupPolicy[0].subGroupSize in body should be greater than or equal to 1"
        ),
        enforced_by="schema",
    ),
    # --- Queues (lahar-queue) ----------------------------------------------------------------------
    Case(
        "queue guarantee above capability",
        QUEUES,
        queue(capability={"cpu": "4"}, guarantee={"resource": {"cpu": "8"}}),
        "spec.guarantee.resource.cpu",
        "must not be greater than capability.cpu (4)",
    ),
    Case(
        "queue deserved above capability",
        QUEUES,
        queue(capability={"memory": "1Gi"}, deserved={"memory": "2Gi"}),
        "spec.deserved.memory",
        "must not be greater than capability.memory (1Gi)",
    ),
    Case(
        "queue negative capability",
        QUEUES,
        queue(capability={"cpu": "-2"}),
        "spec.capability.cpu",
        'invalid quantity "-2": must be greater than or equal to 0',
    ),
    Case(
        "queue its own parent",
        QUEUES,
        queue(name="loop", parent="loop"),
        "spec.parent",
        "a queue cannot be its own parent",
    ),
    Case(
        "queue weight 0",
        QUEUES,
        queue(weight=0),
        "spec.weight",
        "must be greater than or equal to 1",
        real_message="Invalid value: 0: spec.weight in body should be greater than or equal to 1",
        enforced_by="schema",
    ),
    # --- JobTemplates: a Job spec under an open schema (lahar-jobtemplate) -------------------------
    Case(
        "template minAvailable above its replicas",
        TEMPLATES,
        template(minAvailable=5),
        "spec.minAvailable",
        "minAvailable (5) must not be greater than the total replicas (3)",
    ),
    Case(
        "template with negative replicas",
        TEMPLATES,
        template_task(0, replicas=-1),
        "spec.tasks[0].replicas",
        "must be greater than or equal to 0",
    ),
    Case(
        "template with replicas beyond int32",
        TEMPLATES,
        template_task(1, replicas=2**31),
        "spec.tasks[1].replicas",
        "must be between -2147483648 and 2147483647, inclusive (an int32)",
    ),
    Case(
        "template with duplicate task names",
        TEMPLATES,
        template_task(1, name="master"),
        "spec.tasks[1].name",
        'duplicate task name "master"',
    ),
    # --- JobFlows: the DAG of flows (lahar-jobflow) -----------------------------------------------
    Case(
        "jobflow with a cycle",
        FLOWS,
        jobflow(flow("a", "b"), flow("b", "a"), flow("c", "a")),
        "spec.flows",
        "dependency cycle: a -> b -> a",
        real_message="dependency cycle among a, b",
    ),
    Case(
        "jobflow with a longer cycle",
        FLOWS,
        jobflow(flow("a"), flow("b", "a", "d"), flow("c", "b"), flow("d", "c")),
        "spec.flows",
        "dependency cycle: b -> d -> c -> b",
        real_message="dependency cycle among b, c, d",
    ),
    Case(
        "jobflow target that is not a flow",
        FLOWS,
        jobflow(flow("a"), flow("b", "a", "x")),
        "spec.flows[1].dependsOn.targets[1]",
        'unknown flow "x" (flows: a, b)',
    ),
    Case(
        "jobflow depending on itself",
        FLOWS,
        jobflow(flow("a", "a")),
        "spec.flows[0].dependsOn.targets[0]",
        "a flow cannot depend on itself",
    ),
    Case(
        "jobflow naming a flow twice",
        FLOWS,
        jobflow(flow("a"), flow("a")),
        "spec.flows[1].name",
        'duplicate flow "a"',
    ),
    Case(
        "jobflow without flows",
        FLOWS,
        jobflow(),
        "spec.flows",
        "at least one flow is required",
    ),
    Case(
        "jobflow with an unknown retain policy",
        FLOWS,
        jobflow(flow("a"), jobRetainPolicy="keep"),
        "spec.jobRetainPolicy",
        'unsupported job retain policy "keep" (supported: "retain", "delete")',
    ),
    # --- Volcano CronJobs (lahar-cronjob) ---------------------------------------------------------
    Case(
        "cronjob schedule out of range",
        CRONJOBS,
        cronjob("61 * * * *"),
        "spec.schedule",
        'invalid schedule "61 * * * *": minute: 61 is out of range 0-59',
        real_message='invalid schedule "61 * * * *": expected 5 fields',
    ),
    Case(
        "cronjob schedule of four fields",
        CRONJOBS,
        cronjob("*/5 * * *"),
        "spec.schedule",
        'invalid schedule "*/5 * * *": expected 5 fields',
    ),
    Case(
        "cronjob @every that is not a duration",
        CRONJOBS,
        cronjob("@every 10 minutes"),
        "spec.schedule",
        'invalid schedule "@every 10 minutes": @every: "10 minutes" is not a duration',
    ),
    Case(
        "cronjob @every not positive",
        CRONJOBS,
        cronjob("@every -5m"),
        "spec.schedule",
        'invalid schedule "@every -5m": @every: the interval must be positive, not "-5m"',
    ),
    Case(
        "cronjob name too long for its jobs",
        CRONJOBS,
        cronjob(name="c" * 53),
        "metadata.name",
        "must be no more than 52 characters (its Jobs add 11 to it, and a Job name holds 63)",
    ),
    Case(
        "cronjob template with negative replicas",
        CRONJOBS,
        cron_task(0, replicas=-1),
        "spec.jobTemplate.spec.tasks[0].replicas",
        "must be greater than or equal to 0",
    ),
    Case(
        "cronjob template minAvailable above its replicas",
        CRONJOBS,
        cronjob(minAvailable=5),
        "spec.jobTemplate.spec.minAvailable",
        "minAvailable (5) must not be greater than the total replicas (3)",
    ),
]


# Defaults both backends fill in (Volcano's mutating webhook): (resource, object, {path: value}).
# Paths are dotted, list indexes as numbers.
DEFAULTED: list[tuple[str, tuple[str, str, str], Obj, dict[str, Any]]] = [
    (
        "job defaults",
        JOBS,
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "defaulted-job"},
            "spec": {
                "queue": "",
                "tasks": [
                    {"replicas": 2, "template": pod_template()},
                    {"name": "worker", "replicas": 3, "minAvailable": 1, "template": pod_template()},
                ],
            },
        },
        {
            "spec.schedulerName": "lahar",
            "spec.queue": "default",
            "spec.maxRetry": 3,
            "spec.minAvailable": 3,
            "spec.tasks.0.name": "default0",
            "spec.tasks.0.minAvailable": 2,
            "spec.tasks.0.maxRetry": 3,
            "spec.tasks.1.minAvailable": 1,
        },
    ),
    (
        "podgroup defaults",
        PODGROUPS,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "defaulted-pg"},
            "spec": {"queue": ""},
        },
        {"spec.minMember": 1, "spec.queue": "default"},
    ),
    (
        "queue defaults",
        QUEUES,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "defaulted-queue"},
            "spec": {},
        },
        {"spec.weight": 1, "spec.reclaimable": True},
    ),
    (
        "jobtemplate defaults",
        TEMPLATES,
        {
            "apiVersion": "flow.volcano.sh/v1alpha1",
            "kind": "JobTemplate",
            "metadata": {"name": "defaulted-template"},
            "spec": {"queue": "", "tasks": [{"replicas": 2, "template": pod_template()}]},
        },
        {
            "spec.schedulerName": "lahar",
            "spec.queue": "default",
            "spec.minAvailable": 2,
            "spec.maxRetry": 3,
            "spec.tasks.0.name": "default0",
            "spec.tasks.0.minAvailable": 2,
            "spec.tasks.0.maxRetry": 3,
        },
    ),
    (
        "jobflow defaults",
        FLOWS,
        {
            "apiVersion": "flow.volcano.sh/v1alpha1",
            "kind": "JobFlow",
            "metadata": {"name": "defaulted-flow"},
            "spec": {"flows": [{"name": "a"}]},
        },
        {"spec.jobRetainPolicy": "retain"},
    ),
    (
        "cronjob defaults",
        CRONJOBS,
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "CronJob",
            "metadata": {"name": "defaulted-cron"},
            "spec": {"schedule": "@every 1h", "jobTemplate": {"spec": job()["spec"]}},
        },
        {
            "spec.concurrencyPolicy": "Allow",
            "spec.suspend": False,
            "spec.successfulJobsHistoryLimit": 3,
            "spec.failedJobsHistoryLimit": 1,
        },
    ),
]


def value_at(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else (obj or {}).get(part)
    return obj
