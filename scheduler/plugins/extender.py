"""extender: an HTTP scheduler extender asked about the session's decisions (Volcano's extender
plugin, same arguments and the same JSON on the wire, so an extender written for Volcano works).

Each configured verb is a POST of JSON to `<extender.urlPrefix>/<verb>`; a verb left out is not
asked. The request and answer shapes are Volcano's (`TaskInfo`, `NodeInfo`, `JobInfo`, `QueueInfo`
as Go's encoding/json writes them: `UID`, `Name`, `Resreq{MilliCPU, Memory, ScalarResources}`,
`Pod`/`Node` as the Kubernetes objects, ...):

- `onSessionOpenVerb` (`{Jobs, Nodes, Queues, NamespaceInfo, RevocableNodes, NodeList}`, answer
  ignored; `RevocableNodes` are the nodes labelled `volcano.sh/revocable-zone`, `NamespaceInfo`
  is empty: Lahar keeps no namespace weights) once when the session opens; when it fails and
  the extender is not `ignorable`, the plugin registers nothing else this session (as Volcano);
- `predicateVerb` (`{task, node}` -> `{status, code}`): per task and node; a non-empty `status`
  refuses the node with that reason;
- `prioritizeVerb` (`{task, nodes}` -> `{nodeScore: {name: score}, errorMessage}`): per task, the
  scores add to the other plugins'; an `errorMessage` (or no `nodeScore`) leaves the task
  unplaced this turn, as Volcano's PrioritizeNodes then returns no node;
- `preemptableVerb`, `reclaimableVerb` (`{evictor, evictees}` -> `{status, victims}`): `status` 0
  abstains, otherwise the victims (matched by `UID` among the candidates) are this plugin's vote
  in its tier;
- `jobEnqueueableVerb` (`{job}` -> `{status}`: 1 permit, 0 abstain, -1 reject),
  `jobEnqueuedVerb` (`{job}`, a notification), `queueOverusedVerb` (`{queue}` -> `{overused}`),
  `jobReadyVerb` (`{job}` -> `{status}`);
- `allocateFuncVerb` (`{task}` -> `{errorMessage}`) when a task is allocated or pipelined (and
  when an eviction is undone): an `errorMessage` (or a failed call of an extender that is not
  ignorable) undoes that placement, and the action goes on without it, as Volcano's statement
  rolls an allocation back on an event handler's error; `deallocateFuncVerb` (`{task}`) when a
  placement is undone or a task evicted (its answer changes nothing, as in Volcano);
- `onSessionCloseVerb` (`{}`) when the session closes.

`extender.managedResources` (a list, or names separated by commas): when given, only pods that
request or limit one of them (in a container or an init container) are asked about, as
Kubernetes' extenders' `IsInterested`; the others are left to the other plugins.

A call fails when the extender cannot be reached, gives no answer within `extender.httpTimeout`
(Go's duration notation, 1s by default), answers other than 200, or with a body that is not JSON
or larger than 10 MiB. What a failure means is Volcano's, and depends on `extender.ignorable`:

| verb | ignorable | not ignorable |
|---|---|---|
| predicate | node passes | node refused |
| prioritize | no scores from the extender | task not placed this turn |
| preemptable, reclaimable | its tier chooses no victims (a later tier decides) | the same |
| jobEnqueueable | permit | reject |
| queueOverused, jobReady | not overused / ready | overused / not ready |
| allocateFunc | placement kept | placement undone |

Every failure is counted (`lahar_scheduler_outside_calls_total{plugin="extender",result="failed"}`)
and the first one per verb in a session is logged with the URL, the cause and its consequence.
Unlike Volcano, once the extender could not be reached (refused, timed out, unresolvable) the rest
of the session does not try it again: each call would wait the timeout again (a predicate is one
call per node), and the answers are those of failed calls either way; the next session tries anew.

The calls are the plugin's only I/O (`ExtenderClient`); what an answer means is decided by the
plain functions below (`predicate_refusal`, `node_scores`, `victims`, ...). Answers may change
with nothing in the cluster changed, so the scheduler does not skip cycles of a session that asked
the extender (`Session.read_reports`), and a task the extender is asked about is its own class,
scored afresh on every node each time it is considered (Volcano asks every time too).
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

import numpy as np

from lahar.scheduler.framework.plugin import (
    Arguments,
    ConfError,
    Plugin,
    boolean,
    go_duration,
    register_plugin,
    text,
)
from lahar.scheduler.framework.session import ABSTAIN, PERMIT, REJECT, Session
from lahar.scheduler.model import JobInfo, NodeTable, QueueInfo, Resources, Rows, TaskInfo, TaskStatus

log = logging.getLogger("lahar.scheduler.extender")

PLUGIN = "extender"
URL_PREFIX = "extender.urlPrefix"
HTTP_TIMEOUT = "extender.httpTimeout"
IGNORABLE = "extender.ignorable"
MANAGED_RESOURCES = "extender.managedResources"
ON_SESSION_OPEN = "extender.onSessionOpenVerb"
ON_SESSION_CLOSE = "extender.onSessionCloseVerb"
PREDICATE = "extender.predicateVerb"
PRIORITIZE = "extender.prioritizeVerb"
PREEMPTABLE = "extender.preemptableVerb"
RECLAIMABLE = "extender.reclaimableVerb"
QUEUE_OVERUSED = "extender.queueOverusedVerb"
JOB_ENQUEUEABLE = "extender.jobEnqueueableVerb"
JOB_ENQUEUED = "extender.jobEnqueuedVerb"
JOB_READY = "extender.jobReadyVerb"
ALLOCATE_FUNC = "extender.allocateFuncVerb"
DEALLOCATE_FUNC = "extender.deallocateFuncVerb"
VERBS = (
    ON_SESSION_OPEN,
    ON_SESSION_CLOSE,
    PREDICATE,
    PRIORITIZE,
    PREEMPTABLE,
    RECLAIMABLE,
    QUEUE_OVERUSED,
    JOB_ENQUEUEABLE,
    JOB_ENQUEUED,
    JOB_READY,
    ALLOCATE_FUNC,
    DEALLOCATE_FUNC,
)
REVOCABLE_ZONE = "volcano.sh/revocable-zone"  # the node label of Volcano's revocable nodes (tdm)
DEFAULT_TIMEOUT = 1.0  # seconds, Volcano's
MAX_BODY = 10 << 20  # the largest answer read, Volcano's

# Volcano's TaskStatus bits (api/types.go: Pending = 1 << iota, ...) and NodePhase values.
_STATUS_BITS = {status: 1 << i for i, status in enumerate(TaskStatus)}
_NODE_READY, _NODE_NOT_READY = 1, 2
_PREDICATE_ERROR = 1  # Volcano's api.Error: a refusal that gave no code


class ExtenderError(Exception):
    """A call that got no usable answer; `unreachable` when the extender could not be reached."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


Answer = Any  # the extender's decoded JSON, or an ExtenderError when the call failed


# -- arguments -----------------------------------------------------------------------------------


def url_prefix(value: Any) -> str:
    url = text(value)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, not {value!r}")
    try:
        parts.port  # noqa: B018 (urlsplit checks the port only when asked)
    except ValueError:
        raise ValueError(f"has a bad port: {value!r}") from None
    return url


def http_timeout(value: Any) -> float:
    seconds = go_duration(value)
    if seconds <= 0:
        raise ValueError(f"must be a positive duration such as 100ms, not {value!r}")
    return seconds


def verb(value: Any) -> str:
    name = text(value).strip("/")
    if not name or any(c.isspace() for c in name):
        raise ValueError(f"must be a URL path segment such as predicate, not {value!r}")
    return name


def resource_names(value: Any) -> frozenset[str]:
    """A list of resource names, or one string of names separated by commas."""
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"must be a list of resource names, not {value!r}")
    cleaned = [name.strip() for name in names]
    if any(not name for name in cleaned):
        raise ValueError(f"must not hold an empty resource name: {value!r}")
    return frozenset(cleaned)


# -- which pods the extender is asked about (Kubernetes' and Volcano's IsInterested) -------------


def has_resources_in_list(resources: Mapping[str, Any] | None, managed: Iterable[str]) -> bool:
    """Whether a resource list names one of the managed resources."""
    managed = frozenset(managed)
    return any(name in managed for name in resources or {})


def has_managed_resources(containers: Sequence[Mapping[str, Any]] | None, managed: Iterable[str]) -> bool:
    """Whether a container requests or limits one of the managed resources."""
    managed = frozenset(managed)
    for container in containers or ():
        resources = container.get("resources") or {}
        if has_resources_in_list(resources.get("requests"), managed) or has_resources_in_list(
            resources.get("limits"), managed
        ):
            return True
    return False


def is_interested(pod_spec: Mapping[str, Any], managed: Iterable[str]) -> bool:
    """Whether the extender is asked about a pod: always without managed resources, else when
    a container or an init container asks for one."""
    managed = frozenset(managed)
    if not managed:
        return True
    return has_managed_resources(pod_spec.get("containers"), managed) or has_managed_resources(
        pod_spec.get("initContainers"), managed
    )


# -- the wire format: Volcano's api types as Go's encoding/json writes them ----------------------


def resource_json(resources: Resources, vector: np.ndarray) -> dict[str, Any]:
    """Volcano's api.Resource: millicores, bytes of memory, the pod count apart, and every other
    resource in thousandths (Volcano keeps scalar resources as milli-values)."""
    scalars: dict[str, float] = {}
    document: dict[str, Any] = {"MilliCPU": 0.0, "Memory": 0.0, "ScalarResources": scalars, "MaxTaskNum": 0}
    for name, amount in zip(resources.names, vector.tolist(), strict=True):
        if name == "cpu":
            document["MilliCPU"] = float(amount)
        elif name == "memory":
            document["Memory"] = float(amount)
        elif name == "pods":
            document["MaxTaskNum"] = int(amount)
        elif amount:
            scalars[name] = float(amount) * 1000
    return document


def task_json(task: TaskInfo, resources: Resources) -> dict[str, Any]:
    request = resource_json(resources, task.request)
    return {
        "UID": task.uid,
        "Job": task.job,
        "Name": task.name,
        "Namespace": task.namespace,
        "TaskRole": task.task_name,
        "Resreq": request,
        "InitResreq": request,
        "NodeName": task.node,
        "Status": _STATUS_BITS[task.status],
        "Priority": task.priority,
        "Preemptable": task.preemptable,
        "BestEffort": task.best_effort,
        "Pod": task.pod.raw,
    }


def node_json(nodes: NodeTable, row: int) -> dict[str, Any]:
    resources = nodes.resources
    tasks = nodes.tasks[row]
    pipelined = np.zeros(len(resources), dtype=np.int64)
    for task in tasks.values():
        if task.status is TaskStatus.PIPELINED:
            pipelined += task.request
    used = nodes.used[row] + nodes.be_used[row]
    allocatable = resource_json(resources, nodes.allocatable[row])
    return {
        "Name": nodes.names[row],
        "Node": nodes.nodes[row].raw,
        "State": {"Phase": _NODE_READY if nodes.schedulable[row] else _NODE_NOT_READY, "Reason": ""},
        "Releasing": resource_json(resources, nodes.releasing[row] + nodes.be_releasing[row]),
        "Pipelined": resource_json(resources, pipelined),
        "Idle": resource_json(resources, nodes.allocatable[row] - used),
        "Used": resource_json(resources, used),
        "Allocatable": allocatable,
        "Capacity": allocatable,
        "Tasks": {uid: task_json(task, resources) for uid, task in tasks.items()},
    }


def job_json(job: JobInfo, resources: Resources) -> dict[str, Any]:
    total = np.zeros(len(resources), dtype=np.int64)
    for task in job.tasks.values():
        total += task.request
    podgroup = None if job.podgroup is None else {**job.podgroup.raw, "Version": "v1beta1"}
    return {
        "UID": job.key,
        "Name": job.name,
        "Namespace": job.namespace,
        "Queue": job.queue,
        "Priority": job.priority,
        "MinAvailable": job.min_member,
        "TaskMinAvailable": dict(job.min_task_member),
        "Tasks": {uid: task_json(task, resources) for uid, task in job.tasks.items()},
        "Allocated": resource_json(resources, job.allocated),
        "TotalRequest": resource_json(resources, total),
        "CreationTimestamp": job.creation or None,
        "PodGroup": podgroup,
        "Preemptable": job.preemptable,
    }


def queue_json(queue: QueueInfo) -> dict[str, Any]:
    return {
        "UID": queue.name,
        "Name": queue.name,
        "Weight": queue.weight,
        "Weights": "",
        "Hierarchy": "",
        "Queue": None if queue.queue is None else queue.queue.raw,
    }


# -- what the answers mean (plain functions: no I/O) ---------------------------------------------


def predicate_refusal(answer: Answer, ignorable: bool) -> str | None:
    """Why the extender refuses the node, or None when the node passes."""
    if isinstance(answer, ExtenderError):
        return None if ignorable else f"extender: {answer}"
    if not isinstance(answer, Mapping):
        return None if ignorable else "extender: a predicate answer must be a JSON object"
    message = answer.get("status")
    if not message:
        return None
    code = answer.get("code") or _PREDICATE_ERROR  # an old extender gives a message and no code
    return f"extender: {message} (code {code})"


def node_scores(answer: Answer, ignorable: bool, names: Sequence[str]) -> np.ndarray:
    """Each named node's score from the extender (0 where it gives none); -inf everywhere when
    the task must not be placed this turn (a failed call of an extender that is not ignorable,
    or an answer carrying an error: Volcano's prioritize then returns no node)."""
    if isinstance(answer, ExtenderError):
        return np.zeros(len(names)) if ignorable else np.full(len(names), -np.inf)
    scores = answer.get("nodeScore") if isinstance(answer, Mapping) else None
    if not isinstance(scores, Mapping) or (isinstance(answer, Mapping) and answer.get("errorMessage")):
        return np.full(len(names), -np.inf)
    found = np.zeros(len(names))
    for i, name in enumerate(names):
        value = scores.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
            found[i] = float(value)
    return found


def victims(answer: Answer, candidates: Sequence[TaskInfo]) -> list[TaskInfo] | None:
    """The candidates the extender lets go (None: it abstains). A failed call gives no victims,
    ignorable or not: Volcano answers Permit or Reject without victims, and either leaves its
    tier without victims, so a later tier decides."""
    if isinstance(answer, ExtenderError) or not isinstance(answer, Mapping):
        return []
    status = answer.get("status")
    if not status:
        return None
    chosen = {victim.get("UID") for victim in answer.get("victims") or () if isinstance(victim, Mapping)}
    return [task for task in candidates if task.uid in chosen]


def enqueueable(answer: Answer, ignorable: bool) -> int:
    if isinstance(answer, ExtenderError) or not isinstance(answer, Mapping):
        return PERMIT if ignorable else REJECT
    status = answer.get("status")
    if not isinstance(status, int) or isinstance(status, bool):
        return PERMIT if ignorable else REJECT
    return PERMIT if status > 0 else REJECT if status < 0 else ABSTAIN


def placement_refusal(answer: Answer, ignorable: bool) -> str | None:
    """Why the extender will not have a placement it was told of, or None: an `errorMessage`
    always refuses (as Volcano's event handler sets the error whatever `ignorable`), a failed call
    only when the extender is not ignorable."""
    if isinstance(answer, ExtenderError):
        return None if ignorable else f"extender: {answer}"
    message = answer.get("errorMessage") if isinstance(answer, Mapping) else None
    return f"extender: {message}" if message else None


def flag(answer: Answer, key: str, on_failure: bool) -> bool:
    """A yes/no answer (`overused`, a job's readiness `status`); `on_failure` when there is none."""
    if isinstance(answer, ExtenderError) or not isinstance(answer, Mapping):
        return on_failure
    value = answer.get(key)
    return value if isinstance(value, bool) else on_failure


# -- the I/O -------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """json.dumps's fallback: the API's read-only mappings and sequences as plain ones."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"cannot send {type(value).__name__} to the extender")


class ExtenderClient:
    """POSTs JSON to `<url_prefix>/<verb>` over one kept-alive connection and decodes the answer.
    After a call that could not reach the extender, later calls fail at once (`down`)."""

    def __init__(self, url_prefix: str, timeout: float, max_body: int = MAX_BODY) -> None:
        parts = urlsplit(url_prefix)
        self.url_prefix = url_prefix.rstrip("/")
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "", parts.port
        self._path = parts.path.rstrip("/")
        self.timeout = timeout
        self.max_body = max_body
        self._connection: http.client.HTTPConnection | None = None
        self.down: str | None = None  # why the extender is taken as unreachable, once it is

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._connection = kind(self._host, self._port, timeout=self.timeout)
        return self._connection

    def post(self, verb: str, payload: Any) -> Any:
        url = f"{self.url_prefix}/{verb}"
        if self.down is not None:
            raise ExtenderError(
                f"POST {url}: not tried, the extender was unreachable earlier this session ({self.down})"
            )
        body = json.dumps(payload, default=_plain, separators=(",", ":")).encode()
        started = time.monotonic()
        reused = self._connection is not None
        try:
            status, data = self._exchange(verb, body)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            if not reused:  # a fresh connection the extender dropped: a failed call
                raise self._failed(url, exc) from None
            # The extender closed a kept-alive connection between calls: once more on a new one.
            try:
                status, data = self._exchange(verb, body)
            except (OSError, http.client.HTTPException) as again:
                raise self._failed(url, again) from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._failed(url, exc) from None
        if time.monotonic() - started > self.timeout:
            self.close()
            self.down = f"no answer within {self.timeout:g}s"
            raise ExtenderError(f"POST {url}: {self.down}", unreachable=True)
        if status != 200:
            raise ExtenderError(f"POST {url}: the extender answered HTTP {status}")
        if len(data) > self.max_body:
            raise ExtenderError(f"POST {url}: answer larger than {self.max_body} bytes (request body too large)")
        try:
            return json.loads(data) if data.strip() else None
        except ValueError as exc:
            raise ExtenderError(f"POST {url}: the answer is not JSON ({exc})") from None

    def _exchange(self, verb: str, body: bytes) -> tuple[int, bytes]:
        connection = self._connect()
        try:
            connection.request(
                "POST", f"{self._path}/{verb}", body, {"Content-Type": "application/json", "Accept": "application/json"}
            )
            response = connection.getresponse()
            data = response.read(self.max_body + 1)
            if len(data) > self.max_body or not response.isclosed():
                self.close()  # an answer left unread: the connection cannot carry the next one
            elif response.will_close:
                self.close()
            return response.status, data
        except BaseException:
            self.close()
            raise

    def _failed(self, url: str, exc: BaseException) -> ExtenderError:
        unreachable = isinstance(exc, (TimeoutError, socket.timeout, ConnectionError, socket.gaierror))
        reason = "timed out" if isinstance(exc, (TimeoutError, socket.timeout)) else str(exc) or type(exc).__name__
        if unreachable:
            self.down = reason
        return ExtenderError(f"POST {url}: {reason}", unreachable=unreachable)


# -- the plugin ----------------------------------------------------------------------------------

_CONSEQUENCES = {
    ON_SESSION_OPEN: ("the plugin goes on", "the plugin asks nothing more this session"),
    PREDICATE: ("nodes pass its predicate", "nodes are refused"),
    PRIORITIZE: ("no scores from the extender", "tasks are not placed this turn"),
    PREEMPTABLE: ("its tier chooses no victims", "its tier chooses no victims"),
    RECLAIMABLE: ("its tier chooses no victims", "its tier chooses no victims"),
    JOB_ENQUEUEABLE: ("jobs are admitted", "jobs are not admitted"),
    QUEUE_OVERUSED: ("queues are not overused", "queues count as overused"),
    JOB_READY: ("jobs count as ready", "jobs count as not ready"),
    JOB_ENQUEUED: ("nothing else", "nothing else"),
    ALLOCATE_FUNC: ("placements are kept", "placements are undone"),
    DEALLOCATE_FUNC: ("nothing else", "nothing else"),
    ON_SESSION_CLOSE: ("nothing else", "nothing else"),
}


@register_plugin
class Extender(Plugin):
    name = PLUGIN
    ARGUMENTS: ClassVar[Arguments] = {
        URL_PREFIX: url_prefix,
        HTTP_TIMEOUT: http_timeout,
        IGNORABLE: boolean,
        MANAGED_RESOURCES: resource_names,
        **dict.fromkeys(VERBS, verb),
    }

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        super().__init__(arguments)
        if URL_PREFIX not in self.arguments:
            raise ConfError(f"plugin {PLUGIN}: argument {URL_PREFIX!r} is required (such as http://127.0.0.1:8888)")
        self.ignorable = bool(self.argument(IGNORABLE, False))
        self.managed: frozenset[str] = self.argument(MANAGED_RESOURCES, frozenset())
        self._interest: dict[str, bool] = {}  # per placement class: pods of a class ask alike
        self._logged: set[str] = set()
        self._refusals: tuple[str, np.ndarray, list[str | None]] | None = None
        self._placements_refused: dict[str, str] = {}  # task uid -> why, until the session asks

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.resources = session.resources
        self.client = ExtenderClient(self.arguments[URL_PREFIX], float(self.argument(HTTP_TIMEOUT, DEFAULT_TIMEOUT)))
        if ON_SESSION_OPEN in self.arguments:
            opened = self._ask(ON_SESSION_OPEN, self._session_payload(session))
            if isinstance(opened, ExtenderError) and not self.ignorable:
                return
        if PREDICATE in self.arguments or PRIORITIZE in self.arguments:
            # The extender's answers are about the task itself, and may change with any placement.
            session.add_class_key_fn(lambda task: task.uid if self.interested(task) else None, volatile=self.interested)
        if PREDICATE in self.arguments:
            session.add_predicate_fn(self.predicate, self.explain, applies=self.interested)
        if PRIORITIZE in self.arguments:
            session.add_node_order_fn(self.prioritize, applies=self.interested)
        if PREEMPTABLE in self.arguments:
            session.add_preemptable_fn(lambda evictor, evictees: self._victims(PREEMPTABLE, evictor, evictees))
        if RECLAIMABLE in self.arguments:
            session.add_reclaimable_fn(lambda evictor, evictees: self._victims(RECLAIMABLE, evictor, evictees))
        if JOB_ENQUEUEABLE in self.arguments:
            session.add_job_enqueueable_fn(
                lambda job: enqueueable(self._ask(JOB_ENQUEUEABLE, {"job": self._job(job)}), self.ignorable)
            )
        if JOB_ENQUEUED in self.arguments:
            session.add_job_enqueued_fn(lambda job: self._notify(JOB_ENQUEUED, {"job": self._job(job)}))
        if QUEUE_OVERUSED in self.arguments:
            session.add_overused_fn(
                lambda queue: flag(
                    self._ask(QUEUE_OVERUSED, {"queue": queue_json(queue)}), "overused", not self.ignorable
                )
            )
        if JOB_READY in self.arguments:
            session.add_job_ready_fn(
                lambda job: flag(self._ask(JOB_READY, {"job": self._job(job)}), "status", self.ignorable)
            )
        if ALLOCATE_FUNC in self.arguments or DEALLOCATE_FUNC in self.arguments:
            session.add_event_handler(
                self.allocated if ALLOCATE_FUNC in self.arguments else None,
                self.deallocated if DEALLOCATE_FUNC in self.arguments else None,
            )
        if ALLOCATE_FUNC in self.arguments:
            session.add_placement_check_fn(lambda task: self._placements_refused.pop(task.uid, None))

    def on_session_close(self, session: Session) -> None:
        if ON_SESSION_CLOSE in self.arguments:
            self._notify(ON_SESSION_CLOSE, {})
        failed = {call: count for (plugin, call), count in session.outside_failures.items() if plugin == PLUGIN}
        if sum(failed.values()) > len(self._logged):
            log.warning(
                "extender %s: %d calls failed this session (%s)",
                self.client.url_prefix,
                sum(failed.values()),
                ", ".join(f"{call}: {count}" for call, count in sorted(failed.items())),
            )
        self.client.close()

    # -- callbacks -------------------------------------------------------------------------------

    def interested(self, task: TaskInfo) -> bool:
        found = self._interest.get(task.placement)
        if found is None:
            found = self._interest[task.placement] = is_interested(task.pod.spec, self.managed)
        return found

    def _worth_asking(self, task: TaskInfo, nodes: NodeTable, asked: np.ndarray) -> np.ndarray:
        """Which of the rows `asked` are worth a call: the rest are refused whatever the
        extender says (not schedulable, or the task does not fit), so asking would only cost."""
        return nodes.schedulable[asked] & nodes.fits(task, asked, self.session.be_capacity)

    def predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        asked = np.arange(len(nodes))[rows]
        passed = np.ones(len(asked), dtype=bool)
        refusals: list[str | None] = [None] * len(asked)
        payload_task = task_json(task, self.resources)
        for i in np.flatnonzero(self._worth_asking(task, nodes, asked)).tolist():
            answer = self._ask(PREDICATE, {"task": payload_task, "node": node_json(nodes, int(asked[i]))})
            refusal = predicate_refusal(answer, self.ignorable)
            if refusal is not None:
                passed[i], refusals[i] = False, refusal
        self._refusals = (task.uid, asked, refusals)
        return passed

    def explain(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        """The reasons of the latest predicate call for the task (the session asks the predicate
        about every node just before), counted over schedulable nodes."""
        reasons: Counter[str] = Counter()
        if self._refusals is None or self._refusals[0] != task.uid:
            return reasons
        _, asked, refusals = self._refusals
        for row, refusal in zip(asked.tolist(), refusals, strict=True):
            if refusal is not None and nodes.schedulable[row]:
                reasons[refusal] += 1
        return reasons

    def prioritize(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        asked = np.arange(len(nodes))[rows]
        scores = np.zeros(len(asked))
        worth = self._worth_asking(task, nodes, asked)
        if not worth.any():
            return scores
        candidates = asked[worth].tolist()
        payload = {
            "task": task_json(task, self.resources),
            "nodes": [node_json(nodes, row) for row in candidates],
        }
        found = node_scores(self._ask(PRIORITIZE, payload), self.ignorable, [nodes.names[row] for row in candidates])
        if np.isneginf(found).all():
            return np.full(len(asked), -np.inf)
        scores[worth] = found
        return scores

    def allocated(self, task: TaskInfo) -> None:
        """Tell the extender of a placement (or an eviction undone); keep its refusal of a
        placement for the session's placement check, which undoes it."""
        if not self.interested(task):
            return
        refusal = placement_refusal(self._ask(ALLOCATE_FUNC, {"task": task_json(task, self.resources)}), self.ignorable)
        if refusal is not None and task.status in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED):
            self._placements_refused[task.uid] = refusal

    def deallocated(self, task: TaskInfo) -> None:
        if self.interested(task):
            self._notify(DEALLOCATE_FUNC, {"task": task_json(task, self.resources)})

    def _victims(self, call: str, evictor: TaskInfo, evictees: list[TaskInfo]) -> list[TaskInfo] | None:
        if not self.interested(evictor):
            return None
        payload = {
            "evictor": task_json(evictor, self.resources),
            "evictees": [task_json(task, self.resources) for task in evictees],
        }
        return victims(self._ask(call, payload), evictees)

    # -- calls -----------------------------------------------------------------------------------

    def _job(self, job: JobInfo) -> dict[str, Any]:
        return job_json(job, self.resources)

    def _session_payload(self, session: Session) -> dict[str, Any]:
        nodes = session.nodes
        return {
            "Jobs": {key: job_json(job, self.resources) for key, job in session.jobs.items()},
            "Nodes": {nodes.names[row]: node_json(nodes, row) for row in range(len(nodes))},
            "Queues": {name: queue_json(queue) for name, queue in session.queues.items()},
            "NamespaceInfo": {},  # Volcano's namespace weights: Lahar keeps none
            "RevocableNodes": {
                nodes.names[row]: node_json(nodes, row)
                for row in range(len(nodes))
                if REVOCABLE_ZONE in nodes.labels[row]
            },
            "NodeList": list(nodes.names),
        }

    def _ask(self, call: str, payload: Any) -> Answer:
        """The extender's answer to one call, or the ExtenderError it failed with (counted, and
        logged the first time per verb in the session)."""
        session, key = self.session, (PLUGIN, self.arguments[call])
        session.outside_calls[key] += 1
        try:
            return self.client.post(self.arguments[call], payload)
        except ExtenderError as exc:
            session.outside_failures[key] += 1
            if call not in self._logged:
                self._logged.add(call)
                if_ignorable, otherwise = _CONSEQUENCES[call]
                log.warning(
                    "extender %s failed: %s; %s",
                    call.removeprefix("extender."),
                    exc,
                    f"ignorable, so {if_ignorable}" if self.ignorable else f"not ignorable, so {otherwise}",
                )
            return exc

    def _notify(self, call: str, payload: Any) -> None:
        self._ask(call, payload)
