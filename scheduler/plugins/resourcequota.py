"""resourcequota: `enqueue` admits a PodGroup only within its namespace's ResourceQuotas
(Volcano's resourcequota plugin).

For each ResourceQuota of the PodGroup's namespace, the PodGroup's `spec.minResources`, limited to
the resource names the quota's hard list names (exactly: `cpu` is not `requests.cpu`, as
Kubernetes' quota helpers compare names), is added to what the quota already counts
(`status.used`, kept by kube-controller-manager's quota controller) and to what this session
admitted in the namespace before it; where any named resource would exceed the hard limit the
PodGroup is refused (a Normal `Unschedulable` event on it says requested, used and limit), else
permitted. A PodGroup without minResources, or in a namespace without quotas, is permitted.
The hard list is `status.hard`, as Volcano reads it, or `spec.hard` while the quota controller
has not filled the status in.

- job_enqueueable: the vote above (Volcano's: a permit, which in its tier outvotes abstentions,
  or a reject);
- job_enqueued: the admitted PodGroup's minResources count against its namespace for the rest
  of the session (only once every plugin admitted it).

ResourceQuotas are read from a Kubernetes API server (the scheduler watches them, an optional
informer); Lahar's embedded API server does not serve them, so there the plugin has no quota to
apply and permits everything. A quota whose quantities cannot be read is reported with a Warning
event on it and left out. The plugin takes no arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lahar.api.quantity import QuantityError
from lahar.api.resources import ResourceList
from lahar.scheduler.framework.plugin import Plugin, register_plugin
from lahar.scheduler.framework.session import PERMIT, REJECT, Session
from lahar.scheduler.model import JobInfo


@dataclass(frozen=True)
class Quota:
    namespace: str
    name: str
    hard: ResourceList
    used: ResourceList


def read_quota(obj: Mapping[str, object]) -> Quota:
    """A ResourceQuota as the plugin uses it. Raises QuantityError on an unreadable quantity."""
    metadata, spec, status = (obj.get(part) or {} for part in ("metadata", "spec", "status"))
    assert isinstance(metadata, Mapping) and isinstance(spec, Mapping) and isinstance(status, Mapping)
    hard = status.get("hard") or spec.get("hard")
    return Quota(
        str(metadata.get("namespace", "")),
        str(metadata.get("name", "")),
        ResourceList.from_k8s(hard, "hard"),
        ResourceList.from_k8s(status.get("used"), "status.used"),
    )


def exceeded(request: Mapping[str, int], used: Mapping[str, int], quota: Quota) -> list[str]:
    """The resources the quota names where used + request would go past its hard limit."""
    return sorted(
        name for name, amount in request.items() if name in quota.hard and used.get(name, 0) + amount > quota.hard[name]
    )


def _describe(amounts: Mapping[str, int], names: list[str]) -> str:
    """`cpu=2, memory=2G` for the named resources, as the API writes quantities."""
    listed = ResourceList({name: amounts.get(name, 0) for name in names})
    return ", ".join(f"{name}={listed.quantity(name)}" for name in names)


@register_plugin
class ResourceQuotaPlugin(Plugin):
    name = "resourcequota"

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.quotas: dict[str, list[Quota]] = {}
        for obj in session.snapshot.resource_quotas:
            try:
                quota = read_quota(obj)
            except QuantityError as exc:
                metadata = obj.get("metadata") or {}
                assert isinstance(metadata, Mapping)
                namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
                session.record_event("ResourceQuota", namespace, name, "Warning", "InvalidResourceQuota", str(exc))
                continue
            self.quotas.setdefault(quota.namespace, []).append(quota)
        self.admitted: dict[str, dict[str, int]] = {}  # namespace -> minResources admitted this session
        if self.quotas:
            session.add_job_enqueueable_fn(self.job_enqueueable)
            session.add_job_enqueued_fn(self.job_enqueued)

    def min_resources(self, job: JobInfo) -> ResourceList | None:
        group = job.podgroup
        given = None if group is None else group.spec.get("minResources")
        if given is None:
            return None
        try:
            return ResourceList.from_k8s(given, "spec.minResources")
        except QuantityError:
            return None  # the API refuses such a PodGroup; one that got through asks for nothing here

    def job_enqueueable(self, job: JobInfo) -> int:
        request = self.min_resources(job)
        if request is None:
            return PERMIT
        admitted = self.admitted.get(job.namespace, {})
        for quota in self.quotas.get(job.namespace, ()):
            used = {name: quota.used.get(name, 0) + admitted.get(name, 0) for name in quota.hard}
            over = exceeded(request, used, quota)
            if over:
                message = (
                    f"resource quota {quota.name} insufficient, requested: {_describe(request, over)}, "
                    f"used: {_describe(used, over)}, limited: {_describe(quota.hard, over)}"
                )
                self.session.record_event("PodGroup", job.namespace, job.name, "Normal", "Unschedulable", message)
                return REJECT
        return PERMIT

    def job_enqueued(self, job: JobInfo) -> None:
        request = self.min_resources(job)
        if request is None or job.namespace not in self.quotas:
            return
        admitted = self.admitted.setdefault(job.namespace, {})
        for name, amount in request.items():
            admitted[name] = admitted.get(name, 0) + amount
