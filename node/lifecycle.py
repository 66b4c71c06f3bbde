"""What a kubelet decides about a pod, as plain functions and records: whether a container that
ended starts again and after how long, the pod's phase from its containers' states, and the
status the API shows (containerStatuses, conditions). The local runtime and the simulated nodes
both build their statuses here, so pods look the same to the controller and to `lahar get`
wherever they ran.

A container's record is in one of three states, as in `containerStatuses[].state`:

- waiting: not started yet, or ended and due to start again (CrashLoopBackOff while backing off);
- running: an instance runs;
- terminated: the instance ended and no other will start (the restart policy says so).

So "terminated" is final, and a pod's phase follows from the records alone (`pod_phase`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lahar.api.pod import FAILED, PENDING, RUNNING, SUCCEEDED

ALWAYS, ON_FAILURE, NEVER = "Always", "OnFailure", "Never"
WAITING, RUNNING_STATE, TERMINATED = "waiting", "running", "terminated"

# Reasons as kubelet and containerd spell them.
CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
CRASH_LOOP = "CrashLoopBackOff"
CONFIG_ERROR = "CreateContainerConfigError"
COMPLETED, ERROR, OOM_KILLED = "Completed", "Error", "OOMKilled"
START_ERROR = "StartError"
STATUS_UNKNOWN = "ContainerStatusUnknown"
START_ERROR_EXIT_CODE = 128  # containerd's exit code for a process that never started
UNKNOWN_EXIT_CODE = 137  # kubelet's for a container that vanished (as if SIGKILLed)

POD_SCHEDULED, INITIALIZED, CONTAINERS_READY, READY = "PodScheduled", "Initialized", "ContainersReady", "Ready"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime(TIME_FORMAT)


def parse_rfc3339(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


# --- decisions ------------------------------------------------------------------------------------


def restart_wanted(policy: str, exit_code: int, init: bool = False) -> bool:
    """Whether a container that ended with `exit_code` starts again. An init container that
    succeeded is done whatever the policy; one that failed retries unless the policy is Never."""
    if init:
        return exit_code != 0 and policy != NEVER
    return policy == ALWAYS or (policy == ON_FAILURE and exit_code != 0)


@dataclass(frozen=True)
class RestartBackoff:
    """Delays between restarts of a container that keeps ending: the first restart is at once,
    then `initial`, doubling up to `cap`. An instance that ran `reset_after` seconds starts the
    count over. Kubelet uses 10 s, 300 s and 600 s; a local runtime is for trying things, so the
    defaults are shorter."""

    initial: float = 1.0
    cap: float = 60.0
    reset_after: float = 120.0

    def delay(self, consecutive_ends: int) -> float:
        if consecutive_ends <= 1:
            return 0.0
        return min(self.cap, self.initial * 2 ** (consecutive_ends - 2))


def exit_reason(exit_code: int, oom_killed: bool = False) -> str:
    if oom_killed:
        return OOM_KILLED
    return COMPLETED if exit_code == 0 else ERROR


def exit_code_of(returncode: int) -> int:
    """A container's exit code from a process return code: a signal N reads 128 + N, as a shell
    and every container runtime report it."""
    return returncode if returncode >= 0 else 128 - returncode


# --- records --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Terminated:
    """How one container instance ended."""

    exit_code: int
    reason: str
    finished_at: float
    started_at: float | None = None
    message: str = ""
    container_id: str = ""

    @classmethod
    def from_status(cls, state: Mapping[str, Any]) -> Terminated:
        """From a containerStatuses `terminated` entry (re-adopting a pod after a restart)."""
        finished = parse_rfc3339(state.get("finishedAt")) or 0.0
        return cls(
            int(state.get("exitCode") or 0),
            str(state.get("reason") or ""),
            finished,
            parse_rfc3339(state.get("startedAt")),
            str(state.get("message") or ""),
            str(state.get("containerID") or ""),
        )

    def to_status(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "finishedAt": rfc3339(self.finished_at),
        }
        if self.started_at is not None:
            state["startedAt"] = rfc3339(self.started_at)
        if self.message:
            state["message"] = self.message
        if self.container_id:
            state["containerID"] = self.container_id
        return state


@dataclass
class ContainerRecord:
    """One container of a pod across its instances: what containerStatuses shows of it."""

    name: str
    image: str = ""
    restart_count: int = 0
    state: str = WAITING
    waiting_reason: str = CONTAINER_CREATING
    waiting_message: str = ""
    container_id: str = ""  # of the running or latest instance
    started_at: float | None = None  # of the running instance
    last_end: Terminated | None = None  # the latest instance's end
    previous_end: Terminated | None = None  # the one before it

    @property
    def ever_started(self) -> bool:
        return self.state == RUNNING_STATE or self.last_end is not None

    @property
    def succeeded(self) -> bool:
        return self.state == TERMINATED and self.last_end is not None and self.last_end.exit_code == 0

    def start(self, container_id: str, at: float) -> None:
        if self.last_end is not None:  # a new instance after one that ended: a restart
            self.restart_count += 1
        self.state, self.container_id, self.started_at = RUNNING_STATE, container_id, at

    def end(self, terminated: Terminated, final: bool) -> None:
        """The running instance (or one that never ran: a start error) ended. Final: no other
        instance will start; otherwise the record waits for the next one."""
        self.previous_end, self.last_end = self.last_end, terminated
        self.started_at = None
        if final:
            self.state = TERMINATED
        else:
            self.wait(CONTAINER_CREATING)

    def wait(self, reason: str, message: str = "") -> None:
        self.state, self.waiting_reason, self.waiting_message = WAITING, reason, message

    def to_status(self) -> dict[str, Any]:
        """A containerStatuses entry (images are not pulled: imageID stays empty)."""
        running = self.state == RUNNING_STATE
        if running:
            state: dict[str, Any] = {"running": {"startedAt": rfc3339(self.started_at or 0.0)}}
            last = self.last_end
        elif self.state == TERMINATED and self.last_end is not None:
            state = {"terminated": self.last_end.to_status()}
            last = self.previous_end
        else:
            waiting = {"reason": self.waiting_reason}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            state = {"waiting": waiting}
            last = self.last_end
        status: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": running,
            "started": running,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": {"terminated": last.to_status()} if last is not None else {},
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


def record_for(container: Mapping[str, Any], status: Mapping[str, Any] | None = None) -> ContainerRecord:
    """A fresh record for a container spec, carrying over the restart count of its status."""
    record = ContainerRecord(str(container.get("name") or ""), str(container.get("image") or ""))
    if status:
        record.restart_count = int(status.get("restartCount") or 0)
    return record


# --- the pod --------------------------------------------------------------------------------------


def init_done(init: Sequence[ContainerRecord]) -> bool:
    return all(record.succeeded for record in init)


def pod_phase(init: Sequence[ContainerRecord], app: Sequence[ContainerRecord]) -> str:
    """Kubelet's phase rules over the records: Failed once an init container failed for good;
    Pending until the init containers are done and an app container started; Succeeded or Failed
    once every app container ended for good (all with 0, or not); Running otherwise."""
    if any(record.state == TERMINATED and not record.succeeded for record in init):
        return FAILED
    if not init_done(init) or not any(record.ever_started for record in app):
        return PENDING
    if app and all(record.state == TERMINATED for record in app):
        return SUCCEEDED if all(record.succeeded for record in app) else FAILED
    return RUNNING


def pod_conditions(
    existing: Sequence[Mapping[str, Any]], wanted: Mapping[str, bool], at: float
) -> list[dict[str, Any]]:
    """The pod's conditions with `wanted` types set True/False; others (PodScheduled, set at
    binding) are kept. A condition's lastTransitionTime changes only when its status does."""
    kept = [dict(c) for c in existing if c.get("type") not in wanted]
    old = {c.get("type"): c for c in existing}
    for condition_type, true in wanted.items():
        status = "True" if true else "False"
        previous = old.get(condition_type)
        since = previous.get("lastTransitionTime") if previous and previous.get("status") == status else None
        kept.append({"type": condition_type, "status": status, "lastTransitionTime": since or rfc3339(at)})
    return kept


def pod_status(
    pod: Mapping[str, Any],
    init: Sequence[ContainerRecord],
    app: Sequence[ContainerRecord],
    host_ip: str,
    pod_ip: str,
    start_time: float,
    at: float,
) -> dict[str, Any]:
    """The `status` a kubelet would write for the records (a merge patch of the pod's status)."""
    phase = pod_phase(init, app)
    initialized = init_done(init)
    ready = bool(app) and all(record.state == RUNNING_STATE for record in app)
    existing = (pod.get("status") or {}).get("conditions") or []
    status: dict[str, Any] = {
        "phase": phase,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": rfc3339(start_time),
        # Kubelet reports PodScheduled too: a pod created with its nodeName set never went through binding.
        "conditions": pod_conditions(
            existing, {POD_SCHEDULED: True, INITIALIZED: initialized, CONTAINERS_READY: ready, READY: ready}, at
        ),
        "containerStatuses": [record.to_status() for record in app],
    }
    if init:
        status["initContainerStatuses"] = [record.to_status() for record in init]
    return status


@dataclass
class PodRecords:
    """A pod's container records in spec order, init containers apart."""

    init: list[ContainerRecord] = field(default_factory=list)
    app: list[ContainerRecord] = field(default_factory=list)

    @classmethod
    def for_pod(cls, pod: Mapping[str, Any]) -> PodRecords:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}

        def records(list_name: str, status_name: str) -> list[ContainerRecord]:
            statuses = {s.get("name"): s for s in status.get(status_name) or []}
            return [record_for(c, statuses.get(c.get("name"))) for c in spec.get(list_name) or []]

        return cls(records("initContainers", "initContainerStatuses"), records("containers", "containerStatuses"))

    @property
    def phase(self) -> str:
        return pod_phase(self.init, self.app)
