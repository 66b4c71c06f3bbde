"""Simulated nodes against the embedded API server, and their synthetic reports through a real
ReportServer on loopback."""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import NotFound
from lahar.node import node_object
from lahar.node.simulated import (
    SIM_DURATION_ANNOTATION,
    SIM_EXIT_CODE_ANNOTATION,
    SIM_USAGE_ANNOTATION,
    SIMULATED_LABEL,
    SimNode,
    SimNodeSize,
    SimPod,
    SimulatedNodes,
    SyntheticUsage,
    sim_plan,
    sim_usage,
    synthetic_report,
)
from lahar.scheduler.node_reports import NodeReportStore
from lahar.scheduler.report_server import ReportServer
from tests.node.support import runtime_threads, start_synced
from tests.support import wait_for

NAMESPACE = "default"
TOKEN = "simulation-token"

SimFactory = Callable[..., SimulatedNodes]


@pytest.fixture
def simulated(api: KubeApi) -> Iterator[SimFactory]:
    """Start SimulatedNodes with a prefix of the test's own; stopped afterwards, threads checked."""
    started: list[SimulatedNodes] = []
    prefix = f"sim-{secrets.token_hex(3)}-"

    def make(count: int = 2, **settings: Any) -> SimulatedNodes:
        return start_synced(SimulatedNodes(api, count, name_prefix=prefix, seed=7, **settings), started)

    try:
        yield make
    finally:
        for nodes in started:
            nodes.stop()
        assert not runtime_threads(), f"threads left behind: {runtime_threads()}"


def sim_pod(name: str, node: str, annotations: dict[str, str] | None = None, **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations or {}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", **container}],
        },
    }


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def phase_is(api: KubeApi, name: str, phase: str) -> dict[str, Any] | None:
    status = api.get(kinds.POD, name, NAMESPACE).get("status") or {}
    return status if status.get("phase") == phase else None


def test_nodes_register_with_their_size(api: KubeApi, simulated: SimFactory) -> None:
    nodes = simulated(3, size=SimNodeSize(cpu="4", memory="16Gi", pods=50, gpus=2, labels={"zone": "a"}))

    registered = {
        n["metadata"]["name"]: n for n in api.list_all(kinds.NODE, label_selector=f"{SIMULATED_LABEL}=true")["items"]
    }
    for name in nodes.node_names:
        node = registered[name]
        assert node["metadata"]["labels"]["zone"] == "a"
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == name
        assert node["status"]["capacity"] == {
            "cpu": "4",
            "memory": "16Gi",
            "ephemeral-storage": "100Gi",  # as a kubelet reports its root filesystem
            "pods": "50",
            "nvidia.com/gpu": "2",
        }
        assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"


def test_health_says_ready_once_registered_and_listed(api: KubeApi) -> None:
    nodes = SimulatedNodes(api, 1, name_prefix=f"sim-{secrets.token_hex(3)}-")
    assert nodes.healthy() == (False, "the simulated nodes are not running (still registering, or stopped)")
    nodes.start()
    try:
        assert wait_for(lambda: nodes.healthy()[0], timeout=10)
        assert nodes.healthy() == (True, "ok: 1 simulated nodes")
    finally:
        nodes.stop()
    assert not nodes.healthy()[0]


def test_fewer_nodes_on_restart_removes_the_rest(api: KubeApi, simulated: SimFactory) -> None:
    first = simulated(3)
    first.stop()
    second = simulated(1)

    names = {n["metadata"]["name"] for n in api.list_all(kinds.NODE, label_selector=f"{SIMULATED_LABEL}=true")["items"]}
    assert set(second.node_names) <= names
    assert not (set(first.node_names) - set(second.node_names)) & names


def test_pod_with_a_duration_runs_then_succeeds(api: KubeApi, simulated: SimFactory) -> None:
    nodes = simulated()
    name = unique("short")
    api.create(kinds.POD, sim_pod(name, nodes.node_names[0], {SIM_DURATION_ANNOTATION: "1"}))

    running = wait_for(lambda: phase_is(api, name, "Running"), what="the pod to run")
    assert running["containerStatuses"][0]["state"]["running"]["startedAt"]
    done = wait_for(lambda: phase_is(api, name, "Succeeded"), timeout=10, what="the pod to succeed")

    terminated = done["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")


def test_exit_code_annotation_fails_the_pod(api: KubeApi, simulated: SimFactory) -> None:
    nodes = simulated()
    name = unique("fails")
    api.create(
        kinds.POD, sim_pod(name, nodes.node_names[1], {SIM_DURATION_ANNOTATION: "0.2", SIM_EXIT_CODE_ANNOTATION: "2"})
    )

    done = wait_for(lambda: phase_is(api, name, "Failed"), what="the pod to fail")

    assert done["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2


@pytest.mark.parametrize("annotation, value", [(SIM_DURATION_ANNOTATION, "soon"), (SIM_USAGE_ANNOTATION, "-0.5")])
def test_a_bad_simulation_annotation_fails_the_pod_with_a_reason(
    api: KubeApi, simulated: SimFactory, annotation: str, value: str
) -> None:
    nodes = simulated()
    name = unique("bad")
    api.create(kinds.POD, sim_pod(name, nodes.node_names[0], {annotation: value}))

    done = wait_for(lambda: phase_is(api, name, "Failed"), what="the pod to fail")

    terminated = done["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "StartError" and annotation in terminated["message"]


def test_pod_without_duration_runs_until_deleted(api: KubeApi, simulated: SimFactory) -> None:
    nodes = simulated()
    name = unique("forever")
    api.create(kinds.POD, sim_pod(name, nodes.node_names[0]))
    wait_for(lambda: phase_is(api, name, "Running"), what="the pod to run")

    api.delete(kinds.POD, name, NAMESPACE)  # a 30 s grace period on a real node; at once here

    def gone() -> bool:
        try:
            api.get(kinds.POD, name, NAMESPACE)
        except NotFound:
            return True
        return False

    wait_for(gone, timeout=5, what="the pod to be removed")


def test_restart_keeps_running_pods_on_their_schedule(api: KubeApi, simulated: SimFactory) -> None:
    nodes = simulated()
    name = unique("adopted")
    api.create(kinds.POD, sim_pod(name, nodes.node_names[0], {SIM_DURATION_ANNOTATION: "1.5"}))
    wait_for(lambda: phase_is(api, name, "Running"), what="the pod to run")
    nodes.stop()

    simulated()

    wait_for(lambda: phase_is(api, name, "Succeeded"), timeout=10, what="the re-adopted pod to finish")


@pytest.fixture
def report_server() -> Iterator[tuple[NodeReportStore, int]]:
    """A scheduler's report server on loopback taking TOKEN for any node: (its store, its port)."""
    store = NodeReportStore()
    server = ReportServer(store, {TOKEN: "*"})
    port = server.start("127.0.0.1:0")
    yield store, port
    server.stop()


def test_reports_stream_to_a_report_server(
    api: KubeApi, report_server: tuple[NodeReportStore, int], simulated: SimFactory
) -> None:
    store, port = report_server
    nodes = simulated(
        3, size=SimNodeSize(cpu="4", memory="8Gi"), report_address=f"127.0.0.1:{port}", token=TOKEN, report_interval=0.2
    )
    name = unique("busy")
    requests = {"cpu": "2", "memory": "1Gi"}
    api.create(
        kinds.POD,
        sim_pod(name, nodes.node_names[0], command=["true"], resources={"requests": requests, "limits": requests}),
    )
    wait_for(lambda: phase_is(api, name, "Running"), what="the pod to run")

    def report_with_the_pod() -> Any:
        report = store.latest(nodes.node_names[0])
        return report if report is not None and any(p.name == name for p in report.pods) else None

    report = wait_for(report_with_the_pod, what="a report showing the pod")
    wait_for(lambda: all(store.latest(n) is not None for n in nodes.node_names), what="every node's report")

    [usage] = [p for p in report.pods if p.name == name]
    assert 0 < usage.cpu_usage_cores < 2 and usage.qos_class == "LS"
    assert report.cpu.cores == 4 and 0 < report.cpu.usage_cores < 4
    assert report.memory.total_bytes == 8 << 30
    assert 0 <= report.reclaimable["cpu"] < 4000 * 0.65 and report.reclaimable["memory"] > 0
    assert store.counts().get("accepted", 0) >= 3 and set(store.counts()) == {"accepted"}


def test_streams_start_when_asked_and_each_pod_uses_its_own_share(
    api: KubeApi, report_server: tuple[NodeReportStore, int]
) -> None:
    """`start(stream_reports=False)` then `start_streams()` (a bench starts the streams once its
    scheduler listens); an online pod with `lahar.dev/sim-usage: "0.1"` uses a tenth of what it
    asks, and reclaimable is what it leaves by the agent's rule: 4000 − 80 (the node's own 2 %)
    − 200 − 200 (a 5 % margin)."""
    store, port = report_server
    usage = SyntheticUsage(noise=0.0)
    nodes = SimulatedNodes(
        api,
        1,
        SimNodeSize(cpu="4", memory="8Gi"),
        f"127.0.0.1:{port}",
        TOKEN,
        name_prefix=f"sim-{secrets.token_hex(3)}-",
        report_interval=0.1,
        usage=usage,
    )
    nodes.start(stream_reports=False)
    try:
        assert nodes.wait_for_sync(10)
        [node] = nodes.node_names
        name = unique("reserved")
        requests = {"cpu": "2", "memory": "1Gi"}
        api.create(kinds.POD, sim_pod(name, node, {SIM_USAGE_ANNOTATION: "0.1"}, resources={"requests": requests}))
        wait_for(lambda: phase_is(api, name, "Running"), what="the pod to run")
        assert store.latest(node) is None and not nodes.stream_stats()  # nothing streams yet

        nodes.start_streams()
        nodes.start_streams()  # a second call changes nothing

        report = wait_for(lambda: store.latest(node), what="the node's first report")
        assert len(nodes.stream_stats()) == 1
        [pod] = [p for p in report.pods if p.name == name]
        assert pod.cpu_usage_cores == pytest.approx(0.2) and pod.memory_working_set_bytes == (1 << 30) // 10
        assert report.reclaimable["cpu"] == 4000 - 80 - 200 - 200
    finally:
        nodes.stop()


# --- pure parts -------------------------------------------------------------------------------------


def test_size_parses_from_a_command_line_value() -> None:
    size = SimNodeSize.parse("cpu=16, memory=64Gi,gpus=8,ephemeral-storage=1Ti", labels={"pool": "gpu"})
    assert size.capacity() == {
        "cpu": "16",
        "memory": "64Gi",
        "ephemeral-storage": "1Ti",
        "pods": "110",
        "nvidia.com/gpu": "8",
    }
    assert size.labels == {"pool": "gpu"}
    # What `lahar up` hands its `lahar sim-nodes` program reads back as the same size.
    assert SimNodeSize.parse(size.spec(), labels={"pool": "gpu"}) == size
    for bad, problem in (
        ("cpu=lots", "cpu"),
        ("disk=1", "expected"),
        ("pods=many", "whole number"),
        ("cpu=0", "more than 0"),
    ):
        with pytest.raises(ValueError, match=problem):
            SimNodeSize.parse(bad)


def test_plan_reads_the_annotations() -> None:
    def plan(**annotations: str) -> tuple[float | None, int, str]:
        return sim_plan({"metadata": {"annotations": annotations}})

    assert plan() == (None, 0, "")
    assert plan(**{SIM_DURATION_ANNOTATION: "2.5", SIM_EXIT_CODE_ANNOTATION: "3"}) == (2.5, 3, "")
    assert "not a number" in plan(**{SIM_DURATION_ANNOTATION: "-1"})[2]
    assert "not an exit code" in plan(**{SIM_EXIT_CODE_ANNOTATION: "x"})[2]


def test_usage_share_reads_the_annotation() -> None:
    def share(value: str | None) -> tuple[float | None, str]:
        annotations = {} if value is None else {SIM_USAGE_ANNOTATION: value}
        return sim_usage({"metadata": {"annotations": annotations}})

    assert share(None) == (None, "") and share("0.25") == (0.25, "") and share("0") == (0.0, "")
    for bad in ("-1", "nan", "inf", "lots", ""):
        factor, problem = share(bad)
        assert factor is None and SIM_USAGE_ANNOTATION in problem, bad


def test_a_pods_own_share_replaces_the_nodes_factor() -> None:
    node = SimNode("n", "10.0.0.1", 4000, 16 << 30)
    node.pods["a"] = SimPod("ns", "online", "a", 3000, 8 << 30, "LS", "Burstable", factor=0.1)
    node.pods["b"] = SimPod("ns", "batch", "b", 500, 1 << 30, "BE", "Burstable", factor=1.0)
    node.pods["c"] = SimPod("ns", "other", "c", 1000, 1 << 30, "LS", "Burstable")  # the node's factor
    usage = SyntheticUsage(factor=0.5, noise=0.0, system_ratio=0.0)

    report = synthetic_report(node, usage, random.Random(1), now=1.0)

    by_name = {p.name: p.cpu_usage_cores for p in report.pods}
    assert by_name == pytest.approx({"online": 0.3, "batch": 0.5, "other": 0.5})
    # The agent's rule: 4000 − 300 − 500 (not BE) − 200 (a 5 % margin); BE usage lends nothing back
    assert report.reclaimable["cpu"] == 4000 - 300 - 500 - 200


def test_synthetic_usage_follows_requests_and_leaves_reclaimable_to_be() -> None:
    node = SimNode("n", "10.0.0.1", 8000, 32 << 30)
    node.pods["a"] = SimPod("ns", "online", "a", 4000, 8 << 30, "LS", "Burstable")
    node.pods["b"] = SimPod("ns", "batch", "b", 2000, 4 << 30, "BE", "BestEffort")
    usage = SyntheticUsage(factor=0.5, noise=0.0, system_ratio=0.0)

    first = synthetic_report(node, usage, random.Random(1), now=1000.0)
    second = synthetic_report(node, usage, random.Random(1), now=1001.0)

    assert (first.sequence, second.sequence) == (1, 2)
    assert first.cpu.usage_cores == pytest.approx(3.0) and first.memory.used_bytes == 6 << 30
    # Only the online pod counts against what BE may borrow (the agent's rule): 8000 − 2000 − 400
    # (a 5 % margin), and memory 32Gi × 0.65 − 4Gi.
    assert first.reclaimable == {"cpu": 5600, "memory": int((32 << 30) * 0.65) - (4 << 30)}


def test_each_node_holds_a_lease_in_kube_node_lease_and_takes_pods_without_the_not_ready_taint(
    api: KubeApi, simulated: SimFactory
) -> None:
    """What kubelet does on any API server: a Lease per node (a real cluster's node lifecycle
    controller reads it), owned by the Node; and no not-ready taint on a Node registered Ready
    (kube-apiserver's TaintNodesByCondition adds it to every new Node; the embedded one does not)."""
    nodes = simulated(2)
    for name in nodes.node_names:
        lease = wait_for(lambda n=name: leases_of(api).get(n), 10, f"{name}'s Lease")
        assert lease["spec"]["holderIdentity"] == name and lease["spec"]["leaseDurationSeconds"] == 40
        node = api.get(kinds.NODE, name)
        assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        assert not (node.get("spec") or {}).get("taints")


def test_registering_a_ready_node_lifts_the_not_ready_taint(api: KubeApi) -> None:
    name = f"tainted-{secrets.token_hex(3)}"
    taint = {"key": node_object.NOT_READY_TAINT, "effect": "NoSchedule"}
    other = {"key": "example.com/keep", "effect": "NoSchedule"}
    api.create(kinds.NODE, {"metadata": {"name": name}, "spec": {"taints": [taint, other]}})
    ready = node_object.node_object(name, {}, {"cpu": "1"}, [node_object.ready_condition(True, 0.0)], "10.0.0.1")
    registered = node_object.register(api, ready)
    assert registered["spec"]["taints"] == [other]


def leases_of(api: KubeApi) -> dict[str, Any]:
    try:
        items = api.list(kinds.LEASE, node_object.NODE_LEASE_NAMESPACE)["items"]
    except NotFound:
        return {}
    return {lease["metadata"]["name"]: lease for lease in items}
