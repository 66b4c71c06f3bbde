"""PATCH semantics: JSON merge patch, JSON patch, strategic merge patch and Content-Type dispatch."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lahar.apiserver.patch import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    PatchError,
    UnsupportedPatchError,
    apply_patch,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)


def make_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "shop",
            "labels": {"app": "web", "tier": "frontend"},
            "finalizers": ["lahar.io/a", "lahar.io/b"],
            "ownerReferences": [{"uid": "u1", "kind": "Job", "name": "j"}],
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "nginx:1.25",
                    "env": [{"name": "MODE", "value": "prod"}, {"name": "LEVEL", "value": "info"}],
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {"name": "sidecar", "image": "busybox:1.36", "args": ["sleep", "infinity"]},
            ],
            "volumes": [{"name": "data", "hostPath": {"path": "/srv/data"}}],
            "tolerations": [{"key": "a", "operator": "Exists"}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


# --- RFC 7386 JSON merge patch ------------------------------------------------------------------


def test_merge_patch_merges_objects_replaces_the_rest_and_null_deletes() -> None:
    pod = make_pod()
    result = json_merge_patch(
        pod,
        {
            "metadata": {"labels": {"tier": None, "track": "stable"}, "annotations": {"a": "1"}},
            "spec": {"containers": [{"name": "only", "image": "x"}]},
            "status": None,
        },
    )
    assert result["metadata"]["labels"] == {"app": "web", "track": "stable"}
    assert result["metadata"]["annotations"] == {"a": "1"}
    assert result["metadata"]["name"] == "web-0"
    assert result["spec"]["containers"] == [{"name": "only", "image": "x"}]  # lists replace
    assert "status" not in result


def test_merge_patch_replaces_scalar_with_object_and_drops_nulls_inside_new_objects() -> None:
    result = json_merge_patch({"a": "scalar"}, {"a": {"b": 1, "c": None}})
    assert result == {"a": {"b": 1}}


def test_merge_patch_does_not_mutate_inputs_or_share_structure() -> None:
    pod, patch = make_pod(), {"metadata": {"labels": {"app": "db"}}, "spec": {"tolerations": [{"key": "b"}]}}
    pod_before, patch_before = copy.deepcopy(pod), copy.deepcopy(patch)
    result = json_merge_patch(pod, patch)
    assert (pod, patch) == (pod_before, patch_before)
    result["spec"]["containers"][0]["image"] = "changed"
    result["spec"]["tolerations"][0]["key"] = "changed"
    assert (pod, patch) == (pod_before, patch_before)


# --- RFC 6902 JSON patch --------------------------------------------------------------------------


def test_json_patch_operations() -> None:
    result = json_patch(
        make_pod(),
        [
            {"op": "test", "path": "/metadata/name", "value": "web-0"},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.26"},
            {"op": "add", "path": "/metadata/labels/track", "value": "canary"},
            {"op": "remove", "path": "/metadata/labels/tier"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "lahar.io/c"},
            {"op": "copy", "from": "/metadata/name", "path": "/metadata/labels/name"},
            {"op": "move", "from": "/status/phase", "path": "/status/oldPhase"},
        ],
    )
    assert container(result, "web")["image"] == "nginx:1.26"
    assert result["metadata"]["labels"] == {"app": "web", "track": "canary", "name": "web-0"}
    assert result["metadata"]["finalizers"][-1] == "lahar.io/c"
    assert result["status"]["oldPhase"] == "Running" and "phase" not in result["status"]


@pytest.mark.parametrize(
    ("operations", "message"),
    [
        (
            [{"op": "test", "path": "/metadata/name", "value": "other"}],
            'JSON patch operation 0 (test /metadata/name): test failed: the value at /metadata/name is not "other"',
        ),
        (
            [{"op": "add", "path": "/metadata/labels/x", "value": "1"}, {"op": "remove", "path": "/spec/nope"}],
            "JSON patch operation 1 (remove /spec/nope): path does not exist",
        ),
        (
            [{"op": "replace", "path": "/spec/nope/deeper", "value": 1}],
            "JSON patch operation 0 (replace /spec/nope/deeper): path does not exist (member 'nope' not found)",
        ),
        (
            [{"op": "move", "from": "/spec/nope", "path": "/spec/other"}],
            "JSON patch operation 0 (move /spec/nope -> /spec/other): path does not exist",
        ),
        ([{"op": "frobnicate", "path": "/a"}], "JSON patch operation 0 (frobnicate /a): invalid operation"),
        ([{"path": "/a"}], "JSON patch operation 0 (None /a): invalid operation"),
        ([{"op": "add", "path": "/a"}], "invalid operation: The operation does not contain a 'value' member"),
        (
            [{"op": "add", "path": "metadata", "value": 1}],
            "JSON patch operation 0 (add metadata): Location must start with /",
        ),
        (
            [{"op": "add", "path": "/metadata/name/x", "value": 1}],
            "path goes through a value that is neither an object nor an array",
        ),
        (["remove"], "JSON patch operation 0 must be an object, got a string"),
        (
            [{"op": "replace", "path": "", "value": [1]}],
            "the JSON patch turns the object into an array; the result must be an object",
        ),
    ],
)
def test_json_patch_errors(operations: list[Any], message: str) -> None:
    with pytest.raises(PatchError) as raised:
        json_patch(make_pod(), operations)
    assert message in str(raised.value)


def test_json_patch_does_not_mutate_inputs_or_share_structure() -> None:
    pod = make_pod()
    operations = [{"op": "add", "path": "/spec/extra", "value": {"nested": [1]}}]
    pod_before, operations_before = copy.deepcopy(pod), copy.deepcopy(operations)
    result = json_patch(pod, operations)
    result["spec"]["extra"]["nested"].append(2)
    result["metadata"]["labels"]["app"] = "changed"
    assert (pod, operations) == (pod_before, operations_before)


def test_json_patch_failure_leaves_target_untouched() -> None:
    pod = make_pod()
    with pytest.raises(PatchError):
        json_patch(pod, [{"op": "remove", "path": "/metadata/labels"}, {"op": "remove", "path": "/x"}])
    assert pod == make_pod()


# --- strategic merge patch -----------------------------------------------------------------------


def test_container_image_merges_by_name_keeping_other_containers() -> None:
    patch = {"spec": {"containers": [{"name": "web", "image": "nginx:1.26"}]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    web = container(result, "web")
    assert web["image"] == "nginx:1.26"
    assert web["env"] == make_pod()["spec"]["containers"][0]["env"]  # untouched fields stay
    assert container(result, "sidecar") == make_pod()["spec"]["containers"][1]
    assert [c["name"] for c in result["spec"]["containers"]] == ["web", "sidecar"]


def test_new_container_is_appended() -> None:
    logger = {"name": "logger", "image": "fluent-bit", "env": [{"name": "X", "value": None}]}
    patch = {"spec": {"containers": [logger]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert [c["name"] for c in result["spec"]["containers"]] == ["web", "sidecar", "logger"]
    assert container(result, "logger") == {"name": "logger", "image": "fluent-bit", "env": [{"name": "X"}]}


def test_env_merges_by_name() -> None:
    patch = {
        "spec": {
            "containers": [{"name": "web", "env": [{"name": "LEVEL", "value": "debug"}, {"name": "NEW", "value": "1"}]}]
        }
    }
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert container(result, "web")["env"] == [
        {"name": "MODE", "value": "prod"},
        {"name": "LEVEL", "value": "debug"},
        {"name": "NEW", "value": "1"},
    ]


def test_env_value_from_is_a_plain_map() -> None:
    pod = make_pod()
    container(pod, "web")["env"][0] = {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "k"}}}
    env = [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"key": "k2"}}}]
    patch = {"spec": {"containers": [{"name": "web", "env": env}]}}
    result = strategic_merge_patch(pod, patch, "Pod")
    assert container(result, "web")["env"][0]["valueFrom"] == {"configMapKeyRef": {"name": "a", "key": "k2"}}


def test_patch_delete_directive_removes_list_element() -> None:
    patch = {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert [c["name"] for c in result["spec"]["containers"]] == ["web"]


def test_patch_delete_directive_on_nested_list_element() -> None:
    patch = {"spec": {"containers": [{"name": "web", "env": [{"name": "MODE", "$patch": "delete"}]}]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert container(result, "web")["env"] == [{"name": "LEVEL", "value": "info"}]


def test_patch_delete_directive_on_map_removes_it() -> None:
    result = strategic_merge_patch(make_pod(), {"metadata": {"labels": {"$patch": "delete"}}}, "Pod")
    assert "labels" not in result["metadata"]
    assert result["metadata"]["name"] == "web-0"


def test_patch_delete_directive_at_top_level_empties_the_object() -> None:
    assert strategic_merge_patch(make_pod(), {"$patch": "delete"}, "Pod") == {}


def test_patch_replace_directive_on_map() -> None:
    patch = {"metadata": {"labels": {"$patch": "replace", "only": "this"}}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert result["metadata"]["labels"] == {"only": "this"}


def test_patch_replace_directive_in_list() -> None:
    patch = {"spec": {"containers": [{"name": "solo", "image": "x"}, {"$patch": "replace"}]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert result["spec"]["containers"] == [{"name": "solo", "image": "x"}]


def test_patch_replace_directive_in_primitive_list() -> None:
    patch = {"metadata": {"finalizers": ["lahar.io/z", {"$patch": "replace"}]}}
    assert strategic_merge_patch(make_pod(), patch, "Pod")["metadata"]["finalizers"] == ["lahar.io/z"]


def test_patch_merge_directive_is_the_default() -> None:
    patch = {
        "metadata": {"labels": {"$patch": "merge", "track": "stable"}},
        "spec": {"containers": [{"name": "web", "$patch": "merge", "image": "nginx:2"}, {"$patch": "merge"}]},
    }
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert result["metadata"]["labels"] == {"app": "web", "tier": "frontend", "track": "stable"}
    assert [c["name"] for c in result["spec"]["containers"]] == ["web", "sidecar"]
    assert container(result, "web")["image"] == "nginx:2"
    assert "$patch" not in container(result, "web")


def test_set_element_order_on_keyed_list() -> None:
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "logger"}, {"name": "web"}],
            "containers": [{"name": "logger", "image": "fluent-bit"}],
        }
    }
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    # Listed elements first in the given order, then the unlisted ones.
    assert [c["name"] for c in result["spec"]["containers"]] == ["logger", "web", "sidecar"]


def test_set_element_order_on_primitive_list_and_nested_list() -> None:
    pod = make_pod()
    pod["metadata"]["finalizers"] = ["a", "b", "c", "d"]
    patch = {
        "metadata": {"$setElementOrder/finalizers": ["c", "a"]},
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "$setElementOrder/env": [{"name": "LEVEL"}, {"name": "MODE"}],
                }
            ]
        },
    }
    result = strategic_merge_patch(pod, patch, "Pod")
    assert result["metadata"]["finalizers"] == ["c", "a", "b", "d"]
    assert [e["name"] for e in container(result, "web")["env"]] == ["LEVEL", "MODE"]


def test_retain_keys_clears_unlisted_fields() -> None:
    patch = {
        "spec": {"volumes": [{"name": "data", "emptyDir": {}, "hostPath": None, "$retainKeys": ["emptyDir", "name"]}]}
    }
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert result["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


def test_retain_keys_without_patched_values_drops_other_fields() -> None:
    result = strategic_merge_patch(
        {"strategy": {"type": "A", "rollingUpdate": {"x": 1}}},
        {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}},
        "Deployment",
    )
    assert result == {"strategy": {"type": "Recreate"}}


def test_delete_from_primitive_list() -> None:
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["lahar.io/a", "not-there"]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert result["metadata"]["finalizers"] == ["lahar.io/b"]


def test_delete_from_primitive_list_of_absent_field_is_a_no_op() -> None:
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}
    result = strategic_merge_patch({"metadata": {}}, patch, "Pod")
    assert result == {"metadata": {}}


def test_finalizers_merge_as_a_set() -> None:
    patch = {"metadata": {"finalizers": ["lahar.io/b", "lahar.io/c", "lahar.io/c"]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert result["metadata"]["finalizers"] == ["lahar.io/a", "lahar.io/b", "lahar.io/c"]


def test_finalizers_add_and_delete_in_one_patch() -> None:
    patch = {"metadata": {"finalizers": ["lahar.io/c"], "$deleteFromPrimitiveList/finalizers": ["lahar.io/a"]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert result["metadata"]["finalizers"] == ["lahar.io/b", "lahar.io/c"]


def test_container_ports_merge_by_container_port() -> None:
    ports = [{"containerPort": 80, "name": "web"}, {"containerPort": 443}]
    patch = {"spec": {"containers": [{"name": "web", "ports": ports}]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert container(result, "web")["ports"] == [{"containerPort": 80, "name": "web"}, {"containerPort": 443}]


def test_service_ports_merge_by_port() -> None:
    service = {
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"app": "web"},
            "ports": [{"port": 80, "targetPort": 8080, "name": "http"}, {"port": 443, "name": "https"}],
        },
    }
    patch = {"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 8443, "name": "alt"}]}}
    result = strategic_merge_patch(service, patch, "Service")
    assert result["spec"]["ports"] == [
        {"port": 80, "targetPort": 9090, "name": "http"},
        {"port": 443, "name": "https"},
        {"port": 8443, "name": "alt"},
    ]


def test_service_port_elements_need_their_merge_key() -> None:
    # Same shape that is fine for a container (containerPort) is missing the Service key.
    with pytest.raises(PatchError, match=r"spec\.ports: element .* does not contain its merge key 'port'"):
        strategic_merge_patch({"spec": {"ports": []}}, {"spec": {"ports": [{"containerPort": 80}]}}, "Service")


def test_lists_without_merge_key_are_replaced() -> None:
    patch = {
        "spec": {
            "tolerations": [{"key": "b", "operator": "Exists"}],
            "containers": [{"name": "sidecar", "args": ["sleep", "1"]}],
        }
    }
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert result["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert container(result, "sidecar")["args"] == ["sleep", "1"]


def test_conditions_merge_by_type_and_owner_references_by_uid() -> None:
    patch = {
        "metadata": {"ownerReferences": [{"uid": "u2", "kind": "Job", "name": "k"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]},
    }
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert [o["uid"] for o in result["metadata"]["ownerReferences"]] == ["u1", "u2"]
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "False"},
        {"type": "PodScheduled", "status": "True"},
    ]


def test_node_addresses_and_conditions_merge_by_type() -> None:
    node = {
        "metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    patch = {
        "spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
            "conditions": [{"type": "MemoryPressure", "status": "False"}],
        },
    }
    result = strategic_merge_patch(node, patch, "Node")
    assert result["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]  # taints replace
    assert result["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.2"},
        {"type": "Hostname", "address": "n1"},
    ]
    assert [c["type"] for c in result["status"]["conditions"]] == ["Ready", "MemoryPressure"]


def test_pod_template_nested_in_a_workload_merges_containers() -> None:
    deployment = {"metadata": {"name": "d"}, "spec": {"replicas": 1, "template": {"spec": make_pod()["spec"]}}}
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}
    for kind in ("Deployment", "SomeUnlistedBuiltinKind"):
        result = strategic_merge_patch(deployment, patch, kind)
        names = [c["name"] for c in result["spec"]["template"]["spec"]["containers"]]
        assert names == ["web", "sidecar"], kind
    cron_job = {"spec": {"jobTemplate": {"spec": {"template": {"spec": make_pod()["spec"]}}}}}
    pod_spec_patch = {"containers": [{"name": "web", "image": "x"}]}
    cron_patch = {"spec": {"jobTemplate": {"spec": {"template": {"spec": pod_spec_patch}}}}}
    result = strategic_merge_patch(cron_job, cron_patch, "CronJob")
    assert len(result["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]) == 2


def test_null_deletes_a_key() -> None:
    patch = {"metadata": {"labels": {"tier": None}}, "spec": {"containers": [{"name": "web", "ports": None}]}}
    result = strategic_merge_patch(make_pod(), patch, "Pod")
    assert result["metadata"]["labels"] == {"app": "web"}
    assert "ports" not in container(result, "web")


def test_config_map_data_merges() -> None:
    config_map = {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}
    result = strategic_merge_patch(config_map, {"data": {"a": None, "c": "3"}}, "ConfigMap")
    assert result["data"] == {"b": "2", "c": "3"}


def test_strategic_merge_does_not_mutate_inputs_or_share_structure() -> None:
    pod = make_pod()
    patch = {
        "metadata": {"finalizers": ["lahar.io/c"], "$deleteFromPrimitiveList/finalizers": ["lahar.io/a"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "web"}],
            "containers": [
                {"name": "web", "env": [{"name": "MODE", "$patch": "delete"}]},
                {"name": "new", "args": ["a"]},
            ],
            "tolerations": [{"key": "b"}],
        },
    }
    pod_before, patch_before = copy.deepcopy(pod), copy.deepcopy(patch)
    result = strategic_merge_patch(pod, patch, "Pod")
    assert (pod, patch) == (pod_before, patch_before)
    container(result, "sidecar")["image"] = "changed"
    container(result, "new")["args"].append("b")
    result["spec"]["tolerations"][0]["key"] = "changed"
    result["metadata"]["labels"]["app"] = "changed"
    assert (pod, patch) == (pod_before, patch_before)


def test_kubectl_apply_shaped_patch() -> None:
    """What `kubectl apply` sends after editing one image in a two-container Pod manifest."""
    old_applied = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}, {"name": "sidecar", "image": "busybox:1.36"}]},
    }
    new_applied = copy.deepcopy(old_applied)
    new_applied["spec"]["containers"][0]["image"] = "nginx:1.26"
    annotation = "kubectl.kubernetes.io/last-applied-configuration"
    live = make_pod()
    live["metadata"]["annotations"] = {annotation: json.dumps(old_applied) + "\n", "other": "kept"}
    patch_body = json.dumps(
        {
            "metadata": {"annotations": {annotation: json.dumps(new_applied) + "\n"}},
            "spec": {
                "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
                "containers": [{"image": "nginx:1.26", "name": "web"}],
            },
        }
    )
    result = apply_patch(live, patch_body, "application/strategic-merge-patch+json", "Pod", True)
    assert json.loads(result["metadata"]["annotations"][annotation]) == new_applied
    assert result["metadata"]["annotations"]["other"] == "kept"
    assert [(c["name"], c["image"]) for c in result["spec"]["containers"]] == [
        ("web", "nginx:1.26"),
        ("sidecar", "busybox:1.36"),
    ]
    assert container(result, "web")["env"] == container(live, "web")["env"]
    assert result["status"] == live["status"]
    assert result["metadata"]["finalizers"] == live["metadata"]["finalizers"]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"metadata": {"$bogus": 1}}, "unknown strategic merge patch directive '$bogus' at metadata"),
        ({"$setElementOrder/": []}, "unknown strategic merge patch directive '$setElementOrder/' at <root>"),
        ({"metadata": {"labels": {"$patch": "explode"}}}, "unknown $patch value 'explode' at metadata.labels"),
        (
            {"spec": {"containers": [{"name": "web", "$patch": "explode"}]}},
            "unknown $patch value 'explode' in list spec.containers",
        ),
        (
            {"spec": {"containers": [{"$patch": "delete"}]}},
            "spec.containers: element {'$patch': 'delete'} does not contain its merge key 'name'",
        ),
        (
            {"spec": {"containers": [{"image": "x"}]}},
            "spec.containers: element {'image': 'x'} does not contain its merge key 'name'",
        ),
        (
            {"spec": {"containers": ["web"]}},
            "spec.containers: elements must be objects identified by 'name', got a string",
        ),
        (
            {"spec": {"containers": [{"name": "web", "env": [{"name": "A", "$bogus": 1}]}]}},
            "unknown strategic merge patch directive '$bogus' at spec.containers[name=web].env[name=A]",
        ),
        (
            {"metadata": {"finalizers": [{"$patch": "delete"}]}},
            "$patch: delete is not supported in the list of primitives metadata.finalizers; "
            "use $deleteFromPrimitiveList/finalizers",
        ),
        (
            {"spec": {"volumes": [{"name": "data", "emptyDir": {}, "$retainKeys": ["name"]}]}},
            "$retainKeys at spec.volumes[name=data] does not list patched fields: emptyDir",
        ),
        ({"spec": {"$retainKeys": "containers"}}, "$retainKeys at spec must be a list of field names"),
        (
            {"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}},
            "$deleteFromPrimitiveList/finalizers at metadata.finalizers must be a list",
        ),
        (
            {"metadata": {"$setElementOrder/finalizers": "a"}},
            "$setElementOrder/finalizers at metadata.finalizers must be a list",
        ),
        ({"spec": {"$setElementOrder/containers": [{"image": "x"}]}}, "does not contain merge key 'name'"),
    ],
)
def test_strategic_merge_errors(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(PatchError) as raised:
        strategic_merge_patch(make_pod(), patch, "Pod")
    assert message in str(raised.value)


# --- apply_patch: Content-Type dispatch -----------------------------------------------------------


def test_dispatch_merge_patch_with_charset_parameter() -> None:
    body = b'{"spec": {"containers": [{"name": "only"}]}}'
    result = apply_patch(make_pod(), body, "application/merge-patch+json; charset=utf-8", "Pod", True)
    assert result["spec"]["containers"] == [{"name": "only"}]


def test_dispatch_strategic_merge_patch() -> None:
    body = '{"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}'
    result = apply_patch(make_pod(), body, STRATEGIC_MERGE_PATCH, "Pod", True)
    assert [c["image"] for c in result["spec"]["containers"]] == ["nginx:2", "busybox:1.36"]


def test_strategic_merge_patch_unsupported_for_custom_resources() -> None:
    with pytest.raises(UnsupportedPatchError) as raised:
        apply_patch({"spec": {}}, b"{}", STRATEGIC_MERGE_PATCH, "Job", strategic_supported=False)
    assert str(raised.value) == (
        "the body of the request was in an unknown format ('application/strategic-merge-patch+json') - "
        "accepted media types include: application/json-patch+json, application/merge-patch+json, "
        "application/apply-patch+yaml"
    )
    assert isinstance(raised.value, PatchError)


def test_unknown_content_type_is_unsupported() -> None:
    expected = r"unknown format \('text/plain'\).*strategic-merge-patch\+json"
    with pytest.raises(UnsupportedPatchError, match=expected):
        apply_patch(make_pod(), b"{}", "text/plain", "Pod", strategic_supported=True)


def test_dispatch_json_patch() -> None:
    body = b'[{"op": "replace", "path": "/metadata/labels/app", "value": "db"}]'
    assert apply_patch(make_pod(), body, JSON_PATCH, "Pod", False)["metadata"]["labels"]["app"] == "db"


def test_dispatch_apply_patch_yaml_is_a_merge_patch() -> None:
    body = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  labels:\n    tier: null\n"
        "  annotations:\n    deployed: 2024-05-01T10:00:00Z\n"
        "spec:\n  containers:\n  - name: web\n    image: nginx:2\n"
    )
    result = apply_patch(make_pod(), body, APPLY_PATCH, "Pod", True)
    assert result["metadata"]["labels"] == {"app": "web"}
    assert result["metadata"]["annotations"] == {"deployed": "2024-05-01T10:00:00Z"}  # stays a string
    assert result["spec"]["containers"] == [{"name": "web", "image": "nginx:2"}]
    assert result["status"] == make_pod()["status"]


def test_dispatch_apply_patch_accepts_json() -> None:
    result = apply_patch(make_pod(), b'{"metadata": {"labels": {"x": "y"}}}', APPLY_PATCH, "Pod", False)
    assert result["metadata"]["labels"]["x"] == "y"


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b'{"metadata": ', MERGE_PATCH, "merge patch body is not valid JSON: Expecting value: line 1 column 14"),
        (b"{'a': 1}", STRATEGIC_MERGE_PATCH, "strategic merge patch body is not valid JSON: Expecting property name"),
        (b'[{"op": "add"', JSON_PATCH, "JSON patch body is not valid JSON"),
        (b'{"a": NaN}', MERGE_PATCH, "merge patch body is not valid JSON: NaN is not valid JSON"),
        (b"", MERGE_PATCH, "merge patch body is empty"),
        (b"  \n", APPLY_PATCH, "apply patch body is empty"),
        (b"\xff\xfe", MERGE_PATCH, "patch body is not valid UTF-8"),
        (b"[1, 2]", MERGE_PATCH, "a merge patch must be a JSON object, got an array"),
        (b'"text"', STRATEGIC_MERGE_PATCH, "a strategic merge patch must be a JSON object, got a string"),
        (b'{"op": "add"}', JSON_PATCH, "a JSON patch must be a JSON array of operations, got an object"),
        (b"metadata: [unclosed", APPLY_PATCH, "apply patch body is not valid YAML or JSON"),
        (b"- a\n- b\n", APPLY_PATCH, "a apply patch must be a JSON object, got an array"),
        (b'[{"op": "remove", "path": ""}]', JSON_PATCH, 'operation 0 (remove ""): can\'t remove the whole document'),
    ],
)
def test_dispatch_errors(body: bytes, content_type: str, message: str) -> None:
    with pytest.raises(PatchError) as raised:
        apply_patch(make_pod(), body, content_type, "Pod", True)
    assert not isinstance(raised.value, UnsupportedPatchError)
    assert message in str(raised.value)


def test_apply_patch_does_not_mutate_target() -> None:
    pod = make_pod()
    for body, content_type in [
        (b'{"metadata": {"labels": null}}', MERGE_PATCH),
        (b'{"metadata": {"labels": null}}', STRATEGIC_MERGE_PATCH),
        (b'[{"op": "remove", "path": "/metadata/labels"}]', JSON_PATCH),
        (b"metadata:\n  labels: null\n", APPLY_PATCH),
    ]:
        assert "labels" not in apply_patch(pod, body, content_type, "Pod", True)["metadata"]
    assert pod == make_pod()
