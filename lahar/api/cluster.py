"""Cluster (`federation.lahar.dev/v1alpha1`, cluster-scoped): a member cluster of a federation, as
the hub knows it. `lahar federation` (federation/) reads the spec to reach the member and keeps the
status; the hub's users read both (`kubectl get clusters`).

```yaml
apiVersion: federation.lahar.dev/v1alpha1
kind: Cluster
metadata:
  name: member-eu
  labels: {region: eu-west, accelerator: a100}   # what Jobs' cluster affinity selects on
spec:
  endpoint: https://10.0.0.7:6443                 # the member's API server
  secretRef: {namespace: lahar-federation, name: member-eu}   # keys: token, ca.crt (both optional)
  insecureSkipTLSVerify: false
  cost: 1.5                                       # relative price of a unit of capacity here
  unschedulable: false                            # true: no new Jobs go there (running ones stay)
status:                                           # written by lahar federation
  reachable: true
  lastHeartbeatTime: "2026-01-01T00:00:00Z"
  capacity: {cpu: "64", memory: 256Gi}            # the Ready nodes' allocatable, summed
  allocatable: {cpu: "40", memory: 200Gi}         # what the pods bound there leave free
  allocatableByQueue: {team-a: {cpu: "8"}}        # free room each member queue may still take
  queueCapability: {team-a: {cpu: "16"}}          # the member queues' own capability
  conditions: [{type: Ready, status: "True", reason: Reachable, message: ..., lastTransitionTime: ...}]
```

The credentials stay in the Secret; the Cluster only names it, so `kubectl get cluster -o yaml`
never shows a token."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from lahar.api.errors import TYPE_INVALID, Field, FieldError, describe
from lahar.api.meta import (
    ObjectView,
    check_name,
    dns1123_label_problems,
    dns1123_subdomain_problems,
)

# The keys of the Secret a Cluster names: a bearer token and the CA bundle that signs the member's
# serving certificate. Either may be absent (an embedded server on loopback needs neither).
SECRET_TOKEN_KEY = "token"
SECRET_CA_KEY = "ca.crt"

# status.conditions[type=Ready].reason values: why the hub can or cannot use the member.
REACHABLE = "Reachable"
UNREACHABLE = "Unreachable"
UNAUTHORIZED = "Unauthorized"
SECRET_NOT_FOUND = "SecretNotFound"
BAD_SECRET = "InvalidSecret"
READY_CONDITION = "Ready"


class Cluster(ObjectView):
    """A read-only view over a (valid) Cluster dict."""

    __slots__ = ()

    @property
    def endpoint(self) -> str:
        return str(self.spec.get("endpoint") or "")

    @property
    def secret_ref(self) -> tuple[str, str] | None:
        """(namespace, name) of the credentials Secret, or None."""
        ref = self.spec.get("secretRef")
        if not isinstance(ref, Mapping) or not ref.get("name"):
            return None
        return str(ref.get("namespace") or "default"), str(ref["name"])

    @property
    def insecure_skip_tls_verify(self) -> bool:
        return self.spec.get("insecureSkipTLSVerify") is True

    @property
    def cost(self) -> float:
        cost = self.spec.get("cost")
        return float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else 0.0

    @property
    def unschedulable(self) -> bool:
        return self.spec.get("unschedulable") is True

    @property
    def reachable(self) -> bool:
        return self.status.get("reachable") is True

    @property
    def last_heartbeat(self) -> str | None:
        beat = self.status.get("lastHeartbeatTime")
        return beat if isinstance(beat, str) else None


def _validate_endpoint(endpoint: Field) -> None:
    text = endpoint.require_str("is required: the member's API server URL (https://host:port)")
    if text is None:
        return
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError on a port out of range or not a number
    except ValueError as exc:
        endpoint.report(f"not a URL: {exc}")
        return
    if parts.scheme not in ("http", "https") or not parts.hostname:
        endpoint.report(f'must be an http:// or https:// URL with a host, not "{text}"')
    elif parts.query or parts.fragment or parts.username or parts.password:
        endpoint.report("must not carry a query, fragment or credentials (credentials go in secretRef)")
    elif port == 0:
        endpoint.report("port 0 is not a port to connect to")


def _validate_secret_ref(ref: Field) -> None:
    if ref.as_mapping() is None:
        return
    if ref.child("name").require_str("is required: the Secret holding the member's credentials") is not None:
        check_name(ref.child("name"), dns1123_subdomain_problems)
    namespace = ref.child("namespace")
    if namespace.present:
        check_name(namespace, dns1123_label_problems)
    for key in ref.as_mapping() or {}:
        if key not in ("name", "namespace"):
            ref.child(key).report("unknown field (secretRef takes name and namespace)")


def _validate_cost(cost: Field) -> None:
    value = cost.value
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        cost.report(f"expected a number, got {describe(value)}", TYPE_INVALID)
    elif not math.isfinite(value) or value < 0:
        cost.report(f"must be a finite number >= 0, not {value}")


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    spec = root.child("spec")
    if not spec.require_present() or spec.as_mapping() is None:
        return root.errors
    _validate_endpoint(spec.child("endpoint"))
    _validate_secret_ref(spec.child("secretRef"))
    spec.child("insecureSkipTLSVerify").as_bool()
    spec.child("unschedulable").as_bool()
    _validate_cost(spec.child("cost"))
    status = root.child("status")
    if status.as_mapping() is not None:
        status.child("reachable").as_bool()
        status.child("lastHeartbeatTime").as_str()
        for name in ("capacity", "allocatable"):
            status.child(name).as_quantities()
        for name in ("allocatableByQueue", "queueCapability"):
            for _, per_queue in status.child(name).entries():
                per_queue.as_quantities()
        status.child("conditions").as_list()
    return root.errors
