"""DaemonSet (controller/workloads/daemonset.py): one pod per eligible node (nodeSelector, taints
and the daemon tolerations), pinned by matchFields node affinity for the scheduler; pods on nodes
no longer eligible or gone, and extra pods on a node, deleted; admission refuses replicas."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.api import admission, kinds
from lahar.api.errors import ValidationError
from lahar.controller.workloads import daemonset


def make_set(**template_spec: Any) -> dict[str, Any]:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "sys", "uid": "d-uid", "generation": 1},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "agent"}], **template_spec},
            },
        },
    }
    return admission.apply_defaults(kinds.DAEMON_SET, obj)


def node(name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def pod(name: str, node_name: str, owner: str = "d-uid", created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": name,
            "creationTimestamp": created,
            "ownerReferences": [{"uid": owner, "controller": True}],
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_one_pod_per_node_and_none_where_one_runs() -> None:
    nodes = [node("a"), node("b"), node("c")]
    decided = daemonset.plan(make_set(), nodes, [pod("p", "b")])
    assert decided.create == ["a", "c"] and decided.delete == []
    assert decided.status["desiredNumberScheduled"] == 3 and decided.status["numberReady"] == 1


def test_node_selector_and_untolerated_taints_exclude_nodes() -> None:
    nodes = [
        node("gpu", {"kind": "gpu"}),
        node("cpu", {"kind": "cpu"}),
        node("tainted", {"kind": "gpu"}, [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        node("cordoned", {"kind": "gpu"}, [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
        node("soft", {"kind": "gpu"}, [{"key": "dedicated", "effect": "PreferNoSchedule"}]),
    ]
    decided = daemonset.plan(make_set(nodeSelector={"kind": "gpu"}), nodes, [])
    assert decided.create == ["cordoned", "gpu", "soft"], "daemon pods tolerate cordoning, as in Kubernetes"
    tolerant = make_set(tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert "tainted" in daemonset.plan(tolerant, nodes, []).create


def test_misscheduled_extra_and_orphaned_pods_go() -> None:
    pods = [
        pod("old", "a", created="2026-01-01T00:00:00Z"),
        pod("new", "a", created="2026-01-02T00:00:00Z"),
        pod("gone", "z"),
        pod("stranger", "b", owner="other"),
    ]
    decided = daemonset.plan(make_set(), [node("a"), node("b")], pods)
    assert sorted(p["metadata"]["name"] for p in decided.delete) == ["gone", "new"]
    assert decided.create == ["b"] and decided.status["numberMisscheduled"] == 1


def test_a_daemon_pod_is_pinned_by_affinity_and_tolerates_node_conditions() -> None:
    made = daemonset.daemon_pod(make_set(), "b")
    assert "nodeName" not in made["spec"], "the scheduler binds it"
    terms = made["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}
    ]
    assert daemonset.target_node(made) == "b"
    keys = {t["key"] for t in made["spec"]["tolerations"]}
    assert {"node.kubernetes.io/not-ready", "node.kubernetes.io/unschedulable"} <= keys


def test_admission_refuses_replicas_and_a_bad_selector() -> None:
    admission.validate(kinds.DAEMON_SET, make_set())
    with_replicas = make_set()
    with_replicas["spec"]["replicas"] = 2
    with pytest.raises(ValidationError, match="replicas"):
        admission.validate(kinds.DAEMON_SET, with_replicas)
    mismatched = make_set()
    mismatched["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(ValidationError, match="selector"):
        admission.validate(kinds.DAEMON_SET, mismatched)
