"""A kubeconfig for the embedded API server, for kubectl and for Lahar's own components."""

from __future__ import annotations

import yaml


def embedded_kubeconfig(server_url: str, token: str | None = None, name: str = "lahar") -> str:
    user: dict[str, str] = {"token": token} if token else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server_url}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)
