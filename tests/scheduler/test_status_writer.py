"""PodGroup and Queue status written back: phases, conditions with their transition times, counts,
queue allocations, rate-limited Events, and nothing written when nothing changed."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lahar.api import kinds
from lahar.api.kinds import Kind
from lahar.client.api import KubeApi
from lahar.client.events import EventRecorder
from lahar.scheduler.cache import Cache
from lahar.scheduler.conf import SchedulerConf
from lahar.scheduler.framework.session import Session, SessionEvent
from lahar.scheduler.metrics import CycleFigures, QueueFigures
from lahar.scheduler.model import JobInfo, TaskStatus
from lahar.scheduler.status import (
    COMPONENT,
    StatusWriter,
    news,
    podgroup_phase,
    podgroup_status_patch,
    queue_status_patch,
    summarize,
)
from tests.scheduler.test_cache import a_pod, bound, node, pod, podgroup, queue

Obj = dict[str, Any]
NO_ACTIONS = SchedulerConf(actions=(), tiers=())
T0 = "2030-01-01T00:00:00Z"
T1 = "2030-01-01T00:01:00Z"


def gang(size: int, min_member: int, status: Obj | None = None) -> tuple[Cache, JobInfo]:
    cache = Cache()
    cache.add_node(node("n1"))
    cache.add_podgroup({**podgroup("g", min_member), "status": status or {"phase": "Pending"}})
    for i in range(size):
        cache.add_pod(a_pod(f"g-{i}", group="g"))
    return cache, cache.snapshot().jobs["default/g"]


def place(job: JobInfo, count: int, status: TaskStatus) -> None:
    for task in sorted(job.pending, key=lambda t: t.name)[:count]:
        job.set_status(task, status)


def with_status(job: JobInfo, cache: Cache, patch: Obj) -> JobInfo:
    """The job after its PodGroup took `patch` (as the API and then the cache would have it)."""
    assert job.podgroup is not None
    cache.update_podgroup(None, {**job.podgroup.raw, "status": {**job.podgroup.status, **patch}})
    fresh = cache.snapshot().jobs[job.key]
    for task in job.tasks.values():
        fresh.set_status(fresh.tasks[task.uid], task.status)
    fresh.unschedulable_message = job.unschedulable_message
    return fresh


# -- pure -------------------------------------------------------------------------------------------


def test_phases() -> None:
    _, job = gang(3, 3)
    assert podgroup_phase(job).value == "Pending"
    job.phase = type(job.phase)("Inqueue")  # the enqueue action admitted it
    assert podgroup_phase(job).value == "Inqueue"
    place(job, 2, TaskStatus.ALLOCATED)
    assert podgroup_phase(job).value == "Inqueue"  # 2 of minMember 3: not yet
    place(job, 1, TaskStatus.BINDING)
    assert podgroup_phase(job).value == "Running"  # scheduled, though kubelet has not started them
    for task in list(job.tasks.values()):
        job.set_status(task, TaskStatus.SUCCEEDED)
    assert podgroup_phase(job).value == "Completed"
    _, broken = gang(3, 3)
    place(broken, 1, TaskStatus.RUNNING)
    broken.unschedulable_message = "2/3 tasks in gang unschedulable: 1 node(s) insufficient cpu"
    assert podgroup_phase(broken).value == "Unknown"


def test_conditions_flip_with_transition_times_and_nothing_repeats() -> None:
    cache, job = gang(3, 3)
    job.unschedulable_message = "3/3 tasks in gang unschedulable: 1 node(s) insufficient cpu"
    patch = podgroup_status_patch(job, T0)
    assert patch is not None and "phase" not in patch  # Pending, as written already
    assert patch["conditions"] == [
        {
            "type": "Unschedulable",
            "status": "True",
            "lastTransitionTime": T0,
            "reason": "NotEnoughResources",
            "message": job.unschedulable_message,
        }
    ]
    job = with_status(job, cache, patch)
    assert podgroup_status_patch(job, T1) is None  # the same cycle again: no write

    job.unschedulable_message = "3/3 tasks in gang unschedulable: 2 node(s) insufficient memory"
    patch = podgroup_status_patch(job, T1)
    assert patch is not None and set(patch) == {"conditions"}
    assert patch["conditions"][0]["lastTransitionTime"] == T0  # the status did not flip
    job = with_status(job, cache, patch)

    job.unschedulable_message = ""
    place(job, 3, TaskStatus.ALLOCATED)
    patch = podgroup_status_patch(job, T1)
    assert patch is not None and patch["phase"] == "Running"
    conditions = {c["type"]: c for c in patch["conditions"]}
    assert conditions["Unschedulable"]["status"] == "False" and conditions["Unschedulable"]["lastTransitionTime"] == T1
    assert conditions["Scheduled"]["status"] == "True" and conditions["Scheduled"]["reason"] == "GangScheduled"


def test_counts() -> None:
    _, job = gang(4, 2)
    place(job, 1, TaskStatus.RUNNING)
    place(job, 1, TaskStatus.SUCCEEDED)
    place(job, 1, TaskStatus.FAILED)
    patch = podgroup_status_patch(job, T0)
    assert patch is not None
    assert (patch["running"], patch["succeeded"], patch["failed"], patch["phase"]) == (1, 1, 1, "Running")


def test_queue_status_patch_writes_only_changes_and_drops_zeros() -> None:
    figures = QueueFigures({"cpu": 1500, "pods": 2})
    assert queue_status_patch({}, figures) == {"allocated": {"cpu": "1500m", "pods": "2"}}
    assert queue_status_patch({"allocated": {"cpu": "1.5", "pods": "2"}, "running": 3}, figures) is None
    assert queue_status_patch({"allocated": {"cpu": "1", "memory": "1Gi"}}, QueueFigures({"cpu": 1000})) == {
        "allocated": {"memory": None, "cpu": "1"}
    }
    assert queue_status_patch({}, QueueFigures({}, {"cpu": 4000})) == {"deserved": {"cpu": "4"}}


def test_summary_counts_pending_unschedulable_and_queue_allocations() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    cache.add_queue(queue("research"))
    cache.add_pod(bound(a_pod("running", queue="research", cpu="500m"), "n1"))
    cache.add_pod(a_pod("waiting", queue="research"))
    session = Session(cache.snapshot(), NO_ACTIONS)
    session.jobs["default/waiting"].unschedulable_message = "1/1 tasks in gang unschedulable: no"
    session.queue_figures = {"research": {"deserved": session.resources.vector({"cpu": 1000})}}
    figures = summarize(session)
    assert (figures.pending_pods, figures.unschedulable_gangs) == (1, 1)
    research = figures.queues["research"]
    assert dict(research.allocated) == {"cpu": 500, "memory": 1 << 30, "pods": 1}
    assert dict(research.deserved or {}) == {"cpu": 1000} and research.share == 0.5
    assert figures.queues["default"].deserved is None and dict(figures.queues["default"].allocated) == {}


def test_events_are_news_once_per_message() -> None:
    full = SessionEvent("PodGroup", "default", "g", "Warning", "Unschedulable", "3/3 tasks in gang unschedulable")
    fresh, said = news({}, [full, full])
    assert fresh == [full]
    fresh, said = news(said, [full])
    assert fresh == []  # the same thing again
    changed = SessionEvent("PodGroup", "default", "g", "Warning", "Unschedulable", "2/3 tasks in gang unschedulable")
    fresh, said = news(said, [changed])
    assert fresh == [changed]
    fresh, said = news(said, [])  # a cycle without it (scheduled, or not considered)
    assert news(said, [changed])[0] == [changed]


class SlowApi:
    """An API whose status patches wait for `release`, counting them."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.patches = 0

    def patch(self, kind: Kind, name: str, body: Obj, namespace: str | None = None, **_: Any) -> Obj:
        self.patches += 1
        self.release.wait(10)
        return {"metadata": {"name": name, "namespace": namespace}, **body}


def test_a_write_in_flight_is_not_sent_again() -> None:
    _, job = gang(2, 2)
    job.unschedulable_message = "2/2 tasks in gang unschedulable: no room"
    session = Session(Cache().snapshot(), NO_ACTIONS)
    session.jobs[job.key] = job
    api = SlowApi()
    writer = StatusWriter(api, workers=2)
    try:
        assert writer.write(session, CycleFigures()) == 1
        assert writer.write(session, CycleFigures()) == 0  # the first is still waiting on the API
        api.release.set()
        assert writer.wait_idle(10) and api.patches == 1
        assert writer.write(session, CycleFigures()) == 1  # done (and not fed back here): compared again
    finally:
        api.release.set()
        writer.close()


class EchoApi:
    """An API that answers a status patch with the object at a new resourceVersion, counting them."""

    def __init__(self) -> None:
        self.patches = 0

    def patch(self, kind: Kind, name: str, body: Obj, namespace: str | None = None, **_: Any) -> Obj:
        self.patches += 1
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(10 + self.patches)}, **body}


def test_a_patch_written_against_a_version_is_not_sent_again_for_that_version() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    cache.add_podgroup({**podgroup("g", 1, version="5"), "status": {"phase": "Pending"}})
    cache.add_pod(a_pod("g-0", group="g"))
    job = cache.snapshot().jobs["default/g"]
    job.unschedulable_message = "1/1 tasks in gang unschedulable: no room"
    session = Session(cache.snapshot(), NO_ACTIONS)
    session.jobs[job.key] = job
    api = EchoApi()
    writer = StatusWriter(api, workers=1)
    try:
        assert writer.write(session, CycleFigures()) == 1
        assert writer.wait_idle(10)
        # A cycle whose snapshot was taken before the write came back computes the same patch
        # against version 5 again: it was written, nothing to send.
        assert writer.write(session, CycleFigures()) == 0 and api.patches == 1
        # Against a newer version (someone else wrote the status meanwhile), it is sent.
        cache.update_podgroup(None, {**podgroup("g", 1, version="9"), "status": {"phase": "Pending"}})
        newer = Session(cache.snapshot(), NO_ACTIONS)
        newer.jobs[job.key].unschedulable_message = job.unschedulable_message
        assert writer.write(newer, CycleFigures()) == 1
    finally:
        writer.close()


# -- against the API --------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(scope="module")
def api(module_k8s: Any) -> KubeApi:
    return KubeApi(module_k8s, timeout=10)


class Written:
    """The writer's on_written hook feeding the cache, counting writes by kind."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.count: dict[str, int] = {}

    def __call__(self, kind: Kind, obj: Obj) -> None:
        self.count[kind.kind] = self.count.get(kind.kind, 0) + 1
        (self.cache.update_podgroup if kind is kinds.PODGROUP else self.cache.update_queue)(None, obj)


def unschedulable_events(api: KubeApi, name: str) -> list[Obj]:
    events = api.list(kinds.EVENT, "default", field_selector=f"involvedObject.name={name}")["items"]
    return [e for e in events if e["reason"] == "Unschedulable"]


def test_writer_against_the_api_without_churn(api: KubeApi) -> None:
    clock = Clock()
    cache = Cache()
    cache.add_node(node("n1"))
    cache.add_queue(api.create(kinds.QUEUE, queue("writers")))
    cache.add_podgroup(api.create(kinds.PODGROUP, podgroup("written", 2, queue="writers"), "default"))
    for i in range(2):
        cache.add_pod(api.create(kinds.POD, pod(f"written-{i}", "250m", group="written"), "default"))
    written = Written(cache)
    writer = StatusWriter(api, EventRecorder(api, COMPONENT, clock=clock), on_written=written, clock=clock, workers=2)
    try:

        def cycle(message: str = "", placed: int = 0) -> int:
            session = Session(cache.snapshot(), NO_ACTIONS)
            job = session.jobs["default/written"]
            job.unschedulable_message = message
            if message:  # what the gang plugin says at session close
                session.record_event("PodGroup", "default", "written", "Warning", "Unschedulable", message)
            place(job, placed, TaskStatus.BINDING)
            sent = writer.write(session, summarize(session))
            assert writer.wait_idle(10)
            return sent

        full = "2/2 tasks in gang unschedulable: 1 node(s) insufficient cpu"
        assert cycle(full) == 2  # the PodGroup's status and the Event (the queue holds nothing yet)
        status = api.get(kinds.PODGROUP, "written", "default")["status"]
        assert status["phase"] == "Pending" and status["conditions"][0]["message"] == full
        assert cycle(full) == 0 and written.count == {"PodGroup": 1}  # the Event is not said again...
        assert len(unschedulable_events(api, "written")) == 1  # ... and not recorded twice

        clock.now += timedelta(minutes=1)
        assert cycle(placed=2) == 2  # the PodGroup's phase and conditions, the queue's allocated
        status = api.get(kinds.PODGROUP, "written", "default")["status"]
        conditions = {c["type"]: c for c in status["conditions"]}
        assert status["phase"] == "Running" and conditions["Scheduled"]["status"] == "True"
        assert conditions["Unschedulable"]["lastTransitionTime"] == "2030-01-01T00:01:00Z"
        assert api.get(kinds.QUEUE, "writers")["status"]["allocated"] == {"cpu": "500m", "memory": "2Gi", "pods": "2"}
        assert cycle(placed=2) == 0  # nothing changed: no API call at all
        assert written.count == {"PodGroup": 2, "Queue": 1}

        assert cycle(full) == 3  # unschedulable again after a cycle without it: news (and the queue is empty)
        # Said again within 10 minutes: the same Event, counted (kube's de-duplication).
        (event,) = unschedulable_events(api, "written")
        assert event["count"] == 2 and event["lastTimestamp"] == "2030-01-01T00:01:00Z"
    finally:
        writer.close()
