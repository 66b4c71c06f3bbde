"""Self reviews (apiserver/authorization.py): `kubectl auth can-i` answers from the embedded
server, which authorizes every authenticated request; malformed reviews are refused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests

Server = Any  # conftest.ServerProcess
KUBECTL = shutil.which("kubectl")
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_auth_can_i(module_apiserver: Server, tmp_path: Path) -> None:
    assert KUBECTL is not None
    config = module_apiserver.kubeconfig(tmp_path / "kc")

    def can_i(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [KUBECTL, f"--kubeconfig={config}", "auth", "can-i", *args], capture_output=True, text=True, timeout=30
        )

    done = can_i("create", "pods", "-n", "default")
    assert (done.returncode, done.stdout.strip()) == (0, "yes"), done.stderr
    listed = can_i("--list")
    assert listed.returncode == 0 and "*.*" in listed.stdout


def test_a_review_answers_allowed_with_the_reason(module_apiserver: Server) -> None:
    body = {"spec": {"resourceAttributes": {"verb": "delete", "resource": "queues", "group": "scheduling.volcano.sh"}}}
    response = requests.post(module_apiserver.url + REVIEWS, json=body, timeout=5)
    assert response.status_code == 201
    answer = response.json()
    assert answer["kind"] == "SelfSubjectAccessReview" and answer["spec"] == body["spec"]
    assert (
        answer["status"]["allowed"] is True and "authorizes every authenticated request" in answer["status"]["reason"]
    )


@pytest.mark.parametrize(
    ("body", "code"),
    [({}, 400), ({"spec": {}}, 422), ({"kind": "Pod", "spec": {"resourceAttributes": {"verb": "get"}}}, 400)],
)
def test_malformed_reviews_are_refused(module_apiserver: Server, body: dict[str, Any], code: int) -> None:
    response = requests.post(module_apiserver.url + REVIEWS, json=body, timeout=5)
    assert response.status_code == code and response.json()["kind"] == "Status"


def test_reviews_are_not_stored(module_apiserver: Server) -> None:
    assert requests.get(module_apiserver.url + REVIEWS, timeout=5).status_code == 405
