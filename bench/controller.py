"""The job controller at scale: many Volcano Jobs created at once reach Running on simulated
nodes, then are deleted and garbage-collected.

    lahar bench controller [--jobs 1000] [--pods-per-job 10] [--nodes 100] [--json]

It starts `lahar up --sim-nodes N --no-local-node` (the embedded API server, the scheduler, the
controller and N simulated nodes, each its own process) in a fresh data directory, creates
`--jobs` Jobs of one task of `--pods-per-job` replicas (minAvailable = replicas, 50m / 64Mi a
pod, running until deleted) from `--clients` threads, and measures:

- `running_seconds`: from the first create until every Job's `status.state.phase` is Running
  (the controller made each PodGroup, the scheduler admitted and bound the gang, the simulated
  kubelets started the pods, the controller saw them run);
- `controller_cpu_seconds`: the controller process's user + system CPU over that span (from
  /proc, so it counts what the controller did, not the API server or the scheduler);
- `up_cpu_seconds` (the `lahar up` process: the embedded API server), `sim_nodes_cpu_seconds`
  (the `lahar sim-nodes` program) and `scheduler_cpu_seconds`: theirs over the same span, to
  tell which process bounds time to Running on a small machine;
- `gc_seconds` and `left_behind`: after deleting every Job, until no Job, PodGroup, pod,
  Service, ConfigMap or Secret of theirs is left (the API's garbage collector); anything left
  after `--timeout` is reported, never hidden.

Targets (issue 16, on a 2-core machine): running_seconds <= 60, controller_cpu_seconds <= 60,
left_behind = 0. The command exits 1 when a Job is left behind or the jobs never all run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lahar.api import kinds
from lahar.bench._cluster import START_TIMEOUT, Cluster
from lahar.client.api import KubeApi
from lahar.client.errors import KubeError, NotFound

JOB_LABEL = "volcano.sh/job-name"
BENCH_LABEL = "lahar.dev/bench"


def bench_job(index: int, pods: int) -> dict[str, Any]:
    """One Job: a task of `pods` replicas that must run together, small pods that never end."""
    resources = {"cpu": "50m", "memory": "64Mi"}
    return {
        "apiVersion": kinds.JOB.api_version,
        "kind": kinds.JOB.kind,
        "metadata": {"name": f"bench-{index:05d}", "labels": {BENCH_LABEL: "controller"}},
        "spec": {
            "minAvailable": pods,
            "schedulerName": "lahar",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": pods,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "busybox",
                                    "resources": {"requests": resources, "limits": resources},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/<pid>/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait(what: str, check: Any, timeout: float, interval: float = 0.5) -> tuple[bool, Any]:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is True or time.monotonic() > deadline:
            return value is True, value
        print(f"  waiting for {what}: {value}", file=sys.stderr)
        time.sleep(interval)


def _phases(api: KubeApi) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in api.list_all(kinds.JOB, "default", label_selector=f"{BENCH_LABEL}=controller")["items"]:
        phase = ((job.get("status") or {}).get("state") or {}).get("phase", "(none)")
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def _left(api: KubeApi) -> dict[str, int]:
    """What of the jobs is still in the API."""
    left = {
        "jobs": len(api.list_all(kinds.JOB, "default")["items"]),
        "podgroups": len(api.list_all(kinds.PODGROUP, "default")["items"]),
        "pods": len(api.list_all(kinds.POD, "default", label_selector=JOB_LABEL)["items"]),
    }
    return {kind: count for kind, count in left.items() if count}


def run(jobs: int, pods: int, nodes: int, clients: int, timeout: float) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="lahar-bench-controller-"))
    cluster = Cluster(data_dir, nodes)
    try:
        api = cluster.start()
        _wait(
            f"{nodes} nodes",
            lambda: (lambda count: count >= nodes or count)(len(api.list_all(kinds.NODE)["items"])),
            START_TIMEOUT,
        )
        # The API server's and scheduler's CPU too: on 2 cores they compete with the controller,
        # and say which of them bounds time to Running.
        # The embedded API server runs in `lahar up`'s own process.
        assert cluster.proc is not None
        pids = {program: cluster.pid_of(program) for program in ("controller", "scheduler", "sim-nodes")}
        pids["up"] = cluster.proc.pid
        cpu_before = {program: cpu_seconds(pid) for program, pid in pids.items()}
        failures: list[str] = []

        def create(index: int) -> None:
            try:
                api.create(kinds.JOB, bench_job(index, pods), "default")
            except KubeError as exc:
                failures.append(f"bench-{index:05d}: {exc}")

        started = time.monotonic()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(create, range(jobs)))
        created_seconds = time.monotonic() - started
        all_running, phases = _wait(
            f"{jobs} jobs Running",
            lambda: (lambda counts: counts.get("Running") == jobs or counts)(_phases(api)),
            timeout,
            interval=1.0,
        )
        running_seconds = time.monotonic() - started
        cpu = {program: round(cpu_seconds(pid) - cpu_before[program], 2) for program, pid in pids.items()}

        deleting = time.monotonic()
        names = [job["metadata"]["name"] for job in api.list_all(kinds.JOB, "default")["items"]]

        def delete(name: str) -> None:
            with contextlib.suppress(NotFound):
                api.delete(kinds.JOB, name, "default")

        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(delete, names))
        gc_done, left = _wait("garbage collection", lambda: not _left(api) or _left(api), timeout, interval=1.0)
        return {
            "jobs": jobs,
            "pods_per_job": pods,
            "nodes": nodes,
            "create_failures": failures[:10],
            "created_seconds": round(created_seconds, 2),
            "all_running": all_running,
            "phases": phases if not all_running else {"Running": jobs},
            "running_seconds": round(running_seconds, 2),
            "controller_cpu_seconds": cpu["controller"],
            "up_cpu_seconds": cpu["up"],
            "sim_nodes_cpu_seconds": cpu["sim-nodes"],
            "scheduler_cpu_seconds": cpu["scheduler"],
            "gc_seconds": round(time.monotonic() - deleting, 2),
            "left_behind": {} if gc_done else left,
            "cpus": os.cpu_count(),
        }
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lahar bench controller", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--pods-per-job", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=100, help="simulated nodes (8 CPU, 32Gi, 110 pods each)")
    parser.add_argument("--clients", type=int, default=8, help="threads creating and deleting the jobs")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for Running, then for GC")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.pods_per_job < 1 or args.nodes < 1 or args.clients < 1:
        parser.error("--jobs, --pods-per-job, --nodes and --clients must be at least 1")
    result = run(args.jobs, args.pods_per_job, args.nodes, args.clients, args.timeout)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['jobs']} jobs x {result['pods_per_job']} pods on {result['nodes']} simulated nodes")
        print(f"  created in {result['created_seconds']} s")
        state = "all Running" if result["all_running"] else f"NOT all Running: {result['phases']}"
        print(f"  {state} after {result['running_seconds']} s  (target <= 60 s)")
        print(f"  controller CPU: {result['controller_cpu_seconds']} s  (target <= 60 s)")
        print(
            f"  lahar up (API server) CPU: {result['up_cpu_seconds']} s, "
            f"simulated nodes CPU: {result['sim_nodes_cpu_seconds']} s, "
            f"scheduler CPU: {result['scheduler_cpu_seconds']} s"
        )
        print(f"  deleted and garbage-collected in {result['gc_seconds']} s; left behind: {result['left_behind'] or 0}")
        if result["create_failures"]:
            print(f"  create failures: {result['create_failures']}")
    return 0 if result["all_running"] and not result["left_behind"] else 1


if __name__ == "__main__":
    sys.exit(main())
