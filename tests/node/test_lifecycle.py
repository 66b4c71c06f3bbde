"""The kubelet decisions of the local runtime as plain functions: restarts, backoff, phases,
statuses, and a container's argv and environment."""

from __future__ import annotations

import pytest

from lahar.api import kinds
from lahar.client.errors import NotFound
from lahar.node.lifecycle import (
    ALWAYS,
    NEVER,
    ON_FAILURE,
    ContainerRecord,
    PodRecords,
    RestartBackoff,
    Terminated,
    exit_code_of,
    pod_conditions,
    pod_phase,
    pod_status,
    restart_wanted,
)
from lahar.node.process import ConfigError, StartError, container_argv, container_env, expand


@pytest.mark.parametrize(
    ("policy", "code", "init", "wanted"),
    [
        (ALWAYS, 0, False, True),
        (ALWAYS, 1, False, True),
        (ON_FAILURE, 0, False, False),
        (ON_FAILURE, 2, False, True),
        (NEVER, 1, False, False),
        (ALWAYS, 0, True, False),
        (ALWAYS, 1, True, True),
        (NEVER, 1, True, False),
    ],
)
def test_restart_policy(policy: str, code: int, init: bool, wanted: bool) -> None:
    assert restart_wanted(policy, code, init) is wanted


def test_backoff_restarts_at_once_then_doubles_to_the_cap() -> None:
    backoff = RestartBackoff(initial=1.0, cap=5.0)
    assert [backoff.delay(n) for n in range(1, 7)] == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_signals_read_as_128_plus_the_signal() -> None:
    assert (exit_code_of(3), exit_code_of(-9), exit_code_of(-15)) == (3, 137, 143)


def ended(name: str, code: int, final: bool = True) -> ContainerRecord:
    record = ContainerRecord(name)
    record.start("lahar://1", 10.0)
    record.end(Terminated(code, "Error" if code else "Completed", 20.0, 10.0), final)
    return record


def running(name: str) -> ContainerRecord:
    record = ContainerRecord(name)
    record.start("lahar://2", 10.0)
    return record


def test_phase_follows_the_records() -> None:
    assert pod_phase([], [ContainerRecord("a")]) == "Pending"
    assert pod_phase([running("init")], [ContainerRecord("a")]) == "Pending"
    assert pod_phase([ended("init", 1)], [ContainerRecord("a")]) == "Failed"
    assert pod_phase([ended("init", 0)], [running("a"), ContainerRecord("b")]) == "Running"
    assert pod_phase([], [ended("a", 0), running("b")]) == "Running"
    assert pod_phase([], [ended("a", 1, final=False)]) == "Running"  # waiting to restart
    assert pod_phase([], [ended("a", 0), ended("b", 0)]) == "Succeeded"
    assert pod_phase([], [ended("a", 0), ended("b", 2)]) == "Failed"


def test_a_restart_counts_and_keeps_the_last_end() -> None:
    record = ended("a", 1, final=False)
    record.wait("CrashLoopBackOff", "back-off 1s")
    waiting = record.to_status()
    assert waiting["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1s"}}
    assert waiting["lastState"]["terminated"]["exitCode"] == 1 and waiting["restartCount"] == 0

    record.start("lahar://3", 30.0)
    again = record.to_status()
    assert again["restartCount"] == 1 and again["ready"] and again["containerID"] == "lahar://3"
    assert again["state"]["running"]["startedAt"] == "1970-01-01T00:00:30Z"
    assert again["lastState"]["terminated"]["finishedAt"] == "1970-01-01T00:00:20Z"


def test_pod_status_keeps_binding_conditions_and_transition_times() -> None:
    pod = {
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "T0"},
                {"type": "Ready", "status": "False", "lastTransitionTime": "T1"},
            ]
        }
    }
    status = pod_status(pod, [], [running("a")], "127.0.0.1", "127.0.0.1", 5.0, 40.0)

    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["PodScheduled"]["lastTransitionTime"] == "T0"  # unchanged status: time kept
    assert conditions["Ready"] == {"type": "Ready", "status": "True", "lastTransitionTime": "1970-01-01T00:00:40Z"}
    assert (status["phase"], status["podIP"], status["startTime"]) == ("Running", "127.0.0.1", "1970-01-01T00:00:05Z")
    assert "initContainerStatuses" not in status
    assert pod_conditions([], {"Ready": False}, 0.0)[0]["status"] == "False"


def test_records_carry_restart_counts_over() -> None:
    pod = {
        "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a", "image": "x"}, {"name": "b"}]},
        "status": {"containerStatuses": [{"name": "a", "restartCount": 4}]},
    }
    records = PodRecords.for_pod(pod)
    assert [r.name for r in records.init] == ["i"]
    assert [(r.name, r.image, r.restart_count) for r in records.app] == [("a", "x", 4), ("b", "", 0)]


# --- argv and env -----------------------------------------------------------------------------------


def test_expansion_is_kubelets() -> None:
    variables = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)-$(C)", variables) == "1-two-$(C)"
    assert expand("$$(A) costs $$5", variables) == "$(A) costs $5"


POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "web"}}, "spec": {"nodeName": "n1"}}


def no_lookup(kind: kinds.Kind, namespace: str, name: str) -> dict[str, object]:
    raise NotFound(404, "NotFound", f"{kind.plural} {name} not found")


def test_env_from_values_fields_and_sources() -> None:
    objects = {
        ("configmaps", "cfg"): {"data": {"MODE": "fast", "LEVEL": "3"}},
        ("secrets", "creds"): {"data": {"TOKEN": "c2VjcmV0"}},
    }

    def lookup(kind: kinds.Kind, namespace: str, name: str) -> dict[str, object]:
        assert namespace == "ns"
        if (kind.plural, name) not in objects:
            return no_lookup(kind, namespace, name)
        return objects[(kind.plural, name)]

    container = {
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
        "env": [
            {"name": "X", "value": "$(CFG_MODE)!"},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}}},
        ],
    }
    env = container_env(POD, container, lookup, base={"PATH": "/bin"})

    assert env == {
        "PATH": "/bin",
        "HOSTNAME": "p",
        "CFG_MODE": "fast",
        "CFG_LEVEL": "3",
        "X": "fast!",
        "APP": "web",
        "NODE": "n1",
        "TOKEN": "secret",
    }
    with pytest.raises(ConfigError, match='configmap "gone" not found'):
        container_env(
            POD, {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]}, lookup
        )


def test_argv_is_command_then_args_and_must_exist() -> None:
    env = {"PATH": "/usr/bin:/bin", "WHO": "world"}
    assert container_argv({"command": ["echo"], "args": ["hello $(WHO)"]}, env) == ["echo", "hello world"]
    assert container_argv({"args": ["echo", "x"]}, env) == ["echo", "x"]  # no image entrypoint to prepend
    with pytest.raises(StartError, match="no command"):
        container_argv({"image": "busybox"}, env)
    with pytest.raises(StartError, match='"nonexistent-tool": executable file not found'):
        container_argv({"command": ["nonexistent-tool"]}, env)
