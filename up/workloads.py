"""`lahar workload`: what the demo's pods run (examples/online-service.yaml, be-batch-job.yaml),
and the demo's load generator. The code is the co-location benchmark's own (bench/colocation.py):
the same online request/response server (each request burns ~`--work-ms` of CPU), the same BE busy
loop, the same open-loop load generator with its p50/p99, so the demo and the benchmark measure
alike. bench/ installs as lahar.bench, as `lahar bench` finds it."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
from collections.abc import Callable
from types import ModuleType

LOAD_START_DELAY_SECONDS = 0.3  # the generator's own start-up, before its first intended send time
REQUEST_HISTOGRAM = "online_request_duration_seconds"
# 1 ms of work a request: from half of that to far beyond what any target allows.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)


def colocation() -> ModuleType:
    """bench/colocation.py (installed as lahar.bench.colocation, so a wheel has it too)."""
    return importlib.import_module("lahar.bench.colocation")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    workload = commands.add_parser("workload", help="run a demo workload (what the examples' pods run)")
    roles = workload.add_subparsers(dest="workload", metavar="WORKLOAD", required=True)
    server = roles.add_parser(
        "online-server", help="a TCP request/response server on 127.0.0.1 (a free port); prints `PORT ITERATIONS` first"
    )
    server.add_argument("--work-ms", type=float, default=1.0, help="CPU burnt per request (default 1 ms)")
    server.add_argument(
        "--metrics-port",
        type=int,
        help=f"serve {REQUEST_HISTOGRAM} (each request's service time) on 127.0.0.1:PORT/metrics",
    )
    server.set_defaults(run=run_online_server)
    hog = roles.add_parser("cpu-hog", help="a CPU busy loop (one core)")
    hog.add_argument("--seconds", type=float, help="stop after this long (default: run until killed)")
    hog.set_defaults(run=run_cpu_hog)
    load = roles.add_parser("load", help="open-loop load on an online-server; prints p50/p99 as JSON")
    load.add_argument("--port", type=int, required=True, help="the online server's port on 127.0.0.1")
    load.add_argument("--rate", type=float, default=200.0, help="requests per second (default 200)")
    load.add_argument("--seconds", type=float, default=8.0, help="measured seconds (default 8)")
    load.add_argument("--warmup", type=float, default=1.0, help="seconds sent first and left out (default 1)")
    load.set_defaults(run=run_load)


def _positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"--{name} must be positive, not {value}")


def run_online_server(args: argparse.Namespace) -> int:
    _positive("work-ms", args.work_ms)
    observe = None if args.metrics_port is None else request_histogram(args.metrics_port)
    colocation().serve(args.work_ms, math.inf, observe)
    return 0


def request_histogram(port: int) -> Callable[[float], None] | None:
    """A histogram of the requests' service time, served for Prometheus and the agent (the pod's
    lahar.dev/latency-histogram). A port already taken costs the metrics, not the service."""
    from prometheus_client import CollectorRegistry, Histogram, start_http_server

    registry = CollectorRegistry()
    histogram = Histogram(
        REQUEST_HISTOGRAM, "Service time of one request, in seconds.", buckets=REQUEST_BUCKETS, registry=registry
    )
    try:
        start_http_server(port, addr="127.0.0.1", registry=registry)
    except OSError as exc:
        print(f"online-server: no metrics on 127.0.0.1:{port}: {exc}", file=sys.stderr, flush=True)
        return None
    return histogram.observe


def run_cpu_hog(args: argparse.Namespace) -> int:
    _positive("seconds", args.seconds)
    colocation().hog(time.monotonic() + args.seconds if args.seconds else math.inf)
    return 0


def run_load(args: argparse.Namespace) -> int:
    for name in ("rate", "seconds"):
        _positive(name, getattr(args, name))
    module = colocation()
    start = time.monotonic() + LOAD_START_DELAY_SECONDS
    total = args.seconds + args.warmup
    result = module.load(args.port, start, [module.Segment(total, args.rate)], args.warmup, deadline=start + total + 30)
    print(json.dumps(result), flush=True)
    return 0
