"""Pod (anti-)affinity and topology spread constraints are validated as the API server does (issue
17, bad input): a malformed selector, a missing or invalid topology key, a weight or skew out of
range is refused with the field and the problem named, before a scheduler ever sees it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lahar.api import pod

BASE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "main", "image": "busybox"}]},
}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def errors(**spec: Any) -> list[str]:
    obj = copy.deepcopy(BASE)
    obj["spec"].update(spec)
    return [str(error) for error in pod.validate(obj)]


def test_well_formed_constraints_pass() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "topology.kubernetes.io/zone"}
    affinity = {
        "podAffinity": {REQUIRED: [term]},
        "podAntiAffinity": {PREFERRED: [{"weight": 100, "podAffinityTerm": term}]},
    }
    spread = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2}]
    assert errors(affinity=affinity, topologySpreadConstraints=spread) == []


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        (
            {
                "podAntiAffinity": {
                    REQUIRED: [{"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]
                }
            },
            ["'Near' is not a valid label selector operator", "topologyKey: is required"],
        ),
        ({"podAffinity": {REQUIRED: [{"topologyKey": "not a key"}]}}, ["topologyKey: invalid value"]),
        (
            {"podAffinity": {PREFERRED: [{"weight": 0, "podAffinityTerm": {"topologyKey": "zone"}}]}},
            ["weight: must be in the range 1-100"],
        ),
        ({"podAffinity": {PREFERRED: [{"weight": 5}]}}, ["podAffinityTerm: is required"]),
    ],
)
def test_malformed_affinity_is_refused_with_the_field_named(affinity: dict[str, Any], expected: list[str]) -> None:
    found = errors(affinity=affinity)
    assert len(found) == len(expected)
    for error, wanted in zip(found, expected, strict=True):
        assert error.startswith("spec.affinity.") and wanted in error


def test_malformed_spread_is_refused_with_the_field_named() -> None:
    spread = [
        {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "Maybe"},
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2},
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
        {"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "Sometimes"},
    ]
    found = errors(topologySpreadConstraints=spread)
    assert any("[0].maxSkew: must be greater than or equal to 1" in e for e in found)
    assert any("[0].whenUnsatisfiable: unsupported" in e for e in found)
    assert any("[1].minDomains: can only use minDomains if whenUnsatisfiable=DoNotSchedule" in e for e in found)
    assert any("[2]" in e and "given twice" in e for e in found)
    assert any("[3].topologyKey: is required" in e for e in found)
    assert any("[3].nodeTaintsPolicy: unsupported" in e for e in found)
    assert len(found) == 6
