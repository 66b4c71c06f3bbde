"""`lahar federation member`: the fence on a member cluster's side (fence.py says what it decides).

Every `period` seconds it reads the hub's Lease in this member and the Jobs the federation made
here; once it has seen no renewal of the lease for the lease's duration, timed on this process's
monotonic clock (fence.py: no hub time is compared with a member's), it aborts each unfinished
copy (with Lahar's controller the `lahar.dev/command: AbortJob` annotation, with Volcano's a
`bus.volcano.sh` Command AbortJob: the member's controller removes the pods, as for `lahar job
suspend`) and marks it fenced, with a Warning event. It talks to this member's API server
alone: it keeps working when the hub cannot reach the member, which is when it matters."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from lahar.api.kinds import JOB, LEASE, VOLCANO_COMMAND
from lahar.client.api import KubeApi
from lahar.client.errors import KubeError, NotFound
from lahar.client.events import EventRecorder, ObjectRef
from lahar.federation import names
from lahar.federation.fence import (
    CONTROLLERS,
    LAHAR,
    VOLCANO,
    LeaseView,
    abort_command,
    fence_patch,
    fence_reason,
    observe,
    to_fence,
)

log = logging.getLogger("lahar.federation.member")


class MemberFence:
    def __init__(
        self,
        api: KubeApi,
        period: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        controller: str = LAHAR,
    ) -> None:
        if controller not in CONTROLLERS:
            raise ValueError(f"controller must be one of {', '.join(CONTROLLERS)}, not {controller!r}")
        self.api = api
        self.controller = controller  # the member's job controller: how a copy is stopped (fence.py)
        self.period = period
        self.clock = clock  # times the lease: only its rate matters, never compared with the hub's
        self.wall_clock = wall_clock  # for the fenced annotation, for people
        self.view: LeaseView | None = None  # the lease as last read (None: not read yet)
        self.events = EventRecorder(api, "lahar-federation-member")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_check_at = 0.0  # when the API last answered a check (health)
        self.fenced = 0  # copies stopped so far

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="federation-member", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def healthy(self) -> tuple[bool, str]:
        if self._thread is None or not self._thread.is_alive():
            return False, "the fence loop is not running"
        if self.clock() - self.last_check_at > max(30.0, 10 * self.period):
            return False, "this member's API server has not answered lately"
        return True, "ok"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check_once()
            except KubeError as exc:  # this member's own API server: it answers again, or nothing runs
                log.warning("fence check failed: %s", exc)
            except Exception:  # a bug in one check must not end the fence
                log.exception("fence check failed")
            self._stop.wait(self.period)

    def check_once(self) -> list[dict[str, Any]]:
        """One look: the copies stopped now (each patched and told)."""
        read_at = self.clock()  # before the read: a renewal seen later was written after this
        try:
            lease: dict[str, Any] | None = self.api.get(LEASE, names.LEASE_NAME, names.LEASE_NAMESPACE)
        except NotFound:
            lease = None
        self.view = view = observe(self.view, lease, read_at)
        jobs = self.api.list_all(JOB, label_selector=names.HUB_UID_LABEL)["items"]
        self.last_check_at = self.clock()
        stopped = []
        for job in to_fence(view, jobs):
            metadata = job["metadata"]
            namespace = metadata.get("namespace") or "default"
            # A newer copy of the same name cannot appear meanwhile: the hub makes one only after
            # renewing the lease, and then this copy is not chosen.
            reason = fence_reason(view)
            patch = fence_patch(self.wall_clock(), reason, self.controller)
            try:
                if self.controller == VOLCANO:  # the Command first: a copy marked fenced is stopped
                    self.api.create(VOLCANO_COMMAND, abort_command(job, reason), namespace)
                updated = self.api.patch(JOB, metadata["name"], patch, namespace)
            except KubeError as exc:
                log.warning("could not stop %s/%s: %s", namespace, metadata["name"], exc)
                continue
            message = patch["metadata"]["annotations"][names.FENCED_ANNOTATION]
            log.warning("stopped %s/%s: %s", namespace, metadata["name"], message)
            about = ObjectRef(JOB, namespace, metadata["name"], metadata.get("uid") or "")
            self.events.record(about, "Warning", names.EVENT_FENCED, f"stopped: {message}")
            self.fenced += 1
            stopped.append(updated)
        return stopped
