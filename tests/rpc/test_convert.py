"""The report dataclasses and the wire messages: same fields, a lossless round trip, and the
validation that decides what the scheduler refuses."""

from __future__ import annotations

import dataclasses
import math
import time
import typing

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from lahar.rpc.convert import (
    MAX_CLOCK_SKEW_SECONDS,
    MAX_DEVICES,
    MAX_PODS,
    _numbers_fine,
    _numbers_message,
    parse_report_header,
    report_from_proto,
    report_to_proto,
    validate_report,
    validate_reports,
    validate_wire_reports,
)
from lahar.rpc.report import (
    Accelerators,
    AgentHealth,
    ContainerUsage,
    CpuUsage,
    GpuDevice,
    GpuProcess,
    MemoryUsage,
    NodeReport,
    NpuDevice,
    NumaNode,
    PodUsage,
    Pressure,
)
from lahar.rpc.v1 import agent_pb2 as pb

GIB = 1 << 30
NOW = 1_800_000_000.0


def full_report(node: str = "node-a", sequence: int = 7) -> NodeReport:
    """A report with every field of every type set to something other than its default."""
    return NodeReport(
        node=node,
        sequence=sequence,
        timestamp=NOW - 0.125,
        cpu=CpuUsage(cores=4, usage_cores=1.5, usage_ratio=0.375, per_core_ratio=[0.5, 0.25, 0.5, 0.25]),
        memory=MemoryUsage(total_bytes=16 * GIB, used_bytes=6 * GIB, available_bytes=10 * GIB, page_cache_bytes=GIB),
        numa=[NumaNode(0, [0, 1], 8 * GIB, 3 * GIB, 0.75), NumaNode(1, [2, 3], 8 * GIB, 3 * GIB, 0.75)],
        pressure=[
            Pressure("cpu", 1.5, 1.25, 1.0, 12.5, 0.5, 0.25, 0.125, 3.5),
            Pressure("memory", 0.1, 0.2, 0.3, 4.0, 0.01, 0.02, 0.03, 1.0),
        ],
        pods=[
            PodUsage(
                namespace="team",
                name=f"job-{index}",
                uid=f"uid-{index}",
                qos_class="BE",
                kube_qos_class="BestEffort",
                cgroup=f"kubepods/besteffort/pod{index}",
                cpu_usage_cores=0.25 * index + 0.1,
                memory_working_set_bytes=(index + 1) * 100 << 20,
                cpu_throttled_periods_total=3 + index,
                cpu_throttled_seconds_total=0.5,
                io_read_bytes_total=1024,
                io_write_bytes_total=2048,
                containers=[
                    ContainerUsage("main", 0.2, 90 << 20, 2, 0.25, 12.5),
                    ContainerUsage("sidecar", 0.05, 10 << 20, 1, 0.125, 3.0),
                ],
                cpu_usage_seconds_total=20.0 + index,
            )
            for index in range(3)
        ],
        gpu=Accelerators(
            available=True,
            reason="ok",
            source="nvml",
            gpus=[
                GpuDevice(
                    1,
                    "GPU-0001",
                    "H100",
                    0.5,
                    20 * GIB,
                    80 * GIB,
                    350.5,
                    61.0,
                    [GpuProcess(4242, 19 * GIB, "team", "job-1")],
                )
            ],
        ),
        npu=Accelerators(
            available=True,
            reason="ok",
            source="dcmi",
            npus=[NpuDevice(1, 1, "Ascend910B", 0.25, 10 * GIB, 64 * GIB, 200.25, 55.5, "OK")],
        ),
        reclaimable={"cpu": 1500, "memory": 4 * GIB},
        health=AgentHealth(version="0.1.0", collect_seconds=0.0123, errors={"npu": "npu-smi timed out"}),
    )


def unset_fields(message: Message) -> set[str]:
    """The fields, as Type.field, that no message of their type inside `message` sets to anything
    but the default: a conversion that dropped such a field would pass the round trip."""
    seen: dict[str, set[str]] = {}

    def visit(item: Message) -> None:
        fields = item.DESCRIPTOR.fields
        seen.setdefault(item.DESCRIPTOR.name, set())
        for field in fields:
            value = getattr(item, field.name)
            if value if field.is_repeated or field.message_type is None else item.HasField(field.name):
                seen[item.DESCRIPTOR.name].add(field.name)
            if field.message_type is not None and not field.message_type.GetOptions().map_entry:
                for element in value if field.is_repeated else [value]:
                    visit(element)

    visit(message)
    return {
        f"{name}.{field.name}"
        for name, set_fields in seen.items()
        for field in getattr(pb, name).DESCRIPTOR.fields
        if field.name not in set_fields
    }


def dataclass_types(root: type) -> set[type]:
    found, waiting = set(), [root]
    while waiting:
        cls = waiting.pop()
        if cls in found:
            continue
        found.add(cls)
        for hint in typing.get_type_hints(cls).values():
            waiting += [arg for arg in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(arg)]
    return found


# --- the contract and the round trip ---


def test_every_dataclass_has_a_message_with_the_same_fields() -> None:
    types = dataclass_types(NodeReport)
    assert {cls.__name__ for cls in types} >= {"NodeReport", "PodUsage", "GpuDevice", "NpuDevice", "AgentHealth"}
    for cls in types:
        message_fields = [field.name for field in getattr(pb, cls.__name__).DESCRIPTOR.fields]
        assert message_fields == [field.name for field in dataclasses.fields(cls)], cls.__name__


def test_round_trip_is_lossless() -> None:
    report = full_report()
    message = report_to_proto(report)
    assert unset_fields(message) == set()
    assert report_from_proto(message) == report
    assert report_from_proto(pb.NodeReport.FromString(message.SerializeToString())) == report


def test_round_trip_keeps_exact_values() -> None:
    report = full_report()
    report.timestamp = 1_763_712_345.123456789  # a double's last bits
    report.memory.total_bytes = (1 << 62) + 1  # beyond a double's 53 bits
    report.cpu.per_core_ratio = [1 / 3, math.pi, 5e-324]
    back = report_from_proto(pb.NodeReport.FromString(report_to_proto(report).SerializeToString()))
    assert back.timestamp == report.timestamp
    assert back.memory.total_bytes == (1 << 62) + 1 and isinstance(back.memory.total_bytes, int)
    assert back.cpu.per_core_ratio == [1 / 3, math.pi, 5e-324]
    assert back.npu.npus[0].healthy and back.gpu.gpus[0].processes[0].pod == "job-1"


def test_round_trip_of_an_empty_report() -> None:
    report = NodeReport("n", 0, NOW, CpuUsage(0, 0.0, 0.0), MemoryUsage(0, 0, 0, 0))
    back = report_from_proto(report_to_proto(report))
    assert back == report
    assert back.gpu == Accelerators(False, "not collected") and back.pods == [] and back.reclaimable == {}


def test_decoded_lists_are_independent_of_the_message() -> None:
    message = report_to_proto(full_report())
    report = report_from_proto(message)
    message.pods[0].containers[0].name = "changed"
    message.cpu.per_core_ratio[0] = 0.0
    assert report.pods[0].containers[0].name == "main" and report.cpu.per_core_ratio[0] == 0.5
    assert [len(pod.containers) for pod in report.pods] == [2, 2, 2]


# --- validation ---


def test_a_good_report_has_no_problems() -> None:
    assert validate_report(report_to_proto(full_report()), now=NOW) == []


def test_temperatures_may_be_negative() -> None:
    report = full_report()
    report.gpu.gpus[0].temperature_celsius = -5.0
    assert validate_report(report_to_proto(report), now=NOW) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: setattr(r.cpu, "usage_cores", math.nan), "cpu.usage_cores is not a finite number (nan)"),
        (
            lambda r: setattr(r.pods[2], "memory_working_set_bytes", -1),
            "pods[2].memory_working_set_bytes is negative (-1)",
        ),
        (
            lambda r: setattr(r.pods[1].containers[1], "cpu_usage_cores", -0.5),
            "pods[1].containers[1].cpu_usage_cores is negative (-0.5)",
        ),
        (lambda r: setattr(r.memory, "used_bytes", -GIB), f"memory.used_bytes is negative ({-GIB})"),
        (lambda r: r.cpu.per_core_ratio.__setitem__(3, math.inf), "cpu.per_core_ratio[3] is not a finite number (inf)"),
        (lambda r: r.reclaimable.__setitem__("cpu", -100), "reclaimable['cpu'] is negative (-100)"),
        (
            lambda r: setattr(r.gpu.gpus[0], "temperature_celsius", -math.inf),
            "gpu.gpus[0].temperature_celsius is not a finite number (-inf)",
        ),
        (
            lambda r: setattr(r.gpu.gpus[0].processes[0], "memory_bytes", -3),
            "gpu.gpus[0].processes[0].memory_bytes is negative (-3)",
        ),
        (lambda r: setattr(r, "timestamp", math.nan), "timestamp is not a finite number (nan)"),
        (lambda r: setattr(r, "node", ""), "node is empty"),
        (lambda r: setattr(r, "node", "n" * 254), "node name is 254 characters, more than 253"),
        (lambda r: setattr(r, "timestamp", 0.0), "timestamp is missing"),
        (
            lambda r: setattr(r, "timestamp", NOW + MAX_CLOCK_SKEW_SECONDS + 60),
            "timestamp 1800000360 is 360 s in the future (more than 300 s)",
        ),
        (lambda r: setattr(r, "pods", r.pods[:1] * (MAX_PODS + 1)), "pods has 10001 items, more than 10000"),
        (lambda r: setattr(r.gpu, "gpus", r.gpu.gpus * (MAX_DEVICES + 1)), "gpu.gpus has 65 items, more than 64"),
        (lambda r: setattr(r.npu, "npus", r.npu.npus * (MAX_DEVICES + 1)), "npu.npus has 65 items, more than 64"),
    ],
)
def test_a_bad_report_names_its_problem(change: typing.Callable[[NodeReport], None], expected: str) -> None:
    report = full_report()
    change(report)
    assert validate_report(report_to_proto(report), now=NOW) == [expected]


def test_a_report_at_the_limits_passes() -> None:
    report = full_report()
    report.pods = report.pods[:1] * MAX_PODS
    report.gpu.gpus = report.gpu.gpus * MAX_DEVICES
    report.timestamp = NOW + MAX_CLOCK_SKEW_SECONDS
    assert validate_report(report_to_proto(report), now=NOW) == []


def test_missing_cpu_and_memory() -> None:
    message = report_to_proto(full_report())
    message.ClearField("cpu")
    message.ClearField("memory")
    assert validate_report(message, now=NOW) == ["cpu is missing", "memory is missing"]


def test_every_problem_is_named() -> None:
    report = full_report()
    report.node = ""
    report.cpu.usage_cores = math.nan
    report.pods[0].io_read_bytes_total = -1
    report.pods[2].cpu_throttled_seconds_total = math.inf
    problems = validate_report(report_to_proto(report), now=NOW)
    assert problems == [
        "node is empty",
        "cpu.usage_cores is not a finite number (nan)",
        "pods[0].io_read_bytes_total is negative (-1)",
        "pods[2].cpu_throttled_seconds_total is not a finite number (inf)",
    ]


def test_a_batch_names_only_its_bad_reports() -> None:
    reports = [full_report(f"node-{index}") for index in range(6)]
    reports[4].pods[1].containers[0].memory_working_set_bytes = -7
    reports[1].numa[1].cpu_usage_cores = math.nan
    results = validate_reports([report_to_proto(report) for report in reports], now=NOW)
    assert results == [
        [],
        ["numa[1].cpu_usage_cores is not a finite number (nan)"],
        [],
        [],
        ["pods[1].containers[0].memory_working_set_bytes is negative (-7)"],
        [],
    ]


def test_the_bytes_given_are_the_ones_checked() -> None:
    """validate_reports checks numbers on the wire bytes the server already holds."""
    good, bad = full_report("good"), full_report("bad")
    bad.memory.page_cache_bytes = -1
    messages = [report_to_proto(good), report_to_proto(bad)]
    wire = [message.SerializeToString() for message in messages]
    assert validate_reports(messages, now=NOW, wire=wire) == [[], ["memory.page_cache_bytes is negative (-1)"]]


def test_validation_uses_the_clock_by_default() -> None:
    report = full_report()
    report.timestamp = time.time() + 3600
    assert len(validate_report(report_to_proto(report))) == 1
    report.timestamp = time.time()
    assert validate_report(report_to_proto(report)) == []


_NOT_NUMBERS = (
    FieldDescriptor.TYPE_MESSAGE,
    FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_BYTES,
)


def _numeric_leaves(
    message: Message, path: str = ""
) -> typing.Iterator[tuple[str, int, typing.Callable[[float], None]]]:
    """(path, field type, setter) of every number in `message`, single, repeated or a map's value."""
    for field, value in message.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            kind = field.message_type.fields_by_name["value"].type
            if kind not in _NOT_NUMBERS:
                for key in value:
                    yield f"{path}{field.name}[{key!r}]", kind, lambda bad, m=value, k=key: m.__setitem__(k, bad)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            for index, item in enumerate(value) if field.is_repeated else [(None, value)]:
                yield from _numeric_leaves(item, f"{path}{field.name}{'' if index is None else f'[{index}]'}.")
        elif field.type not in _NOT_NUMBERS:
            if field.is_repeated:
                for index in range(len(value)):
                    yield (
                        f"{path}{field.name}[{index}]",
                        field.type,
                        lambda bad, r=value, i=index: r.__setitem__(i, bad),
                    )
            else:
                yield f"{path}{field.name}", field.type, lambda bad, o=message, n=field.name: setattr(o, n, bad)


def test_the_batch_filter_sees_every_number_of_every_type() -> None:
    """The fast filter (columns checked as raw bytes) misses no field: every number of a full
    report, made non-finite (floating point) or negative (signed integers), fails it; unsigned
    numbers cannot be either."""
    assert _numbers_fine(report_to_proto(full_report()).SerializeToString())
    checked = 0
    for path, kind, _ in list(_numeric_leaves(report_to_proto(full_report()))):
        if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64):
            continue
        message = report_to_proto(full_report())
        set_bad = next(setter for where, _, setter in _numeric_leaves(message) if where == path)
        set_bad(math.nan if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT) else -1)
        good_too = report_to_proto(full_report("other")).SerializeToString()
        assert not _numbers_fine(good_too + message.SerializeToString()), path
        checked += 1
    assert checked > 40


def test_the_numbers_schema_leaves_no_field_unknown() -> None:
    """Every field of a full report (strings, bools, map keys included) is declared in the
    numbers schema: a field it left out would be kept, item by item, as an unknown field, which
    made that parse cost three times the report's own at 5000 reports a second."""
    wire = report_to_proto(full_report()).SerializeToString() * 3  # a batch of three
    merged = _numbers_message().FromString(wire)
    everything = merged.SerializeToString()
    merged.DiscardUnknownFields()
    assert merged.SerializeToString() == everything
    assert _numbers_fine(wire)


def test_the_largest_sizes_pass_the_batch_filter() -> None:
    report = full_report()
    report.memory.total_bytes = (1 << 63) - 1  # nine bytes on the wire, a negative one takes ten
    report.cpu.cores = (1 << 31) - 1
    report.reclaimable["memory"] = (1 << 63) - 1
    assert _numbers_fine(report_to_proto(report).SerializeToString())
    assert validate_report(report_to_proto(report), now=NOW) == []


# --- reports checked as bytes (the server parses only their header) ---


def test_the_header_reads_what_the_checks_need() -> None:
    report = full_report("node-h", 42)
    header = parse_report_header(report_to_proto(report).SerializeToString())
    assert (header.node, header.sequence, header.timestamp) == ("node-h", 42, report.timestamp)
    assert header.HasField("cpu") and header.HasField("memory")
    assert (len(header.pods), len(header.gpu.gpus), len(header.npu.npus)) == (3, 1, 1)
    empty = parse_report_header(pb.NodeReport(node="n").SerializeToString())
    assert not empty.HasField("cpu") and not empty.HasField("memory") and len(empty.pods) == 0


def test_wire_reports_get_the_problems_their_messages_get() -> None:
    reports = [full_report(f"node-{index}") for index in range(5)]
    reports[1].pods[2].containers[1].cpu_usage_cores = math.inf
    reports[3].memory.used_bytes = -1
    reports[3].timestamp = NOW + 3600
    reports[4].gpu.gpus = [reports[4].gpu.gpus[0]] * (MAX_DEVICES + 1)
    messages = [report_to_proto(report) for report in reports]
    wire = [message.SerializeToString() for message in messages]
    checks = validate_wire_reports([parse_report_header(data) for data in wire], wire, now=NOW)
    assert [check.malformed for check in checks] == [""] * 5
    assert [check.problems for check in checks] == validate_reports(messages, now=NOW)
    assert checks[0].problems == [] and checks[1].problems and checks[3].problems and checks[4].problems


def _with_bad_utf8(data: bytes) -> bytes:
    broken = bytearray(data)
    broken[broken.index(b"job-1")] = 0xFF  # a pod's name, inside a list the header keeps as bytes
    return bytes(broken)


def _with_a_truncated_container(data: bytes) -> bytes:
    """The first pod's first container declared one byte longer than it is, its pod and the
    report kept the same length: the pod's bytes are still framed, the container inside is not."""
    message = pb.NodeReport.FromString(data)
    container = message.pods[0].containers[0].SerializeToString()
    start = data.index(container)
    assert data[start - 1] == len(container) and data[start - 2] == 0x6A  # field 13, length-delimited
    broken = bytearray(data)
    broken[start - 1] = len(container) + 1
    return bytes(broken)


@pytest.mark.parametrize("breaking", [_with_bad_utf8, _with_a_truncated_container])
def test_a_report_broken_inside_a_list_is_malformed_and_its_neighbours_pass(
    breaking: typing.Callable[[bytes], bytes],
) -> None:
    wire = [report_to_proto(full_report(f"node-{index}")).SerializeToString() for index in range(3)]
    wire[1] = breaking(wire[1])
    header = parse_report_header(wire[1])  # the header does not look inside the pods
    with pytest.raises(DecodeError) as full_parse:
        pb.NodeReport.FromString(wire[1])
    checks = validate_wire_reports(
        [header if index == 1 else parse_report_header(data) for index, data in enumerate(wire)], wire, now=NOW
    )
    assert checks[1].malformed == str(full_parse.value) and checks[1].problems == []
    assert checks[0] == checks[2] == ("", [])


def test_what_passes_as_bytes_parses_as_a_report() -> None:
    """Every one-byte change of a small report: where its header parses and the bytes pass,
    the full parse succeeds (the store decodes those bytes when read), and the report is
    refused where the full parse fails. A good report stands on each side of the changed one,
    so that a broken report cannot borrow its neighbours' bytes."""
    report = full_report()
    report.pods = report.pods[:1]
    data = report_to_proto(report).SerializeToString()
    good = report_to_proto(full_report("other")).SerializeToString()
    passed = refused = 0
    for position in range(len(data)):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF, data[position] ^ 0x04):
            changed = bytearray(data)
            changed[position] = value
            try:
                parse_report_header(bytes(changed))
            except DecodeError:
                with pytest.raises(DecodeError):
                    pb.NodeReport.FromString(bytes(changed))
                continue
            wire = [good, bytes(changed), good]
            headers = [parse_report_header(item) for item in wire]
            check = validate_wire_reports(headers, wire, now=NOW)[1]
            try:
                pb.NodeReport.FromString(bytes(changed))
            except DecodeError:
                assert check.malformed, (position, value)
                refused += 1
                continue
            assert not check.malformed, (position, value)
            passed += 1
    assert passed > 100 and refused > 10
