"""Volcano Job: defaults, validation (every error names its field), update rules and views."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from lahar.api import job
from lahar.api.job import Job, JobPhase, LifecyclePolicy, parse_duration


def mpi_job() -> dict[str, Any]:
    """Volcano's MPI example: one master, two workers, gang of three, ssh/svc/env plugins."""

    def container(name: str, command: str, cpu: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": "volcanosh/example-mpi:0.0.3",
            "workingDir": "/home",
            "command": ["/bin/sh", "-c", command],
            "ports": [{"containerPort": 22, "name": "mpijob-port"}],
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
        }

    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "lm-mpi-job", "namespace": "default"},
        "spec": {
            "minAvailable": 3,
            "queue": "research",
            "plugins": {"ssh": [], "svc": [], "env": []},
            "policies": [
                {"event": "PodEvicted", "action": "RestartJob"},
                {"event": "PodPending", "action": "AbortJob", "timeout": "1h30m"},
            ],
            "tasks": [
                {
                    "name": "mpimaster",
                    "replicas": 1,
                    "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                    "template": {
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "containers": [
                                container(
                                    "mpimaster",
                                    "mpiexec --allow-run-as-root --hostfile /etc/volcano/mpiworker.host "
                                    "-np 2 mpi_hello_world",
                                    "500m",
                                )
                            ],
                        }
                    },
                },
                {
                    "name": "mpiworker",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "containers": [container("mpiworker", "mkdir -p /var/run/sshd; /usr/sbin/sshd -D", "1")],
                        }
                    },
                },
            ],
        },
    }


def errors(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in job.validate(obj, old)]


def test_mpi_job_is_valid_as_written_and_after_defaults() -> None:
    manifest = mpi_job()
    assert errors(manifest) == []
    assert errors(job.defaults(manifest)) == []


def test_mpi_job_defaults() -> None:
    defaulted = job.defaults(mpi_job())
    spec = defaulted["spec"]
    assert spec["schedulerName"] == "lahar"
    assert spec["queue"] == "research"
    assert spec["maxRetry"] == 3
    assert spec["minAvailable"] == 3  # given, kept
    assert [(t["minAvailable"], t["maxRetry"]) for t in spec["tasks"]] == [(1, 3), (2, 3)]
    assert spec["plugins"] == {"ssh": [], "svc": [], "env": []}


def test_defaults_do_not_mutate_the_input() -> None:
    manifest = mpi_job()
    del manifest["spec"]["minAvailable"]
    before = copy.deepcopy(manifest)
    defaulted = job.defaults(manifest)
    assert manifest == before
    assert defaulted is not manifest
    defaulted["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"] = "changed"
    assert manifest == before  # no shared nested dicts either


def test_job_min_available_defaults_to_the_sum_of_task_minimums() -> None:
    manifest = mpi_job()
    del manifest["spec"]["minAvailable"]
    manifest["spec"]["tasks"][1]["minAvailable"] = 1
    assert job.defaults(manifest)["spec"]["minAvailable"] == 1 + 1


def test_absent_names_queue_and_replicas_follow_volcano() -> None:
    manifest = mpi_job()
    del manifest["spec"]["queue"]
    del manifest["spec"]["tasks"][0]["name"]
    del manifest["spec"]["tasks"][1]["name"]
    del manifest["spec"]["tasks"][1]["replicas"]
    del manifest["spec"]["minAvailable"]
    spec = job.defaults(manifest)["spec"]
    assert spec["queue"] == "default"
    assert [t["name"] for t in spec["tasks"]] == ["default0", "default1"]
    assert spec["tasks"][1]["replicas"] == 0 and spec["tasks"][1]["minAvailable"] == 0
    assert spec["minAvailable"] == 1


def test_explicit_zero_max_retry_is_kept() -> None:
    manifest = mpi_job()
    manifest["spec"]["maxRetry"] = 0
    assert job.defaults(manifest)["spec"]["maxRetry"] == 0


def test_host_network_template_gets_cluster_dns() -> None:
    manifest = mpi_job()
    manifest["spec"]["tasks"][0]["template"]["spec"]["hostNetwork"] = True
    spec = job.defaults(manifest)["spec"]
    assert spec["tasks"][0]["template"]["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "dnsPolicy" not in spec["tasks"][1]["template"]["spec"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting `value` at a dotted path with [i] indexes, e.g. spec.tasks[1].name."""

    def mutate(obj: dict[str, Any]) -> None:
        keys: list[Any] = []
        for part in path.split("."):
            name, _, rest = part.partition("[")
            keys.append(name)
            keys += [int(i) for i in rest.rstrip("]").split("][")] if rest else []
        target = obj
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return mutate


def _policies(*policies: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return _set("spec.policies", list(policies))


INVALID_CASES = [
    (_set("spec.tasks", []), "spec.tasks", "at least one task is required"),
    (_set("spec.tasks", {}), "spec.tasks", "expected an array, got object"),
    (_set("spec.tasks[1].name", "mpimaster"), "spec.tasks[1].name", 'duplicate task name "mpimaster"'),
    (_set("spec.tasks[1].replicas", -1), "spec.tasks[1].replicas", "must be greater than or equal to 0"),
    (_set("spec.tasks[1].replicas", "three"), "spec.tasks[1].replicas", 'expected an integer, got string "three"'),
    (_set("spec.tasks[1].replicas", 2.5), "spec.tasks[1].replicas", "expected an integer, got number 2.5"),
    (
        _set("spec.tasks[1].minAvailable", 3),
        "spec.tasks[1].minAvailable",
        "minAvailable (3) must not be greater than replicas (2)",
    ),
    (
        _set("spec.minAvailable", 5),
        "spec.minAvailable",
        "minAvailable (5) must not be greater than the total replicas (3)",
    ),
    (_set("spec.minAvailable", -1), "spec.minAvailable", "must be greater than or equal to 0"),
    (_set("spec.minSuccess", 0), "spec.minSuccess", "must be greater than or equal to 1"),
    (_set("spec.minSuccess", 4), "spec.minSuccess", "minSuccess (4) must not be greater than the total replicas (3)"),
    (_set("spec.maxRetry", -1), "spec.maxRetry", "must be greater than or equal to 0"),
    (_set("spec.ttlSecondsAfterFinished", -5), "spec.ttlSecondsAfterFinished", "must be greater than or equal to 0"),
    (
        _set("spec.plugins.paddle", []),
        "spec.plugins.paddle",
        'unsupported job plugin "paddle" (supported: "env", "svc", "ssh", "pytorch", "tensorflow", "mpi", "ray",'
        ' "hcclrank")',
    ),
    (
        _set("spec.plugins.mpi", []),
        "spec.plugins.mpi",
        'the mpi plugin\'s master task "master" is not a task of this job',
    ),
    (
        _set("spec.plugins.ray", ["--head", "boss"]),
        "spec.plugins.ray",
        'the ray plugin\'s head task "boss" is not a task of this job',
    ),
    (_set("spec.plugins.ssh", "--no-root"), "spec.plugins.ssh", 'expected an array, got string "--no-root"'),
    (
        _policies({"event": "PodFailed", "exitCode": 1, "action": "RestartJob"}),
        "spec.policies[0]",
        "must not specify event(s) and exitCode together",
    ),
    (_policies({"action": "RestartJob"}), "spec.policies[0]", "one of event, events or exitCode is required"),
    (
        _policies({"event": "OutOfSync", "action": "RestartJob"}),
        "spec.policies[0].event",
        '"OutOfSync" is an event internal to the controller; a policy cannot use it',
    ),
    (
        _policies({"events": ["CommandIssued"], "action": "RestartJob"}),
        "spec.policies[0].events[0]",
        '"CommandIssued" is an event internal to the controller; a policy cannot use it',
    ),
    (
        _policies({"event": "PodFailed", "action": "SyncJob"}),
        "spec.policies[0].action",
        '"SyncJob" is an action internal to the controller; a policy cannot use it',
    ),
    (_policies({"event": "PodFailed"}), "spec.policies[0].action", "is required"),
    (
        _policies({"event": "PodFailed", "action": "Reboot"}),
        "spec.policies[0].action",
        'unsupported policy action "Reboot" (supported: "AbortJob", "RestartJob", "RestartTask", "RestartPod", '
        '"TerminateJob", "CompleteJob", "ResumeJob")',
    ),
    (
        _policies({"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodEvicted", "action": "AbortJob"}),
        "spec.policies[1].event",
        'duplicate policy event "PodEvicted"',
    ),
    (
        _policies(
            {"events": ["PodFailed", "PodEvicted"], "action": "RestartJob"},
            {"events": ["TaskFailed", "PodEvicted"], "action": "AbortJob"},
        ),
        "spec.policies[1].events[1]",
        'duplicate policy event "PodEvicted"',
    ),
    (
        _policies({"exitCode": 0, "action": "RestartJob"}),
        "spec.policies[0].exitCode",
        "0 is not a valid exit code (it means success)",
    ),
    (
        _policies({"exitCode": 137, "action": "RestartJob"}, {"exitCode": 137, "action": "AbortJob"}),
        "spec.policies[1].exitCode",
        "duplicate policy exitCode 137",
    ),
    (
        _policies({"event": "PodPending", "action": "AbortJob"}),
        "spec.policies[0].timeout",
        'is required for the "PodPending" event',
    ),
    (
        _policies({"event": "PodFailed", "action": "RestartJob", "timeout": "10 minutes"}),
        "spec.policies[0].timeout",
        'invalid duration "10 minutes": expected a Go duration such as "30s", "10m" or "1h30m"',
    ),
    (
        _policies({"event": "PodFailed", "action": "RestartJob", "timeout": "-1m"}),
        "spec.policies[0].timeout",
        'must not be negative, got "-1m"',
    ),
    (
        _policies({"event": "*", "action": "AbortJob"}, {"event": "PodFailed", "action": "RestartJob"}),
        "spec.policies",
        '"*" cannot be combined with other events',
    ),
    (
        _set(
            "spec.tasks[0].policies",
            [{"event": "TaskCompleted", "action": "CompleteJob"}, {"event": "TaskCompleted", "action": "AbortJob"}],
        ),
        "spec.tasks[0].policies[1].event",
        'duplicate policy event "TaskCompleted"',
    ),
    (
        _set("spec.tasks[0].template.spec.containers[0].resources.requests.cpu", "abc"),
        "spec.tasks[0].template.spec.containers[0].resources.requests.cpu",
        'invalid quantity "abc": missing number',
    ),
    (
        _set("spec.tasks[0].template.spec.containers[0].resources.requests.cpu", -1),
        "spec.tasks[0].template.spec.containers[0].resources.requests.cpu",
        'invalid quantity "-1": must be greater than or equal to 0',
    ),
    (
        _set("spec.tasks[1].template.spec.containers[0].resources.requests.cpu", "3"),
        "spec.tasks[1].template.spec.containers[0].resources.requests.cpu",
        "must be less than or equal to the cpu limit (2)",
    ),
    (
        _set("spec.tasks[0].template.spec.containers", []),
        "spec.tasks[0].template.spec.containers",
        "at least one container is required",
    ),
    (_set("spec.tasks[0].template", {}), "spec.tasks[0].template.spec", "is required"),
    (
        _set("spec.tasks[1].dependsOn", {"name": ["launcher"]}),
        "spec.tasks[1].dependsOn.name[0]",
        'unknown task "launcher"',
    ),
    (
        _set("spec.tasks[1].dependsOn", {"name": ["mpiworker"]}),
        "spec.tasks[1].dependsOn.name[0]",
        "a task cannot depend on itself",
    ),
    (
        _set("spec.tasks[1].dependsOn", {"name": ["mpimaster"], "iteration": "some"}),
        "spec.tasks[1].dependsOn.iteration",
        'unsupported iteration "some" (supported: "any", "all")',
    ),
    (
        _set("spec.tasks[1].dependsOn", {"name": []}),
        "spec.tasks[1].dependsOn.name",
        "at least one task name is required",
    ),
    (
        _set("spec.queue", "Research_Queue"),
        "spec.queue",
        'invalid value "Research_Queue": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')",
    ),
    (
        _set("metadata.name", "j" * 64),
        "metadata.name",
        "must be no more than 63 characters (it is used as a label value)",
    ),
    (_set("spec", []), "spec", "expected an object, got array"),
]


@pytest.mark.parametrize(
    ("mutate", "field", "message"), INVALID_CASES, ids=[case[1] + ":" + case[2][:30] for case in INVALID_CASES]
)
def test_invalid_job_names_the_field(mutate: Callable[[dict[str, Any]], None], field: str, message: str) -> None:
    manifest = mpi_job()
    mutate(manifest)
    assert (field, message) in errors(job.defaults(manifest))


def test_invalid_task_name_is_a_dns_label_error() -> None:
    manifest = mpi_job()
    manifest["spec"]["tasks"][0]["name"] = "Master_0"
    [(field, message)] = errors(manifest)
    assert field == "spec.tasks[0].name"
    assert message.startswith('invalid value "Master_0": a lowercase RFC 1123 label')


def test_dependency_cycle_is_refused_with_the_cycle_spelled_out() -> None:
    manifest = mpi_job()
    manifest["spec"]["tasks"][0]["dependsOn"] = {"name": ["mpiworker"]}
    manifest["spec"]["tasks"][1]["dependsOn"] = {"name": ["mpimaster"], "iteration": "all"}
    assert errors(manifest) == [("spec.tasks[0].dependsOn", "dependency cycle: mpimaster -> mpiworker -> mpimaster")]


def test_acyclic_dependencies_are_fine() -> None:
    manifest = mpi_job()
    manifest["spec"]["tasks"][0]["dependsOn"] = {"name": ["mpiworker"], "iteration": "any"}
    assert errors(manifest) == []
    assert Job.from_dict(manifest).tasks[0].depends_on == job.DependsOn(("mpiworker",), "any")


def test_every_error_is_collected() -> None:
    manifest = mpi_job()
    manifest["spec"]["tasks"][1]["name"] = "mpimaster"
    manifest["spec"]["minAvailable"] = 5
    manifest["spec"]["policies"].append({"event": "PodEvicted", "action": "AbortJob"})
    manifest["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "2 Gi"
    assert errors(manifest) == [
        (
            "spec.tasks[0].template.spec.containers[0].resources.limits.memory",
            'invalid quantity "2 Gi": contains whitespace',
        ),
        ("spec.tasks[1].name", 'duplicate task name "mpimaster"'),
        ("spec.minAvailable", "minAvailable (5) must not be greater than the total replicas (3)"),
        ("spec.policies[2].event", 'duplicate policy event "PodEvicted"'),
    ]


def test_event_and_events_in_one_policy_merge_as_in_volcano() -> None:
    manifest = mpi_job()
    manifest["spec"]["policies"] = [
        {"event": "PodFailed", "events": ["PodFailed", "PodEvicted"], "action": "RestartJob"}
    ]
    assert errors(manifest) == []
    [policy] = Job.from_dict(manifest).policies
    assert policy.events == ("PodFailed", "PodEvicted")


def test_any_event_alone_is_fine() -> None:
    manifest = mpi_job()
    manifest["spec"]["policies"] = [{"event": "*", "action": "RestartJob"}]
    assert errors(manifest) == []
    assert Job.from_dict(manifest).policies[0].matches_event("PodFailed")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("10m", 600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("2m30.5s", 150.5),
        ("0", 0.0),
        ("-2m", -120.0),
        ("+1h", 3600.0),
        ("100us", 1e-4),
        ("3µs", 3e-6),
        (".5s", 0.5),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "10 minutes", "h", "1hh", "1d", "m10", "1h 30m", "-"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


# --- updates ------------------------------------------------------------------------------------


def test_update_may_scale_tasks_and_change_mutable_fields() -> None:
    old = job.defaults(mpi_job())
    new = copy.deepcopy(old)
    new["spec"]["tasks"][1]["replicas"] = 4
    new["spec"]["tasks"][1]["minAvailable"] = 3
    new["spec"]["minAvailable"] = 4
    new["spec"]["maxRetry"] = 5
    new["spec"]["priorityClassName"] = "high"
    new["spec"]["ttlSecondsAfterFinished"] = 600
    new["status"] = {"state": {"phase": "Running"}}
    assert errors(new, old) == []


def test_update_with_defaulted_fields_omitted_is_not_a_change() -> None:
    old = job.defaults(mpi_job())
    assert errors(mpi_job(), old) == []


def test_update_refuses_changes_to_fixed_fields() -> None:
    old = job.defaults(mpi_job())
    new = copy.deepcopy(old)
    new["spec"]["queue"] = "other"
    new["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"] = "mpi:2"
    new["spec"]["tasks"][1]["name"] = "workers"
    new["spec"]["plugins"] = {"env": []}
    assert errors(new, old) == [
        ("spec.plugins", "field is immutable"),
        ("spec.queue", "field is immutable"),
        ("spec.tasks[0].template", "field is immutable"),
        ("spec.tasks[1].name", "field is immutable"),
    ]


def test_update_may_not_add_or_remove_tasks() -> None:
    old = job.defaults(mpi_job())
    new = copy.deepcopy(old)
    new["spec"]["tasks"].pop()
    new["spec"]["minAvailable"] = 1
    assert errors(new, old) == [("spec.tasks", "tasks may not be added or removed")]


# --- views --------------------------------------------------------------------------------------


def test_job_view() -> None:
    view = Job.from_dict(job.defaults(mpi_job()))
    assert (view.name, view.namespace) == ("lm-mpi-job", "default")
    assert (view.queue, view.scheduler_name) == ("research", "lahar")
    assert view.total_replicas == 3 and view.min_available == 3 and view.max_retry == 3
    assert view.plugins == {"ssh": (), "svc": (), "env": ()}
    worker = view.task("mpiworker")
    assert worker is not None and (worker.replicas, worker.min_available) == (2, 2)
    assert view.task("nope") is None
    assert view.policies[1] == LifecyclePolicy(action="AbortJob", events=("PodPending",), timeout_seconds=5400.0)
    assert view.tasks[0].policies[0].matches_event("TaskCompleted")
    assert not view.tasks[0].policies[0].matches_event("PodFailed")
    assert view.phase is JobPhase.PENDING and not view.is_finished


def test_job_view_of_an_undefaulted_manifest_uses_the_defaults() -> None:
    manifest = mpi_job()
    del manifest["spec"]["minAvailable"]
    view = Job.from_dict(manifest)
    assert view.min_available == 3 and view.scheduler_name == "lahar" and view.max_retry == 3


def test_status_layout_helpers() -> None:
    manifest = mpi_job()
    assert job.job_phase(manifest) is JobPhase.PENDING
    manifest["status"] = {
        job.STATUS_STATE: job.job_state(JobPhase.COMPLETED, reason="Done", transition_time="2024-01-01T00:00:00Z")
    }
    assert manifest["status"]["state"] == {
        "phase": "Completed",
        "reason": "Done",
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    }
    assert job.job_phase(manifest) is JobPhase.COMPLETED
    assert Job.from_dict(manifest).is_finished
    assert JobPhase.ABORTED not in job.FINISHED_PHASES  # ResumeJob brings it back
    assert [p.value for p in JobPhase] == [
        "Pending",
        "Running",
        "Restarting",
        "Completing",
        "Completed",
        "Aborting",
        "Aborted",
        "Terminating",
        "Terminated",
        "Failed",
    ]


def test_framework_plugins_bring_svc_and_mpi_brings_ssh_as_volcanos_webhook() -> None:
    manifest = mpi_job()
    manifest["spec"]["plugins"] = {"mpi": ["--master=mpimaster", "--worker=mpiworker"]}
    assert set(job.defaults(manifest)["spec"]["plugins"]) == {"mpi", "svc", "ssh"}
    manifest["spec"]["plugins"] = {"pytorch": [], "svc": ["--disable-network-policy"]}
    assert job.defaults(manifest)["spec"]["plugins"] == {"pytorch": [], "svc": ["--disable-network-policy"]}
