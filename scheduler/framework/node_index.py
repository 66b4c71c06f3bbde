"""Per-session node indexes the node-filtering and node-ordering plugins share: label values as
integer codes per key and the rows carrying each taint, built once per session (labels and taints
do not change within one). In the framework, so plugins share it without importing each other."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lahar.api.node import Taint
from lahar.api.pod import Pod
from lahar.scheduler.model import NodeTable

if TYPE_CHECKING:
    from lahar.scheduler.framework.session import Session

NODE_NAME_FIELD = "metadata.name"  # the one field a node selector term may match


def _integer(value: str | None) -> float:
    try:
        return float(int(value)) if value is not None else np.nan
    except ValueError:
        return np.nan


class NodeIndex:
    """Per-session indexes over the nodes' labels and taints (they do not change within a
    session), so a selector or toleration check over every node is a few array operations.
    Shared by the plugins of a session through `NodeIndex.of(session)`."""

    def __init__(self, nodes: NodeTable) -> None:
        self._labels = nodes.labels
        self._taints = nodes.taints
        self._row = nodes.index
        self.size = len(nodes)
        self._codes: dict[str, tuple[np.ndarray, dict[str, int]]] = {}
        self._numbers: dict[str, np.ndarray] = {}
        self._taint_rows: dict[Taint, np.ndarray] | None = None

    @classmethod
    def of(cls, session: Session) -> NodeIndex:
        return session.node_index

    # -- labels ------------------------------------------------------------------------------

    def _column(self, key: str) -> tuple[np.ndarray, dict[str, int]]:
        """Each node's value of label `key` as a code (-1 where absent), and the codes."""
        column = self._codes.get(key)
        if column is None:
            table: dict[str, int] = {}
            codes = np.fromiter(
                (
                    -1 if (value := labels.get(key)) is None else table.setdefault(value, len(table))
                    for labels in self._labels
                ),
                dtype=np.int32,
                count=self.size,
            )
            column = self._codes[key] = (codes, table)
        return column

    def domains(self, key: str) -> np.ndarray:
        """Each node's topology domain for label `key`: an integer code per distinct value, -1
        where the node has no such label (pod affinity and topology spread count per domain)."""
        return self._column(key)[0]

    def has(self, key: str) -> np.ndarray:
        return self._column(key)[0] >= 0

    def among(self, key: str, values: Iterable[str]) -> np.ndarray:
        codes, table = self._column(key)
        wanted = [table[value] for value in values if value in table]
        if len(wanted) == 1:
            return codes == wanted[0]
        return np.isin(codes, wanted) if wanted else np.zeros(self.size, dtype=bool)

    def _number(self, key: str) -> np.ndarray:
        numbers = self._numbers.get(key)
        if numbers is None:
            numbers = self._numbers[key] = np.array(
                [_integer(labels.get(key)) for labels in self._labels], dtype=np.float64
            ).reshape(self.size)
        return numbers

    def selector(self, selector: Mapping[str, str]) -> np.ndarray:
        mask = np.ones(self.size, dtype=bool)
        for key, value in selector.items():
            mask &= self.among(key, (value,))
        return mask

    def _expression(self, expression: Mapping[str, Any]) -> np.ndarray:
        key, operator = expression.get("key", ""), expression.get("operator")
        values: Sequence[str] = expression.get("values") or ()
        if operator == "In":
            return self.among(key, values)
        if operator == "NotIn":
            return ~self.among(key, values)
        if operator == "Exists":
            return self.has(key)
        if operator == "DoesNotExist":
            return ~self.has(key)
        if operator in ("Gt", "Lt") and len(values) == 1 and not np.isnan(bound := _integer(values[0])):
            with np.errstate(invalid="ignore"):  # absent or non-integer labels match neither
                numbers = self._number(key)
                return numbers > bound if operator == "Gt" else numbers < bound
        return np.zeros(self.size, dtype=bool)  # an operator Kubernetes would refuse matches nothing

    def _field(self, expression: Mapping[str, Any]) -> np.ndarray:
        mask = np.zeros(self.size, dtype=bool)
        if expression.get("key") != NODE_NAME_FIELD or expression.get("operator") not in ("In", "NotIn"):
            return mask
        rows = [self._row[name] for name in expression.get("values") or () if name in self._row]
        mask[rows] = True
        return mask if expression["operator"] == "In" else ~mask

    def term(self, term: Mapping[str, Any]) -> np.ndarray:
        """A node selector term: its expressions and fields all hold; an empty term matches nothing."""
        expressions = term.get("matchExpressions") or ()
        fields = term.get("matchFields") or ()
        mask = np.full(self.size, bool(expressions or fields))
        for expression in expressions:
            mask &= self._expression(expression)
        for expression in fields:
            mask &= self._field(expression)
        return mask

    def required(self, pod: Pod) -> np.ndarray | None:
        """nodeSelector and required node affinity together; None when the pod asks for neither."""
        affinity = (pod.affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        if not pod.node_selector and affinity is None:
            return None
        mask = self.selector(pod.node_selector)
        if affinity is not None:
            matched = np.zeros(self.size, dtype=bool)
            for term in affinity.get("nodeSelectorTerms") or ():
                matched |= self.term(term)
            mask &= matched
        return mask

    # -- taints ------------------------------------------------------------------------------

    def taint_rows(self) -> dict[Taint, np.ndarray]:
        """Every distinct taint and the rows of the nodes that carry it."""
        if self._taint_rows is None:
            rows: dict[Taint, list[int]] = {}
            for row, taints in enumerate(self._taints):
                for taint in taints:
                    rows.setdefault(Taint(taint.key, taint.effect, taint.value), []).append(row)
            self._taint_rows = {taint: np.array(found, dtype=np.intp) for taint, found in rows.items()}
        return self._taint_rows

    def untolerated(self, pod: Pod, effects: frozenset[str]) -> np.ndarray | None:
        """How many taints with `effects` the pod does not tolerate, per node; None if none anywhere."""
        counts: np.ndarray | None = None
        for taint, rows in self.taint_rows().items():
            if taint.effect in effects and not pod.tolerates(taint):
                if counts is None:
                    counts = np.zeros(self.size, dtype=np.int64)
                counts[rows] += 1
        return counts

    def first_untolerated(self, pod: Pod, row: int, effects: frozenset[str]) -> Taint | None:
        return next(
            (taint for taint in self._taints[row] if taint.effect in effects and not pod.tolerates(taint)), None
        )
