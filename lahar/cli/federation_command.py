"""`lahar federation`: level one of multi-cluster scheduling, run against the hub (docs/federation.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lahar.cli.signals import run_until_signalled, stop_event

DEFAULT_METRICS_PORT = 9319  # the controller serves on 9318


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    federation = commands.add_parser(
        "federation", help="run the federation on a hub: place Volcano Jobs on member clusters (docs/federation.md)"
    )
    federation.add_argument(
        "--kubeconfig", help="the hub's kubeconfig (default: $KUBECONFIG, in-cluster, then the embedded server)"
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
    federation.set_defaults(run=run_federation)


def run_federation(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from lahar.client.api import KubeApi
    from lahar.client.connect import describe_source, new_api_client
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
    metrics = MetricsServer(CollectorRegistry(), federation.healthy, args.metrics_address, args.metrics_port)
    stopped = stop_event()
    metrics.start()
    print(
        f"lahar federation using {describe_source(args.kubeconfig)}: health on "
        f"http://{args.metrics_address}:{metrics.port}/healthz",
        flush=True,
    )
    return run_until_signalled(stopped, "federation", federation.start, federation.stop, metrics.stop)
