"""LC exclusive cores: best-effort pods never run on cores latency-critical pods hold alone.

The cores an LC pod holds come from kubelet's static CPU manager checkpoint (its containers'
`entries`) and from its containers' own cpusets when they are narrower than the node's (pinned by
kubelet or anyone else); the engine gathers both into `QosContainer.exclusive_cpus`. BE cgroups
get `cpuset.cpus` = the node's CPUs minus those. With the static policy, BE may also use only
kubelet's shared pool (`defaultCpuSet`), and only BE *container* cgroups are written: kubelet
rewrites container cpusets from its checkpoint and would fail against a narrower pod or QoS
directory above them (Koordinator issues 546/556). Without it, the BestEffort directory, each BE
pod and each of its containers are written, so new containers inherit the set; the executor
loosens parents first and tightens children first, as v1 requires.

Trade-off: if LC pods hold every core, BE is left where it is rather than given an empty set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lahar.agent.qos.model import Desired, NodeState, Plan, QosPod, Strategy
from lahar.api.qos import QoSClass

NAME = "lc_cores"
UPDATE, NO_CORES_LEFT = "update", "no_cores_left"  # its actions (lahar_qos_actions_total)
DEFAULT_CPU_MANAGER_STATE = "/var/lib/kubelet/cpu_manager_state"


@dataclass(frozen=True)
class LcCoresConfig:
    enabled: bool = True
    # kubelet's checkpoint, under the agent's --root; absent: no static CPU manager.
    cpu_manager_state_file: str = DEFAULT_CPU_MANAGER_STATE


def _static(node: NodeState) -> bool:
    return node.cpu_manager is not None and node.cpu_manager.static


def _allowed(node: NodeState) -> frozenset[int]:
    """Where BE may run before LC cores are taken out: the node, or kubelet's shared pool."""
    if _static(node) and node.cpu_manager is not None and node.cpu_manager.default_cpus:
        return node.cpus & node.cpu_manager.default_cpus
    return node.cpus


def _targets(node: NodeState, pods: Sequence[QosPod]) -> list[str]:
    best_effort = [p for p in pods if p.qos is QoSClass.BE]
    containers = [c.cgroup for p in best_effort for c in p.containers]
    if _static(node):
        return containers
    return [node.be_dir, *(p.cgroup for p in best_effort), *containers]


def plan(node: NodeState, pods: Sequence[QosPod], config: LcCoresConfig, previous: Plan | None) -> Plan:
    held = frozenset().union(*(p.exclusive_cpus for p in pods if p.qos is QoSClass.LC))
    be_cpus = _allowed(node) - held
    figures = {"lc_exclusive_cpus": float(len(held)), "be_cpuset_cpus": float(len(be_cpus))}
    if not node.has("cpuset.cpus"):
        return Plan(figures=figures)
    if not be_cpus:
        return Plan(figures=figures, actions=(NO_CORES_LEFT,))
    if not held and previous is not None and not previous.memo.get("narrowed"):
        return Plan(figures=figures, memo=previous.memo)  # nothing to keep BE off: leave kubelet's cpusets be
    # Written when LC cores are held, and once more after they are not (also on the first plan:
    # an agent that stopped without relaxing may have left BE narrowed).
    changed = previous is None or previous.memo["be_cpus"] != be_cpus
    return Plan(
        tuple(Desired(target, "cpuset.cpus", be_cpus) for target in _targets(node, pods)),
        figures,
        {"be_cpus": be_cpus, "narrowed": bool(held)},
        (UPDATE,) if changed else (),
    )


def relax(node: NodeState, pods: Sequence[QosPod], config: LcCoresConfig, previous: Plan | None) -> list[Desired]:
    if not node.has("cpuset.cpus") or previous is None or not previous.memo.get("narrowed"):
        return []
    return [Desired(target, "cpuset.cpus", _allowed(node)) for target in _targets(node, pods)]


STRATEGY = Strategy(NAME, LcCoresConfig, plan, relax, (UPDATE, NO_CORES_LEFT))
