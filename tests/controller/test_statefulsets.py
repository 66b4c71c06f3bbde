"""StatefulSet (controller/workloads/statefulset.py): stable names and ordinals, ordered creation
and removal under OrderedReady, all at once under Parallel, replacement of finished pods under
their own name, and admission's defaults and refusals."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.api import admission, kinds
from lahar.api.errors import ValidationError
from lahar.controller.workloads import statefulset


def make_set(replicas: int = 3, **spec: Any) -> dict[str, Any]:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "shop", "uid": "s-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
            **spec,
        },
    }
    return admission.apply_defaults(kinds.STATEFUL_SET, obj)


def pod(
    index: int, phase: str = "Running", ready: bool = True, owner: str = "s-uid", revision: str | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"web-{index}",
            "uid": f"p{index}",
            "ownerReferences": [{"uid": owner, "controller": True}],
            "labels": {statefulset.REVISION_LABEL: revision or statefulset.update_revision(make_set())},
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_defaults_and_refusals() -> None:
    obj = make_set()
    assert (
        obj["spec"]["podManagementPolicy"] == "OrderedReady"
        and obj["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    )
    admission.validate(kinds.STATEFUL_SET, obj)
    with pytest.raises(ValidationError, match="podManagementPolicy"):
        admission.validate(kinds.STATEFUL_SET, make_set(podManagementPolicy="Random"))
    with pytest.raises(ValidationError, match="serviceName"):
        admission.validate(kinds.STATEFUL_SET, make_set(serviceName="other"), obj)


def test_ordered_ready_makes_one_pod_after_the_lower_ones_are_ready() -> None:
    assert statefulset.plan(make_set(), []).create == [0]
    assert statefulset.plan(make_set(), [pod(0, ready=False)]).create == [], "web-0 not Ready yet: wait"
    assert statefulset.plan(make_set(), [pod(0)]).create == [1]
    decided = statefulset.plan(make_set(), [pod(0), pod(1)])
    assert decided.create == [2] and decided.status["readyReplicas"] == 2


def test_parallel_makes_every_missing_pod_at_once() -> None:
    assert statefulset.plan(make_set(4, podManagementPolicy="Parallel"), [pod(1)]).create == [0, 2, 3]


def test_scale_down_removes_the_highest_ordinal_first_one_at_a_time() -> None:
    decided = statefulset.plan(make_set(1), [pod(0), pod(1), pod(2)])
    assert [p["metadata"]["name"] for p in decided.delete] == ["web-2"]
    stalled = statefulset.plan(make_set(1), [pod(0, ready=False), pod(1), pod(2)])
    assert stalled.delete == [], "OrderedReady: no removal while a kept pod is not Ready"
    parallel = statefulset.plan(make_set(1, podManagementPolicy="Parallel"), [pod(0), pod(1), pod(2)])
    assert sorted(p["metadata"]["name"] for p in parallel.delete) == ["web-1", "web-2"]


def test_a_finished_pod_is_deleted_to_be_made_again_under_its_name() -> None:
    decided = statefulset.plan(make_set(2), [pod(0), pod(1, phase="Failed")])
    assert [p["metadata"]["name"] for p in decided.delete] == ["web-1"] and decided.create == []
    assert statefulset.plan(make_set(2), [pod(0)]).create == [1]


def test_pods_of_others_and_odd_names_are_ignored() -> None:
    strangers = [pod(0, owner="other"), {**pod(1), "metadata": {**pod(1)["metadata"], "name": "web-01"}}]
    assert statefulset.plan(make_set(), strangers).create == [0]


def test_stateful_pods_have_stable_identity() -> None:
    made = statefulset.stateful_pod(make_set(), 2)
    assert made["metadata"]["name"] == "web-2" and "generateName" not in made["metadata"]
    assert made["spec"]["hostname"] == "web-2" and made["spec"]["subdomain"] == "web"
    labels = made["metadata"]["labels"]
    assert labels[statefulset.POD_NAME_LABEL] == "web-2" and labels[statefulset.POD_INDEX_LABEL] == "2"
    assert made["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"


def new_image(replicas: int = 3, **spec: Any) -> dict[str, Any]:
    changed = make_set(replicas, **spec)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    changed["metadata"]["generation"] = 2
    return changed


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_rolling_update_replaces_the_highest_ordinal_first_one_at_a_time() -> None:
    old = statefulset.update_revision(make_set())
    changed = {**new_image(), "status": {"currentRevision": old}}
    new = statefulset.update_revision(changed)
    assert new != old and new.startswith("web-")
    decided = statefulset.plan(changed, [pod(0), pod(1), pod(2)])
    assert names(decided.delete) == ["web-2"]
    assert decided.status["updateRevision"] == new and decided.status["currentRevision"] == old
    assert decided.status["updatedReplicas"] == 0 and decided.status["currentReplicas"] == 3
    # web-2 came back at the new revision but is not Ready: wait.
    waiting = statefulset.plan(changed, [pod(0), pod(1), pod(2, ready=False, revision=new)])
    assert waiting.delete == [] and waiting.status["updatedReplicas"] == 1
    assert names(statefulset.plan(changed, [pod(0), pod(1), pod(2, revision=new)]).delete) == ["web-1"]
    done = statefulset.plan(changed, [pod(i, revision=new) for i in range(3)])
    assert done.delete == [] and done.status["currentRevision"] == new and done.status["currentReplicas"] == 3
    assert statefulset.stateful_pod(changed, 2)["metadata"]["labels"][statefulset.REVISION_LABEL] == new


def test_partition_keeps_the_lower_ordinals_and_on_delete_waits_for_deletions() -> None:
    partitioned = new_image(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 2}})
    new = statefulset.update_revision(partitioned)
    assert names(statefulset.plan(partitioned, [pod(0), pod(1), pod(2)]).delete) == ["web-2"]
    assert statefulset.plan(partitioned, [pod(0), pod(1), pod(2, revision=new)]).delete == []
    on_delete = new_image(updateStrategy={"type": "OnDelete"})
    decided = statefulset.plan(on_delete, [pod(0), pod(1), pod(2)])
    assert decided.delete == [] and decided.status["updatedReplicas"] == 0


def test_update_strategy_is_defaulted_and_checked() -> None:
    assert make_set()["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    with pytest.raises(ValidationError, match=r"updateStrategy\.type"):
        admission.validate(kinds.STATEFUL_SET, make_set(updateStrategy={"type": "Sometimes"}))
    with pytest.raises(ValidationError, match="partition"):
        admission.validate(
            kinds.STATEFUL_SET, make_set(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": -1}})
        )
    with pytest.raises(ValidationError, match="rollingUpdate"):
        admission.validate(
            kinds.STATEFUL_SET, make_set(updateStrategy={"type": "OnDelete", "rollingUpdate": {"partition": 1}})
        )
