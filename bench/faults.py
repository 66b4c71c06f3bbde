"""The fault and abuse suite (issue 15): Lahar's programs as separate processes on loopback, hurt on
purpose, with the promises checked afterwards.

    lahar bench faults [--mode short|long] [--only crash,outage,...] [--json]

Scenarios (each prints its figures; a broken promise makes the exit status 1):

- crash: a workload of Volcano Jobs on simulated nodes while a writer creates ConfigMaps; each
  round SIGKILLs the API server, the scheduler, the controller, the node process (the simulated
  nodes and their report streams) or an agent at a random moment and starts it again. Afterwards:
  no acknowledged write lost, no pod bound to two nodes, no pod or PodGroup without its Job, every
  Job in its right final state.
- outage: the API server stopped (SIGSTOP: connections hang, as in a partition) for 5 s (and 60 s
  in the long mode); the Jobs in flight and one created after it still complete.
- stream-cut: the node process killed (every report stream cut) and started again; the
  scheduler receives reports again.
- watch-410: the API server restarted (its watch history is gone) while writes go on; an
  informer that resumes gets 410 Gone, lists again and misses nothing.
- big-patches: a 1 MiB ConfigMap patched 50 (long: 300) times; the API server's memory levels off
  at its watch history's byte bound.
- enospc: the API server on a small tmpfs filled up: writes answer 507 and change nothing,
  reads go on, writes succeed again once space is freed (needs root to mount; skipped otherwise).
- load: concurrent clients mixing list, watch, create and patch; p99 latency, error rate and the
  API server's RSS after warm-up and at the end.

The short mode is what `make test` runs (tests/faults, about a minute); the long mode the figures
in docs/reliability.md. The property-based fuzzing of the decoders and validators lives in
tests/faults/test_fuzz.py (hypothesis), which `--mode long` runs with more examples.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import requests

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.client.kubeconfig import embedded_kubeconfig
from lahar.endpoints import free_loopback_port

NAMESPACE = "default"
SIM_PREFIX = "fault-sim-"
REPORT_TOKEN = "fault-suite-report-token"
PROGRAMS = ("apiserver", "scheduler", "controller", "nodes", "agent")
FINAL_PHASES = {"Completed", "Failed", "Aborted", "Terminated"}


@dataclass(frozen=True)
class Mode:
    name: str
    crash_rounds: int
    jobs: int
    outages: tuple[float, ...]
    load_clients: int
    load_seconds: float
    fuzz_examples: int
    big_patches: int
    history_mib: int  # the API server's --watch-history-mib in the big-patches scenario


SHORT = Mode(
    "short",
    crash_rounds=5,
    jobs=5,
    outages=(5.0,),
    load_clients=100,
    load_seconds=3.0,
    fuzz_examples=100,
    big_patches=50,
    history_mib=16,
)
LONG = Mode(
    "long",
    crash_rounds=12,
    jobs=20,
    outages=(5.0, 60.0),
    load_clients=100,
    load_seconds=60.0,
    fuzz_examples=3000,
    big_patches=300,
    history_mib=64,
)
MODES = {m.name: m for m in (SHORT, LONG)}


@dataclass
class Result:
    """One scenario's figures and the promises it found broken (empty: all kept)."""

    scenario: str
    figures: dict[str, Any] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)
    skipped: str = ""

    def check(self, promise: bool, what: str) -> None:
        if not promise:
            self.broken.append(what)


# --- the programs -----------------------------------------------------------------------------------


class Cluster:
    """The API server, scheduler, controller, a process of simulated nodes and an agent, each a
    child process with its log in the work directory, each killable and restartable."""

    def __init__(
        self, work: Path, sim_nodes: int = 4, data_dir: Path | None = None, apiserver_args: tuple[str, ...] = ()
    ) -> None:
        self.work = work
        self.sim_nodes = sim_nodes
        self.data_dir = data_dir or work / "data"
        self.apiserver_args = apiserver_args
        self.port = free_loopback_port()
        self.report_port = free_loopback_port()
        self.metrics_ports = {name: free_loopback_port() for name in ("scheduler", "controller", "agent")}
        self.url = f"http://127.0.0.1:{self.port}"
        self.kubeconfig = work / "kubeconfig"
        self.kubeconfig.write_text(embedded_kubeconfig(self.url))
        self.tokens = work / "report-tokens"
        self.tokens.write_text(f"{REPORT_TOKEN} *\n")
        self.agent_token = work / "agent-token"
        self.agent_token.write_text(REPORT_TOKEN + "\n")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._api: KubeApi | None = None

    def argv(self, name: str) -> list[str]:
        lahar = [sys.executable, "-P", "-m", "lahar"]
        kubeconfig = ["--kubeconfig", str(self.kubeconfig)]
        report = f"127.0.0.1:{self.report_port}"
        metrics = ["--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_ports.get(name, 0))]
        if name == "apiserver":
            return [
                *lahar,
                "apiserver",
                "--data-dir",
                str(self.data_dir),
                "--port",
                str(self.port),
                *self.apiserver_args,
            ]
        if name == "scheduler":
            return [
                *lahar,
                "scheduler",
                *kubeconfig,
                "--report-address",
                report,
                "--token-file",
                str(self.tokens),
                *metrics,
            ]
        if name == "controller":
            return [*lahar, "controller", *kubeconfig, *metrics]
        if name == "nodes":
            return [*lahar, "sim-nodes", "--count", str(self.sim_nodes), *kubeconfig, "--report-address", report,
                    "--token-file", str(self.agent_token), "--prefix", SIM_PREFIX, "--report-interval", "1",
                    *metrics]  # fmt: skip
        if name == "agent":  # an agent of a node of its own, streaming reports; no QoS (no cgroups here)
            return [*lahar, "agent", *kubeconfig, "--node", "fault-agent-node", "--no-qos", "--interval", "1",
                    "--scheduler-address", report, "--token-file", str(self.agent_token), *metrics]  # fmt: skip
        raise ValueError(name)

    def start(self, name: str) -> None:
        with open(self.work / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                self.argv(name),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        if name == "apiserver":
            self.wait_api()

    def start_all(self) -> None:
        for name in PROGRAMS:
            self.start(name)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(self.ready_nodes()) < self.sim_nodes:
            time.sleep(0.2)

    def wait_api(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.procs.get("apiserver")
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the API server exited: {(self.work / 'apiserver.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the API server did not answer")

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                proc.wait(30)

    def restart(self, name: str) -> None:
        self.kill(name)
        self.start(name)

    def stop_all(self) -> None:
        for name in reversed(PROGRAMS):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._api is not None:
            self._api.api_client.close()
            self._api = None

    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(new_api_client(str(self.kubeconfig), pool_size=16), timeout=10)
        return self._api

    def ready_nodes(self) -> list[str]:
        try:
            nodes = self.api().list_all(kinds.NODE)["items"]
        except Exception:  # the API may be down in the middle of a round
            return []
        return [
            n["metadata"]["name"]
            for n in nodes
            if n["metadata"]["name"].startswith(SIM_PREFIX)
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in n["status"].get("conditions", []))
        ]

    def metric(self, program: str, name: str) -> float:
        """A metric's total over its label sets, from the program's /metrics (0 when absent)."""
        url = f"http://127.0.0.1:{self.metrics_ports[program]}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                text = answer.read().decode()
        except OSError:  # not listening yet, or just killed
            return 0.0
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and (line[len(name)] in " {")
        )

    def rss_bytes(self, name: str) -> int:
        proc = self.procs[name]
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


@contextlib.contextmanager
def cluster(work: Path, **kwargs: Any) -> Iterator[Cluster]:
    system = Cluster(work, **kwargs)
    try:
        system.start_all()
        yield system
    finally:
        system.stop_all()


# --- the workload -----------------------------------------------------------------------------------


def sim_job(name: str, replicas: int, seconds: float, exit_code: int = 0) -> dict[str, Any]:
    """A Volcano Job of pods the simulated nodes run `seconds` and end with `exit_code`; a failed
    pod aborts it (so its right final state is Aborted, else Completed)."""
    annotations = {"lahar.dev/sim-duration": str(seconds), "lahar.dev/sim-exit-code": str(exit_code)}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"fault-suite": "true"}},
        "spec": {
            "schedulerName": "lahar",
            "minAvailable": replicas,
            "maxRetry": 0,
            "policies": [{"event": "PodFailed", "action": "AbortJob"}],
            "tasks": [
                {
                    "name": "part",
                    "replicas": replicas,
                    "template": {
                        "metadata": {"annotations": annotations},
                        "spec": {
                            "restartPolicy": "Never",
                            "nodeSelector": {"lahar.dev/simulated": "true"},
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }


def expected_phase(job: dict[str, Any]) -> str:
    annotations = job["spec"]["tasks"][0]["template"]["metadata"]["annotations"]
    return "Completed" if annotations["lahar.dev/sim-exit-code"] == "0" else "Aborted"


def create_with_retry(system: Cluster, kind: kinds.Kind, obj: dict[str, Any], timeout: float = 60.0) -> None:
    """Create through outages: an AlreadyExists after a lost answer means the first try landed."""
    from lahar.client.errors import AlreadyExists

    deadline = time.monotonic() + timeout
    while True:
        try:
            system.api().create(kind, obj, NAMESPACE)
            return
        except AlreadyExists:
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def job_phases(system: Cluster, names: list[str]) -> dict[str, str]:
    phases = {}
    for job in system.api().list_all(kinds.JOB, NAMESPACE)["items"]:
        if job["metadata"]["name"] in names:
            phases[job["metadata"]["name"]] = (job.get("status") or {}).get("state", {}).get("phase", "")
    return phases


def wait_final(system: Cluster, names: list[str], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    phases: dict[str, str] = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            phases = job_phases(system, names)
            if len(phases) == len(names) and all(p in FINAL_PHASES for p in phases.values()):
                break
        time.sleep(0.5)
    return phases


class _Background:
    """A loop (`_run`) on a thread of its own for the length of a `with` block."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        raise NotImplementedError


class Writer(_Background):
    """Creates ConfigMaps one after another and remembers the ones the server acknowledged (2xx);
    what was acknowledged must exist afterwards, whatever was killed meanwhile."""

    def __init__(self, system: Cluster, prefix: str) -> None:
        super().__init__()
        self.system = system
        self.prefix = prefix
        self.acked: list[str] = []
        self.refused = 0

    def _run(self) -> None:
        session = requests.Session()
        url = f"{self.system.url}/api/v1/namespaces/{NAMESPACE}/configmaps"
        index = 0
        while not self._stop.is_set():
            name = f"{self.prefix}-{index}"
            try:
                response = session.post(url, json={"metadata": {"name": name}, "data": {"i": str(index)}}, timeout=5)
            except requests.RequestException:
                self.refused += 1
                session = requests.Session()
                time.sleep(0.1)
                continue
            if 200 <= response.status_code < 300:
                self.acked.append(name)
                index += 1
            elif response.status_code == 409:  # an earlier try landed though its answer was lost
                index += 1
            else:
                self.refused += 1
            time.sleep(0.02)

    def lost(self) -> list[str]:
        stored = {cm["metadata"]["name"] for cm in self.system.api().list_all(kinds.CONFIGMAP, NAMESPACE)["items"]}
        return [name for name in self.acked if name not in stored]


class BindWatcher(_Background):
    """Lists pods every half second and remembers every node each pod (by uid) was seen on."""

    def __init__(self, system: Cluster) -> None:
        super().__init__()
        self.system = system
        self.nodes: dict[str, set[str]] = {}

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):
                self.observe()

    def observe(self) -> None:
        for pod in self.system.api().list_all(kinds.POD, NAMESPACE)["items"]:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                self.nodes.setdefault(pod["metadata"]["uid"], set()).add(node)

    def double_bound(self) -> list[str]:
        return [uid for uid, nodes in self.nodes.items() if len(nodes) > 1]


def orphans(system: Cluster) -> list[str]:
    """Pods and PodGroups whose owning Job (by uid) no longer exists."""
    api = system.api()
    job_uids = {job["metadata"]["uid"] for job in api.list_all(kinds.JOB, NAMESPACE)["items"]}
    found = []
    for kind in (kinds.POD, kinds.PODGROUP):
        for obj in api.list_all(kind, NAMESPACE)["items"]:
            owners = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("kind") == "Job"]
            if owners and not any(r.get("uid") in job_uids for r in owners):
                found.append(f"{kind.kind}/{obj['metadata']['name']}")
    return found


# --- the scenarios ----------------------------------------------------------------------------------


def crash(mode: Mode, system: Cluster, rng: random.Random) -> Result:
    result = Result("crash")
    jobs = [
        sim_job(f"crash-{i}", replicas=rng.randint(1, 3), seconds=rng.uniform(0.5, 3), exit_code=int(i % 5 == 4))
        for i in range(mode.jobs)
    ]
    killed: dict[str, int] = dict.fromkeys(PROGRAMS, 0)
    with Writer(system, "crash-write") as writer, BindWatcher(system) as binds:
        for index, job in enumerate(jobs):
            create_with_retry(system, kinds.JOB, job)
            if index % max(len(jobs) // max(mode.crash_rounds, 1), 1) == 0 and sum(killed.values()) < mode.crash_rounds:
                victim = PROGRAMS[sum(killed.values()) % len(PROGRAMS)]  # each program in turn
                time.sleep(rng.uniform(0.2, 1.5))  # a random point of the workload
                system.kill(victim)
                killed[victim] += 1
                time.sleep(rng.uniform(0.2, 1.0))
                system.start(victim)
        while sum(killed.values()) < mode.crash_rounds:
            victim = PROGRAMS[sum(killed.values()) % len(PROGRAMS)]
            system.kill(victim)
            killed[victim] += 1
            time.sleep(rng.uniform(0.2, 1.0))
            system.start(victim)
        names = [job["metadata"]["name"] for job in jobs]
        phases = wait_final(system, names, timeout=60 + 10 * mode.jobs)
        binds.observe()
    lost = writer.lost()
    wrong = {
        job["metadata"]["name"]: phases.get(job["metadata"]["name"], "missing")
        for job in jobs
        if phases.get(job["metadata"]["name"]) != expected_phase(job)
    }
    orphaned = orphans(system)
    result.figures = {
        "rounds survived": sum(killed.values()),
        "killed": ", ".join(f"{name} {count}" for name, count in killed.items()),
        "acknowledged writes": len(writer.acked),
        "writes lost": len(lost),
        "pods bound twice": len(binds.double_bound()),
        "orphaned pods/PodGroups": len(orphaned),
        "jobs in their right final state": f"{len(jobs) - len(wrong)}/{len(jobs)}",
    }
    result.check(not lost, f"acknowledged writes lost: {lost[:5]}")
    result.check(not binds.double_bound(), f"pods bound twice: {binds.double_bound()[:5]}")
    result.check(not orphaned, f"orphans: {orphaned[:5]}")
    result.check(not wrong, f"jobs not in their right final state: {wrong}")
    return result


def outage(mode: Mode, system: Cluster, rng: random.Random) -> Result:
    result = Result("outage")
    for seconds in mode.outages:
        before = sim_job(f"outage-{seconds:.0f}-before", replicas=2, seconds=seconds / 2 + 1)
        create_with_retry(system, kinds.JOB, before)
        time.sleep(1.0)
        system.kill("apiserver", signal.SIGSTOP)  # connections hang, as in a partition
        time.sleep(seconds)
        system.kill("apiserver", signal.SIGCONT)
        began = time.monotonic()
        after = sim_job(f"outage-{seconds:.0f}-after", replicas=2, seconds=1)
        create_with_retry(system, kinds.JOB, after)
        names = [before["metadata"]["name"], after["metadata"]["name"]]
        phases = wait_final(system, names, timeout=120)
        recovered = time.monotonic() - began
        done = all(phases.get(n) == "Completed" for n in names)
        result.figures[f"{seconds:.0f} s outage: jobs completed"] = "yes" if done else f"no ({phases})"
        result.figures[f"{seconds:.0f} s outage: a new job done in"] = f"{recovered:.1f} s"
        result.check(done, f"after a {seconds:.0f} s outage the jobs did not complete: {phases}")
    return result


def stream_cut(mode: Mode, system: Cluster, rng: random.Random) -> Result:
    result = Result("stream-cut")
    name = "lahar_scheduler_reports_total"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and system.metric("scheduler", name) == 0:
        time.sleep(0.5)
    before = system.metric("scheduler", name)
    system.kill("nodes")
    system.kill("agent")
    cut_at = time.monotonic()
    time.sleep(1.0)
    system.start("nodes")
    system.start("agent")
    resumed = None
    while time.monotonic() - cut_at < 60:
        if system.metric("scheduler", name) > before + system.sim_nodes:
            resumed = time.monotonic() - cut_at
            break
        time.sleep(0.25)
    result.figures["reports before the cut"] = int(before)
    result.figures["reports resumed after"] = f"{resumed:.1f} s" if resumed is not None else "never"
    result.check(resumed is not None, "the scheduler received no report after the streams were cut")
    return result


def watch_410(mode: Mode, system: Cluster, rng: random.Random) -> Result:
    from lahar.client.informer import Informer

    result = Result("watch-410")
    informer = Informer(kinds.CONFIGMAP, system.api(), NAMESPACE, label_selector="fault=watch")
    informer.start()
    informer.wait_for_sync(30)
    names = [f"watched-{i}" for i in range(60)]
    for name in names[:30]:
        create_with_retry(system, kinds.CONFIGMAP, {"metadata": {"name": name, "labels": {"fault": "watch"}}})
    relists = informer.relists
    system.restart("apiserver")  # the history is gone: resuming watches get 410 Gone
    for name in names[30:]:
        create_with_retry(system, kinds.CONFIGMAP, {"metadata": {"name": name, "labels": {"fault": "watch"}}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(informer.keys()) < len(names):
        time.sleep(0.2)
    seen = len(informer.keys())
    informer.stop()
    result.figures["relists after the restart"] = informer.relists - relists
    result.figures["objects seen"] = f"{seen}/{len(names)}"
    result.check(seen == len(names), f"the informer missed {len(names) - seen} objects after a 410")
    result.check(informer.relists > relists, "the informer never listed again")
    return result


def enospc(mode: Mode, work: Path, rng: random.Random) -> Result:
    result = Result("enospc")
    mount = work / "small"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
        ).returncode
    ):
        result.skipped = "needs root and tmpfs to make a small disk"
        return result
    try:
        filler = mount / "filler"
        filler.write_bytes(b"\0" * (1024 * 1024))  # freed later: the space that "returns"
        system = Cluster(work, data_dir=mount / "data")
        system.start("apiserver")
        try:
            url = f"{system.url}/api/v1/namespaces/{NAMESPACE}/configmaps"
            index = 0
            while True:
                response = requests.post(
                    url, json={"metadata": {"name": f"fill-{index}"}, "data": {"x": "y" * 100_000}}, timeout=10
                )
                if response.status_code != 201 or index >= 200:
                    break
                index += 1
            refused = response.status_code
            reason = response.json().get("reason", "") if refused != 201 else ""
            absent = requests.get(f"{url}/fill-{index}", timeout=10).status_code == 404
            listed = requests.get(url, timeout=10)
            stored = len(listed.json()["items"]) if listed.status_code == 200 else -1
            filler.unlink()
            again = requests.post(url, json={"metadata": {"name": "after-space-returned"}}, timeout=10)
            result.figures["writes before the disk was full"] = index
            result.figures["answer when full"] = f"{refused} {reason}"
            result.figures["reads while full"] = "ok" if listed.status_code == 200 else listed.status_code
            result.figures["write after space returned"] = again.status_code
            result.check(refused == 507, f"a full disk answered {refused}, not 507")
            result.check(absent, "a refused write was stored")
            result.check(stored == index, f"{stored} objects listed, {index} acknowledged")
            result.check(again.status_code == 201, f"after space returned a write got {again.status_code}")
        finally:
            system.stop_all()
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    return result


def big_patches(mode: Mode, work: Path, rng: random.Random) -> Result:
    """A 1 MiB ConfigMap patched again and again (the issue's 300 times grew the server to 667 MiB):
    the watch history keeps at most its byte bound of it, so the RSS levels off."""
    result = Result("big-patches")
    history_mib = mode.history_mib
    system = Cluster(work, apiserver_args=("--watch-history-mib", str(history_mib)))
    system.start("apiserver")
    try:
        url = f"{system.url}/api/v1/namespaces/{NAMESPACE}/configmaps"
        session = requests.Session()
        session.post(url, json={"metadata": {"name": "big"}, "data": {"x": "0"}}, timeout=30)
        baseline = system.rss_bytes("apiserver")
        codes: set[int] = set()
        for round_ in range(mode.big_patches):
            body = json.dumps({"data": {"x": f"{round_:07d}" * (1024 * 1024 // 7)}})
            response = session.patch(
                f"{url}/big", data=body, headers={"Content-Type": "application/merge-patch+json"}, timeout=30
            )
            codes.add(response.status_code)
        after = system.rss_bytes("apiserver")
        growth = (after - baseline) / 2**20
        # each change is held as its JSON and its parsed object: about twice the byte bound
        bound = 2 * history_mib + 64
        result.figures = {
            "1 MiB patches": mode.big_patches,
            "answers": ", ".join(map(str, sorted(codes))),
            "history bound": f"{history_mib} MiB",
            "RSS before / after": f"{baseline / 2**20:.0f} / {after / 2**20:.0f} MiB",
        }
        result.check(codes == {200}, f"patches answered {sorted(codes)}")
        result.check(growth < bound, f"the server grew {growth:.0f} MiB, more than {bound} MiB")
    finally:
        system.stop_all()
    return result


def load(mode: Mode, work: Path, rng: random.Random) -> Result:
    result = Result("load")
    system = Cluster(work)
    system.start("apiserver")
    try:
        latencies: list[float] = []
        errors = 0
        server_errors = 0
        lock = threading.Lock()
        stop = threading.Event()
        base = f"{system.url}/api/v1/namespaces/{NAMESPACE}/configmaps"

        def client(number: int) -> None:
            nonlocal errors, server_errors
            session = requests.Session()
            own = random.Random(number)
            index = 0
            while not stop.is_set():
                action = own.choice(("list", "list", "create", "patch", "watch"))
                began = time.perf_counter()
                try:
                    if action == "list":
                        response = session.get(base, params={"labelSelector": f"client={number % 10}"}, timeout=30)
                    elif action == "create":
                        body: dict[str, Any] = {
                            "metadata": {"name": f"load-{number}-{index}", "labels": {"client": str(number % 10)}}
                        }
                        response = session.post(base, json=body, timeout=30)
                        index += 1
                    elif action == "patch" and index:
                        response = session.patch(
                            f"{base}/load-{number}-{own.randrange(index)}",
                            json={"data": {"n": str(index)}},
                            headers={"Content-Type": "application/merge-patch+json"},
                            timeout=30,
                        )
                    else:
                        response = session.get(base, params={"watch": "1", "timeoutSeconds": "1"}, timeout=30)
                except requests.RequestException:
                    with lock:
                        errors += 1
                    continue
                elapsed = time.perf_counter() - began
                with lock:
                    if action != "watch":
                        latencies.append(elapsed)
                    if response.status_code >= 500:
                        server_errors += 1
                    elif response.status_code >= 400:
                        errors += 1

        with ThreadPoolExecutor(mode.load_clients) as pool:
            for number in range(mode.load_clients):
                pool.submit(client, number)
            time.sleep(min(2.0, mode.load_seconds / 4))
            warm = system.rss_bytes("apiserver")
            peak = warm
            ends = time.monotonic() + mode.load_seconds
            while time.monotonic() < ends:
                time.sleep(0.5)
                peak = max(peak, system.rss_bytes("apiserver"))
            stop.set()
        latencies.sort()
        total = len(latencies)
        p99 = latencies[min(int(total * 0.99), total - 1)] if total else 0.0
        result.figures = {
            "clients": mode.load_clients,
            "requests": total,
            "p50 latency": f"{statistics.median(latencies) * 1000:.0f} ms" if total else "-",
            "p99 latency": f"{p99 * 1000:.0f} ms",
            "errors (4xx, refused)": f"{errors} ({errors / max(total, 1):.2%})",
            "5xx": server_errors,
            "API server RSS after warm-up": f"{warm / 2**20:.0f} MiB",
            "API server peak RSS": f"{peak / 2**20:.0f} MiB",
        }
        result.check(server_errors == 0, f"{server_errors} answers were 5xx")
        result.check(total > 0, "no request was answered")
    finally:
        system.stop_all()
    return result


# Scenarios on one whole cluster, in this order (each leaves it running and whole), and those
# that need an API server of their own.
CLUSTER_SCENARIOS: dict[str, Callable[[Mode, Cluster, random.Random], Result]] = {
    "crash": crash,
    "outage": outage,
    "stream-cut": stream_cut,
    "watch-410": watch_410,
}
SERVER_SCENARIOS: dict[str, Callable[[Mode, Path, random.Random], Result]] = {
    "big-patches": big_patches,
    "enospc": enospc,
    "load": load,
}
SCENARIOS = [*CLUSTER_SCENARIOS, *SERVER_SCENARIOS, "fuzz"]


def fuzz(mode: Mode) -> Result:
    """The property-based tests (tests/faults/test_fuzz.py) with the mode's number of examples."""
    result = Result("fuzz")
    tests = Path(__file__).resolve().parents[1] / "tests" / "faults" / "test_fuzz.py"
    if not tests.exists():
        result.skipped = "the tests/ folder is not here (an installed wheel)"
        return result
    counts_file = Path(tempfile.mkstemp(prefix="lahar-fuzz-")[1])
    env = {**os.environ, "LAHAR_FUZZ_EXAMPLES": str(mode.fuzz_examples), "LAHAR_FUZZ_COUNTS": str(counts_file)}
    began = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tests.parents[2],
    )
    counts = [line for line in counts_file.read_text().splitlines() if line.startswith("fuzz:")]
    counts_file.unlink()
    tried = sum(int(line.split()[-1]) for line in counts)
    result.figures = {"inputs tried": tried, "targets": len(counts), "time": f"{time.monotonic() - began:.0f} s"}
    for line in counts:
        target, _, count = line[len("fuzz: ") :].rpartition(" ")
        result.figures[f"  {target}"] = count
    result.check(run.returncode == 0, "a property failed:\n" + run.stdout[-3000:])
    return result


def table(results: list[Result]) -> str:
    rows = []
    for result in results:
        if result.skipped:
            rows.append((result.scenario, "skipped", result.skipped))
            continue
        for name, value in result.figures.items():
            rows.append((result.scenario, name, str(value)))
        rows.append(
            (result.scenario, "promises", "kept" if not result.broken else "BROKEN: " + "; ".join(result.broken))
        )
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}" for a, b, c in rows)


def run(mode: Mode, only: list[str], seed: int, work: Path) -> list[Result]:
    rng = random.Random(seed)
    results = []

    def timed(name: str, scenario: Callable[[], Result]) -> None:
        began = time.monotonic()
        result = scenario()
        result.figures.setdefault("seconds", f"{time.monotonic() - began:.0f}")
        print(f"[{name}] {'skipped' if result.skipped else 'done'} in {time.monotonic() - began:.0f} s", flush=True)
        results.append(result)

    shared = [name for name in CLUSTER_SCENARIOS if name in only]
    if shared:
        (work / "cluster").mkdir()
        with cluster(work / "cluster") as system:
            for name in shared:
                timed(name, lambda name=name: CLUSTER_SCENARIOS[name](mode, system, rng))  # type: ignore[misc]
    for name in SERVER_SCENARIOS:
        if name in only:
            (work / name).mkdir()
            timed(name, lambda name=name: SERVER_SCENARIOS[name](mode, work / name, rng))  # type: ignore[misc]
    if "fuzz" in only:
        timed("fuzz", lambda: fuzz(mode))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lahar bench faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=sorted(MODES), default="long")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="scenarios, comma-separated")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.add_argument("--keep", type=Path, help="keep the programs' logs in this directory")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in only if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(unknown)} (there are: {', '.join(SCENARIOS)})")
    with tempfile.TemporaryDirectory(prefix="lahar-faults-") as temporary:
        work = args.keep or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        results = run(MODES[args.mode], only, args.seed, work)
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=2))
    else:
        print(table(results))
    return 1 if any(r.broken for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
