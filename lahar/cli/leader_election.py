"""`--leader-elect` for `lahar scheduler` and `lahar controller`: kube's flags and timings, and
the run block that starts the component only while this process holds the Lease.

Losing the Lease ends the process at once (exit 1), as kube-scheduler and
kube-controller-manager do: nothing the component had in flight can act after that line, and the
kubelet restarts the container as a fresh standby."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from lahar.api.job import parse_duration
from lahar.cli.signals import run_until_signalled
from lahar.client.api import KubeApi
from lahar.client.leader import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    ElectionConfig,
    LeaderElector,
    default_identity,
)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
FALLBACK_NAMESPACE = "lahar-system"
# The exit status after losing the Lease (kube's components exit non-zero too).
LOST_LEASE_EXIT = 1

Health = Callable[[], tuple[bool, str]]


def _duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f'must be positive, not "{text}"')
    return seconds


def add_flags(parser: argparse.ArgumentParser, component: str) -> None:
    group = parser.add_argument_group("leader election (for more than one replica)")
    group.add_argument(
        "--leader-elect",
        action="store_true",
        help="act only while holding a coordination.k8s.io/v1 Lease, so one replica at a time works",
    )
    group.add_argument(
        "--leader-elect-lease-duration",
        type=_duration,
        default=DEFAULT_LEASE_DURATION,
        metavar="DURATION",
        help="how long a standby waits after the last renewal it saw before taking over (default 15s)",
    )
    group.add_argument(
        "--leader-elect-renew-deadline",
        type=_duration,
        default=DEFAULT_RENEW_DEADLINE,
        metavar="DURATION",
        help="how long the leader keeps trying to renew before it stops acting (default 10s)",
    )
    group.add_argument(
        "--leader-elect-retry-period",
        type=_duration,
        default=DEFAULT_RETRY_PERIOD,
        metavar="DURATION",
        help="time between tries to acquire or renew (default 2s)",
    )
    group.add_argument(
        "--leader-elect-resource-name",
        default=f"lahar-{component}",
        help=f"the Lease's name (default lahar-{component})",
    )
    group.add_argument(
        "--leader-elect-resource-namespace",
        default=None,
        help=f"the Lease's namespace (default: $POD_NAMESPACE, the pod's own, else {FALLBACK_NAMESPACE})",
    )
    group.add_argument(
        "--leader-elect-resource-lock",
        default="leases",
        choices=["leases"],
        help="the lock kind; only leases (as kube since 1.24)",
    )


def default_namespace() -> str:
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or FALLBACK_NAMESPACE
    except OSError:
        return FALLBACK_NAMESPACE


def election_config(args: argparse.Namespace) -> ElectionConfig | None:
    """The election the flags ask for (None without --leader-elect); ValueError when the timings
    cannot work (a standby could take over before the leader gives up)."""
    if not args.leader_elect:
        return None
    return ElectionConfig(
        lease_name=args.leader_elect_resource_name,
        lease_namespace=args.leader_elect_resource_namespace or default_namespace(),
        identity=default_identity(),
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
    )


class LeaderRun:
    """The component under an elector: `health` for /healthz, `run` for the command's main thread."""

    def __init__(
        self,
        api: KubeApi,
        config: ElectionConfig,
        name: str,
        start: Callable[[], None],
        stop: Callable[[], None],
        component_health: Health,
        exit_process: Callable[[int], None] = os._exit,
    ) -> None:
        self.name = name
        self._start = start
        self._stop = stop
        self._component_health = component_health
        self._exit_process = exit_process
        self._started = False
        self._stopping = threading.Event()
        self.elector = LeaderElector(api, config, self._started_leading, self._stopped_leading, self._new_leader)

    def health(self) -> tuple[bool, str]:
        if self._started and self.elector.is_leader():
            return self._component_health()
        return self.elector.health()

    def _new_leader(self, holder: str) -> None:
        if holder != self.elector.config.identity:
            print(f"lahar {self.name}: the leader is {holder}", flush=True)

    def _started_leading(self) -> None:
        print(f"lahar {self.name}: became the leader as {self.elector.config.identity}", flush=True)
        self._started = True
        try:
            self._start()
        except Exception as exc:  # a leader that cannot act must not hold the Lease
            print(f"lahar {self.name}: could not start: {exc}", file=sys.stderr, flush=True)
            self._exit_process(LOST_LEASE_EXIT)

    def _stopped_leading(self) -> None:
        if self._stopping.is_set():
            return  # a clean stop: run() stops the component, then releases the Lease
        print(f"lahar {self.name}: lost the leader lease, exiting", file=sys.stderr, flush=True)
        self._exit_process(LOST_LEASE_EXIT)

    def run(self, stopped: threading.Event, *cleanups: Callable[[], None]) -> int:
        def stop() -> None:
            self._stopping.set()
            if self._started:
                self._stop()  # stop acting before the Lease is released to a standby
            self.elector.stop(release=True)

        print(
            f"lahar {self.name}: campaigning for lease {self.elector.config.lease_namespace}/"
            f"{self.elector.config.lease_name} as {self.elector.config.identity}",
            flush=True,
        )
        return run_until_signalled(stopped, self.name, self.elector.start, stop, *cleanups)
