"""Lahar's API on the real control plane (tests/kube): deploy/'s namespace, CRDs, admission
policies, default queue and RBAC applied with kubectl as a user would, once per session. The
fixtures here are imported by the conftest of each directory whose e2e tests need them."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.client.errors import Invalid, KubeError

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
# What the e2e tests install: everything but the ServiceMonitors (no Prometheus Operator there).
INSTALLED = ("namespace.yaml", "crds", "admission", "default-queue.yaml", "scheduler", "controller", "daemonset")
POLICIES_ACTIVE_TIMEOUT = 60.0


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is needed to install deploy/ on the real control plane")
    done = subprocess.run(
        [binary, f"--kubeconfig={kubeconfig}", *args], input=stdin, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def admin_kubeconfig_of(cluster: Any) -> Path:
    """The admin kubeconfig of tests/kube's control plane."""
    return Path(cluster.admin_kubeconfig)


def service_account_kubeconfig(
    admin: KubeApi, admin_kubeconfig: Path, name: str, path: Path, namespace: str = "lahar-system"
) -> Path:
    """A kubeconfig with a TokenRequest token of ServiceAccount namespace/name, against the admin
    kubeconfig's cluster: the component then has exactly the rights deploy/'s RBAC gives it."""
    token = admin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]
    config = yaml.safe_load(admin_kubeconfig.read_text())
    context_name = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])
    cluster_entry = dict(cluster["cluster"])
    authority = cluster_entry.get("certificate-authority")
    if authority and not Path(authority).is_absolute():  # relative to the admin kubeconfig's folder
        cluster_entry["certificate-authority"] = str(admin_kubeconfig.parent / authority)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "real", "cluster": cluster_entry}],
                "users": [{"name": name, "user": {"token": token}}],
                "contexts": [{"name": name, "context": {"cluster": "real", "user": name}}],
                "current-context": name,
            }
        )
    )
    return path


def install_lahar(kubeconfig: Path) -> None:
    """deploy/ as a user applies it, in the order docs/install.md gives: CRDs first."""
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(DEPLOY / "namespace.yaml"))
    kubectl(kubeconfig, "apply", "--server-side", "-k", str(DEPLOY / "crds"))
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    for part in INSTALLED[2:]:
        target = DEPLOY / part
        kubectl(kubeconfig, "apply", "--server-side", "-k" if target.is_dir() else "-f", str(target))


def wait_for_policies(api: KubeApi) -> None:
    """Admission policies act a moment after they are created (kube-apiserver's informers), and a
    new custom kind is served to admission a moment after its CRD is Established (until then a
    create answers 503). Wait until a bad object of each kind is refused by its policy."""
    from tests.admission.cases import CASES

    probes = {case.resource: case for case in reversed(CASES) if case.enforced_by == "policy" and case.before is None}
    deadline = time.monotonic() + POLICIES_ACTIVE_TIMEOUT
    for (group, version, plural), case in probes.items():
        namespace = "namespaces/default/" if case.namespaced else ""
        body = {**case.obj, "metadata": {**case.obj["metadata"], "name": "policy-probe"}}
        while True:
            try:
                api.request(
                    "POST", f"/apis/{group}/{version}/{namespace}{plural}", query=[("dryRun", "All")], body=body
                )
            except Invalid:
                break
            except KubeError:  # 503 while the kind is not served yet
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the admission policies for {plural} did not act within {POLICIES_ACTIVE_TIMEOUT}s")
            time.sleep(0.5)


@pytest.fixture(scope="session")
def lahar_admin_kubeconfig(request: pytest.FixtureRequest) -> Path:
    """The real control plane's admin kubeconfig, with deploy/ installed and its policies acting."""
    try:
        cluster = request.getfixturevalue("real_cluster")  # tests/kube's control plane
    except pytest.FixtureLookupError:
        # Not a failed build: the control plane fixture is not in this tree (yet); it decides skip or fail.
        pytest.skip("no real_cluster fixture: the real control plane (tests/kube/control_plane.py) is not in this tree")
    kubeconfig = admin_kubeconfig_of(cluster)
    install_lahar(kubeconfig)
    wait_for_policies(KubeApi(new_api_client(str(kubeconfig))))
    return kubeconfig


@pytest.fixture
def lahar_installed_cluster(lahar_admin_kubeconfig: Path) -> Iterator[KubeApi]:
    """An admin KubeApi on the real control plane with deploy/ installed."""
    api_client = new_api_client(str(lahar_admin_kubeconfig))
    try:
        yield KubeApi(api_client)
    finally:
        api_client.close()


# --- the e2e scenarios' two backends --------------------------------------------------------------

SERVICE_ACCOUNTS = {"scheduler": "lahar-scheduler", "controller": "lahar-controller", "agent": "lahar-agent"}
# The embedded variant gets its lane from tests/conftest.py's rules (api_backend counts as a process
# fixture); the real one is always e2e.
BACKENDS = ["embedded", pytest.param("real", marks=pytest.mark.e2e)]


@dataclass
class ApiBackend:
    """One of the two API servers an e2e scenario runs on. `admin` sets up what a cluster's
    users and nodes would; each Lahar component gets its own kubeconfig: on the real control
    plane the token of its own ServiceAccount, so a rule missing from deploy/'s RBAC fails the
    scenario. On the embedded server every kubeconfig is the same (it has no authorization)."""

    name: str
    kubeconfigs: dict[str, Path]  # "admin" and each of SERVICE_ACCOUNTS' components
    _clients: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.admin = self.api_for("admin")

    def api_for(self, component: str) -> KubeApi:
        api_client = new_api_client(str(self.kubeconfigs[component]))
        self._clients.append(api_client)
        return KubeApi(api_client)

    def close(self) -> None:
        for api_client in self._clients:
            api_client.close()


@pytest.fixture(scope="module", params=BACKENDS)
def api_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiBackend]:
    """The module's scenarios on the embedded server, then on the real control plane."""
    folder = tmp_path_factory.mktemp(f"backend-{request.param}")
    if request.param == "embedded":
        kubeconfig = request.getfixturevalue("module_apiserver").kubeconfig(folder / "kubeconfig")
        backend = ApiBackend(request.param, dict.fromkeys(["admin", *SERVICE_ACCOUNTS], kubeconfig))
    else:
        kubeconfig = request.getfixturevalue("lahar_admin_kubeconfig")
        backend = ApiBackend(request.param, {"admin": kubeconfig})
        for component, account in SERVICE_ACCOUNTS.items():
            path = folder / f"{component}.kubeconfig"
            backend.kubeconfigs[component] = service_account_kubeconfig(backend.admin, kubeconfig, account, path)
    try:
        yield backend
    finally:
        backend.close()
