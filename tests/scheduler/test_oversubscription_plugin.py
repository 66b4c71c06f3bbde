"""The oversubscription plugin: BE pods are placed against the reclaimable capacity of each node's
fresh report and never beyond it; a stale or missing report lends nothing; online pods still go
by allocatable; the score prefers nodes with more of their BE budget left."""

from __future__ import annotations

import numpy as np
import pytest

from lahar.scheduler.conf import parse_conf
from lahar.scheduler.framework.plugin import ConfError
from lahar.scheduler.framework.session import Session
from tests.scheduler.cluster_fixtures import podgroup
from tests.scheduler.preempt_builders import (
    GIB,
    Clock,
    a_pod,
    annotate,
    cluster,
    conf,
    node,
    opened,
    report,
    run,
    running,
    store,
    task,
)
from tests.scheduler.volcano_cases import vc_pod, vc_podgroup, vc_queue

BE = {"lahar.dev/qos-class": "BE"}
TIERS = (["priority", "gang"], ["predicates", "oversubscription"])
ALLOCATE = conf("allocate", *TIERS)


def requested_full(*names: str) -> list[dict]:
    """4-CPU, 32Gi nodes whose allocatable online pods have requested entirely."""
    objects: list[dict] = []
    for name in names:
        objects.append(node(name, cpu="4", memory="32Gi"))
        objects += [running(f"{name}-ls-{i}", name, cpu="1", memory="8Gi") for i in range(4)]
    return objects


def be_pods(count: int, cpu: str = "500m", memory: str = "1Gi") -> list[dict]:
    return [annotate(a_pod(f"be-{i}", cpu=cpu, memory=memory), **BE) for i in range(count)]


def lent(cpu: int, memory: int = 16 * GIB) -> dict[str, int]:
    return {"cpu": cpu, "memory": memory}


def placed_on(session: Session) -> dict[str, int]:
    counts: dict[str, int] = {}
    for batch in session.binds:
        for placed in batch.tasks:
            counts[placed.node] = counts.get(placed.node, 0) + 1
    return counts


def test_be_pods_fill_the_reclaimable_capacity_and_no_more() -> None:
    clock = Clock()
    reports = store(clock, report("n1", reclaimable=lent(2000)), report("n2", reclaimable=lent(1200, 2 * GIB)))
    session = run(cluster(*requested_full("n1", "n2"), *be_pods(10)), ALLOCATE, reports)
    # n1 lends 2 CPUs (4 pods of 500m); n2 1.2 CPUs but only 2Gi (2 pods of 1Gi).
    assert placed_on(session) == {"n1": 4, "n2": 2}
    nodes = session.nodes
    be_used = nodes.be_used[:, :2]
    assert (be_used <= session.be_capacity).all()
    assert session.be_capacity.tolist() == [[2000, 16 * GIB], [1200, 2 * GIB]]


def test_a_stale_or_missing_report_lends_nothing() -> None:
    clock = Clock()
    reports = store(clock, report("n1", reclaimable=lent(2000)))
    reports.submit(report("n2", reclaimable=lent(4000)), received_at=clock.now - 11)  # older than 10 s
    session = run(cluster(*requested_full("n1", "n2", "n3"), *be_pods(10)), ALLOCATE, reports)
    assert placed_on(session) == {"n1": 4}
    assert session.be_capacity[1:].tolist() == [[0, 0], [0, 0]]
    # A longer staleness limit lets n2's report count again.
    longer = conf("allocate", TIERS[0], ["predicates", {"name": "oversubscription", "arguments": {"staleness": 60}}])
    assert placed_on(run(cluster(*requested_full("n1", "n2"), *be_pods(20)), longer, reports)) == {"n1": 4, "n2": 8}
    # Ageing past the limit takes it away.
    clock.now += 11
    assert placed_on(run(cluster(*requested_full("n1", "n2"), *be_pods(10)), ALLOCATE, reports)) == {}


def test_online_pods_still_go_by_allocatable() -> None:
    reports = store(Clock(), report("n1", reclaimable=lent(4000, 32 * GIB)))
    ls = a_pod("ls", cpu="500m", memory="1Gi")
    assert placed_on(run(cluster(*requested_full("n1"), ls), ALLOCATE, reports)) == {}
    # BE usage does not take from what online pods may request.
    objects = [node("n1", cpu="4", memory="32Gi"), *be_pods(4, cpu="1", memory="4Gi"), ls]
    assert placed_on(run(cluster(*objects), ALLOCATE, reports)) == {"n1": 5}


def test_without_the_plugin_be_pods_count_against_allocatable() -> None:
    reports = store(Clock(), report("n1", reclaimable=lent(2000)))
    plain = conf("allocate", TIERS[0], ["predicates"])
    assert placed_on(run(cluster(*requested_full("n1"), *be_pods(4)), plain, reports)) == {}


def test_score_prefers_more_reclaimable_left() -> None:
    reports = store(Clock(), report("n1", reclaimable=lent(1000)), report("n2", reclaimable=lent(3000)))
    session = opened(cluster(*requested_full("n1", "n2"), *be_pods(1)), conf("allocate", ["oversubscription"]), reports)
    be = task(session, "be-0")
    scores = session.score(be)
    assert scores[1] > scores[0] > 0
    assert session.best_node(be) == 1
    ls = annotate(a_pod("ls", cpu="1"))
    online = opened(cluster(*requested_full("n1", "n2"), ls), conf("allocate", ["oversubscription"]), reports)
    assert np.all(online.score(task(online, "ls")) == 0)


def test_bad_arguments_are_refused() -> None:
    assert (
        "unknown argument 'lend'"
        in parse_conf(
            'actions: "allocate"\ntiers:\n- plugins:\n  - name: oversubscription\n    arguments: {lend: 2}\n'
        ).warnings[0]
    )
    for arguments in ("{staleness: -1}", "{staleness: soon}"):
        with pytest.raises(ConfError, match="oversubscription"):
            parse_conf(
                f'actions: "allocate"\ntiers:\n- plugins:\n  - name: oversubscription\n    arguments: {arguments}\n'
            )


def test_proportion_does_not_charge_borrowed_capacity_to_the_queue() -> None:
    """Online pods fill the default queue's whole share; BE pods borrowing reclaimable capacity
    still place, because under oversubscription their cpu/memory is not queue quota."""
    reports = store(Clock(), report("n1", reclaimable=lent(2000)))
    with_proportion = conf("allocate", ["priority", "gang"], ["predicates", "proportion", "oversubscription"])
    session = run(cluster(*requested_full("n1"), *be_pods(6)), with_proportion, reports)
    assert placed_on(session) == {"n1": 4}
    queue = session.queue_figures["default"]
    # The queue's allocated cpu is the online pods' 4 CPUs only.
    assert queue["allocated"]["cpu"] == 4000


def test_capacity_does_not_charge_borrowed_capacity_to_the_queue() -> None:
    """As proportion: online pods take the default queue's whole real capability (the node's
    4 CPUs); BE pods borrowing reclaimable capacity still place, and the queue's allocated cpu
    is the online pods' only. Without lending, the queue is full and they wait."""
    reports = store(Clock(), report("n1", reclaimable=lent(2000)))
    with_capacity = conf("allocate", ["priority", "gang"], ["predicates", "capacity", "oversubscription"])
    session = run(cluster(*requested_full("n1"), *be_pods(6)), with_capacity, reports)
    assert placed_on(session) == {"n1": 4}
    assert session.queue_figures["default"]["allocated"]["cpu"] == 4000
    # A BE pod already running on lent capacity is not charged either: an online pod still fits
    # the queue once a CPU is free.
    objects = [node("n1", cpu="4", memory="32Gi"), *(running(f"ls-{i}", "n1", cpu="1") for i in range(3))]
    objects += [annotate(running("be-0", "n1", cpu="1"), **BE), a_pod("online", cpu="1")]
    assert placed_on(run(cluster(*objects), with_capacity, reports)) == {"n1": 1}
    without = conf("allocate", ["priority", "gang"], ["predicates", "capacity"])
    assert placed_on(run(cluster(*requested_full("n1"), *be_pods(6)), without, reports)) == {}


def test_a_node_without_a_fresh_report_says_why_it_lends_nothing() -> None:
    clock = Clock()
    reports = store(clock)
    reports.submit(report("n1", reclaimable=lent(4000)), received_at=clock.now - 11)  # older than 10 s
    session = run(cluster(*requested_full("n1"), *be_pods(1)), ALLOCATE, reports)
    assert placed_on(session) == {}
    messages = [job.unschedulable_message or "" for job in session.jobs.values()]
    assert any("1 node(s) had no fresh agent report: nothing lent to best-effort pods" in m for m in messages), messages
    # Online pods are not held by it.
    online = a_pod("ls", cpu="500m", memory="1Gi")
    assert placed_on(run(cluster(node("n1", cpu="4", memory="32Gi"), online), ALLOCATE, reports)) == {"n1": 1}


def _enqueued(objects: list[dict], reports: object, *plugins: str) -> str:
    session = run(cluster(*objects), conf("enqueue", ["priority", "gang", *plugins]), reports)  # type: ignore[arg-type]
    return next(str(job.phase) for job in session.jobs.values() if job.name == "online")


def test_be_pods_on_lent_capacity_do_not_close_admission_to_online_jobs() -> None:
    # 4 CPUs: online pods requested 3, BE pods borrow 3 of the 3.4 the agent lends. An online job
    # asking 500m still fits by the fit rule (online pods ignore BE usage on cpu and memory), so the
    # overcommitted cluster must not count the borrowed CPUs against its admission either.
    objects = [node("n1", cpu="4", memory="32Gi")]
    objects += [running(f"ls-{i}", "n1", cpu="1", memory="1Gi") for i in range(3)]
    objects += [annotate(running(f"be-{i}", "n1", cpu="1", memory="1Gi"), **BE) for i in range(3)]
    objects.append(podgroup("online", 1, phase="Pending", min_resources={"cpu": "500m"}))
    reports = store(Clock(), report("n1", reclaimable=lent(3400)))
    assert _enqueued(objects, reports, "overcommit", "oversubscription") == "Inqueue"
    # Without lending the BE pods sit on allocatable like any pod: 4.8 - 6 leaves nothing to admit.
    assert _enqueued(objects, None, "overcommit") == "Pending"


def test_a_be_victim_lowers_its_queue_by_what_it_was_charged() -> None:
    """A BE pod borrowing lent cpu was never charged to its queue: taking it as a reclaim victim
    leaves the queue's allocation as it was (1.5 CPUs, above its 1 CPU guarantee), so the
    guarantee does not protect it (capacity and proportion alike)."""
    guarded = vc_queue("q1")
    guarded["spec"]["guarantee"] = {"resource": {"cpu": "1"}}
    be_pod = vc_pod("ns", "be", "n1", "Running", {"cpu": "1", "memory": "1Gi"}, "pg1")
    be_pod["metadata"]["annotations"].update(BE)
    objects = [
        node("n1", cpu="2", memory="32Gi"),  # proportion: the queues' water-filled shares are 1 CPU each
        guarded,
        vc_queue("q2"),
        vc_podgroup("pg1", "ns", "q1", 1, None, "Running"),
        vc_podgroup("pg2", "ns", "q2", 1, None, "Inqueue"),
        vc_pod("ns", "online", "n1", "Running", {"cpu": "1500m", "memory": "1Gi"}, "pg1"),
        be_pod,
        vc_pod("ns", "reclaimer", "", "Pending", {"cpu": "1", "memory": "1Gi"}, "pg2"),
    ]
    reports = store(Clock(), report("n1", reclaimable=lent(2000)))
    for plugin in ("capacity", "proportion"):
        session = opened(
            cluster(*objects), conf("reclaim", ["priority", "gang"], [plugin, "oversubscription"]), reports
        )
        victim, reclaimer = task(session, "be"), task(session, "reclaimer")
        assert session.plugins[plugin].victims(reclaimer, [victim]) == [victim], plugin  # type: ignore[attr-defined]
