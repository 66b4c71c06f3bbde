"""The federation against real API servers on this machine: a hub and three members, each an
embedded API server process (no scheduler or controller on the members: the test plays the
member's controller by writing the copy's status). Dispatch, mirroring, spec changes after
dispatch, delete propagation, a deleted Cluster, member loss and return, restarts of the
federation and of the hub, a JobFlow whose Jobs run in different members, and bad input."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.api.job import ABORT_JOB, COMMAND_ANNOTATION
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.client.errors import ApiUnavailable, Invalid, NotFound
from lahar.controller.jobflows import JobFlowController
from lahar.endpoints import free_loopback_port
from lahar.federation import names
from lahar.federation.federation import Federation
from lahar.federation.member import MemberFence
from lahar.federation.policy import Policy, check_lease
from lahar.node import node_object
from tests.federation.fleet import vcjob
from tests.support import wait_for

# The member's lease (2 s) runs out 3 s before the hub re-dispatches: a heartbeat and the fence's
# period to spare (policy.check_lease).
POLICY = Policy(heartbeat_period=0.3, unreachable_after=1.0, redispatch_after=5.0, member_lease=2)
# name -> (nodes, CPUs a node, labels, cost)
MEMBERS = {
    "m1": (2, 4, {"region": "eu"}, 1.0),
    "m2": (1, 16, {"region": "us"}, 2.0),
    "m3": (2, 2, {"region": "eu"}, 0.5),
}


def api_for(server: Any, tmp_path: Path) -> KubeApi:
    return KubeApi(new_api_client(str(server.kubeconfig(tmp_path / f"{server.data_dir.parent.name}.kubeconfig"))))


@pytest.fixture
def fleet(tmp_path: Path, server_process: Any) -> Iterator[dict[str, Any]]:
    servers = {name: server_process(tmp_path / name / "data") for name in ("hub", *MEMBERS)}
    for server in servers.values():
        server.data_dir.parent.mkdir()
    try:
        for server in servers.values():
            server.start()
        apis = {name: api_for(server, tmp_path) for name, server in servers.items()}
        for name, (count, cpu, labels, cost) in MEMBERS.items():
            for index in range(count):
                ready = [node_object.ready_condition(True, time.time())]
                node = node_object.node_object(
                    f"{name}-n{index}", {}, {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}, ready, "127.0.0.1"
                )
                node_object.register(apis[name], node)
            cluster = {
                "apiVersion": "federation.lahar.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": name, "labels": labels},
                "spec": {"endpoint": servers[name].url, "cost": cost},
            }
            apis["hub"].create(kinds.CLUSTER, cluster)
        yield {"servers": servers, "apis": apis}
    finally:
        for server in servers.values():
            server.stop()


def start_federation(hub: KubeApi) -> Federation:
    federation = Federation(hub, POLICY, tick=0.1)
    federation.start()
    wait_for(lambda: federation.healthy()[0], 10, "the federation to sync")
    return federation


def copies_of(apis: dict[str, KubeApi], name: str, namespace: str = "default") -> dict[str, dict[str, Any]]:
    found = {}
    for member in MEMBERS:
        try:
            found[member] = apis[member].get(kinds.JOB, name, namespace)
        except (NotFound, ApiUnavailable):  # none there, or a stopped member
            continue
    return found


def hub_job(apis: dict[str, KubeApi], name: str, namespace: str = "default") -> dict[str, Any]:
    return apis["hub"].get(kinds.JOB, name, namespace)


def to_submit(name: str, **options: Any) -> dict[str, Any]:
    """A Job as a user submits it to the hub (no server-set metadata)."""
    job = vcjob(name, **options)
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp"):
        del job["metadata"][key]
    return job


def dispatched_to(apis: dict[str, KubeApi], name: str, placement: str | None = None) -> str:
    """The member a hub Job's copy was confirmed in (of `placement`, or any), or ""."""
    metadata = hub_job(apis, name)["metadata"]
    confirmed = metadata["annotations"].get(names.DISPATCHED_ANNOTATION)
    if not confirmed or (placement is not None and confirmed != placement):
        return ""
    return str(metadata["labels"][names.CLUSTER_LABEL])


def submit_and_wait_dispatch(apis: dict[str, KubeApi], job: dict[str, Any]) -> str:
    """Submit `job` to the hub; the member its first copy was made in."""
    apis["hub"].create(kinds.JOB, job, "default")
    name = job["metadata"]["name"]
    return wait_for(lambda: dispatched_to(apis, name), 10, f"the dispatch of {name}")


def test_dispatch_mirror_and_delete(fleet: dict[str, Any]) -> None:
    apis = fleet["apis"]
    hub = apis["hub"]
    hub.create(kinds.NAMESPACE, {"metadata": {"name": "team"}})
    hub.create(kinds.CONFIGMAP, {"metadata": {"name": "settings", "namespace": "team"}, "data": {"lr": "0.1"}}, "team")
    wide = to_submit("wide", replicas=2, cpu="6", namespace="team")  # 6-CPU pods: only m2's node holds them
    wide["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    federation = start_federation(hub)
    try:
        hub.create(kinds.JOB, wide, "team")
        copy = wait_for(lambda: copies_of(apis, "wide", "team").get("m2"), 10, "the copy in m2")
        assert set(copies_of(apis, "wide", "team")) == {"m2"}
        assert apis["m2"].get(kinds.CONFIGMAP, "settings", "team")["data"] == {"lr": "0.1"}
        assert apis["m2"].get(kinds.QUEUE, "default")  # the job's queue is there (made if it was not)
        placed = wait_for(
            lambda: hub_job(apis, "wide", "team")["metadata"]["annotations"].get(names.DISPATCHED_ANNOTATION),
            5,
            "the dispatch to be confirmed",
        )
        assert placed == "1" and hub_job(apis, "wide", "team")["metadata"]["labels"][names.CLUSTER_LABEL] == "m2"
        assert copy["metadata"]["labels"][names.HUB_UID_LABEL] == hub_job(apis, "wide", "team")["metadata"]["uid"]
        # The member's controller reports progress; the hub shows it.
        running = {"state": {"phase": "Running"}, "minAvailable": 2, "running": 2, "pending": 0}
        apis["m2"].update_status(kinds.JOB, {**copy, "status": running})
        wait_for(lambda: hub_job(apis, "wide", "team").get("status", {}).get("running") == 2, 10, "the mirrored status")
        # The member's events about the copy reach the hub Job, naming the member.
        apis["m2"].create(
            kinds.EVENT,
            {
                "metadata": {"name": "wide.1", "namespace": "team"},
                "involvedObject": {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "namespace": "team",
                    "name": "wide",
                    "uid": copy["metadata"]["uid"],
                },
                "type": "Normal",
                "reason": "ExecuteAction",
                "message": "Start job",
                "count": 1,
            },
            "team",
        )

        def hub_events() -> list[str]:
            items = hub.list(kinds.EVENT, "team", field_selector="involvedObject.name=wide")["items"]
            return [f"{e['reason']}: {e['message']}" for e in items]

        wait_for(lambda: "ExecuteAction: [m2] Start job" in hub_events(), 10, "the mirrored event")
        assert any(line.startswith("Dispatched: placed on member cluster m2") for line in hub_events())
        cluster = hub.get(kinds.CLUSTER, "m2")["status"]
        assert cluster["reachable"] is True and cluster["capacity"]["cpu"] == "16"
        assert cluster["conditions"][0]["reason"] == "Reachable"
        # A spec change after dispatch (what the hub's admission lets change) reaches the copy.
        hub.patch(kinds.JOB, "wide", {"spec": {"maxRetry": 5}}, "team")
        wait_for(
            lambda: apis["m2"].get(kinds.JOB, "wide", "team")["spec"]["maxRetry"] == 5, 10, "the change in the copy"
        )
        carried = apis["m2"].get(kinds.JOB, "wide", "team")
        assert carried["metadata"]["uid"] == copy["metadata"]["uid"]  # updated in place, not made again
        assert carried["metadata"]["annotations"][names.HUB_GENERATION_ANNOTATION] == "2"
        wait_for(lambda: any(line.startswith("SpecUpdated: ") for line in hub_events()), 10, "the SpecUpdated event")
        with pytest.raises(Invalid):  # what may not change is refused on the hub, as in any cluster
            hub.patch(kinds.JOB, "wide", {"spec": {"schedulerName": "other"}}, "team")
        # Deleting on the hub deletes in the member.
        hub.delete(kinds.JOB, "wide", "team")
        wait_for(lambda: not copies_of(apis, "wide", "team"), 10, "the copy to be deleted")
    finally:
        federation.stop()


def test_a_deleted_cluster_s_copies_are_deleted_and_its_jobs_move(fleet: dict[str, Any]) -> None:
    apis = fleet["apis"]
    hub = apis["hub"]
    job = to_submit("moving", replicas=1, cpu="1", annotations={names.CLUSTER_SELECTOR_ANNOTATION: "region=eu"})
    federation = start_federation(hub)
    try:
        first = submit_and_wait_dispatch(apis, job)
        assert first in ("m1", "m3")  # the eu members
        hub.delete(kinds.CLUSTER, first)
        other = {"m1": "m3", "m3": "m1"}[first]
        wait_for(lambda: set(copies_of(apis, "moving")) == {other}, 10, "the copy to move")
        after = hub_job(apis, "moving")["metadata"]
        assert after["labels"][names.CLUSTER_LABEL] == other and after["annotations"][names.PLACEMENT_ANNOTATION] == "2"
    finally:
        federation.stop()


def flow_template(name: str, cpu: str) -> dict[str, Any]:
    spec = vcjob(name, replicas=2, cpu=cpu)["spec"]
    return {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def test_a_jobflow_runs_in_dependency_order_across_members(fleet: dict[str, Any]) -> None:
    apis = fleet["apis"]
    hub = apis["hub"]
    hub.create(kinds.JOBTEMPLATE, flow_template("prep", "6"), "default")  # 6-CPU pods: only m2 holds them
    hub.create(kinds.JOBTEMPLATE, flow_template("train", "1"), "default")
    flow = {
        "apiVersion": "flow.volcano.sh/v1alpha1",
        "kind": "JobFlow",
        "metadata": {"name": "pipe", "namespace": "default"},
        "spec": {"flows": [{"name": "prep"}, {"name": "train", "dependsOn": {"targets": ["prep"]}}]},
    }
    # A cycle is refused on the hub, naming it: nothing is made.
    cyclic = {**flow, "metadata": {"name": "loop", "namespace": "default"}}
    cyclic["spec"] = {
        "flows": [
            {"name": "prep", "dependsOn": {"targets": ["train"]}},
            {"name": "train", "dependsOn": {"targets": ["prep"]}},
        ]
    }
    with pytest.raises(Invalid, match="dependency cycle"):
        hub.create(kinds.JOBFLOW, cyclic, "default")
    federation = start_federation(hub)
    flows = JobFlowController(hub)  # what `lahar federation` runs beside the federation on the hub
    flows.start()
    try:
        hub.create(kinds.JOBFLOW, flow, "default")
        prep = wait_for(lambda: copies_of(apis, "pipe-prep").get("m2"), 10, "prep's copy in m2")
        running = {"state": {"phase": "Running"}, "minAvailable": 2, "running": 2}
        prep = apis["m2"].update_status(kinds.JOB, {**prep, "status": running})
        wait_for(
            lambda: hub_job(apis, "pipe-prep").get("status", {}).get("running") == 2, 10, "prep Running on the hub"
        )
        time.sleep(1.0)  # several cycles: train must not start while prep runs
        with pytest.raises(NotFound):
            hub_job(apis, "pipe-train")
        # m2 takes no new Jobs now, so train must run in another member than prep.
        hub.patch(kinds.CLUSTER, "m2", {"spec": {"unschedulable": True}})
        apis["m2"].update_status(kinds.JOB, {**prep, "status": {"state": {"phase": "Completed"}, "succeeded": 2}})
        train = wait_for(
            lambda: next(iter(copies_of(apis, "pipe-train").items()), None), 15, "train dispatched once prep completed"
        )
        assert train[0] != "m2"
        apis[train[0]].update_status(kinds.JOB, {**train[1], "status": {"state": {"phase": "Completed"}}})
        wait_for(
            lambda: (
                (hub.get(kinds.JOBFLOW, "pipe", "default").get("status") or {}).get("state", {}).get("phase")
                == "Succeed"
            ),
            15,
            "the flow to succeed",
        )
        assert hub.get(kinds.JOBFLOW, "pipe", "default")["status"]["completedJobs"] == ["pipe-prep", "pipe-train"]
    finally:
        flows.stop()
        federation.stop()


def test_member_loss_redispatches_once_and_restarts_double_nothing(fleet: dict[str, Any], tmp_path: Path) -> None:
    apis, servers = fleet["apis"], fleet["servers"]
    hub = apis["hub"]
    federation = start_federation(hub)
    try:
        first = submit_and_wait_dispatch(apis, to_submit("train", replicas=2, cpu="1"))
        servers[first].stop()  # the member stops answering
        wait_for(
            lambda: hub_job(apis, "train").get("status", {}).get("state", {}).get("reason") == names.REASON_UNREACHABLE,
            15,
            "the mark",
        )
        moved = wait_for(lambda: dispatched_to(apis, "train", placement="2"), 30, "the re-dispatch")
        assert moved != first
        assert hub_job(apis, "train")["metadata"]["annotations"][names.PLACEMENT_ANNOTATION] == "2"
        # The member returns with its stale copy: the fence removes it.
        servers[first].start()
        wait_for(lambda: set(copies_of(apis, "train")) == {moved}, 10, "the stale copy to go")
        # The federation restarts: nothing is dispatched again.
        federation.stop()
        federation = start_federation(hub)
        time.sleep(1.5)
        assert federation.dispatched == 0 and set(copies_of(apis, "train")) == {moved}
        # The hub restarts under the running federation: nothing lost, nothing doubled.
        servers["hub"].restart()
        time.sleep(2.0)
        after = hub_job(apis, "train")["metadata"]
        assert after["annotations"][names.PLACEMENT_ANNOTATION] == "2" and after["labels"][names.CLUSTER_LABEL] == moved
        assert federation.dispatched == 0 and set(copies_of(apis, "train")) == {moved}
        assert copies_of(apis, "train")[moved]["metadata"]["annotations"][names.PLACEMENT_ANNOTATION] == "2"
    finally:
        federation.stop()


def test_a_member_cut_off_from_the_hub_stops_its_copy_before_the_hub_moves_it(fleet: dict[str, Any]) -> None:
    """The hub loses its way to a member (the Cluster's endpoint now leads nowhere) while the
    member runs on, its fence (`lahar federation member`, in this process) beside it."""
    check_lease(POLICY)
    apis = fleet["apis"]
    hub = apis["hub"]
    fences = [MemberFence(apis[name], period=0.2) for name in MEMBERS]
    for fence in fences:
        fence.start()
    federation = start_federation(hub)
    try:
        job = to_submit("fenced", replicas=1, cpu="1", annotations={names.CLUSTER_SELECTOR_ANNOTATION: "region=eu"})
        first = submit_and_wait_dispatch(apis, job)
        lease = apis[first].get(kinds.LEASE, names.LEASE_NAME, names.LEASE_NAMESPACE)
        assert lease["spec"]["leaseDurationSeconds"] == 2
        hub.patch(kinds.CLUSTER, first, {"spec": {"endpoint": f"http://127.0.0.1:{free_loopback_port()}"}})
        samples: list[tuple[bool, bool]] = []  # (the old copy stopped, a new copy made elsewhere)

        def moved() -> str:
            found = copies_of(apis, "fenced")
            stopped = names.FENCED_ANNOTATION in found[first]["metadata"]["annotations"]
            elsewhere = [m for m in found if m != first]
            samples.append((stopped, bool(elsewhere)))
            return elsewhere[0] if elsewhere else ""

        second = wait_for(moved, 30, "the re-dispatch")
        assert all(stopped for stopped, made in samples if made)  # never two running copies
        assert any(stopped and not made for stopped, made in samples)  # stopped first, seen so
        stale = copies_of(apis, "fenced")[first]["metadata"]["annotations"]
        assert stale[COMMAND_ANNOTATION] == ABORT_JOB  # what the member's controller acts on
        events = apis[first].list(kinds.EVENT, "default", field_selector="involvedObject.name=fenced")["items"]
        assert [e["reason"] for e in events] == [names.EVENT_FENCED]
        # The way back: the stopped copy, of an old placement, is deleted; one copy is left.
        hub.patch(kinds.CLUSTER, first, {"spec": {"endpoint": fleet["servers"][first].url}})
        wait_for(lambda: set(copies_of(apis, "fenced")) == {second}, 15, "the stopped copy to go")
        assert names.FENCED_ANNOTATION not in copies_of(apis, "fenced")[second]["metadata"]["annotations"]
    finally:
        federation.stop()
        for fence in fences:
            fence.stop()


def bind_pod_of(api: KubeApi, copy: dict[str, Any], node: str, cpu: str) -> None:
    """Play the member's controller and scheduler: a Running pod of the copy, bound to `node`."""
    metadata = copy["metadata"]
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": metadata["name"], "uid": metadata["uid"]}
    pod = {
        "metadata": {"name": f"{metadata['name']}-worker-0", "namespace": "default", "ownerReferences": [owner]},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
        },
    }
    made = api.create(kinds.POD, pod, "default")
    api.update_status(kinds.POD, {**made, "status": {"phase": "Running"}})
    api.update_status(kinds.JOB, {**copy, "status": {"state": {"phase": "Running"}, "running": 1}})


def test_a_higher_priority_job_evicts_a_lower_one_whole(fleet: dict[str, Any]) -> None:
    apis = fleet["apis"]
    hub = apis["hub"]
    for name, value in (("low", 0), ("high", 100)):
        hub.create(kinds.PRIORITY_CLASS, {"metadata": {"name": name}, "value": value})
    federation = start_federation(hub)
    try:
        # 16-CPU pods: only m2's one node holds one.
        low = submit_and_wait_dispatch(apis, to_submit("low", replicas=1, cpu="16", priority_class="low"))
        assert low == "m2"
        bind_pod_of(apis["m2"], copies_of(apis, "low")["m2"], "m2-n0", "16")
        wait_for(lambda: hub.get(kinds.CLUSTER, "m2")["status"]["allocatable"].get("cpu", "0") == "0", 10, "m2 full")
        urgent = submit_and_wait_dispatch(apis, to_submit("urgent", replicas=1, cpu="16", priority_class="high"))
        assert urgent == "m2"
        wait_for(
            lambda: "low" not in {j["metadata"]["name"] for j in apis["m2"].list(kinds.JOB, "default")["items"]},
            10,
            "the victim's copy deleted",
        )
        evicted = hub_job(apis, "low")
        assert names.CLUSTER_LABEL not in evicted["metadata"]["labels"]  # back to pending on the hub
        assert evicted["metadata"]["annotations"][names.PLACEMENT_ANNOTATION] == "1"  # the next one is new
        events = hub.list(kinds.EVENT, "default", field_selector="involvedObject.name=low")["items"]
        assert any(
            e["reason"] == names.REASON_PREEMPTED and e["message"].endswith("for default/urgent") for e in events
        )
    finally:
        federation.stop()


def test_bad_members_and_impossible_jobs_get_clear_reasons(fleet: dict[str, Any]) -> None:
    hub = fleet["apis"]["hub"]
    nobody = f"http://127.0.0.1:{free_loopback_port()}"
    hub.create(kinds.CLUSTER, {"metadata": {"name": "gone"}, "spec": {"endpoint": nobody}})
    hub.create(
        kinds.CLUSTER, {"metadata": {"name": "nokey"}, "spec": {"endpoint": nobody, "secretRef": {"name": "missing"}}}
    )
    huge = to_submit("huge", replicas=1, cpu="64")
    federation = start_federation(hub)
    try:

        def reason(name: str) -> str | None:
            conditions = hub.get(kinds.CLUSTER, name).get("status", {}).get("conditions") or [{}]
            return conditions[0].get("reason")

        wait_for(lambda: reason("gone") == "Unreachable", 10, "the unreachable condition")
        wait_for(lambda: reason("nokey") == "SecretNotFound", 10, "the missing-secret condition")
        assert hub.get(kinds.CLUSTER, "gone")["status"]["reachable"] is False
        hub.create(kinds.JOB, huge, "default")
        # Not every member has been seen (gone, nokey never answered): it waits rather than being refused.
        state = wait_for(
            lambda: hub_job(fleet["apis"], "huge").get("status", {}).get("state"), 10, "a reason on the job"
        )
        assert state["reason"] in (names.REASON_WAITING, names.REASON_NEVER_FITS)
        hub.delete(kinds.CLUSTER, "gone")
        hub.delete(kinds.CLUSTER, "nokey")
        wait_for(
            lambda: hub_job(fleet["apis"], "huge")["status"]["state"]["reason"] == names.REASON_NEVER_FITS,
            10,
            "the never-fits reason",
        )
        assert "whole gang" in hub_job(fleet["apis"], "huge")["status"]["state"]["message"]
        assert healthy_token_free(hub)
    finally:
        federation.stop()


def healthy_token_free(hub: KubeApi) -> bool:
    """No Cluster status says anything of a credential."""
    return all("token" not in str(c.get("status")) for c in hub.list(kinds.CLUSTER)["items"])
