"""deploy/: every manifest is a valid Kubernetes object (kubernetes-validate, strict), the CRDs'
OpenAPI schemas are structural and agree with the code (lahar/api, lahar/controller), accept the
examples and the objects Lahar itself writes and refuse invalid ones, the manifests refer to each
other consistently, and the kustomization reaches every file.

"Refused" means what a cluster does with `kubectl apply` (strict field validation, kubectl's
default): a value the schema does not allow, and a field it does not know. A schema node with
x-kubernetes-preserve-unknown-fields keeps unknown fields."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, latest_version

from lahar.api import job as job_api
from lahar.api import kinds, printing
from lahar.api import podgroup as podgroup_api
from lahar.api import queue as queue_api
from lahar.api.job import Job
from lahar.controller.desired import desired_podgroup
from lahar.controller.lifecycle import next_state
from lahar.controller.queues import queue_status
from tests.api.test_job import mpi_job
from tests.api.test_podgroup import spark_podgroup
from tests.api.test_queue import research_queue

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NAMESPACE = "lahar-system"
IMAGE_NAME = "lahar"
# The oldest Kubernetes the manifests support (Pod Security labels, CRD v1, critical priority
# classes outside kube-system) and the newest kubernetes-validate knows.
K8S_VERSIONS = ("1.25", latest_version())
# Kinds that are not Kubernetes built-ins: Lahar's own (checked against deploy/crds) and the
# Prometheus Operator's ServiceMonitor (checked against the subset of its schema used here).
LAHAR_KINDS = {
    (k.api_version, k.kind): k
    for k in (kinds.JOB, kinds.PODGROUP, kinds.QUEUE, kinds.HYPERNODE, kinds.NODESHARD, kinds.CLUSTER)
}
SERVICE_MONITOR = ("monitoring.coreos.com/v1", "ServiceMonitor")
PROMETHEUS_RULE = ("monitoring.coreos.com/v1", "PrometheusRule")  # promtool checks its rules
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "Queue",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
}
# The release each admission policy kind went GA in (deploy/admission): older releases do not have it.
SINCE_VERSION = {
    "ValidatingAdmissionPolicy": "1.30",
    "ValidatingAdmissionPolicyBinding": "1.30",
    "MutatingAdmissionPolicy": "1.36",
    "MutatingAdmissionPolicyBinding": "1.36",
}


# --- reading deploy/ ---------------------------------------------------------------------------


def load_objects(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kustomization_tree(directory: Path) -> tuple[list[Path], list[Path]]:
    """(resource files, kustomization files) reached from directory/kustomization.yaml, in order.
    A resource is a file or a directory holding its own kustomization.yaml."""
    kustomization = directory / "kustomization.yaml"
    assert kustomization.is_file(), f"{directory} has no kustomization.yaml"
    spec = yaml.safe_load(kustomization.read_text())
    unsupported = set(spec) - {"apiVersion", "kind", "resources", "images"}
    assert not unsupported, f"{kustomization}: these tests do not model {sorted(unsupported)}"
    files: list[Path] = []
    kustomizations = [kustomization]
    for entry in spec.get("resources") or []:
        target = (directory / entry).resolve()
        assert target.exists(), f"{kustomization} lists {entry}, which does not exist"
        if target.is_dir():
            more_files, more_kustomizations = kustomization_tree(target)
            files += more_files
            kustomizations += more_kustomizations
        else:
            files.append(target)
    return files, kustomizations


RESOURCE_FILES, KUSTOMIZATIONS = kustomization_tree(DEPLOY)
OBJECTS: list[tuple[Path, Obj]] = [(path, obj) for path in RESOURCE_FILES for obj in load_objects(path)]


def object_id(entry: tuple[Path, Obj]) -> str:
    path, obj = entry
    return f"{path.relative_to(DEPLOY)}:{obj['kind']}/{obj['metadata']['name']}"


def objects_of_kind(kind: str) -> list[Obj]:
    return [obj for _, obj in OBJECTS if obj["kind"] == kind]


def the_object(kind: str, name: str) -> Obj:
    found = [obj for obj in objects_of_kind(kind) if obj["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def crd_for(kind: kinds.Kind) -> Obj:
    return the_object("CustomResourceDefinition", f"{kind.plural}.{kind.group}")


def served_version(crd: Obj) -> Obj:
    (version,) = crd["spec"]["versions"]
    return version


def crd_schema(kind: kinds.Kind) -> Obj:
    return served_version(crd_for(kind))["schema"]["openAPIV3Schema"]


WORKLOADS = [obj for _, obj in OBJECTS if obj["kind"] in ("Deployment", "DaemonSet")]


def containers() -> Iterator[tuple[Obj, Obj]]:
    for workload in WORKLOADS:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            yield workload, container


# --- OpenAPI v3 (Kubernetes flavour) -> JSON Schema ---------------------------------------------


def json_schema(node: Obj, strict: bool = True, root: bool = False) -> Obj:
    """A JSON Schema that accepts what the API server accepts under strict field validation:
    objects with `properties` refuse unknown fields unless they preserve them. The root's
    `metadata` is the API server's business (a CRD may only add name rules there)."""
    result: Obj = {}
    for key, value in node.items():
        if key == "properties":
            result[key] = {
                name: json_schema(child, strict=not (root and name == "metadata")) for name, child in value.items()
            }
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            result[key] = json_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            result[key] = [json_schema(child) for child in value]
        elif key == "not":
            result[key] = json_schema(value)
        elif key.startswith("x-kubernetes-") or key in ("nullable", "default", "description"):
            continue
        else:
            result[key] = value
    if node.get("nullable") and "type" in result:
        result["type"] = [result["type"], "null"]
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in result:
        result["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        strict
        and node.get("type") == "object"
        and "properties" in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
        and "additionalProperties" not in node
    ):
        result["additionalProperties"] = False
    return result


def validator_for(kind: kinds.Kind) -> jsonschema.Validator:
    converted = json_schema(crd_schema(kind), root=True)
    jsonschema.Draft202012Validator.check_schema(converted)
    return jsonschema.Draft202012Validator(converted, format_checker=jsonschema.FormatChecker())


def schema_errors(obj: Obj) -> list[str]:
    kind = LAHAR_KINDS[(obj["apiVersion"], obj["kind"])]
    return [
        f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in validator_for(kind).iter_errors(obj)
    ]


def schema_nodes(node: Obj, path: str = "") -> Iterator[tuple[str, Obj]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from schema_nodes(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from schema_nodes(node[key], f"{path}.{key}")
    for key in ("anyOf", "allOf", "oneOf"):
        for index, child in enumerate(node.get(key) or ()):
            yield from schema_nodes(child, f"{path}.{key}[{index}]")


def schema_at(schema: Obj, path: str) -> Obj:
    """The node for a dotted path of property names; `[]` steps into array items."""
    node = schema
    for part in path.strip(".").split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


# --- the kustomization ----------------------------------------------------------------------------


# Applied on its own (`kubectl apply -k deploy/grafana`: the dashboard as a ConfigMap for Grafana's
# sidecar), since how dashboards reach Grafana differs between installations; checked in
# tests/observability/test_grafana_dashboard.py.
# deploy/helm/lahar renders these same files (its crds/ and files/ link here; tests/helm).
SEPARATE_KUSTOMIZATIONS = (DEPLOY / "grafana", DEPLOY / "helm")


def test_the_kustomization_reaches_every_file_in_deploy_once() -> None:
    on_disk = {
        path.resolve()
        for path in DEPLOY.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and not any(separate in path.parents for separate in SEPARATE_KUSTOMIZATIONS)
    }
    reached = RESOURCE_FILES + KUSTOMIZATIONS
    assert len(reached) == len(set(reached)), "a file is listed twice"
    orphans = sorted(str(path.relative_to(DEPLOY)) for path in on_disk - set(reached))
    assert orphans == [], f"files in deploy/ no kustomization lists: {orphans}"


def test_objects_are_unique_and_namespaced_objects_live_in_lahar_system() -> None:
    keys = [
        (obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        for _, obj in OBJECTS
    ]
    assert len(keys) == len(set(keys))
    for _, obj in OBJECTS:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, f"{obj['kind']} {obj['metadata']['name']} is cluster-scoped"
        else:
            assert namespace == NAMESPACE, f"{obj['kind']} {obj['metadata']['name']} is in {namespace}"
    labels = the_object("Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged", "the agent is privileged"


def kustomize_version() -> int | None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    result = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True, timeout=30, check=False)
    found = re.search(r"Kustomize Version: v(\d+)", result.stdout)
    return int(found.group(1)) if found else None


def test_kubectl_kustomize_renders_exactly_the_files() -> None:
    version = kustomize_version()
    if version is None or version < 4:
        pytest.skip("needs kubectl with kustomize v4 or later (kubectl >= 1.21)")
    result = subprocess.run(
        [str(shutil.which("kubectl")), "kustomize", str(DEPLOY)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]

    def key(obj: Obj) -> tuple[str, str, str, str]:
        return obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]

    assert sorted(rendered, key=key) == sorted((obj for _, obj in OBJECTS), key=key)


def test_images_are_lahar_at_the_package_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    (image,) = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["images"]
    assert image == {"name": IMAGE_NAME, "newName": IMAGE_NAME, "newTag": version}
    for _, container in containers():
        assert container["image"] == f"{IMAGE_NAME}:{version}"


# --- Kubernetes schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("entry", OBJECTS, ids=object_id)
def test_every_manifest_is_a_valid_kubernetes_object(entry: tuple[Path, Obj], version: str) -> None:
    _, obj = entry
    key = (obj["apiVersion"], obj["kind"])
    if key in LAHAR_KINDS:
        assert schema_errors(obj) == []
        return
    if key == SERVICE_MONITOR:
        return  # test_service_monitors_select_the_metrics_ports
    if key == PROMETHEUS_RULE:
        jsonschema.validate(obj, PROMETHEUS_RULE_SCHEMA)  # and tests/observability/test_prometheus_rules.py
        return
    since = SINCE_VERSION.get(obj["kind"])
    if since and tuple(map(int, version.split(".")[:2])) < tuple(map(int, since.split("."))):
        pytest.skip(f"{obj['kind']} is GA since Kubernetes {since}")
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except SchemaNotFoundError:
        pytest.fail(f"{key} is not a Kubernetes {version} kind")
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{'.'.join(map(str, error.path))}: {error.message}")


# The fields of monitoring.coreos.com/v1 ServiceMonitor these manifests use, as the operator's CRD
# types them; anything else is refused so a typo cannot slip through.
# The operator's PrometheusRule as these manifests use it: groups of alerting or recording rules.
PROMETHEUS_RULE_SCHEMA: Obj = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {
            "type": "object",
            "required": ["groups"],
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "interval": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                    "additionalProperties": False,
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "record": {"type": "string"},
                                        "expr": {"type": "string"},
                                        "for": {"type": "string"},
                                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}
SERVICE_MONITOR_SCHEMA: Obj = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": r"^(0|(([0-9]+)(y|w|d|h|m|s|ms))+)$"},
                            "honorLabels": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    },
}


def test_service_monitors_select_the_metrics_ports() -> None:
    monitors = objects_of_kind("ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"lahar-agent", "lahar-scheduler", "lahar-controller"}
    for monitor in monitors:
        jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)
        spec = monitor["spec"]
        assert spec["namespaceSelector"]["matchNames"] == [NAMESPACE]
        selected = [
            service
            for service in objects_of_kind("Service")
            if spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        ]
        assert len(selected) == 1, f"{monitor['metadata']['name']} selects {len(selected)} Services"
        port_names = {port["name"] for port in selected[0]["spec"]["ports"]}
        assert {endpoint["port"] for endpoint in spec["endpoints"]} <= port_names
    agent = the_object("ServiceMonitor", "lahar-agent")
    assert agent["spec"]["endpoints"][0]["honorLabels"] is True  # pod series keep their namespace/pod


# --- references between manifests ----------------------------------------------------------------


def pod_spec(workload: Obj) -> Obj:
    return workload["spec"]["template"]["spec"]


def test_services_select_one_workload_and_name_its_ports() -> None:
    for service in objects_of_kind("Service"):
        selector = service["spec"]["selector"]
        selected = [w for w in WORKLOADS if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(selected) == 1, f"Service {service['metadata']['name']} selects {len(selected)} workloads"
        container_ports = {
            port["name"]: port["containerPort"]
            for container in pod_spec(selected[0])["containers"]
            for port in container["ports"]
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in container_ports, port
            assert port["port"] == container_ports[port["targetPort"]], "the Service keeps the container's number"


def test_workloads_use_existing_accounts_config_maps_and_their_own_labels() -> None:
    accounts = {obj["metadata"]["name"] for obj in objects_of_kind("ServiceAccount")}
    config_maps = {obj["metadata"]["name"] for obj in objects_of_kind("ConfigMap")}
    for workload in WORKLOADS:
        spec = pod_spec(workload)
        assert spec["serviceAccountName"] in accounts
        assert (
            workload["spec"]["selector"]["matchLabels"].items()
            <= workload["spec"]["template"]["metadata"]["labels"].items()
        )
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
        mounted = {mount["name"] for container in spec["containers"] for mount in container.get("volumeMounts", [])}
        assert mounted == {volume["name"] for volume in spec.get("volumes", [])}, "every volume mounted, and only those"


def test_role_bindings_bind_existing_roles_to_existing_accounts() -> None:
    roles = {obj["metadata"]["name"] for obj in objects_of_kind("ClusterRole")}
    accounts = {(obj["metadata"]["namespace"], obj["metadata"]["name"]) for obj in objects_of_kind("ServiceAccount")}
    bindings = objects_of_kind("ClusterRoleBinding")
    assert {b["roleRef"]["name"] for b in bindings} == roles
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "ClusterRole"
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts
    account_of_role = {b["roleRef"]["name"]: b["subjects"][0]["name"] for b in bindings}
    assert account_of_role == {name: name for name in roles}, "each program's role goes to its own account"


def rules_of(role: str) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in the_object("ClusterRole", role)["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_is_least_privilege() -> None:
    for role in objects_of_kind("ClusterRole"):
        for group, resource, verb in rules_of(role["metadata"]["name"]):
            assert "*" not in (group, resource, verb), f"{role['metadata']['name']}: no wildcards"
    assert rules_of("lahar-agent") == {
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods/eviction", "create"),
        ("", "nodes", "get"),
        ("", "nodes/status", "patch"),
        ("", "events", "create"),
        ("", "events", "patch"),  # a repeated event counts on the first, as kube's recorder does
    }
    scheduler = rules_of("lahar-scheduler")
    assert {
        ("", "pods/binding", "create"),
        ("", "pods/eviction", "create"),
        ("scheduling.volcano.sh", "podgroups/status", "patch"),
        ("scheduling.volcano.sh", "queues/status", "patch"),
        ("scheduling.k8s.io", "priorityclasses", "watch"),
    } <= scheduler
    assert {verb for _, resource, verb in scheduler if resource in ("podgroups", "queues", "nodes")} == {
        "list",
        "watch",
    }, "the scheduler writes only the status of PodGroups and Queues"
    assert {verb for _, resource, verb in scheduler if resource == "pods"} == {
        "get",
        "list",
        "watch",
        "patch",
        "delete",
    }, "it never creates pods (patch: GPU index, delete: gang rollback)"
    controller = rules_of("lahar-controller")
    assert {
        ("batch.volcano.sh", "jobs/status", "patch"),
        ("scheduling.volcano.sh", "podgroups", "create"),
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("scheduling.volcano.sh", "queues/status", "patch"),
        ("", "secrets", "create"),
        ("", "events", "create"),
    } <= controller
    for role in ("lahar-agent", "lahar-scheduler"):
        assert not {r for _, r, _ in rules_of(role)} & {"secrets", "configmaps"}, f"{role} reads its files from mounts"


def rules_of_role(name: str) -> set[tuple[str, str, str, str]]:
    """A namespaced Role's rules as (group, resource, verb, resourceName or "")."""
    (role,) = [r for r in objects_of_kind("Role") if r["metadata"]["name"] == name]
    return {
        (group, resource, verb, resource_name)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for resource_name in rule.get("resourceNames") or [""]
    }


def test_install_doc_creates_every_secret_the_manifests_mount() -> None:
    install = (REPO / "docs" / "install.md").read_text()
    for workload in WORKLOADS:
        for volume in pod_spec(workload).get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in install
                for item in volume["secret"].get("items", []):
                    assert item["key"] in install, f"{item['key']} of {volume['secret']['secretName']}"


# --- the containers and the lahar command line -----------------------------------------------------


def lahar_parser() -> Any:
    from lahar.cli.main import build_parser

    return build_parser()


def registered_commands() -> set[str]:
    parser = lahar_parser()
    (commands,) = [action for action in parser._actions if action.dest == "command"]
    return set(commands.choices)


def parsed_args(container: Obj) -> Any:
    args = container["args"]
    if args[0] not in registered_commands():
        pytest.skip(f"`lahar {args[0]}` is not written yet: its flags in deploy/ are checked once it exists")
    try:
        return lahar_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"`lahar {' '.join(args)}` is refused by the lahar command line")


CONTAINERS = [(w["metadata"]["name"], c["name"]) for w, c in containers()]


def the_container(workload: str, container: str) -> tuple[Obj, Obj]:
    return next((w, c) for w, c in containers() if w["metadata"]["name"] == workload and c["name"] == container)


@pytest.mark.parametrize(("workload", "container"), CONTAINERS)
def test_container_args_are_accepted_by_the_lahar_command(workload: str, container: str) -> None:
    _, spec = the_container(workload, container)
    assert "command" not in spec, "the image's entrypoint is `lahar`; containers pass args only"
    args = parsed_args(spec)
    ports = {port["name"]: port["containerPort"] for port in spec["ports"]}
    if hasattr(args, "metrics_port"):
        assert args.metrics_port == ports["metrics"]
    mounts = [mount["mountPath"] for mount in spec.get("volumeMounts", [])]
    for value in vars(args).values():  # every path a flag names is (in, or a folder of) a mount
        path = str(value)
        if isinstance(value, (str, Path)) and path.startswith("/") and path != "/":
            assert any(
                path == mount or path.startswith(mount + "/") or mount.startswith(path + "/") for mount in mounts
            ), f"{workload}: {path} is not in any of {mounts}"


def test_agent_ports_and_flags_follow_the_code() -> None:
    from lahar.agent.exporter import DEFAULT_METRICS_PORT

    _, agent = the_container("lahar-agent", "agent")
    args = parsed_args(agent)
    assert args.metrics_port == DEFAULT_METRICS_PORT
    assert args.node == "$(NODE_NAME)"
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in agent["env"]
    service = the_object("Service", "lahar-scheduler")
    reports = next(port for port in service["spec"]["ports"] if port["name"] == "reports")
    assert args.scheduler_address == f"lahar-scheduler.{NAMESPACE}.svc:{reports['port']}"
    assert str(args.root) == "/host"
    assert args.token_file is not None and args.ca_file is not None, "the report endpoint is off loopback: TLS + token"


def test_agent_daemonset_runs_on_every_node_with_the_access_it_needs() -> None:
    daemonset = the_object("DaemonSet", "lahar-agent")
    spec = pod_spec(daemonset)
    assert spec["hostPID"] is True and not spec.get("hostNetwork")
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["priorityClassName"] == "system-node-critical"
    (agent,) = spec["containers"]
    assert agent["securityContext"]["privileged"] is True
    assert agent["securityContext"]["readOnlyRootFilesystem"] is True
    for probe in ("readinessProbe", "livenessProbe"):
        assert agent[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert agent["resources"] == {
        "requests": {"cpu": "50m", "memory": "96Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi"},
    }
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert set(host_paths.values()) == {"/proc", "/sys", "/sys/fs/cgroup", "/usr", "/var/lib/kubelet"}
    writable = {
        host_paths[m["name"]] for m in agent["volumeMounts"] if m["name"] in host_paths and not m.get("readOnly")
    }
    assert writable == {"/sys/fs/cgroup"}, "only the cgroup tree is writable"
    for mount in agent["volumeMounts"]:
        if mount["name"] in host_paths:
            assert mount["mountPath"] == "/host" + host_paths[mount["name"]]


def test_scheduler_and_controller_run_unprivileged_one_at_a_time() -> None:
    for name in ("lahar-scheduler", "lahar-controller"):
        deployment = the_object("Deployment", name)
        # Two replicas, one acting at a time (leader election on a Lease the Role lets it renew).
        assert deployment["spec"]["replicas"] == 2
        assert "--leader-elect" in pod_spec(deployment)["containers"][0]["args"]
        assert rules_of_role(f"{name}-leader-election") == {
            ("coordination.k8s.io", "leases", "create", ""),
            ("coordination.k8s.io", "leases", "get", name),
            ("coordination.k8s.io", "leases", "update", name),
        }
        spec = pod_spec(deployment)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert not spec.get("hostPID") and not spec.get("hostNetwork")
        assert not any("hostPath" in volume for volume in spec.get("volumes", []))
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}


# --- the scheduler configuration ---------------------------------------------------------------------

SCHEDULER_CONF_ACTIONS = ["enqueue", "allocate", "backfill", "preempt", "reclaim"]


def scheduler_conf_text() -> str:
    return the_object("ConfigMap", "lahar-scheduler-config")["data"]["lahar-scheduler.conf"]


def test_scheduler_conf_is_volcano_format_with_the_default_actions_and_tiers() -> None:
    conf = yaml.safe_load(scheduler_conf_text())
    assert set(conf) == {"actions", "tiers"}
    assert [action.strip() for action in conf["actions"].split(",")] == SCHEDULER_CONF_ACTIONS
    # The deployed tiers are the scheduler's built-in default, so a cluster and `lahar up` agree.
    from lahar.scheduler.conf import default_conf

    assert [[plugin["name"] for plugin in tier["plugins"]] for tier in conf["tiers"]] == [
        [option.name for option in tier] for tier in default_conf().tiers
    ]
    _, scheduler = the_container("lahar-scheduler", "scheduler")
    mount = next(m for m in scheduler["volumeMounts"] if m["name"] == "config")
    assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates (hot reload)"
    assert f"--config={mount['mountPath']}/lahar-scheduler.conf" in scheduler["args"]


def test_scheduler_conf_parses_with_the_scheduler() -> None:
    from lahar.scheduler.conf import parse_conf

    conf = parse_conf(scheduler_conf_text(), "deploy/scheduler/configmap.yaml")
    assert list(conf.actions) == SCHEDULER_CONF_ACTIONS


def test_agent_qos_config_is_one_the_agent_loads_and_reloads() -> None:
    config = the_object("ConfigMap", "lahar-agent-config")
    _, agent = the_container("lahar-agent", "agent")
    mount = next(m for m in agent["volumeMounts"] if m["name"] == "config")
    assert "subPath" not in mount and mount["readOnly"] is True, "a subPath mount never sees ConfigMap updates"
    args = parsed_args(agent)
    assert str(args.qos_config) == f"{mount['mountPath']}/qos.yaml" and not args.no_qos and not args.dry_run
    qos_config = pytest.importorskip("lahar.agent.qos.config", reason="the QoS engine's configuration is not written")
    parsed = qos_config.QosConfig.from_mapping(yaml.safe_load(config["data"]["qos.yaml"]))
    # The CPU manager checkpoint it reads lies under a mount (the agent reads it under --root).
    checkpoint = "/host" + parsed.section("lc_cores").cpu_manager_state_file
    assert any(checkpoint.startswith(m["mountPath"] + "/") for m in agent["volumeMounts"]), checkpoint


# --- the CRDs: structure and agreement with the code --------------------------------------------------

CRD_KINDS = list(LAHAR_KINDS.values())


@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.kind)
def test_crd_names_scope_and_subresources_match_lahar_kinds(kind: kinds.Kind) -> None:
    crd = crd_for(kind)
    spec = crd["spec"]
    assert spec["group"] == kind.group
    assert spec["names"]["kind"] == kind.kind and spec["names"]["listKind"] == kind.kind + "List"
    assert spec["names"]["plural"] == kind.plural and spec["names"]["singular"] == kind.singular
    assert spec["names"]["shortNames"] == list(kind.short_names)
    assert spec["names"].get("categories", []) == list(kind.categories)
    assert spec["scope"] == ("Namespaced" if kind.namespaced else "Cluster")
    version = served_version(crd)
    assert version["name"] == kind.version and version["served"] and version["storage"]
    assert ("status" in version.get("subresources", {})) == kind.has_status


INT_OR_STRING_BRANCHES = [{"type": "integer"}, {"type": "string"}]


def structural_problems(node: Obj, path: str, in_junctor: bool = False) -> Iterator[str]:
    """Kubernetes' rules for a structural schema (apiextensions "Specifying a structural schema"):
    a type on every node (but int-or-string and preserve-unknown-fields ones), nothing but
    validations inside anyOf/allOf/oneOf/not (the int-or-string pattern excepted), properties and
    additionalProperties exclusive, items on arrays, defaults that validate."""
    int_or_string = node.get("x-kubernetes-int-or-string")
    if in_junctor:
        for key in ("description", "type", "default", "additionalProperties", "nullable"):
            if key in node:
                yield f"{path}: {key} inside anyOf/allOf/oneOf/not"
    elif not node.get("type") and not int_or_string and not node.get("x-kubernetes-preserve-unknown-fields"):
        yield f"{path}: no type"
    if int_or_string and (node.get("type") or node.get("anyOf", INT_OR_STRING_BRANCHES) != INT_OR_STRING_BRANCHES):
        yield f"{path}: x-kubernetes-int-or-string takes no type, and anyOf only as integer | string"
    if "properties" in node and "additionalProperties" in node:
        yield f"{path}: properties and additionalProperties are exclusive"
    if node.get("type") == "array" and "items" not in node:
        yield f"{path}: an array needs items"
    for name, child in (node.get("properties") or {}).items():
        yield from structural_problems(child, f"{path}.{name}", in_junctor)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from structural_problems(node[key], f"{path}.{key}", in_junctor)
    for key in ("anyOf", "allOf", "oneOf"):
        if int_or_string and key == "anyOf":
            continue  # the allowed pattern, checked above
        for child in node.get(key) or ():
            yield from structural_problems(child, f"{path}.{key}", True)
    if "default" in node:
        problems = list(jsonschema.Draft202012Validator(json_schema(node)).iter_errors(node["default"]))
        if problems:
            yield f"{path}: default {node['default']!r} does not validate: {problems[0].message}"


@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.kind)
def test_crd_schema_is_structural(kind: kinds.Kind) -> None:
    schema = crd_schema(kind)
    assert list(structural_problems(schema, "")) == []
    assert schema["type"] == "object"
    metadata = schema["properties"]["metadata"]
    assert set(metadata.get("properties", {})) <= {"name", "generateName"}, "only name rules may touch metadata"
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    for _, node in schema_nodes(schema):  # valid regular expressions (in the syntax RE2 and re share)
        if "pattern" in node:
            re.compile(node["pattern"])


@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.kind)
def test_crd_printer_columns_are_lahar_gets(kind: kinds.Kind) -> None:
    columns = served_version(crd_for(kind))["additionalPrinterColumns"]
    lahar_columns = [column for column in printing.columns(kind) if column[0] != "Name"]
    assert [(c["name"], c.get("priority", 0)) for c in columns] == [(name, prio) for name, _, prio, _ in lahar_columns]
    for column, (name, type_, _, cell) in zip(columns, lahar_columns, strict=True):
        if name == "Age":
            assert (column["type"], column["jsonPath"]) == ("date", ".metadata.creationTimestamp")
            continue
        assert column["type"] == type_
        sentinel = 7 if type_ == "integer" else "sentinel"
        obj: Obj = {}
        node = obj
        *parents, leaf = column["jsonPath"].strip(".").split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = sentinel
        assert cell(obj) == sentinel, f"{name}: lahar get reads another field than {column['jsonPath']}"


def enum_at(kind: kinds.Kind, path: str) -> list[str]:
    return schema_at(crd_schema(kind), path)["enum"]


def test_crd_enums_are_the_codes() -> None:
    from lahar.api.job import ACTIONS, EVENTS, TOPOLOGY_POLICIES, JobPhase
    from lahar.api.node import CONDITION_STATUSES
    from lahar.api.podgroup import PodGroupPhase
    from lahar.api.queue import QueueState

    for policies in ("spec.policies.[]", "spec.tasks.[].policies.[]"):
        assert set(enum_at(kinds.JOB, f"{policies}.event")) == set(EVENTS)
        assert set(enum_at(kinds.JOB, f"{policies}.events.[]")) == set(EVENTS)
        assert set(enum_at(kinds.JOB, f"{policies}.action")) == set(ACTIONS)
    assert enum_at(kinds.JOB, "spec.tasks.[].topologyPolicy") == list(TOPOLOGY_POLICIES)
    assert enum_at(kinds.JOB, "spec.tasks.[].dependsOn.iteration") == list(job_api.DEPENDS_ON_ITERATIONS)
    assert enum_at(kinds.JOB, "status.state.phase") == [phase.value for phase in JobPhase]
    assert set(schema_at(crd_schema(kinds.JOB), "spec.plugins")["properties"]) == set(job_api.KNOWN_PLUGINS)
    assert enum_at(kinds.PODGROUP, "status.phase") == [phase.value for phase in PodGroupPhase]
    assert enum_at(kinds.PODGROUP, "status.conditions.[].status") == list(CONDITION_STATUSES)
    assert enum_at(kinds.QUEUE, "status.state") == [state.value for state in QueueState]


def apply_schema_defaults(node: Obj, value: Any) -> Any:
    """What the API server's defaulting does: absent properties with a default get it, in objects
    that are present (recursively, through arrays and maps)."""
    if isinstance(value, dict):
        for name, child in (node.get("properties") or {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                apply_schema_defaults(child, value[name])
        if isinstance(node.get("additionalProperties"), dict):
            for key in set(value) - set(node.get("properties") or {}):
                apply_schema_defaults(node["additionalProperties"], value[key])
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            apply_schema_defaults(node["items"], item)
    return value


def defaulted_paths(node: Obj, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    for name, child in (node.get("properties") or {}).items():
        if "default" in child:
            yield (*path, name)
        yield from defaulted_paths(child, (*path, name))
    if isinstance(node.get("items"), dict):
        yield from defaulted_paths(node["items"], (*path, 0))


def value_at(obj: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        obj = obj[part]
    return obj


def minimal_job() -> Obj:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": {
            "tasks": [
                {
                    "name": "main",
                    "replicas": 2,
                    "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                }
            ]
        },
    }


@pytest.mark.parametrize(
    ("kind", "minimal", "lahar_defaults"),
    [
        (kinds.JOB, minimal_job, job_api.defaults),
        (
            kinds.PODGROUP,
            lambda: {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "default"},
                "spec": {},
            },
            podgroup_api.defaults,
        ),
        (
            kinds.QUEUE,
            lambda: {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": "q"},
                "spec": {},
            },
            queue_api.defaults,
        ),
    ],
    ids=["Job", "PodGroup", "Queue"],
)
def test_crd_defaults_are_lahars_defaults(
    kind: kinds.Kind, minimal: Callable[[], Obj], lahar_defaults: Callable[[Obj], Obj]
) -> None:
    """A cluster defaults through the CRD; the embedded API server through lahar/api. Wherever
    the CRD sets a default it must be the value Lahar's own defaults give."""
    schema = crd_schema(kind)
    by_schema = apply_schema_defaults(schema, minimal())
    by_lahar = lahar_defaults(minimal())
    paths = [p for p in defaulted_paths(schema) if p[0] == "spec"]
    assert paths, "the CRD sets defaults"
    for path in paths:
        assert value_at(by_schema, path) == value_at(by_lahar, path), path
    assert schema_errors(by_schema) == []


# --- the CRDs accept what Lahar and Volcano users write, and what Lahar writes --------------------------


def example_objects() -> list[tuple[str, Obj]]:
    found = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for obj in load_objects(path):
            if (obj.get("apiVersion"), obj.get("kind")) in LAHAR_KINDS:
                found.append((f"{path.name}:{obj['kind']}/{obj['metadata']['name']}", obj))
    return found


EXAMPLES = example_objects()


def test_there_are_examples_of_jobs_and_queues() -> None:
    assert {obj["kind"] for _, obj in EXAMPLES} >= {"Job", "Queue"}


@pytest.mark.parametrize("obj", [obj for _, obj in EXAMPLES], ids=[name for name, _ in EXAMPLES])
def test_crd_accepts_the_examples(obj: Obj) -> None:
    assert schema_errors(obj) == []


def volcano_job_with_fields_lahar_ignores() -> Obj:
    manifest = mpi_job()
    manifest["spec"]["volumes"] = [{"mountPath": "/data", "volumeClaimName": "shared"}]
    manifest["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 1}
    manifest["spec"]["runningEstimate"] = "2h"
    manifest["spec"]["schedulerName"] = "volcano"
    manifest["spec"]["tasks"][1].update(
        topologyPolicy="single-numa-node", maxRetry=1, dependsOn={"name": ["mpimaster"]}
    )
    manifest["spec"]["tasks"][0]["template"]["metadata"] = {"annotations": {"volcano.sh/qos-level": "BE"}}
    return manifest


def written_by_lahar() -> list[tuple[str, Obj]]:
    """What the controller writes (a Job's PodGroup, the Job's status after two steps, a Queue's
    status) and the PodGroup and Queue status the scheduler writes."""
    now = datetime(2025, 1, 1, tzinfo=UTC)
    job_obj = job_api.defaults(mpi_job())
    job_obj["metadata"]["uid"] = "3f1c-uid"
    group = desired_podgroup(Job.from_dict(job_obj))
    admitted = {**group, "status": {"phase": "Inqueue"}}
    first = next_state(job_obj, [], admitted, now)
    pods = [{**pod, "status": {"phase": "Running"}} for pod in first.pods_to_create]
    running = next_state({**job_obj, "status": first.status}, pods, admitted, now)
    queue = queue_api.defaults(research_queue())
    return [
        ("podgroup", group),
        (
            "podgroup with status",
            {
                **group,
                "status": {
                    "phase": "Pending",
                    "running": 0,
                    "conditions": [
                        {
                            "type": "Unschedulable",
                            "status": "True",
                            "reason": "NotEnoughResources",
                            "message": "2/3 tasks in gang unschedulable: 2 Insufficient cpu",
                            "lastTransitionTime": "2025-01-01T00:00:00Z",
                            "transitionID": "9e1d",
                        }
                    ],
                },
            },
        ),
        ("job status, pending", {**job_obj, "status": first.status}),
        ("job status, running", {**job_obj, "status": running.status}),
        ("queue status", {**queue, "status": {**queue_status(queue, [admitted]), "allocated": {"cpu": "3"}}}),
    ]


ACCEPTED: list[tuple[str, Obj]] = [
    ("mpi job", mpi_job()),
    ("mpi job, defaulted", job_api.defaults(mpi_job())),
    ("volcano job with fields lahar ignores", volcano_job_with_fields_lahar_ignores()),
    ("minimal job", minimal_job()),
    ("spark podgroup", spark_podgroup()),
    ("spark podgroup, defaulted", podgroup_api.defaults(spark_podgroup())),
    ("research queue", research_queue()),
    ("research queue, defaulted", queue_api.defaults(research_queue())),
]


def lahar_validate(obj: Obj) -> list[Any]:
    validate = {"Job": job_api.validate, "PodGroup": podgroup_api.validate, "Queue": queue_api.validate}[obj["kind"]]
    return validate(obj)


@pytest.mark.parametrize("obj", [obj for _, obj in ACCEPTED], ids=[name for name, _ in ACCEPTED])
def test_crd_accepts_the_fixtures(obj: Obj) -> None:
    assert schema_errors(obj) == []
    assert lahar_validate(obj) == [], "a fixture lahar/api accepts too"


def test_crd_accepts_what_lahar_writes() -> None:
    """A status the API server refused would fail the controller's or scheduler's every write; a
    field the schema lacked would be pruned from what they wrote."""
    for name, obj in written_by_lahar():
        assert schema_errors(obj) == [], name
        assert lahar_validate(obj) == [], name


# --- ... and refuse invalid objects ---------------------------------------------------------------------


def edited(factory: Callable[[], Obj], edit: Callable[[Obj], Any]) -> Callable[[], Obj]:
    def make() -> Obj:
        obj = factory()
        edit(obj)
        return obj

    return make


def task(obj: Obj, index: int = 0) -> Obj:
    return obj["spec"]["tasks"][index]


# (name, object, field the schema names, whether lahar/api refuses it too). The last is False only
# for unknown fields: the embedded API server ignores those, a cluster's strict validation does not.
REFUSED: list[tuple[str, Callable[[], Obj], str, bool]] = [
    (
        "job minAvailable as a string",
        edited(mpi_job, lambda o: o["spec"].update(minAvailable="3")),
        "spec.minAvailable",
        True,
    ),
    ("job without tasks", edited(mpi_job, lambda o: o["spec"].pop("tasks")), "spec", True),
    ("job with no tasks", edited(mpi_job, lambda o: o["spec"].update(tasks=[])), "spec.tasks", True),
    ("job without spec", edited(mpi_job, lambda o: o.pop("spec")), "<root>", True),
    ("job negative maxRetry", edited(mpi_job, lambda o: o["spec"].update(maxRetry=-1)), "spec.maxRetry", True),
    (
        "job negative ttl",
        edited(mpi_job, lambda o: o["spec"].update(ttlSecondsAfterFinished=-5)),
        "spec.ttlSecondsAfterFinished",
        True,
    ),
    ("job minSuccess 0", edited(mpi_job, lambda o: o["spec"].update(minSuccess=0)), "spec.minSuccess", True),
    ("task negative replicas", edited(mpi_job, lambda o: task(o).update(replicas=-1)), "spec.tasks.0.replicas", True),
    (
        "task replicas as a float",
        edited(mpi_job, lambda o: task(o).update(replicas=1.5)),
        "spec.tasks.0.replicas",
        True,
    ),
    (
        "task name not a DNS label",
        edited(mpi_job, lambda o: task(o).update(name="Master_1")),
        "spec.tasks.0.name",
        True,
    ),
    (
        "task without a template spec",
        edited(mpi_job, lambda o: task(o).update(template={})),
        "spec.tasks.0.template",
        True,
    ),
    (
        "task template without containers",
        edited(mpi_job, lambda o: task(o)["template"]["spec"].update(containers=[])),
        "spec.tasks.0.template.spec.containers",
        True,
    ),
    (
        "unknown topology policy",
        edited(mpi_job, lambda o: task(o).update(topologyPolicy="always")),
        "spec.tasks.0.topologyPolicy",
        True,
    ),
    (
        "unknown policy event",
        edited(mpi_job, lambda o: o["spec"]["policies"][0].update(event="PodExploded")),
        "spec.policies.0.event",
        True,
    ),
    (
        "unknown policy action",
        edited(mpi_job, lambda o: o["spec"]["policies"][0].update(action="Reboot")),
        "spec.policies.0.action",
        True,
    ),
    (
        "timeout not a duration",
        edited(
            mpi_job,
            lambda o: o["spec"]["policies"].append(
                {"event": "PodFailed", "action": "AbortJob", "timeout": "ten minutes"}
            ),
        ),
        "spec.policies.2.timeout",
        True,
    ),
    (
        "dependsOn naming nothing",
        edited(mpi_job, lambda o: task(o, 1).update(dependsOn={"name": []})),
        "spec.tasks.1.dependsOn.name",
        True,
    ),
    ("unknown job plugin", edited(mpi_job, lambda o: o["spec"]["plugins"].update(paddle=[])), "spec.plugins", True),
    ("queue not a name", edited(mpi_job, lambda o: o["spec"].update(queue="Research Queue")), "spec.queue", True),
    (
        "job name of 64 characters",
        edited(mpi_job, lambda o: o["metadata"].update(name="j" * 64)),
        "metadata.name",
        True,
    ),
    ("misspelt job field", edited(mpi_job, lambda o: o["spec"].update(minAvaliable=3)), "spec", False),
    (
        "podgroup minMember as a string",
        edited(spark_podgroup, lambda o: o["spec"].update(minMember="3")),
        "spec.minMember",
        True,
    ),
    (
        "podgroup negative minMember",
        edited(spark_podgroup, lambda o: o["spec"].update(minMember=-1)),
        "spec.minMember",
        True,
    ),
    (
        "podgroup bad quantity",
        edited(spark_podgroup, lambda o: o["spec"]["minResources"].update(cpu="lots")),
        "spec.minResources.cpu",
        True,
    ),
    (
        "podgroup negative task minimum",
        edited(spark_podgroup, lambda o: o["spec"]["minTaskMember"].update(driver=-1)),
        "spec.minTaskMember.driver",
        True,
    ),
    (
        "podgroup unknown phase",
        edited(spark_podgroup, lambda o: o.update(status={"phase": "Sleeping"})),
        "status.phase",
        True,
    ),
    (
        "podgroup condition status",
        edited(spark_podgroup, lambda o: o.update(status={"conditions": [{"type": "Scheduled", "status": "Yes"}]})),
        "status.conditions.0.status",
        True,
    ),
    ("queue negative weight", edited(research_queue, lambda o: o["spec"].update(weight=-1)), "spec.weight", True),
    ("queue weight 0", edited(research_queue, lambda o: o["spec"].update(weight=0)), "spec.weight", True),
    ("queue weight as a string", edited(research_queue, lambda o: o["spec"].update(weight="2")), "spec.weight", True),
    (
        "queue reclaimable as a string",
        edited(research_queue, lambda o: o["spec"].update(reclaimable="yes")),
        "spec.reclaimable",
        True,
    ),
    (
        "queue bad capability",
        edited(research_queue, lambda o: o["spec"]["capability"].update(memory="32 GB")),
        "spec.capability.memory",
        True,
    ),
    (
        "queue guarantee without resource",
        edited(research_queue, lambda o: o["spec"].update(guarantee={"cpu": "8"})),
        "spec.guarantee",
        True,
    ),
    (
        "queue unknown state",
        edited(research_queue, lambda o: o.update(status={"state": "Paused"})),
        "status.state",
        True,
    ),
]


@pytest.mark.parametrize(
    ("make", "field", "lahar_refuses"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
def test_crd_refuses_invalid_objects(make: Callable[[], Obj], field: str, lahar_refuses: bool) -> None:
    obj = make()
    errors = schema_errors(obj)
    assert errors, "the schema accepts it"
    assert any(error.split(":")[0] == field for error in errors), errors
    assert bool(lahar_validate(obj)) == lahar_refuses


def test_timeout_pattern_accepts_what_lahar_parses() -> None:
    pattern = re.compile(schema_at(crd_schema(kinds.JOB), "spec.policies.[].timeout")["pattern"])
    for text in ("0", "30s", "10m", "1h30m", "1.5h", "250ms", "2h45m30.5s", ".5s"):
        assert pattern.search(text), text
        assert job_api.parse_duration(text) >= 0
    for text in ("", "10", "ten minutes", "-2m", "1d", "h"):
        assert not pattern.search(text), text


# --- the image ------------------------------------------------------------------------------------------


def test_dockerfile_installs_the_package_from_what_it_copies() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    assert re.search(r'^ENTRYPOINT \["lahar"\]$', dockerfile, re.M)
    assert re.search(r"^RUN pip install \. ", dockerfile, re.M)
    copied = {
        source.rstrip("/") for line in re.findall(r"^COPY (.+)$", dockerfile, re.M) for source in line.split()[:-1]
    }
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for source in copied:
        assert (REPO / source).exists(), source
        assert source not in ignored, f"{source} is copied but .dockerignore drops it"
    # setup.py's packages are lahar/ plus the three program folders: all of them copied.
    assert {"lahar", "agent", "scheduler", "controller"} <= copied
    assert {"pyproject.toml", "setup.py", "README.md"} <= copied
    assert {".venv", ".git", "tests"} <= ignored
