"""Fixtures of the API server tests: typed official-client APIs and a namespace per test."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client


@pytest.fixture
def core(k8s: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(k8s)


@pytest.fixture
def custom(k8s: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s)


@pytest.fixture
def policy(k8s: client.ApiClient) -> client.PolicyV1Api:
    return client.PolicyV1Api(k8s)


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    """A namespace of the test's own, so tests can share one server."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name
