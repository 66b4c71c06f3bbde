"""The real control plane fixture itself: it answers as kube-apiserver with RBAC and
ServiceAccount tokens, and leaves nothing behind (no etcd or kube-* process, no state folder),
also when its start-up fails half-way."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.client.errors import Forbidden, NotFound
from tests.kube.control_plane import ControlPlane, ControlPlaneError
from tests.real_backend import service_account_kubeconfig
from tests.support import wait_for

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")


def processes_of(workdir: Path) -> list[str]:
    """The running control plane processes of the plane in `workdir` (each names a path in it)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] in BINARIES and any(str(workdir) in arg for arg in cmdline):
            found.append(f"{proc.pid} {' '.join(cmdline)}")
    return found


def service_account_exists(api: KubeApi, namespace: str) -> bool:
    try:
        api.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
    except NotFound:
        return False
    return True


def test_the_session_cluster_enforces_rbac_for_service_accounts(real_cluster: ControlPlane, tmp_path: Path) -> None:
    admin_kubeconfig = Path(real_cluster.admin_kubeconfig)
    admin = KubeApi(new_api_client(str(admin_kubeconfig)))
    version = admin.request("GET", "/version")
    assert version["gitVersion"].startswith("v1.37.")
    # The controller manager makes the namespace's ServiceAccount; TokenRequest signs its token.
    namespace = "control-plane-test"
    admin.create(kinds.NAMESPACE, {"metadata": {"name": namespace}})
    wait_for(lambda: service_account_exists(admin, namespace), 30, "the namespace's default ServiceAccount")
    kubeconfig = service_account_kubeconfig(admin, admin_kubeconfig, "default", tmp_path / "sa", namespace)
    nobody = KubeApi(new_api_client(str(kubeconfig)))
    with pytest.raises(Forbidden):
        nobody.list(kinds.NODE)


def test_nothing_is_left_running_after_the_context_exits(k8s_binaries: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "plane"
    with ControlPlane(workdir, bin_dir=k8s_binaries) as plane:
        assert Path(plane.admin_kubeconfig).exists()
        assert len(processes_of(workdir)) == len(BINARIES)
    assert processes_of(workdir) == []
    assert sorted(p.name for p in workdir.iterdir()) == ["logs"]


def test_a_failed_start_leaves_nothing_either(k8s_binaries: Path, tmp_path: Path) -> None:
    # etcd starts; kube-apiserver is missing from this bin folder: the start fails half-way.
    partial = tmp_path / "bin"
    partial.mkdir()
    (partial / "etcd").symlink_to(k8s_binaries / "etcd")
    workdir = tmp_path / "plane"
    with pytest.raises(ControlPlaneError, match="kube-apiserver"), ControlPlane(workdir, bin_dir=partial):
        pass
    assert processes_of(workdir) == []
    assert sorted(p.name for p in workdir.iterdir()) == ["logs"]
