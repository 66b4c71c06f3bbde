"""`lahar up --clusters N`: a federation on one machine (docs/federation.md). N member clusters,
each a whole `lahar up` of its own (embedded API server, scheduler, controller, simulated nodes),
of different sizes and labels, and a hub: an embedded API server with `lahar federation` and one
`Cluster` per member. Everything lives under the data directory: the hub's files at its top, each
member's under members/<name>/.

Start: the members one after the other (each says what it starts), then the hub, then the
Clusters. Supervision restarts any program of any of them, as `lahar up` does; Ctrl-C stops the
hub first (no more dispatches), then the members."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass

from lahar.api import kinds
from lahar.client.errors import AlreadyExists
from lahar.endpoints import free_loopback_port
from lahar.node.simulated import SimNodeSize
from lahar.up.system import Cancelled, StartupError, System, UpOptions, say

MEMBERS_DIR = "members"


@dataclass(frozen=True)
class MemberShape:
    nodes: int
    size: str  # SimNodeSize.parse text
    labels: dict[str, str]
    cost: float


# Different sizes and labels, so placement has something to choose: many small CPU nodes in one
# region, few big ones in another, GPU nodes in a third (cycled past three members).
SHAPES = (
    MemberShape(4, "cpu=8,memory=32Gi", {"region": "eu-west", "accelerator": "none"}, 1.0),
    MemberShape(2, "cpu=32,memory=128Gi", {"region": "us-east", "accelerator": "none"}, 2.0),
    MemberShape(2, "cpu=16,memory=64Gi,gpus=4", {"region": "eu-north", "accelerator": "gpu"}, 3.0),
)


def member_name(index: int) -> str:
    return f"member-{index + 1}"


def member_options(options: UpOptions, index: int) -> UpOptions:
    shape = SHAPES[index % len(SHAPES)]
    server = dataclasses.replace(
        options.server,
        data_dir=options.server.data_dir / MEMBERS_DIR / member_name(index),
        port=free_loopback_port(),
    )
    return dataclasses.replace(
        options,
        server=server,
        sim_nodes=shape.nodes,
        sim_node_size=SimNodeSize.parse(shape.size),
        local_node=False,
        federation_member=True,
    )


def cluster_object(index: int, url: str) -> dict[str, object]:
    shape = SHAPES[index % len(SHAPES)]
    return {
        "apiVersion": "federation.lahar.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": member_name(index), "labels": dict(shape.labels)},
        "spec": {"endpoint": url, "cost": shape.cost},
    }


def run_fleet(options: UpOptions, clusters: int, stop: threading.Event) -> int:
    """Start N members and the hub, supervise them until `stop`, then stop the hub and the members."""
    if clusters < 1:
        raise ValueError(f"--clusters must be at least 1, not {clusters}")
    members = [System(member_options(options, index)) for index in range(clusters)]
    hub = System(dataclasses.replace(options, hub=True, sim_nodes=0, local_node=False))
    started: list[System] = []
    status = 0
    try:
        try:
            for index, member in enumerate(members):
                say(f"\n== {member_name(index)} ({member.data_dir})")
                started.append(member)
                member.start(stop)
            say(f"\n== the hub ({hub.data_dir})")
            started.append(hub)
            hub.start(stop)
        except Cancelled:
            return 0
        except StartupError as exc:
            print(f"error: {exc}", flush=True)
            return 1
        assert hub.api is not None
        for index, member in enumerate(members):
            try:
                hub.api.create(kinds.CLUSTER, cluster_object(index, member.url))
            except AlreadyExists:
                hub.api.patch(kinds.CLUSTER, member_name(index), {"spec": {"endpoint": member.url}})
        say(
            f"\nThe federation is up: {clusters} member cluster{'s' if clusters != 1 else ''}. Submit to the hub:\n"
            f"  export KUBECONFIG={hub.kubeconfig}\n"
            "  kubectl get clusters   |   lahar apply -f JOB.yaml   |   "
            "kubectl get vcjob -L federation.lahar.dev/cluster"
        )
        while not stop.wait(0.5):
            now = time.monotonic()
            for system in started:
                system.tend(now)
    finally:
        stop.set()
        for system in reversed(started):
            if not system.stop():
                status = 1
    return status
