"""The `lahar` command against a real embedded server process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lahar.endpoints import free_loopback_port

REPO = Path(__file__).resolve().parents[2]
MPI_JOB = REPO / "examples" / "mpi-job.yaml"

INVALID_JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: broken}
spec:
  minAvailable: 2
  tasks:
  - name: worker
    replicas: 1
    template: {spec: {containers: [{name: c, image: busybox}]}}
  - name: worker
    replicas: 1
    template: {spec: {containers: [{name: c, image: busybox}]}}
"""


def lahar(*args: str, kubeconfig: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    return subprocess.run(
        [sys.executable, "-m", "lahar", *args, *extra], capture_output=True, text=True, input=stdin, timeout=60
    )


@pytest.fixture
def kubeconfig(apiserver, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    return apiserver.kubeconfig(tmp_path / "kubeconfig")


def test_apply_a_volcano_mpi_job_and_get_it(kubeconfig: Path) -> None:
    applied = lahar("apply", "-f", str(MPI_JOB), kubeconfig=kubeconfig)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == "job.batch.volcano.sh/lm-mpi-job created"

    table = lahar("get", "jobs", kubeconfig=kubeconfig)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "MINAVAILABLE", "RUNNING", "AGE"]
    assert row.split()[:4] == ["lm-mpi-job", "Pending", "3", "0"]

    stored = json.loads(lahar("get", "vcjob", "lm-mpi-job", "-o", "json", kubeconfig=kubeconfig).stdout)
    assert [t["name"] for t in stored["spec"]["tasks"]] == ["mpimaster", "mpiworker"]
    assert stored["spec"]["maxRetry"] == 3 and stored["spec"]["queue"] == "default"
    assert stored["spec"]["plugins"] == {"ssh": [], "svc": [], "env": []}

    again = lahar("apply", "-f", str(MPI_JOB), kubeconfig=kubeconfig)
    assert again.stdout.strip() == "job.batch.volcano.sh/lm-mpi-job unchanged"


def test_changed_manifest_is_configured(kubeconfig: Path, tmp_path: Path) -> None:
    assert lahar("apply", "-f", str(MPI_JOB), kubeconfig=kubeconfig).returncode == 0
    changed = tmp_path / "job.yaml"
    changed.write_text(MPI_JOB.read_text().replace("maxRetry: 3", "maxRetry: 5"))
    result = lahar("apply", "-f", str(changed), kubeconfig=kubeconfig)
    assert result.stdout.strip() == "job.batch.volcano.sh/lm-mpi-job configured", result.stderr
    stored = yaml.safe_load(lahar("get", "jobs", "lm-mpi-job", "-o", "yaml", kubeconfig=kubeconfig).stdout)
    assert stored["spec"]["maxRetry"] == 5


def test_invalid_job_is_refused_with_the_field_and_nothing_stored(kubeconfig: Path) -> None:
    result = lahar("apply", "-f", "-", kubeconfig=kubeconfig, stdin=INVALID_JOB)
    assert result.returncode == 1
    assert 'spec.tasks[1].name: duplicate task name "worker"' in result.stderr
    listed = json.loads(lahar("get", "jobs", "-o", "json", kubeconfig=kubeconfig).stdout)
    assert listed["items"] == []


def test_one_bad_document_stops_the_whole_file(kubeconfig: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "mixed.yaml"
    queue = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: team-a}\nspec: {weight: 2}\n"
    manifest.write_text(queue + "---\n" + INVALID_JOB)
    result = lahar("apply", "-f", str(manifest), kubeconfig=kubeconfig)
    assert result.returncode == 1 and "document 2" in result.stderr
    names = lahar("get", "queues", "-o", "name", kubeconfig=kubeconfig).stdout.split()
    assert names == ["queue.scheduling.volcano.sh/default"]


def test_apply_a_directory_then_delete_by_file(kubeconfig: Path) -> None:
    result = lahar("apply", "-f", str(REPO / "examples"), kubeconfig=kubeconfig)
    assert result.returncode == 0, result.stderr
    queues = lahar("get", "queues", "-o", "name", kubeconfig=kubeconfig).stdout.split()
    assert sorted(queues) == [
        "queue.scheduling.volcano.sh/default",
        "queue.scheduling.volcano.sh/production",
        "queue.scheduling.volcano.sh/research",
        "queue.scheduling.volcano.sh/team-a",
        "queue.scheduling.volcano.sh/team-b",
    ]
    deleted = lahar("delete", "-f", str(REPO / "examples" / "queues.yaml"), kubeconfig=kubeconfig)
    assert deleted.returncode == 0, deleted.stderr
    assert lahar("get", "queues", "-o", "name", kubeconfig=kubeconfig).stdout.split() == [
        "queue.scheduling.volcano.sh/default",
        "queue.scheduling.volcano.sh/team-a",
        "queue.scheduling.volcano.sh/team-b",
    ]


def test_get_pods_wide_and_describe(kubeconfig: Path, tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {app: web}}\n"
        "spec: {containers: [{name: c, image: nginx}]}\n"
    )
    assert lahar("apply", "-f", str(pod), kubeconfig=kubeconfig).returncode == 0
    wide = lahar("get", "pods", "-o", "wide", "-l", "app=web", kubeconfig=kubeconfig).stdout.splitlines()
    # kubectl's order: the `-o wide` columns come after AGE.
    header = ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    assert wide[0].split() == header
    cells = wide[1].split()
    assert cells[:4] == ["web", "0/1", "Pending", "0"] and cells[5:] == ["<none>"] * 4
    assert lahar("get", "pods", "-l", "app=db", kubeconfig=kubeconfig).stdout == ""
    described = lahar("describe", "pod", "web", kubeconfig=kubeconfig)
    assert described.returncode == 0, described.stderr
    assert "Name: web" in described.stdout and "image: nginx" in described.stdout
    assert "Events: <none>" in described.stdout


def test_clear_errors(kubeconfig: Path, tmp_path: Path) -> None:
    unknown = lahar("get", "widgets", kubeconfig=kubeconfig)
    assert unknown.returncode == 1 and 'unknown resource type "widgets"' in unknown.stderr
    missing = lahar("apply", "-f", str(tmp_path / "nope.yaml"), kubeconfig=kubeconfig)
    assert missing.returncode == 1 and "no such file or directory" in missing.stderr
    not_found = lahar("delete", "queue", "ghost", kubeconfig=kubeconfig)
    assert not_found.returncode == 1 and '"ghost" not found' in not_found.stderr
    assert lahar("delete", "queue", "ghost", "--ignore-not-found", kubeconfig=kubeconfig).returncode == 0
    bad_yaml = lahar("apply", "-f", "-", kubeconfig=kubeconfig, stdin="kind: [unclosed\n")
    assert bad_yaml.returncode == 1 and "not valid YAML" in bad_yaml.stderr
    no_kind = lahar("apply", "-f", "-", kubeconfig=kubeconfig, stdin="apiVersion: v1\nmetadata: {name: x}\n")
    assert no_kind.returncode == 1 and "kind is required" in no_kind.stderr
    assert lahar("get", kubeconfig=kubeconfig).returncode == 2  # argparse: a missing argument


def test_unreachable_api_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "kc"
    config.write_text(
        f"apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: "
        f"'http://127.0.0.1:{free_loopback_port()}'}}}}]\nusers: [{{name: u, user: {{}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    result = lahar("get", "queues", kubeconfig=config)
    assert result.returncode == 1
    assert result.stderr.startswith("error:") and "Connection refused" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_kubeconfig_command_prints_a_usable_config(apiserver, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    printed = lahar("kubeconfig", "--server", apiserver.url)
    assert printed.returncode == 0
    config = yaml.safe_load(printed.stdout)
    assert config["clusters"][0]["cluster"]["server"] == apiserver.url
    path = tmp_path / "kc"
    path.write_text(printed.stdout)
    assert lahar("get", "queues", "-o", "name", kubeconfig=path).stdout.split() == [
        "queue.scheduling.volcano.sh/default"
    ]
