"""`lahar controller`: the Volcano-compatible job controller."""

from __future__ import annotations

import argparse
import signal
import threading


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    controller = commands.add_parser("controller", help="run the job controller: Jobs -> PodGroups -> Pods")
    controller.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, in-cluster, then the embedded "
                                                 "server)")
    controller.add_argument("--no-admission", action="store_true",
                            help="create a job's pods at once instead of waiting for its PodGroup to be Inqueue "
                                 "(when no gang scheduler admits jobs)")
    controller.add_argument("--resync", type=float, default=30.0, help="seconds between full re-checks (default 30)")
    controller.set_defaults(run=run_controller)


def run_controller(args: argparse.Namespace) -> int:
    from lahar.client.api import KubeApi
    from lahar.client.connect import describe_source, new_api_client
    from lahar.controller.controller import JobController

    if args.resync <= 0:
        raise ValueError(f"--resync must be positive, not {args.resync}")
    controller = JobController(KubeApi(new_api_client(args.kubeconfig)), admission_required=not args.no_admission,
                               resync_seconds=args.resync)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"lahar controller using {describe_source(args.kubeconfig)}", flush=True)
    controller.start()
    try:
        stop.wait()
    finally:
        controller.stop()
        print("lahar controller stopped", flush=True)
    return 0
