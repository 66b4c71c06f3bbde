"""Reading Kubernetes protobuf bodies (apiserver/protobuf.py) into the JSON kube-apiserver would
store. The bodies are built here with a minimal encoder of the wire format; kubectl's own bodies
are covered end to end in test_server_kubectl.py."""

from __future__ import annotations

import base64

import pytest

from lahar.apiserver.protobuf import MAGIC, NoProtobufFormError, ProtobufError, decode_body


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def num(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def msg(number: int, payload: bytes | str) -> bytes:
    raw = payload.encode() if isinstance(payload, str) else payload
    return varint(number << 3 | 2) + varint(len(raw)) + raw


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return MAGIC + msg(1, msg(1, api_version) + msg(2, kind)) + msg(2, raw)


def meta(name: str, namespace: str = "") -> bytes:
    # As Go writes an ObjectMeta: every non-pointer field, zero or not, and an empty creationTimestamp.
    return msg(
        1,
        msg(1, name) + msg(2, "") + msg(3, namespace) + msg(5, "") + msg(6, "") + num(7, 0) + msg(8, b""),
    )


def test_a_configmap_reads_as_its_json_with_zero_values_left_out():
    raw = meta("cm1", "team") + msg(2, msg(1, "a") + msg(2, "1")) + msg(3, msg(1, "bin") + msg(2, b"\x00\xff"))
    assert decode_body(envelope("v1", "ConfigMap", raw)) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm1", "namespace": "team"},
        "data": {"a": "1"},
        "binaryData": {"bin": base64.b64encode(b"\x00\xff").decode()},
    }


def test_pointer_zeros_stay_and_embedded_structs_are_promoted():
    # DeploymentSpec.replicas is *int32: an explicit 0 is kept. Probe embeds ProbeHandler.
    probe = msg(1, msg(1, msg(1, "cat") + msg(1, "/ready"))) + num(2, 0)  # exec.command, initialDelaySeconds 0
    container = msg(1, "main") + msg(2, "busybox") + msg(11, probe)
    template = msg(2, msg(2, container))  # PodTemplateSpec.spec.containers
    spec = num(1, 0) + msg(3, template) + msg(2, msg(1, msg(1, "app") + msg(2, "web")))
    obj = decode_body(envelope("apps/v1", "Deployment", meta("web", "ns") + msg(2, spec)))
    assert obj["spec"]["replicas"] == 0
    assert obj["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    assert obj["spec"]["template"]["spec"]["containers"] == [
        {"name": "main", "image": "busybox", "readinessProbe": {"exec": {"command": ["cat", "/ready"]}}}
    ]


def test_special_types_take_their_json_form():
    # Time, IntOrString (int and string), Quantity in a map, negative int32.
    time = msg(8, num(1, 1_700_000_000))
    obj_meta = msg(1, msg(1, "p") + time + num(10, 5))
    port = msg(1, "http") + num(3, 8080)
    probe = msg(1, msg(2, msg(2, num(1, 1) + msg(3, "http")))) + num(2, 3)  # httpGet.port "http"
    resources = msg(8, msg(1, msg(1, "cpu") + msg(2, msg(1, "500m"))))  # limits
    container = msg(1, "c") + msg(6, port) + resources + msg(10, probe)
    spec = msg(2, container) + num(4, (1 << 64) - 1)  # terminationGracePeriodSeconds -1 (int64)
    pod = decode_body(envelope("v1", "Pod", obj_meta + msg(2, spec)))
    assert pod["metadata"]["creationTimestamp"] == "2023-11-14T22:13:20Z"
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 5
    (container_json,) = pod["spec"]["containers"]
    assert container_json["ports"] == [{"name": "http", "containerPort": 8080}]
    assert container_json["resources"] == {"limits": {"cpu": "500m"}}
    assert container_json["livenessProbe"] == {"httpGet": {"port": "http"}, "initialDelaySeconds": 3}
    assert pod["spec"]["terminationGracePeriodSeconds"] == -1


def test_a_custom_resource_has_no_protobuf_form():
    with pytest.raises(NoProtobufFormError, match="Queue"):
        decode_body(envelope("scheduling.volcano.sh/v1beta1", "Queue", meta("q")))


@pytest.mark.parametrize(
    "body",
    [
        b'{"kind":"ConfigMap"}',  # JSON sent as protobuf
        MAGIC + b"\x12\xff",  # a length past the end
        MAGIC + msg(1, msg(1, "v1") + msg(2, "ConfigMap")) + msg(2, msg(1, msg(1, b"\xff\xfe"))),  # not UTF-8
    ],
)
def test_malformed_bodies_are_refused(body: bytes):
    with pytest.raises(ProtobufError):
        decode_body(body)
