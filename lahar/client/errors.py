"""The API's refusals as exceptions: KubeError subclasses carrying the HTTP code and the Status'
reason and message, so callers write `except NotFound` or `except Conflict`. Free of the
kubernetes package, so code that only catches them stays light to import."""

from __future__ import annotations

import builtins
import json
from typing import Any

Obj = dict[str, Any]


class KubeError(Exception):
    """A request the API refused (or, for ApiUnavailable, never answered)."""

    def __init__(self, status: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details or {}


class ApiUnavailable(KubeError):
    """The API server could not be reached, or the connection broke before the answer was complete."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "ServiceUnavailable", message)


class BadRequest(KubeError):
    pass


class Unauthorized(KubeError):
    pass


class Forbidden(KubeError):
    pass


class NotFound(KubeError):
    pass


class AlreadyExists(KubeError):
    pass


class Conflict(KubeError):
    """A stale resourceVersion, a failed UID precondition, or a pod that is already bound."""


class Gone(KubeError):
    """The resourceVersion asked for is older than the server's history: list again."""


class Invalid(KubeError):
    """The object breaks a validation rule; `causes` lists the fields."""

    @property
    def causes(self) -> builtins.list[Obj]:
        return list(self.details.get("causes") or [])


class TooManyRequests(KubeError):
    """Rate limited, or an eviction a PodDisruptionBudget refuses for now."""


# The Status reason decides first (409 is both AlreadyExists and Conflict); the code is the fallback.
ERRORS_BY_REASON: dict[str, type[KubeError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Gone": Gone,
    "Expired": Gone,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
}
ERRORS_BY_CODE: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(code: int, body: bytes | Obj | None) -> KubeError:
    """The KubeError for an HTTP failure, from its Status body when it has one."""
    status = _parse_status(body)
    reason = str(status.get("reason") or "")
    code = int(status.get("code") or code)
    message = str(status.get("message") or "") or _body_text(body) or f"HTTP {code}"
    error_type = ERRORS_BY_REASON.get(reason) or ERRORS_BY_CODE.get(code, KubeError)
    return error_type(code, reason or error_type.__name__, message, status.get("details"))


def _parse_status(body: bytes | Obj | None) -> Obj:
    if isinstance(body, dict):
        return body
    try:
        parsed = json.loads(body) if body else {}
    except (ValueError, UnicodeDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) and parsed.get("kind") == "Status" else {}


def _body_text(body: bytes | Obj | None) -> str:
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace").strip()[:500]
    return ""
