"""`lahar controller`: the Volcano-compatible job controller, with its /metrics and /healthz."""

from __future__ import annotations

import argparse
from typing import Any

from lahar.cli import leader_election
from lahar.cli.signals import run_until_signalled, stop_event
from lahar.collector import collect_rarely

DEFAULT_METRICS_PORT = 9318  # the agent serves on 9316


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    controller = commands.add_parser("controller", help="run the job controller: Jobs -> PodGroups -> Pods")
    controller.add_argument(
        "--kubeconfig", help="kubeconfig (default: $KUBECONFIG, in-cluster, then the embedded server)"
    )
    controller.add_argument(
        "--no-admission",
        action="store_true",
        help="create a job's pods at once instead of waiting for its PodGroup to be Inqueue "
        "(when no gang scheduler admits jobs)",
    )
    controller.add_argument(
        "--workloads",
        action="store_true",
        help="also run the Deployment and ReplicaSet controllers (single-machine mode: no kube-controller-manager)",
    )
    controller.add_argument(
        "--workers",
        type=int,
        default=4,
        help="reconciles at once (default 4); one job is never reconciled by two at the same time",
    )
    controller.add_argument("--resync", type=float, default=30.0, help="seconds between full re-checks (default 30)")
    controller.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help=f"Prometheus /metrics and /healthz port (default {DEFAULT_METRICS_PORT}; 0 picks one)",
    )
    controller.add_argument("--metrics-address", default="0.0.0.0", help="address /metrics listens on (default all)")
    leader_election.add_flags(controller, "controller")
    controller.set_defaults(run=run_controller)


def run_controller(args: argparse.Namespace) -> int:
    from lahar.client.api import KubeApi
    from lahar.client.connect import describe_source, new_api_client
    from lahar.controller.controller import JobController
    from lahar.metrics_server import MetricsServer

    if args.resync <= 0:
        raise ValueError(f"--resync must be positive, not {args.resync}")
    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, not {args.workers}")
    if not 0 <= args.metrics_port <= 65535:
        raise ValueError(f"--metrics-port must be between 0 and 65535, not {args.metrics_port}")
    election = leader_election.election_config(args)
    collect_rarely()  # its informers cache every Job, PodGroup and pod
    api = KubeApi(new_api_client(args.kubeconfig))
    job_controller = JobController(
        api, admission_required=not args.no_admission, resync_seconds=args.resync, workers=args.workers
    )
    controller = job_controller if not args.workloads else _WithWorkloads(job_controller, api)
    leader = (
        leader_election.LeaderRun(api, election, "controller", controller.start, controller.stop, controller.healthy)
        if election is not None
        else None
    )
    health = leader.health if leader is not None else controller.healthy
    live = None if leader is not None else controller.live
    metrics = MetricsServer(job_controller.metrics.registry, health, args.metrics_address, args.metrics_port, live=live)
    stopped = stop_event()
    metrics.start()  # before the informers sync, so /healthz can say that they have not yet
    print(
        f"lahar controller using {describe_source(args.kubeconfig)}: metrics on "
        f"http://{args.metrics_address}:{metrics.port}/metrics",
        flush=True,
    )
    if leader is not None:
        return leader.run(stopped, metrics.stop)
    return run_until_signalled(stopped, "controller", controller.start, controller.stop, metrics.stop)


class _WithWorkloads:
    """The job controller and the workload controllers, started and stopped together."""

    def __init__(self, jobs: Any, api: Any) -> None:
        from lahar.controller.workloads.runner import WorkloadControllers

        self.jobs = jobs
        self.workloads = WorkloadControllers(api)

    def start(self) -> None:
        self.jobs.start()
        self.workloads.start()

    def stop(self) -> None:
        self.workloads.stop()
        self.jobs.stop()

    def healthy(self) -> tuple[bool, str]:
        return self.jobs.healthy()

    def live(self) -> tuple[bool, str]:
        return self.jobs.live()
