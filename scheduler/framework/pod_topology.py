"""Constraints between pods, over topology domains: inter-pod affinity and anti-affinity
(required and preferred, with the existing pods' required anti-affinity held against newcomers
as kube-scheduler does), topology spread constraints (maxSkew, whenUnsatisfiable, minDomains,
nodeAffinityPolicy, nodeTaintsPolicy, matchLabelKeys) and host ports. The `predicates` plugin
filters with them and `nodeorder` scores with them; the state lives here, in the framework, one
per session (`PodTopology.of`), so the two share it without importing each other.

What a pod's terms match is counted per node row: the tasks holding resources on the row
(`CHARGED`: allocated, pipelined, binding, bound, running; not those being evicted), other
schedulers' pods included. A count is built from the node table the first time a term asks for
it and kept current by the session's allocate/deallocate events. A topology domain is a value of
the term's `topologyKey` label (`NodeIndex.domains`): a node without the label is in no domain.

These answers depend on more than a pod's placement class, and the session is told so:

- the pod's namespace and the labels any term in the session selects on (`class_key`): two pods
  that differ there may be refused by different existing pods;
- every node's counts for affinity, spread and preferred terms (`volatile`): a placement in a
  zone changes what every node of the zone, and the spread's minimum, allow. Classes whose pods
  carry such terms are re-evaluated on every node whenever any node changed;
- an existing pod's required anti-affinity forbids its whole domain to the pods it selects: when
  a task carrying one is placed or removed, every node of its domain is marked changed.

Checked against the session's table: a pod being evicted is no longer counted. Preempt and
reclaim first pick candidate nodes on a what-if view whose rows are `assumed_free` (unnamed
victims there may go): on such a row the pods on the row itself do not refuse by required
anti-affinity (the pod's own, or an existing pod's against it) nor by host ports, since evicting
them resolves the conflict, as kube-scheduler's preemption re-runs its filters with the victims
removed; pods on other nodes of the domain still refuse. The action then evicts the blocking pods
of the node it tries first (`blocking`) and asks again about the node as it then is. Affinity and
spread are asked about the session's pods there too (for affinity a pipelined task is placed
again, and checked again, in a later cycle before it binds).

Not supported, and so refused by the session as an unsupported constraint
(`model.hard_constraints`): a term with a non-empty `namespaceSelector` (the scheduler does not
watch namespaces' labels). A malformed term (bad selector, no topology key) refuses the pod with
a message naming the problem.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lahar.api.selectors import (
    LabelOperator,
    LabelRequirement,
    LabelSelector,
    SelectorError,
    label_selector_from_dict,
)
from lahar.scheduler.model import CHARGED, PREFERRED, REQUIRED, TOPOLOGY_SPREAD, NodeTable, TaskInfo, TaskStatus

if TYPE_CHECKING:
    from lahar.scheduler.framework.session import Session

ALL_NAMESPACES: frozenset[str] = frozenset({"*"})
HOSTNAME_KEY = "kubernetes.io/hostname"
MAX_SCORE = 100.0

AFFINITY_MISMATCH = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_MISMATCH = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
SPREAD_MISMATCH = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_KEY = "node(s) didn't match pod topology spread constraints (missing required label)"
PORTS_TAKEN = "node(s) didn't have free ports for the requested pod ports"
_IN, _NOT_IN = LabelOperator.IN, LabelOperator.NOT_IN


class TermError(ValueError):
    """A pod's affinity or spread term Lahar cannot read; the message names it."""


@dataclass(frozen=True)
class Selection:
    """Which pods a term counts: a label selector within some namespaces."""

    selector: LabelSelector
    namespaces: frozenset[str]  # ALL_NAMESPACES: every namespace

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.namespaces is ALL_NAMESPACES or namespace in self.namespaces) and self.selector.matches(labels)

    def keys(self) -> set[str]:
        return {requirement.key for requirement in self.selector.requirements}


@dataclass(frozen=True)
class PodTerm:
    """One pod (anti-)affinity term; `weight` 0 for a required one."""

    selection: Selection
    topology_key: str
    weight: int = 0


@dataclass(frozen=True)
class SpreadConstraint:
    selection: Selection
    topology_key: str
    max_skew: int
    hard: bool  # DoNotSchedule (else ScheduleAnyway)
    min_domains: int
    honor_node_affinity: bool
    honor_taints: bool


@dataclass(frozen=True)
class PodTerms:
    """Everything a pod asks of the pods around it (empty tuples when nothing)."""

    affinity: tuple[PodTerm, ...] = ()
    anti_affinity: tuple[PodTerm, ...] = ()
    preferred_affinity: tuple[PodTerm, ...] = ()
    preferred_anti_affinity: tuple[PodTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[tuple[str, str, int], ...] = ()  # (host IP, protocol, port)
    error: str = ""  # why the pod's terms cannot be read; such a pod fits nowhere

    @property
    def volatile(self) -> bool:
        """Whether the pod's answers move with placements on other nodes than the one changed."""
        return bool(self.affinity or self.preferred_affinity or self.preferred_anti_affinity or self.spread) or any(
            term.topology_key != HOSTNAME_KEY for term in self.anti_affinity
        )

    def selections(self) -> Iterable[Selection]:
        for terms in (self.affinity, self.anti_affinity, self.preferred_affinity, self.preferred_anti_affinity):
            for term in terms:
                yield term.selection
        for constraint in self.spread:
            yield constraint.selection


def _selection(raw: Mapping[str, Any], namespace: str, labels: Mapping[str, str], where: str) -> Selection:
    try:
        selector = label_selector_from_dict(raw.get("labelSelector"))
    except SelectorError as exc:
        raise TermError(f"{where}: {exc}") from None
    extra = []
    for key in raw.get("matchLabelKeys") or ():
        if key in labels:  # kube-scheduler: the pod's own value of the key joins the selector
            extra.append(LabelRequirement(key, _IN, (labels[key],)))
    for key in raw.get("mismatchLabelKeys") or ():
        if key in labels:
            extra.append(LabelRequirement(key, _NOT_IN, (labels[key],)))
    if extra and not selector.matches_nothing:
        selector = LabelSelector((*selector.requirements, *extra))
    names = raw.get("namespaces") or ()
    namespace_selector = raw.get("namespaceSelector")
    if namespace_selector == {}:
        namespaces = ALL_NAMESPACES  # an empty namespace selector: every namespace
    elif names:
        namespaces = frozenset(str(name) for name in names)
    else:
        namespaces = frozenset({namespace})
    return Selection(selector, namespaces)


def _pod_term(raw: Any, namespace: str, labels: Mapping[str, str], where: str, weight: int = 0) -> PodTerm:
    if not isinstance(raw, Mapping):
        raise TermError(f"{where}: must be an object")
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise TermError(f"{where}: topologyKey is required")
    return PodTerm(_selection(raw, namespace, labels, where), key, weight)


def _terms(affinity: Mapping[str, Any], kind: str, namespace: str, labels: Mapping[str, str]) -> tuple[Any, Any]:
    section = affinity.get(kind) or {}
    if not isinstance(section, Mapping):
        raise TermError(f"{kind}: must be an object")
    required = tuple(
        _pod_term(raw, namespace, labels, f"{kind}.{REQUIRED}[{i}]")
        for i, raw in enumerate(section.get(REQUIRED) or ())
    )
    preferred = []
    for i, raw in enumerate(section.get(PREFERRED) or ()):
        where = f"{kind}.{PREFERRED}[{i}]"
        weight = raw.get("weight") if isinstance(raw, Mapping) else None
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise TermError(f"{where}.weight: must be an integer from 1 to 100, not {weight!r}")
        preferred.append(_pod_term(raw.get("podAffinityTerm"), namespace, labels, f"{where}.podAffinityTerm", weight))
    return required, tuple(preferred)


def _spread(raw: Any, namespace: str, labels: Mapping[str, str], where: str) -> SpreadConstraint:
    if not isinstance(raw, Mapping):
        raise TermError(f"{where}: must be an object")
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise TermError(f"{where}: topologyKey is required")
    skew = raw.get("maxSkew")
    if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
        raise TermError(f"{where}.maxSkew: must be an integer of at least 1, not {skew!r}")
    when = raw.get("whenUnsatisfiable", "DoNotSchedule")
    if when not in ("DoNotSchedule", "ScheduleAnyway"):
        raise TermError(f"{where}.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway, not {when!r}")
    min_domains = raw.get("minDomains", 1)
    if not isinstance(min_domains, int) or isinstance(min_domains, bool) or min_domains < 1:
        raise TermError(f"{where}.minDomains: must be an integer of at least 1, not {min_domains!r}")
    if min_domains > 1 and when != "DoNotSchedule":
        raise TermError(f"{where}.minDomains: may only be set with whenUnsatisfiable DoNotSchedule")
    policies = []
    for field, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        value = raw.get(field) or default
        if value not in ("Honor", "Ignore"):
            raise TermError(f"{where}.{field}: must be Honor or Ignore, not {value!r}")
        policies.append(value == "Honor")
    selection = _selection(raw, namespace, labels, where)
    return SpreadConstraint(selection, key, skew, when == "DoNotSchedule", min_domains, policies[0], policies[1])


def _host_ports(spec: Mapping[str, Any]) -> tuple[tuple[str, str, int], ...]:
    ports = []
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        for port in container.get("ports") or ():
            host_port = port.get("hostPort")
            if host_port:
                ports.append((str(port.get("hostIP") or "0.0.0.0"), str(port.get("protocol") or "TCP"), int(host_port)))
    return tuple(sorted(set(ports)))


def pod_terms(task: TaskInfo) -> PodTerms:
    """What the task's pod asks of the pods around it; `error` set when it cannot be read."""
    pod = task.pod
    spec, namespace, labels = pod.spec, task.namespace, pod.meta.labels
    affinity = spec.get("affinity") or {}
    try:
        if not isinstance(affinity, Mapping):
            raise TermError("affinity: must be an object")
        required, preferred = _terms(affinity, "podAffinity", namespace, labels)
        anti, preferred_anti = _terms(affinity, "podAntiAffinity", namespace, labels)
        spread = tuple(
            _spread(raw, namespace, labels, f"{TOPOLOGY_SPREAD}[{i}]")
            for i, raw in enumerate(spec.get(TOPOLOGY_SPREAD) or ())
        )
        ports = _host_ports(spec)
    except (TermError, TypeError, ValueError, AttributeError) as exc:
        return PodTerms(error=str(exc) if isinstance(exc, TermError) else f"unreadable: {exc}")
    return PodTerms(required, anti, preferred, preferred_anti, spread, ports)


EMPTY = PodTerms()
Counts = np.ndarray  # per node row: how many charged tasks a selection matches
PortKey = tuple[str, int]  # (protocol, port)


class PodTopology:
    """The session's view of pods by topology domain (see the module docstring); one per
    session, made by the first plugin that asks (`PodTopology.of`)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.nodes: NodeTable = session.nodes
        self.index = session.node_index
        self._terms: dict[str, PodTerms] = {}  # by task uid
        self._counts: dict[Selection, Counts] = {}
        self._ports: dict[PortKey, dict[str, Counts]] | None = None
        # The existing pods' required anti-affinity terms: how many pods carry each, per row.
        self._carriers: dict[PodTerm, Counts] = {}
        keys: set[str] = set()
        self.pending_terms = False
        for job in session.jobs.values():
            for task in job.by_status.get(TaskStatus.PENDING, {}).values():
                if task.pod_terms:
                    self.pending_terms = True
                    for selection in self.terms(task).selections():
                        keys |= selection.keys()
        for row, tasks in enumerate(self.nodes.tasks):
            for task in tasks.values():
                if task.pod_terms and task.status in CHARGED:
                    for term in self.terms(task).anti_affinity:
                        self._carry(term, row, 1)
                        keys |= term.selection.keys()
        self.label_keys = tuple(sorted(keys))
        # Nothing in the session asks about other pods: no handler, no key, no cost per placement.
        self.active = self.pending_terms or bool(self._carriers)
        if self.active:
            session.add_event_handler(self._allocated, self._deallocated)
            session.add_class_key_fn(self.class_key, self.volatile)

    @classmethod
    def of(cls, session: Session) -> PodTopology:
        return session.pod_topology

    # -- what a task asks ---------------------------------------------------------------------

    def terms(self, task: TaskInfo) -> PodTerms:
        if not task.pod_terms:
            return EMPTY
        found = self._terms.get(task.uid)
        if found is None:
            found = self._terms[task.uid] = pod_terms(task)
        return found

    def class_key(self, task: TaskInfo) -> Hashable:
        """What beyond its placement class a task's answers depend on: its namespace and the
        labels the session's terms select on (the task's own terms, existing pods' anti-affinity)."""
        labels = task.pod.meta.labels
        return (task.namespace, *(labels.get(key) for key in self.label_keys))

    def volatile(self, task: TaskInfo) -> bool:
        return self.terms(task).volatile

    # -- counts, kept current -----------------------------------------------------------------

    def count(self, selection: Selection) -> Counts:
        """Per row, the charged tasks `selection` matches (built on first use, then followed)."""
        counts = self._counts.get(selection)
        if counts is None:
            counts = np.zeros(len(self.nodes), dtype=np.int64)
            for row, tasks in enumerate(self.nodes.tasks):
                counts[row] = sum(
                    1
                    for task in tasks.values()
                    if task.status in CHARGED and selection.matches(task.namespace, task.pod.meta.labels)
                )
            self._counts[selection] = counts
        return counts

    def _carry(self, term: PodTerm, row: int, sign: int) -> None:
        carriers = self._carriers.get(term)
        if carriers is None:
            carriers = self._carriers[term] = np.zeros(len(self.nodes), dtype=np.int64)
        carriers[row] += sign

    def ports(self) -> dict[PortKey, dict[str, Counts]]:
        """(protocol, port) -> host IP -> per row, how many charged tasks hold it."""
        if self._ports is None:
            self._ports = {}
            for row, tasks in enumerate(self.nodes.tasks):
                for task in tasks.values():
                    if task.pod_terms and task.status in CHARGED:
                        self._hold_ports(task, row, 1)
        return self._ports

    def _hold_ports(self, task: TaskInfo, row: int, sign: int) -> None:
        assert self._ports is not None
        for ip, protocol, port in self.terms(task).host_ports:
            by_ip = self._ports.setdefault((protocol, port), {})
            held = by_ip.get(ip)
            if held is None:
                held = by_ip[ip] = np.zeros(len(self.nodes), dtype=np.int64)
            held[row] += sign

    def _moved(self, task: TaskInfo, sign: int) -> None:
        row = self.session.row_of(task)
        if row is None:
            return
        labels = task.pod.meta.labels
        for selection, counts in self._counts.items():
            if selection.matches(task.namespace, labels):
                counts[row] += sign
        if not task.pod_terms:
            return
        terms = self.terms(task)
        if self._ports is not None and terms.host_ports:
            self._hold_ports(task, row, sign)
        for term in terms.anti_affinity:
            self._carry(term, row, sign)
            # The whole domain is now forbidden (or allowed again) to the pods the term selects.
            codes = self.index.domains(term.topology_key)
            if codes[row] >= 0 and term.topology_key != HOSTNAME_KEY:
                for other in np.flatnonzero(codes == codes[row]):
                    if other != row:
                        self.session.node_changed(int(other))

    def _allocated(self, task: TaskInfo) -> None:
        self._moved(task, 1)

    def _deallocated(self, task: TaskInfo) -> None:
        self._moved(task, -1)

    # -- domains ------------------------------------------------------------------------------

    def in_domain(self, counts: Counts, key: str, eligible: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the sum of `counts` over the row's domain of `key` (over `eligible` rows
        only, when given), and which rows have the key at all."""
        codes = self.index.domains(key)
        present = codes >= 0
        counted = present if eligible is None else present & eligible
        sums = np.bincount(codes[counted], weights=counts[counted], minlength=int(codes.max(initial=-1)) + 1)
        return np.where(present, sums[np.maximum(codes, 0)] if len(sums) else 0, 0), present

    # -- the filter ---------------------------------------------------------------------------

    def feasible(
        self, task: TaskInfo, affinity: bool, spread: bool, ports: bool, evictable: np.ndarray | None = None
    ) -> tuple[np.ndarray, Counter[str]]:
        """Which rows the task may go to by its pod terms, and per reason how many rows fail (the
        first failing check of each row, kube-scheduler's wording). On the `evictable` rows (a
        what-if view's `assumed_free`) the row's own pods may all be evicted: they do not refuse
        by anti-affinity or host ports (module docstring)."""
        size = len(self.nodes)
        ok = np.ones(size, dtype=bool)
        reasons: Counter[str] = Counter()
        terms = self.terms(task)
        if terms.error:
            reasons[f"pod's constraints are malformed ({terms.error})"] = size
            return np.zeros(size, dtype=bool), reasons

        def refuse(failed: np.ndarray, reason: str) -> None:
            count = int((ok & failed).sum())
            if count:
                reasons[reason] += count
            ok[failed] = False

        def elsewhere(counts: Counts, key: str) -> tuple[np.ndarray, np.ndarray]:
            """Per row, the count over its domain (less the row's own on evictable rows)."""
            within, present = self.in_domain(counts, key)
            return (within if evictable is None else within - np.where(evictable, counts, 0)), present

        if ports and terms.host_ports:
            taken = self._ports_taken(terms.host_ports)
            refuse(taken if evictable is None else taken & ~evictable, PORTS_TAKEN)
        if affinity:
            labels = task.pod.meta.labels
            for term, carriers in self._carriers.items():
                if carriers.any() and term.selection.matches(task.namespace, labels):
                    within, present = elsewhere(carriers, term.topology_key)
                    refuse(present & (within > 0), EXISTING_ANTI_AFFINITY)
            for term in terms.anti_affinity:
                within, present = elsewhere(self.count(term.selection), term.topology_key)
                refuse(present & (within > 0), ANTI_AFFINITY_MISMATCH)
            if terms.affinity and not self._first_of_its_kind(task, terms):
                for term in terms.affinity:
                    within, _ = self.in_domain(self.count(term.selection), term.topology_key)
                    refuse(within == 0, AFFINITY_MISMATCH)
        if spread:
            for constraint in terms.spread:
                if constraint.hard:
                    missing, skewed = self._spread_refused(task, constraint)
                    refuse(missing, SPREAD_MISSING_KEY)
                    refuse(skewed, SPREAD_MISMATCH)
        return ok, reasons

    def blocking(self, task: TaskInfo, row: int, anti_affinity: bool, ports: bool) -> set[str]:
        """The uids of the charged tasks on `row` whose presence there refuses `task` by required
        anti-affinity, either way (when `anti_affinity` is enforced), or by a host port (when
        `ports` is): the victims that must go for the task to fit on the row, whatever
        resources they free."""
        if not self.active:
            return set()
        terms = self.terms(task)
        own = terms.anti_affinity if anti_affinity else ()
        in_domain = [self.index.domains(term.topology_key)[row] >= 0 for term in own]
        labels = task.pod.meta.labels
        found = set()
        for other in self.nodes.tasks[row].values():
            if other.status not in CHARGED:
                continue
            if any(
                present and term.selection.matches(other.namespace, other.pod.meta.labels)
                for term, present in zip(own, in_domain, strict=True)
            ):
                found.add(other.uid)
            elif other.pod_terms:
                theirs = self.terms(other)
                if (
                    anti_affinity
                    and any(
                        self.index.domains(term.topology_key)[row] >= 0
                        and term.selection.matches(task.namespace, labels)
                        for term in theirs.anti_affinity
                    )
                ) or (ports and _ports_clash(terms.host_ports, theirs.host_ports)):
                    found.add(other.uid)
        return found

    def _first_of_its_kind(self, task: TaskInfo, terms: PodTerms) -> bool:
        """kube-scheduler's exception: no pod anywhere matches the pod's affinity terms and the
        pod matches them all itself (the first pod of a group that wants to be together)."""
        labels = task.pod.meta.labels
        return all(
            not self.count(term.selection).any() and term.selection.matches(task.namespace, labels)
            for term in terms.affinity
        )

    def _ports_taken(self, wanted: tuple[tuple[str, str, int], ...]) -> np.ndarray:
        taken = np.zeros(len(self.nodes), dtype=bool)
        held = self.ports()
        for ip, protocol, port in wanted:
            for other_ip, counts in held.get((protocol, port), {}).items():
                if _same_address(ip, other_ip):
                    taken |= counts > 0
        return taken

    def _eligible(self, task: TaskInfo, constraint: SpreadConstraint) -> np.ndarray | None:
        """The nodes whose pods a spread counts (nodeAffinityPolicy, nodeTaintsPolicy); None: all."""
        eligible: np.ndarray | None = None
        if constraint.honor_node_affinity:
            eligible = self.index.required(task.pod)
        if constraint.honor_taints:
            untolerated = self.index.untolerated(task.pod, frozenset({"NoSchedule", "NoExecute"}))
            if untolerated is not None:
                eligible = (untolerated == 0) if eligible is None else eligible & (untolerated == 0)
        return eligible

    def _skews(self, task: TaskInfo, constraint: SpreadConstraint) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the skew the pod would make there (count in its domain + itself − the
        smallest domain's count), and which rows have the key."""
        eligible = self._eligible(task, constraint)
        within, present = self.in_domain(self.count(constraint.selection), constraint.topology_key, eligible)
        codes = self.index.domains(constraint.topology_key)
        counted = present if eligible is None else present & eligible
        domains = np.unique(codes[counted])
        if len(domains) < constraint.min_domains or not len(domains):
            minimum = 0
        else:
            sums = np.bincount(codes[counted], weights=self.count(constraint.selection)[counted])
            minimum = int(sums[domains].min())
        itself = int(constraint.selection.matches(task.namespace, task.pod.meta.labels))
        return within + itself - minimum, present

    def _spread_refused(self, task: TaskInfo, constraint: SpreadConstraint) -> tuple[np.ndarray, np.ndarray]:
        skews, present = self._skews(task, constraint)
        return ~present, present & (skews > constraint.max_skew)

    # -- the scores ---------------------------------------------------------------------------

    def affinity_score(self, task: TaskInfo) -> np.ndarray | None:
        """Preferred pod (anti-)affinity, 0–100 per row (None when the pod has none): the summed
        weights of the matching pods in each row's domains, affinity up and anti-affinity down,
        scaled between the lowest and the highest row as kube-scheduler normalises."""
        terms = self.terms(task)
        if not (terms.preferred_affinity or terms.preferred_anti_affinity):
            return None
        raw = np.zeros(len(self.nodes), dtype=np.float64)
        for sign, group in ((1.0, terms.preferred_affinity), (-1.0, terms.preferred_anti_affinity)):
            for term in group:
                within, _ = self.in_domain(self.count(term.selection), term.topology_key)
                raw += sign * term.weight * within
        return _normalised(raw)

    def spread_score(self, task: TaskInfo) -> np.ndarray | None:
        """ScheduleAnyway spread constraints, 0–100 per row (None when the pod has none): fewer
        matching pods in the row's domains score higher; a row without a key scores 0."""
        soft = [constraint for constraint in self.terms(task).spread if not constraint.hard]
        if not soft:
            return None
        raw = np.zeros(len(self.nodes), dtype=np.float64)
        missing = np.zeros(len(self.nodes), dtype=bool)
        for constraint in soft:
            skews, present = self._skews(task, constraint)
            raw += skews
            missing |= ~present
        score = MAX_SCORE - _normalised(raw)
        score[missing] = 0.0
        return score


def _same_address(ip: str, other_ip: str) -> bool:
    """Whether two host IPs of one (protocol, port) clash (0.0.0.0 clashes with every address)."""
    return ip == other_ip or "0.0.0.0" in (ip, other_ip)


def _ports_clash(wanted: tuple[tuple[str, str, int], ...], held: tuple[tuple[str, str, int], ...]) -> bool:
    return any(
        (protocol, port) == (other_protocol, other_port) and _same_address(ip, other_ip)
        for ip, protocol, port in wanted
        for other_ip, other_protocol, other_port in held
    )


def _normalised(raw: np.ndarray) -> np.ndarray:
    if not len(raw):
        return raw
    low, high = raw.min(), raw.max()
    if high <= low:
        return np.zeros_like(raw)
    return (raw - low) * (MAX_SCORE / (high - low))
