"""Admission: what the embedded API server runs on every create and update, in this order:
`apply_defaults` (a defaulted copy) then `validate` (raises ValidationError listing every field
error). Every kind gets the metadata rules; Job, PodGroup, Queue, Pod and Node their own too."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lahar.api import (
    batch,
    cluster,
    cronjob,
    events,
    hypernode,
    job,
    jobflow,
    lease,
    node,
    nodeshard,
    numatopology,
    pod,
    podgroup,
    queue,
    secret,
    workloads,
)
from lahar.api.errors import Field, FieldError, ValidationError, json_copy
from lahar.api.kinds import (
    BATCH_CRONJOB,
    BATCH_JOB,
    CLUSTER,
    CRONJOB,
    DAEMON_SET,
    DEPLOYMENT,
    EVENT,
    EVENTS_V1,
    HYPERNODE,
    JOB,
    JOBFLOW,
    JOBTEMPLATE,
    LEASE,
    NAMESPACE,
    NODE,
    NODESHARD,
    NUMATOPOLOGY,
    POD,
    PODGROUP,
    QUEUE,
    REPLICA_SET,
    SECRET,
    SERVICE,
    STATEFUL_SET,
    Kind,
)
from lahar.api.meta import (
    NameCheck,
    dns1035_label_problems,
    dns1123_label_problems,
    dns1123_subdomain_problems,
    path_segment_problems,
    validate_object_meta,
    validate_object_meta_update,
)

Defaulter = Callable[[dict[str, Any]], dict[str, Any]]
Validator = Callable[[dict[str, Any], "dict[str, Any] | None"], list[FieldError]]


@dataclass(frozen=True)
class KindRules:
    defaults: Defaulter | None = None
    validate: Validator | None = None
    # The rule object names follow (Kubernetes' per-kind ValidateNameFunc).
    name_check: NameCheck = dns1123_subdomain_problems


_RULES: dict[Kind, KindRules] = {
    JOB: KindRules(job.defaults, job.validate),
    CRONJOB: KindRules(cronjob.defaults, cronjob.validate),
    JOBFLOW: KindRules(jobflow.flow_defaults, jobflow.validate_flow),
    JOBTEMPLATE: KindRules(jobflow.template_defaults, jobflow.validate_template),
    PODGROUP: KindRules(podgroup.defaults, podgroup.validate),
    QUEUE: KindRules(queue.defaults, queue.validate),
    HYPERNODE: KindRules(validate=hypernode.validate),
    NODESHARD: KindRules(validate=nodeshard.validate),
    NUMATOPOLOGY: KindRules(validate=numatopology.validate),
    CLUSTER: KindRules(validate=cluster.validate),
    POD: KindRules(pod.defaults, pod.validate),
    NODE: KindRules(node.defaults, node.validate),
    LEASE: KindRules(validate=lease.validate),
    SECRET: KindRules(secret.defaults, secret.validate),
    DEPLOYMENT: KindRules(workloads.deployment_defaults, workloads.validate_deployment),
    REPLICA_SET: KindRules(workloads.replica_set_defaults, workloads.validate_replica_set),
    BATCH_JOB: KindRules(batch.job_defaults, batch.validate_job),
    DAEMON_SET: KindRules(workloads.daemonset_defaults, workloads.validate_daemonset),
    STATEFUL_SET: KindRules(workloads.statefulset_defaults, workloads.validate_statefulset),
    BATCH_CRONJOB: KindRules(batch.cronjob_defaults, batch.validate_cronjob),
    NAMESPACE: KindRules(name_check=dns1123_label_problems),
    SERVICE: KindRules(name_check=dns1035_label_problems),
    EVENT: KindRules(name_check=path_segment_problems),
    EVENTS_V1: KindRules(validate=events.validate_v1),
}
_METADATA_ONLY = KindRules()


def rules_for(kind: Kind) -> KindRules:
    return _RULES.get(kind, _METADATA_ONLY)


def apply_defaults(kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
    """A defaulted copy of `obj` (never mutated). Malformed input is copied as far as it goes and
    left for `validate` to report."""
    if not isinstance(obj, dict):
        return json_copy(obj)
    defaulter = rules_for(kind).defaults
    result = defaulter(obj) if defaulter else json_copy(obj)
    result.setdefault("apiVersion", kind.api_version)
    result.setdefault("kind", kind.kind)
    return result


def _validate_type_meta(root: Field, kind: Kind) -> None:
    for key, expected in (("apiVersion", kind.api_version), ("kind", kind.kind)):
        value = root.child(key)
        if value.as_str() not in (None, expected):
            value.report(f'must be "{expected}" for {kind.plural}, got "{value.value}"')


def validate(kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """Raise ValidationError naming every invalid field of `obj` (a create when `old` is None,
    else an update from `old`)."""
    root = Field(obj)
    if root.as_mapping() is None:
        raise ValidationError(root.errors)
    rules = rules_for(kind)
    _validate_type_meta(root, kind)
    metadata = root.child("metadata")
    validate_object_meta(metadata, kind.namespaced, rules.name_check)
    old_object = old if isinstance(old, Mapping) else None
    if old_object is not None and isinstance(old_object.get("metadata"), Mapping):
        validate_object_meta_update(metadata, old_object["metadata"])
    errors = root.errors
    if rules.validate is not None:
        errors += [e for e in rules.validate(obj, old_object) if e not in errors]
    if errors:
        raise ValidationError(errors)
