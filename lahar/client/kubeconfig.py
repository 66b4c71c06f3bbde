"""A kubeconfig for the embedded API server, for kubectl and for Lahar's own components."""

from __future__ import annotations

import base64

import yaml


def embedded_kubeconfig(
    server_url: str, token: str | None = None, ca_pem: bytes | None = None, name: str = "lahar"
) -> str:
    user: dict[str, str] = {"token": token} if token else {}
    cluster: dict[str, str] = {"server": server_url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)
