"""Leader election (lahar.client.leader) against the embedded API server: one leader at a time,
takeover after the leader dies or releases, a leader that cannot renew stops acting before a
standby may start; and the decisions on their own."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from lahar.api.kinds import LEASE
from lahar.api.lease import micro_time
from lahar.client.api import KubeApi
from lahar.client.errors import Invalid
from lahar.client.leader import ElectionConfig, LeaderElector, lease_valid, record_to_write
from tests.support import wait_for

# Short timings keep the tests quick; the ratios are kube's (15 / 10 / 2).
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 1.5, 1.0, 0.2


class Candidate:
    """An elector and what its callbacks saw."""

    def __init__(self, api: KubeApi, lease: str, name: str) -> None:
        self.name = name
        self.started = threading.Event()
        self.stopped = threading.Event()
        config = ElectionConfig(lease, "default", name, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
        self.elector = LeaderElector(api, config, self.started.set, self.stopped.set)


@pytest.fixture
def api(module_k8s: client.ApiClient) -> KubeApi:
    return KubeApi(module_k8s)


@pytest.fixture
def lease() -> str:
    return f"lease-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def candidates(api: KubeApi, lease: str) -> Iterator[list[Candidate]]:
    made = [Candidate(api, lease, f"candidate-{i}") for i in range(3)]
    try:
        yield made
    finally:
        for candidate in made:
            candidate.elector.stop(release=False)


def leaders(candidates: list[Candidate]) -> list[str]:
    return [c.name for c in candidates if c.elector.is_leader()]


class LeaderSampler:
    """Samples who thinks it leads, every 10 ms, in a thread; `overlaps` lists any moment with two."""

    def __init__(self, candidates: list[Candidate]) -> None:
        self.candidates = candidates
        self.overlaps: list[list[str]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            now = leaders(self.candidates)
            if len(now) > 1:
                self.overlaps.append(now)

    def __enter__(self) -> LeaderSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._done.set()
        self._thread.join()


def test_one_of_several_candidates_leads_and_the_lease_names_it(api: KubeApi, lease: str, candidates: list[Candidate]):
    with LeaderSampler(candidates) as sampler:
        for candidate in candidates:
            candidate.elector.start()
        wait_for(lambda: leaders(candidates), 5, "a leader")
        time.sleep(LEASE_DURATION * 2)  # renewals go on; nobody else takes over
    assert sampler.overlaps == []
    (leader,) = leaders(candidates)
    assert [c.started.is_set() for c in candidates].count(True) == 1
    spec = api.get(LEASE, lease, "default")["spec"]
    assert spec["holderIdentity"] == leader
    assert spec["leaseDurationSeconds"] == 2  # 1.5 s rounds to the Lease's whole seconds
    assert spec["leaseTransitions"] == 0
    assert spec["renewTime"] > spec["acquireTime"]


def test_a_standby_takes_over_after_the_leader_dies(candidates: list[Candidate]):
    first, *standbys = candidates
    first.elector.start()
    wait_for(first.elector.is_leader, 5, "the first candidate leading")
    for candidate in standbys:
        candidate.elector.start()
    time.sleep(RETRY_PERIOD * 3)  # the standbys have seen the lease
    with LeaderSampler(candidates) as sampler:
        died_at = time.monotonic()
        first.elector.stop(release=False)  # dies: the lease is left to expire
        wait_for(lambda: leaders(standbys), 5, "a standby leading")
        took = time.monotonic() - died_at
    assert sampler.overlaps == []
    # Not before the lease could have expired; then within a few retries (a loaded machine, with the
    # whole suite beside it, delays a try by a second or so).
    assert LEASE_DURATION - RETRY_PERIOD * 1.5 < took < LEASE_DURATION * 2 + RETRY_PERIOD * 3
    assert [c.started.is_set() for c in standbys].count(True) == 1


def test_a_released_lease_is_taken_at_once(api: KubeApi, lease: str, candidates: list[Candidate]):
    first, second, _ = candidates
    first.elector.start()
    wait_for(first.elector.is_leader, 5, "the first candidate leading")
    second.elector.start()
    time.sleep(RETRY_PERIOD * 2)
    released_at = time.monotonic()
    first.elector.stop(release=True)
    assert first.stopped.is_set()
    wait_for(second.elector.is_leader, 5, "the second candidate leading")
    assert time.monotonic() - released_at < LEASE_DURATION  # did not wait for the old lease to expire
    assert api.get(LEASE, lease, "default")["spec"]["leaseTransitions"] == 1


def test_a_leader_that_cannot_renew_stops_before_anyone_may_take_over(server_process, tmp_path, lease: str):
    server = server_process(tmp_path / "data")
    server.start()
    configuration = client.Configuration()
    configuration.host = server.url
    try:
        with client.ApiClient(configuration) as api_client:
            candidate = Candidate(KubeApi(api_client), lease, "alone")
            candidate.elector.start()
            wait_for(candidate.elector.is_leader, 5, "leading")
            cut_at = time.monotonic()
            server.stop()  # the API goes away: renewals fail
            wait_for(candidate.stopped.is_set, 5, "on_stopped_leading")
            stopped_after = time.monotonic() - cut_at
            assert not candidate.elector.is_leader()
            # It gave up within the renew deadline (and a try), before the lease could expire for others.
            assert stopped_after < LEASE_DURATION
            ok, reason = candidate.elector.health()
            assert not ok and "lost" in reason
            candidate.elector.stop(release=False)
    finally:
        server.stop()


def test_a_leader_whose_lease_is_taken_stops(api: KubeApi, lease: str, candidates: list[Candidate]):
    first = candidates[0]
    first.elector.start()
    wait_for(first.elector.is_leader, 5, "leading")
    current = api.get(LEASE, lease, "default")
    current["spec"].update(holderIdentity="intruder", renewTime=micro_time(time.time()))
    api.update(LEASE, current)  # someone (an operator, a partitioned peer) overwrote it
    wait_for(first.stopped.is_set, 5, "on_stopped_leading")
    assert not first.elector.is_leader()


def test_the_embedded_server_validates_leases(api: KubeApi, lease: str):
    bad = {"metadata": {"name": lease}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}}
    with pytest.raises(Invalid) as refused:
        api.create(LEASE, bad, "default")
    assert "spec.leaseDurationSeconds: must be greater than 0" in str(refused.value)
    assert "spec.leaseTransitions: must be greater than or equal to 0" in str(refused.value)


# --- the decisions ------------------------------------------------------------------------------


def test_no_lease_is_created_for_the_candidate():
    spec = record_to_write(None, "me", 15, observed_at=0, now=100, wall=0)
    assert spec == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": "1970-01-01T00:00:00.000000Z",
        "renewTime": "1970-01-01T00:00:00.000000Z",
        "leaseTransitions": 0,
    }


def test_another_holders_lease_binds_until_it_has_not_changed_for_its_duration():
    held = {"holderIdentity": "other", "leaseDurationSeconds": 15, "leaseTransitions": 4}
    assert record_to_write(held, "me", 15, observed_at=100, now=114.9, wall=0) is None
    taken = record_to_write(held, "me", 15, observed_at=100, now=115.1, wall=1)
    assert taken is not None
    assert taken["holderIdentity"] == "me" and taken["leaseTransitions"] == 5
    assert taken["acquireTime"] == taken["renewTime"] == "1970-01-01T00:00:01.000000Z"


def test_a_renewal_keeps_the_acquire_time_and_transitions():
    mine = {"holderIdentity": "me", "leaseDurationSeconds": 15, "acquireTime": "A", "leaseTransitions": 2}
    renewed = record_to_write(mine, "me", 15, observed_at=100, now=101, wall=2)
    assert renewed is not None
    assert (renewed["acquireTime"], renewed["leaseTransitions"]) == ("A", 2)
    assert renewed["renewTime"] == "1970-01-01T00:00:02.000000Z"


def test_a_released_lease_has_no_holder_and_is_free():
    released = {"leaseDurationSeconds": 1, "leaseTransitions": 3}
    assert not lease_valid(released, observed_at=100, now=100)
    taken = record_to_write(released, "me", 15, observed_at=100, now=100, wall=0)
    assert taken is not None and taken["leaseTransitions"] == 4


@pytest.mark.parametrize(
    ("durations", "problem"),
    [
        ((10, 10, 2), "must be greater than the renew deadline"),
        ((15, 2, 2), "must be greater than 1.2 x the retry period"),
        ((15, 10, 0), "retry period must be positive"),
    ],
)
def test_timings_that_could_give_two_leaders_are_refused(durations: tuple[float, float, float], problem: str):
    with pytest.raises(ValueError, match=problem):
        ElectionConfig("lahar-scheduler", "lahar-system", "me", *durations)


def test_an_elector_that_fails_stops_its_leader(api: KubeApi, lease: str):
    candidate = Candidate(api, lease, "fragile")
    candidate.elector.start()
    wait_for(candidate.elector.is_leader, 5, "leading")

    def broken(*_: object, **__: object) -> dict:
        raise RuntimeError("a bug in the elector's loop")

    candidate.elector.api.get = broken  # type: ignore[method-assign]
    wait_for(candidate.stopped.is_set, 5, "on_stopped_leading after the elector failed")
    assert not candidate.elector.is_leader()
    candidate.elector.stop(release=False)
