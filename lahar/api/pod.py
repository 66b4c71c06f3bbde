"""Pod (`v1`): the view the scheduler builds for every pod (so it wraps the dict and parses only
what is asked, once), Kubernetes' pod defaults including the QoS class, and pod validation, which
Job task templates share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lahar.api.errors import DUPLICATE, Field, FieldError, child_dict, dict_elements, json_copy, set_default
from lahar.api.meta import (
    ObjectView,
    OwnerReference,
    check_name,
    dns1123_label_problems,
    dns1123_subdomain_problems,
    label_value_problems,
    qualified_name_problems,
    validate_annotations,
    validate_labels,
)
from lahar.api.node import TAINT_EFFECTS, Taint, validate_conditions
from lahar.api.podgroup import GROUP_NAME_ANNOTATION
from lahar.api.qos import (
    CONTAINER_LISTS,
    K8S_QOS_CLASSES,
    QoSClass,
    k8s_qos_class,
    qos_class,
    validate_qos_keys,
)
from lahar.api.quantity import canonicalize_resource_list
from lahar.api.resources import ResourceList, pod_requests
from lahar.api.selectors import validate_label_selector

PENDING, RUNNING, SUCCEEDED, FAILED, UNKNOWN = "Pending", "Running", "Succeeded", "Failed", "Unknown"
PHASES = (PENDING, RUNNING, SUCCEEDED, FAILED, UNKNOWN)
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})

RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
IMAGE_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TOLERATION_OPERATORS = ("Exists", "Equal")

DEFAULT_SCHEDULER_NAME = "default-scheduler"
DEFAULT_TERMINATION_GRACE_SECONDS = 30

_EMPTY: Mapping[str, Any] = {}


# Volcano's opt-out from eviction, on a pod, a PodGroup or a Job (annotation first, then label).
PREEMPTABLE_KEY = "volcano.sh/preemptable"
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def preemptable_flag(annotations: Mapping[str, str], labels: Mapping[str, str]) -> bool | None:
    """`volcano.sh/preemptable` as Volcano reads it (Go's ParseBool; a value it cannot parse
    means not preemptable, the safe side); None when neither the annotation nor the label says."""
    value = annotations.get(PREEMPTABLE_KEY)
    if value is None:
        value = labels.get(PREEMPTABLE_KEY)
    if value is None:
        return None
    return value in _GO_TRUE


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    @classmethod
    def from_dict(cls, toleration: Mapping[str, Any]) -> Toleration:
        return cls(
            toleration.get("key") or "",
            toleration.get("operator") or "Equal",
            toleration.get("value") or "",
            toleration.get("effect") or "",
            toleration.get("tolerationSeconds"),
        )

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ToleratesTaint: an empty effect or key matches all, Exists ignores value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


class Pod(ObjectView):
    """A read-only view over a Pod dict, no copy. Construction costs a few dict lookups;
    requests, tolerations and the QoS class are computed on first use and cached."""

    __slots__ = ("_qos_class", "_requests", "_tolerations")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        super().__init__(obj)
        self._requests: ResourceList | None = None
        self._tolerations: tuple[Toleration, ...] | None = None
        self._qos_class: QoSClass | None = None

    # --- identity -----------------------------------------------------------------------------

    @property
    def owner_references(self) -> tuple[OwnerReference, ...]:
        return self.meta.owner_references

    @property
    def group_name(self) -> str | None:
        """The PodGroup the pod belongs to (its `scheduling.k8s.io/group-name` annotation)."""
        return self.meta.annotations.get(GROUP_NAME_ANNOTATION) or None

    # --- scheduling inputs --------------------------------------------------------------------

    @property
    def node_name(self) -> str:
        return self.spec.get("nodeName") or ""

    @property
    def scheduler_name(self) -> str:
        return self.spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME

    @property
    def priority(self) -> int:
        return self.spec.get("priority") or 0

    @property
    def priority_class_name(self) -> str:
        return self.spec.get("priorityClassName") or ""

    @property
    def requests(self) -> ResourceList:
        """Effective requests as the Kubernetes scheduler computes them (cached)."""
        if self._requests is None:
            self._requests = pod_requests(self.raw)
        return self._requests

    @property
    def node_selector(self) -> Mapping[str, str]:
        return self.spec.get("nodeSelector") or _EMPTY

    @property
    def affinity(self) -> Mapping[str, Any]:
        return self.spec.get("affinity") or _EMPTY

    @property
    def tolerations(self) -> tuple[Toleration, ...]:
        if self._tolerations is None:
            self._tolerations = tuple(Toleration.from_dict(t) for t in self.spec.get("tolerations") or ())
        return self._tolerations

    def tolerates(self, taint: Taint) -> bool:
        return any(toleration.tolerates(taint) for toleration in self.tolerations)

    # --- state --------------------------------------------------------------------------------

    @property
    def phase(self) -> str:
        return self.status.get("phase") or PENDING

    @property
    def is_terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def is_assigned(self) -> bool:
        return bool(self.node_name)

    @property
    def deletion_timestamp(self) -> str | None:
        return self.meta.deletion_timestamp

    @property
    def is_deleting(self) -> bool:
        return self.meta.is_deleting

    @property
    def k8s_qos_class(self) -> str:
        """`status.qosClass` as the API server set it, computed when absent."""
        return self.status.get("qosClass") or k8s_qos_class(self.spec)

    @property
    def qos_class(self) -> QoSClass:
        """Lahar's QoS class (LC, LS, BE, SYSTEM), cached."""
        if self._qos_class is None:
            self._qos_class = qos_class(self.raw)
        return self._qos_class

    def __repr__(self) -> str:
        return f"Pod({self.key!r})"


# --- defaults ---------------------------------------------------------------------------------


def _image_pull_policy(image: str) -> str:
    """Always for `:latest` or untagged images, IfNotPresent for tags and digests."""
    if "@" in image:
        return "IfNotPresent"
    last_part = image.rsplit("/", 1)[-1]
    tag = last_part.rpartition(":")[2] if ":" in last_part else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_container(container: dict[str, Any]) -> None:
    image = container.get("image")
    if isinstance(image, str) and image:
        set_default(container, "imagePullPolicy", _image_pull_policy(image))
    set_default(container, "terminationMessagePath", "/dev/termination-log")
    set_default(container, "terminationMessagePolicy", "File")
    resources = child_dict(container, "resources")
    limits = child_dict(resources, "limits")
    requests = child_dict(resources, "requests", create=limits is not None)
    if limits is not None and requests is not None:
        # Kubernetes: a resource with a limit and no request requests its limit.
        for name, limit in limits.items():
            set_default(requests, name, limit)
    for port in dict_elements(container.get("ports")):
        set_default(port, "protocol", "TCP")


def default_pod_spec(spec: dict[str, Any]) -> None:
    """Kubernetes' pod spec defaults, in place (callers pass a copy). Tolerates wrongly typed
    fields: validation reports those."""
    set_default(spec, "schedulerName", DEFAULT_SCHEDULER_NAME)
    set_default(spec, "restartPolicy", "Always")
    set_default(spec, "terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_SECONDS)
    set_default(spec, "dnsPolicy", "ClusterFirst")
    for list_name in CONTAINER_LISTS:
        for container in dict_elements(spec.get(list_name)):
            _default_container(container)


def _canonical_quantities(spec: dict[str, Any]) -> None:
    """A Pod's quantities as kube-apiserver stores them: in canonical form (a Pod is decoded into
    Go structs there; a Job's template, a custom resource, is stored as written)."""
    for list_name in CONTAINER_LISTS:
        for container in dict_elements(spec.get(list_name)):
            resources = child_dict(container, "resources")
            for key in ("requests", "limits"):
                canonicalize_resource_list(child_dict(resources, key))
    canonicalize_resource_list(spec.get("overhead"))


def defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A defaulted copy of a Pod: spec defaults, quantities in canonical form, `status.phase`
    Pending and `status.qosClass`."""
    result = json_copy(obj)
    spec = child_dict(result, "spec", create=True)
    if spec is None:
        return result
    default_pod_spec(spec)
    _canonical_quantities(spec)
    status = child_dict(result, "status", create=True)
    if status is not None:
        set_default(status, "phase", PENDING)
        set_default(status, "qosClass", k8s_qos_class(spec))
    return result


# --- validation -------------------------------------------------------------------------------


def _validate_resources(resources: Field) -> None:
    requests = resources.child("requests").as_quantities() or {}
    limits = resources.child("limits").as_quantities() or {}
    for name, request in requests.items():
        limit = limits.get(name)
        if limit is not None and request > limit:
            resources.child("requests").child(name).report(f"must be less than or equal to the {name} limit ({limit})")


def _validate_container(container: Field, names: set[str]) -> None:
    name = container.child("name")
    if name.require_str() is not None:
        check_name(name, dns1123_label_problems)
        if name.value in names:
            name.report(f'duplicate container name "{name.value}"', DUPLICATE)
        names.add(name.value)
    container.child("image").require_str()
    container.child("imagePullPolicy").as_choice(IMAGE_PULL_POLICIES, "image pull policy")
    container.child("command").as_str_list()
    container.child("args").as_str_list()
    for env in container.child("env").elements():
        env.child("name").require_str()
        env.child("value").as_str()
    for port in container.child("ports").elements():
        number = port.child("containerPort")
        value = number.as_int() if number.require_present() else None
        if value is not None and not 1 <= value <= 65535:
            number.report("must be between 1 and 65535, inclusive")
    _validate_resources(container.child("resources"))


def _validate_tolerations(tolerations: Field) -> None:
    for toleration in tolerations.elements():
        key = toleration.child("key")
        operator = toleration.child("operator")
        value = toleration.child("value")
        exists = operator.as_choice(TOLERATION_OPERATORS, "toleration operator") == "Exists"
        check_name(key, qualified_name_problems, allow_empty=True)
        if not key.value and not exists:
            operator.report('must be "Exists" when the key is empty')
        if exists and value.as_str():
            value.report('must be empty when the operator is "Exists"')
        else:
            check_name(value, label_value_problems)
        effect = toleration.child("effect")
        effect.as_choice(TAINT_EFFECTS, "toleration effect")
        seconds = toleration.child("tolerationSeconds")
        if seconds.as_int(bits=64) is not None and effect.value != "NoExecute":
            seconds.report('may only be set when the effect is "NoExecute"')


SPREAD_WHEN = ("DoNotSchedule", "ScheduleAnyway")
SPREAD_POLICIES = ("Honor", "Ignore")


def _validate_pod_affinity_term(term: Field) -> None:
    if term.as_mapping() is None:
        return
    validate_label_selector(term.child("labelSelector"))
    validate_label_selector(term.child("namespaceSelector"))
    term.child("namespaces").as_str_list()
    key = term.child("topologyKey")
    if key.require_str("is required: the label whose values group nodes into topology domains") is not None:
        check_name(key, qualified_name_problems)
    for name in ("matchLabelKeys", "mismatchLabelKeys"):
        for label in term.child(name).elements():
            check_name(label, qualified_name_problems)


def _validate_affinity(affinity: Field) -> None:
    """Pod (anti-)affinity terms (the scheduler reads them; a bad one would keep the pod off every
    node): selectors, topology keys, preferred weights in 1..100."""
    if affinity.as_mapping() is None:
        return
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.child(kind)
        if section.as_mapping() is None:
            continue
        for term in section.child("requiredDuringSchedulingIgnoredDuringExecution").elements():
            _validate_pod_affinity_term(term)
        for weighted in section.child("preferredDuringSchedulingIgnoredDuringExecution").elements():
            if weighted.as_mapping() is None:
                continue
            weight = weighted.child("weight")
            value = weight.as_int() if weight.require_present() else None
            if value is not None and not 1 <= value <= 100:
                weight.report("must be in the range 1-100")
            term = weighted.child("podAffinityTerm")
            if term.require_present():
                _validate_pod_affinity_term(term)


def _validate_topology_spread(constraints: Field) -> None:
    seen: set[tuple[str, str]] = set()
    for constraint in constraints.elements():
        if constraint.as_mapping() is None:
            continue
        skew = constraint.child("maxSkew")
        if skew.require_present():
            skew.as_int(minimum=1)
        key = constraint.child("topologyKey")
        topology_key = key.require_str()
        if topology_key is not None:
            check_name(key, qualified_name_problems)
        when_field = constraint.child("whenUnsatisfiable")
        when = when_field.as_choice(SPREAD_WHEN, "whenUnsatisfiable") if when_field.require_present() else None
        domains = constraint.child("minDomains")
        if domains.present and domains.as_int(minimum=1) is not None and when != "DoNotSchedule":
            domains.report("can only use minDomains if whenUnsatisfiable=DoNotSchedule")
        for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            constraint.child(policy).as_choice(SPREAD_POLICIES, policy)
        validate_label_selector(constraint.child("labelSelector"))
        for label in constraint.child("matchLabelKeys").elements():
            check_name(label, qualified_name_problems)
        if topology_key is not None and when is not None:
            if (topology_key, when) in seen:
                constraint.report(f"{{{topology_key}, {when}}} is given twice", DUPLICATE)
            seen.add((topology_key, when))


def validate_pod_spec(spec: Field) -> None:
    """Pod spec rules, reported under `spec`'s path (a Pod's `spec` or a template's)."""
    if not spec.require_present():
        return
    spec.child("containers").require_nonempty_list("at least one container is required")
    names: set[str] = set()
    for list_name in CONTAINER_LISTS:
        for container in spec.child(list_name).elements():
            _validate_container(container, names)
    spec.child("restartPolicy").as_choice(RESTART_POLICIES, "restart policy")
    spec.child("dnsPolicy").as_choice(DNS_POLICIES, "DNS policy")
    spec.child("schedulerName").as_str()
    for key in ("nodeName", "priorityClassName"):
        check_name(spec.child(key), dns1123_subdomain_problems, allow_empty=True)
    spec.child("priority").as_int()
    spec.child("terminationGracePeriodSeconds").as_int(minimum=0, bits=64)
    spec.child("activeDeadlineSeconds").as_int(minimum=1, bits=64)
    spec.child("hostNetwork").as_bool()
    validate_labels(spec.child("nodeSelector"))
    _validate_affinity(spec.child("affinity"))
    _validate_topology_spread(spec.child("topologySpreadConstraints"))
    _validate_tolerations(spec.child("tolerations"))
    spec.child("overhead").as_quantities()


def validate_pod_template(template: Field) -> None:
    """A PodTemplateSpec: its metadata's labels and annotations, then its spec."""
    metadata = template.child("metadata")
    validate_labels(metadata.child("labels"))
    validate_annotations(metadata.child("annotations"))
    validate_qos_keys(metadata)
    validate_pod_spec(template.child("spec"))


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    validate_qos_keys(root.child("metadata"))
    validate_pod_spec(root.child("spec"))
    status = root.child("status")
    status.child("phase").as_choice(PHASES, "pod phase")
    status.child("qosClass").as_choice(K8S_QOS_CLASSES, "QoS class")
    validate_conditions(status.child("conditions"))
    return root.errors
