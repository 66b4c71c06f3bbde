"""Kubernetes `Status` failures: every error the API answers is one of these."""

from __future__ import annotations

from typing import Any

from lahar.api.kinds import Kind


class ApiError(Exception):
    """An HTTP failure with a Kubernetes Status body (reason and code as kube-apiserver uses them)."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def qualified(kind: Kind) -> str:
    """`pods`, `jobs.batch.volcano.sh`: how kube-apiserver names a resource in messages."""
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(kind)} "{name}" not found',
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def already_exists(kind: Kind, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(kind)} "{name}" already exists',
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def conflict(kind: Kind, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(kind)} "{name}": {why}',
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def stale(kind: Kind, name: str) -> ApiError:
    return conflict(
        kind, name, "the object has been modified; please apply your changes to the latest version and try again"
    )


def invalid(kind: Kind, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; causes are (field, message, reason) triples."""
    summary = "; ".join(f"{field}: {message}" for field, message, _ in causes)
    group_kind = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
    return ApiError(
        422,
        "Invalid",
        f'{group_kind} "{name}" is invalid: {summary}',
        {
            "name": name,
            "group": kind.group,
            "kind": kind.kind,
            "causes": [{"field": f, "message": m, "reason": r} for f, m, r in causes],
        },
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)
