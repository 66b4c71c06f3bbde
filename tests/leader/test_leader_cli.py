"""`lahar controller --leader-elect` and `lahar scheduler --leader-elect` as processes on the
embedded API server: the standby takes over when the leader is killed, a leader whose Lease is
taken exits at once, and a clean stop hands the Lease over without waiting for it to expire."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from lahar.api.kinds import LEASE
from lahar.api.lease import micro_time
from lahar.cli.main import build_parser
from lahar.client.api import KubeApi
from lahar.client.errors import NotFound
from tests.support import stop_process, wait_for

TIMINGS = [
    "--leader-elect-lease-duration=3s",
    "--leader-elect-renew-deadline=2s",
    "--leader-elect-retry-period=200ms",
]


class Replica:
    def __init__(self, command: str, kubeconfig: Path, lease: str, log: Path) -> None:
        self.log = log
        args = [sys.executable, "-m", "lahar", command, f"--kubeconfig={kubeconfig}", "--metrics-port=0"]
        args += ["--leader-elect", f"--leader-elect-resource-name={lease}", "--leader-elect-resource-namespace=default"]
        if command == "scheduler":
            args.append("--period=0.2")
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*args, *TIMINGS], stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )

    def output(self) -> str:
        return self.log.read_text()

    def identity(self) -> str | None:
        found = re.search(r"campaigning for lease \S+ as (\S+)", self.output())
        return found.group(1) if found else None

    def leading(self) -> bool:
        return "became the leader" in self.output()

    def stop(self) -> None:
        stop_process(self.proc, 15)


@pytest.fixture
def kubeconfig(module_apiserver, tmp_path: Path) -> Path:
    return module_apiserver.kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api(module_k8s: client.ApiClient) -> KubeApi:
    return KubeApi(module_k8s)


@pytest.fixture
def start_replica(kubeconfig: Path, tmp_path: Path) -> Iterator:
    started: list[Replica] = []

    def start(command: str, lease: str) -> Replica:
        replica = Replica(command, kubeconfig, lease, tmp_path / f"{command}-{len(started)}.log")
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.stop()


def holder(api: KubeApi, lease: str) -> str | None:
    try:
        return api.get(LEASE, lease, "default")["spec"].get("holderIdentity")
    except NotFound:
        return None


@pytest.mark.parametrize("command", ["controller", "scheduler"])
def test_the_standby_takes_over_when_the_leader_is_killed(command: str, api: KubeApi, start_replica):
    lease = f"{command}-{uuid.uuid4().hex[:6]}"
    first = start_replica(command, lease)
    wait_for(first.leading, 30, f"the first {command} leading")
    second = start_replica(command, lease)
    wait_for(second.identity, 30, f"the second {command} campaigning")
    time.sleep(1)
    assert not second.leading(), second.output()
    assert holder(api, lease) == first.identity()

    killed_at = time.monotonic()
    first.proc.kill()  # no release: the Lease must expire
    wait_for(second.leading, 10, f"the standby {command} leading")
    assert time.monotonic() - killed_at < 3 + 2  # the lease duration plus a few (loaded) retries
    assert holder(api, lease) == second.identity()
    assert second.proc.poll() is None


def test_a_leader_whose_lease_is_taken_exits_at_once(api: KubeApi, start_replica):
    lease = f"controller-{uuid.uuid4().hex[:6]}"
    leader = start_replica("controller", lease)
    wait_for(leader.leading, 30, "the controller leading")
    current = api.get(LEASE, lease, "default")
    current["spec"].update(holderIdentity="someone-else", renewTime=micro_time(time.time()))
    api.update(LEASE, current)
    assert leader.proc.wait(10) == 1
    assert "lost the leader lease, exiting" in leader.output()


def test_a_clean_stop_hands_the_lease_over_at_once(api: KubeApi, start_replica):
    lease = f"controller-{uuid.uuid4().hex[:6]}"
    first = start_replica("controller", lease)
    wait_for(first.leading, 30, "the first controller leading")
    second = start_replica("controller", lease)
    wait_for(second.identity, 30, "the second controller campaigning")
    first.stop()
    assert first.proc.returncode == 0, first.output()
    stopped_at = time.monotonic()
    wait_for(second.leading, 5, "the standby leading")
    assert time.monotonic() - stopped_at < 2  # released: no wait for the 3 s lease to expire


def test_the_flags_are_kubes():
    args = build_parser().parse_args(["scheduler", "--leader-elect"])
    assert (args.leader_elect_lease_duration, args.leader_elect_renew_deadline, args.leader_elect_retry_period) == (
        15.0,
        10.0,
        2.0,
    )
    assert args.leader_elect_resource_name == "lahar-scheduler"
    args = build_parser().parse_args(["controller", "--leader-elect", "--leader-elect-lease-duration=1m"])
    assert args.leader_elect_lease_duration == 60.0 and args.leader_elect_resource_name == "lahar-controller"


def test_bad_timings_are_refused_before_anything_starts(kubeconfig: Path):
    timings = ["--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=10s"]
    run = subprocess.run(
        [sys.executable, "-m", "lahar", "controller", f"--kubeconfig={kubeconfig}", "--leader-elect", *timings],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "lease duration (5.0s) must be greater than the renew deadline (10.0s)" in run.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "lahar", "scheduler", "--leader-elect", "--leader-elect-retry-period=soon"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and 'invalid duration "soon"' in bad.stderr
