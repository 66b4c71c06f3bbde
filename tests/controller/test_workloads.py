"""The workload controllers' decisions (controller/workloads): ReplicaSet pods and status,
Deployment rollouts within maxSurge/maxUnavailable, Recreate, rollback revisions and history."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lahar.api import admission, kinds
from lahar.api.errors import ValidationError
from lahar.controller.workloads import deployment, replicaset


def make_deployment(replicas: int = 4, image: str = "app:1", **spec: Any) -> dict[str, Any]:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "d-uid", "generation": 2},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
            **spec,
        },
    }
    return admission.apply_defaults(kinds.DEPLOYMENT, obj)


def as_stored(rs: dict[str, Any], uid: str, replicas: int | None = None, available: int | None = None) -> dict:
    """A planned ReplicaSet as the API would hold it, with `available` of its pods ready."""
    stored = copy.deepcopy(rs)
    stored["metadata"]["uid"] = uid
    if replicas is not None:
        stored["spec"]["replicas"] = replicas
    count = stored["spec"]["replicas"]
    ready = count if available is None else available
    stored["status"] = {"replicas": count, "readyReplicas": ready, "availableReplicas": ready}
    return stored


def pod(name: str, owner: str, phase: str = "Running", ready: bool = True, node: str = "n1", created: str = "") -> dict:
    return {
        "metadata": {
            "name": name,
            "uid": f"{name}-uid",
            "labels": {"app": "web"},
            "creationTimestamp": created or "2026-01-01T00:00:00Z",
            "ownerReferences": [{"uid": owner, "controller": True}],
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


# -- ReplicaSet ----------------------------------------------------------------------------------------


def test_a_replica_set_creates_what_is_missing_and_reports_its_pods():
    rs = as_stored(deployment.new_replica_set(make_deployment(), "h1", 3, 1), "rs-uid")
    pods = [pod("a", "rs-uid"), pod("b", "rs-uid", ready=False), pod("other", "someone-else")]
    decided = replicaset.plan(rs, pods)
    assert decided.create == 1 and decided.delete == []
    assert decided.status["replicas"] == 2 and decided.status["readyReplicas"] == 1


def test_a_replica_set_deletes_unscheduled_then_unready_then_newest_first():
    rs = as_stored(deployment.new_replica_set(make_deployment(), "h1", 1, 1), "rs-uid", replicas=1)
    pods = [
        pod("old-ready", "rs-uid", created="2026-01-01T00:00:00Z"),
        pod("new-ready", "rs-uid", created="2026-01-02T00:00:00Z"),
        pod("unready", "rs-uid", ready=False),
        pod("pending", "rs-uid", phase="Pending", node=""),
    ]
    decided = replicaset.plan(rs, pods)
    assert [p["metadata"]["name"] for p in decided.delete] == ["pending", "unready", "new-ready"]


def test_finished_and_terminating_pods_do_not_count():
    rs = as_stored(deployment.new_replica_set(make_deployment(), "h1", 2, 1), "rs-uid", replicas=2)
    done = pod("done", "rs-uid", phase="Succeeded")
    going = pod("going", "rs-uid")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert replicaset.plan(rs, [done, going, pod("a", "rs-uid")]).create == 1


def test_pods_from_the_template_are_owned_by_the_set():
    rs = as_stored(deployment.new_replica_set(make_deployment(), "h1", 2, 1), "rs-uid")
    made = replicaset.pod_from_template(rs)
    assert made["metadata"]["generateName"] == "web-h1-"
    assert made["metadata"]["labels"] == {"app": "web", "pod-template-hash": "h1"}
    assert made["metadata"]["ownerReferences"][0]["uid"] == "rs-uid"


# -- Deployment ------------------------------------------------------------------------------------------


def test_a_new_deployment_gets_one_replica_set_of_its_template_at_revision_1():
    d = make_deployment(replicas=3)
    decided = deployment.plan(d, [])
    assert decided.create is not None and decided.create["spec"]["replicas"] == 3
    hash_value = deployment.template_hash(d["spec"]["template"])
    assert decided.create["metadata"]["name"] == f"web-{hash_value}"
    assert decided.create["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": hash_value}
    assert decided.revision == "1"


def test_scaling_with_no_rollout_sets_the_new_replica_set():
    d = make_deployment(replicas=3)
    rs = as_stored(deployment.plan(d, []).create, "rs1")
    d["spec"]["replicas"] = 5
    decided = deployment.plan(d, [rs])
    assert decided.create is None and decided.scale == {rs["metadata"]["name"]: 5}


def test_a_rolling_update_stays_within_surge_and_unavailability():
    old_d = make_deployment(replicas=4)
    old = as_stored(deployment.plan(old_d, []).create, "rs1")
    d = make_deployment(replicas=4, image="app:2")  # 25%: surge 1, unavailable 1
    first = deployment.plan(d, [old])
    # Made at the surge (1), old down by the unavailability (1): never more than 5 pods, 3 available.
    assert first.create is not None and first.create["spec"]["replicas"] == 1
    assert first.create["metadata"]["annotations"][deployment.REVISION] == "2"
    assert first.scale == {old["metadata"]["name"]: 3}
    new = as_stored(first.create, "rs2", replicas=1, available=0)
    # The new pod is not ready yet: one more may start, nothing more may go down.
    new = as_stored(new, "rs2", replicas=1, available=0)
    old = as_stored(old, "rs1", replicas=3)
    assert deployment.plan(d, [old, new]).scale == {new["metadata"]["name"]: 2}
    # The end: all new, old at zero, status complete.
    done = deployment.plan(d, [as_stored(old, "rs1", replicas=0), as_stored(new, "rs2", replicas=4)])
    assert done.scale == {}
    assert done.status["updatedReplicas"] == 4 and done.status["availableReplicas"] == 4
    progressing = next(c for c in done.status["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "NewReplicaSetAvailable"


def test_recreate_stops_every_old_pod_before_starting_new_ones():
    d = make_deployment(replicas=2, strategy={"type": "Recreate"})
    old = as_stored(deployment.plan(d, []).create, "rs1")
    d2 = make_deployment(replicas=2, image="app:2", strategy={"type": "Recreate"})
    first = deployment.plan(d2, [old])
    assert first.create["spec"]["replicas"] == 0 and first.scale == {old["metadata"]["name"]: 0}
    new = as_stored(first.create, "rs2", replicas=0)
    still_running = as_stored(old, "rs1", replicas=0)
    still_running["status"]["replicas"] = 1  # a pod is still terminating
    assert deployment.plan(d2, [still_running, new]).scale == {}
    assert deployment.plan(d2, [as_stored(old, "rs1", replicas=0), new]).scale == {new["metadata"]["name"]: 2}


def test_a_rollback_makes_the_old_template_the_newest_revision():
    v1 = make_deployment(replicas=2)
    rs1 = as_stored(deployment.plan(v1, []).create, "rs1", replicas=0)
    v2 = make_deployment(replicas=2, image="app:2")
    rs2 = as_stored(deployment.plan(v2, [rs1]).create, "rs2", replicas=2)
    # `kubectl rollout undo` writes rs1's template back, hash label removed and empty values added.
    template = copy.deepcopy(rs1["spec"]["template"])
    del template["metadata"]["labels"]["pod-template-hash"]
    template["metadata"]["creationTimestamp"] = None
    template["spec"]["containers"][0]["resources"] = {}
    undone = make_deployment(replicas=2)
    undone["spec"]["template"] = template
    decided = deployment.plan(undone, [rs1, rs2])
    assert decided.create is None
    assert decided.annotate[rs1["metadata"]["name"]][deployment.REVISION] == "3"
    assert decided.revision == "3"
    assert decided.scale[rs1["metadata"]["name"]] == 1  # rolling back within the surge


def test_old_replica_sets_past_the_history_limit_are_deleted_oldest_first():
    sets = []
    for number in range(1, 5):
        d = make_deployment(replicas=1, image=f"app:{number}", revisionHistoryLimit=2)
        rs = deployment.new_replica_set(d, f"h{number}", 0 if number < 4 else 1, number)
        sets.append(as_stored(rs, f"rs{number}"))
    decided = deployment.plan(d, sets)
    assert decided.delete == ["web-h1"]


def test_percentages_round_surge_up_and_unavailability_down():
    from lahar.api.workloads import scaled

    assert scaled("25%", 3, round_up=True) == 1 and scaled("25%", 3, round_up=False) == 0
    assert scaled(2, 10, round_up=True) == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"selector": {"matchLabels": {"app": "other"}}}, "`selector` does not match template `labels`"),
        ({"selector": {}}, "empty selector is invalid"),
        ({"replicas": -1}, "spec.replicas"),
        (
            {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}},
            "may not be 0",
        ),
        ({"strategy": {"type": "Sideways"}}, "strategy type"),
    ],
)
def test_bad_deployments_are_refused(change: dict[str, Any], message: str):
    d = make_deployment()
    d["spec"].update(change)
    with pytest.raises(ValidationError, match=message):
        admission.validate(kinds.DEPLOYMENT, d)


def test_a_deployments_selector_is_immutable():
    old = make_deployment()
    new = make_deployment()
    new["spec"]["selector"] = {"matchLabels": {"app": "web", "tier": "x"}}
    new["spec"]["template"]["metadata"]["labels"]["tier"] = "x"
    with pytest.raises(ValidationError, match=r"spec\.selector: field is immutable"):
        admission.validate(kinds.DEPLOYMENT, new, old)
