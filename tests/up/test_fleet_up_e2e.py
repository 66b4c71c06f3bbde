"""`lahar up --clusters 3` end to end: three member clusters (each its own embedded API server,
scheduler, controller and simulated nodes, of different sizes and labels) and a hub running
`lahar federation`. Jobs submitted to the hub run in the member that can hold them and show as
Running on the hub; a team's fleet-wide quota holds; a JobFlow's Jobs run in different members in
dependency order. Faults: a member cut off from the hub (a TCP relay in front of it, stopped and
started again: the member's fence stops its copy before the hub places the Job elsewhere), the
federation killed, the whole fleet (hub included) stopped and started again.
Long (seven programs start): marked slow."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.client.errors import NotFound
from lahar.endpoints import free_loopback_port
from lahar.federation import names
from tests.support import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
START_TIMEOUT = 300.0  # seven programs importing at once on a loaded 2-core machine
SIM_DURATION = "lahar.dev/sim-duration"


def job(
    name: str,
    replicas: int,
    cpu: str,
    *,
    gpu: int = 0,
    queue: str = "default",
    seconds: int = 600,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": "1Gi", **({"nvidia.com/gpu": str(gpu)} if gpu else {})}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
        "spec": {
            "minAvailable": replicas,
            "schedulerName": "volcano",
            "queue": queue,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "metadata": {"annotations": {SIM_DURATION: str(seconds)}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "sim",
                                    "resources": {"requests": requests, "limits": requests},
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }


class FleetUp:
    """`lahar up --clusters 3` as a child process, its output collected; start() again after stop()
    brings the same fleet (same data directory) back."""

    def __init__(self, data_dir: Path, extra: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra = extra or []
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self.api: KubeApi | None = None  # the hub's, once started

    def start(self) -> KubeApi:
        argv = [sys.executable, "-m", "lahar", "up", "--clusters", "3", "--data-dir", str(self.data_dir)]
        argv += ["--port", str(free_loopback_port()), *self.extra]
        self.lines.clear()
        proc = self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )

        def read() -> None:
            assert proc.stdout is not None
            self.lines.extend(proc.stdout)

        threading.Thread(target=read, daemon=True).start()
        wait_for(lambda: "The federation is up" in self.text or proc.poll() is not None, START_TIMEOUT, "the fleet")
        assert proc.poll() is None, self.text
        return KubeApi(new_api_client(str(self.data_dir / "kubeconfig")), timeout=10)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def pid_of(self, program: str) -> int:
        """A hub program's pid (the hub's files are at the top of the data directory)."""
        for line in (self.data_dir / "components" / "pids").read_text().splitlines():
            pid, name = line.split()
            if name == program:
                return int(pid)
        raise AssertionError(f"no {program} in the hub's pids file")


# Fault timings short enough for a test: a member silent 3 s is marked, 10 s moved.
POLICY = "heartbeatPeriod: 0.5s\nunreachableAfter: 3s\nredispatchAfter: 10s\n"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetUp]:
    """One fleet for the module (seven programs take a while to start); the fault test, last,
    stops and starts it again."""
    folder = tmp_path_factory.mktemp("fleet")
    (folder / "federation.yaml").write_text(POLICY)
    up = FleetUp(folder / "fleet", ["--federation-policy", str(folder / "federation.yaml")])
    try:
        up.api = up.start()
        yield up
    finally:
        up.stop()


def where(hub: KubeApi, name: str) -> tuple[str, str]:
    try:
        obj = hub.get(kinds.JOB, name, "default")
    except NotFound:
        return "", ""
    phase = ((obj.get("status") or {}).get("state") or {}).get("phase", "")
    return obj["metadata"].get("labels", {}).get(names.CLUSTER_LABEL, ""), phase


@pytest.mark.timeout(600)  # the fleet starts in this test's setup: minutes on a loaded machine
def test_jobs_run_where_they_fit_and_the_team_quota_holds(fleet: FleetUp) -> None:
    hub = fleet.api
    assert hub is not None
    wait_for(lambda: all(c.get("status", {}).get("reachable") for c in hub.list(kinds.CLUSTER)["items"]), 30, "members")
    assert len(hub.list(kinds.CLUSTER)["items"]) == 3
    # A JobFlow on the hub whose two Jobs can only run in different members runs in order.
    for name, spec in (("prep", job("prep", 1, "24", seconds=3)), ("tune", job("tune", 1, "1", gpu=1, seconds=3))):
        template = {"apiVersion": "flow.volcano.sh/v1alpha1", "kind": "JobTemplate", "spec": spec["spec"]}
        hub.create(kinds.JOBTEMPLATE, {**template, "metadata": {"name": name, "namespace": "default"}}, "default")
    flows = [{"name": "prep"}, {"name": "tune", "dependsOn": {"targets": ["prep"]}}]
    hub.create(
        kinds.JOBFLOW,
        {
            "apiVersion": "flow.volcano.sh/v1alpha1",
            "kind": "JobFlow",
            "metadata": {"name": "pipe"},
            "spec": {"flows": flows},
        },
        "default",
    )
    wait_for(lambda: where(hub, "pipe-prep") == ("member-2", "Completed"), 120, "prep Completed on member-2")
    wait_for(lambda: where(hub, "pipe-tune") == ("member-3", "Completed"), 120, "tune Completed on member-3")
    wait_for(
        lambda: hub.get(kinds.JOBFLOW, "pipe", "default").get("status", {}).get("state", {}).get("phase") == "Succeed",
        15,
        "the JobFlow to succeed",
    )
    hub.create(kinds.JOB, job("gpu-train", 2, "2", gpu=2))  # only member-3 has GPUs
    hub.create(kinds.JOB, job("wide", 2, "24"))  # 24-CPU pods: only member-2's 32-CPU nodes
    for name, member in (("gpu-train", "member-3"), ("wide", "member-2")):
        wait_for(lambda n=name, m=member: where(hub, n) == (m, "Running"), 120, f"{name} Running on {member}")
    # A team's quota is fleet-wide: 12 CPUs across all members, jobs of 2 x 4 CPUs each.
    hub.create(kinds.QUEUE, {"metadata": {"name": "team"}, "spec": {"weight": 1, "capability": {"cpu": "12"}}})
    for index in range(3):
        hub.create(kinds.JOB, job(f"team-{index}", 2, "2", queue="team"))  # 4 CPUs each: 3 fit in 12
    hub.create(kinds.JOB, job("team-over", 2, "2", queue="team"))
    wait_for(lambda: all(where(hub, f"team-{i}")[1] == "Running" for i in range(3)), 120, "the team's jobs Running")
    time.sleep(3)
    cluster, phase = where(hub, "team-over")
    assert cluster == "" and phase == "Pending"
    state = hub.get(kinds.JOB, "team-over", "default")["status"]["state"]
    assert state["reason"] == names.REASON_QUOTA


class Relay:
    """A TCP relay on a fixed loopback port to a member's API server: what the hub reaches the
    member through. stop() cuts it off (listener and every open connection: the member stops
    answering the hub, and goes on running); start() again on the same port brings it back."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").rsplit(":", 1)
        self.target = (host, int(port))
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.accepted = 0  # connections relayed so far

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
                self.accepted += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def stop(self) -> None:
        if self._listener is not None:
            # shutdown first: close() alone leaves a socket that another thread is accept()ing on
            # listening (Linux), and the member would still answer.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()


def running_pods(member_api: KubeApi, name: str) -> int:
    """How many pods of the Job `name` run in a member (Running, not being deleted)."""
    pods = member_api.list(kinds.POD, "default", label_selector=f"volcano.sh/job-name={name}")["items"]
    return sum(
        1 for p in pods if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


class Overlap:
    """Samples, in a thread, how many pods of a Job run in each of two members: a fence holds when
    no sample finds both running."""

    def __init__(self, apis: dict[str, KubeApi], name: str) -> None:
        self.apis, self.name = apis, name
        self.samples: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):  # a slow answer: the next sample
                self.samples.append({m: running_pods(api, self.name) for m, api in self.apis.items()})

    def stop(self) -> list[dict[str, int]]:
        self._stop.set()
        self._thread.join(10)
        return self.samples


def copies(member_api: KubeApi, name: str) -> list[dict[str, Any]]:
    """The federation's copies of `name` in a member (those not being deleted)."""
    found = member_api.list(kinds.JOB, "default", label_selector=names.HUB_UID_LABEL)["items"]
    return [j for j in found if j["metadata"]["name"] == name and not j["metadata"].get("deletionTimestamp")]


@pytest.mark.timeout(600)  # about a minute, and the whole fleet starts again
def test_member_loss_federation_kill_and_hub_restart(fleet: FleetUp) -> None:
    """Runs after the test above, on the same fleet, whose Jobs are still there."""
    up, hub = fleet, fleet.api
    assert hub is not None
    relays: list[Relay] = []
    try:
        wait_for(
            lambda: all(c.get("status", {}).get("reachable") for c in hub.list(kinds.CLUSTER)["items"]), 30, "members"
        )
        members = {c["metadata"]["name"]: c["spec"]["endpoint"] for c in hub.list(kinds.CLUSTER)["items"]}
        direct = {
            name: KubeApi(new_api_client(str(up.data_dir / "members" / name / "kubeconfig")), timeout=10)
            for name in members
        }
        # A CPU job that either CPU member can run; cut off the one it runs in.
        hub.create(kinds.JOB, job("loss", 2, "1", annotations={names.CLUSTER_SELECTOR_ANNOTATION: "accelerator=none"}))
        first = wait_for(lambda: where(hub, "loss")[1] == "Running" and where(hub, "loss")[0], 120, "loss Running")
        relay = Relay(members[first])
        relays.append(relay)
        relay.start()
        hub.patch(kinds.CLUSTER, first, {"spec": {"endpoint": relay.url}})
        wait_for(lambda: relay.accepted > 0, 15, "the federation to reach the member through the relay")
        time.sleep(1.0)
        assert hub.get(kinds.CLUSTER, first)["status"]["reachable"] is True
        assert running_pods(direct[first], "loss") == 2
        overlap = Overlap(direct, "loss")
        relay.stop()  # the member goes on running; the hub cannot reach it
        state = lambda: hub.get(kinds.JOB, "loss", "default").get("status", {}).get("state", {})  # noqa: E731
        wait_for(lambda: state().get("reason") == names.REASON_UNREACHABLE, 15, "the job marked")
        marked_at = time.monotonic()
        assert where(hub, "loss")[0] == first  # marked, not moved yet
        second = wait_for(lambda: where(hub, "loss")[0] not in ("", first) and where(hub, "loss")[0], 60, "re-dispatch")
        assert time.monotonic() - marked_at >= 4  # marked after 3 s of silence, moved after 10 s
        wait_for(lambda: where(hub, "loss") == (second, "Running"), 120, "loss Running on its new member")
        samples = overlap.stop()
        # The member's fence stopped its copy when the hub's lease (5 s) ran out, before the hub
        # moved the Job (10 s): never two running copies, and the new one runs.
        assert not [s for s in samples if s[first] and s[second]], samples
        assert any(s[first] == 2 for s in samples) and samples[-1][second] == 2, samples
        moved = hub.get(kinds.JOB, "loss", "default")["metadata"]
        assert moved["annotations"][names.PLACEMENT_ANNOTATION] == "2"
        [stale] = copies(direct[first], "loss")  # the cut-off member still holds the old copy, stopped
        assert stale["metadata"]["annotations"][names.PLACEMENT_ANNOTATION] == "1"
        assert names.FENCED_ANNOTATION in stale["metadata"]["annotations"]
        assert stale["status"]["state"]["phase"] in ("Aborting", "Aborted") and running_pods(direct[first], "loss") == 0
        [fresh] = copies(direct[second], "loss")
        # The member comes back: the stale copy is deleted; one copy is left, the new placement's.
        relay.start()
        wait_for(lambda: not copies(direct[first], "loss"), 30, "the stale copy to be deleted")
        assert [c["metadata"]["uid"] for c in copies(direct[second], "loss")] == [fresh["metadata"]["uid"]]
        for _ in range(10):  # and it stays that way
            assert not copies(direct[first], "loss") and len(copies(direct[second], "loss")) == 1
            time.sleep(0.3)
        # The federation is killed: supervision starts it again; nothing is dispatched twice.
        os.kill(up.pid_of("federation"), signal.SIGKILL)
        wait_for(lambda: "restarted the federation" in up.text, 60, "the federation restarted")
        time.sleep(3.0)
        assert [c["metadata"]["uid"] for c in copies(direct[second], "loss")] == [fresh["metadata"]["uid"]]
        assert not copies(direct[first], "loss") and where(hub, "loss") == (second, "Running")
        # The whole fleet (the hub, the federation, every member) stops and starts again on the
        # same data, down longer than the members' lease (5 s). Each member's fence starts again
        # with no renewal seen: unless the hub renews its lease within the fence's start-up grace
        # (3 s here), it stops the running copies there (it cannot tell a hub that is down from
        # one it is cut off from), and the hub places them again, once. A Job that says on-member-loss: Wait is left
        # running where it was. Nothing is lost, and no Job has two copies.
        steady = job("after", 1, "1", annotations={names.ON_MEMBER_LOSS_ANNOTATION: names.WAIT})
        hub.create(kinds.JOB, steady)
        wait_for(lambda: where(hub, "after")[1] == "Running", 120, "after Running")
        placed = {j["metadata"]["name"]: j["metadata"] for j in hub.list(kinds.JOB, "default")["items"]}
        placed = {name: meta for name, meta in placed.items() if names.CLUSTER_LABEL in (meta.get("labels") or {})}
        assert {"loss", "after", "wide", "gpu-train"} <= set(placed)
        steady_copy = copies(direct[placed["after"]["labels"][names.CLUSTER_LABEL]], "after")[0]["metadata"]["uid"]
        up.stop()
        restarted = datetime.now(UTC).replace(microsecond=0)
        hub = up.api = up.start()
        direct = {
            name: KubeApi(new_api_client(str(up.data_dir / "members" / name / "kubeconfig")), timeout=10)
            for name in members
        }

        def answered_since_restart(cluster: dict[str, Any]) -> bool:
            beat = (cluster.get("status") or {}).get("lastHeartbeatTime")
            return bool(beat) and datetime.fromisoformat(beat.replace("Z", "+00:00")) >= restarted

        wait_for(lambda: all(answered_since_restart(c) for c in hub.list(kinds.CLUSTER)["items"]), 60, "members back")

        def one_copy_each() -> bool:
            for name in placed:
                after = hub.get(kinds.JOB, name, "default")["metadata"]
                found = {m: copies(api, name) for m, api in direct.items()}
                here = found.get((after.get("labels") or {}).get(names.CLUSTER_LABEL, ""), [])
                if sum(len(c) for c in found.values()) != 1 or len(here) != 1:
                    return False
                if here[0]["metadata"]["annotations"][names.PLACEMENT_ANNOTATION] != after["annotations"].get(
                    names.PLACEMENT_ANNOTATION
                ):
                    return False
            return True

        wait_for(one_copy_each, 120, "one copy of every Job, of its current placement")
        time.sleep(3.0)  # several heartbeats and cycles later: still so
        assert one_copy_each()
        for name, before in placed.items():
            after = hub.get(kinds.JOB, name, "default")["metadata"]
            assert after["uid"] == before["uid"]  # nothing lost
            was, now = (int(m["annotations"][names.PLACEMENT_ANNOTATION]) for m in (before, after))
            assert now in (was, was + 1), (name, was, now)  # placed again at most once
        assert hub.get(kinds.JOB, "after", "default")["metadata"]["annotations"][names.PLACEMENT_ANNOTATION] == "1"
        assert copies(direct[placed["after"]["labels"][names.CLUSTER_LABEL]], "after")[0]["metadata"]["uid"] == (
            steady_copy
        )
    finally:
        for relay in relays:
            relay.stop()
