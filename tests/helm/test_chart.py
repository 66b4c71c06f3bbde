"""deploy/helm/lahar renders the same objects as deploy/'s kustomization; its values change what
they say they change and nothing else; the rendering applies to a real API server (e2e)."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "lahar"

Obj = dict[str, Any]
Key = tuple[str, str, str, str]


def key(obj: Obj) -> Key:
    return obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def kustomization_objects(directory: Path) -> dict[Key, Obj]:
    """What `kubectl kustomize deploy/` gives (its one transformer, images, is the identity for
    the default values: lahar -> lahar:0.1.0, as the manifests already say)."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    found: dict[Key, Obj] = {}
    for entry in spec.get("resources") or []:
        target = directory / entry
        if target.is_dir():
            found.update(kustomization_objects(target))
        else:
            found.update({key(obj): obj for obj in yaml.safe_load_all(target.read_text()) if obj})
    return found


def render(helm: Path, values: Obj | None = None) -> dict[Key, Obj]:
    args = [str(helm), "template", "lahar", str(CHART), "--include-crds", "--values", "-"]
    run = subprocess.run(
        args, input=yaml.safe_dump(values or {}), capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    objects = [obj for obj in yaml.safe_load_all(run.stdout) if obj]
    rendered = {key(obj): obj for obj in objects}
    assert len(rendered) == len(objects), "an object is rendered twice"
    return rendered


def pod_spec(objects: dict[Key, Obj], kind: str, name: str) -> Obj:
    return objects[("apps/v1", kind, "lahar-system", name)]["spec"]["template"]["spec"]


def test_default_values_render_exactly_deploy(helm: Path):
    assert render(helm) == kustomization_objects(DEPLOY)


def test_values_change_images_node_selectors_replicas_and_configs(helm: Path):
    scheduler_conf = 'actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n'
    qos = "cpu_suppress:\n  wait_threshold: 0.1\n"
    rendered = render(
        helm,
        {
            "image": {"repository": "registry.example/lahar", "tag": "9.9.9"},
            "scheduler": {"nodeSelector": {"pool": "control"}, "config": scheduler_conf},
            "agent": {"nodeSelector": {"lahar.dev/agent": "true"}, "qosConfig": qos},
            "controller": {"replicas": 3},
        },
    )
    expected = copy.deepcopy(kustomization_objects(DEPLOY))
    for kind, name in (
        ("Deployment", "lahar-scheduler"),
        ("Deployment", "lahar-controller"),
        ("DaemonSet", "lahar-agent"),
    ):
        for container in pod_spec(expected, kind, name)["containers"]:
            container["image"] = "registry.example/lahar:9.9.9"
    pod_spec(expected, "Deployment", "lahar-scheduler")["nodeSelector"] = {"pool": "control"}
    agent = pod_spec(expected, "DaemonSet", "lahar-agent")
    agent["nodeSelector"] = {**agent.get("nodeSelector", {}), "lahar.dev/agent": "true"}
    expected[("apps/v1", "Deployment", "lahar-system", "lahar-controller")]["spec"]["replicas"] = 3
    expected[("v1", "ConfigMap", "lahar-system", "lahar-scheduler-config")]["data"]["lahar-scheduler.conf"] = (
        scheduler_conf
    )
    expected[("v1", "ConfigMap", "lahar-system", "lahar-agent-config")]["data"]["qos.yaml"] = qos
    assert rendered == expected


def test_optional_parts_can_be_left_out(helm: Path):
    rendered = render(helm, {"admission": {"enabled": False}, "monitoring": {"enabled": False}})
    left_out = {k for k in kustomization_objects(DEPLOY) if k not in rendered}
    assert {kind for _, kind, _, _ in left_out} == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ServiceMonitor",
        "PrometheusRule",
    }
    assert set(rendered) < set(kustomization_objects(DEPLOY))


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("controller.replicas=many", "controller.replicas"),
        ("scheduler.replicas=0", "scheduler.replicas"),
        ("image.pullPolicy=Sometimes", "image.pullPolicy"),
        ("agent.nodeSelectr.pool=a", "nodeSelectr"),
    ],
)
def test_a_bad_value_is_refused_naming_it(helm: Path, setting: str, named: str):
    run = subprocess.run(
        [str(helm), "template", "lahar", str(CHART), "--set", setting],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode != 0
    assert named in run.stderr.replace("/", ".")


@pytest.mark.e2e
def test_the_rendering_applies_to_a_real_api_server(helm: Path, lahar_admin_kubeconfig: Path, tmp_path: Path):
    from tests.real_backend import kubectl

    values = tmp_path / "values.yaml"
    manifests = tmp_path / "lahar.yaml"
    for name, settings in (
        ("defaults", {"monitoring": {"enabled": False}}),  # no Prometheus Operator on the test cluster
        (
            "overrides",
            {
                "monitoring": {"enabled": False},
                "image": {"repository": "registry.example/lahar", "tag": "9.9.9"},
                "agent": {"nodeSelector": {"lahar.dev/agent": "true"}},
            },
        ),
    ):
        values.write_text(yaml.safe_dump(settings))
        run = subprocess.run(
            [str(helm), "template", "lahar", str(CHART), "--include-crds", "--values", str(values)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        manifests.write_text(run.stdout)
        # Defaults: applied for real (the same objects deploy/ already installed: nothing changes);
        # overrides: the API server validates and admits them, and the shared cluster stays as it is.
        dry_run = ["--dry-run=server"] if name == "overrides" else []
        applied = kubectl(lahar_admin_kubeconfig, "apply", "--server-side", *dry_run, "-f", str(manifests))
        assert "deployment.apps/lahar-scheduler serverside-applied" in applied, applied
    scheduler = yaml.safe_load(
        kubectl(lahar_admin_kubeconfig, "get", "deployment", "lahar-scheduler", "-n", "lahar-system", "-o", "yaml")
    )
    assert scheduler["spec"]["replicas"] == 2
    assert scheduler["spec"]["template"]["spec"]["containers"][0]["image"] == "lahar:0.1.0"
