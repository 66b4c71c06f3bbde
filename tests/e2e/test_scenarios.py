"""Lahar's batch scenarios end to end on both backends (the embedded API server, and the real
control plane with deploy/ installed, where the controller and the scheduler each run with their
own ServiceAccount's token): the controller and the scheduler in this process, pods run by
simulated nodes (kwok-style: Node status, Lease heartbeats, phases from binding to completion).

- a Volcano Job runs to Completed; a failing one is restarted by its policy up to maxRetry, then Failed;
- examples/gang-job.yaml, as shipped, completes (the gang waits for the filler, then runs whole);
- a gang that cannot fit binds nothing (no partial bind) and runs whole once room is made;
- a queue starved by another's running work reclaims its share (evicting through the API);
- two queues share the nodes by weight;
- best-effort pods are placed on the CPU the simulated agents report idle (oversubscription);
- a real agent, with its own account, streams reports.

Each test has its own simulated nodes (a pool label its pods select) and namespace, and removes
them when done."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import KubeError
from lahar.controller.controller import JobController
from lahar.node import node_object
from lahar.node.simulated import (
    SIM_DURATION_ANNOTATION,
    SIM_EXIT_CODE_ANNOTATION,
    SimNodeSize,
    SimulatedNodes,
    SyntheticUsage,
)
from lahar.scheduler.node_reports import NodeReportStore
from lahar.scheduler.report_server import ReportServer
from lahar.scheduler.scheduler import Scheduler
from tests.real_backend import ApiBackend
from tests.support import wait_for

Obj = dict[str, Any]
JOB_NAME_LABEL = "volcano.sh/job-name"
NODE_CPU = 4
BIG_NODE_CPU = 10_000
REPORT_TOKEN = "e2e-simulated-agents"  # the report server takes it for any node ("*")
TIMEOUT = 60.0
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Lahar:
    """The controller and the scheduler on one backend, and the scheduler's node report endpoint."""

    backend: ApiBackend
    admin: KubeApi
    report_address: str
    reports: NodeReportStore


@pytest.fixture(scope="module")
def lahar(api_backend: ApiBackend) -> Iterator[Lahar]:
    reports = NodeReportStore()
    report_server = ReportServer(reports, {REPORT_TOKEN: "*"})
    port = report_server.start("127.0.0.1:0")
    controller = JobController(api_backend.api_for("controller"), resync_seconds=5)
    scheduler = Scheduler(api_backend.api_for("scheduler"), period=0.2, bind_workers=4, reports=reports)
    controller.start()
    scheduler.start()
    try:
        yield Lahar(api_backend, api_backend.admin, f"127.0.0.1:{port}", reports)
    finally:
        scheduler.stop()
        controller.stop()
        report_server.stop()


@dataclass
class Place:
    """A test's namespace and two simulated nodes (its pods select them by the `pool` label)."""

    suffix: str
    namespace: str
    selector: dict[str, str]
    nodes: SimulatedNodes


def make_place(api: KubeApi, cpu: str = str(NODE_CPU), **simulation: Any) -> Place:
    """`simulation`: SimulatedNodes' report options (address, token, interval, usage)."""
    suffix = uuid.uuid4().hex[:6]
    namespace = f"e2e-{suffix}"
    api.create(kinds.NAMESPACE, {"metadata": {"name": namespace}})
    selector = {"pool": namespace}
    size = SimNodeSize(cpu=cpu, memory="64Gi", labels=selector)
    nodes = SimulatedNodes(api, 2, size, name_prefix=f"{namespace}-", **simulation)
    nodes.start()
    return Place(suffix, namespace, selector, nodes)


def tidy_up(api: KubeApi, place: Place) -> None:
    """Leave the next tests a tidy cluster (not what is tested): the namespace goes, and its pods
    with it while the simulated nodes still run to finalize them (on kube-apiserver a bound pod
    stays Terminating until its node says it stopped), then the nodes."""
    with contextlib.suppress(KubeError):
        api.delete(kinds.NAMESPACE, place.namespace)
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not api.list(kinds.POD, place.namespace)["items"], 30, "the pods to go", interval=0.3)
    place.nodes.stop()
    for node in place.nodes.node_names:
        with contextlib.suppress(KubeError):
            api.delete(kinds.NODE, node)


@pytest.fixture
def place(lahar: Lahar) -> Iterator[Place]:
    made = make_place(lahar.admin)
    try:
        yield made
    finally:
        tidy_up(lahar.admin, made)


def volcano_job(
    name: str,
    place: Place,
    replicas: int,
    cpu: str,
    *,
    min_available: int | None = None,
    seconds: float | None = None,
    exit_code: int = 0,
    queue: str = "default",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    annotations = {}
    if seconds is not None:
        annotations[SIM_DURATION_ANNOTATION] = f"{seconds:g}"
    if exit_code:
        annotations[SIM_EXIT_CODE_ANNOTATION] = str(exit_code)
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
    template = {
        "metadata": {"annotations": annotations, "labels": labels or {}},
        "spec": {"restartPolicy": "Never", "nodeSelector": place.selector, "containers": [container]},
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": place.namespace},
        "spec": {
            "schedulerName": "lahar",
            "queue": queue,
            "minAvailable": replicas if min_available is None else min_available,
            "tasks": [{"name": "work", "replicas": replicas, "template": template}],
            **spec,
        },
    }


def job_phase(api: KubeApi, place: Place, name: str) -> str:
    return str(((api.get(kinds.JOB, name, place.namespace).get("status") or {}).get("state") or {}).get("phase", ""))


def job_pods(api: KubeApi, place: Place, name: str) -> list[Obj]:
    return list(api.list(kinds.POD, place.namespace, label_selector=f"{JOB_NAME_LABEL}={name}")["items"])


def bound(pods: list[Obj]) -> list[Obj]:
    return [p for p in pods if (p.get("spec") or {}).get("nodeName") and not p["metadata"].get("deletionTimestamp")]


def test_a_volcano_job_runs_to_completed(lahar: Lahar, place: Place) -> None:
    api = lahar.admin
    api.create(kinds.JOB, volcano_job("done", place, 3, "1", seconds=1), place.namespace)
    wait_for(lambda: job_phase(api, place, "done") == "Completed", TIMEOUT, "the job to be Completed", interval=0.3)
    pods = job_pods(api, place, "done")
    assert sorted(p["status"]["phase"] for p in pods) == ["Succeeded"] * 3
    assert {p["spec"]["nodeName"] for p in pods} <= set(place.nodes.node_names)
    # A finished job releases its PodGroup (and with it the queue's quota it reserved).
    wait_for(lambda: not api.list(kinds.PODGROUP, place.namespace)["items"], TIMEOUT, "the PodGroup released")
    status = api.get(kinds.JOB, "done", place.namespace)["status"]
    assert status.get("succeeded") == 3 and not status.get("failed")


def test_the_gang_example_completes_as_shipped(lahar: Lahar) -> None:
    """examples/gang-job.yaml as a user applies it (only its nodes and durations fitted to the
    test: this test's pool instead of every simulated node, 3 s and 1 s instead of 15 s and 5 s):
    the filler holds the nodes, the gang of 4 binds nothing meanwhile, then both complete."""
    api = lahar.admin
    place = make_place(api, cpu="8")
    try:
        jobs = list(yaml.safe_load_all((REPO / "examples" / "gang-job.yaml").read_text()))
        assert [job["metadata"]["name"] for job in jobs] == ["gang-filler", "gang-of-4"]
        for job, seconds in zip(jobs, ("3", "1"), strict=True):
            template = job["spec"]["tasks"][0]["template"]
            template["spec"]["nodeSelector"] = place.selector
            template["metadata"]["annotations"][SIM_DURATION_ANNOTATION] = seconds
            job["metadata"]["namespace"] = place.namespace
            api.create(kinds.JOB, job, place.namespace)
        wait_for(lambda: bound(job_pods(api, place, "gang-filler")), TIMEOUT, "the filler to bind", interval=0.2)
        assert not bound(job_pods(api, place, "gang-of-4")), "the gang bound beside the filler"
        for name in ("gang-filler", "gang-of-4"):
            wait_for(lambda n=name: job_phase(api, place, n) == "Completed", TIMEOUT, f"{name} Completed", interval=0.3)
        assert sorted(p["status"]["phase"] for p in job_pods(api, place, "gang-of-4")) == ["Succeeded"] * 4
    finally:
        tidy_up(api, place)


def test_a_failing_job_is_restarted_by_its_policy_then_fails(lahar: Lahar, place: Place) -> None:
    api = lahar.admin
    job = volcano_job(
        "flaky",
        place,
        2,
        "1",
        seconds=0.5,
        exit_code=3,
        maxRetry=2,
        policies=[{"event": "PodFailed", "action": "RestartJob"}],
    )
    api.create(kinds.JOB, job, place.namespace)
    wait_for(lambda: job_phase(api, place, "flaky") == "Failed", TIMEOUT, "the job to be Failed", interval=0.3)
    status = api.get(kinds.JOB, "flaky", place.namespace)["status"]
    assert status.get("retryCount") == 2, status


def test_a_gang_that_cannot_fit_binds_nothing_until_it_fits(lahar: Lahar, place: Place) -> None:
    api = lahar.admin
    # Two nodes of 4 CPUs. The filler's 3 CPUs leave one node for a gang of two 3-CPU pods: it waits.
    api.create(kinds.JOB, volcano_job("filler", place, 1, "3", seconds=6), place.namespace)
    wait_for(lambda: len(bound(job_pods(api, place, "filler"))) == 1, TIMEOUT, "the filler to be bound")
    api.create(kinds.JOB, volcano_job("gang", place, 2, "3"), place.namespace)

    def unschedulable() -> bool:
        groups = [g for g in api.list(kinds.PODGROUP, place.namespace)["items"] if "gang" in g["metadata"]["name"]]
        conditions = [c for g in groups for c in (g.get("status") or {}).get("conditions") or []]
        return any(c["type"] == "Unschedulable" and c["status"] == "True" for c in conditions)

    wait_for(unschedulable, TIMEOUT, "the gang's PodGroup to say it cannot be placed", interval=0.3)
    assert bound(job_pods(api, place, "gang")) == [], "a partial gang was bound"
    wait_for(
        lambda: len(bound(job_pods(api, place, "gang"))) == 2, TIMEOUT, "the gang bound whole once the filler ended"
    )
    assert len({p["spec"]["nodeName"] for p in job_pods(api, place, "gang")}) == 2
    assert job_phase(api, place, "filler") == "Completed"


@contextlib.contextmanager
def reclaimable_queues(api: KubeApi, weights: dict[str, int]) -> Iterator[None]:
    """Queues of these weights for one test, deleted after it."""
    try:
        for name, weight in weights.items():
            queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}}
            api.create(kinds.QUEUE, {**queue, "spec": {"weight": weight, "reclaimable": True}})
        yield
    finally:
        for name in weights:
            with contextlib.suppress(KubeError):
                api.delete(kinds.QUEUE, name)


def test_a_starved_queue_reclaims_its_share(lahar: Lahar) -> None:
    """Queues share by weight over the whole cluster's capacity, so the pool here is far bigger
    than the nodes other tests may have left on the session's cluster: two nodes of 10,000 CPUs.
    Alone, the greedy queue fills them (8 pods of 2500); the starved queue (same weight, asking for
    less) deserves what it asks and takes it back by reclaim: evictions through the API."""
    api = lahar.admin
    place = make_place(api, cpu=str(BIG_NODE_CPU))
    greedy, starved = f"greedy-{place.suffix}", f"starved-{place.suffix}"
    with reclaimable_queues(api, {greedy: 1, starved: 1}):
        try:
            slot = str(BIG_NODE_CPU // 4)
            api.create(kinds.JOB, volcano_job("greedy", place, 8, slot, min_available=1, queue=greedy), place.namespace)
            wait_for(
                lambda: len(bound(job_pods(api, place, "greedy"))) == 8, TIMEOUT, "the greedy job to fill the pool"
            )
            # Within what the enqueue action lets in beside a full cluster (overcommit 1.2: 20% of it).
            small = str(BIG_NODE_CPU // 8)
            api.create(
                kinds.JOB, volcano_job("starved", place, 2, small, min_available=1, queue=starved), place.namespace
            )
            wait_for(
                lambda: bound(job_pods(api, place, "starved")),
                TIMEOUT,
                "the starved queue's job to reclaim room and be bound",
                interval=0.3,
            )
            assert len(bound(job_pods(api, place, "greedy"))) < 8
        finally:
            tidy_up(api, place)


def test_two_queues_share_the_pool_by_weight(lahar: Lahar) -> None:
    """Queues of weight 1 and 3, each with far more work than the pool holds (64 pods of 1250 CPUs,
    3 s each; the pool holds 16: two nodes of 10,000 CPUs, far more than any other test leaves on
    the session's cluster, since shares are of the whole cluster). The first placements go to
    whichever queue's pods came first (a running job that is not starving is not reclaimed from,
    as in Volcano); as pods end, the freed slots go to the queue furthest below its share, and the
    pool settles at 1:3: 4 and 12 slots (one slot of slack for a pod ending between two looks)."""
    api = lahar.admin
    place = make_place(api, cpu=str(BIG_NODE_CPU))
    weights = {f"light-{place.suffix}": 1, f"heavy-{place.suffix}": 3}
    with reclaimable_queues(api, weights):
        try:
            slot = str(BIG_NODE_CPU // 8)
            for name in weights:
                job = volcano_job(name.split("-")[0], place, 64, slot, min_available=1, seconds=3, queue=name)
                api.create(kinds.JOB, job, place.namespace)

            def running(job: str) -> int:
                return sum(1 for p in bound(job_pods(api, place, job)) if p["status"].get("phase") == "Running")

            def settled() -> bool:
                light, heavy = running("light"), running("heavy")
                return 3 <= light <= 5 and heavy >= 11 and light + heavy <= 16

            wait_for(settled, TIMEOUT, "the pool to settle at 1:3 (light 4, heavy 12 slots)", interval=0.2)
        finally:
            tidy_up(api, place)


def test_best_effort_pods_are_placed_on_what_the_agents_report_idle(lahar: Lahar) -> None:
    """Oversubscription from live agent reports: online pods reserve 3.5 of each node's 4 CPUs and
    use a fifth of it; the simulated agents stream that to the scheduler, and BE pods asking for
    a CPU each (which the requests alone leave no room for) are placed on the reclaimable rest."""
    api = lahar.admin
    place = make_place(
        api,
        report_address=lahar.report_address,
        token=REPORT_TOKEN,
        report_interval=0.5,
        usage=SyntheticUsage(factor=0.2, noise=0.0),
    )
    try:
        api.create(kinds.JOB, volcano_job("online", place, 2, "3500m"), place.namespace)
        wait_for(lambda: len(bound(job_pods(api, place, "online"))) == 2, TIMEOUT, "the online pods to be bound")
        best_effort = volcano_job("harvest", place, 2, "1", labels={"lahar.dev/qos-class": "BE"})
        api.create(kinds.JOB, best_effort, place.namespace)
        wait_for(
            lambda: len(bound(job_pods(api, place, "harvest"))) == 2,
            TIMEOUT,
            "the BE pods to be placed on reclaimable CPU",
            interval=0.3,
        )
        assert {p["spec"]["nodeName"] for p in job_pods(api, place, "harvest")} <= set(place.nodes.node_names)
    finally:
        tidy_up(api, place)


def test_an_agent_with_its_own_account_streams_reports(lahar: Lahar, tmp_path: Path) -> None:
    """A real `lahar agent` process for a Node of the test's own, with the agent's kubeconfig (on
    the real control plane, the lahar-agent ServiceAccount's token): it reads its Node and watches
    its pods, its reports reach the scheduler's endpoint, and the API refuses it nothing. QoS runs
    in dry-run (no cgroup writes on a shared machine), which also leaves the Node's batch
    resources unwritten: that write is not covered here."""
    api = lahar.admin
    name = f"agent-{uuid.uuid4().hex[:6]}"
    ready = node_object.node_object(
        name, {}, node_object.local_capacity(), [node_object.ready_condition(True, time.time())], "127.0.0.1"
    )
    node_object.register(api, ready)
    token = tmp_path / "token"
    token.write_text(REPORT_TOKEN + "\n")
    log = tmp_path / "agent.log"
    command = [sys.executable, "-m", "lahar", "agent", f"--node={name}", "--interval=0.5", "--dry-run"]
    command += [f"--kubeconfig={lahar.backend.kubeconfigs['agent']}", f"--scheduler-address={lahar.report_address}"]
    command += [f"--token-file={token}", "--metrics-address=127.0.0.1", "--metrics-port=0"]
    with open(log, "wb") as out:
        agent = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    try:
        wait_for(lambda: lahar.reports.latest(name), TIMEOUT, "the agent's first report")
        time.sleep(2)  # a few more turns of its loop, with the API
        assert agent.poll() is None, log.read_text()
    finally:
        agent.terminate()
        agent.wait(20)
        with contextlib.suppress(KubeError):
            api.delete(kinds.NODE, name)
    refused = [line for line in log.read_text().splitlines() if "403" in line or "Forbidden" in line]
    assert refused == [], "\n".join(refused)
