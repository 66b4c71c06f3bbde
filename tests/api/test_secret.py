"""Secret admission: stringData folds into data (and is never stored), type defaults to Opaque,
data values must be base64."""

from __future__ import annotations

import pytest

from lahar.api import admission
from lahar.api.errors import ValidationError
from lahar.api.kinds import SECRET


def secret(**fields: object) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}, **fields}


def test_string_data_is_encoded_into_data_and_wins_on_a_shared_key():
    obj = admission.apply_defaults(SECRET, secret(data={"k": "b2xk", "x": "eA=="}, stringData={"k": "v"}))
    assert obj["data"] == {"k": "dg==", "x": "eA=="}
    assert "stringData" not in obj and obj["type"] == "Opaque"
    admission.validate(SECRET, obj)


def test_data_that_is_not_base64_is_refused():
    with pytest.raises(ValidationError, match=r"data\.k: must be base64-encoded"):
        admission.validate(SECRET, admission.apply_defaults(SECRET, secret(data={"k": "not base64!"})))


def test_type_is_immutable():
    old = admission.apply_defaults(SECRET, secret())
    new = admission.apply_defaults(SECRET, secret(type="kubernetes.io/tls"))
    with pytest.raises(ValidationError, match="type: field is immutable"):
        admission.validate(SECRET, new, old)
