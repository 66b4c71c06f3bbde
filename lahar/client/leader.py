"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it, so
that two replicas of the scheduler or the controller never act at the same time.

The rules (client-go's, kept so the timings mean what kube's flags mean):
- a candidate takes the Lease when it does not exist, has no holder, or its record has not changed
  for `lease_duration` as measured on the candidate's own clock since it first saw that record
  (renewTime is never compared with the local clock, so clock skew between nodes does not matter);
- writes are updates with the read resourceVersion: of two candidates racing, one gets 409;
- the leader renews every `retry_period`; when no renewal has succeeded for `renew_deadline` it
  stops leading at once (`on_stopped_leading`), which comes before any standby may take over
  (`lease_duration` > `renew_deadline`);
- a leader stopping cleanly releases the Lease (no holder, 1 s) so a standby takes over at once.

The decisions are plain functions (`lease_valid`, `record_to_write`); `LeaderElector` is the loop
that reads and writes through KubeApi (the official client as transport).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lahar.api.kinds import LEASE
from lahar.api.lease import micro_time
from lahar.client.api import KubeApi
from lahar.client.errors import Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

# kube's defaults (--leader-elect-lease-duration, -renew-deadline, -retry-period).
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
# client-go's JitterFactor: waits between tries are retry_period * [1, 1.2).
JITTER_FACTOR = 1.2
# What a released Lease says: no holder, expired a second later (client-go's release).
RELEASED_DURATION_SECONDS = 1


@dataclass(frozen=True)
class ElectionConfig:
    lease_name: str
    lease_namespace: str
    identity: str
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD

    def __post_init__(self) -> None:
        problems = election_config_problems(self)
        if problems:
            raise ValueError("leader election: " + "; ".join(problems))


def election_config_problems(config: ElectionConfig) -> list[str]:
    """client-go's checks: a standby must never see a lease expire before its leader gave up."""
    problems = []
    for name, value in (
        ("lease duration", config.lease_duration),
        ("renew deadline", config.renew_deadline),
        ("retry period", config.retry_period),
    ):
        if value <= 0:
            problems.append(f"{name} must be positive, not {value}")
    if config.lease_duration <= config.renew_deadline:
        problems.append(
            f"lease duration ({config.lease_duration}s) must be greater than the renew deadline "
            f"({config.renew_deadline}s)"
        )
    if config.renew_deadline <= JITTER_FACTOR * config.retry_period:
        problems.append(
            f"renew deadline ({config.renew_deadline}s) must be greater than {JITTER_FACTOR} x the retry "
            f"period ({config.retry_period}s)"
        )
    if not config.lease_name:
        problems.append("the lease needs a name")
    if not config.lease_namespace:
        problems.append("the lease needs a namespace")
    if not config.identity:
        problems.append("the candidate needs an identity")
    return problems


def default_identity() -> str:
    """Unique per process: the host (the pod's name in a cluster) and a random suffix, as kube's
    components use (hostname_uuid), so a restarted pod is a new candidate."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


# --- decisions ----------------------------------------------------------------------------------


def lease_valid(spec: Mapping[str, Any], observed_at: float, now: float) -> bool:
    """Whether a record first seen at `observed_at` (local monotonic clock) still binds others."""
    duration = spec.get("leaseDurationSeconds") or 0
    return bool(spec.get("holderIdentity")) and observed_at + duration > now


def record_to_write(
    current: Mapping[str, Any] | None, identity: str, lease_duration: float, observed_at: float, now: float, wall: float
) -> dict[str, Any] | None:
    """The Lease spec this candidate should write, or None when another holder's lease is valid.
    `current` is the Lease's spec (None when there is no Lease yet)."""
    stamp = micro_time(wall)
    seconds = max(1, round(lease_duration))
    if current is None:
        return {
            "holderIdentity": identity,
            "leaseDurationSeconds": seconds,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        }
    holder = current.get("holderIdentity") or ""
    if holder != identity and lease_valid(current, observed_at, now):
        return None
    transitions = current.get("leaseTransitions") or 0
    if holder == identity:
        acquired = current.get("acquireTime") or stamp
    else:
        acquired, transitions = stamp, transitions + 1
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": seconds,
        "acquireTime": acquired,
        "renewTime": stamp,
        "leaseTransitions": transitions,
    }


# --- the loop -----------------------------------------------------------------------------------


class LeaderElector:
    """Campaigns for a Lease in a thread of its own; calls `on_started_leading` once it holds it
    and `on_stopped_leading` the moment it may no longer act (renewal failed for the renew
    deadline, another holder took the Lease, or `stop()`). An elector leads once: after losing
    the Lease it does not campaign again (a process that lost leadership should exit and come
    back as a new candidate, as kube's components do)."""

    def __init__(
        self,
        api: KubeApi,
        config: ElectionConfig,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        on_new_leader: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        # Every call must end before the renew deadline can pass unnoticed.
        self.api = KubeApi(api.api_client, timeout=max(0.5, min(config.retry_period, config.renew_deadline / 2)))
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.monotonic = monotonic
        self.wall = wall
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._observed: dict[str, Any] | None = None  # the Lease's last read spec
        self._observed_version = ""
        self._observed_at = 0.0
        self._last_renew: float | None = None  # monotonic time of the last successful write while leading
        self._leading = False
        self._ever_led = False
        self._stopped_called = False
        self.leader = ""  # the holder last seen

    # -- queries -------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """Holding the Lease now: also false once the renew deadline has passed without a renewal,
        even before the loop has noticed (a caller may check this before acting)."""
        with self._lock:
            if not self._leading or self._last_renew is None:
                return False
            return self.monotonic() - self._last_renew < self.config.renew_deadline

    def health(self) -> tuple[bool, str]:
        """For /healthz: a standby is healthy; a leader whose renewal is overdue is not."""
        if self.is_leader():
            return True, f"leading ({self.config.lease_namespace}/{self.config.lease_name})"
        if self._ever_led:
            return False, "lost the leader lease"
        return True, f"standby: the lease is held by {self.leader or 'nobody yet'}"

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="leader-elector", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning or leading; a leader releases the Lease (unless `release` is false)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.config.retry_period * 2 + self.api.timeout * 2)
        was_leading = self._leading
        self._lose("stopping")
        if release and was_leading:
            self._release()

    def run(self) -> None:
        """Campaign, then lead until the Lease is lost or `stop()` is called (blocks)."""
        try:
            if self._acquire():
                self._renew_until_lost()
        except Exception:  # a dead elector must not leave a leader acting without a Lease
            log.exception("leader election failed")
            self._lose("the elector failed")

    # -- internals -----------------------------------------------------------------------------

    def _wait(self) -> bool:
        """Sleep one jittered retry period; true when asked to stop meanwhile."""
        return self._stop.wait(self.config.retry_period * random.uniform(1.0, JITTER_FACTOR))

    def _acquire(self) -> bool:
        log.info("%s campaigning for lease %s/%s", self.config.identity, *self._lease_key())
        while not self._stop.is_set():
            if self._try_acquire_or_renew():
                with self._lock:
                    self._leading = self._ever_led = True
                log.info("%s became the leader", self.config.identity)
                self.on_started_leading()
                return True
            if self._wait():
                break
        return False

    def _renew_until_lost(self) -> None:
        while not self._stop.is_set():
            if self._wait():
                return
            while not self._try_acquire_or_renew():
                if not self.is_leader():  # renew deadline passed, or another holder took it
                    self._lose(f"no renewal for {self.config.renew_deadline}s or the lease was taken")
                    return
                if self._stop.wait(self.config.retry_period / 2):
                    return

    def _lose(self, why: str) -> None:
        with self._lock:
            self._leading = False
            first = self._ever_led and not self._stopped_called
            self._stopped_called = self._stopped_called or self._ever_led
        if first:
            log.warning("%s stopped leading: %s", self.config.identity, why)
            self.on_stopped_leading()

    def _lease_key(self) -> tuple[str, str]:
        return self.config.lease_namespace, self.config.lease_name

    def _observe(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        spec = dict(lease.get("spec") or {})
        if spec != self._observed:
            self._observed, self._observed_at = spec, self.monotonic()
            holder = spec.get("holderIdentity") or ""
            if holder != self.leader:
                self.leader = holder
                if holder and self.on_new_leader is not None:
                    self.on_new_leader(holder)
        self._observed_version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        return spec

    def _try_acquire_or_renew(self) -> bool:
        namespace, name = self._lease_key()
        try:
            lease = self.api.get(LEASE, name, namespace)
        except NotFound:
            lease = None
        except KubeError as exc:
            log.info("reading lease %s/%s: %s", namespace, name, exc)
            return False
        current = self._observe(lease) if lease is not None else None
        started = self.monotonic()
        spec = record_to_write(
            current, self.config.identity, self.config.lease_duration, self._observed_at, started, self.wall()
        )
        if spec is None:
            if self._leading:  # someone else holds a valid lease: we lost it
                with self._lock:
                    self._last_renew = None
            return False
        body: dict[str, Any] = {"apiVersion": LEASE.api_version, "kind": LEASE.kind, "spec": spec}
        try:
            if lease is None:
                body["metadata"] = {"name": name, "namespace": namespace}
                written = self.api.create(LEASE, body, namespace)
            else:
                body["metadata"] = {**lease["metadata"], "resourceVersion": self._observed_version}
                written = self.api.update(LEASE, body)
        except Conflict as exc:
            log.info("lease %s/%s changed under us: %s", namespace, name, exc)
            return False
        except KubeError as exc:
            log.info("writing lease %s/%s: %s", namespace, name, exc)
            return False
        self._observe(written)
        with self._lock:
            # Counted from before the write: the earliest the server may have renewed it.
            self._last_renew = started
        return True

    def _release(self) -> None:
        namespace, name = self._lease_key()
        try:
            lease = self.api.get(LEASE, name, namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.config.identity:
                return
            stamp = micro_time(self.wall())
            lease["spec"] = {
                "leaseDurationSeconds": RELEASED_DURATION_SECONDS,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": spec.get("leaseTransitions") or 0,
            }
            self.api.update(LEASE, lease)
            log.info("%s released lease %s/%s", self.config.identity, namespace, name)
        except KubeError as exc:  # the lease then simply expires
            log.info("releasing lease %s/%s: %s", namespace, name, exc)
