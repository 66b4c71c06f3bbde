"""Pod subresources and pod deletion on the embedded API server: binding (also the legacy
`bindings` collection), eviction with and without PodDisruptionBudgets, and grace periods.

The official client raises after a successful bind because the server answers with a Status
(kubernetes-client/python issues 547 and 825), so bindings and evictions are called with
`_preload_content=False` and their HTTP status is read from the raw response."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

Server = Any  # conftest.ServerProcess (conftest is not importable under --import-mode=importlib)

MERGE = "application/merge-patch+json"


@pytest.fixture
def apiserver(module_apiserver: Server) -> Server:
    return module_apiserver


@pytest.fixture
def k8s(module_k8s: client.ApiClient) -> client.ApiClient:
    return module_k8s


def pod(name: str, labels: dict[str, str] | None = None, grace: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox:1"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "labels": labels or {"app": "web"}}, "spec": spec}


def binding(name: str, node: str, uid: str | None = None) -> client.V1Binding:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=name, uid=uid),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )


def bind(core: client.CoreV1Api, ns: str, name: str, node: str, uid: str | None = None) -> Any:
    return core.create_namespaced_pod_binding(name, ns, binding(name, node, uid), _preload_content=False)


def evict(core: client.CoreV1Api, ns: str, name: str, uid: str | None = None) -> Any:
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns), delete_options=options)
    return core.create_namespaced_pod_eviction(name, ns, body, _preload_content=False)


def running_pod(core: client.CoreV1Api, ns: str, name: str, node: str = "node-1", **kwargs: Any) -> None:
    core.create_namespaced_pod(ns, pod(name, **kwargs))
    assert bind(core, ns, name, node).status == 201
    core.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Running"}}, _content_type=MERGE)


def pdb(policy: client.PolicyV1Api, ns: str, name: str, **spec: Any) -> None:
    policy.create_namespaced_pod_disruption_budget(
        ns, {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}
    )


def gone_or_terminating(core: client.CoreV1Api, ns: str, name: str) -> bool:
    try:
        return core.read_namespaced_pod(name, ns).metadata.deletion_timestamp is not None
    except ApiException as exc:
        assert exc.status == 404
        return True


def wait_gone(core: client.CoreV1Api, ns: str, name: str, seconds: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        try:
            core.read_namespaced_pod(name, ns)
        except ApiException as exc:
            assert exc.status == 404
            return time.monotonic() - began
        time.sleep(0.05)
    raise AssertionError(f"pod {name} still there after {seconds}s")


def status_body(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["code"] == exc.status
    return body


# -- binding -------------------------------------------------------------------------------------------


def test_binding_sets_node_and_scheduled_condition(core: client.CoreV1Api, ns: str) -> None:
    created = core.create_namespaced_pod(ns, pod("b1"))
    response = bind(core, ns, "b1", "node-1")
    assert response.status == 201
    answer = json.loads(response.data)
    assert answer["kind"] == "Status" and answer["status"] == "Success"
    bound = core.read_namespaced_pod("b1", ns)
    assert bound.spec.node_name == "node-1"
    scheduled = [c for c in bound.status.conditions or [] if c.type == "PodScheduled"]
    assert len(scheduled) == 1 and scheduled[0].status == "True"
    assert int(bound.metadata.resource_version) > int(created.metadata.resource_version)


def test_second_binding_is_409(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("b2"))
    assert bind(core, ns, "b2", "node-1").status == 201
    with pytest.raises(ApiException) as caught:
        bind(core, ns, "b2", "node-2")
    assert caught.value.status == 409
    assert status_body(caught.value)["reason"] == "Conflict"
    assert core.read_namespaced_pod("b2", ns).spec.node_name == "node-1"
    # Binding to the same node again is a conflict too: a pod is bound exactly once.
    with pytest.raises(ApiException) as again:
        bind(core, ns, "b2", "node-1")
    assert again.value.status == 409


def test_binding_a_missing_pod_is_404(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as caught:
        bind(core, ns, "nobody", "node-1")
    assert caught.value.status == 404


def test_binding_with_wrong_uid_is_409(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("b3"))
    with pytest.raises(ApiException) as caught:
        bind(core, ns, "b3", "node-1", uid=str(uuid.uuid4()))
    assert caught.value.status == 409
    assert core.read_namespaced_pod("b3", ns).spec.node_name is None


def test_binding_without_target_is_refused(core: client.CoreV1Api, apiserver: Server, ns: str) -> None:
    import requests

    core.create_namespaced_pod(ns, pod("b4"))
    response = requests.post(
        f"{apiserver.url}/api/v1/namespaces/{ns}/pods/b4/binding",
        json={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b4"}},
        timeout=5,
    )
    assert response.status_code == 422, response.text
    assert core.read_namespaced_pod("b4", ns).spec.node_name is None


def test_legacy_bindings_collection(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("legacy"))
    response = core.create_namespaced_binding(ns, binding("legacy", "node-3"), _preload_content=False)
    assert response.status == 201
    assert core.read_namespaced_pod("legacy", ns).spec.node_name == "node-3"
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_binding(ns, binding("legacy", "node-4"), _preload_content=False)
    assert caught.value.status == 409


def test_binding_a_terminating_pod_is_refused(core: client.CoreV1Api, ns: str) -> None:
    running_pod(core, ns, "dying", grace=30)
    core.delete_namespaced_pod("dying", ns)
    core.create_namespaced_pod(ns, pod("other"))  # unrelated pod still binds
    assert bind(core, ns, "other", "node-1").status == 201
    with pytest.raises(ApiException) as caught:
        bind(core, ns, "dying", "node-2")
    assert caught.value.status == 409


# -- eviction ---------------------------------------------------------------------------------------------


def test_eviction_without_budget(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("free"))
    response = evict(core, ns, "free")
    assert response.status == 201
    wait_gone(core, ns, "free", 1.0)  # unbound: gone at once
    running_pod(core, ns, "busy")
    assert evict(core, ns, "busy").status == 201
    assert gone_or_terminating(core, ns, "busy")


def test_eviction_that_would_break_budget_is_429(core: client.CoreV1Api, policy: client.PolicyV1Api, ns: str) -> None:
    for name in ("w1", "w2"):
        running_pod(core, ns, name)
    pdb(policy, ns, "keep-two", minAvailable=2)
    with pytest.raises(ApiException) as caught:
        evict(core, ns, "w1")
    assert caught.value.status == 429
    status = status_body(caught.value)
    assert status["reason"] == "TooManyRequests"
    assert "disruption budget" in status["message"]
    kept = core.read_namespaced_pod("w1", ns)
    assert kept.metadata.deletion_timestamp is None
    assert kept.status.phase == "Running"


def test_eviction_allowed_by_budget(core: client.CoreV1Api, policy: client.PolicyV1Api, ns: str) -> None:
    for name in ("w1", "w2", "w3"):
        running_pod(core, ns, name)
    pdb(policy, ns, "keep-two", minAvailable=2)
    assert evict(core, ns, "w1").status == 201
    assert gone_or_terminating(core, ns, "w1")
    # w1 is terminating (not healthy) now: only two healthy pods remain, the budget is spent.
    with pytest.raises(ApiException) as caught:
        evict(core, ns, "w2")
    assert caught.value.status == 429


def test_eviction_with_max_unavailable_percentage(core: client.CoreV1Api, policy: client.PolicyV1Api, ns: str) -> None:
    for name in ("m1", "m2", "m3", "m4"):
        running_pod(core, ns, name)
    pdb(policy, ns, "quarter", maxUnavailable="25%")
    assert evict(core, ns, "m1").status == 201
    with pytest.raises(ApiException) as caught:
        evict(core, ns, "m2")
    assert caught.value.status == 429


def test_eviction_of_pod_outside_budget_selector(core: client.CoreV1Api, policy: client.PolicyV1Api, ns: str) -> None:
    running_pod(core, ns, "guarded")
    running_pod(core, ns, "unguarded", labels={"app": "batch"})
    pdb(policy, ns, "all-web", minAvailable=1)
    assert evict(core, ns, "unguarded").status == 201
    with pytest.raises(ApiException) as caught:
        evict(core, ns, "guarded")
    assert caught.value.status == 429


def test_eviction_uid_precondition_mismatch_is_409(core: client.CoreV1Api, ns: str) -> None:
    running_pod(core, ns, "pre")
    with pytest.raises(ApiException) as caught:
        evict(core, ns, "pre", uid=str(uuid.uuid4()))
    assert caught.value.status == 409
    assert core.read_namespaced_pod("pre", ns).metadata.deletion_timestamp is None
    right = core.read_namespaced_pod("pre", ns).metadata.uid
    assert evict(core, ns, "pre", uid=right).status == 201


def test_eviction_of_missing_pod_is_404(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as caught:
        evict(core, ns, "nobody")
    assert caught.value.status == 404


# -- deletion and grace periods ---------------------------------------------------------------------------------


def test_graceful_delete_of_running_pod(core: client.CoreV1Api, ns: str) -> None:
    """deletionTimestamp first (a MODIFIED event), the pod gone when the grace period ends (DELETED)."""
    from kubernetes import watch

    running_pod(core, ns, "graceful")
    start = core.list_namespaced_pod(ns).metadata.resource_version
    began = time.monotonic()
    answer = core.delete_namespaced_pod("graceful", ns, grace_period_seconds=1)
    assert answer.metadata.deletion_timestamp is not None
    terminating = core.read_namespaced_pod("graceful", ns)
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 1
    seen = []
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_pod, ns, resource_version=start, timeout_seconds=10):
        seen.append((event["type"], event["object"].metadata.deletion_timestamp is not None))
        if event["type"] == "DELETED":
            stream.stop()
    elapsed = time.monotonic() - began
    assert seen == [("MODIFIED", True), ("DELETED", True)]
    # Not before the grace period; well before the 30 s default (the bound a loaded machine keeps).
    assert 0.8 <= elapsed < 10, f"removed after {elapsed:.2f}s for a 1s grace period"
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("graceful", ns)
    assert caught.value.status == 404


def test_delete_with_zero_grace_is_immediate(core: client.CoreV1Api, ns: str) -> None:
    running_pod(core, ns, "now")
    core.delete_namespaced_pod("now", ns, grace_period_seconds=0)
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("now", ns)
    assert caught.value.status == 404


def test_delete_options_body_grace_period(core: client.CoreV1Api, ns: str) -> None:
    running_pod(core, ns, "bodyopt")
    core.delete_namespaced_pod("bodyopt", ns, body=client.V1DeleteOptions(grace_period_seconds=0))
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("bodyopt", ns)
    assert caught.value.status == 404


def test_unbound_pod_is_deleted_at_once(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("unbound", grace=30))
    core.delete_namespaced_pod("unbound", ns, grace_period_seconds=30)
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("unbound", ns)
    assert caught.value.status == 404


def test_finished_pod_is_deleted_at_once(core: client.CoreV1Api, ns: str) -> None:
    running_pod(core, ns, "done")
    core.patch_namespaced_pod_status("done", ns, {"status": {"phase": "Succeeded"}}, _content_type=MERGE)
    core.delete_namespaced_pod("done", ns)
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("done", ns)
    assert caught.value.status == 404


def test_default_grace_period_comes_from_the_pod_spec(core: client.CoreV1Api, ns: str) -> None:
    running_pod(core, ns, "specgrace", grace=7)
    core.delete_namespaced_pod("specgrace", ns)
    assert core.read_namespaced_pod("specgrace", ns).metadata.deletion_grace_period_seconds == 7
    running_pod(core, ns, "defaultgrace")
    core.delete_namespaced_pod("defaultgrace", ns)
    assert core.read_namespaced_pod("defaultgrace", ns).metadata.deletion_grace_period_seconds == 30


def test_second_delete_may_shorten_but_not_lengthen_grace(core: client.CoreV1Api, ns: str) -> None:
    running_pod(core, ns, "shorten")
    core.delete_namespaced_pod("shorten", ns, grace_period_seconds=30)
    first = core.read_namespaced_pod("shorten", ns)
    assert first.metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("shorten", ns, grace_period_seconds=60)
    assert core.read_namespaced_pod("shorten", ns).metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("shorten", ns, grace_period_seconds=0)
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("shorten", ns)
    assert caught.value.status == 404


def test_a_recreated_pod_keeps_its_own_grace_period(core: client.CoreV1Api, ns: str) -> None:
    """The controller recreates pods under the same name (`<job>-<task>-<index>`): the removal timer
    of the old pod's grace period must not remove the new pod early."""
    running_pod(core, ns, "reborn")
    core.delete_namespaced_pod("reborn", ns, grace_period_seconds=1)
    core.delete_namespaced_pod("reborn", ns, grace_period_seconds=0)
    running_pod(core, ns, "reborn")
    core.delete_namespaced_pod("reborn", ns, grace_period_seconds=30)
    time.sleep(1.5)  # past the old pod's deadline
    survivor = core.read_namespaced_pod("reborn", ns)
    assert survivor.metadata.deletion_grace_period_seconds == 30, "the new pod was removed by the old pod's timer"


def test_pod_priority_comes_from_its_priority_class(core: client.CoreV1Api, k8s: client.ApiClient, ns: str) -> None:
    scheduling = client.SchedulingV1Api(k8s)
    name = f"pc-{uuid.uuid4().hex[:6]}"
    scheduling.create_priority_class({"metadata": {"name": name}, "value": 1000})
    spec = {"containers": [{"name": "c", "image": "busybox"}]}
    high = core.create_namespaced_pod(ns, {"metadata": {"name": "high"}, "spec": {**spec, "priorityClassName": name}})
    assert high.spec.priority == 1000 and high.spec.preemption_policy == "PreemptLowerPriority"
    plain = core.create_namespaced_pod(ns, {"metadata": {"name": "plain"}, "spec": spec})
    assert plain.spec.priority == 0
    critical = core.create_namespaced_pod(
        ns, {"metadata": {"name": "crit"}, "spec": {**spec, "priorityClassName": "system-node-critical"}}
    )
    assert critical.spec.priority == 2_000_001_000
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_pod(ns, {"metadata": {"name": "ghost"}, "spec": {**spec, "priorityClassName": "nope"}})
    assert missing.value.status == 403 and "no PriorityClass with name nope" in missing.value.body
    with pytest.raises(ApiException) as forged:
        core.create_namespaced_pod(ns, {"metadata": {"name": "forged"}, "spec": {**spec, "priority": 5}})
    assert forged.value.status == 403 and "must not be provided" in forged.value.body
    assert [p.metadata.name for p in core.list_namespaced_pod(ns).items] == ["crit", "high", "plain"]
