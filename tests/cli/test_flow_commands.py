"""`lahar jobflow ...` and `lahar jobtemplate ...` (vcctl's verbs) against a real embedded server
process; the commands run in this process (lahar.cli.main) to keep the test quick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lahar import log_format
from lahar.cli.main import main

TEMPLATE = {
    "apiVersion": "flow.volcano.sh/v1alpha1",
    "kind": "JobTemplate",
    "metadata": {"name": "prepare"},
    "spec": {
        "minAvailable": 1,
        "tasks": [
            {
                "name": "main",
                "replicas": 1,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
            }
        ],
    },
}


def flow(name: str, *flows: dict) -> dict:
    return {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobFlow",
        "metadata": {"name": name},
        "spec": {"flows": list(flows)},
    }


@pytest.fixture
def kubeconfig(apiserver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # type: ignore[no-untyped-def]
    # main() sets up the process's logging for a command line; the test process keeps its own.
    monkeypatch.setattr(log_format, "configure", lambda *_: None)
    return apiserver.kubeconfig(tmp_path / "kubeconfig")


def lahar(capsys: pytest.CaptureFixture[str], kubeconfig: Path, *args: str) -> tuple[int, str]:
    command, verb, *rest = args
    try:
        code = main([command, verb, "--kubeconfig", str(kubeconfig), *rest])
    except SystemExit as exit_:  # argparse's refusals
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_jobtemplate_and_jobflow_verbs(kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    templates = tmp_path / "templates.yaml"
    second = {**TEMPLATE, "metadata": {"name": "train", "namespace": "default"}}
    templates.write_text(yaml.safe_dump_all([TEMPLATE, second]))
    assert lahar(capsys, kubeconfig, "jobtemplate", "create", "-f", str(templates)) == (
        0,
        "Created JobTemplate: default/prepare\nCreated JobTemplate: default/train\n",
    )
    code, out = lahar(capsys, kubeconfig, "jobtemplate", "list")
    assert code == 0
    assert out.splitlines()[0].split() == ["Name", "Namespace"]
    assert [line.split() for line in out.splitlines()[1:]] == [["prepare", "default"], ["train", "default"]]
    code, out = lahar(capsys, kubeconfig, "jobtemplate", "get", "-N", "train")
    assert code == 0 and out.splitlines()[1].split() == ["train", "default"]

    flows = tmp_path / "flow.yaml"
    flows.write_text(
        yaml.safe_dump(flow("pipeline", {"name": "prepare"}, {"name": "train", "dependsOn": {"targets": ["prepare"]}}))
    )
    assert lahar(capsys, kubeconfig, "jobflow", "create", "-f", str(flows)) == (
        0,
        "Created JobFlow: default/pipeline\n",
    )
    code, out = lahar(capsys, kubeconfig, "jobflow", "list")
    header, row = out.splitlines()
    assert code == 0 and header.split() == ["Name", "Namespace", "Phase", "Age"]
    assert row.split()[:2] == ["pipeline", "default"] and row.split()[-1].endswith("s")
    code, out = lahar(capsys, kubeconfig, "jobflow", "list", "--all-namespaces")
    assert code == 0 and "pipeline" in out

    code, out = lahar(capsys, kubeconfig, "jobflow", "describe", "-N", "pipeline", "-o", "json")
    described = json.loads(out)
    assert code == 0 and described["kind"] == "JobFlow" and described["apiVersion"] == "flow.volcano.sh/v1alpha1"
    assert [f["name"] for f in described["spec"]["flows"]] == ["prepare", "train"]
    assert "managedFields" not in described["metadata"]
    code, out = lahar(capsys, kubeconfig, "jobtemplate", "describe")  # every one of the namespace, YAML
    assert code == 0 and [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == ["prepare", "train"]

    assert lahar(capsys, kubeconfig, "jobflow", "delete", "-f", str(flows)) == (
        0,
        "Deleted JobFlow: default/pipeline\n",
    )
    assert lahar(capsys, kubeconfig, "jobtemplate", "delete", "-N", "train") == (
        0,
        "Deleted JobTemplate: default/train\n",
    )
    code, out = lahar(capsys, kubeconfig, "jobflow", "list")
    assert (code, out) == (0, "No resources found\n")


def test_refusals_say_why_and_store_nothing(
    kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cyclic = tmp_path / "cycle.yaml"
    cyclic.write_text(
        yaml.safe_dump(
            flow(
                "loop",
                {"name": "a", "dependsOn": {"targets": ["b"]}},
                {"name": "b", "dependsOn": {"targets": ["a"]}},
            )
        )
    )
    code, out = lahar(capsys, kubeconfig, "jobflow", "create", "-f", str(cyclic))
    assert code == 1 and "spec.flows: dependency cycle: a -> b -> a" in out
    wrong_kind = tmp_path / "template.yaml"
    wrong_kind.write_text(yaml.safe_dump(TEMPLATE))
    code, out = lahar(capsys, kubeconfig, "jobflow", "create", "-f", str(wrong_kind))
    assert code == 1 and "expected a JobFlow, not a JobTemplate" in out
    assert lahar(capsys, kubeconfig, "jobflow", "list") == (0, "No resources found\n")

    code, out = lahar(capsys, kubeconfig, "jobflow", "get")
    assert code == 1 and "name is mandatory to get the particular jobflow details" in out
    code, out = lahar(capsys, kubeconfig, "jobtemplate", "delete")
    assert code == 1 and "job template name must be specified" in out
    code, out = lahar(capsys, kubeconfig, "jobflow", "get", "-N", "missing")
    assert code == 1 and 'jobflows.flow.volcano.sh "missing" not found' in out
    code, out = lahar(capsys, kubeconfig, "jobflow", "delete", "-N", "missing")
    assert code == 1 and 'Failed to delete JobFlow: jobflows.flow.volcano.sh "missing" not found' in out
    code, out = lahar(capsys, kubeconfig, "jobflow", "describe", "-o", "toml")
    assert code == 1 and "unsupported format: toml" in out
