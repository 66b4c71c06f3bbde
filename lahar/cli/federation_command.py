"""`lahar federation`: level one of multi-cluster scheduling, run against the hub (docs/federation.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lahar.cli.signals import run_until_signalled, stop_event

DEFAULT_METRICS_PORT = 9319  # the controller serves on 9318


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    federation = commands.add_parser(
        "federation",
        help="run the federation on a hub: place Volcano Jobs on member clusters (docs/federation.md); "
        "`lahar federation member`: the fence on a member",
    )
    federation.add_argument(
        "role",
        nargs="?",
        choices=("hub", "member"),
        default="hub",
        help="hub (default): place the hub's Jobs on the members; member: run on a member cluster, stopping "
        "the federation's Jobs there once the hub's lease has run out",
    )
    federation.add_argument(
        "--kubeconfig",
        help="the hub's kubeconfig (member: the member's) (default: $KUBECONFIG, in-cluster, then the embedded server)",
    )
    federation.add_argument(
        "--period", type=float, default=1.0, help="member: seconds between looks at the lease (default 1)"
    )
    federation.add_argument(
        "--controller",
        choices=("lahar", "volcano"),
        default="lahar",
        help="member: the job controller that runs there, so how a Job is stopped: lahar (default): the "
        "lahar.dev/command: AbortJob annotation; volcano: a bus.volcano.sh Command AbortJob, as vcctl job suspend",
    )
    federation.add_argument(
        "--policy", type=Path, help="placement policy and fault timings (YAML; default: every scorer, weight 1)"
    )
    federation.add_argument("--tick", type=float, default=0.5, help="seconds between cycles at most (default 0.5)")
    federation.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help=f"/healthz port (default {DEFAULT_METRICS_PORT}; 0 picks one)",
    )
    federation.add_argument("--metrics-address", default="0.0.0.0", help="address /healthz listens on (default all)")
    federation.add_argument(
        "--no-jobflows",
        action="store_true",
        help="do not run the hub's JobFlow controller (another one runs there); by default the federation runs "
        "it, so a JobFlow on the hub makes its Jobs in dependency order wherever each one runs",
    )
    federation.set_defaults(run=run_federation)


def run_federation(args: argparse.Namespace) -> int:
    if args.role == "member":
        return run_member(args)
    from prometheus_client import CollectorRegistry

    from lahar.client.api import KubeApi
    from lahar.client.connect import describe_source, new_api_client
    from lahar.controller.jobflows import JobFlowController
    from lahar.federation.federation import Federation
    from lahar.federation.policy import load_policy
    from lahar.metrics_server import MetricsServer

    if not args.tick > 0:
        raise ValueError(f"--tick must be positive, not {args.tick}")
    if not 0 <= args.metrics_port <= 65535:
        raise ValueError(f"--metrics-port must be between 0 and 65535, not {args.metrics_port}")
    policy = load_policy(args.policy)  # a PolicyError is a ValueError: `lahar` prints it, exits 1
    hub = KubeApi(new_api_client(args.kubeconfig, pool_size=16))
    federation = Federation(hub, policy, tick=args.tick)
    # The hub runs no job controller (it would start the hub's Jobs there), but its JobFlows need
    # one: it makes a flow's next Job once the Jobs it depends on are Completed, which it reads
    # from the status the federation mirrors back from wherever they ran.
    flows = None if args.no_jobflows else JobFlowController(hub)

    def start() -> None:
        federation.start()
        if flows is not None:
            flows.start()

    def stop() -> None:
        if flows is not None:
            flows.stop()
        federation.stop()

    metrics = MetricsServer(CollectorRegistry(), federation.healthy, args.metrics_address, args.metrics_port)
    stopped = stop_event()
    metrics.start()
    print(
        f"lahar federation using {describe_source(args.kubeconfig)}: health on "
        f"http://{args.metrics_address}:{metrics.port}/healthz"
        + ("" if flows is not None else " (the hub's JobFlows are left to another controller)"),
        flush=True,
    )
    return run_until_signalled(stopped, "federation", start, stop, metrics.stop)


def run_member(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from lahar.client.api import KubeApi
    from lahar.client.connect import describe_source, new_api_client
    from lahar.federation.member import MemberFence
    from lahar.federation.policy import FENCE_PERIOD
    from lahar.metrics_server import MetricsServer

    if not 0 < args.period <= FENCE_PERIOD:
        # The hub's policy keeps a margin of FENCE_PERIOD (and a heartbeat) after the lease ends.
        raise ValueError(f"--period must be positive and at most {FENCE_PERIOD:g} s, not {args.period}")
    if not 0 <= args.metrics_port <= 65535:
        raise ValueError(f"--metrics-port must be between 0 and 65535, not {args.metrics_port}")
    fence = MemberFence(KubeApi(new_api_client(args.kubeconfig)), period=args.period, controller=args.controller)
    metrics = MetricsServer(CollectorRegistry(), fence.healthy, args.metrics_address, args.metrics_port)
    stopped = stop_event()
    metrics.start()
    print(
        f"lahar federation member using {describe_source(args.kubeconfig)}: stops the federation's Jobs here "
        f"once the hub's lease runs out; health on http://{args.metrics_address}:{metrics.port}/healthz",
        flush=True,
    )
    return run_until_signalled(stopped, "federation member", fence.start, fence.stop, metrics.stop)
