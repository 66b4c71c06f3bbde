"""LocalNode: a kubelet for `lahar up`. It registers this machine as a Node (its real CPUs and
memory, 110 pods, Ready with a heartbeat), watches the pods bound to it, and runs their containers
as local processes (pod_run.py) in kubelet's cgroup layout under a Lahar parent (cgroups.py), with
real statuses, restarts and logs.

Three threads: the informer's (pods with spec.nodeName=<node>), the runtime loop (every pod's
state machine; it sleeps until a process exits, a pod changes or a timer is due) and the API
writer (statuses, final deletes, heartbeats; never in the loop's way when the API is slow).

Deletion and eviction: the loop SIGTERMs each container's process group, SIGKILLs what is left
after the grace period, then deletes the pod object with grace 0 (kubelet's final delete) and
removes its cgroups, logs and scratch directory.

Stop: every process it started is killed (SIGTERM, `stop_grace`, SIGKILL) and its cgroups
removed; the pod objects stay as they are and the Node turns NotReady. A later start re-adopts
them: a container the status shows running is gone, so it ended unseen (exit 137,
ContainerStatusUnknown) and its pod's restartPolicy decides: Always and OnFailure start it again
(restartCount + 1), Never leaves the pod Failed. Containers that had ended keep their exit; init
containers that had succeeded do not run again."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from lahar.agent.qos.knobs import milli_to_shares
from lahar.api import kinds
from lahar.api.pod import TERMINAL_PHASES
from lahar.api.qos import BURSTABLE
from lahar.client.api import KubeApi, Obj
from lahar.client.errors import NotFound
from lahar.client.informer import DELETED, Informer
from lahar.node import node_object
from lahar.node.api_writer import ApiWriter
from lahar.node.cgroups import CGROUP_ROOT, DEFAULT_PARENT, CgroupLimits, CgroupsUnavailable, CgroupTree
from lahar.node.lifecycle import RestartBackoff
from lahar.node.pod_run import ExecTarget, PodRun, RuntimeContext, exec_target, remove_pod_files
from lahar.node.process import LOCAL_IP, open_pidfd

log = logging.getLogger("lahar.node.runtime")

CGROUPS_CONDITION = "CgroupsAvailable"
CGROUP_PARENT_ANNOTATION = "lahar.dev/cgroup-parent"
DEFAULT_HEARTBEAT_SECONDS = 10.0
DEFAULT_STOP_GRACE_SECONDS = 5.0
MAX_SLEEP_SECONDS = 1.0  # the loop looks at its processes at least this often
NO_PIDFD_SLEEP_SECONDS = 0.1  # without pidfds (old kernels) exits are noticed by polling


class LocalNode:
    def __init__(
        self,
        api: KubeApi,
        data_dir: Path,
        node_name: str | None = None,
        cgroup_parent: str = DEFAULT_PARENT,
        *,
        cgroup_root: Path = CGROUP_ROOT,
        use_cgroups: bool = True,
        labels: dict[str, str] | None = None,
        restart_backoff: RestartBackoff | None = None,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_SECONDS,
        stop_grace: float = DEFAULT_STOP_GRACE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.data_dir = Path(data_dir)
        self.node_name = node_name or node_object.local_node_name()
        self.extra_labels = dict(labels or {})
        self.heartbeat_interval = heartbeat_interval
        self.stop_grace = stop_grace
        self.clock = clock
        self.cgroups: CgroupTree | None = CgroupTree(cgroup_root, cgroup_parent) if use_cgroups else None
        self.cgroups_problem = "" if use_cgroups else "cgroups turned off"
        self.context = RuntimeContext(
            self.node_name,
            self.data_dir,
            None,
            restart_backoff or RestartBackoff(),
            lambda kind, namespace, name: api.get(kind, name, namespace),
        )
        self.writer = ApiWriter(f"node-{self.node_name}")
        self.informer = Informer(
            kinds.POD,
            api,
            field_selector=f"spec.nodeName={self.node_name}",
            on_add=lambda pod: self._enqueue("ADDED", pod),
            on_update=lambda _old, pod: self._enqueue("MODIFIED", pod),
            on_delete=lambda pod: self._enqueue(DELETED, pod),
        )
        self._runs: dict[str, PodRun] = {}  # by pod uid; only the loop thread touches it
        self._events: deque[tuple[str, Obj]] = deque()
        self._wake_read = self._wake_write = -1  # a pipe while started: informer events wake the loop
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._burstable_millis = 0
        self._closed = True
        probe = open_pidfd(os.getpid())
        self._pidfds = probe is not None  # else process exits are noticed by polling
        if probe is not None:
            os.close(probe)

    def exec_target(self, namespace: str, name: str, container: str) -> ExecTarget | None:
        """A running container of a pod on this node, for `kubectl exec` and `attach` (called from
        the API server's thread: it reads a snapshot of the runs)."""
        for run in dict(self._runs).values():
            if run.namespace == namespace and run.name == name and not run.finished:
                return exec_target(run, container)
        return None

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Set up cgroups (or say why not), register the Node, start the threads. Raises the
        API's error when the Node cannot be registered."""
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "pods").mkdir(parents=True, exist_ok=True)
        self._setup_cgroups()
        try:
            node_object.register(self.api, self._node(self.clock(), ready=True))
        except BaseException:
            self._teardown_cgroups()
            raise
        log.info(
            "node %s registered (%s CPUs, %s memory); pods run as local processes%s",
            self.node_name,
            node_object.local_cpus(),
            node_object.local_capacity()["memory"],
            f" in cgroups under {self.context.cgroups.top}" if self.context.cgroups else " without cgroups",
        )
        self._stopping.clear()
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._closed = False
        self.writer.start()
        self._thread = threading.Thread(target=self._loop, name=f"lahar-node-{self.node_name}", daemon=True)
        self._thread.start()
        self.informer.start()

    def stop(self) -> None:
        """Kill every process this runtime started and remove its cgroups; pod objects stay, the
        Node turns NotReady."""
        if self._thread is None:
            return
        self.informer.stop()
        self._stopping.set()
        self._wake()
        self._thread.join()
        self._thread = None
        self.writer.submit(("node", self.node_name), lambda: self._post_node_status(ready=False))
        self.writer.stop(flush_timeout=5.0)
        self._closed = True
        os.close(self._wake_read)
        os.close(self._wake_write)

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self.informer.wait_for_sync(timeout)

    # --- cgroups and the Node --------------------------------------------------------------------

    def _setup_cgroups(self) -> None:
        if self.cgroups is None:
            return
        try:
            self.cgroups.teardown()  # what a runtime that crashed left: its processes are orphans
            self.cgroups.setup(node_object.local_cpus() * 1000)
        except (CgroupsUnavailable, OSError) as exc:
            self.cgroups_problem = str(exc)
            log.warning("node %s: pods run without cgroups (no QoS for them): %s", self.node_name, exc)
            return
        self.context.cgroups = self.cgroups

    def _teardown_cgroups(self) -> None:
        if self.context.cgroups is not None:
            try:
                self.context.cgroups.teardown()
            except OSError as exc:
                log.warning("node %s: %s", self.node_name, exc)

    def _conditions(self, at: float, ready: bool) -> list[dict[str, str]]:
        if self.context.cgroups is not None:
            cgroups = node_object.condition(
                CGROUPS_CONDITION, True, "CgroupsWritable", f"pods run in cgroups under {self.context.cgroups.top}", at
            )
        else:
            cgroups = node_object.condition(
                CGROUPS_CONDITION, False, "CgroupsUnavailable", f"pods run without cgroups: {self.cgroups_problem}", at
            )
        return [node_object.ready_condition(ready, at), cgroups]

    def _node(self, at: float, ready: bool) -> Obj:
        labels = {**node_object.base_labels(self.node_name), node_object.LOCAL_LABEL: "true", **self.extra_labels}
        annotations = {CGROUP_PARENT_ANNOTATION: self.context.cgroups.top} if self.context.cgroups else {}
        return node_object.node_object(
            self.node_name, labels, node_object.local_capacity(), self._conditions(at, ready), LOCAL_IP, annotations
        )

    def _post_node_status(self, ready: bool) -> None:
        """A heartbeat: fresh condition times (kept transition times); a Node deleted meanwhile is
        registered again, as kubelet does."""
        now = self.clock()
        try:
            current = self.api.get(kinds.NODE, self.node_name)
        except NotFound:
            node_object.register(self.api, self._node(now, ready))
            return
        conditions = node_object.keep_transition_times(
            self._conditions(now, ready), (current.get("status") or {}).get("conditions") or []
        )
        self.api.patch(kinds.NODE, self.node_name, {"status": {"conditions": conditions}}, subresource="status")

    # --- the loop --------------------------------------------------------------------------------

    def _enqueue(self, event: str, pod: Obj) -> None:
        self._events.append((event, pod))
        self._wake()

    def _wake(self) -> None:
        if self._closed:
            return
        # the pipe is full (a wake-up is pending anyway) or closed (stopping)
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_write, b"x")

    def _loop(self) -> None:
        next_heartbeat = self.clock() + self.heartbeat_interval
        try:
            while not self._stopping.is_set():
                now = self.clock()
                try:
                    self._handle_events(now)
                    self._sync_pods(now)
                except Exception:  # one pod's surprise must not stop the node
                    log.exception("node %s: runtime loop failed; carrying on", self.node_name)
                if now >= next_heartbeat:
                    self.writer.submit(("node", self.node_name), lambda: self._post_node_status(ready=True))
                    next_heartbeat = now + self.heartbeat_interval
                self._sleep(min(self._next_deadline(now), next_heartbeat) - now)
        finally:
            self._shutdown()

    def _handle_events(self, now: float) -> None:
        while self._events:
            event, pod = self._events.popleft()
            meta = pod.get("metadata") or {}
            uid = meta.get("uid", "")
            run = self._runs.get(uid)
            if event == DELETED:
                self._runs.pop(uid, None)
                if run is not None:
                    run.forget()
                else:
                    remove_pod_files(self.context, meta.get("namespace", ""), meta.get("name", ""), uid)
                continue
            if run is not None:
                run.update(pod, now)
            elif (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
                self._runs[uid] = PodRun(pod, self.context, now)

    def _sync_pods(self, now: float) -> None:
        for uid, run in list(self._runs.items()):
            run.sync(now)
            if run.terminating:
                if not run.running:
                    self._finalize(run)
                continue
            status = run.status(now)
            if status is not None:
                self.writer.submit(uid, _status_write(self.api, run, status))
        self._update_burstable_shares()

    def _finalize(self, run: PodRun) -> None:
        """Kubelet's last word on a deleted pod: the object goes (grace 0, this uid only)."""
        if run.finalized:
            return
        run.finalized = True
        api, namespace, name, uid = self.api, run.namespace, run.name, run.uid
        self.writer.submit(uid, lambda: api.delete(kinds.POD, name, namespace, grace_period_seconds=0, uid=uid))

    def _update_burstable_shares(self) -> None:
        """Kubelet gives the burstable level the sum of its pods' CPU requests as shares."""
        cgroups = self.context.cgroups
        if cgroups is None:
            return
        millis = sum(run.burstable_cpu_millis for run in self._runs.values())
        if millis != self._burstable_millis:
            try:
                cgroups.apply(cgroups.layout.qos_dir(BURSTABLE), CgroupLimits(milli_to_shares(millis)))
                self._burstable_millis = millis
            except OSError as exc:
                log.warning("node %s: cannot set the burstable level's cpu shares: %s", self.node_name, exc)

    def _next_deadline(self, now: float) -> float:
        deadlines = [d for run in self._runs.values() if (d := run.next_deadline(now)) is not None]
        cap = MAX_SLEEP_SECONDS if self._pidfds else NO_PIDFD_SLEEP_SECONDS
        return min([now + cap, *deadlines])

    def _sleep(self, seconds: float) -> None:
        """Until a pod event, a process exit (its pidfd turns readable) or `seconds` pass."""
        poller = select.poll()
        poller.register(self._wake_read, select.POLLIN)
        for run in self._runs.values():
            for fd in run.pidfds():
                poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(seconds * 1000)))
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass

    def _shutdown(self) -> None:
        """The loop's last act: stop every process, remove every cgroup."""
        runs, self._runs = list(self._runs.values()), {}
        for run in runs:
            run.terminate()
        deadline = self.clock() + self.stop_grace
        for run in runs:
            run.stop(deadline, self.clock)
        self._teardown_cgroups()
        log.info("node %s stopped: %d pods' processes ended, pod objects left as they were", self.node_name, len(runs))


def _status_write(api: KubeApi, run: PodRun, status: Obj) -> Callable[[], object]:
    # The uid in the patch is a precondition: a pod re-created under the name is left alone.
    patch = {"metadata": {"uid": run.uid}, "status": status}
    return lambda: api.patch(kinds.POD, run.name, patch, run.namespace, subresource="status")
