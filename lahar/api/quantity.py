"""Kubernetes resource quantities ("100m", "2Gi", "1e3"), parsed and printed the way
k8s.io/apimachinery's ``resource.Quantity`` does.

A :class:`Quantity` holds its value exactly as an integer number of nano-units (10^-9), the
finest precision Kubernetes keeps: every parsed value is rounded to nano, so an integer count of
nanos is exact, hashable and fast to add and compare (``0.1 + 0.2 == 0.3`` holds). It also keeps
the format it was written in (binary SI, decimal SI or decimal exponent) so that ``str(q)`` gives
Kubernetes' canonical form.

Where this module deliberately differs from Go's implementation (quirks, not rules):

- Go echoes some inputs back verbatim because it caches the original string ("+3", "01", "1E3");
  ``str()`` here always gives the canonical form ("3", "1", "1e3").
- Go's grammar scanner lets "Gi" and "." through as zero; both break the documented grammar
  (``<number>`` needs a digit) and the CRD validation pattern, so they are refused here.
- Inputs are limited to :data:`MAX_QUANTITY_LENGTH` characters and decimal exponents to
  :data:`MAX_EXPONENT`, so a hostile manifest cannot make us build a googol-digit integer.
- Binary SI values too large for "Ei" print as a multiple of "Ei" ("1024Ei"), where Go would drop
  the suffix and print a wrong number.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import operator
import re
from decimal import Decimal
from fractions import Fraction
from typing import Union

NANO = 10**9
MILLI_IN_NANOS = 10**6
MAX_INT64 = 2**63 - 1
MAX_QUANTITY_LENGTH = 256
MAX_EXPONENT = 1000


class QuantityError(ValueError):
    """A quantity that Kubernetes would refuse; the message names the offending input."""


class QuantityFormat(enum.Enum):
    """How a quantity was written, which decides how it is printed back (Go's ``Format``)."""

    DECIMAL_SI = "DecimalSI"  # 12M = 12 * 10^6
    BINARY_SI = "BinarySI"  # 12Mi = 12 * 2^20
    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6


BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_SUFFIX_BY_EXPONENT = {exponent: suffix for suffix, exponent in DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIX_BY_POWER = {power // 10: suffix for suffix, power in BINARY_SUFFIXES.items()}
_BINARY_SUFFIX_BY_POWER[0] = ""
_MAX_BINARY_POWER = max(_BINARY_SUFFIX_BY_POWER)
# Lower-cased spelling -> real suffix, to suggest "Gi" for "gi" or "Ki" for "KI".
_SUFFIX_HINTS = {suffix.lower(): suffix for suffix in (*BINARY_SUFFIXES, *DECIMAL_SUFFIXES) if suffix}

_NUMBER = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?")
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")

QuantityLike = Union[str, int, float, Decimal, "Quantity"]


def _describe(value: object) -> str:
    """The bad input as the error message shows it: strings quoted, long ones shortened."""
    if isinstance(value, str):
        shown = value if len(value) <= 64 else value[:61] + "..."
        return json.dumps(shown, ensure_ascii=False)
    return repr(value)


def _error(value: object, reason: str) -> QuantityError:
    return QuantityError(f"invalid quantity {_describe(value)}: {reason}")


def _round_away_from_zero(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded away from zero, as Kubernetes rounds (inf.RoundUp)."""
    quotient, remainder = divmod(abs(numerator), denominator)
    if remainder:
        quotient += 1
    return quotient if numerator >= 0 else -quotient


def _scale_to_nanos(mantissa: int, decimal_exponent: int) -> int:
    """mantissa * 10^decimal_exponent in nanos, a finer remainder rounded away from zero."""
    shift = decimal_exponent + 9
    if shift >= 0:
        factor: int = 10**shift  # int ** int is typed Any: a negative exponent would give a float
        return mantissa * factor
    if -shift > len(str(abs(mantissa))):
        # Smaller than one nano: skip building 10^huge, the answer is +-1n (or 0).
        return (mantissa > 0) - (mantissa < 0)
    return _round_away_from_zero(mantissa, 10**-shift)


class Quantity:
    """An exact Kubernetes quantity: an integer number of nanos plus the format it prints in.

    ``Quantity("2Gi")`` parses like :func:`parse_quantity`. Equality, ordering and hashing look at
    the value only (``Quantity("1000m") == Quantity("1") == 1``), as Go's ``Cmp`` does; the format
    only affects ``str()``.
    """

    __slots__ = ("_format", "_nanos")
    _nanos: int
    _format: QuantityFormat

    def __init__(self, value: QuantityLike = 0) -> None:
        parsed = parse_quantity(value)
        object.__setattr__(self, "_nanos", parsed._nanos)
        object.__setattr__(self, "_format", parsed._format)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_nanos(cls, nanos: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """The quantity nanos * 10^-9 (no rounding: nano is the finest unit)."""
        quantity = object.__new__(cls)
        object.__setattr__(quantity, "_nanos", operator.index(nanos))
        object.__setattr__(quantity, "_format", fmt)
        return quantity

    @classmethod
    def from_milli(cls, milli: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """Like Go's ``NewMilliQuantity``: ``from_milli(1500)`` prints as "1500m"."""
        return cls.from_nanos(milli * MILLI_IN_NANOS, fmt)

    @classmethod
    def from_int(cls, value: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """Like Go's ``NewQuantity``: ``from_int(2**31, BINARY_SI)`` prints as "2Gi"."""
        return cls.from_nanos(value * NANO, fmt)

    @classmethod
    def zero(cls) -> Quantity:
        return cls.from_nanos(0)

    def with_format(self, fmt: QuantityFormat) -> Quantity:
        """The same value, printed in another format."""
        return Quantity.from_nanos(self._nanos, fmt)

    # -- accessors ----------------------------------------------------------------------------

    @property
    def nanos(self) -> int:
        return self._nanos

    @property
    def format(self) -> QuantityFormat:
        return self._format

    @property
    def amount(self) -> Fraction:
        """The exact value as a Fraction."""
        return Fraction(self._nanos, NANO)

    def as_decimal(self) -> Decimal:
        """The exact value as a Decimal (nine fractional digits at most, no context rounding)."""
        if self._nanos == 0:
            return Decimal(0)
        digits = str(abs(self._nanos))
        fraction_zeros = min(len(digits) - len(digits.rstrip("0")), 9)
        significant = digits[: len(digits) - fraction_zeros] or "0"
        return Decimal((int(self._nanos < 0), tuple(map(int, significant)), fraction_zeros - 9))

    def value(self) -> int:
        """The value as an integer, rounded away from zero, as Go's ``Value()``.

        For the non-negative quantities resources use this is the ceiling ("0.1" -> 1).
        """
        return _round_away_from_zero(self._nanos, NANO)

    def milli_value(self) -> int:
        """The value in thousandths, rounded away from zero, as Go's ``MilliValue()``."""
        return _round_away_from_zero(self._nanos, MILLI_IN_NANOS)

    def canonical(self) -> str:
        return _canonical_string(self._nanos, self._format)

    # -- protocol -----------------------------------------------------------------------------

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Quantity is immutable")

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r})"

    def __int__(self) -> int:
        return self.value()

    def __float__(self) -> float:
        return float(self.amount)

    def __bool__(self) -> bool:
        return self._nanos != 0

    def __hash__(self) -> int:
        # Hash as the number it equals, so Quantity("1") and 1 can share a dict slot.
        return hash(self.amount)

    def __reduce__(self) -> tuple[object, tuple[int, QuantityFormat]]:
        return (Quantity.from_nanos, (self._nanos, self._format))

    def __neg__(self) -> Quantity:
        return Quantity.from_nanos(-self._nanos, self._format)

    def __pos__(self) -> Quantity:
        return self

    def __abs__(self) -> Quantity:
        return Quantity.from_nanos(abs(self._nanos), self._format)

    def __add__(self, other: object) -> Quantity:
        other_quantity = _as_operand(other)
        if other_quantity is None:
            return NotImplemented
        return Quantity.from_nanos(self._nanos + other_quantity._nanos, _result_format(self, other_quantity))

    def __radd__(self, other: object) -> Quantity:
        other_quantity = _as_operand(other)
        if other_quantity is None:
            return NotImplemented
        return other_quantity + self

    def __sub__(self, other: object) -> Quantity:
        other_quantity = _as_operand(other)
        if other_quantity is None:
            return NotImplemented
        return Quantity.from_nanos(self._nanos - other_quantity._nanos, _result_format(self, other_quantity))

    def __rsub__(self, other: object) -> Quantity:
        other_quantity = _as_operand(other)
        if other_quantity is None:
            return NotImplemented
        return other_quantity - self

    def __mul__(self, factor: object) -> Quantity:
        if not isinstance(factor, int) or isinstance(factor, bool):
            return NotImplemented
        return Quantity.from_nanos(self._nanos * factor, self._format)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        other_nanos = _comparable_nanos(other)
        if other_nanos is None:
            return NotImplemented
        return self._nanos == other_nanos

    def __lt__(self, other: object) -> bool:
        other_nanos = _comparable_nanos(other)
        if other_nanos is None:
            return NotImplemented
        return self._nanos < other_nanos

    def __le__(self, other: object) -> bool:
        other_nanos = _comparable_nanos(other)
        if other_nanos is None:
            return NotImplemented
        return self._nanos <= other_nanos

    def __gt__(self, other: object) -> bool:
        other_nanos = _comparable_nanos(other)
        if other_nanos is None:
            return NotImplemented
        return self._nanos > other_nanos

    def __ge__(self, other: object) -> bool:
        other_nanos = _comparable_nanos(other)
        if other_nanos is None:
            return NotImplemented
        return self._nanos >= other_nanos


def _is_plain_int(value: object) -> bool:
    # bool is an int subclass, but True is not a quantity.
    return isinstance(value, int) and not isinstance(value, bool)


def _as_operand(other: object) -> Quantity | None:
    if isinstance(other, Quantity):
        return other
    if _is_plain_int(other):
        return Quantity.from_int(other)  # type: ignore[arg-type]
    return None


def _comparable_nanos(other: object) -> int | None:
    if isinstance(other, Quantity):
        return other._nanos
    if _is_plain_int(other):
        return other * NANO  # type: ignore[operator]
    return None


def _result_format(left: Quantity, right: Quantity) -> QuantityFormat:
    """Go's Add/Sub keep the receiver's format, unless the receiver is zero."""
    return right._format if left._nanos == 0 else left._format


# -- parsing ------------------------------------------------------------------------------------


def parse_quantity(value: QuantityLike) -> Quantity:
    """Parse a Kubernetes quantity string (or an int, finite float or Decimal).

    Strings follow Kubernetes' grammar: ``[+-]`` digits with an optional decimal point (``1``,
    ``1.5``, ``1.``, ``.5``), then a binary SI suffix (Ki Mi Gi Ti Pi Ei), a decimal SI suffix
    (n u m k M G T P E, or none) or a decimal exponent (``e3``, ``E-2``). Values finer than a nano
    round away from zero to the next nano; binary SI values are capped at 2^63-1 as Go does.
    Numbers (int, float, Decimal) print in decimal SI; a float is read through its shortest
    ``repr`` so ``0.1`` means exactly 1/10.
    """
    if isinstance(value, Quantity):
        return value
    if isinstance(value, str):
        return _parse_string(value)
    if isinstance(value, bool) or value is None:
        raise _error(value, f"expected a string or number, got {type(value).__name__}")
    if isinstance(value, int):
        return Quantity.from_int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _error(value, "not a finite number")
        return _from_decimal(value, Decimal(repr(value)))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _error(value, "not a finite number")
        return _from_decimal(value, value)
    raise _error(value, f"expected a string or number, got {type(value).__name__}")


def _from_decimal(original: object, number: Decimal) -> Quantity:
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite, checked by the caller
    if len(digits) > MAX_QUANTITY_LENGTH:
        raise _error(original, f"more than {MAX_QUANTITY_LENGTH} digits")
    if exponent > MAX_EXPONENT:
        raise _error(original, f"exponent {exponent} out of range (at most {MAX_EXPONENT})")
    mantissa = int("".join(map(str, digits)))
    return Quantity.from_nanos(_scale_to_nanos(-mantissa if sign else mantissa, exponent))


@functools.lru_cache(maxsize=4096)
def _parse_string(text: str) -> Quantity:
    # Cached: manifests repeat the same few strings ("100m", "1Gi") and Quantity is immutable.
    _check_shape(text)
    number = _NUMBER.match(text)
    assert number is not None  # every part of the pattern is optional
    sign, integer_digits, fraction_digits = number.groups()
    if not integer_digits and not fraction_digits:
        raise _error(text, "missing number")
    suffix = text[number.end() :]
    fmt, decimal_exponent, binary_power = _interpret_suffix(text, suffix)

    fraction_digits = fraction_digits or ""
    mantissa = int(integer_digits + fraction_digits or "0") << binary_power
    nanos = _scale_to_nanos(mantissa, decimal_exponent - len(fraction_digits))
    if fmt is QuantityFormat.BINARY_SI:
        nanos = min(nanos, MAX_INT64 * NANO)  # Go caps binary SI values silently
        if 0 < nanos < NANO:
            fmt = QuantityFormat.DECIMAL_SI  # a fraction of one unit cannot print in binary SI
    return Quantity.from_nanos(-nanos if sign == "-" else nanos, fmt)


def _check_shape(text: str) -> None:
    if not text:
        raise _error(text, "empty string")
    if len(text) > MAX_QUANTITY_LENGTH:
        raise _error(text, f"longer than {MAX_QUANTITY_LENGTH} characters")
    if any(character.isspace() for character in text):
        raise _error(text, "contains whitespace")


def _interpret_suffix(text: str, suffix: str) -> tuple[QuantityFormat, int, int]:
    """(format, decimal exponent, binary power) for a suffix, or a QuantityError."""
    if suffix in BINARY_SUFFIXES:
        return QuantityFormat.BINARY_SI, 0, BINARY_SUFFIXES[suffix]
    if suffix in DECIMAL_SUFFIXES:
        return QuantityFormat.DECIMAL_SI, DECIMAL_SUFFIXES[suffix], 0
    exponent = _EXPONENT.fullmatch(suffix)
    if exponent is not None:
        value = int(exponent.group(1))
        if value > MAX_EXPONENT:
            raise _error(text, f"exponent {value} out of range (at most {MAX_EXPONENT})")
        return QuantityFormat.DECIMAL_EXPONENT, value, 0
    raise _error(text, _suffix_problem(suffix))


def _suffix_problem(suffix: str) -> str:
    if suffix.startswith("."):
        return "more than one decimal point"
    if suffix[0] in "eE" and not suffix[1:2].isalpha():
        return f'malformed exponent "{suffix}": expected an integer after "{suffix[0]}"'
    problem = f"unknown suffix {_describe(suffix)}"
    hint = _SUFFIX_HINTS.get(suffix.lower())
    if hint is not None:
        problem += f' (suffixes are case-sensitive: did you mean "{hint}"?)'
    return problem


# -- printing -----------------------------------------------------------------------------------


def _canonical_string(nanos: int, fmt: QuantityFormat) -> str:
    """Kubernetes' canonical form: no fractional digits, the largest suffix that loses nothing.

    Binary SI is used only for whole values of at least 1Ki in magnitude; anything else that
    was written in binary SI prints in decimal SI ("0.5Ki" -> "512", "1.5" bytes -> "1500m").
    """
    if nanos == 0:
        return "0"
    if fmt is QuantityFormat.BINARY_SI:
        if abs(nanos) >= 1024 * NANO and nanos % NANO == 0:
            return _binary_string(nanos // NANO)
        fmt = QuantityFormat.DECIMAL_SI
    return _decimal_string(nanos, fmt)


def _binary_string(value: int) -> str:
    sign = "-" if value < 0 else ""
    amount = abs(value)
    power = 0
    while amount % 1024 == 0 and power < _MAX_BINARY_POWER:
        amount //= 1024
        power += 1
    return f"{sign}{amount}{_BINARY_SUFFIX_BY_POWER[power]}"


def _decimal_string(nanos: int, fmt: QuantityFormat) -> str:
    sign = "-" if nanos < 0 else ""
    digits = str(abs(nanos))
    mantissa = digits.rstrip("0")
    exponent = len(digits) - len(mantissa) - 9
    # Suffixes step by 10^3: move the exponent down to a multiple of 3.
    padding = exponent % 3
    mantissa += "0" * padding
    exponent -= padding
    if fmt is QuantityFormat.DECIMAL_SI and exponent in _DECIMAL_SUFFIX_BY_EXPONENT:
        return f"{sign}{mantissa}{_DECIMAL_SUFFIX_BY_EXPONENT[exponent]}"
    # Decimal exponent, or decimal SI past "E" (Go falls back to "e" there too: 1000E -> 1e21).
    return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")


# -- conveniences -------------------------------------------------------------------------------


def canonicalize_resource_list(resources: object) -> None:
    """Rewrite each parseable quantity of a resource list (a dict) in its canonical form, in
    place, as kube-apiserver does for the built-in kinds it decodes into Go structs ("0.5" is
    stored as "500m", 1024Mi as "1Gi", the JSON number 2 as "2"). Anything unparseable is left
    for validation to report."""
    if not isinstance(resources, dict):
        return
    for name, value in resources.items():
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            try:
                resources[name] = parse_quantity(value).canonical()
            except QuantityError:
                continue


def cpu_millis(value: QuantityLike) -> int:
    """CPU in millicores: "100m" -> 100, "1.5" -> 1500, 2 -> 2000 (Go's MilliValue)."""
    return parse_quantity(value).milli_value()


def memory_bytes(value: QuantityLike) -> int:
    """Memory in bytes: "2Gi" -> 2147483648, "500M" -> 500000000 (Go's Value, rounded up)."""
    return parse_quantity(value).value()
