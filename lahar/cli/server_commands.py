"""Long-running programs and their connection helpers: apiserver, up (up/), kubeconfig, version,
and the demo's workloads (lahar workload)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import lahar
from lahar.client.kubeconfig import embedded_kubeconfig
from lahar.collector import collect_rarely
from lahar.endpoints import EMBEDDED_HOST, EMBEDDED_PORT, EMBEDDED_URL
from lahar.node import DEFAULT_PARENT
from lahar.up import DEFAULT_DATA_DIR, workloads

if TYPE_CHECKING:  # the server (aiohttp, cryptography) is imported only by the commands that run it
    from lahar.apiserver import server

DEMO_SIM_NODES = 4  # what the examples' gang and queues are sized for


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"where the embedded API keeps its SQLite file (default {DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=EMBEDDED_PORT,
        help=f"embedded API port (default {EMBEDDED_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--address", default=EMBEDDED_HOST, help="listening address (default 127.0.0.1; any other needs --token-file)"
    )
    parser.add_argument("--token-file", type=Path, help="file holding the bearer token clients must send")
    parser.add_argument(
        "--fsync",
        choices=("normal", "full"),
        default="normal",
        help="normal: survive a process crash; full: survive power loss too (slower writes)",
    )
    parser.add_argument("--tls-cert-file", type=Path, help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-private-key-file", type=Path, help="the certificate's private key (PEM)")
    parser.add_argument(
        "--watch-history",
        type=int,
        default=200_000,
        help="changes kept for watches resuming from a resourceVersion (older ones get 410 Gone)",
    )
    parser.add_argument(
        "--watch-history-mib",
        type=int,
        default=64,
        metavar="MIB",
        help="and at most this many MiB of objects in that history (default 64)",
    )
    parser.add_argument(
        "--event-ttl",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="how long an Event lives after its last write, as kube-apiserver's --event-ttl (default 3600)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        help="open client connections beyond this are closed at once (default 1024)",
    )
    parser.add_argument(
        "--request-header-timeout",
        type=float,
        default=32.0,
        metavar="SECONDS",
        help="a connection whose request head takes longer is closed (default 32, as kube-apiserver)",
    )
    parser.add_argument(
        "--request-body-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a request whose body takes longer gets 408 (default 60)",
    )


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    apiserver = commands.add_parser("apiserver", help="run the embedded Kubernetes API server (SQLite)")
    add_server_flags(apiserver)
    apiserver.set_defaults(run=run_apiserver)

    up = commands.add_parser(
        "up",
        help="run the whole system on this machine: API server, scheduler, controller, "
        "agent, this machine as a node, simulated nodes",
        description="Run Lahar on this machine: the embedded API server, the scheduler, the "
        "controller and an agent, this machine as a node whose pods run as local "
        "processes, and simulated nodes. Ctrl-C stops it; the data stays.",
    )
    add_server_flags(up)
    up.add_argument(
        "--sim-nodes",
        type=int,
        metavar="N",
        help=f"simulated nodes lahar-sim-0 … (default 0; {DEMO_SIM_NODES} with --demo)",
    )
    up.add_argument(
        "--sim-node-size",
        default="",
        metavar="SPEC",
        help="each simulated node's size, e.g. cpu=16,memory=64Gi,pods=110,gpus=2"
        " (default cpu=8,memory=32Gi,ephemeral-storage=100Gi,pods=110)",
    )
    up.add_argument(
        "--no-local-node", action="store_true", help="do not run pods on this machine (no local node, no agent)"
    )
    up.add_argument(
        "--cgroup-parent",
        default=DEFAULT_PARENT,
        help=f"the cgroup the local node's pods run under (default {DEFAULT_PARENT}); the agent tunes the same",
    )
    up.add_argument(
        "--scheduler-conf",
        type=Path,
        metavar="FILE",
        help="the scheduler's configuration (Volcano's volcano-scheduler.conf format; default: its built-in one)",
    )
    up.add_argument(
        "--qos-config",
        type=Path,
        metavar="FILE",
        help="the agent's QoS settings (YAML; default: its built-in defaults)",
    )
    up.add_argument(
        "--demo",
        action="store_true",
        help="apply the examples/ scenarios and narrate them (co-location, a gang, two queues), then stay up",
    )
    up.add_argument("--demo-exit", action="store_true", help="with --demo: stop once the narration is done")
    up.add_argument(
        "--clusters",
        type=int,
        default=0,
        help="a federation instead: N member clusters of simulated nodes and a hub running `lahar federation` "
        "(docs/federation.md)",
    )
    up.add_argument("--federation-policy", type=Path, help="with --clusters: the federation's policy (YAML)")
    up.set_defaults(run=run_up)

    kubeconfig = commands.add_parser("kubeconfig", help="print a kubeconfig for the embedded API server")
    kubeconfig.add_argument("--server", default=EMBEDDED_URL, help="the embedded server's URL")
    kubeconfig.add_argument("--token-file", type=Path, help="include this bearer token")
    kubeconfig.add_argument(
        "--ca-file", type=Path, help="the CA of an HTTPS server (a token-guarded server's is <data-dir>/tls/ca.crt)"
    )
    kubeconfig.set_defaults(run=run_kubeconfig)

    version = commands.add_parser("version", help="print Lahar's version")
    version.set_defaults(run=lambda _args: print(f"lahar {lahar.__version__}"))

    workloads.register(commands)


def server_config(args: argparse.Namespace) -> server.ServerConfig:
    from lahar.apiserver import server

    return server.ServerConfig(
        data_dir=args.data_dir,
        host=args.address,
        port=args.port,
        token_file=args.token_file,
        fsync=args.fsync,
        watch_history=args.watch_history,
        watch_history_bytes=args.watch_history_mib * 1024 * 1024,
        event_ttl=args.event_ttl,
        max_connections=args.max_connections,
        header_timeout=args.request_header_timeout,
        body_timeout=args.request_body_timeout,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_private_key_file,
    )


def run_apiserver(args: argparse.Namespace) -> int:
    import asyncio  # here, not at the top: the other commands (the scheduler among them) never load it

    from lahar.apiserver import server

    collect_rarely()  # the store keeps every object, decoded and encoded
    asyncio.run(server.serve(server_config(args)))
    return 0


def run_up(args: argparse.Namespace) -> int:
    from lahar.cli.signals import stop_event
    from lahar.node.simulated import SimNodeSize
    from lahar.up import system

    if args.demo_exit and not args.demo:
        raise ValueError("--demo-exit goes with --demo")
    if args.scheduler_conf is not None:
        from lahar.scheduler.conf import load_conf

        load_conf(args.scheduler_conf)  # a file the scheduler would refuse stops `up` before it starts
    sim_nodes = args.sim_nodes if args.sim_nodes is not None else DEMO_SIM_NODES if args.demo else 0
    if sim_nodes < 0:
        raise ValueError(f"--sim-nodes cannot be negative ({sim_nodes})")
    options = system.UpOptions(
        server_config(args),
        sim_nodes,
        SimNodeSize.parse(args.sim_node_size),
        local_node=not args.no_local_node,
        cgroup_parent=args.cgroup_parent,
        qos_config=args.qos_config,
        verbose=args.verbose,
        log_format=args.log_format,
        scheduler_conf=args.scheduler_conf,
    )
    collect_rarely()  # the embedded API server's store (each cluster's) keeps every object in this process
    if args.clusters:
        from lahar.up.fleet import run_fleet

        if args.demo:
            raise ValueError("--demo and --clusters do not go together")
        if args.federation_policy is not None:
            from lahar.federation.policy import load_policy

            load_policy(args.federation_policy)  # refused here rather than by the hub's federation
        fleet_options = dataclasses.replace(options, federation_policy=args.federation_policy)
        return run_fleet(fleet_options, args.clusters, stop_event())
    if args.federation_policy is not None:
        raise ValueError("--federation-policy goes with --clusters")
    demo = None
    if args.demo:
        from lahar.up.demo import run_demo

        demo = run_demo
    return system.run(options, stop_event(), demo, demo_exit=args.demo_exit)


def run_kubeconfig(args: argparse.Namespace) -> int:
    token = args.token_file.read_text().strip() if args.token_file else None
    ca = args.ca_file.read_bytes() if args.ca_file else None
    print(embedded_kubeconfig(args.server, token, ca), end="")
    return 0
