"""Room freed for a preemptor stays reserved for it while its victims terminate (the nominated
node, `Session.reserve_nominated`): in `lahar bench peers`'s preemption shape, with victims that
vanish over several cycles, the high-priority gangs evict exactly the room they need. Without
the reservation, an earlier gang bound on room a later gang's victims freed and the later gang
evicted a second round."""

from __future__ import annotations

from typing import Any

from lahar.bench import peers
from lahar.bench.scheduler import InProcess, node_dict, priority_class_dict
from lahar.scheduler.cache import Cache
from lahar.scheduler.conf import parse_conf
from lahar.scheduler.framework.session import open_session
from lahar.scheduler.model import NodeTable
from tests.scheduler.test_cache import a_pod, node, podgroup


def test_a_preemption_wave_evicts_only_what_it_needs_while_victims_terminate() -> None:
    workload = peers.preemption("lahar", 0.04)  # 20 nodes of 4 cpu, 80 low pods, 2 gangs of 20
    sim = InProcess(parse_conf(peers.lahar_conf("preemption")))
    for name, value in workload.priority_classes.items():
        sim.cache.add_priority_class(priority_class_dict(name, value))
    shape = workload.nodes
    for i in range(shape.count):
        sim.add_node(node_dict(f"n{i}", cpu=shape.cpu, memory=shape.memory, pods=str(shape.pods)))

    def feed(index: int) -> list[str]:
        wave = workload.waves[index]
        for group in wave.podgroups:
            sim.add_podgroup(group)
        for pod in wave.pods:
            pod["spec"]["priority"] = workload.priority_classes[pod["spec"]["priorityClassName"]]
            sim.add_pod(pod)
        return [pod["metadata"]["name"] for pod in wave.pods]

    fill = feed(0)
    for _ in range(3):
        sim.cycle()
    assert len(sim.bound) == len(fill)
    idle_cpu = shape.count * int(shape.cpu) - len(fill)
    high = set(feed(1))
    # Victims terminate slowly: each cycle only the most recently evicted half of them go, so
    # the last gang's victims free their room before the first gang's do.
    delete, terminating = sim.delete_pod, []
    sim.delete_pod = terminating.append  # type: ignore[method-assign]
    evicted = 0
    for _ in range(30):
        evicted += len(sim.cycle().evicted)
        gone = max(1, len(terminating) // 2) if terminating else 0
        for key in terminating[-gone:]:
            delete(key)
        del terminating[-gone:]
        if not terminating and sum(1 for key in sim.bound if key.split("/")[1] in high) == len(high):
            break
    assert sum(1 for key in sim.bound if key.split("/")[1] in high) == len(high)
    assert evicted == len(high) - idle_cpu


def test_nominated_tasks_that_fit_together_are_reserved_without_a_fit_per_task(monkeypatch: Any) -> None:
    """Each cycle asks again of every nominated task whether its node still holds it: a node
    whose nominated tasks fit together on its future state takes them all on one vector check;
    only on a node that cannot hold them all is each asked in turn (the first that fit stay)."""
    cache = Cache()
    cache.add_node(node("roomy", cpu="4"))
    cache.add_node(node("tight", cpu="2"))
    cache.add_podgroup(podgroup("g", 6))
    for i in range(6):
        cache.add_pod(a_pod(f"g-{i}", group="g"))
    lined_up = []
    for i, task in enumerate(sorted(cache.snapshot().jobs["default/g"].tasks.values(), key=lambda t: t.name)):
        task = task.clone()
        task.node = "roomy" if i < 3 else "tight"
        lined_up.append(task)
    cache.nominate(lined_up)
    asked: list[int] = []
    fits = NodeTable.fits

    def counted(self: NodeTable, task: Any, rows: Any = slice(None), *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("future"):
            asked.append(1)
        return fits(self, task, rows, *args, **kwargs)

    monkeypatch.setattr(NodeTable, "fits", counted)
    session = open_session(cache.snapshot(), parse_conf(peers.lahar_conf("preemption")))
    on = {session.nodes.names[row] for row in session.reserved.values()}
    assert on == {"roomy", "tight"}
    assert sorted(uid for uid, row in session.reserved.items() if session.nodes.names[row] == "roomy") == [
        "uid-g-0",
        "uid-g-1",
        "uid-g-2",
    ]
    assert sorted(uid for uid, row in session.reserved.items() if session.nodes.names[row] == "tight") == [
        "uid-g-3",
        "uid-g-4",
    ]
    assert len(asked) == 3  # the tight node's three, in turn; none for the roomy node's
