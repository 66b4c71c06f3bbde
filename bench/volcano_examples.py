"""Volcano's own example manifests, applied unchanged to `lahar up --sim-nodes 4`: the outcome of
each, as a table (docs/volcano-examples.md holds the last one).

    lahar bench volcano_examples --examples DIR [--wait 40] [--markdown]

DIR is Volcano's `example/` directory (a checkout of github.com/volcano-sh/volcano; the manifests
are read, never copied into Lahar). Every YAML file in it that uses Volcano's APIs
(batch.volcano.sh, scheduling.volcano.sh, flow.volcano.sh) is applied with `lahar apply -f`,
queue and JobTemplate files first, each file alone on the cluster: the Jobs it creates are watched until each
is Running or Completed (or `--wait` seconds pass), then everything it made is deleted. A file
the API refuses is reported with the API's message (the `invalid_jobs/` examples must be
refused). The outcome of a Job that neither runs nor completes is its phase and the reason the
controller or the scheduler gives.

Simulated pods run until deleted, so a Job reaches Running (not Completed) unless its pods end.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lahar.api import kinds
from lahar.bench._cluster import Cluster
from lahar.client.api import KubeApi
from lahar.client.errors import KubeError, NotFound

VOLCANO_GROUPS = ("batch.volcano.sh/", "scheduling.volcano.sh/", "flow.volcano.sh/")
DONE_PHASES = ("Running", "Completed")


@dataclass
class Outcome:
    path: str
    objects: str
    result: str  # Running, Completed, refused, Pending, ...
    detail: str

    def row(self) -> str:
        detail = self.detail.replace("|", "\\|").replace("\n", " ")
        return f"| `{self.path}` | {self.objects} | {self.result} | {detail} |"


def volcano_manifests(examples: Path) -> list[tuple[Path, list[dict[str, Any]]]]:
    """The YAML files that use Volcano's APIs, queue and JobTemplate files first, then by path."""
    found = []
    for path in sorted(examples.rglob("*.y*ml")):
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        except yaml.YAMLError:
            continue
        if any(str(d.get("apiVersion", "")).startswith(VOLCANO_GROUPS) for d in documents):
            found.append((path, documents))
    return sorted(found, key=lambda item: (_order(item[1]), str(item[0])))


# What other files need goes first: queues, then the JobTemplates JobFlows are made from.
SHARED_KINDS = ("Queue", "JobTemplate")


def _order(documents: list[dict[str, Any]]) -> int:
    for position, kind in enumerate(SHARED_KINDS):
        if all(d.get("kind") == kind for d in documents):
            return position
    return len(SHARED_KINDS)


def _apply(kubeconfig: Path, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lahar", "apply", "-f", str(path), "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _job_state(api: KubeApi, name: str, namespace: str) -> dict[str, Any]:
    try:
        return (api.get(kinds.JOB, name, namespace).get("status") or {}).get("state") or {}
    except NotFound:
        return {"phase": "(gone)"}


def _cleanup(api: KubeApi, documents: list[dict[str, Any]]) -> None:
    """Delete what a file made (not queues other files need: those go at the end)."""
    for doc in documents:
        if doc.get("kind") in SHARED_KINDS:
            continue
        meta = doc.get("metadata") or {}
        with contextlib.suppress(KubeError, LookupError):
            kind = kinds.for_object(str(doc.get("apiVersion")), str(doc.get("kind")))
            api.delete(kind, meta.get("name", ""), meta.get("namespace") or "default" if kind.namespaced else None)
    deadline = time.monotonic() + 30
    while (
        time.monotonic() < deadline
        and api.list_all(kinds.POD, "default", label_selector="volcano.sh/job-name")["items"]
    ):
        time.sleep(0.5)


def try_file(
    api: KubeApi, kubeconfig: Path, examples: Path, path: Path, documents: list[dict[str, Any]], wait: float
) -> Outcome:
    relative = str(path.relative_to(examples.parent))
    objects = ", ".join(sorted({f"{d.get('kind')}" for d in documents}))
    applied = _apply(kubeconfig, path)
    if applied.returncode != 0:
        message = (applied.stderr or applied.stdout).strip().splitlines()
        return Outcome(relative, objects, "refused", message[-1] if message else f"exit {applied.returncode}")
    jobs = [d for d in documents if d.get("kind") == "Job" and str(d.get("apiVersion")).startswith("batch.volcano.sh")]
    flows = [d for d in documents if d.get("kind") == "JobFlow"]
    if flows:
        return _flow_outcome(api, relative, objects, flows, documents, wait)
    if not jobs:
        return Outcome(relative, objects, "created", applied.stdout.strip().replace("\n", "; "))
    deadline = time.monotonic() + wait
    states: dict[str, dict[str, Any]] = {}
    while True:
        states = {
            d["metadata"]["name"]: _job_state(api, d["metadata"]["name"], d["metadata"].get("namespace") or "default")
            for d in jobs
        }
        if all(s.get("phase") in DONE_PHASES for s in states.values()) or time.monotonic() > deadline:
            break
        time.sleep(1)
    phases = sorted({s.get("phase", "Pending") for s in states.values()})
    result = "/".join(phases)
    detail = "; ".join(
        f"{name}: {s.get('phase', 'Pending')}"
        + (f" ({s.get('reason')}: {s.get('message')})" if s.get("phase") not in DONE_PHASES and s.get("reason") else "")
        for name, s in states.items()
    )
    _cleanup(api, documents)
    return Outcome(relative, objects, result, detail)


def _flow_outcome(
    api: KubeApi, relative: str, objects: str, flows: list[dict[str, Any]], documents: list[dict[str, Any]], wait: float
) -> Outcome:
    """A JobFlow's outcome: its state once Running or Succeed (or after `wait`), and its Jobs."""
    deadline = time.monotonic() + wait
    while True:
        statuses = [
            api.get(kinds.JOBFLOW, f["metadata"]["name"], f["metadata"].get("namespace") or "default").get("status")
            or {}
            for f in flows
        ]
        phases = [(s.get("state") or {}).get("phase", "Pending") for s in statuses]
        if all(p in ("Running", "Succeed") for p in phases) or time.monotonic() > deadline:
            break
        time.sleep(1)
    detail = "; ".join(
        f"{f['metadata']['name']}: {phase}, jobs running {s.get('runningJobs') or []},"
        f" pending {s.get('pendingJobs') or []}"
        for f, phase, s in zip(flows, phases, statuses, strict=True)
    )
    _cleanup(api, documents)
    return Outcome(relative, objects, "/".join(sorted(set(phases))), detail)


def run(examples: Path, wait: float, nodes: int) -> list[Outcome]:
    data_dir = Path(tempfile.mkdtemp(prefix="lahar-volcano-examples-"))
    cluster = Cluster(data_dir, nodes)
    try:
        api = cluster.start()
        kubeconfig = data_dir / "kubeconfig"
        outcomes = []
        for path, documents in volcano_manifests(examples):
            print(f"  {path.relative_to(examples.parent)}", file=sys.stderr)
            outcomes.append(try_file(api, kubeconfig, examples, path, documents, wait))
        return outcomes
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lahar bench volcano_examples", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=Path, required=True, help="Volcano's example/ directory")
    parser.add_argument("--wait", type=float, default=40.0, help="seconds a file's Jobs get to run")
    parser.add_argument("--nodes", type=int, default=4, help="simulated nodes (default 4, as the issue asks)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    if not args.examples.is_dir():
        parser.error(f"{args.examples} is not a directory")
    outcomes = run(args.examples, args.wait, args.nodes)
    if args.markdown:
        print("| manifest | objects | outcome | detail |\n|---|---|---|---|")
        print("\n".join(outcome.row() for outcome in outcomes))
    else:
        for outcome in outcomes:
            print(f"{outcome.path}: {outcome.result} ({outcome.objects}) {outcome.detail}")
    return 0
