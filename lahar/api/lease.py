"""Lease (`coordination.k8s.io/v1`): what leader election (lahar.client.leader) and node
heartbeats write. Validation as Kubernetes' ValidateLeaseSpec: durations positive, transitions
not negative, times as strings (MicroTime, RFC 3339 with microseconds)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lahar.api.errors import Field, FieldError

MICRO_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def micro_time(at: float) -> str:
    """A MicroTime as kube-apiserver writes and parses it (RFC 3339, six fractional digits)."""
    return datetime.fromtimestamp(at, tz=UTC).strftime(MICRO_TIME_FORMAT)


def parse_micro_time(text: str) -> float:
    """Seconds since the epoch; ValueError when `text` is no MicroTime."""
    return datetime.strptime(text, MICRO_TIME_FORMAT).replace(tzinfo=UTC).timestamp()


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    spec = root.child("spec")
    spec.child("holderIdentity").as_str()
    duration = spec.child("leaseDurationSeconds")
    seconds = duration.as_int()
    if seconds is not None and seconds <= 0:
        duration.report("must be greater than 0")
    spec.child("leaseTransitions").as_int(minimum=0)
    for key in ("acquireTime", "renewTime"):
        spec.child(key).as_str()
    return root.errors
