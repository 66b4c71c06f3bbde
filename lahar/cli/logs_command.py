"""`lahar logs POD`: a container's output, as `lahar up`'s local runtime kept it on this machine
(`<data-dir>/logs/<namespace>_<pod>_<uid>/<container>.log`, see node/logs.py). Pods on
simulated nodes run nothing and have no logs; pods of a real cluster are `kubectl logs`' business."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import BinaryIO

from lahar.node import logs
from lahar.node.logs import PodLogs
from lahar.up import DEFAULT_DATA_DIR

FOLLOW_POLL_SECONDS = 0.2
CHUNK = 64 * 1024


class LogsError(ValueError):
    """A refused `lahar logs`; main() prints it as `error: ...`."""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    logs = commands.add_parser("logs", help="print a container's log (pods lahar up ran on this machine)")
    logs.add_argument("pod", help="the pod's name")
    logs.add_argument("-n", "--namespace", default="default")
    logs.add_argument("-c", "--container", help="the container (default: the pod's first)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing while the container runs")
    logs.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"lahar up's data directory (default {DEFAULT_DATA_DIR})",
    )
    logs.set_defaults(run=run_logs)


def run_logs(args: argparse.Namespace) -> int:
    pod = logs.find_pod_logs(args.data_dir, args.namespace, args.pod)
    if pod is None:
        raise LogsError(
            f"no logs of pod {args.namespace}/{args.pod} under {logs.logs_root(args.data_dir)} "
            "(lahar logs reads what lahar up's local runtime ran on this machine; pods on "
            "simulated nodes run nothing)"
        )
    container = args.container or _default_container(pod)
    path = logs.container_log(pod.directory, container)
    if container not in pod.containers + pod.init_containers and not path.exists():
        known = ", ".join([*pod.containers, *(f"{c} (init)" for c in pod.init_containers)])
        raise LogsError(f"container {container} is not valid for pod {args.pod}: choose one of {known}")
    out = sys.stdout.buffer
    try:
        with open(path, "rb") as log_file:
            _copy(log_file, out)
            while args.follow and pod.directory.is_dir() and pod.running(container):
                time.sleep(FOLLOW_POLL_SECONDS)
                _copy(log_file, out)
            _copy(log_file, out)  # what the last moments wrote
    except FileNotFoundError:
        print(f"container {container} of pod {args.pod} has not started yet", file=sys.stderr)
    return 0


def _default_container(pod: PodLogs) -> str:
    """kubectl's rule: the first app container, saying so when there are others."""
    containers = pod.containers
    if not containers:
        raise LogsError("the pod's log directory names no container: give one with -c")
    if len(containers) > 1:
        print(f'Defaulted container "{containers[0]}" out of: {", ".join(containers)}', file=sys.stderr)
    return containers[0]


def _copy(source: BinaryIO, out: BinaryIO) -> None:
    while chunk := source.read(CHUNK):
        out.write(chunk)
    out.flush()
