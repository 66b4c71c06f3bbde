"""The API resources Lahar serves and reads: one registry shared by the embedded API server, the
client layer and the CLI, so a kind's group, version, plural and scope are written down once."""

from __future__ import annotations

from dataclasses import dataclass, field

VOLCANO_BATCH = "batch.volcano.sh"
VOLCANO_SCHEDULING = "scheduling.volcano.sh"
VOLCANO_FLOW = "flow.volcano.sh"
FEDERATION = "federation.lahar.dev"


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    # Field selector keys beyond metadata.name / metadata.namespace.
    field_selectors: tuple[str, ...] = ()
    categories: tuple[str, ...] = field(default=())

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def base_path(self, namespace: str | None = None) -> str:
        """The URL of this kind's collection (in a namespace when given and namespaced)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None) -> str:
        return f"{self.base_path(namespace)}/{name}"


POD = Kind(
    "",
    "v1",
    "Pod",
    "pods",
    True,
    ("po",),
    ("status", "binding", "eviction", "log", "exec", "attach"),
    ("spec.nodeName", "spec.schedulerName", "spec.restartPolicy", "status.phase", "status.podIP"),
    ("all",),
)
NODE = Kind("", "v1", "Node", "nodes", False, ("no",), ("status",), ("spec.unschedulable",))
NAMESPACE = Kind("", "v1", "Namespace", "namespaces", False, ("ns",), ("status",), ("status.phase",))
EVENT = Kind(
    "",
    "v1",
    "Event",
    "events",
    True,
    ("ev",),
    (),
    (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
)
# events.k8s.io/v1 Events: the same stored objects as core/v1 Events in another shape (regarding,
# note, reportingController...), as kube-apiserver serves them (apiserver/views.py converts).
EVENTS_V1 = Kind(
    "events.k8s.io",
    "v1",
    "Event",
    "events",
    True,
    ("ev",),
    (),
    (
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    ),
)
SERVICE = Kind("", "v1", "Service", "services", True, ("svc",), ("status",), (), ("all",))
CONFIGMAP = Kind("", "v1", "ConfigMap", "configmaps", True, ("cm",))
SECRET = Kind("", "v1", "Secret", "secrets", True, (), (), ("type",))
NETWORK_POLICY = Kind("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True, ("netpol",))
PDB = Kind("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ("pdb",), ("status",))
PRIORITY_CLASS = Kind("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",))
JOB = Kind(VOLCANO_BATCH, "v1alpha1", "Job", "jobs", True, ("vcjob", "vj"), ("status",), (), ("all",))
CRONJOB = Kind(VOLCANO_BATCH, "v1alpha1", "CronJob", "cronjobs", True, ("vccj",), ("status",))
JOBFLOW = Kind(VOLCANO_FLOW, "v1alpha1", "JobFlow", "jobflows", True, ("jf",), ("status",))
JOBTEMPLATE = Kind(VOLCANO_FLOW, "v1alpha1", "JobTemplate", "jobtemplates", True, ("jt",), ("status",))
PODGROUP = Kind(VOLCANO_SCHEDULING, "v1beta1", "PodGroup", "podgroups", True, ("pg", "podgroup-v1beta1"), ("status",))
QUEUE = Kind(VOLCANO_SCHEDULING, "v1beta1", "Queue", "queues", False, ("q", "queue-v1beta1"), ("status",))
# Volcano's network topology (the scheduler's network-topology-aware plugin reads it).
HYPERNODE = Kind("topology.volcano.sh", "v1alpha1", "HyperNode", "hypernodes", False, ("hn",), ("status",))
# Volcano's scheduler sharding: the nodes one scheduler instance may use (lahar/api/nodeshard.py).
NODESHARD = Kind("shard.volcano.sh", "v1alpha1", "NodeShard", "nodeshards", False, ("nsh",), ("status",))
# A member cluster of a federation, on the hub (lahar/api/cluster.py, federation/).
CLUSTER = Kind(FEDERATION, "v1alpha1", "Cluster", "clusters", False, ("mcl",), ("status",))
# Leader election (lahar.client.leader) and node heartbeats; no status subresource, as in Kubernetes.
LEASE = Kind("coordination.k8s.io", "v1", "Lease", "leases", True)
# Volcano's bus Command (`vcctl job suspend` makes one): Lahar does not serve it (not in ALL_KINDS);
# the federation's fence writes it in members that run Volcano's own job controller.
VOLCANO_COMMAND = Kind("bus.volcano.sh", "v1alpha1", "Command", "commands", True)
# Namespace quotas: the scheduler's resourcequota plugin reads them from a Kubernetes API server
# (kube-controller-manager keeps their status.used); the embedded server does not serve them (not
# in ALL_KINDS), so the scheduler's informer on them is optional.
RESOURCE_QUOTA = Kind("", "v1", "ResourceQuota", "resourcequotas", True, ("quota",), ("status",))
# Volcano's per-node NUMA report (its resource-exporter writes it; lahar/api/numatopology.py): the
# scheduler's numa-aware plugin reads it where a node's Lahar agent reports no NUMA topology.
NUMATOPOLOGY = Kind("nodeinfo.volcano.sh", "v1alpha1", "Numatopology", "numatopologies", False, ("numatopo",))
SERVICE_ACCOUNT = Kind("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",))
# Workloads, run by controller/workloads in single-machine mode (kube-controller-manager on a cluster).
DEPLOYMENT = Kind("apps", "v1", "Deployment", "deployments", True, ("deploy",), ("status", "scale"), (), ("all",))
REPLICA_SET = Kind("apps", "v1", "ReplicaSet", "replicasets", True, ("rs",), ("status", "scale"), (), ("all",))
STATEFUL_SET = Kind("apps", "v1", "StatefulSet", "statefulsets", True, ("sts",), ("status", "scale"), (), ("all",))
DAEMON_SET = Kind("apps", "v1", "DaemonSet", "daemonsets", True, ("ds",), ("status",), (), ("all",))
# Kubernetes' own Job (Volcano's is JOB above, which `jobs` names first; `jobs.batch` names this one).
BATCH_JOB = Kind("batch", "v1", "Job", "jobs", True, (), ("status",), (), ("all",))
BATCH_CRONJOB = Kind("batch", "v1", "CronJob", "cronjobs", True, ("cj",), ("status",), (), ("all",))

ALL_KINDS: tuple[Kind, ...] = (
    POD,
    NODE,
    NAMESPACE,
    EVENT,
    EVENTS_V1,
    SERVICE,
    CONFIGMAP,
    SECRET,
    NETWORK_POLICY,
    PDB,
    PRIORITY_CLASS,
    JOB,
    CRONJOB,
    JOBFLOW,
    JOBTEMPLATE,
    PODGROUP,
    QUEUE,
    HYPERNODE,
    NODESHARD,
    NUMATOPOLOGY,
    CLUSTER,
    LEASE,
    SERVICE_ACCOUNT,
    DEPLOYMENT,
    REPLICA_SET,
    BATCH_JOB,
    BATCH_CRONJOB,
    STATEFUL_SET,
    DAEMON_SET,
)


def group_versions() -> dict[str, list[Kind]]:
    """Kinds by their apiVersion string ("v1", "batch.volcano.sh/v1alpha1", ...)."""
    result: dict[str, list[Kind]] = {}
    for kind in ALL_KINDS:
        result.setdefault(kind.api_version, []).append(kind)
    return result


class UnknownKindError(LookupError):
    pass


def lookup(name: str) -> Kind:
    """Find a kind by plural, singular, kind name, short name or `plural.group` (as kubectl does)."""
    wanted = name.lower()
    resource, _, group = wanted.partition(".")
    for kind in ALL_KINDS:
        if group and kind.group != group:
            continue
        if resource in (kind.plural, kind.singular, *kind.short_names):
            return kind
    known = ", ".join(sorted({k.plural for k in ALL_KINDS}))
    raise UnknownKindError(f'unknown resource type "{name}" (known: {known})')


def for_object(api_version: str, kind_name: str) -> Kind:
    """The kind of a manifest by its apiVersion and kind."""
    for kind in ALL_KINDS:
        if kind.api_version == api_version and kind.kind == kind_name:
            return kind
    raise UnknownKindError(f'no kind "{kind_name}" is served in version "{api_version}"')
