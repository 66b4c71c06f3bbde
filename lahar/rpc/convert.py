"""The agent's report dataclasses <-> the `lahar.rpc.v1` wire messages, and what the scheduler
refuses to store.

The messages mirror `lahar.agent.report` field for field, so conversion both ways and validation
are derived once per dataclass from its type hints instead of being written out by hand: adding a
field to the report and to agent.proto is all it takes.

The scheduler decodes every report it receives (5000 nodes at 1 Hz is 5000 reports a second, each
with dozens of pods), so decoding works a column at a time: one attrgetter call reads all the
fields of a message, all the pods of a report are converted together, and the Python-level work
per report grows with the number of message types rather than with the number of pods. Reading a
field of a protobuf message costs far more than reading a dataclass attribute, so validation runs
on the decoded dataclasses; only a report that fails is walked again, item by item, to name each
problem."""

from __future__ import annotations

import dataclasses
import enum
import math
import time
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache
from itertools import chain, islice, starmap
from operator import attrgetter, methodcaller
from typing import Any

from google.protobuf.message import Message

from lahar.agent.report import NodeReport
from lahar.rpc.v1 import agent_pb2 as pb

MAX_PODS = 10_000
MAX_DEVICES = 64  # GPUs or NPUs on one node
MAX_ITEMS = 16_384  # any other list: CPUs, NUMA nodes, containers, processes, errors
MAX_NODE_NAME = 253  # a DNS subdomain, like a Kubernetes Node's name
MAX_CLOCK_SKEW_SECONDS = 300.0  # how far ahead of the scheduler's clock a report may be stamped
ITEM_LIMITS = {"pods": MAX_PODS, "gpus": MAX_DEVICES, "npus": MAX_DEVICES}
MAY_BE_NEGATIVE = frozenset({"temperature_celsius"})  # every other number is a size, a count or a share


def report_to_proto(report: NodeReport) -> pb.NodeReport:
    message = _to_proto(NodeReport)(report)
    assert isinstance(message, pb.NodeReport)
    return message


def report_from_proto(message: pb.NodeReport) -> NodeReport:
    (report,) = _from_protos(NodeReport)([message])
    assert isinstance(report, NodeReport)
    return report


def validate_report(message: pb.NodeReport, now: float | None = None) -> list[str]:
    """What is wrong with a received report; empty when it may be stored. `now` is unix seconds."""
    return validate_reports([message], now)[0]


def validate_reports(messages: Sequence[pb.NodeReport], now: float | None = None) -> list[list[str]]:
    """validate_report for many reports at once, which is cheaper per report: the server checks
    the reports that arrived together in one go."""
    now = time.time() if now is None else now
    problems = [_header_problems(message, now) for message in messages]
    if not _all_fine(NodeReport)(messages):
        for message, found in zip(messages, problems):
            if not _all_fine(NodeReport)([message]):
                _describe(NodeReport)(message, "", found)
    return problems


def _header_problems(message: pb.NodeReport, now: float) -> list[str]:
    problems = [f"{part} is missing" for part in ("cpu", "memory") if not message.HasField(part)]
    if not message.node:
        problems.append("node is empty")
    elif len(message.node) > MAX_NODE_NAME:
        problems.append(f"node name is {len(message.node)} characters, more than {MAX_NODE_NAME}")
    if math.isfinite(message.timestamp):  # a NaN or infinite one is named with the other numbers
        if message.timestamp <= 0:
            problems.append("timestamp is missing")
        elif message.timestamp > now + MAX_CLOCK_SKEW_SECONDS:
            problems.append(f"timestamp {message.timestamp:.0f} is {message.timestamp - now:.0f} s in the future "
                            f"(more than {MAX_CLOCK_SKEW_SECONDS:.0f} s)")
    return problems


# --- the fields of a report dataclass -----------------------------------------------------------

class Kind(enum.Enum):
    SCALAR = "scalar"  # int, float, str, bool
    SCALAR_LIST = "scalar list"
    MAP = "map"
    MESSAGE = "message"  # a nested dataclass
    MESSAGE_LIST = "message list"


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    kind: Kind
    item: type | None = None  # the nested dataclass of a MESSAGE or MESSAGE_LIST
    numeric: bool = False  # a number, or a list or map of numbers (bool is not one)


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    """The dataclass's fields in __init__ order, each with how it crosses to the wire."""
    hints = typing.get_type_hints(cls)
    return tuple(_field(cls, field.name, hints[field.name]) for field in dataclasses.fields(cls))


def _field(cls: type, name: str, hint: Any) -> _Field:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and dataclasses.is_dataclass(args[0]):
        return _Field(name, Kind.MESSAGE_LIST, item=args[0])
    if origin is list:
        return _Field(name, Kind.SCALAR_LIST, numeric=args[0] in (int, float))
    if origin is dict:
        return _Field(name, Kind.MAP, numeric=args[1] in (int, float))
    if dataclasses.is_dataclass(hint):
        return _Field(name, Kind.MESSAGE, item=typing.cast(type, hint))
    if hint in (int, float, str, bool):
        return _Field(name, Kind.SCALAR, numeric=hint in (int, float))
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
            if field.kind is Kind.MESSAGE:
                value = _to_proto(typing.cast(type, field.item))(value)
            elif field.kind is Kind.MESSAGE_LIST:
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
    nested = [(index, _column_converter(field)) for index, field in enumerate(fields) if field.kind is not Kind.SCALAR]
    if not nested:
        return lambda messages: list(starmap(cls, map(get_row, messages)))

    def convert(messages: Sequence[Any]) -> list[Any]:
        if not messages:
            return []
        columns: list[Iterable[Any]] = list(zip(*map(get_row, messages)))
        for index, convert_column in nested:
            columns[index] = convert_column(typing.cast(Sequence[Any], columns[index]))
        return list(map(cls, *columns))

    return convert


def _column_converter(field: _Field) -> Callable[[Sequence[Any]], Iterable[Any]]:
    if field.kind is Kind.SCALAR_LIST:
        return lambda column: map(list, column)
    if field.kind is Kind.MAP:
        return lambda column: map(dict, column)
    convert_items = _from_protos(typing.cast(type, field.item))
    if field.kind is Kind.MESSAGE:
        return convert_items
    # MESSAGE_LIST: the items of every message converted together, then handed back in groups
    return lambda column: _regroup(convert_items(list(chain.from_iterable(column))), map(len, column))


def _regroup(items: list[Any], sizes: Iterable[int]) -> Iterator[list[Any]]:
    remaining = iter(items)
    return (list(islice(remaining, size)) for size in sizes)


# --- validation ---------------------------------------------------------------------------------
# The checks read fields by name, so they work on the wire messages and on the dataclasses alike.

@dataclasses.dataclass(frozen=True)
class _ListCheck:
    name: str
    kind: Kind  # SCALAR_LIST, MAP or MESSAGE_LIST
    limit: int
    numeric: bool
    item: type | None  # the dataclass of a MESSAGE_LIST's items


@dataclasses.dataclass(frozen=True)
class _Checks:
    """What to check in one message type."""

    numbers: tuple[str, ...]
    non_negative: tuple[str, ...]  # the numbers that are sizes, counts or shares
    lists: tuple[_ListCheck, ...]  # repeated fields and maps
    messages: tuple[tuple[str, type], ...]  # nested messages, with their dataclass


@cache
def _checks(cls: type) -> _Checks:
    fields = _fields(cls)
    numbers = tuple(field.name for field in fields if field.kind is Kind.SCALAR and field.numeric)
    lists = tuple(_ListCheck(field.name, field.kind, ITEM_LIMITS.get(field.name, MAX_ITEMS), field.numeric, field.item)
                  for field in fields if field.kind in (Kind.SCALAR_LIST, Kind.MAP, Kind.MESSAGE_LIST))
    messages = tuple((field.name, typing.cast(type, field.item)) for field in fields if field.kind is Kind.MESSAGE)
    return _Checks(numbers, tuple(name for name in numbers if name not in MAY_BE_NEGATIVE), lists, messages)


def _fine_numbers(numbers: list[Any], non_negative: list[Any]) -> bool:
    """Every number finite (one NaN or infinity makes the sum one) and every size non-negative."""
    return min(non_negative, default=0) >= 0 and math.isfinite(sum(numbers))


@cache
def _all_fine(cls: type) -> Callable[[Sequence[Any]], bool]:
    """The fast path, a filter: True when a column of messages of one type (all the pods of the
    reports at hand, ...) and everything inside them certainly passes. False sends the reports
    to the slow path, which has the last word."""
    checks = _checks(cls)
    get_numbers, get_non_negative = _getter(checks.numbers), _getter(checks.non_negative)
    same = checks.numbers == checks.non_negative

    def fine(items: Sequence[Any]) -> bool:
        if not items:  # the GPUs of nodes without any, ...
            return True
        numbers = list(chain.from_iterable(map(get_numbers, items)))
        if not _fine_numbers(numbers, numbers if same else list(chain.from_iterable(map(get_non_negative, items)))):
            return False
        for check in checks.lists:
            groups = list(map(attrgetter(check.name), items))
            if max(map(len, groups)) > check.limit:
                return False
            if check.kind is Kind.MESSAGE_LIST:
                if not _all_fine(typing.cast(type, check.item))(list(chain.from_iterable(groups))):
                    return False
            elif check.numeric:
                values = list(chain.from_iterable(map(methodcaller("values"), groups) if check.kind is Kind.MAP
                                                  else groups))
                if not _fine_numbers(values, values):
                    return False
        return all(_all_fine(nested)(list(map(attrgetter(name), items))) for name, nested in checks.messages)

    return fine


Describer = Callable[[Any, str, list[str]], None]


@cache
def _describe(cls: type) -> Describer:
    """The slow path: walks one message and everything inside it and names every problem with its path."""
    checks = _checks(cls)
    get_numbers = _getter(checks.numbers)

    def describe(item: Any, path: str, problems: list[str]) -> None:
        _name_bad_numbers(zip(checks.numbers, get_numbers(item)), path, problems)
        for check in checks.lists:
            values = getattr(item, check.name)
            if len(values) > check.limit:
                problems.append(f"{path}{check.name} has {len(values)} items, more than {check.limit}")
            elif check.kind is Kind.MESSAGE_LIST:
                for index, element in enumerate(values):
                    _describe(typing.cast(type, check.item))(element, f"{path}{check.name}[{index}].", problems)
            elif check.numeric:
                named = values.items() if check.kind is Kind.MAP else enumerate(values)
                _name_bad_numbers(((f"{check.name}[{key!r}]", value) for key, value in named), path, problems)
        for name, nested in checks.messages:
            _describe(nested)(getattr(item, name), f"{path}{name}.", problems)

    return describe


def _name_bad_numbers(named_values: Iterable[tuple[str, float]], path: str, problems: list[str]) -> None:
    for name, value in named_values:
        if not math.isfinite(value):
            problems.append(f"{path}{name} is not a finite number ({value})")
        elif value < 0 and name.split("[", 1)[0] not in MAY_BE_NEGATIVE:
            problems.append(f"{path}{name} is negative ({value})")
