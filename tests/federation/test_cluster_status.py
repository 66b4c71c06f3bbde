"""What a heartbeat writes into a Cluster's status (federation/members.py cluster_status), and how
the credentials Secret becomes a client configuration without the token showing anywhere."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from lahar.api.cluster import Cluster
from lahar.federation.members import MemberProblem, Snapshot, cluster_status, member_configuration
from tests.federation.fleet import resources

NOW = "2026-01-01T00:00:10Z"


def snapshot() -> Snapshot:
    return Snapshot(
        taken_at=0.0,
        node_allocatable=(resources(4, 16), resources(4, 16)),
        node_free=(resources(1, 8), resources(4, 16)),
        queue_capability={"team": resources(3, 100), "open": resources(0, 0).without_zeros()},
        copies=(),
        raw_copies={},
    )


def test_an_answer_writes_capacity_free_room_and_queue_room() -> None:
    status = cluster_status({}, snapshot(), None, NOW)
    assert status["reachable"] is True and status["lastHeartbeatTime"] == NOW
    assert status["capacity"] == {"cpu": "8", "memory": "32Gi"}
    assert status["allocatable"] == {"cpu": "5", "memory": "24Gi"}
    assert status["queueCapability"] == {"team": {"cpu": "3", "memory": "100Gi"}}
    assert status["allocatableByQueue"] == {"team": {"cpu": "3", "memory": "24Gi"}}
    (ready,) = status["conditions"]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == ("True", "Reachable", NOW)


def test_silence_keeps_the_last_figures_and_heartbeat_and_says_why() -> None:
    answered = cluster_status({}, snapshot(), None, NOW)
    silent = cluster_status(answered, None, MemberProblem("Unreachable", "connection refused"), "2026-01-01T00:01:00Z")
    assert silent["reachable"] is False and silent["lastHeartbeatTime"] == NOW
    assert silent["capacity"] == answered["capacity"]
    (ready,) = silent["conditions"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "Unreachable", "connection refused")
    assert ready["lastTransitionTime"] == "2026-01-01T00:01:00Z"
    again = cluster_status(silent, None, MemberProblem("Unreachable", "still refused"), "2026-01-01T00:02:00Z")
    assert again["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:01:00Z"


def test_the_secret_makes_the_configuration_and_the_token_goes_nowhere_else(tmp_path: Path) -> None:
    cluster = Cluster({"metadata": {"name": "m1"}, "spec": {"endpoint": "https://10.0.0.7:6443/"}})
    token, ca = "s3cret-token", b"-----BEGIN CERTIFICATE-----\n"
    secret = {"data": {"token": base64.b64encode(token.encode()).decode(), "ca.crt": base64.b64encode(ca).decode()}}
    configuration = member_configuration(cluster, secret, tmp_path)
    assert configuration.host == "https://10.0.0.7:6443"
    assert configuration.get_api_key_with_prefix("authorization") == f"Bearer {token}"
    assert (
        Path(configuration.ssl_ca_cert).read_bytes() == ca
        and Path(configuration.ssl_ca_cert).stat().st_mode & 0o077 == 0
    )
    assert token not in str(cluster_status({}, None, MemberProblem("Unauthorized", "refused"), NOW))


@pytest.mark.parametrize(
    ("data", "reason"),
    [({"token": "not base64!"}, "InvalidSecret"), ({"token": base64.b64encode(b"a\nb").decode()}, "InvalidSecret")],
)
def test_a_bad_secret_is_a_clear_problem(tmp_path: Path, data: dict[str, str], reason: str) -> None:
    cluster = Cluster({"metadata": {"name": "m1"}, "spec": {"endpoint": "https://10.0.0.7:6443"}})
    with pytest.raises(MemberProblem) as caught:
        member_configuration(cluster, {"data": data}, tmp_path)
    assert caught.value.reason == reason and "a\nb" not in caught.value.message
