"""`lahar job ...` and `lahar queue ...` (vcctl's verbs) against a real embedded server process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def lahar(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    # --kubeconfig goes right after the verb: everything after `--` is the job's command.
    command, verb, *rest = args
    return subprocess.run(
        [sys.executable, "-m", "lahar", command, verb, "--kubeconfig", str(kubeconfig), *rest],
        capture_output=True,
        text=True,
        timeout=60,
    )


def stored(kind: str, kubeconfig: Path, *names: str) -> Any:
    result = subprocess.run(
        [sys.executable, "-m", "lahar", "get", kind, *names, "-o", "json", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def kubeconfig(apiserver, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    return apiserver.kubeconfig(tmp_path / "kubeconfig")


def test_job_run_creates_a_one_task_volcano_job(kubeconfig: Path) -> None:
    result = lahar(
        "job",
        "run",
        "--name",
        "train",
        "--image",
        "busybox:1.36",
        "--replicas",
        "3",
        "--min-available",
        "2",
        "--queue",
        "default",
        "--cpu",
        "250m",
        "--memory",
        "64Mi",
        "--",
        "sh",
        "-c",
        "echo hi",
        kubeconfig=kubeconfig,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "job.batch.volcano.sh/train created"

    job = stored("jobs", kubeconfig, "train")
    spec = job["spec"]
    assert spec["minAvailable"] == 2 and spec["queue"] == "default" and spec["schedulerName"] == "lahar"
    [task] = spec["tasks"]
    assert task["name"] == "train" and task["replicas"] == 3
    [container] = task["template"]["spec"]["containers"]
    assert container["image"] == "busybox:1.36"
    assert container["command"] == ["sh", "-c", "echo hi"]
    assert container["resources"]["requests"] == {"cpu": "250m", "memory": "64Mi"}
    assert container["resources"]["limits"] == {"cpu": "250m", "memory": "64Mi"}
    assert task["template"]["spec"]["restartPolicy"] == "Never"


def test_job_run_defaults(kubeconfig: Path) -> None:
    assert lahar("job", "run", "--name", "tiny", "--image", "busybox", kubeconfig=kubeconfig).returncode == 0
    spec = stored("jobs", kubeconfig, "tiny")["spec"]
    assert spec["minAvailable"] == 1 and spec["tasks"][0]["replicas"] == 1
    container = spec["tasks"][0]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert "command" not in container


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--image", "busybox"], "job name cannot be left blank"),
        (
            ["--name", "bad", "--image", "busybox", "--replicas", "0", "--min-available", "1"],
            "minAvailable (1) must not be greater than the total replicas (0)",
        ),
        (["--name", "bad", "--image", "busybox", "--memory", "lots"], 'invalid quantity "lots"'),
        (["--name", "bad", "--image", "busybox", "--replicas", "-1"], "spec.tasks[0].replicas"),
        (["--name", "Bad_Name", "--image", "busybox"], "metadata.name"),
    ],
)
def test_job_run_refuses_bad_input_and_stores_nothing(kubeconfig: Path, flags: list[str], message: str) -> None:
    result = lahar("job", "run", *flags, kubeconfig=kubeconfig)
    assert result.returncode in (1, 2)  # 2: argparse's missing flag
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert stored("jobs", kubeconfig)["items"] == []


def test_job_run_twice_is_a_clear_error(kubeconfig: Path) -> None:
    assert lahar("job", "run", "--name", "once", "--image", "busybox", kubeconfig=kubeconfig).returncode == 0
    again = lahar("job", "run", "--name", "once", "--image", "busybox", kubeconfig=kubeconfig)
    assert again.returncode == 1 and "already exists" in again.stderr, again.stderr


def test_job_list_and_view(kubeconfig: Path) -> None:
    assert lahar("job", "list", kubeconfig=kubeconfig).stdout.strip() == "No jobs found in default namespace."
    assert (
        lahar(
            "job", "run", "--name", "alpha", "--image", "busybox", "--replicas", "2", kubeconfig=kubeconfig
        ).returncode
        == 0
    )
    namespace = subprocess.run(
        [sys.executable, "-m", "lahar", "apply", "-f", "-", "--kubeconfig", str(kubeconfig)],
        input="apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert namespace.returncode == 0, namespace.stderr
    assert (
        lahar("job", "run", "--name", "beta", "--image", "busybox", "-n", "team", kubeconfig=kubeconfig).returncode == 0
    )

    header, *rows = lahar("job", "list", kubeconfig=kubeconfig).stdout.splitlines()
    assert header.split() == [  # vcctl's columns
        "Name",
        "Creation",
        "Phase",
        "JobType",
        "Replicas",
        "Min",
        "Pending",
        "Running",
        "Succeeded",
        "Failed",
        "Unknown",
        "RetryCount",
    ]
    [row] = [row.split() for row in rows]
    assert row[0] == "alpha" and row[2:] == ["Pending", "Batch", "2", "2", "0", "0", "0", "0", "0", "0"]
    assert lahar("job", "list", "--selector", "zzz", kubeconfig=kubeconfig).stdout.startswith("No jobs found")
    assert lahar("job", "list", "-q", "other", kubeconfig=kubeconfig).stdout.startswith("No jobs found")
    assert lahar("job", "list", "--selector", "alp", kubeconfig=kubeconfig).stdout.count("alpha") == 1

    everywhere = lahar("job", "list", "-A", kubeconfig=kubeconfig).stdout.splitlines()
    assert everywhere[0].split()[:2] == ["Namespace", "Name"]
    assert [row.split()[:2] for row in everywhere[1:]] == [["default", "alpha"], ["team", "beta"]]

    view = lahar("job", "view", "alpha", kubeconfig=kubeconfig)
    assert view.returncode == 0, view.stderr
    assert "Name: alpha" in view.stdout and "Queue: default" in view.stdout and "Min Available: 2" in view.stdout
    assert "Phase: Pending" in view.stdout and "- busybox" in view.stdout
    assert "Pod Counts:" in view.stdout and "Conditions: <none>" in view.stdout and "Pods: <none>" in view.stdout

    missing = lahar("job", "view", "ghost", kubeconfig=kubeconfig)
    assert missing.returncode == 1 and 'jobs "ghost" not found in namespace "default"' in missing.stderr


def test_job_view_lists_the_jobs_pods(kubeconfig: Path, tmp_path: Path) -> None:
    assert lahar("job", "run", "--name", "withpods", "--image", "busybox", kubeconfig=kubeconfig).returncode == 0
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: withpods-withpods-0\n"
        "  labels: {volcano.sh/job-name: withpods}\n"
        "spec: {containers: [{name: c, image: busybox}]}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: stranger}\n"
        "spec: {containers: [{name: c, image: busybox}]}\n"
    )
    applied = subprocess.run(
        [sys.executable, "-m", "lahar", "apply", "-f", str(pod), "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert applied.returncode == 0, applied.stderr
    view = lahar("job", "view", "withpods", kubeconfig=kubeconfig).stdout
    pods = view.split("Pods:", 1)[1]
    assert "withpods-withpods-0" in pods and "stranger" not in pods


def test_suspend_and_resume_set_the_command_annotation(kubeconfig: Path) -> None:
    assert lahar("job", "run", "--name", "pausable", "--image", "busybox", kubeconfig=kubeconfig).returncode == 0
    suspended = lahar("job", "suspend", "pausable", kubeconfig=kubeconfig)
    assert suspended.returncode == 0, suspended.stderr
    assert suspended.stdout.strip() == "job.batch.volcano.sh/pausable: AbortJob requested"
    assert stored("jobs", kubeconfig, "pausable")["metadata"]["annotations"]["lahar.dev/command"] == "AbortJob"
    assert lahar("job", "resume", "pausable", kubeconfig=kubeconfig).returncode == 0
    assert stored("jobs", kubeconfig, "pausable")["metadata"]["annotations"]["lahar.dev/command"] == "ResumeJob"

    missing = lahar("job", "suspend", "ghost", kubeconfig=kubeconfig)
    assert missing.returncode == 1 and 'jobs "ghost" not found' in missing.stderr


def test_queue_create_list_and_operate(kubeconfig: Path) -> None:
    created = lahar(
        "queue",
        "create",
        "--name",
        "research",
        "--weight",
        "4",
        "--capability",
        "cpu=8,memory=32Gi",
        "--no-reclaimable",
        kubeconfig=kubeconfig,
    )
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == "queue.scheduling.volcano.sh/research created"
    queue = stored("queues", kubeconfig, "research")
    assert queue["spec"] == {"weight": 4, "capability": {"cpu": "8", "memory": "32Gi"}, "reclaimable": False}
    assert queue["status"]["state"] == "Open"

    header, *rows = lahar("queue", "list", kubeconfig=kubeconfig).stdout.splitlines()
    assert header.split() == [
        "Name",
        "Weight",
        "State",
        "Parent",
        "Inqueue",
        "Pending",
        "Running",
        "Unknown",
        "Completed",
    ]
    assert [row.split() for row in rows] == [
        ["default", "1", "Open", "0", "0", "0", "0", "0"],  # no parent: the column is blank
        ["research", "4", "Open", "0", "0", "0", "0", "0"],
    ]
    _, got = lahar("queue", "get", "-n", "research", kubeconfig=kubeconfig).stdout.splitlines()
    assert got.split() == ["research", "4", "Open", "0", "0", "0", "0", "0"]

    closed = lahar("queue", "operate", "--name", "research", "--action", "close", kubeconfig=kubeconfig)
    assert closed.returncode == 0, closed.stderr
    annotations = stored("queues", kubeconfig, "research")["metadata"]["annotations"]
    assert annotations["lahar.dev/queue-command"] == "close"
    assert lahar("queue", "operate", "--name", "research", "--action", "open", kubeconfig=kubeconfig).returncode == 0
    annotations = stored("queues", kubeconfig, "research")["metadata"]["annotations"]
    assert annotations["lahar.dev/queue-command"] == "open"


def test_queue_refusals(kubeconfig: Path) -> None:
    default = lahar("queue", "operate", "--name", "default", "--action", "close", kubeconfig=kubeconfig)
    assert default.returncode == 1 and 'the "default" queue cannot be closed' in default.stderr
    assert "annotations" not in stored("queues", kubeconfig, "default")["metadata"]

    ghost = lahar("queue", "operate", "--name", "ghost", "--action", "close", kubeconfig=kubeconfig)
    assert ghost.returncode == 1 and 'queues "ghost" not found' in ghost.stderr
    bad_action = lahar("queue", "operate", "--name", "default", "--action", "pause", kubeconfig=kubeconfig)
    assert bad_action.returncode == 2 and "invalid choice" in bad_action.stderr

    malformed = lahar("queue", "create", "--name", "q1", "--capability", "cpu8", kubeconfig=kubeconfig)
    assert malformed.returncode == 1 and '"cpu8" is not NAME=QUANTITY' in malformed.stderr
    bad_amount = lahar("queue", "create", "--name", "q2", "--capability", "cpu=lots", kubeconfig=kubeconfig)
    assert bad_amount.returncode == 1 and "spec.capability.cpu" in bad_amount.stderr, bad_amount.stderr
    zero_weight = lahar("queue", "create", "--name", "q3", "--weight", "0", kubeconfig=kubeconfig)
    assert zero_weight.returncode == 1 and "spec.weight" in zero_weight.stderr
    names = [q["metadata"]["name"] for q in stored("queues", kubeconfig)["items"]]
    assert names == ["default"]


def test_vcctl_flags_delete_update_and_run_from_a_file(kubeconfig: Path, tmp_path: Path) -> None:
    run = lahar(
        "job", "run", "-N", "short", "-i", "nginx", "-r", "3", "-m", "2", "-R", "cpu=500m", kubeconfig=kubeconfig
    )
    assert run.returncode == 0, run.stderr
    spec = stored("jobs", kubeconfig, "short")["spec"]
    container = spec["tasks"][0]["template"]["spec"]["containers"][0]
    assert (spec["minAvailable"], spec["tasks"][0]["replicas"], container["image"]) == (2, 3, "nginx")
    assert container["resources"] == {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: fromfile}\n"
        "spec: {tasks: [{replicas: 1, template: {spec: {containers: [{name: c, image: busybox}]}}}]}\n"
    )
    assert lahar("job", "run", "-f", str(manifest), kubeconfig=kubeconfig).returncode == 0
    assert stored("jobs", kubeconfig, "fromfile")["spec"]["tasks"][0]["replicas"] == 1
    blank = lahar("job", "run", kubeconfig=kubeconfig)
    assert blank.returncode == 1 and "job name cannot be left blank" in blank.stderr

    assert lahar("job", "suspend", "-N", "short", kubeconfig=kubeconfig).returncode == 0
    deleted = lahar("job", "delete", "-N", "short", kubeconfig=kubeconfig)
    assert deleted.returncode == 0 and deleted.stdout.strip() == "delete job short successfully"
    assert [j["metadata"]["name"] for j in stored("jobs", kubeconfig)["items"]] == ["fromfile"]
    again = lahar("job", "delete", "short", kubeconfig=kubeconfig)
    assert again.returncode == 1 and 'jobs "short" not found' in again.stderr

    assert lahar("queue", "create", "-n", "batch", "-w", "2", kubeconfig=kubeconfig).returncode == 0
    assert lahar("queue", "operate", "-n", "batch", "-a", "update", "-w", "7", kubeconfig=kubeconfig).returncode == 0
    assert stored("queues", kubeconfig, "batch")["spec"]["weight"] == 7
    no_weight = lahar("queue", "operate", "-n", "batch", "-a", "update", kubeconfig=kubeconfig)
    assert no_weight.returncode == 1 and "weight must be specified" in no_weight.stderr
    open_queue = lahar("queue", "delete", "-n", "batch", kubeconfig=kubeconfig)
    assert (
        open_queue.returncode == 1 and 'only a Closed queue can be deleted; queue "batch" is Open' in open_queue.stderr
    )
    default = lahar("queue", "delete", "-n", "default", kubeconfig=kubeconfig)
    assert default.returncode == 1 and "cannot be deleted" in default.stderr
    assert {q["metadata"]["name"] for q in stored("queues", kubeconfig)["items"]} == {"default", "batch"}
