"""The agent's report dataclasses <-> the `lahar.rpc.v1` wire messages, and what the scheduler
refuses to store.

The messages mirror `lahar.rpc.report` field for field, so conversion both ways is derived once
per dataclass from its type hints, and validation from the message descriptors, instead of being
written out by hand: adding a field to the report and to agent.proto is all it takes.

The scheduler validates every report it receives: 5000 nodes at 1 Hz is 5000 reports a second,
each with hundreds of numbers (dozens of pods). Reading those numbers field by field from the
messages would cost more than everything else the server does, so validation lets the protobuf
parser gather them (see `_numbers_message`): the bytes of a batch of reports, concatenated, are
parsed once more with a "numbers" schema in which every number is a repeated field and every
nested message a single one, and protobuf's merge rules then hand over each field of all the
pods, containers, ... of all the reports as one packed column. Serialized again, each column is
raw little-endian numbers (or varints), which numpy checks without making a Python object of any
number. Only when a batch fails are its reports walked one by one to name each problem.

Decoding into dataclasses likewise works a column at a time (all the pods of a report together)."""

from __future__ import annotations

import dataclasses
import enum
import math
import time
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from functools import cache
from itertools import chain, islice, starmap
from operator import attrgetter, itemgetter
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from lahar.rpc.report import NodeReport
from lahar.rpc.v1 import agent_pb2 as pb

MAX_PODS = 10_000
MAX_DEVICES = 64  # GPUs or NPUs on one node
MAX_NODE_NAME = 253  # a DNS subdomain, like a Kubernetes Node's name
MAX_CLOCK_SKEW_SECONDS = 300.0  # how far ahead of the scheduler's clock a report may be stamped
MAY_BE_NEGATIVE = frozenset({"temperature_celsius"})  # every other number is a size, a count or a share
# Any other list is bounded by the server's message size limit.

_NUMERIC_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_DOUBLE,
        FieldDescriptor.TYPE_FLOAT,
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED32,
        FieldDescriptor.TYPE_SFIXED64,
    }
)
_NUMBERS_PACKAGE = "lahar.rpc.v1.numbers"
_HEADER_PACKAGE = "lahar.rpc.v1.header"
# what the numbers schema declares a field that is not checked as (any other: uint64, a varint);
# strings stay strings, so that the parse checks their UTF-8 as the report's own parse would
_SKIPPED_AS = {
    FieldDescriptor.TYPE_STRING: FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BYTES: FieldDescriptor.TYPE_BYTES,
}
_whole = itemgetter(slice(None))  # a repeated field as a list: far faster than iterating it


def report_to_proto(report: NodeReport) -> pb.NodeReport:
    message = _to_proto(NodeReport)(report)
    assert isinstance(message, pb.NodeReport)
    return message


def report_from_proto(message: pb.NodeReport) -> NodeReport:
    (report,) = _from_protos(NodeReport)([message])
    assert isinstance(report, NodeReport)
    return report


# --- the fields of a report dataclass -----------------------------------------------------------


class _Kind(enum.Enum):
    SCALAR = "scalar"  # int, float, str, bool
    SCALAR_LIST = "scalar list"
    MAP = "map"
    MESSAGE = "message"  # a nested dataclass
    MESSAGE_LIST = "message list"


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    kind: _Kind
    item: type | None = None  # the nested dataclass of a MESSAGE or MESSAGE_LIST


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    """The dataclass's fields in __init__ order, each with how it crosses to the wire."""
    hints = typing.get_type_hints(cls)
    return tuple(_field(cls, field.name, hints[field.name]) for field in dataclasses.fields(cls))


def _field(cls: type, name: str, hint: Any) -> _Field:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return _Field(name, _Kind.MESSAGE_LIST, item=args[0])
    if origin is list:
        return _Field(name, _Kind.SCALAR_LIST)
    if origin is dict:
        return _Field(name, _Kind.MAP)
    if dataclasses.is_dataclass(hint):
        return _Field(name, _Kind.MESSAGE, item=typing.cast(type, hint))
    if hint in (int, float, str, bool):
        return _Field(name, _Kind.SCALAR)
    raise TypeError(f"{cls.__name__}.{name}: no wire form for {hint}")


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """attrgetter that always returns a tuple (attrgetter of one name returns the bare value)."""
    if len(names) == 1:
        get_one = attrgetter(names[0])
        return lambda item: (get_one(item),)
    return attrgetter(*names) if names else (lambda _: ())


# --- dataclass -> message -----------------------------------------------------------------------


def _message_class(cls: type) -> type[Message]:
    message_class = getattr(pb, cls.__name__)
    assert isinstance(message_class, type) and issubclass(message_class, Message)
    return message_class


@cache
def _to_proto(cls: type) -> Callable[[Any], Message]:
    fields, message_class = _fields(cls), _message_class(cls)

    def convert(item: Any) -> Message:
        kwargs: dict[str, Any] = {}
        for field in fields:
            value = getattr(item, field.name)
            if field.kind is _Kind.MESSAGE:
                value = _to_proto(typing.cast(type, field.item))(value)
            elif field.kind is _Kind.MESSAGE_LIST:
                value = [_to_proto(typing.cast(type, field.item))(element) for element in value]
            kwargs[field.name] = value  # the constructor copies lists and dicts into the message
        return message_class(**kwargs)

    return convert


# --- message -> dataclass -----------------------------------------------------------------------


@cache
def _from_protos(cls: type) -> Callable[[Sequence[Any]], list[Any]]:
    """Converts a list of messages of one type at once: one attrgetter call reads a message into a
    row, the rows become columns, each nested column is converted in one go, and the dataclasses
    are built from the columns."""
    fields = _fields(cls)
    get_row = _getter(tuple(field.name for field in fields))
    nested = [(index, _column_converter(field)) for index, field in enumerate(fields) if field.kind is not _Kind.SCALAR]
    if not nested:
        return lambda messages: list(starmap(cls, map(get_row, messages)))

    def convert(messages: Sequence[Any]) -> list[Any]:
        if not messages:
            return []
        columns: list[Iterable[Any]] = list(zip(*map(get_row, messages), strict=True))
        for index, convert_column in nested:
            columns[index] = convert_column(typing.cast(Sequence[Any], columns[index]))
        return list(map(cls, *columns))

    return convert


def _column_converter(field: _Field) -> Callable[[Sequence[Any]], Iterable[Any]]:
    if field.kind is _Kind.SCALAR_LIST:
        return lambda column: map(list, column)
    if field.kind is _Kind.MAP:
        return lambda column: map(dict, column)
    convert_items = _from_protos(typing.cast(type, field.item))
    if field.kind is _Kind.MESSAGE:
        return convert_items
    # MESSAGE_LIST: the items of every message converted together, then handed back in groups
    return lambda column: _regroup(convert_items(list(chain.from_iterable(column))), map(len, column))


def _regroup(items: list[Any], sizes: Iterable[int]) -> Iterator[list[Any]]:
    remaining = iter(items)
    return (list(islice(remaining, size)) for size in sizes)


# --- validation ---------------------------------------------------------------------------------


class _Devices(Protocol):
    @property
    def gpus(self) -> Sized: ...
    @property
    def npus(self) -> Sized: ...


class ReportHeader(Protocol):
    """What the checks read of a report besides its numbers: a pb.NodeReport, or the header
    parse_report_header makes of its bytes."""

    @property
    def node(self) -> str: ...
    @property
    def sequence(self) -> int: ...
    @property
    def timestamp(self) -> float: ...
    @property
    def pods(self) -> Sized: ...
    @property
    def gpu(self) -> _Devices: ...
    @property
    def npu(self) -> _Devices: ...
    def HasField(self, field_name: Literal["cpu", "memory"]) -> bool: ...  # protobuf's name


class WireCheck(NamedTuple):
    """validate_wire_reports' answer for one report: `malformed` (why its bytes are not a
    NodeReport: protobuf's error) or the `problems` validate_report would name; both empty when
    the report may be stored."""

    malformed: str
    problems: list[str]


def validate_report(message: pb.NodeReport, now: float | None = None) -> list[str]:
    """What is wrong with a received report; empty when it may be stored. `now` is unix seconds."""
    return validate_reports([message], now)[0]


def validate_reports(
    messages: Sequence[pb.NodeReport], now: float | None = None, wire: Sequence[bytes] | None = None
) -> list[list[str]]:
    """validate_report for many reports at once, much cheaper per report. `wire`: the bytes each
    message was parsed from, when at hand, to save serializing again."""
    now = time.time() if now is None else now
    wire = [message.SerializeToString() for message in messages] if wire is None else wire
    problems = [_shape_problems(message, now) for message in messages]
    if not _numbers_fine(b"".join(wire)):
        for message, data, found in zip(messages, wire, problems, strict=True):
            if not _numbers_fine(data):
                _name_bad_numbers(message, "", found)
    return problems


def parse_report_header(data: bytes) -> ReportHeader:
    """A serialized NodeReport parsed as far as the server reads it per report: node, sequence,
    timestamp, cpu and memory, the accelerators and health, with every list of messages (pods,
    NUMA nodes, pressure, devices, map entries) kept as the items' bytes, so that only the list's
    length is read. Several times cheaper than the full parse; raises DecodeError where the
    top-level framing or one of those parts is wrong. What it leaves unparsed,
    validate_wire_reports checks (its numbers parse covers every byte of the report)."""
    return typing.cast(ReportHeader, _header_message().FromString(data))


def validate_wire_reports(
    headers: Sequence[ReportHeader], wire: Sequence[bytes], now: float | None = None
) -> list[WireCheck]:
    """validate_reports for reports at hand as their bytes (`wire`) and parse_report_header's
    `headers` of them, never fully parsed: a report passes only where its full parse would
    succeed. The batch's numbers parse reads every byte of every report with the same framing
    and UTF-8 rules as the full parse (its schema has the same field numbers, wire types and
    strings), and the header parse checked each report's own top-level framing, so no report's
    bytes can borrow from its neighbour's. Only when that filter fails are the reports parsed one
    by one, to tell a malformed one (its DecodeError) from one with bad numbers (named)."""
    now = time.time() if now is None else now
    checks = [WireCheck("", _shape_problems(header, now)) for header in headers]
    if not _numbers_fine(b"".join(wire)):
        for index, data in enumerate(wire):
            if _numbers_fine(data):
                continue
            try:
                message = pb.NodeReport.FromString(data)
            except DecodeError as exc:
                checks[index] = WireCheck(str(exc), [])
                continue
            _name_bad_numbers(message, "", checks[index].problems)
    return checks


def _shape_problems(message: ReportHeader, now: float) -> list[str]:
    """Everything but the numbers' values: names, presence, sizes, the clock. Each field is read
    once (every read of a protobuf field makes a Python object; this runs 5000 times a second)."""
    parts: tuple[Literal["cpu", "memory"], ...] = ("cpu", "memory")
    problems = [f"{part} is missing" for part in parts if not message.HasField(part)]
    node, timestamp = message.node, message.timestamp
    if not node:
        problems.append("node is empty")
    elif len(node) > MAX_NODE_NAME:
        problems.append(f"node name is {len(node)} characters, more than {MAX_NODE_NAME}")
    if math.isfinite(timestamp):  # a NaN or infinite one is named with the other numbers
        if timestamp <= 0:
            problems.append("timestamp is missing")
        elif timestamp > now + MAX_CLOCK_SKEW_SECONDS:
            problems.append(
                f"timestamp {timestamp:.0f} is {timestamp - now:.0f} s in the future "
                f"(more than {MAX_CLOCK_SKEW_SECONDS:.0f} s)"
            )
    for name, items, limit in (
        ("pods", message.pods, MAX_PODS),
        ("gpu.gpus", message.gpu.gpus, MAX_DEVICES),
        ("npu.npus", message.npu.npus, MAX_DEVICES),
    ):
        if len(items) > limit:
            problems.append(f"{name} has {len(items)} items, more than {limit}")
    return problems


def _numbers_fine(data: bytes) -> bool:
    """Whether every number in these serialized reports is finite and every size non-negative; a
    filter: False sends the reports to _name_bad_numbers, which names what is wrong (or finds
    nothing, and the reports pass). The batch is parsed with the numbers schema (one packed column
    per field over all its reports), serialized again, and each column's raw bytes are checked
    with numpy, so no number becomes a Python object."""
    try:
        merged = _numbers_message().FromString(data)
    except DecodeError:  # a malformed report, or a packed list where it has one number: the slow path decides
        return False
    merged.DiscardUnknownFields()  # fields no schema knows (a newer agent's): not checked
    columns = merged.SerializeToString()
    found: dict[_Column, list[bytes]] = {kind: [] for kind in _Column}
    if not _gather_columns(memoryview(columns), _column_layout(), found):
        return False
    return all(_COLUMN_FINE[kind](b"".join(parts)) for kind, parts in found.items() if parts)


class _Column(enum.Enum):
    """How a packed column is checked (MAY_BE_NEGATIVE fields: only finiteness, where it applies)."""

    DOUBLE_SIZE = "double, finite and not negative"
    DOUBLE = "double, finite"
    FLOAT_SIZE = "float, finite and not negative"
    FLOAT = "float, finite"
    VARINT_SIZE = "int32/int64 varint, not negative"
    ZIGZAG_SIZE = "sint32/sint64 zigzag varint, not negative"
    SFIXED32_SIZE = "sfixed32, not negative"
    SFIXED64_SIZE = "sfixed64, not negative"


def _finite(dtype: str, sizes: bool) -> Callable[[bytes], bool]:
    def fine(data: bytes) -> bool:
        values = np.frombuffer(data, dtype=dtype)
        return bool(np.isfinite(values).all() and (not sizes or (values >= 0).all()))

    return fine


def _not_negative(dtype: str) -> Callable[[bytes], bool]:
    return lambda data: bool((np.frombuffer(data, dtype=dtype) >= 0).all())


def _varint_ends(data: bytes) -> np.ndarray:
    """The index of each varint's last byte (the bytes without the continuation bit)."""
    return np.flatnonzero(np.frombuffer(data, dtype=np.uint8) < 0x80)


_TEN_BYTE_VARINT = b"\x01" * 9  # nine continuation bits in a row, as the top bits of the bytes


def _varints_not_negative(data: bytes) -> bool:
    # A negative int32 or int64 is sign-extended to ten bytes on the wire; a non-negative one
    # takes at most nine (63 bits): nine bytes in a row with the continuation bit set only occur
    # in a ten-byte one. Searching the bytes' top bits for such a run is half the cost of
    # measuring each varint's length.
    return _TEN_BYTE_VARINT not in (np.frombuffer(data, dtype=np.uint8) >> 7).tobytes()


def _zigzags_not_negative(data: bytes) -> bool:
    # Zigzag encodes a negative number as an odd one: the low bit of the varint's first byte.
    starts = np.concatenate(([0], _varint_ends(data)[:-1] + 1))
    return not (np.frombuffer(data, dtype=np.uint8)[starts] & 1).any()


_COLUMN_FINE: dict[_Column, Callable[[bytes], bool]] = {
    _Column.DOUBLE_SIZE: _finite("<f8", sizes=True),
    _Column.DOUBLE: _finite("<f8", sizes=False),
    _Column.FLOAT_SIZE: _finite("<f4", sizes=True),
    _Column.FLOAT: _finite("<f4", sizes=False),
    _Column.VARINT_SIZE: _varints_not_negative,
    _Column.ZIGZAG_SIZE: _zigzags_not_negative,
    _Column.SFIXED32_SIZE: _not_negative("<i4"),
    _Column.SFIXED64_SIZE: _not_negative("<i8"),
}

# field number -> a nested message's layout, a column to check, or None (cannot be negative or
# non-finite: unsigned and fixed-width unsigned numbers, MAY_BE_NEGATIVE integers)
_Layout = dict[int, "_Layout | _Column | None"]
_SIZE_COLUMNS = {
    FieldDescriptor.TYPE_DOUBLE: _Column.DOUBLE_SIZE,
    FieldDescriptor.TYPE_FLOAT: _Column.FLOAT_SIZE,
    FieldDescriptor.TYPE_INT32: _Column.VARINT_SIZE,
    FieldDescriptor.TYPE_INT64: _Column.VARINT_SIZE,
    FieldDescriptor.TYPE_SINT32: _Column.ZIGZAG_SIZE,
    FieldDescriptor.TYPE_SINT64: _Column.ZIGZAG_SIZE,
    FieldDescriptor.TYPE_SFIXED32: _Column.SFIXED32_SIZE,
    FieldDescriptor.TYPE_SFIXED64: _Column.SFIXED64_SIZE,
}
_SIGNED_COLUMNS = {FieldDescriptor.TYPE_DOUBLE: _Column.DOUBLE, FieldDescriptor.TYPE_FLOAT: _Column.FLOAT}


def _message_type(field: FieldDescriptor) -> Descriptor:
    """A message field's type: set for every TYPE_MESSAGE field."""
    assert field.message_type is not None, field.full_name
    return field.message_type


@cache
def _column_layout() -> _Layout:
    """The numbers schema's fields by number, message fields as nested layouts."""

    def layout(descriptor: Descriptor) -> _Layout:
        fields: _Layout = {}
        for field in descriptor.fields:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                fields[field.number] = layout(_message_type(field))
            elif field.name in MAY_BE_NEGATIVE:
                fields[field.number] = _SIGNED_COLUMNS.get(field.type)
            else:
                fields[field.number] = _SIZE_COLUMNS.get(field.type)
        return fields

    top = _numbers_message().DESCRIPTOR
    assert isinstance(top, Descriptor)  # upb's C Descriptor passes: Descriptor's metaclass says so
    return layout(top)


def _gather_columns(data: memoryview, layout: _Layout, found: dict[_Column, list[bytes]]) -> bool:
    """Append each packed column of serialized numbers message `data` to `found` by how it is
    checked. Every number field of that message is length-delimited (a packed column), as is every
    message; a varint is a skipped bool or enum; any other wire type, a varint where a column is
    due, or an unknown field returns False (then the slow path decides)."""
    position, end = 0, len(data)
    while position < end:
        key, position = _varint(data, position)
        if key >> 3 not in layout:
            return False
        entry = layout[key >> 3]
        if key & 7 == 0 and entry is None:
            _, position = _varint(data, position)
            continue
        length, position = _varint(data, position)
        if key & 7 != 2 or position + length > end:
            return False
        if isinstance(entry, dict):
            if not _gather_columns(data[position : position + length], entry, found):
                return False
        elif entry is not None:
            found[entry].append(data[position : position + length].tobytes())
        position += length
    return True


def _varint(data: memoryview, position: int) -> tuple[int, int]:
    """The varint at `position` and the position after it (keys and lengths: a few bytes)."""
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


@cache
def _numbers_message() -> type[Message]:
    """NodeReport's "numbers" schema: the same field numbers, with every number field repeated
    and every message field single. Strings become single `bytes` fields and bools and enums
    single uint64s: each occurrence overwrites the last (no UTF-8 check, nothing kept per item),
    where a field the schema left out would be copied, item by item, into the unknown fields,
    which made this parse cost three times the report's own. Protobuf merges repeated
    occurrences of a single message field and concatenates repeated fields, so parsing a report
    with it yields one message per type holding, for each number field, the values of all the
    items of that type (all pods, ...) as one packed column; concatenated reports parse as their
    merge, so a whole batch yields one column per field."""
    file = descriptor_pb2.FileDescriptorProto(
        name="lahar/rpc/v1/agent_numbers.proto", package=_NUMBERS_PACKAGE, syntax="proto3"
    )
    for descriptor in _message_types(pb.NodeReport.DESCRIPTOR):
        numbers_type = file.message_type.add(name=_flat_name(descriptor))
        for field in descriptor.fields:
            if field.type == FieldDescriptor.TYPE_MESSAGE:  # map entries too: keys dropped, values kept
                numbers_type.field.add(
                    name=field.name,
                    number=field.number,
                    type=field.type,
                    label=FieldDescriptor.LABEL_OPTIONAL,
                    type_name=f".{_NUMBERS_PACKAGE}.{_flat_name(_message_type(field))}",
                )
            elif field.type in _NUMERIC_TYPES:
                numbers_type.field.add(
                    name=field.name, number=field.number, type=field.type, label=FieldDescriptor.LABEL_REPEATED
                )
            else:  # declared, so that the parser overwrites one value instead of keeping each as unknown
                numbers_type.field.add(
                    name=field.name,
                    number=field.number,
                    type=_SKIPPED_AS.get(field.type, FieldDescriptor.TYPE_UINT64),
                    label=FieldDescriptor.LABEL_REPEATED if field.is_repeated else FieldDescriptor.LABEL_OPTIONAL,
                )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{_NUMBERS_PACKAGE}.{_flat_name(pb.NodeReport.DESCRIPTOR)}")
    )


@cache
def _header_message() -> type[Message]:
    """parse_report_header's schema: NodeReport's, with every repeated message field (lists and
    maps, at any depth) declared as repeated `bytes` instead, so that their items are copied,
    not parsed. Same field numbers and wire types: what the header parse refuses, the full parse
    refuses too."""
    file = descriptor_pb2.FileDescriptorProto(
        name="lahar/rpc/v1/agent_header.proto", package=_HEADER_PACKAGE, syntax="proto3"
    )
    waiting, declared = [pb.NodeReport.DESCRIPTOR], set()
    while waiting:
        descriptor = waiting.pop()
        if descriptor.full_name in declared:
            continue
        declared.add(descriptor.full_name)
        header_type = file.message_type.add(name=_flat_name(descriptor))
        for field in descriptor.fields:
            label = FieldDescriptor.LABEL_REPEATED if field.is_repeated else FieldDescriptor.LABEL_OPTIONAL
            if field.type != FieldDescriptor.TYPE_MESSAGE:
                header_type.field.add(name=field.name, number=field.number, type=field.type, label=label)
            elif field.is_repeated:
                header_type.field.add(
                    name=field.name, number=field.number, type=FieldDescriptor.TYPE_BYTES, label=label
                )
            else:
                header_type.field.add(
                    name=field.name,
                    number=field.number,
                    type=field.type,
                    label=label,
                    type_name=f".{_HEADER_PACKAGE}.{_flat_name(_message_type(field))}",
                )
                waiting.append(_message_type(field))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{_HEADER_PACKAGE}.{_flat_name(pb.NodeReport.DESCRIPTOR)}")
    )


def _message_types(root: Descriptor) -> list[Descriptor]:
    """`root` and every message type reachable from it (map entries included), each once."""
    found: dict[str, Descriptor] = {}
    waiting = [root]
    while waiting:
        descriptor = waiting.pop()
        if descriptor.full_name not in found:
            found[descriptor.full_name] = descriptor
            waiting += [field.message_type for field in descriptor.fields if field.message_type is not None]
    return list(found.values())


def _flat_name(descriptor: Descriptor) -> str:
    return descriptor.full_name.replace(".", "_")


def _name_bad_numbers(message: Message, path: str, problems: list[str]) -> None:
    """The slow path: walks one report and names each number that is not finite, or negative."""
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            named: Iterable[tuple[str, Any]] = ((f"{field.name}[{key!r}]", item) for key, item in value.items())
            if field.message_type.fields_by_name["value"].type in _NUMERIC_TYPES:
                _check_numbers(named, path, problems)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.is_repeated:
                for index, element in enumerate(value):
                    _name_bad_numbers(element, f"{path}{field.name}[{index}].", problems)
            elif message.HasField(field.name):
                _name_bad_numbers(value, f"{path}{field.name}.", problems)
        elif field.type in _NUMERIC_TYPES:
            named = (
                ((f"{field.name}[{index}]", item) for index, item in enumerate(value))
                if field.is_repeated
                else [(field.name, value)]
            )
            _check_numbers(named, path, problems)


def _check_numbers(named_values: Iterable[tuple[str, float]], path: str, problems: list[str]) -> None:
    for name, value in named_values:
        if not math.isfinite(value):
            problems.append(f"{path}{name} is not a finite number ({value})")
        elif value < 0 and name.split("[", 1)[0] not in MAY_BE_NEGATIVE:
            problems.append(f"{path}{name} is negative ({value})")
