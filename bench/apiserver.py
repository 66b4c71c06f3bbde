"""Create and bind throughput of the embedded API server over HTTP, with the official client.

    python -m bench.apiserver [--pods 4000] [--threads 8] [--json]

Starts `lahar apiserver` as a separate process on loopback (a fresh data directory), creates
--pods pods from --threads client threads (one shared kubernetes ApiClient, as a component
would), then binds every pod to one of 100 nodes through the pods/binding subresource, and
prints creates/s and binds/s. Responses are read raw (`_preload_content=False`), as Lahar's
components do on hot paths; request bodies go through the client's own serialization.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from lahar.endpoints import free_loopback_port

NODES = 100


def start_server(data_dir: Path, port: int, fsync: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lahar",
            "apiserver",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--fsync",
            fsync,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("apiserver did not start")


def pod_body(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bench-{index}", "labels": {"app": "bench"}},
        "spec": {
            "schedulerName": "lahar",
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}
            ],
        },
    }


def drain(response: Any) -> None:
    """Read a raw response to its end and hand its connection back to the pool for reuse."""
    _ = response.data  # reading the property consumes the body
    response.release_conn()


def timed(count: int, threads: int, work: Callable[[int], None]) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(work, range(count)):
            pass
    return time.perf_counter() - start


def run(pods: int, threads: int, fsync: str) -> dict[str, Any]:
    port = free_loopback_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_server(Path(tmp), port, fsync)
        try:
            configuration = client.Configuration()
            configuration.host = f"http://127.0.0.1:{port}"
            configuration.connection_pool_maxsize = threads
            api = client.CoreV1Api(client.ApiClient(configuration))

            def create(i: int) -> None:
                # a plain dict body: the client serialises it as is (the typed V1Pod is slower to build)
                drain(api.create_namespaced_pod("default", pod_body(i), _preload_content=False))  # type: ignore[arg-type]

            def bind(i: int) -> None:
                body = client.V1Binding(
                    metadata=client.V1ObjectMeta(name=f"bench-{i}"),
                    target=client.V1ObjectReference(kind="Node", name=f"node-{i % NODES}"),
                )
                drain(api.create_namespaced_pod_binding(f"bench-{i}", "default", body, _preload_content=False))

            create_seconds = timed(pods, threads, create)
            bind_seconds = timed(pods, threads, bind)
            # _preload_content=False returns the raw urllib3 response, not the V1PodList the stubs say
            raw: Any = api.list_namespaced_pod("default", field_selector="spec.nodeName!=", _preload_content=False)
            bound = json.loads(raw.data)["items"]
        finally:
            proc.terminate()
            proc.wait(10)
    return {
        "benchmark": "apiserver",
        "pods": pods,
        "threads": threads,
        "fsync": fsync,
        "creates_per_second": round(pods / create_seconds, 1),
        "binds_per_second": round(pods / bind_seconds, 1),
        "bound_pods": len(bound),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--fsync", choices=("normal", "full"), default="normal")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.pods < 1 or args.threads < 1:
        parser.error("--pods and --threads must be at least 1")
    result = run(args.pods, args.threads, args.fsync)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['pods']} pods, {result['threads']} client threads, fsync={result['fsync']}, "
            f"{result['cpus']} CPUs (client and server share them)"
        )
        print(f"  creates: {result['creates_per_second']:>8.1f} /s")
        print(f"  binds:   {result['binds_per_second']:>8.1f} /s   ({result['bound_pods']} pods bound)")
    return 0 if result["bound_pods"] == args.pods else 1


if __name__ == "__main__":
    raise SystemExit(main())
