"""Resource lists as integer vectors: what the scheduler adds, subtracts and compares.

A :class:`ResourceList` maps a resource name to an integer in that resource's base unit, so
scheduling arithmetic never touches strings or floats:

- ``cpu``: millicores (Go's ``MilliValue``: "100m" -> 100, "2" -> 2000);
- ``memory``, ``ephemeral-storage``, ``storage``, ``hugepages-*``, ``kubernetes.io/batch-memory``,
  ``kubernetes.io/mid-memory``, ``lahar.dev/gpu-memory``: bytes;
- everything else (``pods``, ``nvidia.com/gpu``, any extended resource): an integer count (Go's
  ``Value``). ``kubernetes.io/batch-cpu`` and ``kubernetes.io/mid-cpu`` are counts too, because
  by Volcano's and Koordinator's convention their quantity is already written in millicores
  ("4000" or "4k" is four cores).

ResourceQuota-style names ("requests.cpu", "limits.memory") use the unit of the name after the
prefix.

Lists behave as vectors: a missing resource counts as zero, so ``{"cpu": 0}`` equals ``{}``.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from lahar.api.quantity import Quantity, QuantityError, QuantityFormat, parse_quantity

if TYPE_CHECKING:  # numpy is imported by the vector methods alone: the agent never needs it
    import numpy as np

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

HUGEPAGES_PREFIX = "hugepages-"
MILLI_RESOURCES = frozenset({"cpu"})
BYTE_RESOURCES = frozenset(
    {
        "memory",
        "ephemeral-storage",
        "storage",
        "kubernetes.io/batch-memory",
        "kubernetes.io/mid-memory",
        "lahar.dev/gpu-memory",
    }
)
_QUOTA_PREFIXES = ("requests.", "limits.")


class ResourceUnit(enum.Enum):
    """The base unit a resource is counted in."""

    MILLI = "milli"  # thousandths: cpu
    BYTES = "bytes"
    COUNT = "count"


def resource_unit(name: str) -> ResourceUnit:
    for prefix in _QUOTA_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if name in MILLI_RESOURCES:
        return ResourceUnit.MILLI
    if name in BYTE_RESOURCES or name.startswith(HUGEPAGES_PREFIX):
        return ResourceUnit.BYTES
    return ResourceUnit.COUNT


def to_base_units(name: str, quantity: Quantity) -> int:
    """A quantity of resource ``name`` as an integer in the resource's base unit (rounded up)."""
    if resource_unit(name) is ResourceUnit.MILLI:
        return quantity.milli_value()
    return quantity.value()


def to_quantity(name: str, amount: int) -> Quantity:
    """An amount in base units back to a Quantity that prints the way people write it.

    Bytes print in whichever of binary SI and decimal SI is shorter, binary on a tie ("2Gi",
    "1536Mi", "1Ki", but "500M", "100G", "1k"); everything else prints in decimal SI ("100m", "8").
    """
    unit = resource_unit(name)
    if unit is ResourceUnit.MILLI:
        return Quantity.from_milli(amount)
    decimal = Quantity.from_int(amount)
    if unit is ResourceUnit.BYTES:
        binary = decimal.with_format(QuantityFormat.BINARY_SI)
        if len(str(binary)) <= len(str(decimal)):
            return binary
    return decimal


def _checked_amount(name: object, amount: object) -> int:
    if not isinstance(name, str) or not name:
        raise ValueError(f"resource name must be a non-empty string, got {name!r}")
    if isinstance(amount, bool):
        raise TypeError(f"resource {name}: amount must be an integer, got bool")
    try:
        return operator.index(amount)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"resource {name}: amount must be an integer in base units, got {type(amount).__name__}"
        ) from None


class ResourceList(Mapping[str, int]):
    """An immutable mapping from resource name to an integer amount in base units.

    Arithmetic (``+``, ``-``, ``* int``), comparison and equality treat a missing resource as
    zero. ``-`` may produce negative amounts; callers that need a floor clamp themselves.
    ``<=`` is the element-wise partial order (:meth:`less_equal`); there is no ``<``.
    """

    __slots__ = ("_amounts",)
    _amounts: dict[str, int]

    def __init__(self, amounts: Mapping[str, int] | Iterable[tuple[str, int]] = (), /) -> None:
        pairs = amounts.items() if isinstance(amounts, Mapping) else amounts
        self._amounts = {name: _checked_amount(name, amount) for name, amount in pairs}

    @classmethod
    def _wrap(cls, amounts: dict[str, int]) -> ResourceList:
        """Adopt an already-checked dict without copying it."""
        result = object.__new__(cls)
        result._amounts = amounts
        return result

    # -- Kubernetes form ----------------------------------------------------------------------

    @classmethod
    def from_k8s(cls, resources: Mapping[str, Any] | None, field_path: str = "") -> ResourceList:
        """Parse a Kubernetes resource map (``{"cpu": "100m", "memory": "2Gi"}``).

        ``None`` is an empty list (an omitted field). A bad entry raises :class:`QuantityError`
        whose message starts with the field's path: ``resources.memory: invalid quantity ...``.
        """
        if resources is None:
            return cls._wrap({})
        if not isinstance(resources, Mapping):
            where = f"{field_path}: " if field_path else ""
            raise QuantityError(f"{where}expected a map of resource name to quantity, got {type(resources).__name__}")
        prefix = f"{field_path}." if field_path else ""
        amounts: dict[str, int] = {}
        for name, value in resources.items():
            if not isinstance(name, str) or not name:
                raise QuantityError(f"{prefix}{name!r}: resource name must be a non-empty string")
            try:
                amounts[name] = to_base_units(name, parse_quantity(value))
            except QuantityError as error:
                raise QuantityError(f"{prefix}{name}: {error}") from error
        return cls._wrap(amounts)

    def to_k8s(self) -> dict[str, str]:
        """The Kubernetes resource map with canonical quantity strings."""
        return {name: str(to_quantity(name, amount)) for name, amount in self._amounts.items()}

    def quantity(self, name: str) -> Quantity:
        """One resource as a Quantity (zero when missing)."""
        return to_quantity(name, self.get(name))

    # -- mapping ------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> int:
        return self._amounts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    def __len__(self) -> int:
        return len(self._amounts)

    def __contains__(self, name: object) -> bool:
        return name in self._amounts

    def get(self, name: str, default: int = 0) -> int:  # type: ignore[override]
        """The amount of ``name``; missing resources are zero, as in all vector arithmetic."""
        return self._amounts.get(name, default)

    def without_zeros(self) -> ResourceList:
        nonzero = {name: amount for name, amount in self._amounts.items() if amount}
        return ResourceList._wrap(nonzero)

    # -- vector arithmetic --------------------------------------------------------------------

    def _combine(self, other: ResourceList, sign: int) -> ResourceList:
        result = dict(self._amounts)
        for name, amount in other._amounts.items():
            result[name] = result.get(name, 0) + sign * amount
        return ResourceList._wrap(result)

    def __add__(self, other: object) -> ResourceList:
        if not isinstance(other, ResourceList):
            return NotImplemented
        return self._combine(other, 1)

    def __radd__(self, other: object) -> ResourceList:
        # Lets sum(lists) start from its default 0.
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return NotImplemented

    def __sub__(self, other: object) -> ResourceList:
        if not isinstance(other, ResourceList):
            return NotImplemented
        return self._combine(other, -1)

    def __mul__(self, factor: object) -> ResourceList:
        if not isinstance(factor, int) or isinstance(factor, bool):
            return NotImplemented
        return ResourceList._wrap({name: amount * factor for name, amount in self._amounts.items()})

    __rmul__ = __mul__

    def _names_with(self, other: ResourceList) -> Iterable[str]:
        return self._amounts.keys() | other._amounts.keys()

    def max_with(self, other: ResourceList) -> ResourceList:
        """Element-wise maximum (missing counts as zero)."""
        return ResourceList._wrap({name: max(self.get(name), other.get(name)) for name in self._ordered_union(other)})

    def min_with(self, other: ResourceList) -> ResourceList:
        """Element-wise minimum (missing counts as zero)."""
        return ResourceList._wrap({name: min(self.get(name), other.get(name)) for name in self._ordered_union(other)})

    def _ordered_union(self, other: ResourceList) -> list[str]:
        # Keep self's order, then other's new names, so to_k8s() output stays predictable.
        return [*self._amounts, *(name for name in other._amounts if name not in self._amounts)]

    # -- comparison ---------------------------------------------------------------------------

    def fits_in(self, capacity: ResourceList) -> bool:
        """Whether every resource requested here is at most ``capacity``'s (missing = 0)."""
        return all(amount <= capacity.get(name) for name, amount in self._amounts.items())

    def less_equal(self, other: ResourceList) -> bool:
        """Element-wise ``<=`` over the resources of both lists (missing = 0).

        Differs from :meth:`fits_in` only when ``other`` holds negative amounts.
        """
        return all(self.get(name) <= other.get(name) for name in self._names_with(other))

    def __le__(self, other: object) -> bool:
        if not isinstance(other, ResourceList):
            return NotImplemented
        return self.less_equal(other)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, ResourceList):
            return NotImplemented
        return other.less_equal(self)

    def is_zero(self) -> bool:
        return not any(self._amounts.values())

    def __bool__(self) -> bool:
        return not self.is_zero()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ResourceList):
            return NotImplemented
        return all(self.get(name) == other.get(name) for name in self._names_with(other))

    def __hash__(self) -> int:
        return hash(frozenset((name, amount) for name, amount in self._amounts.items() if amount))

    def __repr__(self) -> str:
        entries = ", ".join(f"{name}={to_quantity(name, amount)}" for name, amount in sorted(self._amounts.items()))
        return f"ResourceList({entries})"

    # -- numpy --------------------------------------------------------------------------------

    def to_vector(self, names: Sequence[str], *, allow_unlisted: bool = False) -> np.ndarray:
        """The amounts of ``names``, in that order, as an int64 array (missing = 0).

        A non-zero resource that ``names`` leaves out raises ValueError unless
        ``allow_unlisted``: silently dropping, say, a GPU request would make a pod fit anywhere.
        """
        if not allow_unlisted:
            listed = set(names)
            unlisted = sorted(name for name, amount in self._amounts.items() if amount and name not in listed)
            if unlisted:
                raise ValueError(f"resources not in the vector's names: {', '.join(unlisted)}")
        import numpy as np

        values = [self._amounts.get(name, 0) for name in names]
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            too_large = [
                f"{name}={value}"
                for name, value in zip(names, values, strict=True)
                if not INT64_MIN <= value <= INT64_MAX
            ]
            raise OverflowError(f"resources do not fit in int64: {', '.join(too_large)}") from None

    @classmethod
    def from_vector(cls, names: Sequence[str], vector: np.ndarray | Sequence[int]) -> ResourceList:
        """The inverse of :meth:`to_vector`: one entry per name, zeros included."""
        import numpy as np

        array = np.asarray(vector)
        if array.ndim != 1 or len(array) != len(names):
            raise ValueError(f"vector of shape {array.shape} does not match {len(names)} resource names")
        if len(array) and not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"vector must hold integers, got {array.dtype}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate resource names: {list(names)}")
        return cls(zip(names, array.tolist(), strict=True))


# -- pods -----------------------------------------------------------------------------------------


class ContainerResources(NamedTuple):
    requests: ResourceList
    limits: ResourceList


def _container_resources(container: Mapping[str, Any], path: str) -> ContainerResources:
    """One container's requests and limits; a resource with only a limit requests its limit."""
    resources = container.get("resources") or {}
    requests = ResourceList.from_k8s(resources.get("requests"), f"{path}.resources.requests")
    limits = ResourceList.from_k8s(resources.get("limits"), f"{path}.resources.limits")
    # Kubernetes' Pod defaulting, per resource: requests[r] = limits[r] where unset.
    defaulted = dict(requests._amounts)
    for name, amount in limits._amounts.items():
        defaulted.setdefault(name, amount)
    return ContainerResources(ResourceList._wrap(defaulted), limits)


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    """A restartable init container (KEP-753) runs beside the app containers."""
    return container.get("restartPolicy") == "Always"


def _pod_total(pod: Mapping[str, Any], select: Callable[[ContainerResources], ResourceList]) -> ResourceList:
    """Kubernetes' PodRequests / PodLimits aggregation, before overhead.

    App containers and sidecars add up; each ordinary init container runs alone beside the
    sidecars started before it; the pod needs the larger of the two, per resource.
    """
    spec = pod.get("spec") or {}
    total = ResourceList()
    for index, container in enumerate(spec.get("containers") or ()):
        total += select(_container_resources(container, f"spec.containers[{index}]"))
    sidecars = ResourceList()
    init_peak = ResourceList()
    for index, container in enumerate(spec.get("initContainers") or ()):
        amounts = select(_container_resources(container, f"spec.initContainers[{index}]"))
        if _is_sidecar(container):
            total += amounts
            sidecars += amounts
            running = sidecars
        else:
            running = amounts + sidecars
        init_peak = init_peak.max_with(running)
    return total.max_with(init_peak)


def _overhead(pod: Mapping[str, Any]) -> ResourceList:
    return ResourceList.from_k8s((pod.get("spec") or {}).get("overhead"), "spec.overhead")


def pod_requests(pod: Mapping[str, Any]) -> ResourceList:
    """A pod's effective requests, as the Kubernetes scheduler computes them.

    Per resource: max(sum of containers and sidecars, each init container plus the sidecars
    before it), plus ``spec.overhead``. A container resource with a limit but no request
    requests its limit. Pod-level ``spec.resources`` (alpha in Kubernetes 1.32) is not read.
    """
    return _pod_total(pod, operator.attrgetter("requests")) + _overhead(pod)


def pod_limits(pod: Mapping[str, Any]) -> ResourceList:
    """A pod's effective limits, aggregated like :func:`pod_requests`.

    A resource no container limits is absent (unbounded). As in Kubernetes, a resource only
    some containers limit sums the limits that exist, and ``spec.overhead`` is added only to
    resources that have a limit.
    """
    limits = _pod_total(pod, operator.attrgetter("limits"))
    overhead = _overhead(pod)
    return ResourceList._wrap({name: amount + overhead.get(name) for name, amount in limits._amounts.items()})
