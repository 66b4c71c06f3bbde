"""Informer against the embedded server: sync, handlers, selectors, re-watch, 410 re-list, and a
server restart that hides changes from it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lahar.api.kinds import POD, QUEUE
from lahar.client.api import KubeApi, Obj
from lahar.client.informer import Backoff, Informer, by_label, by_namespace, by_node, by_owner, is_newer

ServerProcess = Any  # tests/conftest.py's class; test modules cannot import it (--import-mode=importlib)
PodFactory = Callable[..., Obj]


def wait_until(condition: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Recorder:
    """Handler calls as ("add"|"update"|"delete", name), in order, from the informer's thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.updates: list[tuple[Obj, Obj]] = []
        self._lock = threading.Lock()

    def on_add(self, obj: Obj) -> None:
        self._record("add", obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        with self._lock:
            self.updates.append((old, new))
        self._record("update", new)

    def on_delete(self, obj: Obj) -> None:
        self._record("delete", obj)

    def _record(self, what: str, obj: Obj) -> None:
        with self._lock:
            self.calls.append((what, obj["metadata"]["name"]))

    def snapshot(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self.calls)

    def wait_for(self, count: int, timeout: float = 5.0) -> list[tuple[str, str]]:
        wait_until(lambda: len(self.snapshot()) >= count, timeout, f"{count} handler calls (got {self.snapshot()})")
        return self.snapshot()

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()
            self.updates.clear()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def informers() -> Iterator[list[Informer]]:
    """Informers a test starts; all stopped at the end."""
    started: list[Informer] = []
    yield started
    for informer in started:
        informer.stop()


def start_informer(informers: list[Informer], api: KubeApi, recorder: Recorder, **options: Any) -> Informer:
    informer = Informer(
        POD,
        api,
        "default",
        on_add=recorder.on_add,
        on_update=recorder.on_update,
        on_delete=recorder.on_delete,
        backoff=Backoff(0.05, 0.5),
        **options,
    )
    informers.append(informer)
    informer.start()
    assert informer.wait_for_sync(5)
    return informer


def names(informer: Informer) -> list[str]:
    return sorted(obj["metadata"]["name"] for obj in informer.list())


def label(api: KubeApi, name: str, value: str) -> Obj:
    return api.patch(POD, name, {"metadata": {"labels": {"touched": value}}}, "default")


def churn_other_kind(api: KubeApi, count: int) -> None:
    """Changes the pod informer does not see but that push its version out of a short history."""
    for index in range(count):
        api.create(QUEUE, {"metadata": {"name": f"churn-{index}"}, "spec": {"weight": 1}})


def test_initial_sync_lists_every_page(
    api: KubeApi, pod: PodFactory, recorder: Recorder, informers: list[Informer]
) -> None:
    for name in ("a", "b", "c", "d", "e"):
        api.create(POD, pod(name))
    informer = start_informer(informers, api, recorder, page_size=2)
    assert informer.has_synced
    assert names(informer) == ["a", "b", "c", "d", "e"]
    assert sorted(recorder.snapshot()) == [("add", n) for n in ("a", "b", "c", "d", "e")]
    assert informer.get("c", "default")["metadata"]["name"] == "c"
    assert informer.get("c", "elsewhere") is None
    assert int(informer.resource_version) >= int(api.get(POD, "e", "default")["metadata"]["resourceVersion"])


def test_handlers_see_add_update_delete(
    api: KubeApi, pod: PodFactory, recorder: Recorder, informers: list[Informer]
) -> None:
    informer = start_informer(informers, api, recorder)
    assert recorder.snapshot() == []
    created = api.create(POD, pod("live"))
    updated = label(api, "live", "1")
    api.delete(POD, "live", "default", grace_period_seconds=0)
    assert recorder.wait_for(3) == [("add", "live"), ("update", "live"), ("delete", "live")]
    old, new = recorder.updates[0]
    assert old["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert new["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    assert informer.list() == []
    assert int(informer.resource_version) > int(updated["metadata"]["resourceVersion"])


def test_label_selector_moves_objects_in_and_out(
    api: KubeApi, pod: PodFactory, recorder: Recorder, informers: list[Informer]
) -> None:
    api.create(POD, pod("in", {"team": "ml"}))
    api.create(POD, pod("out", {"team": "web"}))
    informer = start_informer(informers, api, recorder, label_selector="team=ml")
    assert names(informer) == ["in"]
    api.patch(POD, "out", {"metadata": {"labels": {"team": "ml"}}}, "default")
    api.patch(POD, "in", {"metadata": {"labels": {"team": "web"}}}, "default")
    assert recorder.wait_for(3) == [("add", "in"), ("add", "out"), ("delete", "in")]
    assert names(informer) == ["out"]


def test_a_failing_handler_does_not_stop_the_informer(
    api: KubeApi, pod: PodFactory, recorder: Recorder, informers: list[Informer]
) -> None:
    def explode(obj: Obj) -> None:
        raise RuntimeError(f"handler bug on {obj['metadata']['name']}")

    informer = Informer(POD, api, "default", on_add=explode)
    informer.add_handler(on_add=recorder.on_add)
    informers.append(informer)
    informer.start()
    assert informer.wait_for_sync(5)
    api.create(POD, pod("first"))
    api.create(POD, pod("second"))
    assert recorder.wait_for(2) == [("add", "first"), ("add", "second")]
    assert names(informer) == ["first", "second"]


def test_rewatches_when_a_watch_times_out(
    api: KubeApi, pod: PodFactory, recorder: Recorder, informers: list[Informer]
) -> None:
    informer = start_informer(informers, api, recorder, watch_timeout=1)
    wait_until(lambda: informer.watches >= 2, 5, "the first watch (1-2 s) to end and a second to open")
    api.create(POD, pod("late"))
    assert recorder.wait_for(1) == [("add", "late")]
    assert informer.relists == 1  # an ended watch resumes from its version; it does not list again


def test_restart_resumes_from_its_version_without_listing(
    api: KubeApi, pod: PodFactory, recorder: Recorder, informers: list[Informer]
) -> None:
    api.create(POD, pod("kept"))
    informer = start_informer(informers, api, recorder)
    informer.stop()
    label(api, "kept", "while-stopped")
    api.create(POD, pod("new"))
    informer.start()
    assert recorder.wait_for(3) == [("add", "kept"), ("update", "kept"), ("add", "new")]
    assert informer.relists == 1


def test_expired_version_relists_and_fires_only_the_differences(
    short_history_server: ServerProcess, api: KubeApi, pod: PodFactory, recorder: Recorder, informers: list[Informer]
) -> None:
    for name in ("changed", "deleted", "unchanged"):
        api.create(POD, pod(name))
    informer = start_informer(informers, api, recorder)
    informer.stop()
    recorder.clear()

    label(api, "changed", "yes")
    api.delete(POD, "deleted", "default", grace_period_seconds=0)
    api.create(POD, pod("added"))
    churn_other_kind(api, 6)  # the history of 5 no longer reaches the informer's version
    informer.start()

    calls = recorder.wait_for(3)
    wait_until(lambda: informer.relists == 2, 5, "the re-list")
    assert sorted(calls) == [("add", "added"), ("delete", "deleted"), ("update", "changed")]
    assert names(informer) == ["added", "changed", "unchanged"]
    assert informer.get("changed", "default")["metadata"]["labels"] == {"touched": "yes"}
    label(api, "unchanged", "now")  # the watch after the re-list works
    assert recorder.wait_for(4)[-1] == ("update", "unchanged")


def test_server_restart_relists_and_sees_what_changed_meanwhile(
    apiserver: ServerProcess,
    api: KubeApi,
    recorder: Recorder,
    informers: list[Informer],
    server_process: type[ServerProcess],
    connect_to: Callable[[ServerProcess], KubeApi],
    caplog: pytest.LogCaptureFixture,
    pod: PodFactory,
) -> None:
    for name in ("changed", "deleted", "unchanged"):
        api.create(POD, pod(name))
    informer = start_informer(informers, api, recorder)
    recorder.clear()
    caplog.set_level(logging.INFO, logger="lahar.client.informer")

    apiserver.stop()  # the informer's watch breaks; it retries with backoff
    # Change the data through a second server on the same data directory and another port: the
    # informer, pointed at the first, cannot see the changes as they happen.
    other = server_process(apiserver.data_dir)
    other.start()
    try:
        side = connect_to(other)
        label(side, "changed", "away")
        side.delete(POD, "deleted", "default", grace_period_seconds=0)
        side.create(POD, pod("added"))
    finally:
        other.stop()
    assert informer.get("deleted", "default") is not None, "the cache is kept while the API is away"
    apiserver.start()

    calls = recorder.wait_for(3, timeout=8)
    assert sorted(calls) == [("add", "added"), ("delete", "deleted"), ("update", "changed")]
    assert informer.relists == 2
    assert names(informer) == ["added", "changed", "unchanged"]
    assert any("reconnected" in record.getMessage() for record in caplog.records)
    label(api, "unchanged", "after")
    assert recorder.wait_for(4)[-1] == ("update", "unchanged")


def test_stop_interrupts_a_long_watch(api: KubeApi, recorder: Recorder, informers: list[Informer]) -> None:
    informer = start_informer(informers, api, recorder, watch_timeout=300)
    time.sleep(0.2)
    started = time.monotonic()
    informer.stop()
    assert time.monotonic() - started < 2
    assert not informer.running


def test_is_newer_compares_numbers_and_opaque_versions() -> None:
    assert is_newer("10", "9") and not is_newer("9", "10") and not is_newer("7", "7")
    assert is_newer("abc", "abd") and not is_newer("abc", "abc")


def test_backoff_grows_to_its_cap_with_jitter() -> None:
    backoff = Backoff(0.2, 1.0)
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, ceiling in zip(delays, (0.2, 0.4, 0.8, 1.0, 1.0, 1.0), strict=True):
        assert ceiling / 2 <= delay <= ceiling
    backoff.reset()
    assert backoff.next_delay() <= 0.2


def test_indexes_follow_adds_updates_and_deletes(
    api: KubeApi, pod: PodFactory, recorder: Recorder, informers: list[Informer]
) -> None:
    api.create(POD, pod("a1", {"job": "a"}))
    api.create(POD, pod("b1", {"job": "b"}))
    informer = start_informer(informers, api, recorder)
    informer.add_index("job", by_label("job"))  # after the first list: built from the cache
    informer.add_index("namespace", by_namespace)
    assert names_of(informer.by_index("job", "default/a")) == ["a1"]
    api.create(POD, pod("a2", {"job": "a"}))
    api.patch(POD, "b1", {"metadata": {"labels": {"job": "a"}}}, "default")  # moves from b to a
    recorder.wait_for(4)
    assert names_of(informer.by_index("job", "default/a")) == ["a1", "a2", "b1"]
    assert informer.by_index("job", "default/b") == []
    api.delete(POD, "a1", "default", grace_period_seconds=0)
    recorder.wait_for(5)
    assert names_of(informer.by_index("job", "default/a")) == ["a2", "b1"]
    assert names_of(informer.by_index("namespace", "default")) == ["a2", "b1"]
    assert informer.by_index("job", "default/nothing") == []


def test_standard_indexes_by_owner_and_node(
    api: KubeApi, pod: PodFactory, recorder: Recorder, informers: list[Informer]
) -> None:
    informer = start_informer(informers, api, recorder)
    informer.add_index("owner", by_owner)
    informer.add_index("node", by_node)
    owned = pod("owned")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "owner-uid"}]
    placed = pod("placed")
    placed["spec"]["nodeName"] = "node-1"
    api.create(POD, owned)
    api.create(POD, placed)
    recorder.wait_for(2)
    assert names_of(informer.by_index("owner", "owner-uid")) == ["owned"]
    assert names_of(informer.by_index("node", "node-1")) == ["placed"]
    assert informer.by_index("node", "") == []  # an unbound pod is under no node


def names_of(objs: list[Obj]) -> list[str]:
    return [obj["metadata"]["name"] for obj in objs]
