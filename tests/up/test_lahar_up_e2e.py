"""`lahar up` end to end, as a user runs it: a subprocess with its own data directory, API port and
cgroup parent. Jobs run real commands on this machine and reach Completed with their exit codes and
logs; a gang that cannot fit binds nothing; a BE pod's cgroups get the agent's QoS values; a
restart keeps the jobs; a program that dies stops everything; stopping leaves no process and no
cgroup behind. The narrated demo runs once (marked `demo`).

Every process of a test carries a marker in its environment (lahar up and its programs inherit it,
the test pods set it), so whatever survives a failure is found and killed, and reported."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.client.errors import NotFound
from lahar.endpoints import free_loopback_port
from lahar.node.cgroups import CGROUP_ROOT, CgroupTree
from tests.node.support import MARK_ENV, alive, cgroups_skip_reason, force_remove, processes_marked
from tests.support import wait_for

START_TIMEOUT = 120.0  # three programs importing at once on a loaded 2-core machine


class LaharUp:
    """`lahar up` as a child process, its output collected line by line."""

    def __init__(self, data_dir: Path, mark: str, *extra: str) -> None:
        self.data_dir = data_dir
        self.mark = mark
        self.port = free_loopback_port()
        self.cgroup_parent = f"lahar-kubepods-test-{mark}"
        self.argv = [
            sys.executable,
            "-m",
            "lahar",
            "up",
            "--data-dir",
            str(data_dir),
            "--port",
            str(self.port),
            "--cgroup-parent",
            self.cgroup_parent,
            *extra,
        ]
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._api: KubeApi | None = None

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    def start(self, ready: str = "Lahar is up", timeout: float = START_TIMEOUT) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", MARK_ENV: self.mark}
        self.lines = []
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self._reader = threading.Thread(target=self._read, args=(self.proc,), name="lahar-up-output", daemon=True)
        self._reader.start()
        self.wait_for_output(ready, timeout)

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)

    def wait_for_output(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert self.proc is not None
            if self.proc.poll() is not None and self._reader is not None and not self._reader.is_alive():
                raise AssertionError(f"lahar up exited ({self.proc.returncode}) before {text!r}:\n{self.output}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} from lahar up within {timeout:.0f} s:\n{self.output}")
            time.sleep(0.1)

    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(new_api_client(str(self.kubeconfig)), timeout=10)
        return self._api

    def child_pids(self) -> list[int]:
        """The programs' pids, from the file lahar up keeps while it runs."""
        try:
            text = (self.data_dir / "components" / "pids").read_text()
        except OSError:
            return []
        return [int(line.split()[0]) for line in text.splitlines() if line.strip()]

    def program_pid(self, name: str) -> int | None:
        """The pid of one program (scheduler, controller, agent), from the same file."""
        try:
            text = (self.data_dir / "components" / "pids").read_text()
        except OSError:
            return None
        return next(
            (int(pid) for pid, _, program in (line.partition(" ") for line in text.splitlines()) if program == name),
            None,
        )

    def wait(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(10)
        return code

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, as a service manager stops it; the exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def close(self) -> list[str]:
        """Kill whatever is left (lahar up, its programs, the test's pods, the cgroups); what was."""
        left: list[str] = []
        if self._api is not None:
            self._api.api_client.close()
            self._api = None
        if self.proc is not None and self.proc.poll() is None:
            left.append(f"lahar up (pid {self.proc.pid})")
            self.proc.kill()
            self.proc.wait()
        for pid in processes_marked(self.mark):
            left.append(f"pid {pid}: {command_line(pid)}")
            os.kill(pid, signal.SIGKILL)
        if self._reader is not None:
            self._reader.join(10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if cgroups_skip_reason() is None:
            left += force_remove(self.cgroup_parent)
        return left


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "(gone)"


def assert_stopped_cleanly(up: LaharUp, code: int, children: list[int]) -> None:
    assert code == 0, up.output
    assert "stopped; the data stays in" in up.output
    assert children and not [pid for pid in children if alive(pid)], "programs left running"
    assert not processes_marked(up.mark), "processes left running"
    assert not (up.data_dir / "components" / "pids").exists()
    tree = CgroupTree(CGROUP_ROOT, up.cgroup_parent)
    assert not [str(h / up.cgroup_parent) for h in tree.hierarchies if (h / up.cgroup_parent).exists()]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaharUp]:
    """One `lahar up --sim-nodes 2` for the module's tests."""
    instance = LaharUp(tmp_path_factory.mktemp("up") / "data", secrets.token_hex(5), "--sim-nodes", "2")
    try:
        instance.start()
        yield instance
        code = instance.stop()
        assert code == 0, instance.output
    finally:
        left = instance.close()
        assert not left, f"left behind: {left}"


def apply(up: LaharUp, manifest: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lahar", "apply", "-f", "-", "--kubeconfig", str(up.kubeconfig)],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def job_phase(api: KubeApi, name: str) -> str | None:
    try:
        return str(((api.get(kinds.JOB, name, "default").get("status") or {}).get("state") or {}).get("phase"))
    except NotFound:
        return None


def job_pods(api: KubeApi, name: str) -> list[dict[str, Any]]:
    return list(api.list(kinds.POD, "default", label_selector=f"volcano.sh/job-name={name}")["items"])


def local_job(name: str, mark: str, command: str, replicas: int = 2) -> str:
    """A Volcano Job whose pods run `sh -c command` on this machine."""
    return yaml.safe_dump(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "schedulerName": "lahar",
                "minAvailable": replicas,
                "plugins": {"env": []},
                "tasks": [
                    {
                        "name": "greet",
                        "replicas": replicas,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "nodeSelector": {"lahar.dev/local": "true"},
                                "containers": [
                                    {
                                        "name": "greet",
                                        "image": "busybox",
                                        "command": ["sh", "-c", command],
                                        "env": [{"name": MARK_ENV, "value": mark}],
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        }
    )


def sim_job(name: str, replicas: int, min_available: int, cpu: str, seconds: int) -> str:
    """A Volcano Job for the simulated nodes, each pod `seconds` long."""
    return yaml.safe_dump(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "schedulerName": "lahar",
                "minAvailable": min_available,
                "tasks": [
                    {
                        "name": "part",
                        "replicas": replicas,
                        "template": {
                            "metadata": {"annotations": {"lahar.dev/sim-duration": str(seconds)}},
                            "spec": {
                                "restartPolicy": "Never",
                                "nodeSelector": {"lahar.dev/simulated": "true"},
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "busybox",
                                        "command": ["sleep", str(seconds)],
                                        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
                                    }
                                ],
                            },
                        },
                    }
                ],
            },
        }
    )


# --- the running system ------------------------------------------------------------------------------


def test_every_program_is_up_and_says_where(up: LaharUp) -> None:
    out = up.output
    programs = ("scheduler", "controller", "sim-nodes", "agent")
    for program in programs:
        assert re.search(rf"starting the {program}… ready", out), out
    assert f"export KUBECONFIG={up.kubeconfig}" in out
    assert f"http://127.0.0.1:{up.port}" in out
    assert re.search(r"agent reports on 127\.0\.0\.1:\d+ \(gRPC\)", out), out
    urls = dict(re.findall(r"^\s+(\S+)\s+(http://127\.0\.0\.1:\d+/metrics)", out, re.MULTILINE))
    assert set(urls) == set(programs), out
    for program, url in urls.items():
        with urllib.request.urlopen(url, timeout=10) as answer:
            # The simulated nodes export their process's figures alone; the others, Lahar's.
            expected = b"process_cpu_seconds_total" if program == "sim-nodes" else b"lahar_"
            assert answer.status == 200 and expected in answer.read(), program
    nodes = {node["metadata"]["name"]: node for node in up.api().list(kinds.NODE)["items"]}
    assert {"lahar-sim-0", "lahar-sim-1"} <= set(nodes)
    local = [n for n in nodes.values() if (n["metadata"].get("labels") or {}).get("lahar.dev/local") == "true"]
    assert len(local) == 1
    ready = {c["type"]: c["status"] for c in local[0]["status"]["conditions"]}
    assert ready["Ready"] == "True"


def test_a_job_runs_real_commands_to_completed_with_exit_codes_and_logs(up: LaharUp) -> None:
    api = up.api()
    apply(up, local_job("hello", up.mark, "echo hello-$VC_TASK_INDEX; exit 0"))
    wait_for(lambda: job_phase(api, "hello") == "Completed", 90, "job hello to be Completed")
    pods = sorted(job_pods(api, "hello"), key=lambda pod: pod["metadata"]["name"])
    assert [pod["status"]["phase"] for pod in pods] == ["Succeeded", "Succeeded"]
    for index, pod in enumerate(pods):
        [status] = pod["status"]["containerStatuses"]
        assert status["state"]["terminated"]["exitCode"] == 0
        assert status["state"]["terminated"]["reason"] == "Completed"
        logs = subprocess.run(
            [sys.executable, "-m", "lahar", "logs", pod["metadata"]["name"], "--data-dir", str(up.data_dir)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert logs.returncode == 0 and logs.stdout == f"hello-{index}\n", logs


def test_a_failing_command_reports_its_exit_code_and_logs(up: LaharUp) -> None:
    api = up.api()
    apply(
        up,
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "oops"},
                "spec": {
                    "schedulerName": "lahar",
                    "nodeSelector": {"lahar.dev/local": "true"},
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "command": ["sh", "-c", "echo oops >&2; exit 3"],
                            "env": [{"name": MARK_ENV, "value": up.mark}],
                        }
                    ],
                },
            }
        ),
    )
    pod = wait_for(
        lambda: (p := api.get(kinds.POD, "oops", "default"))["status"].get("phase") == "Failed" and p,
        60,
        "pod oops to fail",
    )
    [status] = pod["status"]["containerStatuses"]
    assert (status["state"]["terminated"]["exitCode"], status["state"]["terminated"]["reason"]) == (3, "Error")
    logs = subprocess.run(
        [sys.executable, "-m", "lahar", "logs", "oops", "--data-dir", str(up.data_dir)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert logs.stdout == "oops\n", logs


def test_a_gang_that_cannot_fit_binds_nothing(up: LaharUp) -> None:
    """Three pods of 6 CPUs, all or nothing, on two simulated nodes of 8 CPUs: two would fit."""
    api = up.api()
    apply(up, sim_job("too-big", replicas=3, min_available=3, cpu="6", seconds=600))

    def unschedulable() -> str | None:
        try:
            group = api.get(kinds.PODGROUP, "too-big", "default")
        except NotFound:
            return None
        return next(
            (
                c.get("message")
                for c in (group.get("status") or {}).get("conditions") or []
                if c.get("type") == "Unschedulable" and c.get("status") == "True"
            ),
            None,
        )

    message = wait_for(unschedulable, 60, "the PodGroup's Unschedulable condition")
    assert "unschedulable" in message
    deadline = time.monotonic() + 3  # a few scheduling cycles
    while time.monotonic() < deadline:
        assert not [p["metadata"]["name"] for p in job_pods(api, "too-big") if p["spec"].get("nodeName")]
        time.sleep(0.5)
    api.delete(kinds.JOB, "too-big", "default")


def test_a_be_pods_cgroups_get_the_agents_qos_values(up: LaharUp) -> None:
    """A batch pod with CPU requests labelled BE: the runtime gives it kubelet's shares for its
    request (Burstable), the agent the minimal weight; with no interference, no CPU cap."""
    reason = cgroups_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    api = up.api()
    apply(
        up,
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "be-hog", "annotations": {"lahar.dev/qos-class": "BE"}},
                "spec": {
                    "schedulerName": "lahar",
                    "nodeSelector": {"lahar.dev/local": "true"},
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "hog",
                            "image": "busybox",
                            "command": ["lahar", "workload", "cpu-hog", "--seconds", "60"],
                            "env": [{"name": MARK_ENV, "value": up.mark}],
                            "resources": {"requests": {"cpu": "500m"}},
                        }
                    ],
                },
            }
        ),
    )
    pod = wait_for(
        lambda: (p := api.get(kinds.POD, "be-hog", "default"))["status"].get("phase") == "Running" and p,
        60,
        "the BE pod to run",
    )
    assert pod["status"]["qosClass"] == "Burstable"
    tree = CgroupTree(CGROUP_ROOT, up.cgroup_parent)
    pod_dir = tree.pod_path(pod["metadata"]["uid"], "Burstable")

    def qos_values() -> dict[str, int] | None:
        values = {name: int(tree.file(pod_dir, name).read_text()) for name in ("cpu.shares", "cpu.cfs_quota_us")}
        return values if values["cpu.shares"] == 2 else None  # kubelet's 512 for 500m until the agent acts

    values = wait_for(qos_values, 30, "the agent's minimal CPU weight on the BE pod", interval=0.5)
    assert values["cpu.cfs_quota_us"] == -1  # no online pod waits: no cap
    if tree.file(pod_dir, "cpu.idle").exists():
        assert int(tree.file(pod_dir, "cpu.idle").read_text()) == 0  # weights, not idle-policy, on this kernel
    api.delete(kinds.POD, "be-hog", "default")
    wait_for(
        lambda: not api.list(kinds.POD, "default", field_selector="metadata.name=be-hog")["items"],
        30,
        "the BE pod to go",
    )


def test_a_deployment_runs_local_pods_and_is_collected(up: LaharUp) -> None:
    """kubectl as a user runs an online service: the workload controllers and the Lahar scheduler
    run a Deployment's pods on this machine, kubectl logs reads them and kubectl exec runs in
    them, deleting the Deployment collects its ReplicaSet and pods."""
    kubectl_path = shutil.which("kubectl")
    if kubectl_path is None:
        pytest.skip("kubectl is not installed")

    def kubectl(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [kubectl_path, f"--kubeconfig={up.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def manifest(message: str) -> str:
        container = {
            "name": "web",
            "image": "busybox",
            "command": ["sh", "-c", f"echo {message}; sleep 600"],
            "env": [{"name": MARK_ENV, "value": up.mark}],
        }
        template = {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "nodeSelector": {"lahar.dev/local": "true"},
                "terminationGracePeriodSeconds": 1,
                "containers": [container],
            },
        }
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template},
        }
        return yaml.safe_dump(deployment)

    api = up.api()

    def running_pods() -> list[dict[str, Any]]:
        pods = api.list(kinds.POD, "default", label_selector="app=web")["items"]
        return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]

    kubectl("apply", "-f", "-", stdin=manifest("v1"))
    assert "successfully rolled out" in kubectl("rollout", "status", "deployment/web", "--timeout=90s")
    pods = running_pods()
    assert len(pods) == 2 and {p["spec"]["nodeName"] for p in pods} == {platform_node(api)}
    wait_for(lambda: "v1" in kubectl("logs", pods[0]["metadata"]["name"]), 30, "the pod's log")
    # kubectl exec runs in the container: its environment, inside its cgroups, stdin, exit codes.
    name = pods[0]["metadata"]["name"]
    seen = kubectl("exec", name, "--", "sh", "-c", f'echo "${MARK_ENV}"; cat /proc/self/cgroup')
    assert seen.splitlines()[0] == up.mark and f"pod{pods[0]['metadata']['uid']}" in seen
    assert kubectl("exec", "-i", name, "--", "tr", "a-z", "A-Z", stdin="quiet\n") == "QUIET\n"
    assert kubectl_path is not None
    failed = subprocess.run(
        [kubectl_path, f"--kubeconfig={up.kubeconfig}", "exec", name, "--", "sh", "-c", "exit 7"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert failed.returncode == 7 and "command terminated with exit code 7" in failed.stderr
    # (scale, rolling updates and rollout undo: tests/controller/test_workloads_e2e.py, faster)
    kubectl("delete", "deployment", "web")
    wait_for(
        lambda: (
            not api.list(kinds.REPLICA_SET, "default")["items"]
            and not api.list(kinds.POD, "default", label_selector="app=web")["items"]
        ),
        60,
        "the Deployment's ReplicaSets and pods to be collected",
    )


def platform_node(api: KubeApi) -> str:
    """The local node's name (the one labelled lahar.dev/local)."""
    (local,) = api.list(kinds.NODE, label_selector="lahar.dev/local=true")["items"]
    return str(local["metadata"]["name"])


# --- restarts and failures ---------------------------------------------------------------------------


def test_restart_keeps_the_jobs_and_stopping_leaves_nothing(tmp_path: Path) -> None:
    up = LaharUp(tmp_path / "data", secrets.token_hex(5), "--sim-nodes", "2")
    try:
        up.start()
        api = up.api()
        apply(up, local_job("done-before", up.mark, "exit 0", replicas=1))
        apply(up, sim_job("long-runner", replicas=2, min_available=2, cpu="1", seconds=600))
        wait_for(lambda: job_phase(api, "done-before") == "Completed", 90, "done-before to complete")
        wait_for(lambda: job_phase(api, "long-runner") == "Running", 60, "long-runner to run")
        before = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in job_pods(api, "long-runner")}
        children = up.child_pids()
        assert_stopped_cleanly(up, up.stop(), children)

        up.start()
        api = up.api()
        assert job_phase(api, "done-before") == "Completed"
        assert job_phase(api, "long-runner") == "Running"
        pods = job_pods(api, "long-runner")
        assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods} == before
        assert {p["status"]["phase"] for p in pods} == {"Running"}
        children = up.child_pids()
        assert_stopped_cleanly(up, up.stop(), children)
    finally:
        left = up.close()
        assert not left, f"left behind: {left}"


def test_a_program_that_dies_is_restarted_and_the_rest_keeps_running(tmp_path: Path) -> None:
    """SIGKILL of the controller: lahar up says so, starts it again after its back-off, and the
    scheduler, agent and API never stop; a job applied afterwards completes."""
    up = LaharUp(tmp_path / "data", secrets.token_hex(5))
    try:
        up.start()
        children = up.child_pids()
        controller = up.program_pid("controller")
        others = [pid for pid in children if pid != controller]
        os.kill(controller, signal.SIGKILL)
        wait_for(lambda: "restarted the controller (restart 1)" in up.output, 30, "the controller's restart")
        assert "the controller exited unexpectedly (exit code -9); restarting it in 1 s" in up.output
        assert up.proc is not None and up.proc.poll() is None, "lahar up must keep running"
        assert all(alive(pid) for pid in others), "the other programs must keep running"
        new = wait_for(lambda: up.program_pid("controller") not in (None, controller), 10, "the new controller's pid")
        assert new
        api = up.api()
        apply(up, local_job("after-restart", up.mark, "exit 0", replicas=1))
        wait_for(lambda: job_phase(api, "after-restart") == "Completed", 90, "a job after the restart to complete")
        children = up.child_pids()
        assert_stopped_cleanly(up, up.stop(), children)
    finally:
        left = up.close()
        assert not left, f"left behind: {left}"


# --- the demo ----------------------------------------------------------------------------------------


@pytest.mark.demo
@pytest.mark.timeout(300)
def test_the_demo_narrates_every_scenario_and_exits(tmp_path: Path) -> None:
    up = LaharUp(tmp_path / "data", secrets.token_hex(5), "--demo", "--demo-exit")
    try:
        up.start(ready="Lahar is up")
        code = up.wait(240)
        out = up.output
        assert code == 0, out
        for text in (
            "1/4",
            "2/4",
            "3/4",
            "4/4",
            "gang-of-4 waits with none of its 4 pods bound",
            "all 4 pods bound together",
            "gang-of-4 Completed",
            "online p99 alone:",
            "online p99 with the BE job:",
            "BE CPU harvested:",
            "queue team-a:",
            "queue team-b:",
            "The demo is done",
        ):
            assert text in out, f"{text!r} missing:\n{out}"
        p99 = re.findall(r"online p99 (?:alone|with the BE job): +([\d.]+) ms", out)
        assert len(p99) == 2 and all(float(value) > 0 for value in p99), out
        shares = dict(re.findall(r"queue (team-[ab]): +(\d+)% of the CPUs", out))
        assert int(shares["team-a"]) < int(shares["team-b"]), out  # weight 1 against weight 3
        assert not processes_marked(up.mark)
    finally:
        left = up.close()
        assert not left, f"left behind: {left}"
