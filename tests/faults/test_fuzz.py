"""Property-based abuse of every decoder and validator that takes outside input (issue 15): the API
server's body decoder and its object rules (through the Registry, with a real store), the
scheduler's configuration parser, the agent's QoS configuration and the gRPC report decoder.
Whatever the input: only the component's own refusal (never another exception, which the server
would answer as a 5xx or a program would die of), and a refused write changes nothing.

LAHAR_FUZZ_EXAMPLES sets the examples per property (`lahar bench faults --mode long` raises it);
LAHAR_FUZZ_COUNTS names a file that receives "fuzz: <target> <inputs tried>" lines."""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lahar.agent.qos.config import QosConfig
from lahar.api import kinds
from lahar.apiserver import limits
from lahar.apiserver.errors import ApiError
from lahar.apiserver.registry import Registry
from lahar.apiserver.store import Store
from lahar.rpc.convert import report_from_proto, validate_report
from lahar.rpc.v1 import agent_pb2 as pb
from lahar.scheduler.conf import parse_conf
from lahar.scheduler.framework.plugin import ConfError

# Not the unit lane: a few seconds per property is more than `make test-fast` should wait.
pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("LAHAR_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=EXAMPLES <= 200,  # make test: the same inputs each run; the bench: new ones
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TRIED: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def report_counts() -> Iterator[None]:
    yield
    lines = "".join(f"fuzz: {target} {count}\n" for target, count in sorted(TRIED.items()))
    destination = os.environ.get("LAHAR_FUZZ_COUNTS")
    if destination:
        with open(destination, "a") as file:
            file.write(lines)


# --- what hostile JSON looks like -----------------------------------------------------------------

KEYS = st.sampled_from(
    [
        "metadata", "spec", "status", "name", "namespace", "labels", "annotations", "tasks", "replicas",
        "minAvailable", "template", "containers", "resources", "requests", "limits", "cpu", "memory",
        "weight", "capability", "minMember", "queue", "policies", "event", "action", "priority",
        "nodeName", "image", "ownerReferences", "uid", "generation", "finalizers", "x", "",
    ]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["1e400", "NaN", "-1", "500m", "8Ei", "1Gi", "0.1n", "9e18", "Infinity", "default", "a" * 300]),
)
JSONISH = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=6),
    max_leaves=30,
)
OBJECTS = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({"name": st.sampled_from(["fuzzed", "f-1", "", "UPPER", "a" * 300])})},
    optional={"spec": JSONISH, "status": JSONISH, "kind": st.text(max_size=8), "apiVersion": st.text(max_size=8)},
)
FUZZED_KINDS = [kinds.JOB, kinds.PODGROUP, kinds.QUEUE, kinds.POD, kinds.NODE, kinds.CONFIGMAP, kinds.LEASE]


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_body_decoder_refuses_or_decodes(raw: bytes) -> None:
    TRIED["API body decoder (bytes)"] += 1
    try:
        limits.decode_body(raw)
    except ApiError as error:
        assert error.code == 400


@FUZZ
@given(st.recursive(SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3)))
def test_body_decoder_round_trips_what_go_would_decode(value: Any) -> None:
    TRIED["API body decoder (JSON)"] += 1
    raw = json.dumps(value).encode()
    try:
        assert limits.loads(raw) == value
    except ValueError:
        assert "out of range" in json.dumps(value) or any(
            isinstance(v, int) and not limits.INT64_MIN <= v <= limits.INT64_MAX for v in _leaves(value)
        )


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    store = Store(tmp_path_factory.mktemp("fuzz") / "lahar.db")
    registry = Registry(store)
    registry.ensure_defaults()
    return registry


@FUZZ
@given(kind=st.sampled_from(FUZZED_KINDS), body=OBJECTS)
def test_object_rules_refuse_with_a_status_and_change_nothing(registry: Registry, kind: kinds.Kind, body: Any) -> None:
    TRIED["API object rules (create)"] += 1
    before = registry.store.revision
    try:
        created = registry.create(kind, "default", body)
    except ApiError as error:
        assert 400 <= error.code < 500, error.status()
        assert registry.store.revision == before, "a refused create changed the store"
        return
    name, namespace = created["metadata"]["name"], created["metadata"].get("namespace")
    json.dumps(created, allow_nan=False)  # what is stored is valid JSON
    registry.delete(kind, namespace, name, {"gracePeriodSeconds": 0})


@FUZZ
@given(patch=st.dictionaries(KEYS, JSONISH, max_size=4))
def test_merge_patches_refuse_with_a_status_and_change_nothing(registry: Registry, patch: dict[str, Any]) -> None:
    TRIED["API object rules (merge patch)"] += 1
    if registry.store.get(kinds.QUEUE, "", "patched") is None:
        registry.create(kinds.QUEUE, None, {"metadata": {"name": "patched"}, "spec": {"weight": 1}})
    before = registry.store.revision
    try:
        registry.patch(kinds.QUEUE, None, "patched", json.dumps(patch).encode(), "application/merge-patch+json")
    except ApiError as error:
        assert 400 <= error.code < 500, error.status()
        assert registry.store.revision == before


@FUZZ
@given(st.text(max_size=400) | JSONISH.map(lambda v: yaml.safe_dump(v)))
def test_scheduler_conf_parser_refuses_with_conf_error(text: str) -> None:
    TRIED["scheduler configuration parser"] += 1
    with contextlib.suppress(ConfError):  # its refusal; anything else fails the property
        parse_conf(text)


QOS_KEYS = st.sampled_from(
    ["cpu_suppress", "memory_qos", "eviction", "enabled", "threshold_percent", "reassert_seconds", "node_overrides",
     "node_selector", "be", "ls_burst", "cpu_burst", "min_percent", "x"]
)  # fmt: skip


@FUZZ
@given(st.dictionaries(QOS_KEYS, st.recursive(SCALARS, lambda c: st.dictionaries(QOS_KEYS, c, max_size=4)), max_size=5))
def test_agent_qos_config_refuses_with_value_error(data: dict[str, Any]) -> None:
    TRIED["agent QoS configuration"] += 1
    with contextlib.suppress(ValueError):  # its refusal; anything else fails the property
        QosConfig.from_mapping(data)


@FUZZ
@given(st.binary(max_size=400))
def test_report_decoder_refuses_or_converts(raw: bytes) -> None:
    TRIED["gRPC report decoder (bytes)"] += 1
    try:
        message = pb.NodeReport.FromString(raw)
    except DecodeError:
        return
    if not validate_report(message, now=message.timestamp or 0.0):
        report_from_proto(message)


FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -1.0, 1e308])


@FUZZ
@given(
    cores=st.integers(-(2**31), 2**31 - 1),
    usage=FLOATS,
    ratio=FLOATS,
    memory=st.integers(-(2**63), 2**63 - 1),
    pods=st.lists(st.tuples(st.text(max_size=10), FLOATS, st.integers(-(2**63), 2**63 - 1)), max_size=3),
)
def test_report_validator_catches_bad_numbers(
    cores: int, usage: float, ratio: float, memory: int, pods: list[tuple[str, float, int]]
) -> None:
    TRIED["gRPC report decoder (messages)"] += 1
    message = pb.NodeReport(node="n1", sequence=1, timestamp=1.0)
    message.cpu.cores, message.cpu.usage_cores, message.cpu.usage_ratio = cores, usage, ratio
    message.memory.total_bytes = memory
    for name, cpu, working_set in pods:
        pod = message.pods.add(name=name, namespace="ns", uid="u")
        pod.cpu_usage_cores, pod.memory_working_set_bytes = cpu, working_set
    raw = message.SerializeToString()
    decoded = pb.NodeReport.FromString(raw)
    if not validate_report(decoded, now=1.0):
        report = report_from_proto(decoded)
        assert report.node == "n1"


def test_counts_file_is_written(tmp_path: Path) -> None:
    """The bench reads the counts: the module's properties each tried at least one input."""
    assert TRIED, "the properties above ran first (pytest keeps file order)"
