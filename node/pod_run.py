"""One pod on the local node: its containers as processes, driven by the runtime's loop.

`sync(now)` does what is due: reap instances that ended (and whatever they left in their process
group and cgroup), decide restarts (lifecycle.restart_wanted, with backoff), start the next init
container or the app containers, and, once the pod is being deleted, SIGTERM every process group
and SIGKILL what is left after the grace period. It never blocks on a process: the loop wakes on
their pidfds. The decisions live in lifecycle.py; this module is the I/O around them."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lahar.api.pod import DEFAULT_TERMINATION_GRACE_SECONDS, TERMINAL_PHASES
from lahar.api.qos import BURSTABLE, k8s_qos_class
from lahar.api.resources import pod_requests
from lahar.client.api import Obj
from lahar.node import logs
from lahar.node.cgroups import CgroupTree, container_limits, pod_cgroup_limits
from lahar.node.lifecycle import (
    ALWAYS,
    CONFIG_ERROR,
    CRASH_LOOP,
    POD_INITIALIZING,
    START_ERROR,
    START_ERROR_EXIT_CODE,
    STATUS_UNKNOWN,
    UNKNOWN_EXIT_CODE,
    WAITING,
    ContainerRecord,
    PodRecords,
    RestartBackoff,
    Terminated,
    exit_code_of,
    exit_reason,
    parse_rfc3339,
    pod_phase,
    pod_status,
    restart_wanted,
)
from lahar.node.process import (
    JOIN_CGROUPS,
    LOCAL_IP,
    ConfigError,
    Lookup,
    StartError,
    container_argv,
    container_env,
    open_pidfd,
    signal_group,
    spawn,
)

log = logging.getLogger("lahar.node.runtime")

CONFIG_RETRY_SECONDS = 2.0  # a missing ConfigMap or Secret may appear: look again this often
CONTAINER_ID_SCHEME = "lahar://"


@dataclass
class RuntimeContext:
    """What every pod on the node shares."""

    node_name: str
    data_dir: Path
    cgroups: CgroupTree | None  # None: processes run without cgroups
    backoff: RestartBackoff
    lookup: Lookup  # reads ConfigMaps and Secrets for env references

    def work_dir(self, uid: str) -> Path:
        return self.data_dir / "pods" / uid


@dataclass
class ContainerRun:
    """A container's record and its running instance, if any."""

    spec: dict[str, Any]
    record: ContainerRecord
    init: bool
    process: subprocess.Popen[bytes] | None = None
    pidfd: int | None = None
    cgroup: str | None = None  # relative to each hierarchy
    not_before: float = 0.0  # no new instance before this (restart backoff)
    ends: int = 0  # instances that ended in a row without running `reset_after`
    env: dict[str, str] = field(default_factory=dict)  # the running instance's, for exec
    cwd: Path | None = None

    @property
    def name(self) -> str:
        return self.record.name


@dataclass(frozen=True)
class ExecTarget:
    """A running container as `kubectl exec` needs it: a command runs with the container's
    environment and working directory, inside its cgroups (apiserver/podexec.py)."""

    run: ContainerRun
    process: subprocess.Popen[bytes]
    log_path: Path
    cgroup_procs: tuple[Path, ...]

    @property
    def env(self) -> dict[str, str]:
        return dict(self.run.env)

    @property
    def cwd(self) -> Path:
        return self.run.cwd or Path("/")

    def argv(self, command: Sequence[str]) -> list[str]:
        if not self.cgroup_procs:
            return list(command)
        return ["/bin/sh", "-c", JOIN_CGROUPS, "lahar-join-cgroups", *map(str, self.cgroup_procs), "--", *command]

    def running(self) -> bool:
        """Still the same instance, not yet seen to end (only the runtime's loop reaps it)."""
        return self.run.process is self.process and self.process.returncode is None


class PodRun:
    def __init__(self, pod: Obj, context: RuntimeContext, now: float) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        self.pod = pod
        self.context = context
        self.uid: str = meta["uid"]
        self.namespace: str = meta.get("namespace") or "default"
        self.name: str = meta["name"]
        self.policy: str = spec.get("restartPolicy") or ALWAYS
        self.kube_qos: str = status.get("qosClass") or k8s_qos_class(spec)
        records = PodRecords.for_pod(pod)
        self.init = [
            ContainerRun(c, r, True) for c, r in zip(spec.get("initContainers") or [], records.init, strict=True)
        ]
        self.app = [ContainerRun(c, r, False) for c, r in zip(spec.get("containers") or [], records.app, strict=True)]
        self.start_time = parse_rfc3339(status.get("startTime")) or now
        self.log_dir = logs.pod_log_dir(context.data_dir, self.namespace, self.name, self.uid)
        self.work_dir = context.work_dir(self.uid)
        self.cgroup: str | None = None
        self.kill_at: float | None = None  # set once the pod is being deleted
        self.finalized = False  # its final delete was sent
        self.finished = False
        self.dirty = True  # the status changed since it was last taken
        self._last_status: Obj | None = None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        logs.write_manifest(self.log_dir, pod)
        if self.init:
            for run in self.app:
                run.record.wait(POD_INITIALIZING)
        self._adopt(status, now)
        self.update(pod, now)

    # --- what the loop calls -----------------------------------------------------------------------

    @property
    def containers(self) -> Iterator[ContainerRun]:
        yield from self.init
        yield from self.app

    @property
    def terminating(self) -> bool:
        return self.kill_at is not None

    @property
    def running(self) -> bool:
        return any(run.process is not None for run in self.containers)

    @property
    def phase(self) -> str:
        return pod_phase([r.record for r in self.init], [r.record for r in self.app])

    def update(self, pod: Obj, now: float) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp") and self.kill_at is None:
            self._begin_termination(now)

    def sync(self, now: float) -> None:
        self._reap(now)
        if self.kill_at is not None:
            if self.running and now >= self.kill_at:
                self._signal_all(signal.SIGKILL)
            return
        if self.finished:
            return
        self._start_due(now)
        if self.phase in TERMINAL_PHASES:
            self.finished = True
            log.info("pod %s/%s %s", self.namespace, self.name, self.phase.lower())
            self._remove_cgroups()

    def next_deadline(self, now: float) -> float | None:
        """When sync has something to do next without a process ending (a restart, a SIGKILL)."""
        if self.kill_at is not None:
            return self.kill_at if self.running else None
        waits = [
            run.not_before
            for run in self.containers
            if run.record.state == WAITING and run.process is None and run.not_before > now
        ]
        return min(waits, default=None)

    def pidfds(self) -> list[int]:
        return [run.pidfd for run in self.containers if run.pidfd is not None]

    def status(self, now: float) -> Obj | None:
        """The status to write when it changed since the last call, else None."""
        if not self.dirty:
            return None
        self.dirty = False
        # Condition times are kept against our own last status: the pod object lags behind it.
        basis = {"status": {"conditions": (self._last_status or self.pod.get("status") or {}).get("conditions") or []}}
        status = pod_status(
            basis, [r.record for r in self.init], [r.record for r in self.app], LOCAL_IP, LOCAL_IP, self.start_time, now
        )
        if status == self._last_status:
            return None
        self._last_status = status
        return status

    def terminate(self) -> None:
        """SIGTERM every container's process group (the runtime is stopping)."""
        self._signal_all(signal.SIGTERM)

    def stop(self, deadline: float, clock: Callable[[], float]) -> None:
        """After terminate(): wait for the processes until `deadline`, SIGKILL the rest, reap them
        and remove the cgroups. The pod object is left as it is (see LocalNode.stop)."""
        for run in self.containers:
            if run.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.process.wait(max(0.0, deadline - clock()))
        self.forget(keep_files=True)

    def forget(self, keep_files: bool = False) -> None:
        """Kill whatever still runs and remove the cgroups; the logs and scratch directory too
        unless `keep_files` (the pod object is gone, as kubelet cleans up)."""
        self._signal_all(signal.SIGKILL)
        for run in self.containers:
            if run.process is not None:
                run.process.wait()
                self._release(run)
        self._remove_cgroups()
        if not keep_files:
            remove_pod_files(self.context, self.namespace, self.name, self.uid)

    # --- starting ----------------------------------------------------------------------------------

    def _start_due(self, now: float) -> None:
        for run in self.init:  # one at a time, in order: the first not done yet, if it is due
            if run.record.succeeded:
                continue
            if run.record.state == WAITING and run.process is None and now >= run.not_before:
                self._start(run, now)
            return
        for run in self.app:
            if run.record.state == WAITING and run.process is None and now >= run.not_before:
                self._start(run, now)

    def _start(self, run: ContainerRun, now: float) -> None:
        self.dirty = True
        container_id = secrets.token_hex(16)
        try:
            env = container_env(self.pod, run.spec, self.context.lookup)
            argv = container_argv(run.spec, env)
            cwd = self._working_dir(run.spec)
            procs = self._container_cgroup(run, container_id)
            process = spawn(argv, env, cwd, logs.container_log(self.log_dir, run.name), procs)
            run.env, run.cwd = env, cwd
        except ConfigError as exc:
            run.record.wait(CONFIG_ERROR, str(exc))
            run.not_before = now + CONFIG_RETRY_SECONDS
            log.warning("pod %s/%s container %s: %s", self.namespace, self.name, run.name, exc)
            return
        except (StartError, OSError) as exc:
            message = str(exc) if isinstance(exc, StartError) else f"cannot start the process: {exc}"
            self._write_log_line(run, message)
            self._remove_container_cgroup(run)
            self._ended(
                run,
                Terminated(START_ERROR_EXIT_CODE, START_ERROR, now, now, message, CONTAINER_ID_SCHEME + container_id),
                now,
            )
            return
        run.process, run.pidfd = process, open_pidfd(process.pid)
        run.record.start(CONTAINER_ID_SCHEME + container_id, now)
        logs.running_marker(self.log_dir, run.name).write_text(str(process.pid))
        log.info("pod %s/%s container %s started (pid %d)", self.namespace, self.name, run.name, process.pid)

    def _working_dir(self, spec: dict[str, Any]) -> Path:
        wanted = spec.get("workingDir")
        if not wanted:
            return self.work_dir
        if not Path(wanted).is_dir():
            raise StartError(f"workingDir {wanted} does not exist on this machine (images are not pulled)")
        return Path(wanted)

    def _container_cgroup(self, run: ContainerRun, container_id: str) -> list[Path]:
        cgroups = self.context.cgroups
        if cgroups is None:
            return []
        if self.cgroup is None:
            path = cgroups.pod_path(self.uid, self.kube_qos)
            cgroups.create(path, pod_cgroup_limits(self.pod))
            self.cgroup = path
        run.cgroup = f"{self.cgroup}/{container_id}"
        cgroups.create(run.cgroup, container_limits(run.spec))
        return cgroups.procs_files(run.cgroup)

    def _write_log_line(self, run: ContainerRun, message: str) -> None:
        try:
            with open(logs.container_log(self.log_dir, run.name), "a") as log_file:
                log_file.write(f"lahar: {message}\n")
        except OSError:
            pass

    # --- ending ------------------------------------------------------------------------------------

    def _reap(self, now: float) -> None:
        for run in self.containers:
            if run.process is None:
                continue
            returncode = run.process.poll()
            if returncode is None:
                continue
            oom = bool(run.cgroup and self.context.cgroups and self.context.cgroups.oom_killed(run.cgroup))
            started_at = run.record.started_at
            self._release(run)
            terminated = Terminated(
                exit_code_of(returncode),
                exit_reason(exit_code_of(returncode), oom),
                now,
                started_at,
                container_id=run.record.container_id,
            )
            self._ended(run, terminated, now)

    def _release(self, run: ContainerRun) -> None:
        """The instance's main process was reaped: what it left in its process group and cgroup dies
        with it (as in a container, whose processes end with its first one)."""
        assert run.process is not None
        signal_group(run.process.pid, signal.SIGKILL)
        self._remove_container_cgroup(run)
        if run.pidfd is not None:
            _close(run.pidfd)
        run.process = run.pidfd = None
        logs.running_marker(self.log_dir, run.name).unlink(missing_ok=True)
        self.dirty = True

    def _ended(self, run: ContainerRun, terminated: Terminated, now: float) -> None:
        final = self.kill_at is not None or not restart_wanted(self.policy, terminated.exit_code, run.init)
        ran = terminated.finished_at - terminated.started_at if terminated.started_at is not None else 0.0
        run.ends = 1 if ran >= self.context.backoff.reset_after else run.ends + 1
        run.record.end(terminated, final)
        self.dirty = True
        if final:
            return
        delay = self.context.backoff.delay(run.ends)
        run.not_before = now + delay
        if delay > 0:
            run.record.wait(
                CRASH_LOOP,
                f"back-off {delay:g}s restarting failed container={run.name} "
                f"pod={self.name}_{self.namespace}({self.uid})",
            )

    def _adopt(self, status: dict[str, Any], now: float) -> None:
        """A pod this runtime ran before it restarted: its processes are gone. Containers the status
        shows ended keep that end; ones it shows running ended unseen (exit 137,
        ContainerStatusUnknown); either way the restart policy decides what runs again."""
        statuses = {
            s.get("name"): s
            for s in (*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or []))
        }
        for run in self.containers:
            container_status = statuses.get(run.name) or {}
            state = container_status.get("state") or {}
            last = (container_status.get("lastState") or {}).get("terminated")
            if last and "terminated" not in state:  # it had ended before: the next start is a restart
                run.record.last_end = Terminated.from_status(last)
            if "terminated" in state:
                self._ended(run, Terminated.from_status(state["terminated"]), now)
            elif "running" in state:
                since = parse_rfc3339(state["running"].get("startedAt"))
                self._ended(
                    run,
                    Terminated(
                        UNKNOWN_EXIT_CODE,
                        STATUS_UNKNOWN,
                        now,
                        since,
                        "the container was gone when lahar up started again",
                    ),
                    now,
                )

    def _begin_termination(self, now: float) -> None:
        meta, spec = self.pod["metadata"], self.pod.get("spec") or {}
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_SECONDS)
        self.kill_at = now + max(0, int(grace))
        log.info("pod %s/%s is being deleted: stopping its containers (grace %ss)", self.namespace, self.name, grace)
        self._signal_all(signal.SIGTERM if grace else signal.SIGKILL)

    def _signal_all(self, sig: signal.Signals) -> None:
        for run in self.containers:
            if run.process is not None:
                signal_group(run.process.pid, sig)
                if sig == signal.SIGKILL and run.cgroup and self.context.cgroups:
                    self.context.cgroups.kill(run.cgroup)  # what left the group (setsid) is still in the cgroup

    # --- cgroups -----------------------------------------------------------------------------------

    def _remove_container_cgroup(self, run: ContainerRun) -> None:
        self._remove_cgroup(run.cgroup)
        run.cgroup = None

    def _remove_cgroups(self) -> None:
        self._remove_cgroup(self.cgroup)
        self.cgroup = None

    def _remove_cgroup(self, path: str | None) -> None:
        if path and self.context.cgroups:
            try:
                self.context.cgroups.remove(path)
            except OSError as exc:
                log.warning("pod %s/%s: %s", self.namespace, self.name, exc)

    @property
    def burstable_cpu_millis(self) -> int:
        """Its share of the burstable level's cpu.shares while it holds a cgroup there."""
        if self.kube_qos != BURSTABLE or self.cgroup is None:
            return 0
        return pod_requests(self.pod).get("cpu")


def remove_pod_files(context: RuntimeContext, namespace: str, name: str, uid: str) -> None:
    """A deleted pod's logs and scratch directory go with it, as kubelet removes them."""
    for directory in (logs.pod_log_dir(context.data_dir, namespace, name, uid), context.work_dir(uid)):
        shutil.rmtree(directory, ignore_errors=True)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def exec_target(run: PodRun, container: str) -> ExecTarget | None:
    """The running app container `container` of a pod, as exec needs it; None when not running."""
    for container_run in run.app:
        process = container_run.process
        if container_run.name != container or process is None:
            continue
        cgroups = run.context.cgroups
        procs = tuple(cgroups.procs_files(container_run.cgroup)) if cgroups and container_run.cgroup else ()
        return ExecTarget(container_run, process, logs.container_log(run.log_dir, container), procs)
    return None
