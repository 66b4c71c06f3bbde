"""Cluster admission (federation.lahar.dev/v1alpha1): an endpoint that is a URL, a secretRef that
names a Secret, a cost that is a price; every bad field named in one error."""

from __future__ import annotations

from typing import Any

import pytest

from lahar.api import admission
from lahar.api.cluster import Cluster
from lahar.api.errors import ValidationError
from lahar.api.kinds import CLUSTER, lookup


def cluster(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "federation.lahar.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "member-1", "labels": {"region": "eu"}},
        "spec": {"endpoint": "https://10.0.0.7:6443", **spec},
    }


def errors_of(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        admission.validate(CLUSTER, admission.apply_defaults(CLUSTER, obj))
    return [str(error) for error in caught.value.errors]


def test_a_full_cluster_is_accepted_and_read_back() -> None:
    obj = cluster(secretRef={"namespace": "fed", "name": "member-1"}, cost=2.5, unschedulable=True)
    obj["status"] = {"reachable": True, "capacity": {"cpu": "8"}, "allocatableByQueue": {"team": {"cpu": "2"}}}
    admission.validate(CLUSTER, admission.apply_defaults(CLUSTER, obj))
    view = Cluster(obj)
    assert (view.endpoint, view.secret_ref, view.cost, view.unschedulable, view.reachable) == (
        "https://10.0.0.7:6443",
        ("fed", "member-1"),
        2.5,
        True,
        True,
    )
    assert lookup("clusters.federation.lahar.dev") is CLUSTER and not CLUSTER.namespaced


def test_a_secret_ref_without_namespace_means_default() -> None:
    assert Cluster(cluster(secretRef={"name": "creds"})).secret_ref == ("default", "creds")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"endpoint": ""}, "spec.endpoint: is required: the member's API server URL"),
        ({"endpoint": "10.0.0.7:6443"}, "spec.endpoint: must be an http:// or https:// URL with a host"),
        ({"endpoint": "https://10.0.0.7:99999"}, "spec.endpoint: not a URL"),
        ({"endpoint": "https://admin:pw@10.0.0.7"}, "spec.endpoint: must not carry a query, fragment or credentials"),
        ({"secretRef": {"namespace": "fed"}}, "spec.secretRef.name: is required"),
        ({"secretRef": {"name": "Bad_Name"}}, 'spec.secretRef.name: invalid value "Bad_Name"'),
        ({"secretRef": {"name": "ok", "token": "x"}}, "spec.secretRef.token: unknown field"),
        ({"cost": -1}, "spec.cost: must be a finite number >= 0, not -1"),
        ({"cost": "cheap"}, 'spec.cost: expected a number, got string "cheap"'),
        ({"insecureSkipTLSVerify": "yes"}, "spec.insecureSkipTLSVerify: expected a boolean"),
    ],
)
def test_bad_fields_are_named(spec: dict[str, Any], expected: str) -> None:
    assert any(message.startswith(expected) for message in errors_of(cluster(**spec))), errors_of(cluster(**spec))


def test_every_error_is_reported_at_once() -> None:
    messages = errors_of(cluster(endpoint="ftp://x", cost=-2, secretRef={}))
    assert len(messages) == 3, messages


def test_a_cluster_without_spec_is_refused() -> None:
    obj = cluster()
    del obj["spec"]
    assert errors_of(obj) == ["spec: is required"]
