"""`lahar scheduler`: the gang / queue batch scheduler, with its agent report endpoint (gRPC),
/metrics and /healthz; `lahar scheduler --check-conf FILE` checks a configuration and exits."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from lahar import collector
from lahar.cli import leader_election
from lahar.cli.signals import run_until_signalled, stop_event

DEFAULT_METRICS_PORT = 9317  # the agent serves on 9316, the controller on 9318
DEFAULT_REPORT_PORT = 9400


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    scheduler = commands.add_parser("scheduler", help="run the gang / queue scheduler")
    scheduler.add_argument(
        "--conf",
        "--config",
        type=Path,
        help="scheduler configuration (Volcano's volcano-scheduler.conf format), reloaded on "
        "change (default: the built-in one)",
    )
    scheduler.add_argument(
        "--check-conf",
        type=Path,
        metavar="FILE",
        help="parse and check FILE, print the configuration it gives (or why not) and exit",
    )
    scheduler.add_argument(
        "--scheduler-name",
        action="append",
        metavar="NAME",
        help="schedule pods with this schedulerName; repeatable (default: lahar and volcano)",
    )
    scheduler.add_argument(
        "--scheduler-sharding-mode",
        choices=("none", "hard", "soft"),
        default="none",
        help="node sharding, as Volcano's: hard schedules only on the nodes of this scheduler's "
        "NodeShard, soft prefers them (default none)",
    )
    scheduler.add_argument(
        "--scheduler-sharding-name",
        default="volcano",
        metavar="NAME",
        help="the NodeShard (shard.volcano.sh/v1alpha1) of this scheduler (default volcano)",
    )
    scheduler.add_argument(
        "--period", type=float, default=1.0, help="seconds between cycles (default 1; work arriving starts one sooner)"
    )
    scheduler.add_argument(
        "--kubeconfig", help="kubeconfig (default: $KUBECONFIG, in-cluster, then the embedded server)"
    )
    scheduler.add_argument(
        "--report-address",
        metavar="HOST:PORT",
        help=f"where agents send their reports (gRPC; default 0.0.0.0:{DEFAULT_REPORT_PORT} with "
        f"TLS, 127.0.0.1:{DEFAULT_REPORT_PORT} without: tokens never cross a network in clear)",
    )
    scheduler.add_argument(
        "--token-file",
        "--report-token-file",
        type=Path,
        help="agents' bearer tokens, `TOKEN NODE` per line (NODE * for any node); without it "
        "no report endpoint is served",
    )
    scheduler.add_argument("--tls-cert-file", type=Path, help="serve the report endpoint with this certificate (PEM)")
    scheduler.add_argument("--tls-private-key-file", type=Path, help="the certificate's private key (PEM)")
    scheduler.add_argument(
        "--report-staleness",
        type=float,
        default=None,
        metavar="S",
        help="seconds after which a node's report counts as stale in the metrics "
        "(plugins take their own `staleness` argument; default the same as theirs)",
    )
    scheduler.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help=f"Prometheus /metrics and /healthz port (default {DEFAULT_METRICS_PORT}; 0 picks one)",
    )
    scheduler.add_argument("--metrics-address", default="0.0.0.0", help="address /metrics listens on (default all)")
    leader_election.add_flags(scheduler, "scheduler")
    # The collector stays off (lahar.collector.hold) until the scheduler is set up: see run_scheduler.
    scheduler.set_defaults(run=run_scheduler, holds_collector=True)


def describe_conf(conf: Any) -> str:
    """A configuration as the scheduler will run it, in its own format (a file that loads again):
    the switches that are off, then the arguments."""
    from lahar.scheduler.conf import SWITCHES

    switch_of: dict[str, str] = {}
    for switch, kind in SWITCHES.items():
        switch_of.setdefault(kind, switch)
    tiers = []
    for tier in conf.tiers:
        plugins = []
        for option in tier:
            entry: dict[str, Any] = {"name": option.name}
            entry.update({switch_of[kind]: False for kind in sorted(option.disabled)})
            if option.arguments:
                entry["arguments"] = dict(option.arguments)
            plugins.append(entry)
        tiers.append({"plugins": plugins})
    document: dict[str, Any] = {"actions": ", ".join(conf.actions), "tiers": tiers}
    if conf.action_arguments:
        document["configurations"] = [
            {"name": name, "arguments": dict(arguments)} for name, arguments in conf.action_arguments.items()
        ]
    return yaml.safe_dump(document, sort_keys=False)


def check_conf(path: Path) -> int:
    from lahar.scheduler.conf import load_conf
    from lahar.scheduler.framework.plugin import ConfError

    try:
        conf = load_conf(path)
    except ConfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"# {path}: ok", flush=True)
    print(describe_conf(conf), end="", flush=True)
    return 0


def report_address(args: argparse.Namespace) -> str:
    if args.report_address:
        return str(args.report_address)
    return f"{'0.0.0.0' if args.tls_cert_file else '127.0.0.1'}:{DEFAULT_REPORT_PORT}"


def report_server(args: argparse.Namespace, store: Any) -> Any:
    """The agents' report endpoint, started; None without --token-file."""
    from lahar.scheduler.report_server import ReportServer, load_tokens
    from lahar.tls import TlsFiles

    if args.token_file is None:
        print("no --token-file: no report endpoint (usage-aware plugins see no agent reports)", flush=True)
        return None
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        raise ValueError("--tls-cert-file and --tls-private-key-file go together")
    tls = TlsFiles(args.tls_cert_file, args.tls_private_key_file, None) if args.tls_cert_file else None
    server = ReportServer(store, load_tokens(args.token_file), tls)
    address = report_address(args)
    port = server.start(address)
    print(f"agent reports on {address.rsplit(':', 1)[0]}:{port} ({'TLS' if tls else 'loopback, no TLS'})", flush=True)
    return server


def run_scheduler(args: argparse.Namespace) -> int:
    if args.check_conf is not None:
        collector.release()
        return check_conf(args.check_conf)

    from lahar.client.api import KubeApi
    from lahar.client.connect import describe_source, new_api_client
    from lahar.metrics_server import MetricsServer
    from lahar.scheduler.cache import DEFAULT_SCHEDULER_NAMES
    from lahar.scheduler.node_reports import NodeReportStore
    from lahar.scheduler.scheduler import DEFAULT_REPORT_STALENESS, Scheduler
    from lahar.scheduler.shards import Sharding

    if args.period <= 0:
        raise ValueError(f"--period must be positive, not {args.period}")
    if not 0 <= args.metrics_port <= 65535:
        raise ValueError(f"--metrics-port must be between 0 and 65535, not {args.metrics_port}")
    staleness = DEFAULT_REPORT_STALENESS if args.report_staleness is None else args.report_staleness
    if staleness <= 0:
        raise ValueError(f"--report-staleness must be positive, not {staleness}")
    # The cache holds a few objects per pod and a snapshot clones the jobs every cycle: with the
    # default thresholds the collector rescans the whole cache several times a cycle (a 30,000-pod
    # snapshot took 0.4 s instead of 0.15 s). Collect young objects rarely; they are mostly garbage.
    collector.collect_rarely()
    election = leader_election.election_config(args)
    # Concurrent binds and, on a pool of their own, evictions; the connection pool also serves 8
    # status writers and 5 watches.
    workers, evict_workers = 32, 32
    store = NodeReportStore()
    # A refused configuration file raises ConfError, a ValueError: `lahar` prints it and exits 1.
    api = KubeApi(new_api_client(args.kubeconfig, pool_size=workers + evict_workers + 16))
    scheduler = Scheduler(
        api,
        args.conf,
        args.scheduler_name or DEFAULT_SCHEDULER_NAMES,
        args.period,
        store,
        report_staleness=staleness,
        bind_workers=workers,
        evict_workers=evict_workers,
        sharding=Sharding(args.scheduler_sharding_mode, args.scheduler_sharding_name),
    )
    reports: list[Any] = []

    def open_report_endpoint() -> None:
        server = report_server(args, store)
        if server is not None:
            reports.append(server)

    def start() -> None:
        # Under --leader-elect the endpoint opens only on the leader: an agent whose stream reached
        # the standby is refused and reconnects, through the Service, until it reaches the leader.
        if election is not None:
            open_report_endpoint()
        scheduler.start()

    def stop() -> None:
        scheduler.stop()
        for server in reports:
            server.stop()

    leader = (
        leader_election.LeaderRun(api, election, "scheduler", start, stop, scheduler.healthy)
        if election is not None
        else None
    )
    health = leader.health if leader is not None else scheduler.healthy
    live = None if leader is not None else scheduler.live
    metrics = MetricsServer(scheduler.metrics.registry, health, args.metrics_address, args.metrics_port, live=live)
    if election is None:
        open_report_endpoint()
    # Imports and set-up are done: what they made lives as long as the process, so it leaves the
    # collector's sight for good (the cache the informers fill from now on does not).
    collector.release(freeze=True)
    stopped = stop_event()
    metrics.start()
    names = ", ".join(sorted(scheduler.cache.scheduler_names))
    sharding = scheduler.cache.sharding
    shard = f" ({sharding.mode} shard {sharding.name})" if sharding.enabled else ""
    print(
        f"lahar scheduler for {names}{shard} using {describe_source(args.kubeconfig)}, "
        f"{args.conf or 'the default configuration'}: metrics on "
        f"http://{args.metrics_address}:{metrics.port}/metrics",
        flush=True,
    )
    if leader is not None:
        return leader.run(stopped, metrics.stop)
    return run_until_signalled(stopped, "scheduler", start, stop, metrics.stop)
