"""`authorization.k8s.io/v1` self reviews: SelfSubjectAccessReview (`kubectl auth can-i VERB
RESOURCE`) and SelfSubjectRulesReview (`kubectl auth can-i --list`). The embedded API server has
one kind of client, the holder of its token (or, on loopback without a token, anyone who can
reach it), and it authorizes every authenticated request: so every review answers allowed, and
says why. Reviews are not stored; a malformed one is 400 and a create of anything else 405."""

from __future__ import annotations

from typing import Any

from lahar.apiserver import errors
from lahar.apiserver.errors import ApiError

GROUP_VERSION = "authorization.k8s.io/v1"
REASON = "the embedded API server authorizes every authenticated request (there is no RBAC here)"
RESOURCES = {
    "selfsubjectaccessreviews": "SelfSubjectAccessReview",
    "selfsubjectrulesreviews": "SelfSubjectRulesReview",
}


def discovery_resources() -> list[dict[str, Any]]:
    return [
        {"name": plural, "singularName": kind.lower(), "namespaced": False, "kind": kind, "verbs": ["create"]}
        for plural, kind in RESOURCES.items()
    ]


def review(plural: str, body: Any) -> dict[str, Any]:
    kind = RESOURCES[plural]
    if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
        raise errors.bad_request(f"a {kind} needs a spec")
    given_kind = body.get("kind")
    if given_kind not in (None, kind):
        raise errors.bad_request(f"the kind in the data ({given_kind}) does not match the expected kind ({kind})")
    spec = body["spec"]
    if kind == "SelfSubjectAccessReview":
        attributes = [key for key in ("resourceAttributes", "nonResourceAttributes") if spec.get(key)]
        if len(attributes) != 1:
            message = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
            raise ApiError(
                422,
                "Invalid",
                f'{kind}.authorization.k8s.io "" is invalid: spec: {message}',
                {"kind": kind, "group": "authorization.k8s.io", "causes": [{"field": "spec", "message": message}]},
            )
        status: dict[str, Any] = {"allowed": True, "reason": REASON}
    else:
        status = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
    return {
        "kind": kind,
        "apiVersion": GROUP_VERSION,
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }
