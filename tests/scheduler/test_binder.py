"""The binder against the embedded API server: concurrent binds land, a gang whose bind fails is
rolled back, an already-done bind on the same node counts, GPU choices are written first, and
evictions go through the Eviction API with Events where a PodDisruptionBudget may cover the victim,
by a plain delete elsewhere, on a pool of their own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import NotFound
from lahar.scheduler.binder import Binder, needs_rollback
from lahar.scheduler.cache import Cache
from lahar.scheduler.framework.session import Eviction
from lahar.scheduler.metrics import SchedulerMetrics
from lahar.scheduler.model import BindBatch, TaskInfo, TaskStatus
from lahar.scheduler.plugins.deviceshare import GPU_INDEX_ANNOTATION
from tests.scheduler.test_cache import a_pod, node, pod, podgroup

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def api(module_k8s: Any) -> KubeApi:
    client = KubeApi(module_k8s, timeout=10)
    for name in ("n1", "n2"):
        client.create(kinds.NODE, node(name))
    return client


@pytest.fixture
def binder(api: KubeApi) -> Iterator[tuple[Binder, Cache, SchedulerMetrics]]:
    cache, metrics = Cache(), SchedulerMetrics()
    running = Binder(api, cache, metrics, workers=8)
    yield running, cache, metrics
    running.close()


def gang(api: KubeApi, cache: Cache, name: str, size: int, min_member: int) -> BindBatch:
    """A PodGroup and its pods in the API, fed to the cache, placed round-robin on n1/n2 and assumed."""
    cache.add_podgroup(api.create(kinds.PODGROUP, podgroup(name, min_member), "default"))
    for i in range(size):
        cache.add_pod(api.create(kinds.POD, pod(f"{name}-{i}", "100m", "64Mi", group=name), "default"))
    job = cache.snapshot().jobs[f"default/{name}"]
    tasks = sorted(job.tasks.values(), key=lambda task: task.name)
    for i, task in enumerate(tasks):
        task.node = ("n1", "n2")[i % 2]
    batch = BindBatch(job, tasks)
    cache.assume(batch)
    return batch


def node_of(api: KubeApi, name: str) -> str:
    return api.get(kinds.POD, name, "default")["spec"].get("nodeName", "")


def deleted_or_deleting(api: KubeApi, name: str) -> bool:
    try:
        return bool(api.get(kinds.POD, name, "default")["metadata"].get("deletionTimestamp"))
    except NotFound:
        return True


def test_concurrent_binds_land(api: KubeApi, binder: tuple[Binder, Cache, SchedulerMetrics]) -> None:
    running, cache, metrics = binder
    batch = gang(api, cache, "wide", 8, 8)
    outcome = running.submit([batch])[0].result(timeout=20)
    assert sorted(outcome.bound) == sorted(f"default/wide-{i}" for i in range(8)) and not outcome.failed
    assert [node_of(api, f"wide-{i}") for i in range(8)] == ["n1", "n2"] * 4
    assert metrics.pods_scheduled._value.get() == 8
    # Confirmed binds stay Binding in the cache until the pods' own updates show the node.
    assert {cache.task(t.uid).status for t in batch.tasks} == {TaskStatus.BINDING}


def test_a_failed_bind_rolls_the_gang_back(api: KubeApi, binder: tuple[Binder, Cache, SchedulerMetrics]) -> None:
    running, cache, metrics = binder
    batch = gang(api, cache, "fragile", 3, 3)
    api.delete(kinds.POD, "fragile-1", "default")  # gone before its bind: the gang cannot run whole
    outcome = running.submit([batch])[0].result(timeout=20)
    assert list(outcome.failed) == ["default/fragile-1"]
    assert sorted(outcome.rolled_back) == ["default/fragile-0", "default/fragile-2"]
    assert deleted_or_deleting(api, "fragile-0") and deleted_or_deleting(api, "fragile-2")
    failed = next(t for t in batch.tasks if t.name == "fragile-1")
    assert cache.task(failed.uid).status is TaskStatus.PENDING and failed.uid not in cache.assumed()
    assert metrics.bind_errors._value.get() == 1 and metrics.gang_rollbacks._value.get() == 1
    events = api.list(kinds.EVENT, "default", field_selector="involvedObject.name=fragile")["items"]
    assert [e["reason"] for e in events] == ["GangRolledBack"]
    assert events[0]["involvedObject"]["kind"] == "PodGroup"


def test_a_failure_that_leaves_min_member_bound_is_not_rolled_back(
    api: KubeApi, binder: tuple[Binder, Cache, SchedulerMetrics]
) -> None:
    running, cache, _ = binder
    batch = gang(api, cache, "elastic", 3, 1)
    api.delete(kinds.POD, "elastic-2", "default")
    outcome = running.submit([batch])[0].result(timeout=20)
    assert list(outcome.failed) == ["default/elastic-2"] and outcome.rolled_back == []
    assert node_of(api, "elastic-0") == "n1" and not deleted_or_deleting(api, "elastic-0")


def test_already_bound_to_the_same_node_is_bound(api: KubeApi, binder: tuple[Binder, Cache, SchedulerMetrics]) -> None:
    running, cache, _ = binder
    batch = gang(api, cache, "again", 2, 2)
    api.bind("default", "again-0", "n1")  # a previous scheduler run bound it to the same node
    api.bind("default", "again-1", "n1")  # ... and this one elsewhere than we chose (n2)
    outcome = running.submit([batch])[0].result(timeout=20)
    assert outcome.bound == ["default/again-0"] and "already assigned" in outcome.failed["default/again-1"]


def test_gpu_choice_is_written_before_the_bind(api: KubeApi, binder: tuple[Binder, Cache, SchedulerMetrics]) -> None:
    running, cache, _ = binder
    batch = gang(api, cache, "gpu", 1, 1)
    wanted = {GPU_INDEX_ANNOTATION: "0,1", "volcano.sh/predicate-time": "1700000000000000000"}
    running.submit([batch], {batch.tasks[0].uid: wanted})[0].result(timeout=20)
    bound = api.get(kinds.POD, "gpu-0", "default")
    assert wanted.items() <= bound["metadata"]["annotations"].items() and bound["spec"]["nodeName"] == "n1"


def test_evictions_use_the_eviction_api_with_events(
    api: KubeApi, binder: tuple[Binder, Cache, SchedulerMetrics]
) -> None:
    running, cache, metrics = binder
    victim_obj = api.create(kinds.POD, pod("victim", node_name="n1"), "default")
    cache.add_pod(victim_obj)
    victim = cache.task(victim_obj["metadata"]["uid"])
    assert victim is not None
    preemptor = TaskInfo(
        "uid-x",
        "default",
        "urgent",
        "default/urgent",
        "",
        100,
        victim.request,
        TaskStatus.PENDING,
        "",
        victim.qos,
        victim.pod,
        victim.placement,
    )
    cache.assume_evicted([victim])
    assert running.evict([Eviction(victim, "preempt", preemptor)])[0].result(timeout=20) is True
    assert deleted_or_deleting(api, "victim")
    assert metrics.evictions.labels("preempt")._value.get() == 1
    events = api.list(kinds.EVENT, "default", field_selector="involvedObject.name=victim")["items"]
    assert events[0]["reason"] == "Preempted" and "default/urgent" in events[0]["message"]

    stranger_obj = api.create(kinds.POD, pod("stranger", node_name="n2"), "default")
    cache.add_pod(stranger_obj)
    stranger = cache.task(stranger_obj["metadata"]["uid"])
    assert stranger is not None
    cache.assume_evicted([stranger])
    api.delete(kinds.POD, "stranger", "default", grace_period_seconds=0)
    api.create(kinds.POD, pod("stranger", node_name="n2"), "default")  # same name, another pod: UID differs
    assert running.evict([Eviction(stranger, "reclaim")])[0].result(timeout=20) is False
    assert cache.task(stranger.uid).status is TaskStatus.BOUND  # refused: forgotten, holds its node again
    assert not deleted_or_deleting(api, "stranger")


class Recording:
    """The API, recording which verb removed a victim."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self.calls: list[tuple[str, str]] = []

    def evict(self, namespace: str, name: str, **kwargs: Any) -> Obj:
        self.calls.append(("evict", name))
        return self._api.evict(namespace, name, **kwargs)

    def delete(self, kind: Any, name: str, namespace: str | None = None, **kwargs: Any) -> Obj:
        self.calls.append(("delete", name))
        return self._api.delete(kind, name, namespace, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


def test_a_victim_no_budget_covers_is_deleted_not_evicted(api: KubeApi) -> None:
    """`Eviction.guarded` False (no PodDisruptionBudget of the session may cover the victim): a
    DELETE with the victim's UID as precondition, with its Event; a pod re-created under the same
    name is left alone and the victim holds its node again. Guarded: the Eviction API."""
    recording, cache, metrics = Recording(api), Cache(), SchedulerMetrics()
    running = Binder(recording, cache, metrics, workers=2, evict_workers=2)
    try:
        tasks = {}
        for name in ("plain", "budgeted", "renamed"):
            obj = api.create(kinds.POD, pod(name, node_name="n1"), "default")
            cache.add_pod(obj)
            tasks[name] = cache.task(obj["metadata"]["uid"])
        cache.assume_evicted(tasks.values())
        assert running.evict([Eviction(tasks["plain"], "preempt", guarded=False)])[0].result(timeout=20) is True
        assert running.evict([Eviction(tasks["budgeted"], "preempt", guarded=True)])[0].result(timeout=20) is True
        assert recording.calls == [("delete", "plain"), ("evict", "budgeted")]
        assert deleted_or_deleting(api, "plain") and deleted_or_deleting(api, "budgeted")
        assert metrics.evictions.labels("preempt")._value.get() == 2
        events = api.list(kinds.EVENT, "default", field_selector="involvedObject.name=plain")["items"]
        assert [event["reason"] for event in events] == ["Preempted"]

        api.delete(kinds.POD, "renamed", "default", grace_period_seconds=0)
        api.create(kinds.POD, pod("renamed", node_name="n1"), "default")  # same name, another pod
        renamed = tasks["renamed"]
        assert running.evict([Eviction(renamed, "preempt", guarded=False)])[0].result(timeout=20) is False
        assert cache.task(renamed.uid).status is TaskStatus.BOUND  # refused: forgotten, holds its node again
        assert not deleted_or_deleting(api, "renamed")
    finally:
        running.close()


class Stalled:
    """An API whose evictions and deletes hang until released; binds and Events answer at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.bound: list[str] = []

    def evict(self, namespace: str, name: str, **kwargs: Any) -> Obj:
        self.release.wait(20)
        return {}

    def delete(self, kind: Any, name: str, namespace: str | None = None, **kwargs: Any) -> Obj:
        self.release.wait(20)
        return {}

    def bind(self, namespace: str, name: str, node: str, uid: str | None = None) -> Obj:
        self.bound.append(name)
        return {}

    def create(self, kind: Any, obj: Obj, namespace: str | None = None) -> Obj:
        return obj

    def patch(self, *args: Any, **kwargs: Any) -> Obj:
        return {}


def test_binds_do_not_wait_behind_evictions() -> None:
    """A wave of preemptors queues hundreds of evictions: a gang whose room is free binds while
    they are still in flight (evictions have a pool of their own; on one pool, the bind waited
    for every eviction queued before it)."""
    stalled, cache = Stalled(), Cache()
    cache.add_node(node("n1"))
    cache.add_podgroup(podgroup("ready", 1))
    cache.add_pod(a_pod("ready-0", group="ready"))
    victims = []
    for i in range(4):
        cache.add_pod(a_pod(f"victim-{i}", cpu="100m", node_name="n1", phase="Running"))
        victims.append(cache.task(f"uid-victim-{i}"))
    running = Binder(stalled, cache, workers=2, evict_workers=2)
    try:
        evicting = running.evict([Eviction(victim, "preempt", guarded=False) for victim in victims])
        job = cache.snapshot().jobs["default/ready"]
        (task,) = job.tasks.values()
        task.node = "n1"
        cache.assume(BindBatch(job, [task]))
        outcome = running.submit([BindBatch(job, [task])])[0].result(timeout=5)
        assert outcome.bound == ["default/ready-0"] and not any(future.done() for future in evicting)
    finally:
        stalled.release.set()
        running.close()


def test_rollback_rule() -> None:
    assert needs_rollback(others_ready=0, bound=2, failed=1, min_member=3)
    assert not needs_rollback(others_ready=1, bound=2, failed=1, min_member=3)
    assert not needs_rollback(others_ready=0, bound=0, failed=3, min_member=3)  # nothing bound: nothing to undo
    assert not needs_rollback(others_ready=0, bound=3, failed=0, min_member=3)


def test_wait_idle_without_work(binder: tuple[Binder, Cache, SchedulerMetrics]) -> None:
    assert binder[0].wait_idle(1.0) and binder[0].busy() == 0
