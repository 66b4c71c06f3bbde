"""CPU and memory cost of the agent with many pods.

    lahar bench agent [--pods 100] [--cycles 50] [--seconds 10] [--cgroup v1|v2]
                      [--driver cgroupfs|systemd] [--json]

Builds a synthetic kubelet cgroup tree (the kernel's file formats) with --pods pods of two
containers each, then
1. runs the agent's full collection in this process (node CPU, memory, NUMA, pressure from this
   machine's /proc and /sys; pods from the synthetic tree; GPU/NPU probes) --cycles times and
   prints the CPU time of one cycle (median and p95);
2. runs a real `lahar agent --standalone` process on the same tree at the default 1 s interval
   for --seconds and prints its CPU share of one core and its resident memory, /metrics served.
Targets: at most 20 ms of CPU per cycle (2% of a core at 1 s) and 80 MiB RSS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from lahar.agent.agent import Agent, AgentSettings
from lahar.agent.cgroups.layout import CgroupDriver, CgroupVersion
from lahar.agent.cgroups.synthetic import FakeCgroups, Usage
from lahar.endpoints import free_loopback_port


def synthetic_pods(tree: FakeCgroups, count: int) -> list[dict[str, Any]]:
    """Pods as the API lists them, each with a cgroup holding two containers."""
    pods = []
    for index in range(count):
        uid = str(uuid.UUID(int=index + 1))
        containers = {
            f"{index:04d}{'a' * 60}": Usage(cpu_seconds=index, memory_bytes=64 << 20),
            f"{index:04d}{'b' * 60}": Usage(cpu_seconds=index / 2, memory_bytes=32 << 20),
        }
        tree.add_pod(uid, "Burstable", Usage(cpu_seconds=1.5 * index, memory_bytes=96 << 20), containers)
        pods.append(
            {
                "metadata": {"name": f"pod-{index}", "namespace": "bench", "uid": uid},
                "spec": {
                    "containers": [{"name": "main", "resources": {"requests": {"cpu": "100m"}}}, {"name": "sidecar"}]
                },
                "status": {
                    "qosClass": "Burstable",
                    "containerStatuses": [
                        {"name": "main", "containerID": f"containerd://{index:04d}{'a' * 60}"},
                        {"name": "sidecar", "containerID": f"containerd://{index:04d}{'b' * 60}"},
                    ],
                },
            }
        )
    return pods


def measure_process(cgroup_root: Path, seconds: float) -> tuple[float, float]:
    """(CPU share of one core, RSS in MiB) of a standalone `lahar agent` process, after warm-up."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lahar",
            "agent",
            "--standalone",
            "--node",
            "bench",
            "--cgroup-root",
            str(cgroup_root),
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            str(free_loopback_port()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        process = psutil.Process(proc.pid)
        time.sleep(3.0)  # imports, first collections
        before, started = process.cpu_times(), time.monotonic()
        time.sleep(seconds)
        after, elapsed = process.cpu_times(), time.monotonic() - started
        rss = process.memory_info().rss
        if proc.poll() is not None:
            raise RuntimeError(f"lahar agent exited with {proc.returncode}")
    finally:
        proc.terminate()
        proc.wait(10)
    cpu = (after.user + after.system) - (before.user + before.system)
    return cpu / elapsed, rss / (1 << 20)


def run(pods: int, cycles: int, seconds: float, version: CgroupVersion, driver: CgroupDriver) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = FakeCgroups(Path(tmp), version, driver)
        listed = synthetic_pods(tree, pods)
        agent = Agent(AgentSettings(node="bench", cgroup_root=Path(tmp)), pods=lambda: listed)
        agent.collect()  # warm up: first samples, library probes
        costs = []
        for _ in range(cycles):
            started = time.process_time()
            report = agent.collect()
            costs.append(time.process_time() - started)
        agent.close()
        process_share, process_rss = measure_process(Path(tmp), seconds) if seconds > 0 else (0.0, 0.0)
    costs.sort()
    return {
        "benchmark": "agent",
        "pods": pods,
        "reported_pods": len(report.pods),
        "cycles": cycles,
        "cgroup": f"v{version.value}",
        "driver": driver.value,
        "cpu_ms_per_cycle_median": round(statistics.median(costs) * 1000, 2),
        "cpu_ms_per_cycle_p95": round(costs[int(0.95 * (len(costs) - 1))] * 1000, 2),
        "core_share_at_1s": round(statistics.median(costs), 4),
        "process_core_share": round(process_share, 4),
        "process_rss_mib": round(process_rss, 1),
        "collector_errors": report.health.errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lahar bench agent", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="how long to measure the standalone agent process (0: skip)"
    )
    parser.add_argument("--cgroup", choices=("v1", "v2"), default="v1")
    parser.add_argument("--driver", choices=("cgroupfs", "systemd"), default="cgroupfs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.pods < 0 or args.cycles < 1:
        parser.error("--pods must be >= 0 and --cycles >= 1")
    result = run(args.pods, args.cycles, args.seconds, CgroupVersion(int(args.cgroup[1])), CgroupDriver(args.driver))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['pods']} pods ({result['cgroup']}, {result['driver']}), {result['cycles']} cycles")
        print(
            f"  CPU per cycle: {result['cpu_ms_per_cycle_median']} ms median, "
            f"{result['cpu_ms_per_cycle_p95']} ms p95  (target <= 20 ms)"
        )
        if args.seconds > 0:
            print(
                f"  agent process: {100 * result['process_core_share']:.2f}% of a core at 1 s, "
                f"{result['process_rss_mib']} MiB RSS  (targets <= 2%, <= 80 MiB)"
            )
        if result["collector_errors"]:
            print(f"  collector errors: {result['collector_errors']}")
    return 0 if result["reported_pods"] == args.pods and not result["collector_errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
