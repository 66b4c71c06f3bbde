"""Node objects as a kubelet registers them: labels, capacity, addresses, conditions, node info;
this machine's own facts for the local node. Shared by the local runtime and the simulated nodes."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
from collections.abc import Mapping
from typing import Any

import lahar
from lahar.api import kinds
from lahar.api.lease import micro_time
from lahar.client.api import KubeApi, Obj
from lahar.client.errors import AlreadyExists, NotFound
from lahar.node.lifecycle import rfc3339

HOSTNAME_LABEL = "kubernetes.io/hostname"
OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
LOCAL_LABEL = "lahar.dev/local"
MAX_PODS = 110  # kubelet's default
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_LEASE_SECONDS = 40  # kubelet's nodeLeaseDurationSeconds
NODE_LEASE_RENEW_SECONDS = 10.0  # kubelet renews at a quarter of the duration
# kube-apiserver's TaintNodesByCondition admission puts this on every new Node; the node lifecycle
# controller lifts it once the node says Ready. A Node registered Ready here lifts it itself, so it
# takes pods at once on any API server (and on one without that controller).
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# Go's GOARCH names, which node labels and image platforms use.
GO_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


def condition(condition_type: str, true: bool, reason: str, message: str, at: float) -> dict[str, str]:
    stamp = rfc3339(at)
    return {
        "type": condition_type,
        "status": "True" if true else "False",
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def ready_condition(ready: bool, at: float, message: str = "") -> dict[str, str]:
    if ready:
        return condition("Ready", True, "KubeletReady", message or "lahar is posting ready status", at)
    return condition("Ready", False, "KubeletNotReady", message or "lahar stopped", at)


def keep_transition_times(new: list[dict[str, str]], old: list[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Conditions whose status did not change keep their lastTransitionTime."""
    previous = {c.get("type"): c for c in old}
    for cond in new:
        before = previous.get(cond["type"])
        if before is not None and before.get("status") == cond["status"] and before.get("lastTransitionTime"):
            cond["lastTransitionTime"] = str(before["lastTransitionTime"])
    return new


def go_arch(machine: str | None = None) -> str:
    machine = machine or platform.machine()
    return GO_ARCH.get(machine.lower(), machine.lower())


def base_labels(name: str) -> dict[str, str]:
    return {HOSTNAME_LABEL: name, OS_LABEL: "linux", ARCH_LABEL: go_arch()}


def node_object(
    name: str,
    labels: Mapping[str, str],
    capacity: Mapping[str, str],
    conditions: list[dict[str, str]],
    address: str,
    annotations: Mapping[str, str] | None = None,
    runtime: str = "lahar-local",
) -> Obj:
    """A Node with allocatable equal to capacity (no system reserve on a laptop or a simulation)."""
    uname = platform.uname()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations or {})},
        "spec": {},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": f"lahar-{lahar.__version__}",
                "kubeProxyVersion": "",
                "containerRuntimeVersion": f"{runtime}://{lahar.__version__}",
                "operatingSystem": "linux",
                "architecture": go_arch(),
                "kernelVersion": uname.release,
                "osImage": platform.platform(),
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def register(api: KubeApi, node: Obj) -> Obj:
    """Create the Node, or take over an existing one of the name: our labels and annotations are
    merged into its own (a user's stay), the status is ours."""
    try:
        return lift_not_ready_taint(api, api.create(kinds.NODE, node))
    except AlreadyExists:
        pass
    name = node["metadata"]["name"]
    existing = api.get(kinds.NODE, name)
    status = dict(node["status"])
    status["conditions"] = keep_transition_times(
        list(status["conditions"]), (existing.get("status") or {}).get("conditions") or []
    )
    api.patch(
        kinds.NODE,
        name,
        {"metadata": {"labels": node["metadata"]["labels"], "annotations": node["metadata"]["annotations"]}},
    )
    return lift_not_ready_taint(api, api.patch(kinds.NODE, name, {"status": status}, subresource="status"))


def lift_not_ready_taint(api: KubeApi, node: Obj) -> Obj:
    """Remove the not-ready taint from a Node whose Ready condition is True (see NOT_READY_TAINT)."""
    taints = (node.get("spec") or {}).get("taints") or []
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions", [])
    )
    kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
    if not ready or len(kept) == len(taints):
        return node
    # A strategic or merge patch of a list replaces it whole; the resourceVersion guards a
    # concurrent writer's taint from being dropped.
    metadata = {"resourceVersion": node["metadata"]["resourceVersion"]}
    return api.patch(kinds.NODE, node["metadata"]["name"], {"metadata": metadata, "spec": {"taints": kept or None}})


def renew_node_lease(api: KubeApi, node_name: str, at: float, node_uid: str | None = None) -> None:
    """kubelet's heartbeat: the node's Lease in kube-node-lease, renewed (made the first time,
    owned by the Node so that deleting the Node removes it)."""
    spec = {"holderIdentity": node_name, "leaseDurationSeconds": NODE_LEASE_SECONDS, "renewTime": micro_time(at)}
    try:
        api.patch(kinds.LEASE, node_name, {"spec": spec}, NODE_LEASE_NAMESPACE)
        return
    except NotFound:
        pass
    metadata: Obj = {"name": node_name, "namespace": NODE_LEASE_NAMESPACE}
    if node_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}]
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
    try:
        api.create(kinds.LEASE, lease, NODE_LEASE_NAMESPACE)
    except AlreadyExists:
        pass  # a concurrent heartbeat made it: the next one renews it
    except NotFound:  # no kube-node-lease namespace (kube-apiserver makes one; the embedded server not)
        with contextlib.suppress(AlreadyExists):
            api.create(
                kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NODE_LEASE_NAMESPACE}}
            )
        api.create(kinds.LEASE, lease, NODE_LEASE_NAMESPACE)


# --- this machine ---------------------------------------------------------------------------------


def local_node_name() -> str:
    """The host name in lower case, as kubelet names its node."""
    return socket.gethostname().split(".")[0].lower() or "localhost"


def local_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def local_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def local_capacity(data_dir: str = "/") -> dict[str, str]:
    """What this machine offers, as a kubelet reports it: its CPUs, memory, the size of the
    filesystem pods write to (ephemeral-storage) and the pod limit."""
    import shutil

    return {
        "cpu": str(local_cpus()),
        "memory": f"{local_memory_bytes() // 1024}Ki",
        "ephemeral-storage": f"{shutil.disk_usage(data_dir).total // 1024}Ki",
        "pods": str(MAX_PODS),
    }
