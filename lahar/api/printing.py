"""How objects print as rows: columns per kind (priority-1 columns only with `-o wide`).

One definition serves the embedded server's `meta.k8s.io/v1 Table` answers (what `kubectl get`
asks for) and `lahar get`, so both show the same columns."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from lahar.api import kinds
from lahar.api.kinds import Kind

Cell = Callable[[dict[str, Any]], Any]


def human_age(created: str | None, now: float | None = None) -> str:
    """kubectl's short age format: 45s, 5m30s, 3h, 2d4h, 200d."""
    if not created:
        return "<unknown>"
    then = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    seconds = max(int((time.time() if now is None else now) - then), 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d" if days < 730 else f"{days // 365}y"


def _get(obj: dict[str, Any], path: str, default: Any = "") -> Any:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


def _pod_ready(pod: dict[str, Any]) -> str:
    containers = _get(pod, "spec.containers", []) or []
    statuses = _get(pod, "status.containerStatuses", []) or []
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(containers)}"


def _pod_status(pod: dict[str, Any]) -> str:
    if _get(pod, "metadata.deletionTimestamp"):
        return "Terminating"
    return _get(pod, "status.reason") or _get(pod, "status.phase") or "Pending"


def _pod_restarts(pod: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount", 0)) for s in _get(pod, "status.containerStatuses", []) or [])


def _node_status(node: dict[str, Any]) -> str:
    ready = next((c for c in _get(node, "status.conditions", []) or [] if c.get("type") == "Ready"), None)
    state = "Ready" if ready and ready.get("status") == "True" else ("NotReady" if ready else "Unknown")
    return state + (",SchedulingDisabled" if _get(node, "spec.unschedulable", False) else "")


def _node_roles(node: dict[str, Any]) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = [key[len(prefix) :] for key in (_get(node, "metadata.labels", {}) or {}) if key.startswith(prefix)]
    return ",".join(sorted(roles)) or "<none>"


def _path(path: str, default: Any = "") -> Cell:
    return lambda obj: _get(obj, path, default)


def _selector_text(selector: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items())) or "<none>"


def _job_status(job: dict[str, Any]) -> str:
    """kubectl's Job STATUS: the finished condition, else Suspended or Running."""
    for condition in _get(job, "status.conditions", []) or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return str(condition["type"])
    return "Suspended" if _get(job, "spec.suspend", False) else "Running"


def _job_completions(job: dict[str, Any]) -> str:
    succeeded, completions = _get(job, "status.succeeded", 0), _get(job, "spec.completions", None)
    if completions is None:  # a work queue: kubectl shows how many of parallelism succeeded
        return f"{succeeded}/1 of {_get(job, 'spec.parallelism', 1)}"
    return f"{succeeded}/{completions}"


def _job_duration(job: dict[str, Any]) -> str:
    start = _get(job, "status.startTime", None)
    if not start:
        return ""
    end = _get(job, "status.completionTime", None)
    if not end:
        return human_age(start)
    finished = datetime.strptime(end, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    return human_age(start, finished)


def _since(moment: str | None) -> str:
    return human_age(moment) if moment else "<none>"


def _readiness_gates(pod: dict[str, Any]) -> str:
    gates = _get(pod, "spec.readinessGates", []) or []
    if not gates:
        return "<none>"
    conditions = {c.get("type"): c.get("status") for c in _get(pod, "status.conditions", []) or []}
    return f"{sum(1 for g in gates if conditions.get(g.get('conditionType')) == 'True')}/{len(gates)}"


def _containers(field: str) -> Cell:
    return lambda o: ",".join(str(c.get(field, "")) for c in _get(o, "spec.template.spec.containers", []) or [])


def _selector(obj: dict[str, Any]) -> str:
    labels = _get(obj, "spec.selector.matchLabels", {}) or {}
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items())) or "<none>"


_WORKLOAD_WIDE: list[tuple[str, str, int, Cell]] = [
    ("Containers", "string", 1, _containers("name")),
    ("Images", "string", 1, _containers("image")),
    ("Selector", "string", 1, _selector),
]

# (name, type, priority, cell) per kind; Name first and Age are added for every kind (see columns()).
COLUMNS: dict[Kind, list[tuple[str, str, int, Cell]]] = {
    kinds.POD: [
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "integer", 0, _pod_restarts),
        ("IP", "string", 1, _path("status.podIP", "<none>")),
        ("Node", "string", 1, _path("spec.nodeName", "<none>")),
        ("Nominated Node", "string", 1, _path("status.nominatedNodeName", "<none>")),
        ("Readiness Gates", "string", 1, _readiness_gates),
    ],
    kinds.NODE: [
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        ("Version", "string", 0, _path("status.nodeInfo.kubeletVersion")),
    ],
    kinds.NAMESPACE: [("Status", "string", 0, _path("status.phase"))],
    kinds.JOB: [
        ("Status", "string", 0, _path("status.state.phase", "Pending")),
        ("MinAvailable", "integer", 0, _path("spec.minAvailable", 0)),
        ("Running", "integer", 0, _path("status.running", 0)),
        ("Queue", "string", 1, _path("spec.queue")),
    ],
    kinds.PODGROUP: [
        ("Status", "string", 0, _path("status.phase", "Pending")),
        ("MinMember", "integer", 0, _path("spec.minMember", 0)),
        ("Running", "integer", 0, _path("status.running", 0)),
        ("Queue", "string", 1, _path("spec.queue")),
    ],
    kinds.QUEUE: [
        ("Weight", "integer", 0, _path("spec.weight", 1)),
        ("State", "string", 0, _path("status.state", "Open")),
        ("Parent", "string", 1, _path("spec.parent", "root")),
    ],
    kinds.HYPERNODE: [("Tier", "integer", 0, _path("spec.tier", 0))],
    kinds.CLUSTER: [
        ("Endpoint", "string", 0, _path("spec.endpoint")),
        ("Reachable", "boolean", 0, _path("status.reachable", False)),
        ("Heartbeat", "string", 1, _path("status.lastHeartbeatTime", "<none>")),
    ],
    kinds.SERVICE: [
        ("Type", "string", 0, _path("spec.type", "ClusterIP")),
        ("Cluster-IP", "string", 0, _path("spec.clusterIP", "None")),
    ],
    kinds.LEASE: [("Holder", "string", 0, _path("spec.holderIdentity"))],
    kinds.CONFIGMAP: [("Data", "integer", 0, lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}))],
    kinds.SECRET: [("Type", "string", 0, _path("type")), ("Data", "integer", 0, lambda o: len(o.get("data") or {}))],
    kinds.SERVICE_ACCOUNT: [("Secrets", "integer", 0, lambda o: len(o.get("secrets") or []))],
    kinds.DEPLOYMENT: [
        ("Ready", "string", 0, lambda o: f"{_get(o, 'status.readyReplicas', 0)}/{_get(o, 'spec.replicas', 0)}"),
        ("Up-to-date", "integer", 0, _path("status.updatedReplicas", 0)),
        ("Available", "integer", 0, _path("status.availableReplicas", 0)),
        *_WORKLOAD_WIDE,
    ],
    kinds.REPLICA_SET: [
        ("Desired", "integer", 0, _path("spec.replicas", 0)),
        ("Current", "integer", 0, _path("status.replicas", 0)),
        ("Ready", "integer", 0, _path("status.readyReplicas", 0)),
        *_WORKLOAD_WIDE,
    ],
    kinds.STATEFUL_SET: [
        ("Ready", "string", 0, lambda o: f"{_get(o, 'status.readyReplicas', 0)}/{_get(o, 'spec.replicas', 0)}"),
        *_WORKLOAD_WIDE,
    ],
    kinds.DAEMON_SET: [
        ("Desired", "integer", 0, _path("status.desiredNumberScheduled", 0)),
        ("Current", "integer", 0, _path("status.currentNumberScheduled", 0)),
        ("Ready", "integer", 0, _path("status.numberReady", 0)),
        ("Up-to-date", "integer", 0, _path("status.updatedNumberScheduled", 0)),
        ("Available", "integer", 0, _path("status.numberAvailable", 0)),
        ("Node Selector", "string", 0, lambda o: _selector_text(_get(o, "spec.template.spec.nodeSelector", {}))),
        *_WORKLOAD_WIDE,
    ],
    kinds.BATCH_JOB: [
        ("Status", "string", 0, lambda o: _job_status(o)),
        ("Completions", "string", 0, lambda o: _job_completions(o)),
        ("Duration", "string", 0, lambda o: _job_duration(o)),
        *_WORKLOAD_WIDE,
    ],
    kinds.BATCH_CRONJOB: [
        ("Schedule", "string", 0, _path("spec.schedule")),
        ("Timezone", "string", 0, _path("spec.timeZone", "<none>")),
        ("Suspend", "boolean", 0, _path("spec.suspend", False)),
        ("Active", "integer", 0, lambda o: len(_get(o, "status.active", []) or [])),
        ("Last Schedule", "string", 0, lambda o: _since(_get(o, "status.lastScheduleTime"))),
    ],
    kinds.EVENT: [
        ("Type", "string", 0, _path("type")),
        ("Reason", "string", 0, _path("reason")),
        ("Object", "string", 0, lambda e: f"{_get(e, 'involvedObject.kind').lower()}/{_get(e, 'involvedObject.name')}"),
        ("Message", "string", 0, _path("message")),
    ],
}


def columns(kind: Kind) -> list[tuple[str, str, int, Cell]]:
    own = COLUMNS.get(kind, [])
    age: tuple[str, str, int, Cell] = ("Age", "string", 0, lambda o: human_age(_get(o, "metadata.creationTimestamp")))
    name: tuple[str, str, int, Cell] = ("Name", "string", 0, _path("metadata.name"))
    if kind.group in (kinds.VOLCANO_BATCH, kinds.VOLCANO_SCHEDULING):
        return [name, *own, age]  # the CRDs' additionalPrinterColumns order: Age last
    # Built-in kinds as kube-apiserver prints them: `-o wide` columns after Age.
    return [name, *(c for c in own if c[2] == 0), age, *(c for c in own if c[2] != 0)]


def aligned(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """kubectl-style columns: each as wide as its widest cell, three spaces apart."""
    lines = [[str(cell) for cell in line] for line in [header, *rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return (
        "\n".join(
            "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines
        )
        + "\n"
    )


def text_table(kind: Kind, objects: Iterable[dict[str, Any]], wide: bool = False, with_namespace: bool = False) -> str:
    """A kind's columns as kubectl prints them: upper-case headers, `-o wide` adds priority 1."""
    shown = [c for c in columns(kind) if wide or c[2] == 0]
    header = ["NAMESPACE"] * with_namespace + [name.upper() for name, *_ in shown]
    rows = ([_get(obj, "metadata.namespace")] * with_namespace + [cell(obj) for *_, cell in shown] for obj in objects)
    return aligned(header, rows)


def table(
    kind: Kind, objects: Iterable[dict[str, Any]], resource_version: str, include_object: bool, continue_token: str = ""
) -> dict[str, Any]:
    """A `meta.k8s.io/v1 Table`."""
    all_columns = columns(kind)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [cell(obj) for *_, cell in all_columns]}
        if include_object:
            row["object"] = obj
        else:
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        rows.append(row)
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {
                "name": name,
                "type": type_,
                "format": "name" if name == "Name" else "",
                "description": name,
                "priority": priority,
            }
            for name, type_, priority, _ in all_columns
        ],
        "rows": rows,
    }
