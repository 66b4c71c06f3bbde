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


def pod(
    name: str,
    node_name: str,
    owner: str = "d-uid",
    created: str = "2026-01-01T00:00:00Z",
    revision: str | None = None,
    ready: bool = True,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": name,
            "creationTimestamp": created,
            "ownerReferences": [{"uid": owner, "controller": True}],
            "labels": {daemonset.REVISION_LABEL: revision or daemonset.revision(make_set())},
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
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


def updated_set(**strategy: Any) -> dict[str, Any]:
    changed = make_set()
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "agent:2"
    changed["metadata"]["generation"] = 2
    if strategy:
        changed["spec"]["updateStrategy"] = strategy
    return admission.apply_defaults(kinds.DAEMON_SET, changed)


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


def test_rolling_update_replaces_within_max_unavailable() -> None:
    changed = updated_set()
    new = daemonset.revision(changed)
    nodes = [node("a"), node("b"), node("c")]
    decided = daemonset.plan(changed, nodes, [pod("pa", "a"), pod("pb", "b"), pod("pc", "c")])
    assert names(decided.delete) == ["pa"], "maxUnavailable 1 (the default): one node at a time"
    assert decided.status["updatedNumberScheduled"] == 0
    # pa's replacement runs but is not Ready: no more budget.
    replaced = [pod("pa2", "a", revision=new, ready=False), pod("pb", "b"), pod("pc", "c")]
    assert daemonset.plan(changed, nodes, replaced).delete == []
    # An old pod that is not Ready goes at once, whatever the budget.
    broken = [pod("pa2", "a", revision=new, ready=False), pod("pb", "b", ready=False), pod("pc", "c")]
    assert names(daemonset.plan(changed, nodes, broken).delete) == ["pb"]
    done = daemonset.plan(changed, nodes, [pod(f"p{n}2", n, revision=new) for n in "abc"])
    assert done.delete == [] and done.status["updatedNumberScheduled"] == 3 and done.status["numberAvailable"] == 3
    assert daemonset.daemon_pod(changed, "a")["metadata"]["labels"] == {
        "app": "agent",
        daemonset.REVISION_LABEL: new,
        daemonset.GENERATION_LABEL: "2",
    }


def test_percent_budget_surge_and_on_delete() -> None:
    nodes = [node(n) for n in "abcd"]
    old_pods = [pod(f"p{n}", n) for n in "abcd"]
    half = updated_set(type="RollingUpdate", rollingUpdate={"maxUnavailable": "50%", "maxSurge": 0})
    assert len(daemonset.plan(half, nodes, old_pods).delete) == 2
    surge = updated_set(type="RollingUpdate", rollingUpdate={"maxUnavailable": 0, "maxSurge": 1})
    new = daemonset.revision(surge)
    started = daemonset.plan(surge, nodes, old_pods)
    assert started.create == ["a"] and started.delete == [], "the new pod starts beside the old one"
    beside = [*old_pods, pod("pa2", "a", revision=new, ready=False)]
    assert daemonset.plan(surge, nodes, beside).create == [] and daemonset.plan(surge, nodes, beside).delete == []
    ready = [*old_pods, pod("pa2", "a", revision=new)]
    decided = daemonset.plan(surge, nodes, ready)
    assert names(decided.delete) == ["pa"] and decided.create == ["b"]
    on_delete = updated_set(type="OnDelete")
    assert daemonset.plan(on_delete, nodes, old_pods).delete == []


def test_update_strategy_defaults_and_refusals() -> None:
    assert make_set()["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    both_zero = updated_set(type="RollingUpdate", rollingUpdate={"maxUnavailable": 0, "maxSurge": 0})
    with pytest.raises(ValidationError, match="maxUnavailable"):
        admission.validate(kinds.DAEMON_SET, both_zero)
    with pytest.raises(ValidationError, match=r"updateStrategy\.type"):
        admission.validate(kinds.DAEMON_SET, updated_set(type="Never"))
