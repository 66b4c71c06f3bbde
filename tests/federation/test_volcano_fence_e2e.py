"""The member's fence in a member that runs Volcano's own job controller (`lahar federation member
--controller volcano`), against a real kube-apiserver with Volcano's Job and Command CRDs: once the
hub's lease ran out, each federated copy gets a `bus.volcano.sh` Command `AbortJob` aimed at it
(what `vcctl job suspend` makes, and what Volcano's job controller executes), then the fenced
annotation; the Command is owned by the copy, so deleting the copy deletes it (the real garbage
collector). Volcano's controller itself is not run here (see docs/federation.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.api.job import ABORT_JOB, COMMAND_ANNOTATION
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.client.errors import AlreadyExists, NotFound
from lahar.federation import names
from lahar.federation.copies import member_job
from lahar.federation.fence import VOLCANO, lease_object
from lahar.federation.member import MemberFence
from tests.federation.fleet import vcjob
from tests.kube.control_plane import ControlPlane
from tests.real_backend import DEPLOY, kubectl
from tests.support import wait_for

HERE = Path(__file__).resolve().parent
NAMESPACE = "fence-volcano"


class Ticks:
    """The fence's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def member_api(real_cluster: ControlPlane) -> Iterator[KubeApi]:
    kubeconfig = Path(real_cluster.admin_kubeconfig)
    for crd in (DEPLOY / "crds" / "batch.volcano.sh_jobs.yaml", HERE / "volcano_commands_crd.yaml"):
        kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(crd))
    for crd in ("jobs.batch.volcano.sh", "commands.bus.volcano.sh"):
        kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "crd", crd)
    api = KubeApi(new_api_client(str(kubeconfig)))
    for namespace in (NAMESPACE, names.LEASE_NAMESPACE):
        with contextlib.suppress(AlreadyExists):
            api.create(kinds.NAMESPACE, {"metadata": {"name": namespace}})
    yield api
    for kind, namespace in (
        (kinds.JOB, NAMESPACE),
        (kinds.VOLCANO_COMMAND, NAMESPACE),
        (kinds.LEASE, names.LEASE_NAMESPACE),
    ):
        for obj in api.list(kind, namespace)["items"]:
            with contextlib.suppress(NotFound):
                api.delete(kind, obj["metadata"]["name"], namespace)


def test_a_volcano_member_s_copy_is_aborted_by_a_bus_command_once_the_lease_ran_out(member_api: KubeApi) -> None:
    api = member_api
    copy = member_job(vcjob("trainer", replicas=2, cpu="1", namespace=NAMESPACE, cluster="m1", placement=1), 1)
    made = api.create(kinds.JOB, copy, NAMESPACE)
    api.create(kinds.LEASE, lease_object("m1", 1_000_000.0, 30, 2.0), names.LEASE_NAMESPACE)
    ticks = Ticks()
    fence = MemberFence(api, period=1.0, clock=ticks, controller=VOLCANO)

    assert fence.check_once() == []  # its first look: it waits for the hub to renew the lease
    assert api.list(kinds.VOLCANO_COMMAND, NAMESPACE)["items"] == []
    ticks.now = 6.0  # no renewal for two renewal periods and two fence periods: run out
    [stopped] = fence.check_once()

    [command] = api.list(kinds.VOLCANO_COMMAND, NAMESPACE)["items"]
    uid = made["metadata"]["uid"]
    target = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "trainer",
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert command["action"] == ABORT_JOB and command["target"] == target
    assert command["metadata"]["ownerReferences"] == [target]
    assert command["metadata"]["name"].startswith("trainer-abortjob-")
    assert command["message"].startswith("no renewal of the hub's 30 s lease seen for")
    annotations = stopped["metadata"]["annotations"]
    assert names.FENCED_ANNOTATION in annotations and COMMAND_ANNOTATION not in annotations  # Lahar's is not Volcano's

    ticks.now = 7.0  # fenced already: no second Command
    assert fence.check_once() == [] and len(api.list(kinds.VOLCANO_COMMAND, NAMESPACE)["items"]) == 1
    # Owned by the copy: deleting the copy (as the hub does once it saw it fenced) takes the Command.
    api.delete(kinds.JOB, "trainer", NAMESPACE)
    wait_for(lambda: not api.list(kinds.VOLCANO_COMMAND, NAMESPACE)["items"], 60, "the garbage collector")


def test_a_member_that_serves_no_commands_leaves_the_copy_unmarked(apiserver: Any, tmp_path: Path) -> None:
    """The wrong --controller (Lahar's embedded server serves no bus.volcano.sh Commands): the copy
    is not marked fenced, so the hub never takes it for stopped; the fence tries again each look."""
    api = KubeApi(new_api_client(str(apiserver.kubeconfig(tmp_path / "member.kubeconfig"))))
    api.create(kinds.NAMESPACE, {"metadata": {"name": names.LEASE_NAMESPACE}})
    api.create(kinds.JOB, member_job(vcjob("kept", replicas=1, cpu="1", cluster="m1", placement=1), 1), "default")
    api.create(kinds.LEASE, lease_object("m1", 1_000_000.0, 30, 2.0), names.LEASE_NAMESPACE)
    ticks = Ticks()
    fence = MemberFence(api, period=1.0, clock=ticks, controller=VOLCANO)
    fence.check_once()
    ticks.now = 6.0
    assert fence.check_once() == [] and fence.fenced == 0
    annotations = api.get(kinds.JOB, "kept", "default")["metadata"].get("annotations") or {}
    assert names.FENCED_ANNOTATION not in annotations and COMMAND_ANNOTATION not in annotations


def test_the_fence_refuses_an_unknown_controller(apiserver: Any, tmp_path: Path) -> None:
    api = KubeApi(new_api_client(str(apiserver.kubeconfig(tmp_path / "member.kubeconfig"))))
    with pytest.raises(ValueError, match="controller must be one of lahar, volcano, not 'kueue'"):
        MemberFence(api, controller="kueue")
