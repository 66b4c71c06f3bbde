"""Kubernetes quantities: grammar, canonical form, exact arithmetic, rounding."""

from __future__ import annotations

import copy
import pickle
from decimal import Decimal
from fractions import Fraction

import pytest

from lahar.api.quantity import (
    MAX_INT64,
    Quantity,
    QuantityError,
    QuantityFormat,
    cpu_millis,
    memory_bytes,
    parse_quantity,
)

BINARY = QuantityFormat.BINARY_SI
DECIMAL = QuantityFormat.DECIMAL_SI
EXPONENT = QuantityFormat.DECIMAL_EXPONENT


@pytest.mark.parametrize(
    ("text", "canonical", "fmt", "value", "milli"),
    [
        ("100m", "100m", DECIMAL, 1, 100),
        ("1.5", "1500m", DECIMAL, 2, 1500),
        ("2Gi", "2Gi", BINARY, 2 * 2**30, 2 * 2**30 * 1000),
        ("1e3", "1e3", EXPONENT, 1000, 1_000_000),
        ("500M", "500M", DECIMAL, 500_000_000, 500_000_000_000),
        ("0.5Gi", "512Mi", BINARY, 2**29, 2**29 * 1000),
        ("-1", "-1", DECIMAL, -1, -1000),
        ("+3", "3", DECIMAL, 3, 3000),
        ("0", "0", DECIMAL, 0, 0),
        ("1000m", "1", DECIMAL, 1, 1000),
        ("1024Mi", "1Gi", BINARY, 2**30, 2**30 * 1000),
        ("1536Mi", "1536Mi", BINARY, 1536 * 2**20, 1536 * 2**20 * 1000),
        ("1.5Gi", "1536Mi", BINARY, 1536 * 2**20, 1536 * 2**20 * 1000),
        ("1Ki", "1Ki", BINARY, 1024, 1_024_000),
        ("1.5Ki", "1536", BINARY, 1536, 1_536_000),
        ("0.5Ki", "512", BINARY, 512, 512_000),
        ("1E3", "1e3", EXPONENT, 1000, 1_000_000),
        ("1000e0", "1e3", EXPONENT, 1000, 1_000_000),
        ("1.5e3", "1500", EXPONENT, 1500, 1_500_000),
        ("100e-3", "100e-3", EXPONENT, 1, 100),
        ("1E-2", "10e-3", EXPONENT, 1, 10),
        ("1e+3", "1e3", EXPONENT, 1000, 1_000_000),
        ("1.2345", "1234500u", DECIMAL, 2, 1235),
        ("1k", "1k", DECIMAL, 1000, 1_000_000),
        ("1000k", "1M", DECIMAL, 10**6, 10**9),
        ("1E", "1E", DECIMAL, 10**18, 10**21),
        ("1000E", "1e21", DECIMAL, 10**21, 10**24),
        ("5n", "5n", DECIMAL, 1, 1),
        ("250u", "250u", DECIMAL, 1, 1),
        ("1.", "1", DECIMAL, 1, 1000),
        (".5", "500m", DECIMAL, 1, 500),
        ("007", "7", DECIMAL, 7, 7000),
        ("-0", "0", DECIMAL, 0, 0),
        ("12Ti", "12Ti", BINARY, 12 * 2**40, 12 * 2**40 * 1000),
        ("1Pi", "1Pi", BINARY, 2**50, 2**50 * 1000),
        ("2Ei", "2Ei", BINARY, 2**61, 2**61 * 1000),
        ("0.1m", "100u", DECIMAL, 1, 1),
        ("-1.5", "-1500m", DECIMAL, -2, -1500),
        ("-2Gi", "-2Gi", BINARY, -(2**31), -(2**31) * 1000),
    ],
)
def test_parse_examples(text: str, canonical: str, fmt: QuantityFormat, value: int, milli: int) -> None:
    quantity = parse_quantity(text)
    assert str(quantity) == canonical
    assert quantity.format is fmt
    assert quantity.value() == value
    assert int(quantity) == value
    assert quantity.milli_value() == milli


@pytest.mark.parametrize(
    "text",
    [
        "100m",
        "1.5",
        "2Gi",
        "1e3",
        "500M",
        "0.5Gi",
        "-1",
        "+3",
        "1536Mi",
        "1.2345",
        "1000E",
        "7.5e-3",
        "0.1n",
        "-3Ki",
        "1.5Ki",
        "123456789",
        "999n",
    ],
)
def test_canonical_form_round_trips(text: str) -> None:
    quantity = parse_quantity(text)
    again = parse_quantity(str(quantity))
    assert again == quantity
    assert str(again) == str(quantity)
    # The format may change ("1536" re-parses as decimal SI), the printed form may not.
    assert str(parse_quantity(str(again))) == str(quantity)


@pytest.mark.parametrize(
    ("text", "nanos", "canonical"),
    [
        ("0.1n", 1, "1n"),
        ("-0.1n", -1, "-1n"),
        ("1.0000000001", 1_000_000_001, "1000000001n"),
        ("0.0000000001", 1, "1n"),
        ("1e-5000", 1, "1e-9"),
        ("1.5n", 2, "2n"),
    ],
)
def test_sub_nano_precision_rounds_away_from_zero(text: str, nanos: int, canonical: str) -> None:
    quantity = parse_quantity(text)
    assert quantity.nanos == nanos
    assert str(quantity) == canonical


def test_binary_si_is_capped_at_int64_like_kubernetes() -> None:
    assert parse_quantity("8Ei").value() == MAX_INT64
    assert str(parse_quantity("8Ei")) == "9223372036854775807"
    assert parse_quantity("-8Ei").value() == -MAX_INT64
    assert parse_quantity("7Ei").value() == 7 * 2**60


def test_decimal_values_are_not_capped() -> None:
    assert parse_quantity("18446744073709551616").value() == 2**64
    assert parse_quantity("1e30").value() == 10**30


def test_binary_sum_past_ei_keeps_a_valid_suffix() -> None:
    total = parse_quantity("4Ei") * 1024
    assert str(total) == "4096Ei"
    assert parse_quantity(str(total)).value() == MAX_INT64  # re-parsing caps, as Go would


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", 'invalid quantity "": empty string'),
        ("1 Gi", 'invalid quantity "1 Gi": contains whitespace'),
        (" 1", 'invalid quantity " 1": contains whitespace'),
        ("1\t", 'invalid quantity "1\\t": contains whitespace'),
        ("1.2.3", 'invalid quantity "1.2.3": more than one decimal point'),
        ("Gi", 'invalid quantity "Gi": missing number'),
        ("abc", 'invalid quantity "abc": missing number'),
        (".", 'invalid quantity ".": missing number'),
        ("+", 'invalid quantity "+": missing number'),
        ("--1", 'invalid quantity "--1": missing number'),
        ("12Qi", 'invalid quantity "12Qi": unknown suffix "Qi"'),
        ("1gi", 'invalid quantity "1gi": unknown suffix "gi" (suffixes are case-sensitive: did you mean "Gi"?)'),
        ("1KI", 'invalid quantity "1KI": unknown suffix "KI" (suffixes are case-sensitive: did you mean "Ki"?)'),
        ("1K", 'invalid quantity "1K": unknown suffix "K" (suffixes are case-sensitive: did you mean "k"?)'),
        ("1e", 'invalid quantity "1e": malformed exponent "e": expected an integer after "e"'),
        ("1E+", 'invalid quantity "1E+": malformed exponent "E+": expected an integer after "E"'),
        ("1e3.5", 'invalid quantity "1e3.5": malformed exponent "e3.5": expected an integer after "e"'),
        ("1Gi1", 'invalid quantity "1Gi1": unknown suffix "Gi1"'),
        ("1e5000", 'invalid quantity "1e5000": exponent 5000 out of range (at most 1000)'),
        ("1" * 300, f'invalid quantity "{"1" * 61}...": longer than 256 characters'),
        (True, "invalid quantity True: expected a string or number, got bool"),
        (False, "invalid quantity False: expected a string or number, got bool"),
        (None, "invalid quantity None: expected a string or number, got NoneType"),
        (float("nan"), "invalid quantity nan: not a finite number"),
        (float("inf"), "invalid quantity inf: not a finite number"),
        (float("-inf"), "invalid quantity -inf: not a finite number"),
        (Decimal("NaN"), "invalid quantity Decimal('NaN'): not a finite number"),
        ([1], "invalid quantity [1]: expected a string or number, got list"),
    ],
)
def test_rejected_forms_name_the_input(value: object, message: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(value)  # type: ignore[arg-type]
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_errors_are_raised_every_time_not_cached() -> None:
    for _ in range(2):
        with pytest.raises(QuantityError):
            parse_quantity("12Qi")


def test_numbers_are_accepted_in_decimal_si() -> None:
    assert str(parse_quantity(2)) == "2"
    assert str(parse_quantity(0.1)) == "100m"
    assert str(parse_quantity(1.5)) == "1500m"
    assert str(parse_quantity(1e16)) == "10P"
    assert str(parse_quantity(Decimal("0.25"))) == "250m"
    assert str(parse_quantity(Decimal("1E+3"))) == "1k"
    assert parse_quantity(3).format is DECIMAL
    assert parse_quantity(-0.0) == 0


def test_quantity_passes_through_and_constructor_parses() -> None:
    quantity = parse_quantity("2Gi")
    assert parse_quantity(quantity) is quantity
    assert Quantity("2Gi") == quantity
    assert str(Quantity("1.5")) == "1500m"
    assert Quantity() == 0
    with pytest.raises(QuantityError, match='"2XB"'):
        Quantity("2XB")


def test_arithmetic_is_exact() -> None:
    assert parse_quantity(0.1) + parse_quantity(0.2) == parse_quantity(0.3)
    assert Quantity("0.1") + Quantity("0.2") == Quantity("0.3")
    assert str(Quantity("0.1") + Quantity("0.2")) == "300m"
    assert Quantity("1n") * 3 == Quantity("3n")
    assert Quantity("0.3") - Quantity("0.1") - Quantity("0.2") == 0
    total = sum((Quantity("100m") for _ in range(10)), Quantity.zero())
    assert total == 1
    assert str(total) == "1"


def test_sum_keeps_the_left_format_unless_left_is_zero() -> None:
    assert str(Quantity("1Gi") + Quantity("512Mi")) == "1536Mi"
    assert str(Quantity("1") + Quantity("1Ki")) == "1025"
    assert (Quantity("1") + Quantity("1Ki")).format is DECIMAL
    assert str(Quantity.zero() + Quantity("1Gi")) == "1Gi"
    assert str(Quantity("0") - Quantity("1Gi")) == "-1Gi"
    assert str(Quantity("1e3") + Quantity("1k")) == "2e3"
    assert str(Quantity("2Gi") - Quantity("1Gi")) == "1Gi"
    assert str(Quantity("1Gi") - Quantity("2Gi")) == "-1Gi"


def test_arithmetic_with_int() -> None:
    assert Quantity("1.5") + 1 == Quantity("2.5")
    assert str(1 + Quantity("500m")) == "1500m"
    assert 3 - Quantity("1") == 2
    assert Quantity("1") - 3 == -2
    assert str(2 * Quantity("1Gi")) == "2Gi"
    assert str(-Quantity("1Gi")) == "-1Gi"
    assert abs(Quantity("-5m")) == Quantity("5m")
    with pytest.raises(TypeError):
        Quantity("1") + 1.5  # type: ignore[operator]
    with pytest.raises(TypeError):
        Quantity("1") * Quantity("2")  # type: ignore[operator]
    with pytest.raises(TypeError):
        Quantity("1") + True  # type: ignore[operator]


def test_ordering_and_equality_follow_the_value() -> None:
    assert Quantity("1000m") == Quantity("1") == Quantity("1e0") == 1
    assert Quantity("1Ki") == Quantity("1024") == 1024
    assert Quantity("1k") < Quantity("1Ki")
    assert Quantity("999m") < 1 < Quantity("1001m")
    assert Quantity("1G") > Quantity("953Mi")
    assert Quantity("1G") < Quantity("954Mi")
    assert Quantity("2") >= 2 and Quantity("2") <= 2
    assert not Quantity("2") > 2 and not Quantity("2") < 2
    assert Quantity("-1") < Quantity("0")
    assert Quantity("1") != Quantity("1001m")
    assert Quantity("1") != "1"
    assert Quantity("1") != True  # noqa: E712 - bool is not a quantity
    ordered = sorted(Quantity(text) for text in ["1Gi", "100m", "1e3", "1G", "-1", "0"])
    assert [str(q) for q in ordered] == ["-1", "0", "100m", "1e3", "1G", "1Gi"]
    with pytest.raises(TypeError):
        _ = Quantity("1") < 1.5  # type: ignore[operator]


def test_hash_matches_equality() -> None:
    assert hash(Quantity("1000m")) == hash(Quantity("1")) == hash(1)
    assert len({Quantity("1Ki"), Quantity("1024"), Quantity("1.024k"), 1024}) == 1
    assert {Quantity("1"): "one"}[1] == "one"


def test_conversions() -> None:
    assert float(Quantity("1.5")) == 1.5
    assert float(Quantity("100m")) == 0.1
    assert bool(Quantity("1n")) is True
    assert bool(Quantity("0")) is False
    assert bool(Quantity.zero()) is False
    assert Quantity("1.5").amount == Fraction(3, 2)
    assert Quantity("1n").amount == Fraction(1, 10**9)
    assert Quantity("1.5").as_decimal() == Decimal("1.5")
    assert str(Quantity("1.5").as_decimal()) == "1.5"
    assert Quantity("-250m").as_decimal() == Decimal("-0.25")
    assert Quantity("0").as_decimal() == 0
    assert Quantity("123456789012345678901234567890.5").as_decimal() == Decimal("123456789012345678901234567890.5")
    assert Quantity("2Gi").nanos == 2**31 * 10**9


def test_value_rounds_up_and_away_from_zero() -> None:
    assert Quantity("0.1").value() == 1
    assert Quantity("1n").value() == 1
    assert Quantity("1n").milli_value() == 1
    assert Quantity("1.0001m").milli_value() == 2
    assert Quantity("2").value() == 2
    assert Quantity("-100m").value() == -1
    assert Quantity("-1.5m").milli_value() == -2


def test_constructors_and_formats() -> None:
    assert str(Quantity.from_milli(1500)) == "1500m"
    assert str(Quantity.from_milli(2000)) == "2"
    assert str(Quantity.from_int(2**31, BINARY)) == "2Gi"
    assert str(Quantity.from_int(1000, BINARY)) == "1k"
    assert str(Quantity.from_int(3 * 2**20 + 1, BINARY)) == "3145729"
    assert str(Quantity.from_nanos(5)) == "5n"
    assert str(Quantity.from_nanos(1500 * 10**9, EXPONENT)) == "1500"
    assert str(Quantity("1536Mi").with_format(DECIMAL)) == "1610612736"
    assert str(Quantity("1k").with_format(EXPONENT)) == "1e3"
    assert Quantity.zero().format is DECIMAL
    assert str(Quantity.zero()) == "0"
    with pytest.raises(TypeError):
        Quantity.from_nanos(1.5)  # type: ignore[arg-type]


def test_quantity_is_immutable_and_copyable() -> None:
    quantity = Quantity("2Gi")
    with pytest.raises(AttributeError):
        quantity._nanos = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del quantity._format
    restored = pickle.loads(pickle.dumps(quantity))
    assert restored == quantity and str(restored) == "2Gi"
    assert str(copy.deepcopy(quantity)) == "2Gi"
    assert repr(quantity) == "Quantity('2Gi')"


def test_cpu_and_memory_helpers() -> None:
    assert cpu_millis("100m") == 100
    assert cpu_millis("1.5") == 1500
    assert cpu_millis(2) == 2000
    assert cpu_millis("0.1m") == 1
    assert memory_bytes("2Gi") == 2147483648
    assert memory_bytes("500M") == 500_000_000
    assert memory_bytes("1.5Ki") == 1536
    assert memory_bytes("0.5") == 1
    with pytest.raises(QuantityError, match=r'invalid quantity "1gi"'):
        memory_bytes("1gi")
