"""The QoS engine on fake cgroup trees: a tick end to end (through the real Agent, with its report,
health and /metrics), shutdown leaving the node safe, config reloads and node overrides, dry-run,
missing cgroup rights, eviction and reclaimable capacity, and the interference loop."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lahar.agent.agent import Agent, AgentSettings
from lahar.agent.cgroups.layout import CgroupDriver, CgroupVersion
from lahar.agent.cgroups.synthetic import Usage
from lahar.agent.collectors.cpu_wait import CpuWait, WaitSource
from lahar.agent.collectors.host import Host
from lahar.agent.exporter import ReportCollector, health_of
from lahar.agent.qos.config import QosConfig, QosConfigFile
from lahar.agent.qos.engine import QosEngine
from lahar.agent.qos.eviction import Victim
from lahar.agent.qos.interference import InterferenceLoop, LoopTargets, Sample, signal_between
from lahar.agent.qos.strategies.cpu_suppress import Signal
from lahar.api.qos import BEST_EFFORT, BURSTABLE
from lahar.rpc.report import CpuUsage, MemoryUsage, NodeReport, PodUsage
from tests.agent.conftest import QosTree
from tests.support import wait_for

GiB, MiB = 1 << 30, 1 << 20


def config(**sections: Any) -> QosConfig:
    """A config with the BE CPU cap on (off by default): most tests here pin what it does."""
    suppress = {"interference_cap": True, **sections.pop("cpu_suppress", {})}
    return QosConfig.from_mapping({"cpu_suppress": suppress, **sections})


def api_pod(
    uid: str,
    name: str,
    *,
    qos: str = "BestEffort",
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    container: str = "c",
    labels: dict[str, str] | None = None,
    priority: int = 0,
) -> dict[str, Any]:
    resources = {key: value for key, value in (("limits", limits), ("requests", requests)) if value}
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"priority": priority, "containers": [{"name": "main", "resources": resources}]},
        "status": {
            "phase": "Running",
            "qosClass": qos,
            "containerStatuses": [{"name": "main", "containerID": f"containerd://{container}"}],
        },
    }


class Node:
    """A fake tree with a BE pod and an LS pod, the API's view of them, and reports to feed."""

    def __init__(self, tree: QosTree) -> None:
        self.tree = tree
        self.be = tree.add_pod("be-1", BEST_EFFORT, containers={"cbe": Usage()})
        self.ls = tree.add_pod("ls-1", BURSTABLE, containers={"cls": Usage()})
        self.pods = [
            api_pod("be-1", "batch", container="cbe"),
            api_pod("ls-1", "web", qos="Burstable", limits={"cpu": "2"}, requests={"memory": "1Gi"}, container="cls"),
        ]

    def report(
        self,
        *,
        be_cpu: float = 1.5,
        ls_cpu: float = 1.0,
        node_cpu: float = 2.7,
        used: int = 4 * GiB,
        be_memory: int = 1 * GiB,
    ) -> NodeReport:
        return NodeReport(
            "n1",
            1,
            time.time(),
            CpuUsage(4, node_cpu, node_cpu / 4),
            MemoryUsage(16 * GiB, used, 16 * GiB - used, 0),
            pods=[
                PodUsage("default", "batch", "be-1", "BE", BEST_EFFORT, self.be, be_cpu, be_memory),
                PodUsage("default", "web", "ls-1", "LS", BURSTABLE, self.ls, ls_cpu, 1 * GiB),
            ],
        )

    def quota(self) -> str:
        be_dir = self.tree.layout.qos_dir(BEST_EFFORT)
        return self.tree.read(be_dir, "cpu.max" if self.tree.v2 else "cpu.cfs_quota_us")


@pytest.fixture
def node(qos_tree: QosTree) -> Node:
    return Node(qos_tree)


def engine_for(node: Node, qos: QosConfig | QosConfigFile | None = None, **options: Any) -> QosEngine:
    return QosEngine(
        Host(node.tree.root.parent, node.tree.root), "kubepods", qos or config(), interference_loop=False, **options
    )


def test_a_tick_applies_every_strategy_and_close_relaxes(node: Node) -> None:
    engine = engine_for(node)
    report = node.report()
    engine.step(report, node.pods, now=1.0)
    be_dir = node.tree.layout.qos_dir(BEST_EFFORT)
    # No interference measured: no cap at all, BE keeps kubelet's minimal weight, not idle-policy
    # (the fake kernel does not say it preempts at once).
    assert node.quota() == ("max 100000" if node.tree.v2 else "-1")
    assert node.tree.read(be_dir, "cpu.idle") == "0"
    burst = "cpu.max.burst" if node.tree.v2 else "cpu.cfs_burst_us"
    assert node.tree.read(node.ls, burst) == "200000"
    snapshot = engine.snapshot()
    assert snapshot.available and snapshot.status == "active" and snapshot.figures["be_cpu_quota_cores"] == 4.0
    assert snapshot.actions == {("lc_cores", "update"): 1}
    writes = sum(snapshot.writes.values())
    engine.step(node.report(), node.pods, now=2.0)
    assert sum(engine.snapshot().writes.values()) == writes  # nothing changed, nothing written
    engine.close()
    assert node.quota() == ("max 100000" if node.tree.v2 else "-1")
    assert node.tree.read(be_dir, "cpu.idle") == "0"
    assert node.tree.read(node.ls, burst) == "0"


def test_the_agent_runs_qos_and_exports_it(qos_tree: QosTree) -> None:
    """The real Agent on this machine's /proc with a fake cgroup tree: QoS acts on the collected
    report, fills its reclaimable capacity and shows on /metrics."""
    node = Node(qos_tree)
    settings = AgentSettings(node="n1", cgroup_root=qos_tree.root, qos=config(cpu_suppress={"wait_threshold": 0.5}))
    agent = Agent(settings, pods=lambda: node.pods)
    assert agent.qos is not None
    try:
        agent.collect()
        report = agent.collect()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ReportCollector(lambda: report, qos=agent.qos.snapshot))
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples
        }
    finally:
        agent.close()
    assert "qos" not in report.health.errors and set(report.reclaimable) == {"cpu", "memory"}
    n1 = (("node", "n1"),)
    assert samples[("lahar_qos_available", n1)] == 1 and samples[("lahar_qos_dry_run", n1)] == 0
    assert samples[("lahar_qos_be_cpu_quota_cores", n1)] > 0
    assert samples[("lahar_qos_cgroup_writes_total", (("knob", "cpu.burst"), ("node", "n1")))] >= 1
    assert samples[("lahar_qos_strategy_enabled", (("node", "n1"), ("strategy", "cpu_suppress")))] == 1
    assert ("lahar_node_reclaimable_cpu_cores", n1) in samples
    assert samples[("lahar_class_cpu_throttled_periods_total", (("lahar_qos", "BE"), ("node", "n1")))] >= 0
    ok, text = health_of(lambda: time.time(), 1.0, qos=agent.qos.snapshot)()
    assert ok and text.startswith("ok; qos ")


def test_without_cgroup_rights_qos_is_unavailable_and_the_agent_carries_on(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if mode & os.W_OK else real_access(path, mode))
    before = node.tree.snapshot()
    agent = Agent(AgentSettings(node="n1", cgroup_root=node.tree.root, qos=config()), pods=lambda: node.pods)
    try:
        report = agent.collect()
    finally:
        agent.close()
    assert node.tree.snapshot() == before
    assert report.health.errors["qos"].startswith("unavailable: no write access to")
    assert set(report.reclaimable) == {"cpu", "memory"}  # computed all the same
    assert agent.qos is not None and not agent.qos.snapshot().available
    ok, text = health_of(lambda: time.time(), 1.0, qos=agent.qos.snapshot)()
    assert ok and "qos unavailable: no write access" in text


def test_dry_run_writes_nothing_and_evicts_nobody(node: Node) -> None:
    evictor = FakeEvictor()
    qos = config(eviction={"samples": 1}, cpu_suppress={"ceiling_ratio": 0.65})  # a cap to (not) write
    engine = engine_for(node, qos, dry_run=True, evictor=evictor)
    before = node.tree.snapshot()
    records = [
        record
        for now in (1.0, 2.0)
        for record in engine.step(node.report(used=15 * GiB, be_memory=4 * GiB), node.pods, now)
    ]
    engine.close()
    assert node.tree.snapshot() == before
    assert evictor.evicted == [] and {r.outcome for r in records} == {"dry-run"}
    assert engine.snapshot().dry_run and engine.snapshot().writes["cpu.max"] == 1


class FakeEvictor:
    def __init__(self) -> None:
        self.evicted: list[str] = []
        self.events: list[str] = []

    def evict(self, victim: Victim, grace_period_seconds: int | None = None) -> None:
        self.evicted.append(victim.name)

    def record_event(self, victim: Victim, message: str) -> None:
        self.events.append(message)


def test_memory_pressure_caps_be_then_evicts_it(node: Node) -> None:
    evictor = FakeEvictor()
    engine = engine_for(node, config(eviction={"samples": 2, "memory_threshold": 0.85}), evictor=evictor)
    engine.step(node.report(used=14 * GiB, be_memory=3 * GiB), node.pods, 1.0)  # past memory's 80%
    cap = "memory.high" if node.tree.v2 else "memory.limit_in_bytes"
    assert node.tree.read(node.tree.layout.qos_dir(BEST_EFFORT), cap) == str(3 * GiB + 32 * MiB)
    assert evictor.evicted == []  # under the eviction watermark
    for now in (2.0, 3.0):
        engine.step(node.report(used=15 * GiB, be_memory=3 * GiB), node.pods, now)
    assert evictor.evicted == ["batch"] and engine.snapshot().evictions == {"memory_pressure": 1}


def test_a_reload_that_turns_a_strategy_off_relaxes_it(node: Node, tmp_path: Path) -> None:
    path = tmp_path / "qos.yaml"
    path.write_text("cpu_suppress: {enabled: true, ceiling_ratio: 0.65}\n")
    engine = engine_for(node, QosConfigFile(path))
    engine.step(node.report(), node.pods, 1.0)
    assert node.quota().startswith("140000")  # the SRE's ceiling: 4 x 0.65 - 1.0 online - 0.2 system
    path.write_text("cpu_suppress: {enabled: false}\n")
    os.utime(path, ns=(time.time_ns() + 10**9,) * 2)
    engine.step(node.report(), node.pods, 2.0)
    assert node.quota() == ("max 100000" if node.tree.v2 else "-1")
    assert not engine.snapshot().enabled["cpu_suppress"]
    path.write_text("cpu_suppress: {wait_threshold: 7}\n")  # refused: the last good config stays
    os.utime(path, ns=(time.time_ns() + 2 * 10**9,) * 2)
    engine.step(node.report(), node.pods, 3.0)
    assert node.quota() == ("max 100000" if node.tree.v2 else "-1")
    assert "cpu_suppress.wait_threshold" in (engine.snapshot().config_error or "")


def test_node_overrides_follow_the_node_labels(node: Node) -> None:
    qos = config(
        cpu_suppress={"ceiling_ratio": 0.65},
        node_configs=[
            {
                "name": "small",
                "node_selector": {"matchLabels": {"size": "small"}},
                "cpu_suppress": {"ceiling_ratio": 0.5},
            }
        ],
    )
    labels = {"size": "big"}
    engine = engine_for(node, qos, node_labels=lambda: labels)
    engine.step(node.report(), node.pods, 1.0)
    assert node.quota().startswith("140000")
    labels = {"size": "small"}  # relabelled: 4 × 0.5 − 1.0 − 0.2 = 0.8
    engine.step(node.report(), node.pods, 2.0)
    assert node.quota().startswith("80000")


# --- the interference loop --------------------------------------------------------------------


def wait(wait_seconds: float, cpu_seconds: float) -> CpuWait:
    return CpuWait(wait_seconds, cpu_seconds, WaitSource.PSI)


def test_a_window_signal_is_the_online_wait_share_and_be_usage() -> None:
    old = Sample(10.0, {"ls": wait(1.0, 5.0), "gone": wait(0, 0)}, 40.0, ("be",))
    new = Sample(10.2, {"ls": wait(1.05, 5.15), "new": wait(9, 9)}, 40.3, ("be",))
    signal = signal_between(old, new, 0.005)
    assert signal.at == 10.2 and signal.be_cores == pytest.approx(1.5)
    assert signal.wait_share == pytest.approx(0.05 / 0.2)  # only pods present at both ends
    idle = Sample(10.2, {"ls": wait(1.0, 5.001)}, 40.0, ("be",))
    assert signal_between(old, idle, 0.005).wait_share is None  # too little runnable time to tell
    exited = Sample(10.2, {"ls": wait(0.5, 5.2)}, 40.0, ("be",))  # a thread took its delay with it
    assert signal_between(old, exited, 0.005).wait_share == 0.0


class FakeLoopEngine:
    def __init__(self, targets: LoopTargets) -> None:
        self.targets = targets
        self.signals: list[Signal] = []

    def interference_targets(self) -> LoopTargets:
        return self.targets

    def interference_step(self, signal: Signal) -> str:
        self.signals.append(signal)
        return ""


def write_cpu_seconds(tree: QosTree, cgroup: str, seconds: float) -> None:
    if tree.v2:
        (tree.root / cgroup / "cpu.stat").write_text(f"usage_usec {round(seconds * 1e6)}\n")
    else:
        (tree.root / "cpuacct" / cgroup / "cpuacct.usage").write_text(f"{round(seconds * 1e9)}\n")


def write_pressure(tree: QosTree, cgroup: str, seconds: float) -> None:
    """The pod's cpu.pressure: its own cgroup on v2, its mirror in the unified hierarchy on v1."""
    directory = tree.root / cgroup if tree.v2 else tree.root / "unified" / cgroup
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    (directory / "cpu.pressure").write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={round(seconds * 1e6)}\nfull avg10=0.00 avg60=0.00 "
        "avg300=0.00 total=0\n"
    )


def test_the_loop_reads_online_pressure_and_be_usage(node: Node, tmp_path: Path) -> None:
    be_dir = node.tree.layout.qos_dir(BEST_EFFORT)
    fake = FakeLoopEngine(LoopTargets((node.ls,), (be_dir,), 0.1, 0.2, 0.005))
    now = [0.0]
    loop = InterferenceLoop(fake, Host(tmp_path, node.tree.root), clock=lambda: now[0])
    for at, ls_cpu, ls_wait, be in ((0.0, 10.0, 1.0, 4.0), (0.1, 10.05, 1.05, 4.1), (0.2, 10.1, 1.1, 4.3)):
        now[0] = at
        write_cpu_seconds(node.tree, node.ls, ls_cpu)
        write_pressure(node.tree, node.ls, ls_wait)
        write_cpu_seconds(node.tree, be_dir, be)
        assert loop.step() == 0.1
    loop.stop()
    # The first window (0.1 s) is short of 3/4 of 0.2 s: one signal, at 0.2 s.
    assert len(fake.signals) == 1
    assert fake.signals[0].wait_share == pytest.approx(0.5)  # waited 0.1 s, ran 0.1 s
    assert fake.signals[0].be_cores == pytest.approx(1.5)


LAW = {"cpu_suppress": {"wait_threshold": 0.3, "fast_wait_threshold": 0.6}}  # the limits these tests pin


def test_by_default_the_loop_measures_online_wait_but_never_caps_be(node: Node) -> None:
    engine = engine_for(node, QosConfig())
    engine.step(node.report(), node.pods, 1.0)
    # the wait is still measured (a metric and an alert), at the same rate as with the cap on; BE's
    # CPU, which only the cap's control reads, is not (two reads a BE group fewer each sample)
    assert engine.interference_targets() == LoopTargets((node.ls,), (), 0.05, 1.0, 0.005, 0.2)
    for at in (1.2, 2.3, 3.4, 4.5):  # blatant interference, window after window
        assert engine.interference_step(Signal(at, 0.9, be_cores=1.5)) == ""
    assert node.quota() == ("max 100000" if node.tree.v2 else "-1") and engine.cap_changes == 0
    weight = node.tree.read(node.tree.layout.qos_dir(BEST_EFFORT), "cpu.weight" if node.tree.v2 else "cpu.shares")
    assert weight == ("1" if node.tree.v2 else "2")  # the weights are what protects online pods


def test_the_engine_cuts_be_under_interference_holds_then_grows_and_lifts(node: Node) -> None:
    engine = engine_for(node, config(**LAW))
    engine.step(node.report(), node.pods, 1.0)
    assert engine.interference_targets() == LoopTargets(
        (node.ls,), (node.tree.layout.qos_dir(BEST_EFFORT),), 0.05, 1.0, 0.005, 0.2
    )
    assert engine.interference_step(Signal(1.1, 0.05, be_cores=1.5)) == ""  # quiet: no cap, no write
    assert node.quota() == ("max 100000" if node.tree.v2 else "-1") and engine.cap_changes == 0
    assert engine.interference_step(Signal(1.2, 0.6, be_cores=1.5)) == "cut"  # online waits 60%
    assert node.quota().startswith("75000")  # half of what BE used
    assert engine.interference_step(Signal(1.5, 0.6, be_cores=0.75)) == ""  # the cut's window is not over
    assert engine.interference_step(Signal(2.25, 0.42, be_cores=0.75)) == "cut"  # the first one helped: again
    assert node.quota().startswith("37500")
    assert engine.interference_step(Signal(2.5, 0.2, be_cores=0.37)) == ""  # in the band: hold
    assert engine.interference_step(Signal(3.5, 0.02, be_cores=0.37)) == "grow"  # 0.1 x 4 cores a second
    assert node.quota().startswith("77500")
    assert engine.snapshot().actions[("cpu_suppress", "cut")] == 2
    engine.step(node.report(), node.pods, 4.0)  # the tick keeps the loop's cap
    assert node.quota().startswith("77500")
    assert engine.interference_step(Signal(14.0, 0.0, be_cores=0.77)) == "lift"
    assert node.quota() == ("max 100000" if node.tree.v2 else "-1")
    assert engine.cap_changes == 4


def test_a_cut_that_does_not_help_is_undone_and_the_wait_becomes_the_baseline(node: Node) -> None:
    engine = engine_for(node, config(**LAW))
    engine.step(node.report(), node.pods, 1.0)
    at = 1.0
    for _ in range(24):  # online waits for reasons of its own: cutting BE does not help
        at += 0.1
        engine.interference_step(Signal(at, 0.45, be_cores=1.5))
    state = engine._plans["cpu_suppress"].memo["control"]
    assert state.baseline == pytest.approx(0.45, rel=0.02) and state.cap is None
    assert node.quota() == ("max 100000" if node.tree.v2 else "-1")  # the cap is gone again
    actions = engine.snapshot().actions
    assert actions[("cpu_suppress", "cut")] == 1 and actions[("cpu_suppress", "revert")] == 1
    assert engine.cap_changes == 2


@pytest.fixture
def running_engine(node: Node, tmp_path: Path) -> Iterator[tuple[QosEngine, Node]]:
    engine = QosEngine(Host(Path("/"), node.tree.root), "kubepods", config())
    yield engine, node
    engine.close()


def test_the_loop_thread_starts_with_the_first_tick_and_stops_on_close(
    running_engine: tuple[QosEngine, Node],
) -> None:
    engine, node = running_engine
    assert engine.loop is not None and engine.loop._thread is None
    engine.step(node.report(), node.pods, 1.0)
    assert engine.loop._thread is not None and engine.loop._thread.is_alive()
    engine.close()
    assert engine.loop._thread is None


@pytest.mark.parametrize(("policy", "expected"), [("normal", os.SCHED_OTHER), ("idle", os.SCHED_IDLE)])
def test_the_tick_and_loop_threads_run_under_the_configured_policy(node: Node, policy: str, expected: int) -> None:
    """`agent_cpu_policy: idle`: the thread that runs the tick and the loop thread it starts put
    themselves under SCHED_IDLE (an online wake-up then always preempts them); the default
    leaves both as they were started."""
    config = QosConfig.from_mapping({"agent_cpu_policy": policy})
    engine = QosEngine(Host(Path("/"), node.tree.root), "kubepods", config)
    seen: list[int] = []

    def tick() -> None:
        engine.step(node.report(), node.pods, 1.0)
        seen.append(os.sched_getscheduler(0))

    thread = threading.Thread(target=tick)
    thread.start()
    thread.join(10)
    try:
        assert seen == [expected]
        targets = engine.interference_targets()
        assert targets is not None and targets.cpu_policy == policy
        loop = engine.loop._thread if engine.loop is not None else None
        assert loop is not None and loop.native_id is not None
        wait_for(lambda: engine.loop is not None and engine.loop.latest is not None, 5, "the loop's first sample")
        assert os.sched_getscheduler(loop.native_id) == expected
    finally:
        engine.close()
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the test's own thread was never touched


@pytest.mark.parametrize("version", list(CgroupVersion))
def test_waiting_until_kubepods_exists(tmp_path: Path, version: CgroupVersion) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    if version is CgroupVersion.V2:
        (root / "cgroup.controllers").write_text("cpu memory io\n")
    engine = QosEngine(Host(tmp_path, root), "kubepods", QosConfig(), interference_loop=False)
    report = NodeReport("n1", 1, time.time(), CpuUsage(2, 0.1, 0.05), MemoryUsage(GiB, GiB // 4, GiB // 2, 0))
    engine.step(report, [], 1.0)
    assert engine.snapshot().status == "waiting" and engine.snapshot().available
    assert CgroupDriver  # both drivers' tops are looked for


# --- with an API: the embedded API server ---------------------------------------------------


def test_with_an_api_the_agent_evicts_honours_budgets_and_publishes_batch_resources(k8s: Any, tmp_path: Path) -> None:
    """The Agent's wiring (`qos_engine`): evictions through the Eviction API (a PodDisruptionBudget
    refusal moves on to the next pod), the reclaimable capacity in the Node's status, and this
    node's labels choosing its overrides."""
    from lahar.agent.agent import qos_engine
    from lahar.api import kinds
    from lahar.client.api import KubeApi

    api = KubeApi(k8s, timeout=10)
    api.create(
        kinds.NODE,
        {
            "metadata": {"name": "n1", "labels": {"pool": "batch"}},
            "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}},
        },
    )
    api.create(kinds.NAMESPACE, {"metadata": {"name": "jobs"}})
    uids = {}
    for name, labels in (("guarded", {"app": "guarded"}), ("spare", {})):
        api.create(
            kinds.POD,
            {
                "metadata": {"name": name, "labels": labels},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
            "jobs",
        )
        api.bind("jobs", name, "n1")
        uids[name] = api.patch(kinds.POD, name, {"status": {"phase": "Running"}}, "jobs", subresource="status")[
            "metadata"
        ]["uid"]
    api.create(
        kinds.PDB,
        {"metadata": {"name": "keep"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}},
        "jobs",
    )
    tree = QosTree(tmp_path / "cgroup", CgroupVersion.V1, CgroupDriver.CGROUPFS)
    paths = {name: tree.add_pod(uid, BEST_EFFORT) for name, uid in uids.items()}
    qos = config(
        eviction={"samples": 1, "memory_threshold": 0.8},
        reclaimable={"patch_node_allocatable": True, "memory_threshold": 0.9},
        node_configs=[
            {
                "name": "batch-pool",
                "node_selector": {"matchLabels": {"pool": "batch"}},
                "cpu_suppress": {"ceiling_ratio": 0.4},
            }
        ],
    )
    settings = AgentSettings(node="n1", cgroup_root=tree.root, qos=qos)
    engine = qos_engine(settings, Host(tmp_path, tree.root), api)
    try:
        wait_for(lambda: engine.node_labels() == {"pool": "batch"}, 10, "the node's labels")
        pods = api.list(kinds.POD, "jobs")["items"]
        report = NodeReport(
            "n1",
            1,
            time.time(),
            CpuUsage(4, 1.0, 0.25),
            MemoryUsage(16 * GiB, 15 * GiB, GiB, 0),
            pods=[
                PodUsage("jobs", name, uids[name], "BE", BEST_EFFORT, paths[name], 0.5, 4 * GiB)
                for name in ("guarded", "spare")
            ],
        )
        records = engine.step(report, pods, 1.0)
    finally:
        engine.close()
    assert [(r.name, r.outcome) for r in records] == [("guarded", "refused"), ("spare", "evicted")]
    assert engine.snapshot().evictions == {"memory_pressure": 1}
    assert engine.snapshot().eviction_refusals == {"memory_pressure": 1}
    # 4 × 0.4 (the batch-pool override) − 0 online − 0 system: the BE cap was 1.6 cores
    assert engine.snapshot().figures["be_cpu_quota_cores"] == pytest.approx(1.6)
    allocatable = api.get(kinds.NODE, "n1")["status"]["allocatable"]
    assert allocatable["kubernetes.io/batch-cpu"] == str(report.reclaimable["cpu"])
    assert allocatable["kubernetes.io/batch-memory"] == str(report.reclaimable["memory"])


def test_a_qos_tick_that_keeps_failing_shows_in_health(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_for(node)
    engine.step(node.report(), node.pods, 1.0)

    def broken(*_: Any) -> None:
        raise KeyError("narrowed")

    monkeypatch.setattr(engine.state, "node", broken)
    for now in (2.0, 3.0, 4.0):
        with pytest.raises(KeyError):
            engine.step(node.report(), node.pods, now)
        healthy, text = health_of(lambda: time.time(), 1.0, qos=engine.snapshot)()
        assert ("failing" in text) and healthy is (now < 4.0)  # unhealthy from the third failure in a row
    monkeypatch.undo()
    engine.step(node.report(), node.pods, 5.0)
    assert health_of(lambda: time.time(), 1.0, qos=engine.snapshot)() == (True, "ok; qos active")


def test_pods_and_cgroups_may_appear_in_any_order(tmp_path: Path, qos_tree: QosTree) -> None:
    """An agent started before any pod cgroup exists, then pods the API knows before their cgroups,
    then cgroups before the API knows the pods: every tick goes through."""
    node = Node(qos_tree)
    engine = engine_for(node)
    empty = node.report()
    empty.pods = []
    engine.step(empty, [], 1.0)  # no pods at all: lc_cores and the rest have nothing to narrow
    engine.step(empty, node.pods, 2.0)  # the API's pods, no cgroups measured yet
    engine.step(node.report(), [], 3.0)  # cgroups measured, the API not caught up
    engine.step(node.report(), node.pods, 4.0)
    assert engine.snapshot().status == "active" and engine.failures == 0
