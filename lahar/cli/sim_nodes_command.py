"""`lahar sim-nodes`: simulated nodes (node/simulated.py) as a program of their own, with
/healthz and /metrics (the process's CPU and memory). `lahar up --sim-nodes N` runs them so,
beside the scheduler and the controller: in the API server's process their status writes and
report streams contended with the server for its interpreter lock, and every request the server
answered waited for it."""

from __future__ import annotations

import argparse
from pathlib import Path

from lahar.cli.signals import run_until_signalled, stop_event
from lahar.collector import collect_rarely

DEFAULT_METRICS_PORT = 9320


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sims = commands.add_parser(
        "sim-nodes", help="run N simulated nodes (as kwok does): bound pods run at once, nothing executes"
    )
    sims.add_argument("--count", type=int, required=True, help="how many nodes: <prefix>0 … <prefix>N-1")
    sims.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, in-cluster, then the embedded server)")
    sims.add_argument(
        "--size",
        default="",
        metavar="SPEC",
        help="each node's size, e.g. cpu=16,memory=64Gi,pods=110,gpus=2 (default cpu=8,memory=32Gi,pods=110)",
    )
    sims.add_argument("--prefix", default="lahar-sim-", help="node names' prefix (default lahar-sim-)")
    sims.add_argument("--report-address", help="the scheduler's report endpoint HOST:PORT (none: no reports)")
    sims.add_argument("--token-file", type=Path, help="the report token (one the scheduler accepts for any node: `*`)")
    sims.add_argument("--report-interval", type=float, default=5.0, help="seconds between reports (default 5)")
    sims.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help=f"/metrics and /healthz port (default {DEFAULT_METRICS_PORT}; 0 picks one)",
    )
    sims.add_argument("--metrics-address", default="0.0.0.0", help="address /metrics listens on (default all)")
    sims.set_defaults(run=run_sim_nodes)


def run_sim_nodes(args: argparse.Namespace) -> int:
    from prometheus_client import REGISTRY

    from lahar.client.api import KubeApi
    from lahar.client.connect import describe_source, new_api_client
    from lahar.metrics_server import MetricsServer
    from lahar.node.simulated import SimNodeSize, SimulatedNodes

    if args.count < 0:
        raise ValueError(f"--count cannot be negative ({args.count})")
    if not 0 <= args.metrics_port <= 65535:
        raise ValueError(f"--metrics-port must be between 0 and 65535, not {args.metrics_port}")
    token = args.token_file.read_text().strip() if args.token_file else None
    collect_rarely()  # the nodes' pod informer caches every bound pod
    api = KubeApi(new_api_client(args.kubeconfig, pool_size=32))
    nodes = SimulatedNodes(
        api,
        args.count,
        SimNodeSize.parse(args.size),
        report_address=args.report_address,
        token=token,
        name_prefix=args.prefix,
        report_interval=args.report_interval,
    )
    # /metrics: the process's own figures (CPU, memory), what a bench of the whole system reads.
    metrics = MetricsServer(REGISTRY, nodes.healthy, args.metrics_address, args.metrics_port)
    stopped = stop_event()
    metrics.start()  # before the nodes register, so /healthz can say that they have not yet
    print(
        f"lahar sim-nodes using {describe_source(args.kubeconfig)}: {args.count} nodes "
        f"({args.prefix}0 …), health on http://{args.metrics_address}:{metrics.port}/healthz",
        flush=True,
    )
    return run_until_signalled(stopped, "sim-nodes", nodes.start, nodes.stop, metrics.stop)
