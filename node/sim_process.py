"""Simulated nodes as a program of their own, for tests and the fault suite (bench/faults.py), which
kill it to cut every node's report stream at once and start it again:

    python -m lahar.node.sim_process --count N --kubeconfig FILE [--report-address HOST:PORT
        --token-file FILE] [--prefix NAME-]

`lahar up --sim-nodes` runs the same SimulatedNodes in its own process. Runs until SIGTERM."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.node.simulated import DEFAULT_PREFIX, SimulatedNodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lahar.node.sim_process", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--report-address", help="the scheduler's report endpoint (no reports without it)")
    parser.add_argument("--token-file", type=Path, help="the report token (for any node: `*` in the scheduler's file)")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"node names' prefix (default {DEFAULT_PREFIX})")
    parser.add_argument("--report-interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    token = args.token_file.read_text().strip() if args.token_file else None
    api = KubeApi(new_api_client(args.kubeconfig, pool_size=8), timeout=10)
    nodes = SimulatedNodes(
        api,
        args.count,
        report_address=args.report_address,
        token=token,
        name_prefix=args.prefix,
        report_interval=args.report_interval,
    )
    nodes.start()
    print(f"{args.count} simulated nodes ({args.prefix}0 …) running", flush=True)
    stop.wait()
    nodes.stop()
    api.api_client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
