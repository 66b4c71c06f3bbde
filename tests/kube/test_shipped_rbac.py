"""deploy/'s RBAC is what the e2e scenarios on the real control plane prove, because a rule the
code needs and the ClusterRole lacks makes the scheduler fail there: the same scheduler, under a
ServiceAccount bound to deploy/'s scheduler ClusterRole less its `pods/binding` rule, binds
nothing and counts the API's refusals; with the shipped role (the e2e scenarios) it binds."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import yaml

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.node.node_object import lift_not_ready_taint
from lahar.scheduler.scheduler import Scheduler
from tests.real_backend import DEPLOY, service_account_kubeconfig
from tests.scheduler.test_cache import node, pod
from tests.support import wait_for

Obj = dict[str, Any]


def shipped_scheduler_role() -> Obj:
    documents = yaml.safe_load_all((DEPLOY / "scheduler" / "rbac.yaml").read_text())
    return next(d for d in documents if d and d["kind"] == "ClusterRole")


def without_binding(role: Obj, name: str) -> Obj:
    stripped = copy.deepcopy(role)
    stripped["metadata"] = {"name": name}
    for rule in stripped["rules"]:
        rule["resources"] = [r for r in rule["resources"] if r != "pods/binding"]
    stripped["rules"] = [rule for rule in stripped["rules"] if rule["resources"]]
    return stripped


def test_a_rule_missing_from_the_scheduler_role_stops_its_binds(
    lahar_admin_kubeconfig: Path, lahar_installed_cluster: KubeApi, tmp_path: Path
) -> None:
    admin = lahar_installed_cluster
    suffix = uuid.uuid4().hex[:6]
    namespace, account = f"rbac-{suffix}", "scheduler"
    admin.create(kinds.NAMESPACE, {"metadata": {"name": namespace}})
    admin.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body={"metadata": {"name": account}})
    role = without_binding(shipped_scheduler_role(), f"lahar-scheduler-no-binding-{suffix}")
    admin.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", body=role)
    binding = {
        "metadata": {"name": role["metadata"]["name"]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    admin.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=binding)
    selector = {"pool": namespace}
    lift_not_ready_taint(admin, admin.create(kinds.NODE, node(f"{namespace}-node", labels=selector)))
    admin.create(kinds.POD, pod("lonely", selector=selector, namespace=namespace), namespace)
    kubeconfig = service_account_kubeconfig(admin, lahar_admin_kubeconfig, account, tmp_path / "kubeconfig", namespace)
    api_client = new_api_client(str(kubeconfig))
    scheduler = Scheduler(KubeApi(api_client), period=0.2, bind_workers=1)
    scheduler.start()
    try:
        wait_for(lambda: scheduler.metrics.bind_errors._value.get() >= 1, 30, "the refused bind to be counted")
        assert not admin.get(kinds.POD, "lonely", namespace)["spec"].get("nodeName")
    finally:
        scheduler.stop()
        api_client.close()
        for path in (
            f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role['metadata']['name']}",
            f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role['metadata']['name']}",
            f"/api/v1/nodes/{namespace}-node",
            f"/api/v1/namespaces/{namespace}",
        ):
            admin.request("DELETE", path)
