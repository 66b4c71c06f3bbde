"""The table of bad objects (tests/admission/cases.py) on both backends: each is refused with its
field and message and leaves nothing behind; the defaults are filled in the same. The embedded
server runs as a process; the real one is the control plane of tests/kube (e2e)."""

from __future__ import annotations

import contextlib
import copy
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from lahar.api.kinds import Kind, for_object
from lahar.client.api import KubeApi
from lahar.client.errors import KubeError, NotFound
from tests.admission.cases import CASES, DEFAULTED, Case, value_at

REPO = Path(__file__).resolve().parents[2]


class Backend:
    """An API server to try objects on, with a namespace of the test's own."""

    def __init__(self, name: str, api: KubeApi) -> None:
        self.name = name
        self.api = api
        self.namespace = f"adm-{uuid.uuid4().hex[:8]}"
        self.api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": self.namespace}})
        self._cluster_objects: list[tuple[Kind, str]] = []

    def prepare(self, obj: dict) -> tuple[Kind, dict]:
        kind = for_object(obj["apiVersion"], obj["kind"])
        obj = copy.deepcopy(obj)
        if kind.namespaced:
            obj["metadata"]["namespace"] = self.namespace
        else:  # cluster-scoped names must not collide between tests
            obj["metadata"]["name"] = f"{obj['metadata']['name']}-{self.namespace}"
            if obj.get("spec", {}).get("parent") == "loop":
                obj["spec"]["parent"] = obj["metadata"]["name"]
            self._cluster_objects.append((kind, obj["metadata"]["name"]))
        return kind, obj

    def create(self, obj: dict) -> dict:
        kind, obj = self.prepare(obj)
        return self.api.create(kind, obj, self.namespace if kind.namespaced else None)

    def cleanup(self) -> None:
        for kind, name in self._cluster_objects:
            with contextlib.suppress(NotFound):
                self.api.delete(kind, name)
        self.api.request("DELETE", f"/api/v1/namespaces/{self.namespace}")


def _embedded(module_k8s: client.ApiClient) -> Backend:
    return Backend("embedded", KubeApi(module_k8s))


def _real(request: pytest.FixtureRequest) -> Backend:
    cluster = request.getfixturevalue("lahar_installed_cluster")
    return Backend("real", cluster)


@pytest.fixture(params=["embedded", pytest.param("real", marks=pytest.mark.e2e)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = _embedded(request.getfixturevalue("module_k8s")) if request.param == "embedded" else _real(request)
    try:
        yield made
    finally:
        made.cleanup()


def refusal(backend: Backend, case: Case) -> str:
    """Try the case on the backend; the error's text (fails when it is accepted)."""
    kind, obj = backend.prepare(case.obj)
    if case.before is not None:
        _, before = backend.prepare(case.before)
        created = backend.api.create(kind, before, backend.namespace if kind.namespaced else None)
        obj["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        write = lambda: backend.api.update(kind, obj)  # noqa: E731
    else:
        write = lambda: backend.api.create(kind, obj, backend.namespace if kind.namespaced else None)  # noqa: E731
    with pytest.raises(KubeError) as refused:
        write()
    assert refused.value.status == 422, refused.value
    if case.before is None:  # nothing was stored
        with pytest.raises(NotFound):
            backend.api.get(kind, obj["metadata"]["name"], backend.namespace if kind.namespaced else None)
    return str(refused.value)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_objects_are_refused_naming_the_field(backend: Backend, case: Case):
    message = refusal(backend, case)
    assert case.expected(backend.name) in message


@pytest.mark.parametrize(("name", "obj", "expected"), [d[:1] + d[2:] for d in DEFAULTED], ids=[d[0] for d in DEFAULTED])
def test_defaults_are_filled_in(backend: Backend, name: str, obj: dict, expected: dict):
    created = backend.create(obj)
    got = {path: value_at(created, path) for path in expected}
    assert got == expected


def test_the_shipped_policies_are_what_the_generator_writes():
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-admission-policies.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
