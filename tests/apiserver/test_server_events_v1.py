"""events.k8s.io/v1 Events over HTTP: the same objects as core/v1 Events in their own shape
(list, get, watch, create, patch, delete through either API), kube's create rules for the new
API; and server-side apply's request parameters (fieldManager, force)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

Server = Any  # conftest.ServerProcess

EVENTS_V1 = "/apis/events.k8s.io/v1"


@pytest.fixture(scope="module")
def url(module_apiserver: Server) -> str:
    return str(module_apiserver.url)


@pytest.fixture
def ns(url: str) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    requests.post(f"{url}/api/v1/namespaces", json={"metadata": {"name": name}}, timeout=10).raise_for_status()
    yield name


def new_event(name: str, **changes: Any) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-02T03:04:05.000000Z",
        "reportingController": "lahar.io/test",
        "reportingInstance": "test-1",
        "action": "Testing",
        "reason": "Tested",
        "regarding": {"kind": "Pod", "name": "p1", "apiVersion": "v1"},
        "note": "a note",
        "type": "Normal",
        **changes,
    }


def test_an_events_v1_event_is_a_core_event(url: str, ns: str) -> None:
    created = requests.post(f"{url}{EVENTS_V1}/namespaces/{ns}/events", json=new_event("e1"), timeout=10)
    assert created.status_code == 201, created.text
    assert created.json()["note"] == "a note" and created.json()["regarding"]["name"] == "p1"
    core = requests.get(f"{url}/api/v1/namespaces/{ns}/events/e1", timeout=10).json()
    assert core["apiVersion"] == "v1"
    assert core["message"] == "a note" and core["involvedObject"]["name"] == "p1"
    assert core["reportingComponent"] == "lahar.io/test" and core["eventTime"] == "2026-01-02T03:04:05.000000Z"
    assert core["metadata"]["resourceVersion"] == created.json()["metadata"]["resourceVersion"]


def test_a_core_event_reads_in_the_new_shape(url: str, ns: str) -> None:
    core = {
        "metadata": {"name": "old"},
        "involvedObject": {"kind": "Pod", "name": "p2", "namespace": ns},
        "reason": "Scheduled",
        "message": "assigned",
        "source": {"component": "lahar-scheduler"},
        "count": 3,
        "firstTimestamp": "2026-01-02T03:04:05Z",
        "lastTimestamp": "2026-01-02T03:05:05Z",
        "type": "Normal",
    }
    requests.post(f"{url}/api/v1/namespaces/{ns}/events", json=core, timeout=10).raise_for_status()
    listed = requests.get(f"{url}{EVENTS_V1}/namespaces/{ns}/events", timeout=10).json()
    assert listed["kind"] == "EventList" and listed["apiVersion"] == "events.k8s.io/v1"
    (event,) = listed["items"]
    assert event["note"] == "assigned" and event["deprecatedCount"] == 3
    assert event["deprecatedSource"] == {"component": "lahar-scheduler"}
    assert event["eventTime"] is None  # written as Go writes a zero MicroTime
    selected = requests.get(
        f"{url}{EVENTS_V1}/namespaces/{ns}/events", params={"fieldSelector": "regarding.name=p2"}, timeout=10
    ).json()
    assert [e["metadata"]["name"] for e in selected["items"]] == ["old"]


def test_events_v1_watch_sees_core_writes(url: str, ns: str) -> None:
    listed = requests.get(f"{url}{EVENTS_V1}/namespaces/{ns}/events", timeout=10).json()
    with requests.get(
        f"{url}{EVENTS_V1}/namespaces/{ns}/events",
        params={"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"], "timeoutSeconds": "5"},
        stream=True,
        timeout=10,
    ) as watch:
        requests.post(
            f"{url}/api/v1/namespaces/{ns}/events",
            json={"metadata": {"name": "w"}, "involvedObject": {"name": "p"}, "message": "m", "reason": "R"},
            timeout=10,
        ).raise_for_status()
        event = json.loads(next(watch.iter_lines()))
    assert event["type"] == "ADDED"
    assert event["object"]["apiVersion"] == "events.k8s.io/v1" and event["object"]["note"] == "m"


def test_events_v1_patch_and_delete(url: str, ns: str) -> None:
    requests.post(f"{url}{EVENTS_V1}/namespaces/{ns}/events", json=new_event("e2"), timeout=10).raise_for_status()
    patched = requests.patch(
        f"{url}{EVENTS_V1}/namespaces/{ns}/events/e2",
        data=json.dumps({"series": {"count": 2, "lastObservedTime": "2026-01-02T03:06:00.000000Z"}}),
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=10,
    )
    assert patched.status_code == 200, patched.text
    core = requests.get(f"{url}/api/v1/namespaces/{ns}/events/e2", timeout=10).json()
    assert core["series"] == {"count": 2, "lastObservedTime": "2026-01-02T03:06:00.000000Z"}
    assert requests.delete(f"{url}{EVENTS_V1}/namespaces/{ns}/events/e2", timeout=10).status_code == 200
    assert requests.get(f"{url}/api/v1/namespaces/{ns}/events/e2", timeout=10).status_code == 404


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"eventTime": None}, "eventTime"),
        ({"type": "Info"}, "type"),
        ({"reportingController": ""}, "reportingController"),
        ({"action": ""}, "action"),
        ({"deprecatedCount": 2}, "deprecatedCount"),
        ({"deprecatedSource": {"component": "x"}}, "deprecatedSource"),
        ({"note": "x" * 1025}, "note"),
    ],
)
def test_events_v1_create_rules(url: str, ns: str, changes: dict[str, Any], field: str) -> None:
    refused = requests.post(f"{url}{EVENTS_V1}/namespaces/{ns}/events", json=new_event("bad", **changes), timeout=10)
    assert refused.status_code == 422, refused.text
    assert field in [cause["field"] for cause in refused.json()["details"]["causes"]]
    assert requests.get(f"{url}/api/v1/namespaces/{ns}/events/bad", timeout=10).status_code == 404


def apply_request(url: str, ns: str, query: str, body: dict[str, Any]) -> requests.Response:
    return requests.patch(
        f"{url}/api/v1/namespaces/{ns}/configmaps/cm{query}",
        data=json.dumps(body),
        headers={"Content-Type": "application/apply-patch+yaml"},
        timeout=10,
    )


def test_apply_needs_a_field_manager_and_force_needs_apply(url: str, ns: str) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1"}}
    missing = apply_request(url, ns, "", body)
    assert missing.status_code == 400 and "fieldManager" in missing.json()["message"]
    created = apply_request(url, ns, "?fieldManager=me", body)
    assert created.status_code == 201, created.text
    assert apply_request(url, ns, "?fieldManager=me", body).status_code == 200
    conflict = apply_request(url, ns, "?fieldManager=you", {**body, "data": {"a": "2"}})
    assert conflict.status_code == 409 and conflict.json()["reason"] == "Conflict"
    forced = apply_request(url, ns, "?fieldManager=you&force=true", {**body, "data": {"a": "2"}})
    assert forced.status_code == 200 and forced.json()["data"] == {"a": "2"}
    merge_with_force = requests.patch(
        f"{url}/api/v1/namespaces/{ns}/configmaps/cm?force=true",
        data=b'{"data":{"b":"1"}}',
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=10,
    )
    assert merge_with_force.status_code == 400
