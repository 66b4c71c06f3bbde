"""Talking to the members: a connection from a Cluster and its Secret, and the snapshot the
planner works from (nodes and their free room, queue capabilities, the federation's copies).

The token is read from the hub Secret into the client's configuration and nowhere else: it is
never logged, never put in a message, never written to the Cluster."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

import lahar
from lahar.api import cluster as cluster_api
from lahar.api.cluster import Cluster
from lahar.api.kinds import EVENT, JOB, LEASE, NAMESPACE, NODE, POD, QUEUE
from lahar.api.node import Node
from lahar.api.pod import Pod
from lahar.api.quantity import QuantityError
from lahar.api.queue import Queue
from lahar.api.resources import ResourceList
from lahar.client.api import KubeApi
from lahar.client.errors import AlreadyExists, ApiUnavailable, Forbidden, KubeError, NotFound, Unauthorized
from lahar.federation import names
from lahar.federation.copies import copy_hub_generation, copy_placement, member_namespace
from lahar.federation.fence import lease_object
from lahar.federation.placement import demand_of
from lahar.federation.planner import MemberCopy

MEMBER_TIMEOUT = 10.0  # seconds a member request may take before the member counts as not answering


class MemberProblem(Exception):
    """Why a member cannot be used; `reason` is a Cluster condition reason (lahar.api.cluster)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _secret_value(secret: Mapping[str, Any], key: str) -> bytes | None:
    value = (secret.get("data") or {}).get(key)
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise MemberProblem(cluster_api.BAD_SECRET, f"the Secret's {key} is not base64") from None


def member_configuration(cluster: Cluster, secret: Mapping[str, Any] | None, ca_dir: Path) -> client.Configuration:
    """The client configuration for `cluster`: its endpoint, the bearer token and CA bundle from
    its Secret (the CA written to a private file under `ca_dir`, as the client wants a path)."""
    configuration = client.Configuration()
    configuration.host = cluster.endpoint.rstrip("/")
    configuration.verify_ssl = not cluster.insecure_skip_tls_verify
    configuration.retries = False  # an unreachable member must say so quickly, not after retries
    if secret is None:
        return configuration
    token = _secret_value(secret, cluster_api.SECRET_TOKEN_KEY)
    if token is not None:
        text = token.decode(errors="replace").strip()
        if not text or any(c in text for c in "\r\n"):
            raise MemberProblem(cluster_api.BAD_SECRET, "the Secret's token is empty or spans lines")
        configuration.api_key = {"authorization": text}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    ca = _secret_value(secret, cluster_api.SECRET_CA_KEY)
    if ca is not None:
        ca_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = ca_dir / f"{cluster.name}-ca.crt"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(ca)
        configuration.ssl_ca_cert = str(path)
    return configuration


def connect(cluster: Cluster, secret: Mapping[str, Any] | None, ca_dir: Path) -> KubeApi:
    api_client = client.ApiClient(member_configuration(cluster, secret, ca_dir))
    api_client.user_agent = f"lahar-federation/{lahar.__version__}"
    return KubeApi(api_client, timeout=MEMBER_TIMEOUT)


def private_ca_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="lahar-federation-"))


@dataclass(frozen=True)
class Snapshot:
    """One look at a member."""

    taken_at: float
    node_allocatable: tuple[ResourceList, ...]
    node_free: tuple[ResourceList, ...]
    queue_capability: Mapping[str, ResourceList]
    copies: tuple[MemberCopy, ...]
    raw_copies: Mapping[tuple[str, str], Mapping[str, Any]]
    events: tuple[Mapping[str, Any], ...] = ()  # the member's Events about Jobs


def _schedulable(node: Node) -> bool:
    return node.ready and not node.unschedulable


def take_snapshot(member: str, api: KubeApi) -> Snapshot:
    """Nodes (Ready, schedulable) with what bound pods leave free, queues, and the copies the
    federation made there. Raises MemberProblem when the member does not answer or refuses."""
    try:
        # The copies first: one that starts between the two lists is then counted twice (not yet
        # started, and its pods bound), never not at all.
        jobs = api.list_all(JOB, label_selector=names.HUB_UID_LABEL)["items"]
        nodes = [Node(obj) for obj in api.list_all(NODE)["items"]]
        pods = [Pod(obj) for obj in api.list_all(POD)["items"]]
        queues = [Queue(obj) for obj in api.list_all(QUEUE)["items"]]
        events = api.list_all(EVENT, field_selector="involvedObject.kind=Job")["items"]
    except (Unauthorized, Forbidden) as exc:
        raise MemberProblem(cluster_api.UNAUTHORIZED, f"the member refused the credentials: {exc.reason}") from None
    except ApiUnavailable as exc:
        raise MemberProblem(cluster_api.UNREACHABLE, f"the member does not answer: {exc}") from None
    except KubeError as exc:
        raise MemberProblem(cluster_api.UNREACHABLE, f"the member answered {exc.status}: {exc.reason}") from None
    used: dict[str, ResourceList] = {}
    owned: dict[tuple[str, str], ResourceList] = {}  # (owner uid, node): what a Job's pods take there
    for pod in pods:
        if pod.node_name and not pod.is_terminal:
            try:
                requests = pod.requests
            except QuantityError:
                continue  # a pod the member's own admission let through; its node keeps the room
            used[pod.node_name] = used.get(pod.node_name, ResourceList()) + requests
            for owner in pod.raw.get("metadata", {}).get("ownerReferences") or ():
                key = (owner.get("uid") or "", pod.node_name)
                owned[key] = owned.get(key, ResourceList()) + requests
    usable = []
    for node in nodes:
        try:
            if _schedulable(node) and node.allocatable is not None:
                usable.append(node)
        except QuantityError:
            continue  # a node whose allocatable does not parse offers nothing
    capabilities = {}
    for queue in queues:
        try:
            capabilities[queue.name] = queue.capability
        except QuantityError:
            continue
    copies, raw = [], {}
    for job in jobs:
        metadata = job.get("metadata") or {}
        key = (metadata.get("namespace") or "default", metadata.get("name") or "")
        placement = copy_placement(job)
        if placement is None:
            continue
        try:
            total = demand_of(job).total
        except (QuantityError, ValueError):
            total = ResourceList()  # the member's own admission let it through; nothing to compare
        copies.append(
            MemberCopy(
                member=member,
                key=key,
                uid=metadata.get("uid") or "",
                hub_uid=(metadata.get("labels") or {}).get(names.HUB_UID_LABEL) or "",
                placement=placement,
                status=job.get("status") or {},
                hub_generation=copy_hub_generation(job),
                total=total,
                fenced=names.FENCED_ANNOTATION in (metadata.get("annotations") or {}),
                on_nodes=_on_nodes(owned, metadata.get("uid") or "", usable),
            )
        )
        raw[key] = job
    return Snapshot(
        taken_at=time.time(),
        node_allocatable=tuple(node.allocatable for node in usable),
        node_free=tuple(node.allocatable - used.get(node.name, ResourceList()) for node in usable),
        queue_capability=capabilities,
        copies=tuple(copies),
        raw_copies=raw,
        events=tuple(events),
    )


def renew_lease(member: str, api: KubeApi, renew_at: float, seconds: int, renew_period: float) -> None:
    """Renew the hub's lease in the member (made, with its namespace, the first time). Raises
    MemberProblem when the member refuses or does not answer: a member whose lease cannot be
    renewed is one the hub cannot vouch for, and is treated as not answering."""
    lease = lease_object(member, renew_at, seconds, renew_period)
    try:
        try:
            renewal = {"metadata": {"annotations": lease["metadata"]["annotations"]}, "spec": lease["spec"]}
            api.patch(LEASE, names.LEASE_NAME, renewal, names.LEASE_NAMESPACE)
        except NotFound:
            with contextlib.suppress(AlreadyExists):
                api.create(NAMESPACE, member_namespace(names.LEASE_NAMESPACE))
            api.create(LEASE, lease, names.LEASE_NAMESPACE)  # AlreadyExists (a race): renewed next time
    except (Unauthorized, Forbidden) as exc:
        raise MemberProblem(cluster_api.UNAUTHORIZED, f"the member refused the lease's renewal: {exc.reason}") from None
    except ApiUnavailable as exc:
        raise MemberProblem(cluster_api.UNREACHABLE, f"the member does not answer: {exc}") from None
    except KubeError as exc:
        raise MemberProblem(
            cluster_api.UNREACHABLE, f"the lease could not be renewed: the member answered {exc.status}: {exc.reason}"
        ) from None


def _on_nodes(owned: Mapping[tuple[str, str], ResourceList], uid: str, nodes: list[Node]) -> tuple[ResourceList, ...]:
    """What the Job `uid`'s bound pods take of each usable node (empty when it has none bound)."""
    taken = tuple(owned.get((uid, node.name), ResourceList()) for node in nodes)
    return taken if any(taken) else ()


def cluster_status(
    previous: Mapping[str, Any], snapshot: Snapshot | None, problem: MemberProblem | None, now: str
) -> dict[str, Any]:
    """The Cluster's status after one heartbeat: the snapshot's figures when it answered, the
    problem as the Ready condition when not (the last figures and heartbeat kept)."""
    status = dict(previous)
    ready = problem is None
    reason = cluster_api.REACHABLE if ready else problem.reason  # type: ignore[union-attr]
    message = "the member answers" if ready else problem.message  # type: ignore[union-attr]
    old = next((c for c in previous.get("conditions") or () if c.get("type") == cluster_api.READY_CONDITION), None)
    changed = old is None or old.get("status") != ("True" if ready else "False") or old.get("reason") != reason
    status["conditions"] = [
        {
            "type": cluster_api.READY_CONDITION,
            "status": "True" if ready else "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now if changed else old.get("lastTransitionTime", now),  # type: ignore[union-attr]
        }
    ]
    status["reachable"] = ready
    if snapshot is not None:
        status["lastHeartbeatTime"] = now
        capacity = sum(snapshot.node_allocatable, ResourceList())
        free = sum(snapshot.node_free, ResourceList())
        status["capacity"] = capacity.without_zeros().to_k8s()
        status["allocatable"] = ResourceList({n: max(0, a) for n, a in free.items()}).without_zeros().to_k8s()
        status["queueCapability"] = {
            name: bound.to_k8s() for name, bound in sorted(snapshot.queue_capability.items()) if bound
        }
        status["allocatableByQueue"] = {
            name: ResourceList({n: max(0, min(free.get(n), bound.get(n))) for n in bound}).to_k8s()
            for name, bound in sorted(snapshot.queue_capability.items())
            if bound
        }
    return status
