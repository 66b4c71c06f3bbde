"""Room freed for a preemptor stays reserved for it while its victims terminate (the nominated
node, `Session.reserve_nominated`): in `lahar bench peers`'s preemption shape, with victims that
vanish over several cycles, the high-priority gangs evict exactly the room they need. Without
the reservation, an earlier gang bound on room a later gang's victims freed and the later gang
evicted a second round."""

from __future__ import annotations

from lahar.bench import peers
from lahar.bench.scheduler import InProcess, node_dict, priority_class_dict
from lahar.scheduler.conf import parse_conf


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
