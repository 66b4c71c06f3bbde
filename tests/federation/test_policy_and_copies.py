"""The federation's policy file (refused with the key at fault) and what it writes into members
(the fenced Job copy and what its pods reference)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lahar.federation import names
from lahar.federation.copies import (
    copy_placement,
    events_to_mirror,
    member_job,
    member_object,
    member_queue,
    referenced,
)
from lahar.federation.placement import pack
from lahar.federation.policy import Policy, PolicyError, load_policy, parse_policy
from tests.federation.fleet import resources, vcjob


def test_a_policy_reads_weights_and_timings() -> None:
    policy = parse_policy(
        "plugins:\n- name: cost\n  arguments: {weight: 3}\n- name: free-capacity\n"
        "heartbeatPeriod: 1s\nunreachableAfter: 5s\nredispatchAfter: 2m\n"
    )
    assert policy == Policy({"cost": 3.0, "free-capacity": 1.0}, 1.0, 5.0, 120.0, member_lease=60)
    assert parse_policy('memberLease: 40s\nactions: "dispatch, reclaim"').actions == ("dispatch", "reclaim")
    assert parse_policy("") == Policy()
    assert load_policy(None) == Policy()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("plugins: [{name: cheapest}]", "plugins[0].name: unknown scorer 'cheapest'"),
        ("plugins: [{name: cost}, {name: cost}]", "plugins[1].name: cost is listed twice"),
        ("plugins: [{name: cost, arguments: {weight: -1}}]", "plugins[0].arguments.weight: must be a number >= 0"),
        ("redispatchAfter: soon", "redispatchAfter: invalid duration"),
        ("redispatchAfter: 0s", "redispatchAfter: must be a positive duration"),
        ("heartbeatPeriod: 10s\nunreachableAfter: 5s", "unreachableAfter must be at least heartbeatPeriod"),
        ("tiers: []", "unknown keys tiers"),
        ("memberLease: 1.5s", "memberLease: must be whole seconds"),
        ("heartbeatPeriod: 2s\nmemberLease: 3s", "memberLease (3s) must be at least two heartbeatPeriods (4s)"),
        (
            "heartbeatPeriod: 1s\nredispatchAfter: 10s\nmemberLease: 9s",
            "redispatchAfter (10s) must be at least memberLease (9s) + heartbeatPeriod + 1s (11s)",
        ),
        (
            "heartbeatPeriod: 0.1s\nunreachableAfter: 0.5s\nredispatchAfter: 1s",
            "redispatchAfter (1s) must be at least memberLease (1s)",
        ),
        ('actions: "allocate, dispatch"', "actions: unknown action 'allocate'"),
        ('actions: "preempt"', "actions: must name dispatch"),
        ("actions: [dispatch]", "actions: must be a comma-separated string"),
        ("[1, 2]", "must be a mapping"),
        ("plugins: [", "not valid YAML"),
    ],
)
def test_a_bad_policy_is_refused_with_the_key(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=re.escape(message)):
        parse_policy(text)


def test_a_missing_policy_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"cannot read the federation policy .*nope\.yaml"):
        load_policy(tmp_path / "nope.yaml")


def test_the_member_copy_carries_the_fence_and_not_the_hub_state() -> None:
    hub = vcjob("train", cluster="a", placement=3, dispatched=2, status={"state": {"phase": "Running"}})
    hub["metadata"].update(resourceVersion="77", generation=4, ownerReferences=[{"name": "flow"}])
    copy = member_job(hub, 3)
    metadata = copy["metadata"]
    assert metadata["labels"] == {"team": "a", names.HUB_UID_LABEL: "uid-train"}
    assert metadata["annotations"] == {
        names.PLACEMENT_ANNOTATION: "3",
        names.HUB_GENERATION_ANNOTATION: "4",
        names.HUB_RESOURCE_VERSION_ANNOTATION: "77",
    }
    assert not {"uid", "resourceVersion", "generation", "creationTimestamp", "ownerReferences"} & set(metadata)
    assert "status" not in copy and copy["spec"] == hub["spec"] and copy_placement(copy) == 3


def test_referenced_config_maps_and_secrets_are_found_everywhere_a_pod_names_them() -> None:
    job = vcjob("j")
    spec = job["spec"]["tasks"][0]["template"]["spec"]
    spec["volumes"] = [
        {"name": "a", "configMap": {"name": "cm-volume"}},
        {"name": "b", "secret": {"secretName": "secret-volume"}},
        {
            "name": "c",
            "projected": {"sources": [{"configMap": {"name": "cm-projected"}}, {"secret": {"name": "s-proj"}}]},
        },
    ]
    spec["imagePullSecrets"] = [{"name": "pull"}]
    spec["containers"][0]["envFrom"] = [{"configMapRef": {"name": "cm-env"}}, {"secretRef": {"name": "s-env"}}]
    spec["containers"][0]["env"] = [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm-key", "key": "x"}}},
        {"name": "Y", "valueFrom": {"secretKeyRef": {"name": "s-key", "key": "y"}}},
        {"name": "Z", "value": "plain"},
    ]
    assert referenced(job) == (
        {"cm-volume", "cm-projected", "cm-env", "cm-key"},
        {"secret-volume", "s-proj", "pull", "s-env", "s-key"},
    )


def test_copied_objects_are_labelled_and_queues_lose_their_capability() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {"k": "dg=="}}
    secret["metadata"] = {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "9"}
    assert member_object(secret) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "data": {"k": "dg=="},
        "metadata": {"name": "s", "namespace": "ns", "labels": {names.MANAGED_LABEL: "true"}},
    }
    queue = member_queue("team", {"spec": {"weight": 3, "capability": {"cpu": "4"}}})
    assert queue["spec"] == {"weight": 3}


def test_pack_places_the_biggest_pods_first_on_the_tightest_node() -> None:
    nodes = [resources(4, 16), resources(2, 16)]
    after = pack(nodes, [resources(1), resources(2), resources(3)])
    assert after is not None and [a["cpu"] for a in after] == [0, 0]
    assert pack(nodes, [resources(3), resources(3)]) is None


def test_member_events_about_copies_are_told_once_per_new_count() -> None:
    def event(uid: str, name: str, count: int, kind: str = "Job") -> dict[str, object]:
        return {
            "metadata": {"uid": uid},
            "involvedObject": {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": kind,
                "namespace": "ns",
                "name": name,
            },
            "type": "Warning",
            "reason": "PodFailed",
            "message": "worker-0 failed",
            "count": count,
        }

    events = [event("e1", "train", 2), event("e2", "other", 1), event("e3", "train", 1, kind="Pod")]
    told = events_to_mirror("m1", events, {("ns", "train")}, {"e1": 1})
    assert told == [(("ns", "train"), "Warning", "PodFailed", "[m1] worker-0 failed", "e1", 2)]
    assert events_to_mirror("m1", events, {("ns", "train")}, {"e1": 2}) == []
