"""Validation errors that name the field, and `Field`, the one cursor every validator walks objects
with: it builds the field path (`spec.tasks[1].name`), checks JSON types, and collects every error
of an object instead of stopping at the first."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast, overload

from lahar.api.quantity import Quantity, QuantityError, parse_quantity
from lahar.api.resources import to_base_units

T = TypeVar("T")
JsonValue = TypeVar("JsonValue")

# Reasons, spelled as Kubernetes spells field.ErrorType in a Status's details.causes.
REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
DUPLICATE = "FieldValueDuplicate"
NOT_SUPPORTED = "FieldValueNotSupported"
FORBIDDEN = "FieldValueForbidden"
TYPE_INVALID = "FieldValueTypeInvalid"
TOO_LONG = "FieldValueTooLong"

# The range of Go's int32 and int64, the types Kubernetes gives integer fields.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT_RANGES = {32: (INT32_MIN, INT32_MAX), 64: (INT64_MIN, INT64_MAX)}


@dataclass(frozen=True, slots=True)
class FieldError:
    field: str
    message: str
    reason: str = INVALID

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class ValidationError(ValueError):
    """All the field errors of one object; `str()` lists them, each with its field path."""

    def __init__(self, errors: Iterable[FieldError]) -> None:
        self.errors: list[FieldError] = list(errors)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "; ".join(str(error) for error in self.errors)


# A map key that reads well after a dot; anything else (`app.kubernetes.io/name`) goes in brackets.
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")

_JSON_TYPE_NAMES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
}


def json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    for python_type, name in _JSON_TYPE_NAMES.items():
        if isinstance(value, python_type):
            return name
    return type(value).__name__


def describe(value: Any) -> str:
    """A short rendering of a bad value for a message: `string "three"`, `array`, `object`."""
    name = json_type_name(value)
    if isinstance(value, (dict, list)):
        return name
    if isinstance(value, str) and len(value) > 40:
        value = value[:37] + "..."
    text = json.dumps(value) if isinstance(value, (str, int, float, bool)) else repr(value)
    return f"{name} {text}"


def quoted(values: Iterable[str]) -> str:
    return ", ".join(f'"{value}"' for value in values)


class Field:
    """A position in an object under validation: the value there, its path, and the error list
    shared by the whole walk. Navigating through a value of the wrong type reports the type error
    once (errors are de-duplicated) and yields absent children, so validators never see a
    TypeError or KeyError whatever the input."""

    __slots__ = ("errors", "path", "value")

    def __init__(self, value: Any, path: str = "", errors: list[FieldError] | None = None) -> None:
        self.value = value
        self.path = path
        self.errors: list[FieldError] = [] if errors is None else errors

    # --- navigation ---------------------------------------------------------------------------

    def child(self, name: str) -> Field:
        mapping = self.as_mapping()
        value = mapping.get(name) if mapping is not None else None
        return Field(value, self._join(name), self.errors)

    def elements(self) -> Iterator[Field]:
        """Each element of a list, as `path[i]`."""
        for index, value in enumerate(self.as_list() or ()):
            yield Field(value, f"{self.path}[{index}]", self.errors)

    def entries(self) -> Iterator[tuple[str, Field]]:
        """Each (key, value) of a map, the value at `path.key` (or `path[key]` for dotted keys)."""
        for key, value in (self.as_mapping() or {}).items():
            yield key, Field(value, self._join(str(key)), self.errors)

    def _join(self, name: str) -> str:
        if not self.path:
            return name
        return f"{self.path}.{name}" if _PLAIN_KEY.match(name) else f"{self.path}[{name}]"

    @property
    def present(self) -> bool:
        return self.value is not None

    # --- reporting ----------------------------------------------------------------------------

    def report(self, message: str, reason: str = INVALID) -> None:
        error = FieldError(self.path, message, reason)
        if error not in self.errors:
            self.errors.append(error)

    def required(self, message: str = "is required") -> None:
        self.report(message, REQUIRED)

    def not_supported(self, value: Any, allowed: Iterable[str], what: str = "value") -> None:
        self.report(f"unsupported {what} {json.dumps(value)} (supported: {quoted(allowed)})", NOT_SUPPORTED)

    def as_choice(self, allowed: Collection[str], what: str = "value") -> str | None:
        """One of `allowed`; an empty string counts as unset, as in Kubernetes enums."""
        value = self.as_str()
        if not value:
            return None
        if value not in allowed:
            self.not_supported(value, allowed, what)
            return None
        return value

    def require_nonempty_list(self, message: str) -> list[Any] | None:
        """A list that must hold something: absent or empty is reported as required."""
        items = self.as_list()
        if not items and (items is not None or not self.present):
            self.required(message)
        return items or None

    def require_str(self, message: str = "is required") -> str | None:
        """A non-empty string: absent or "" is reported as required, another type as a type error."""
        value = self.as_str()
        if value == "" or not self.present:
            self.required(message)
            return None
        return value

    def require_present(self, message: str = "is required") -> bool:
        if not self.present:
            self.required(message)
        return self.present

    # --- typed reads: None when absent or of the wrong type (the latter reported) ---------------

    @overload
    def _typed(self, expected: type[T], name: str) -> T | None: ...
    @overload
    def _typed(self, expected: tuple[type, ...], name: str) -> Any: ...
    def _typed(self, expected: type | tuple[type, ...], name: str) -> Any:
        value = self.value
        if value is None:
            return None
        # bool is an int subclass in Python, never in JSON.
        if isinstance(value, expected) and not (isinstance(value, bool) and bool not in _tuple(expected)):
            return value
        self.report(f"expected {name}, got {describe(value)}", TYPE_INVALID)
        return None

    def as_mapping(self) -> Mapping[str, Any] | None:
        found: Mapping[str, Any] | None = self._typed((Mapping,), "an object")  # abstract: no type[T]
        return found

    def as_list(self) -> list[Any] | None:
        return self._typed(list, "an array")

    def as_str(self) -> str | None:
        return self._typed(str, "a string")

    def as_bool(self) -> bool | None:
        return self._typed(bool, "a boolean")

    def as_int(self, minimum: int | None = None, bits: int = 32) -> int | None:
        """An integer of a Go `int32` (or, with bits=64, `int64`) field: JSON numbers with a
        fraction are refused, as Go's decoder does, and so is a value the field cannot hold (a
        replica count of 2^63-1 would have the controller make pods forever). Below `minimum`, or
        out of range, it is reported and None is returned."""
        value = self._typed(int, "an integer")
        if value is None:
            return None
        if minimum is not None and value < minimum:
            self.report(f"must be greater than or equal to {minimum}")
            return None
        low, high = INT_RANGES[bits]
        if not low <= value <= high:
            self.report(f"must be between {low} and {high}, inclusive (an int{bits})")
            return None
        return value

    def as_str_list(self) -> list[str] | None:
        items = self.as_list()
        if items is None:
            return None
        strings = [element.as_str() for element in self.elements()]
        return None if None in strings else strings  # type: ignore[return-value]

    def as_quantity(self) -> Quantity | None:
        """A resource quantity; JSON numbers are accepted as Kubernetes accepts them. Its value
        must fit Go's int64 (what `Value()` returns and every consumer counts in): "1e400" parses,
        as in Go, but no scheduler or kubelet can add it up."""
        value = self._typed((str, int, float), "a quantity string")
        if value is None:
            return None
        try:
            quantity = parse_quantity(value)
        except QuantityError as error:
            self.report(str(error))
            return None
        if not INT64_MIN <= quantity.value() <= INT64_MAX:
            self.report(f"invalid quantity {describe(value)}: out of range (at most {INT64_MAX} in magnitude)")
            return None
        return quantity

    def as_quantities(self) -> dict[str, Quantity] | None:
        """A resource list (`{cpu: 500m, memory: 1Gi}`); each bad entry is reported at its key.
        Amounts of resources are never negative (Kubernetes' ValidateNonnegativeQuantity)."""
        if self.as_mapping() is None:
            return None
        result: dict[str, Quantity] = {}
        for name, entry in self.entries():
            if not name:
                entry.report("resource name must not be empty")
                continue
            quantity = entry.as_quantity()
            if quantity is not None and quantity < 0:
                entry.report(f'invalid quantity "{entry.value}": must be greater than or equal to 0')
            elif quantity is not None and to_base_units(name, quantity) > INT64_MAX:
                # cpu is counted in millicores: a whole-unit value near the int64 limit overflows there.
                entry.report(f"invalid quantity {describe(entry.value)}: too large for {name} (int64 in its base unit)")
            elif quantity is not None:
                result[name] = quantity
        return result


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


# --- tolerant access, for defaulting (which runs before validation, on input of any shape) -----


def json_copy(value: JsonValue) -> JsonValue:
    """A deep copy of a JSON value (dicts, lists and scalars; anything else is shared, as an
    immutable scalar would be). Several times faster than copy.deepcopy, whose memo and per-type
    dispatch the API server paid on every node of every object it defaulted or patched."""
    return cast(JsonValue, _json_copy(value))


def _json_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) for item in value]
    return value


def dict_elements(value: Any) -> Iterator[dict[str, Any]]:
    """The dict elements of `value` when it is a list; nothing otherwise."""
    if isinstance(value, list):
        yield from (element for element in value if isinstance(element, dict))


def child_dict(parent: Any, key: str, create: bool = False) -> dict[str, Any] | None:
    """`parent[key]` when both are dicts (created empty when absent and `create`), else None."""
    if not isinstance(parent, dict):
        return None
    if create and parent.get(key) is None:
        parent[key] = {}
    child = parent.get(key)
    return child if isinstance(child, dict) else None


def set_default(obj: dict[str, Any], key: str, value: Any) -> None:
    """`obj[key] = value` when absent or null (JSON null means "not set", as in Kubernetes)."""
    if obj.get(key) is None:
        obj[key] = value
