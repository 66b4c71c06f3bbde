"""The API server's request decoding as plain functions (apiserver/limits.py): JSON as Go's
decoder accepts it, nesting measured without recursion, query numbers parsed strictly."""

from __future__ import annotations

import time

import pytest

from lahar.apiserver import limits
from lahar.apiserver.errors import ApiError


def test_depth_ignores_brackets_in_strings() -> None:
    assert limits.json_depth(b'{"a": "[[[[{{{{", "b": [1, [2]]}') == 3
    assert limits.json_depth(b'"\\"[["') == 0
    assert limits.json_depth(b"[]") == 1


def test_deep_documents_are_refused_quickly() -> None:
    began = time.monotonic()
    with pytest.raises(limits.TooDeepError):
        limits.loads(b"[" * 3_000_000)
    assert time.monotonic() - began < 5


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', "1e400", "[-1e999]", "18446744073709551616"])
def test_what_go_cannot_decode_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        limits.loads(text)


def test_ordinary_json_decodes() -> None:
    assert limits.loads('{"a": [1, 2.5, -9223372036854775808, "x"]}') == {"a": [1, 2.5, -(2**63), "x"]}


def test_value_depth_is_iterative() -> None:
    value: list[object] = []
    for _ in range(5000):
        value = [value]
    assert limits.value_depth(value) > limits.MAX_JSON_DEPTH


@pytest.mark.parametrize("text", ["-1", "nan", "1.5", "inf", "1e3", "9" * 30, "0x10"])
def test_query_numbers_are_strict(text: str) -> None:
    with pytest.raises(ApiError) as caught:
        limits.query_int({"limit": text}, "limit", 0)
    assert caught.value.code == 400


def test_query_numbers_default_when_absent() -> None:
    assert limits.query_int({}, "limit", 7) == 7
    assert limits.query_int({"limit": "500"}, "limit", 0) == 500
