"""Reclaimable capacity from real reports through the scheduler: each node's agent side is the
real ReclaimableTracker fed NodeReports as the collectors make them (node usage, pods with their
class and usage), its answer travels in the report to the scheduler's report store, and a real
scheduling cycle places BE pods with requests against it (issue 23)."""

from __future__ import annotations

import copy
from typing import Any

from lahar.agent.qos.reclaimable import ReclaimableConfig, ReclaimableTracker
from lahar.rpc.report import CpuUsage, MemoryUsage, NodeReport, PodUsage
from lahar.scheduler.framework.session import Session
from lahar.scheduler.node_reports import NodeReportStore
from tests.scheduler.preempt_builders import GIB, Clock, a_pod, annotate, cluster, conf, node, run, running

BE = {"lahar.dev/qos-class": "BE"}
ALLOCATE = conf("allocate", ["priority", "gang"], ["predicates", "oversubscription"])
OLD_THRESHOLD = 0.65  # the rule this replaces: capacity × 0.65 − online peak over 300 s


class Agent:
    """One node's agent as far as reclaimable goes: reports in, reclaimable out, into the store."""

    def __init__(self, name: str, cores: int, store: NodeReportStore, clock: Clock) -> None:
        self.name, self.cores, self.store, self.clock = name, cores, store, clock
        self.tracker = ReclaimableTracker(ReclaimableConfig())
        self.sequence = 0
        self.start = clock.now

    def report(
        self,
        outside: float,
        pods: list[PodUsage] | None = None,
        api_pods: list[dict[str, Any]] | None = None,
        interference: float = 0.0,
    ) -> dict[str, int]:
        """A report whose node usage is the pods' plus `outside` cores, sent now; its reclaimable."""
        pods = pods or []
        used = outside + sum(p.cpu_usage_cores for p in pods)
        total = 8 * GIB
        memory_used = GIB + sum(p.memory_working_set_bytes for p in pods)
        self.sequence += 1
        sample = NodeReport(
            node=self.name,
            sequence=self.sequence,
            timestamp=self.clock.now,
            cpu=CpuUsage(self.cores, used, used / self.cores),
            memory=MemoryUsage(total, memory_used, total - memory_used, 0),
            pods=pods,
        )
        sample.reclaimable = self.tracker.update(sample, api_pods or [], self.clock.now - self.start, interference)
        self.store.submit(sample)
        return sample.reclaimable

    def tick(self, seconds: float, outside: float, **kwargs: Any) -> dict[str, int]:
        """Reports every second for `seconds`; the last reclaimable."""
        lent: dict[str, int] = {}
        for _ in range(round(seconds)):
            self.clock.now += 1.0
            lent = self.report(outside, **kwargs)
        return lent


def usage(name: str, cores: float, qos: str, memory: int = 256 << 20) -> PodUsage:
    kube = "BestEffort" if qos == "BE" else "Burstable"
    return PodUsage("default", name, f"uid-{name}", qos, kube, f"kubepods/{kube.lower()}/pod{name}", cores, memory)


def be_job(count: int, cpu: str, prefix: str = "be") -> list[dict[str, Any]]:
    return [annotate(a_pod(f"{prefix}-{i}", cpu=cpu, memory="256Mi"), **BE) for i in range(count)]


def idle_ls(node_name: str) -> dict[str, Any]:
    """The LS pod beside which BE runs: 500m requested, using ~nothing."""
    return running("ls", node_name, cpu="500m", memory="512Mi")


def placed(session: Session) -> list[str]:
    return sorted(t.name for batch in session.binds for t in batch.tasks)


def reasons(session: Session) -> str:
    return " | ".join(job.unschedulable_message for job in session.jobs.values() if job.unschedulable_message)


def ninety_percent_of_idle(cores: int, used: float, pods: int) -> str:
    """Millicores per pod for `pods` pods requesting 90% of what the node leaves idle."""
    return f"{int(0.9 * (cores - used) * 1000 / pods)}m"


def test_an_idle_node_offers_at_least_ninety_percent_of_its_idle_cpu_to_be_pods() -> None:
    clock = Clock()
    reports = NodeReportStore(clock)
    agent = Agent("n1", 2, reports, clock)
    lent = agent.report(0.02, [usage("ls", 0.0, "LS")])
    assert lent["cpu"] >= 0.9 * (2000 - 20)
    cpu = ninety_percent_of_idle(2, 0.02, 2)  # 891m each: 1782m of the 1980m idle
    session = run(cluster(node("n1", cpu="2", memory="8Gi"), idle_ls("n1"), *be_job(2, cpu)), ALLOCATE, reports)
    assert placed(session) == ["be-0", "be-1"]

    # The old rule lent 2000 × 0.65 − 20 = 1280m there: one of the two, the other Pending.
    old = NodeReportStore(clock)
    old_rule = {"cpu": int(2000 * OLD_THRESHOLD) - 20, "memory": 4 * GIB}
    old.submit(
        NodeReport("n1", 1, 0.0, CpuUsage(2, 0.02, 0.01), MemoryUsage(8 * GIB, GIB, 7 * GIB, 0), reclaimable=old_rule)
    )
    session = run(cluster(node("n1", cpu="2", memory="8Gi"), idle_ls("n1"), *be_job(2, cpu)), ALLOCATE, old)
    assert len(placed(session)) == 1


def test_a_start_up_burst_holds_be_back_only_for_the_burst_plus_a_few_seconds() -> None:
    """The node's own processes burst at start (1.9 of 2 cores outside pods for 15 s): BE pods with
    requests wait for the burst and the window (5 s) after it, not five minutes."""
    clock = Clock()
    reports = NodeReportStore(clock)
    agent = Agent("n1", 2, reports, clock)
    ls = [usage("ls", 0.0, "LS")]
    objects = (node("n1", cpu="2", memory="8Gi"), idle_ls("n1"), *be_job(2, ninety_percent_of_idle(2, 0.02, 2)))
    agent.tick(15, 1.9, pods=ls)
    during = run(cluster(*objects), ALLOCATE, reports)
    assert placed(during) == [] and "Insufficient cpu" in reasons(during)
    agent.tick(5, 0.02, pods=ls)  # 5 s after the burst: its last sample is still in the window's mean
    assert len(placed(run(cluster(*objects), ALLOCATE, reports))) < 2
    agent.tick(1, 0.02, pods=ls)  # 6 s after: forgotten
    assert placed(run(cluster(*objects), ALLOCATE, reports)) == ["be-0", "be-1"]


def test_a_deleted_be_pod_does_not_hold_reclaimable_down() -> None:
    """A BE hog (1.8 cores) is deleted: in its grace period it is still BE (the scheduler counts
    its request until it is gone), and the CPU it burnt in its last interval, when no pod carries
    it any more, is not taken for an online burst: the next BE job places at once."""
    clock = Clock()
    reports = NodeReportStore(clock)
    agent = Agent("n1", 2, reports, clock)
    ls, hog = usage("ls", 0.0, "LS"), usage("old", 1.8, "BE")
    old_pod = annotate(running("old", "n1", cpu="1800m", memory="256Mi"), **BE)
    assert agent.tick(3, 0.02, pods=[ls, hog], api_pods=[old_pod])["cpu"] >= 0.9 * (2000 - 20)

    leaving = copy.deepcopy(old_pod)
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    lent = agent.tick(2, 0.02, pods=[ls, hog], api_pods=[leaving])
    assert lent["cpu"] >= 0.9 * (2000 - 20)
    new_job = be_job(2, ninety_percent_of_idle(2, 0.02, 2), prefix="next")
    objects = (node("n1", cpu="2", memory="8Gi"), idle_ls("n1"))
    # While it terminates its request still counts on the node: the new job waits for it.
    assert placed(run(cluster(*objects, leaving, *new_job), ALLOCATE, reports)) == []

    # Gone from the API; its processes used 1.2 cores of the last interval before they died.
    clock.now += 1.0
    lent = agent.report(0.02 + 1.2, [ls])
    assert lent["cpu"] >= 0.9 * (2000 - 20)
    assert placed(run(cluster(*objects, *new_job), ALLOCATE, reports)) == ["next-0", "next-1"]


def test_under_interference_reclaimable_shrinks_and_be_pods_stop_being_placed() -> None:
    clock = Clock()
    reports = NodeReportStore(clock)
    agent = Agent("n1", 4, reports, clock)
    ls = usage("ls", 1.0, "LS")
    holding = [usage(f"run-{i}", 0.5, "BE") for i in range(4)]
    running_be = [annotate(running(f"run-{i}", "n1", cpu="500m", memory="256Mi"), **BE) for i in range(4)]
    objects = (node("n1", cpu="4", memory="16Gi"), running("ls", "n1", cpu="1", memory="1Gi"), *running_be)
    pending = be_job(2, "400m")
    quiet = agent.tick(3, 0.0, pods=[ls, *holding])
    assert quiet["cpu"] == 4000 - 1000 - 200
    assert placed(run(cluster(*objects, *pending), ALLOCATE, reports)) == ["be-0", "be-1"]

    # Online pods wait for CPU: what is lent shrinks below what BE pods already hold.
    shrunk = agent.tick(1, 0.0, pods=[ls, *holding], interference=0.5)
    assert shrunk["cpu"] == round(quiet["cpu"] * 0.5)
    session = run(cluster(*objects, *pending), ALLOCATE, reports)
    assert placed(session) == [] and "Insufficient cpu" in reasons(session)
    # It clears; what is lent grows back over 30 s from full interference (15 s from half) rather
    # than refilling the node the moment the cap lifts.
    for _ in range(10):
        agent.tick(1, 0.0, pods=[ls, *holding])
        assert placed(run(cluster(*objects, *pending), ALLOCATE, reports)) == []
    agent.tick(5, 0.0, pods=[ls, *holding])
    assert placed(run(cluster(*objects, *pending), ALLOCATE, reports)) == ["be-0", "be-1"]


def test_a_node_whose_agent_went_quiet_lends_nothing_and_says_so() -> None:
    clock = Clock()
    reports = NodeReportStore(clock)
    agent = Agent("n1", 2, reports, clock)
    agent.report(0.02, [usage("ls", 0.0, "LS")])
    objects = (node("n1", cpu="2", memory="8Gi"), idle_ls("n1"), *be_job(2, "500m"))
    assert placed(run(cluster(*objects), ALLOCATE, reports)) == ["be-0", "be-1"]
    clock.now += 11.0  # no report for longer than the plugin's staleness (10 s)
    session = run(cluster(*objects), ALLOCATE, reports)
    assert placed(session) == []
    assert "node(s) had no fresh agent report: nothing lent to best-effort pods" in reasons(session)
