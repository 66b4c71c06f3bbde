"""API discovery documents (/api, /apis, /apis/<group>/<version>, /version) built from the kind registry."""

from __future__ import annotations

import platform
from typing import Any

import lahar
from lahar.api.kinds import ALL_KINDS, Kind, group_versions
from lahar.apiserver import authorization

OBJECT_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_KINDS = {
    "binding": ("Binding", ["create"]),
    "eviction": ("Eviction", ["create"]),
    "status": (None, ["get", "patch", "update"]),
    "scale": ("Scale", ["get", "patch", "update"]),
    "log": ("Pod", ["get"]),
    "exec": ("PodExecOptions", ["create", "get"]),
    "attach": ("PodAttachOptions", ["create", "get"]),
}
# The Kubernetes version whose REST semantics the embedded server follows.
KUBE_MINOR = "32"


def version_info() -> dict[str, Any]:
    return {
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": f"v1.{KUBE_MINOR}.0-lahar.{lahar.__version__}",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": f"python{platform.python_version()}",
        "compiler": "cpython",
        "platform": f"{platform.system().lower()}/{platform.machine()}",
    }


def _resource(kind: Kind) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": kind.plural,
        "singularName": kind.singular,
        "namespaced": kind.namespaced,
        "kind": kind.kind,
        "verbs": OBJECT_VERBS,
    }
    if kind.short_names:
        entry["shortNames"] = list(kind.short_names)
    if kind.categories:
        entry["categories"] = list(kind.categories)
    return entry


def _subresource(kind: Kind, sub: str) -> dict[str, Any]:
    sub_kind, verbs = SUBRESOURCE_KINDS[sub]
    entry: dict[str, Any] = {
        "name": f"{kind.plural}/{sub}",
        "singularName": "",
        "namespaced": kind.namespaced,
        "kind": sub_kind or kind.kind,
        "verbs": verbs,
    }
    if sub == "eviction":
        entry.update(group="policy", version="v1")
    if sub == "scale":
        entry.update(group="autoscaling", version="v1")
    return entry


def resource_list(api_version: str) -> dict[str, Any] | None:
    if api_version == authorization.GROUP_VERSION:  # create-only reviews, never stored
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": api_version,
            "resources": authorization.discovery_resources(),
        }
    served = group_versions().get(api_version)
    if served is None:
        return None
    resources: list[dict[str, Any]] = []
    for kind in served:
        resources.append(_resource(kind))
        resources.extend(_subresource(kind, sub) for sub in kind.subresources)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version, "resources": resources}


def core_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def group_list() -> dict[str, Any]:
    group, version = authorization.GROUP_VERSION.split("/")
    groups: dict[str, list[str]] = {group: [version]}
    for kind in ALL_KINDS:
        if kind.group:
            versions = groups.setdefault(kind.group, [])
            if kind.version not in versions:
                versions.append(kind.version)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]},
            }
            for group, versions in sorted(groups.items(), key=lambda item: _is_custom(item[0]))
        ],
    }


def _is_custom(group: str) -> bool:
    """Whether a group is a custom resource's (Volcano's) rather than Kubernetes' own. kube-apiserver
    lists its own groups first, and kubectl resolves a name both serve (`jobs`: batch/v1 and
    batch.volcano.sh) to the first group listing it."""
    return "." in group and not group.endswith(".k8s.io")


def group(name: str) -> dict[str, Any] | None:
    for entry in group_list()["groups"]:
        if entry["name"] == name:
            return {"kind": "APIGroup", "apiVersion": "v1", **entry}
    return None
