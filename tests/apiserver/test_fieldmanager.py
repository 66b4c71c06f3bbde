"""Field managers and server-side apply (apiserver/fieldmanager.py through the registry): who owns
which fields, conflicts and --force-conflicts, fields an applier stops applying, and the
FieldsV1 kube-apiserver writes. The same sequences run against kube-apiserver in the kubectl
battery (tests/kubectl_battery), which compares the outputs line by line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lahar.api import kinds
from lahar.apiserver import fieldmanager
from lahar.apiserver.errors import ApiError
from lahar.apiserver.fieldmanager import APPLY, Manager
from lahar.apiserver.registry import Registry
from lahar.apiserver.store import Store

KUBECTL = Manager("kubectl", APPLY)
TOOL = Manager("tool", APPLY)


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    registry = Registry(Store(tmp_path / "db.sqlite"))
    registry.ensure_defaults()
    return registry


def configmap(**data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}, "data": data}


def apply(registry: Registry, config: dict[str, Any], manager: Manager = KUBECTL, kind: kinds.Kind = kinds.CONFIGMAP):
    name = config["metadata"]["name"]
    return registry.apply(kind, "default", name, json.dumps(config).encode(), manager)[0]


def managers(obj: dict[str, Any]) -> dict[str, Any]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"].get("managedFields", [])}


def test_apply_create_records_the_applied_fields(registry: Registry) -> None:
    created = apply(registry, {**configmap(a="1"), "metadata": {"name": "cm", "labels": {"app": "x"}}})
    entry = created["metadata"]["managedFields"][0]
    assert {k: entry[k] for k in ("manager", "operation", "apiVersion", "fieldsType")} == {
        "manager": "kubectl",
        "operation": "Apply",
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
    }
    # An apply owns what it names; a struct field holding an object is implied by its children.
    assert entry["fieldsV1"] == {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}


def test_a_create_owns_every_field_set_with_maps_marked(registry: Registry) -> None:
    created = registry.create(kinds.CONFIGMAP, "default", configmap(a="1"), manager=Manager("kubectl-create"))
    assert managers(created) == {("kubectl-create", "Update"): {"f:data": {".": {}, "f:a": {}}}}


def test_another_managers_change_conflicts_and_changes_nothing(registry: Registry) -> None:
    before = apply(registry, configmap(a="1", b="1"))
    with pytest.raises(ApiError) as raised:
        apply(registry, configmap(a="2"), TOOL)
    assert raised.value.code == 409 and raised.value.reason == "Conflict"
    assert raised.value.message == 'Apply failed with 1 conflict: conflict with "kubectl": .data.a'
    assert raised.value.details == {
        "causes": [{"type": "FieldManagerConflict", "message": 'conflict with "kubectl"', "field": ".data.a"}]
    }
    assert registry.require(kinds.CONFIGMAP, "default", "cm").obj == before


def test_force_moves_the_field_to_the_applier(registry: Registry) -> None:
    apply(registry, configmap(a="1", b="1"))
    forced = apply(registry, configmap(a="2"), Manager("tool", APPLY, force=True))
    assert forced["data"] == {"a": "2", "b": "1"}
    assert managers(forced) == {
        ("kubectl", "Apply"): {"f:data": {"f:b": {}}},
        ("tool", "Apply"): {"f:data": {"f:a": {}}},
    }


def test_the_same_value_is_shared_without_conflict(registry: Registry) -> None:
    apply(registry, configmap(a="1"))
    shared = apply(registry, configmap(a="1"), TOOL)
    assert set(managers(shared)) == {("kubectl", "Apply"), ("tool", "Apply")}
    # The object did not change, so the new manager has no time and sorts first, as in kube.
    first, second = shared["metadata"]["managedFields"]
    assert first["manager"] == "tool" and "time" not in first
    assert second["manager"] == "kubectl" and second["time"]


def test_fields_no_longer_applied_go_unless_someone_else_owns_them(registry: Registry) -> None:
    apply(registry, {**configmap(a="1", b="1", c="1"), "metadata": {"name": "cm", "labels": {"app": "x"}}})
    apply(registry, configmap(b="1"), TOOL)  # tool co-owns b
    after = apply(registry, configmap(d="1"))
    assert after["data"] == {"b": "1", "d": "1"}
    assert "labels" not in after["metadata"]  # emptied and owned by nobody: gone
    assert managers(after)[("kubectl", "Apply")] == {"f:data": {"f:d": {}}}


def test_an_update_managers_field_conflicts_with_kubes_wording(registry: Registry) -> None:
    registry.create(kinds.CONFIGMAP, "default", configmap(a="1"), manager=Manager("kubectl-create"))
    with pytest.raises(ApiError) as raised:
        apply(registry, configmap(a="2"))
    assert raised.value.message == 'Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.a'


def test_an_update_takes_the_fields_it_changes(registry: Registry) -> None:
    apply(registry, configmap(a="1", b="1"))
    patched = registry.patch(
        kinds.CONFIGMAP,
        "default",
        "cm",
        b'{"data":{"a":"9"}}',
        "application/merge-patch+json",
        manager=Manager("kubectl-patch"),
    )
    assert managers(patched) == {
        ("kubectl", "Apply"): {"f:data": {"f:b": {}}},
        ("kubectl-patch", "Update"): {"f:data": {"f:a": {}}},
    }
    entries = patched["metadata"]["managedFields"]
    assert [e["operation"] for e in entries] == ["Apply", "Update"]  # Apply entries first, as kube sorts


def test_several_conflicts_are_listed_by_manager(registry: Registry) -> None:
    apply(registry, configmap(a="1"))
    apply(registry, configmap(b="1"), TOOL)
    with pytest.raises(ApiError) as raised:
        apply(registry, configmap(a="2", b="2"), Manager("third", APPLY))
    assert raised.value.message == (
        'Apply failed with 2 conflicts: conflicts with "kubectl":\n- .data.a\nconflicts with "tool":\n- .data.b'
    )


def deployment(image: str, name: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
        },
    }


def test_keyed_list_items_are_owned_by_key(registry: Registry) -> None:
    created = apply(registry, deployment("busybox"), kind=kinds.DEPLOYMENT)
    fields = managers(created)[("kubectl", "Apply")]
    assert fields["f:spec"]["f:selector"] == {}  # a LabelSelector is atomic
    assert fields["f:spec"]["f:template"]["f:spec"]["f:containers"] == {
        'k:{"name":"main"}': {".": {}, "f:image": {}, "f:name": {}}
    }
    image_only = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}},
    }
    with pytest.raises(ApiError) as raised:
        apply(registry, image_only, TOOL, kinds.DEPLOYMENT)
    assert raised.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl": .spec.template.spec.containers[name="main"].image'
    )


def test_status_is_not_owned_through_the_main_resource(registry: Registry) -> None:
    config = {**deployment("busybox"), "status": {"replicas": 3}}
    created = apply(registry, config, kind=kinds.DEPLOYMENT)
    assert "f:status" not in managers(created)[("kubectl", "Apply")]
    assert "replicas" not in (created.get("status") or {})


def test_a_create_of_a_deployment_marks_pointers_not_structs(registry: Registry) -> None:
    created = registry.create(kinds.DEPLOYMENT, "default", deployment("busybox"), manager=Manager("kubectl-create"))
    fields = managers(created)[("kubectl-create", "Update")]
    # Go's zero Deployment has spec, strategy and template (structs held by value), not rollingUpdate
    # or labels (a pointer and a map): only those are marked as owned themselves.
    assert "." not in fields["f:spec"] and "." not in fields["f:spec"]["f:strategy"]
    assert "." in fields["f:spec"]["f:strategy"]["f:rollingUpdate"]
    assert "." in fields["f:spec"]["f:template"]["f:metadata"]["f:labels"]


def test_fields_v1_round_trips() -> None:
    tree = {"f:data": {".": {}, "f:a": {}}, "f:spec": {"f:containers": {'k:{"name":"x"}': {".": {}, "f:image": {}}}}}
    assert fieldmanager.encode_fields(fieldmanager.decode_fields(tree)) == tree


def test_an_owned_node_under_an_owned_parent_keeps_its_marker(registry: Registry) -> None:
    # As kube writes a container's ports: the container, its ports list and each port are owned
    # and have children, so each carries `.` (the mark of a node right under a marked one was lost).
    web = deployment("busybox")
    web["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
    created = registry.create(kinds.DEPLOYMENT, "default", web, manager=Manager("kubectl-create"))
    container = managers(created)[("kubectl-create", "Update")]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert container['k:{"name":"main"}']["f:ports"] == {
        ".": {},
        'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}, "f:protocol": {}},
    }
    tree = {"f:spec": {"f:containers": container}}
    assert fieldmanager.encode_fields(fieldmanager.decode_fields(tree)) == tree


def test_sent_managed_fields_reset_with_an_empty_entry(registry: Registry) -> None:
    apply(registry, configmap(a="1"))
    current = registry.require(kinds.CONFIGMAP, "default", "cm").obj
    body = {**current, "metadata": {**current["metadata"], "managedFields": [{}]}}
    updated = registry.update(kinds.CONFIGMAP, "default", "cm", body, manager=Manager("editor"))
    assert "managedFields" not in updated["metadata"]


def test_a_body_without_managed_fields_keeps_the_live_ones(registry: Registry) -> None:
    apply(registry, configmap(a="1"))
    current = registry.require(kinds.CONFIGMAP, "default", "cm").obj
    body = {**current, "metadata": {k: v for k, v in current["metadata"].items() if k != "managedFields"}}
    body["data"] = {"a": "1", "b": "2"}
    updated = registry.update(kinds.CONFIGMAP, "default", "cm", body, manager=Manager("editor"))
    assert managers(updated) == {
        ("kubectl", "Apply"): {"f:data": {"f:a": {}}},
        ("editor", "Update"): {"f:data": {"f:b": {}}},
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"- a\n", "the applied configuration must be an object"),
        (b"kind: ConfigMap\nmetadata: {name: cm}\n", "apiVersion must be set in an applied configuration"),
        (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n", "does not match the name on the URL"),
        (b"apiVersion: v1\nkind: Secret\nmetadata: {name: cm}\n", "does not match the expected kind"),
    ],
)
def test_bad_applied_configurations_are_refused(registry: Registry, body: bytes, message: str) -> None:
    with pytest.raises(ApiError) as raised:
        registry.apply(kinds.CONFIGMAP, "default", "cm", body, KUBECTL)
    assert raised.value.code == 400 and message in raised.value.message
    assert registry.store.get(kinds.CONFIGMAP, "default", "cm") is None


# -- an Update on the encoded entries gives what decoding, updating and encoding them all gives ----------------

ELEMENTS = [("f", "a"), ("f", "b"), ("f", "spec"), ("k", '{"name":"x"}'), ("v", '"s"'), ("i", "0"), ("i", "10")]
paths = st.lists(st.sampled_from(ELEMENTS), min_size=1, max_size=3).map(tuple)
field_sets = st.frozensets(paths, max_size=6)
update_managers = st.sampled_from(
    [Manager("ctl"), Manager("ctl", subresource="status"), Manager("node", subresource="status"), Manager("kubectl")]
)


@st.composite
def live_entries(draw: st.DrawFn) -> list[dict[str, Any]]:
    """managedFields as the server stores them: encoded by the module, each manager once."""
    entries = []
    for name, operation, subresource in draw(
        st.lists(
            st.sampled_from(
                [
                    ("ctl", "Update", ""),
                    ("ctl", "Update", "status"),
                    ("node", "Update", "status"),
                    ("kubectl", "Apply", ""),
                    ("kubectl", "Update", ""),
                ]
            ),
            unique=True,
            max_size=4,
        )
    ):
        time = draw(st.sampled_from(["", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"]))
        entries.append(fieldmanager.ManagerEntry(name, operation, "v1", time, draw(field_sets), subresource))
    return fieldmanager.encode_entries(entries)


@given(live_entries(), field_sets, field_sets, update_managers)
@settings(max_examples=400, deadline=None)
def test_an_update_keeps_untouched_entries_as_encoded_and_agrees_with_decoding_them(
    live: list[dict[str, Any]], changed: frozenset[Any], removed: frozenset[Any], manager: Manager
) -> None:
    removed = removed - changed  # a comparison never both changes and removes a path
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fieldmanager, "now_time", lambda: "2026-01-03T00:00:00Z")
        fast = fieldmanager._update_encoded(live, changed, removed, "v1", manager)
        slow = fieldmanager._update_decoded(fieldmanager.decode_entries(live), changed, removed, "v1", manager)
    assert json.dumps(fast) == json.dumps(slow)  # the same entries, in the same order, keys in the same order


def test_a_status_update_keeps_the_creators_entry_as_it_was(registry: Registry) -> None:
    pod = {
        "metadata": {"name": "p", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    created = registry.create(kinds.POD, "default", pod, manager=Manager("ctl"))
    patch = json.dumps({"status": {"phase": "Running"}}).encode()
    patched = registry.patch(
        kinds.POD,
        "default",
        "p",
        patch,
        "application/merge-patch+json",
        "status",
        manager=Manager("node", subresource="status"),
    )
    creator = created["metadata"]["managedFields"][0]
    assert patched["metadata"]["managedFields"][0] is creator  # not decoded and encoded again
    assert managers(patched)[("node", "Update")] == {"f:status": {"f:phase": {}}}
