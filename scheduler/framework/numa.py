"""The kubelet's Topology Manager as the scheduler predicts it (Volcano's numa-aware policies and
CPU hint provider): plain functions of a node's CPU layout and what is free on it.

- A hint provider says, per resource, which sets of NUMA nodes could serve a container
  (`TopologyHint`: an affinity and whether it is one of the narrowest possible); `cpu_hints` is
  the CPU Manager's, `amount_hints` the same rule over amounts per NUMA node.
- `admit(policy, numa_nodes, providers_hints)` merges the providers' hints (every combination,
  ANDed; preferred only where all parts are; the narrowest wins) and says whether the policy
  admits the container: `none` and `best-effort` always, `restricted` when the merged hint is
  preferred, `single-numa-node` when a preferred hint of one NUMA node exists for every resource.
- `allocate_cpus` picks the CPUs the static CPU Manager would pin for the admitted hint
  (`take_by_topology`: whole sockets, then whole cores, then single threads close to those).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from lahar.api.numatopology import BEST_EFFORT, NONE, RESTRICTED, SINGLE_NUMA_NODE, CpuInfo

Affinity = frozenset[int]


@dataclass(frozen=True, slots=True)
class TopologyHint:
    affinity: Affinity | None  # None: any NUMA node will do
    preferred: bool


ProviderHints = Mapping[str, Sequence[TopologyHint] | None]  # by resource; None: no preference


def _mask(affinity: Affinity) -> int:
    return sum(1 << node for node in affinity)


def _narrower(a: Affinity, b: Affinity) -> bool:
    """The kubelet's BitMask.IsNarrowerThan: fewer NUMA nodes, or as many with lower IDs."""
    return (len(a), _mask(a)) < (len(b), _mask(b))


def affinities(numa_nodes: Iterable[int]) -> list[Affinity]:
    """Every non-empty set of the NUMA nodes, smallest first, each size in lexicographic order
    (the kubelet's bitmask.IterateBitMasks)."""
    nodes = sorted(numa_nodes)
    return [frozenset(combo) for size in range(1, len(nodes) + 1) for combo in itertools.combinations(nodes, size)]


def amount_hints(size: Mapping[int, int], free: Mapping[int, int], request: int) -> list[TopologyHint]:
    """The CPU Manager's hints for `request` over amounts per NUMA node: every set of NUMA nodes
    whose free amount covers it, preferred where the set is as small as the smallest set whose
    size (free or not) could cover it."""
    narrowest = len(size)
    fitting = []
    for affinity in affinities(size):
        if sum(size[n] for n in affinity) >= request:
            narrowest = min(narrowest, len(affinity))
        if sum(free.get(n, 0) for n in affinity) >= request:
            fitting.append(affinity)
    return [TopologyHint(affinity, len(affinity) == narrowest) for affinity in fitting]


def filter_provider_hints(providers_hints: Sequence[ProviderHints]) -> list[list[TopologyHint]]:
    """One list of hints per provider and resource: a provider with no hints at all, or None for a
    resource, means any NUMA node (preferred); an empty list means no NUMA node can serve it."""
    result: list[list[TopologyHint]] = []
    for hints in providers_hints:
        if not hints:
            result.append([TopologyHint(None, True)])
            continue
        for resource_hints in hints.values():
            if resource_hints is None:
                result.append([TopologyHint(None, True)])
            elif not resource_hints:
                result.append([TopologyHint(None, False)])
            else:
                result.append(list(resource_hints))
    return result


def merge_hints(numa_nodes: Collection[int], filtered: Sequence[Sequence[TopologyHint]]) -> TopologyHint:
    """The best of every combination of one hint per list: affinities ANDed (any = all NUMA
    nodes), preferred only if every part is; a preferred one beats any other, then the narrowest.
    With no non-empty combination: all NUMA nodes, not preferred."""
    everything = frozenset(numa_nodes)
    best = TopologyHint(everything, False)
    for combination in itertools.product(*filtered):
        merged = everything
        for hint in combination:
            merged = merged & (everything if hint.affinity is None else hint.affinity)
        if not merged:
            continue
        preferred = all(hint.preferred for hint in combination)
        assert best.affinity is not None
        if (preferred and not best.preferred) or (preferred == best.preferred and _narrower(merged, best.affinity)):
            best = TopologyHint(merged, preferred)
    return best


def _single_numa_only(filtered: Sequence[Sequence[TopologyHint]]) -> list[list[TopologyHint]]:
    return [[h for h in hints if h.preferred and (h.affinity is None or len(h.affinity) == 1)] for hints in filtered]


def admit(
    policy: str, numa_nodes: Collection[int], providers_hints: Sequence[ProviderHints]
) -> tuple[TopologyHint, bool]:
    """The merged hint for a container and whether `policy` admits it (the kubelet refuses the
    pod with a TopologyAffinityError otherwise). `none` merges nothing."""
    if policy == NONE:
        return TopologyHint(None, False), True
    filtered = filter_provider_hints(providers_hints)
    if policy == SINGLE_NUMA_NODE:
        filtered = _single_numa_only(filtered)
    best = merge_hints(numa_nodes, filtered)
    if policy == BEST_EFFORT:
        return best, True
    if policy in (RESTRICTED, SINGLE_NUMA_NODE):
        return best, best.preferred
    raise ValueError(f"unknown Topology Manager policy {policy!r}")


# -- the CPU Manager's static policy ------------------------------------------------------------


def whole_cpus(milli_cpu: int) -> int:
    """The CPUs a container gets pinned: its request when a whole number, else 0 (shared pool)."""
    return milli_cpu // 1000 if milli_cpu > 0 and milli_cpu % 1000 == 0 else 0


def cpu_hints(cpus: Mapping[int, CpuInfo], available: Collection[int], request: int) -> list[TopologyHint]:
    """The CPU Manager's hints for `request` whole CPUs out of `available`."""
    size: dict[int, int] = {}
    free: dict[int, int] = {}
    for cpu, info in cpus.items():
        size[info.numa] = size.get(info.numa, 0) + 1
        free[info.numa] = free.get(info.numa, 0) + (cpu in available)
    return amount_hints(size, free, request)


class _Accumulator:
    """kubelet's cpuAccumulator: the CPUs taken so far and those still free."""

    def __init__(self, cpus: Mapping[int, CpuInfo], available: Collection[int], needed: int) -> None:
        self.cpus = cpus
        self.free = {cpu for cpu in available if cpu in cpus}
        self.needed = needed
        self.taken: set[int] = set()
        sockets = {info.socket for info in cpus.values()}
        cores = {(info.socket, info.core) for info in cpus.values()}
        self.per_socket = len(cpus) // max(len(sockets), 1)
        self.per_core = len(cpus) // max(len(cores), 1)

    def take(self, cpus: Iterable[int]) -> None:
        chosen = set(cpus)
        self.taken |= chosen
        self.free -= chosen
        self.needed -= len(chosen)

    def free_sockets(self) -> list[set[int]]:
        """Sockets all of whose CPUs are free, by socket ID."""
        sockets: dict[int, set[int]] = {}
        for cpu, info in self.cpus.items():
            sockets.setdefault(info.socket, set()).add(cpu)
        return [sockets[s] for s in sorted(sockets) if sockets[s] <= self.free]

    def free_cores(self) -> list[set[int]]:
        """Cores all of whose CPUs are free: sockets with fewer free whole cores first, then by
        socket and core ID (the kubelet's order)."""
        cores: dict[tuple[int, int], set[int]] = {}
        for cpu, info in self.cpus.items():
            cores.setdefault((info.socket, info.core), set()).add(cpu)
        whole = [key for key in cores if cores[key] <= self.free]
        per_socket = {socket: sum(1 for s, _ in whole if s == socket) for socket, _ in whole}
        return [cores[key] for key in sorted(whole, key=lambda key: (per_socket[key[0]], key))]

    def free_threads(self) -> list[int]:
        """Free CPUs, core by core: cores on sockets holding more of what was taken first, then on
        sockets with fewer free CPUs, cores with fewer free CPUs, by socket and core ID."""
        socket_of = {cpu: info.socket for cpu, info in self.cpus.items()}
        taken_on = {s: sum(1 for c in self.taken if socket_of[c] == s) for s in set(socket_of.values())}
        free_on = {s: sum(1 for c in self.free if socket_of[c] == s) for s in set(socket_of.values())}
        cores: dict[tuple[int, int], list[int]] = {}
        for cpu in sorted(self.free):
            info = self.cpus[cpu]
            cores.setdefault((info.socket, info.core), []).append(cpu)
        order = sorted(cores, key=lambda k: (-taken_on[k[0]], free_on[k[0]], len(cores[k]), k))
        return [cpu for key in order for cpu in cores[key]]


def take_by_topology(cpus: Mapping[int, CpuInfo], available: Collection[int], count: int) -> frozenset[int] | None:
    """`count` CPUs of `available` as the static CPU Manager picks them (best fit by topology),
    None when there are not that many."""
    acc = _Accumulator(cpus, available, count)
    if acc.needed < 1:
        return frozenset()
    if acc.needed > len(acc.free):
        return None
    for unit, free_units in ((acc.per_socket, acc.free_sockets), (acc.per_core, acc.free_cores)):
        if unit and acc.needed >= unit:
            for members in free_units():
                acc.take(members)
                if acc.needed < 1:
                    return frozenset(acc.taken)
                if acc.needed < unit:
                    break
    for cpu in acc.free_threads():
        acc.take((cpu,))
        if acc.needed < 1:
            return frozenset(acc.taken)
    return None


def reserved_cpus(cpus: Mapping[int, CpuInfo], reserved: int) -> frozenset[int]:
    """The CPUs the kubelet keeps for itself: `reserved` of them, picked as a container's."""
    return take_by_topology(cpus, cpus.keys(), reserved) or frozenset() if reserved else frozenset()


def allocate_cpus(
    cpus: Mapping[int, CpuInfo], available: Collection[int], request: int, hint: TopologyHint
) -> frozenset[int]:
    """The CPUs pinned for a container admitted with `hint`: as many as it can get from the
    hint's NUMA nodes, the rest from anywhere; empty when `available` cannot give `request`."""
    aligned: frozenset[int] = frozenset()
    if hint.affinity is not None:
        on_hint = [cpu for cpu in available if cpu in cpus and cpus[cpu].numa in hint.affinity]
        aligned = take_by_topology(cpus, on_hint, min(request, len(on_hint))) or frozenset()
        if len(aligned) != min(request, len(on_hint)):
            return frozenset()
    rest = take_by_topology(cpus, [cpu for cpu in available if cpu not in aligned], request - len(aligned))
    return frozenset() if rest is None else aligned | rest


def numa_nodes_of(cpus: Mapping[int, CpuInfo], chosen: Iterable[int]) -> int:
    """How many NUMA nodes the chosen CPUs span."""
    return len({cpus[cpu].numa for cpu in chosen})
