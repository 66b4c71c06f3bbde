"""`lahar agent`: the node agent (a DaemonSet in a cluster, standalone on any Linux box)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from lahar.cli.signals import on_stop_signals
from lahar.endpoints import AGENT_METRICS_PORT

log = logging.getLogger("lahar.agent")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agent = commands.add_parser("agent", help="run the node agent: metrics, /metrics, reports to the scheduler")
    agent.add_argument(
        "--node",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="this node's name (default: $NODE_NAME, else the host name)",
    )
    agent.add_argument(
        "--standalone", action="store_true", help="no API server and no scheduler: collectors and /metrics only"
    )
    agent.add_argument("--once", action="store_true", help="print one full report and exit")
    agent.add_argument("-o", "--output", choices=("json", "yaml"), default="json", help="--once output format")
    agent.add_argument("--interval", type=float, default=1.0, help="seconds between collections (default 1)")
    agent.add_argument(
        "--metrics-port",
        type=int,
        default=AGENT_METRICS_PORT,
        help=f"Prometheus /metrics and /healthz port (default {AGENT_METRICS_PORT}; 0 picks one)",
    )
    agent.add_argument("--metrics-address", default="0.0.0.0", help="address /metrics listens on")
    agent.add_argument("--root", type=Path, default=Path("/"), help="host root holding proc/ and sys/ (default /)")
    agent.add_argument("--cgroup-root", type=Path, help="cgroup mount (default <root>/sys/fs/cgroup)")
    agent.add_argument("--kubepods", default="kubepods", help="the kubelet's pod cgroup parent (default kubepods)")
    agent.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, in-cluster, then the embedded server)")
    agent.add_argument("--scheduler-address", help="the scheduler's report endpoint HOST:PORT (none: no reports)")
    agent.add_argument("--token-file", type=Path, help="bearer token for the scheduler's report endpoint")
    agent.add_argument("--ca-file", type=Path, help="CA of the scheduler's TLS certificate")
    agent.add_argument("--nvml-library", help="path of libnvidia-ml.so.1 (default: the loader's search)")
    agent.add_argument("--dcmi-library", default="libdcmi.so", help="path or name of Ascend's libdcmi.so")
    qos = agent.add_mutually_exclusive_group()
    qos.add_argument(
        "--qos-config",
        type=Path,
        metavar="FILE",
        help="QoS settings (YAML, reloaded when it changes; default: built-in defaults)",
    )
    qos.add_argument(
        "--no-qos",
        action="store_true",
        help="no co-location QoS: no cgroup writes, no evictions, no reclaimable capacity",
    )
    agent.add_argument(
        "--dry-run", action="store_true", help="QoS logs the cgroup writes and evictions it would make, and makes none"
    )
    agent.set_defaults(run=run_agent)


def settings_of(args: argparse.Namespace) -> Any:
    from lahar.agent.agent import AgentSettings
    from lahar.agent.collectors.host import Host, OutsideRootError
    from lahar.agent.qos.config import QosConfig, load_config

    if args.interval <= 0:
        raise ValueError(f"--interval must be positive, not {args.interval}")
    if not (args.root / "proc").is_dir():
        raise ValueError(f"--root {args.root}: no proc/ directory there")
    try:
        Host(args.root, args.cgroup_root).check()
    except OutsideRootError as exc:
        raise ValueError(f"--root {args.root}: {exc.strerror}") from None
    # --once only looks: QoS writes nothing there. A config file is checked up front either way.
    qos = None if args.no_qos or args.once else (load_config(args.qos_config) if args.qos_config else QosConfig())
    return AgentSettings(
        node=args.node,
        interval=args.interval,
        root=args.root,
        cgroup_root=args.cgroup_root,
        kubepods=args.kubepods,
        nvml_library=args.nvml_library,
        dcmi_library=args.dcmi_library,
        qos=qos,
        qos_config_path=args.qos_config if qos is not None else None,
        dry_run=args.dry_run,
    )


def run_agent(args: argparse.Namespace) -> int:
    from lahar.agent.agent import Agent

    settings = settings_of(args)
    if args.once:
        agent = Agent(settings)
        agent.collect()  # usage is a rate: a first sample, then the report over one interval
        time.sleep(min(settings.interval, 1.0))
        report = agent.collect().to_dict()
        agent.close()
        print(
            json.dumps(report, indent=2) if args.output == "json" else yaml.safe_dump(report, sort_keys=False),
            end="\n" if args.output == "json" else "",
        )
        return 0
    return serve(args, settings)


def serve(args: argparse.Namespace, settings: Any) -> int:
    from prometheus_client import CollectorRegistry

    from lahar.agent.agent import Agent
    from lahar.agent.exporter import MetricsServer, ReportCollector, health_of

    streamer = None if args.standalone or not args.scheduler_address else report_streamer(args)
    informer = None if args.standalone else pod_informer(args)
    agent = Agent(settings, pods=informer.list if informer else list, api=informer.api if informer else None)
    if streamer is not None:
        agent.listeners.append(streamer.offer)
    qos = agent.qos.snapshot if agent.qos is not None else None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        ReportCollector(
            lambda: agent.latest,
            lambda: stream_counters(streamer),
            qos=qos,
            totals=agent.totals.snapshot,
            latency=agent.latency.latest,
        )
    )
    metrics = MetricsServer(
        registry,
        health_of(lambda: agent.latest.timestamp if agent.latest else None, settings.interval, qos=qos),
        args.metrics_address,
        args.metrics_port,
    )
    metrics.start()
    mode = "standalone" if args.standalone else "with the API" + (" and the scheduler" if streamer else "")
    qos_mode = "QoS off" if agent.qos is None else "QoS dry-run" if settings.dry_run else "QoS on"
    print(
        f"lahar agent for node {settings.node} ({mode}, {qos_mode}): metrics on "
        f"http://{args.metrics_address}:{metrics.port}/metrics, every {settings.interval:g}s",
        flush=True,
    )
    on_stop_signals(agent.stop)
    worker = threading.Thread(target=agent.run, name="collect", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.5)
    finally:
        agent.close()
        metrics.stop()
        if streamer is not None:
            streamer.stop()
        if informer is not None:
            informer.stop()
        print("lahar agent stopped", flush=True)
    return 0


def pod_informer(args: argparse.Namespace) -> Any:
    """Pods bound to this node, watched; an unreachable API is retried in the background."""
    from lahar.api.kinds import POD
    from lahar.client.api import KubeApi
    from lahar.client.connect import new_api_client
    from lahar.client.informer import Informer

    informer = Informer(POD, KubeApi(new_api_client(args.kubeconfig)), field_selector=f"spec.nodeName={args.node}")
    informer.start()
    if not informer.wait_for_sync(5.0):
        log.warning("the pod list is not synced yet (API unreachable?); collecting without pod names meanwhile")
    return informer


def report_streamer(args: argparse.Namespace) -> Any:
    from lahar.agent.report_stream import ReportStreamer

    if args.token_file is None:
        raise ValueError("--scheduler-address needs --token-file: the scheduler accepts only authenticated agents")
    token = args.token_file.read_text().strip()
    if not token:
        raise ValueError(f"--token-file {args.token_file} is empty")
    streamer = ReportStreamer(args.scheduler_address, args.node, token, ca_file=args.ca_file)
    streamer.start()
    return streamer


def stream_counters(streamer: Any) -> dict[str, float]:
    if streamer is None:
        return {}
    stats = streamer.stats()
    return {
        "reports_sent": stats.sent,
        "stream_reconnects": stats.reconnects,
        "stream_connected": float(stats.connected),
    }
