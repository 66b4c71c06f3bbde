"""The scheduler cache's core, fed API dicts directly: node usage follows pod events, pods join
their PodGroup, other schedulers' pods occupy, finished pods free, the resource axis grows, binds
in flight are assumed and forgotten. The manifest builders here are shared by the other
scheduler test modules (`from tests.scheduler.test_cache import ...`)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from lahar.scheduler.cache import Cache
from lahar.scheduler.conf import default_conf
from lahar.scheduler.framework.session import run_cycle
from lahar.scheduler.model import CPU, MEMORY, PODS, TASK_SPEC_ANNOTATION, BindBatch, TaskStatus

Obj = dict[str, Any]
GIB = 1 << 30


# -- manifests (uid and resourceVersion only when given: the API server assigns its own) ----------


def node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    ready: bool = True,
    extended: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", **(extended or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    cpu: str = "1",
    memory: str = "1Gi",
    *,
    group: str = "",
    scheduler: str = "lahar",
    node_name: str = "",
    phase: str = "",
    uid: str = "",
    version: str = "",
    namespace: str = "default",
    queue: str = "",
    extended: dict[str, str] | None = None,
    selector: dict[str, str] | None = None,
) -> Obj:
    annotations = {}
    if group:
        annotations["scheduling.k8s.io/group-name"] = group
    if queue:
        annotations["scheduling.volcano.sh/queue-name"] = queue
    metadata: Obj = {"name": name, "namespace": namespace, "annotations": annotations}
    if uid:
        metadata["uid"] = uid
    if version:
        metadata["resourceVersion"] = version
    requests = {"cpu": cpu, "memory": memory, **(extended or {})}
    spec: Obj = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    if selector:
        spec["nodeSelector"] = selector
    obj: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def podgroup(
    name: str, min_member: int, *, queue: str = "default", namespace: str = "default", version: str = ""
) -> Obj:
    metadata: Obj = {"name": name, "namespace": namespace}
    if version:
        metadata["resourceVersion"] = version
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": {"minMember": min_member, "queue": queue},
    }


def queue(name: str, weight: int = 1, **spec: Any) -> Obj:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": weight, **spec},
    }


# -- helpers ----------------------------------------------------------------------------------------


def a_pod(name: str, **kwargs: Any) -> Obj:
    """A pod as the cache sees it from an informer: with a uid."""
    return pod(name, uid=f"uid-{name}", **kwargs)


def used(cache: Cache, node_name: str, resource: str) -> int:
    snapshot = cache.snapshot()
    nodes = snapshot.nodes
    return int((nodes.used + nodes.be_used)[nodes.index[node_name], snapshot.resources.column[resource]])


def bound(obj: Obj, node_name: str, phase: str = "Running") -> Obj:
    return {**obj, "spec": {**obj["spec"], "nodeName": node_name}, "status": {"phase": phase}}


# -- tests ------------------------------------------------------------------------------------------


def test_pod_events_move_node_usage() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    cache.add_node(node("n2"))
    web = a_pod("web", cpu="500m", memory="1Gi")
    cache.add_pod(web)
    assert used(cache, "n1", CPU) == 0  # pending: holds nothing yet
    cache.update_pod(web, bound(web, "n1"))
    assert used(cache, "n1", CPU) == 500 and used(cache, "n1", MEMORY) == GIB and used(cache, "n1", PODS) == 1
    cache.update_pod(web, bound(web, "n1", "Succeeded"))
    assert used(cache, "n1", CPU) == 0  # finished pods free their room
    assert cache.snapshot().jobs["default/web"].count([TaskStatus.SUCCEEDED]) == 1
    cache.delete_pod(web)
    assert "default/web" not in cache.snapshot().jobs


def test_pods_listed_before_their_node_count_once_it_arrives_and_node_removal_keeps_the_rest() -> None:
    cache = Cache()
    cache.add_pod(bound(a_pod("early"), "late"))
    cache.add_node(node("n0"))
    cache.add_node(node("late"))
    cache.add_node(node("n2"))
    assert used(cache, "late", CPU) == 1000
    cache.delete_node(node("n0"))  # the last row moves into row 0
    assert cache.node_names() == ["n2", "late"]
    assert used(cache, "late", CPU) == 1000 and used(cache, "n2", CPU) == 0
    cache.add_pod(bound(a_pod("more"), "n2"))
    assert used(cache, "n2", CPU) == 1000


def test_many_nodes_grow_the_buffers() -> None:
    cache = Cache()
    for i in range(200):
        cache.add_node(node(f"n{i}"))
    cache.add_pod(bound(a_pod("p"), "n150"))
    snapshot = cache.snapshot()
    assert len(snapshot.nodes) == 200 and snapshot.nodes.allocatable.shape == (200, 3)
    assert used(cache, "n150", CPU) == 1000


def test_pods_join_their_podgroup_which_must_exist_first() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    for i in range(3):
        cache.add_pod(a_pod(f"train-{i}", group="train"))
    assert "default/train" not in cache.snapshot().jobs  # no PodGroup yet: not scheduled
    assert cache.waiting() == 3
    cache.add_podgroup(podgroup("train", 3, queue="research"))
    job = cache.snapshot().jobs["default/train"]
    assert len(job.pending) == 3 and job.min_member == 3 and job.queue == "research" and cache.waiting() == 0
    cache.update_podgroup(None, {**podgroup("train", 2), "status": {"phase": "Inqueue"}})
    job = cache.snapshot().jobs["default/train"]
    assert len(job.tasks) == 3 and job.min_member == 2 and job.phase.value == "Inqueue"
    cache.delete_podgroup(podgroup("train", 2))
    assert "default/train" not in cache.snapshot().jobs and cache.waiting() == 3


def test_lone_pod_is_a_gang_of_one_in_its_annotated_queue() -> None:
    cache = Cache()
    cache.add_pod(a_pod("solo", queue="batch"))
    job = cache.snapshot().jobs["default/solo"]
    assert job.min_member == 1 and job.queue == "batch" and job.podgroup is None
    assert set(cache.snapshot().queues) == {"default"}  # the default queue is always there


def test_other_schedulers_pods_occupy_but_are_not_scheduled() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    other = a_pod("kube", scheduler="default-scheduler")
    cache.add_pod(other)  # pending: someone else's business
    assert cache.snapshot().jobs == {} and used(cache, "n1", CPU) == 0
    cache.update_pod(other, bound(other, "n1"))
    assert used(cache, "n1", CPU) == 1000 and cache.snapshot().jobs == {}
    cache.update_pod(other, bound(other, "n1", "Failed"))
    assert used(cache, "n1", CPU) == 0


def test_snapshot_is_a_clone_the_session_may_change() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    cache.add_pod(bound(a_pod("a"), "n1"))
    snapshot = cache.snapshot()
    snapshot.nodes.used[0] += 5
    snapshot.nodes.names.append("ghost")
    shared = snapshot.jobs["default/a"]  # running, nothing to place: still the cache's
    assert shared is cache.job("default/a")
    job = snapshot.own("default/a")  # what a session changes it clones first
    assert job is not shared and snapshot.jobs["default/a"] is job
    job.set_status(next(iter(job.tasks.values())), TaskStatus.RELEASING)
    cache.update_node(None, node("n1", cpu="8"))  # the cache changes after the snapshot was taken
    assert snapshot.nodes.allocatable[0, 0] == 4000
    again = cache.snapshot()
    assert again.nodes.used[0, 0] == 1000 and again.nodes.names == ["n1"] and again.nodes.allocatable[0, 0] == 8000
    assert next(iter(again.jobs["default/a"].tasks.values())).status is TaskStatus.RUNNING
    assert next(iter(snapshot.nodes.tasks[0].values())) is next(iter(job.tasks.values()))


def test_a_new_extended_resource_widens_the_axis_keeping_every_amount() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    cache.add_pod(bound(a_pod("cpu-only"), "n1"))
    cache.add_node(node("gpu", extended={"nvidia.com/gpu": "8"}))
    cache.add_pod(bound(a_pod("trainer", extended={"nvidia.com/gpu": "2"}), "gpu"))
    snapshot = cache.snapshot()
    assert snapshot.resources.names == ("cpu", "memory", "pods", "nvidia.com/gpu")
    assert used(cache, "gpu", "nvidia.com/gpu") == 2 and used(cache, "n1", CPU) == 1000
    assert snapshot.nodes.allocatable[snapshot.nodes.index["gpu"], 3] == 8
    task = next(iter(snapshot.jobs["default/cpu-only"].tasks.values()))
    assert task.request.tolist() == [1000, GIB, 1, 0]


def test_assume_holds_the_room_until_the_bind_shows_and_forget_gives_it_back() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    first, second = a_pod("first"), a_pod("second")
    cache.add_pod(first)
    cache.add_pod(second)
    snapshot = cache.snapshot()
    tasks = [next(iter(snapshot.jobs[f"default/{name}"].tasks.values())) for name in ("first", "second")]
    for task in tasks:
        task.node = "n1"
    cache.assume(BindBatch(snapshot.jobs["default/first"], tasks))
    assert used(cache, "n1", CPU) == 2000
    assert {t.status for t in cache.snapshot().jobs["default/first"].tasks.values()} == {TaskStatus.BINDING}
    # An update that does not show the bind yet (an annotation patch) keeps the assumption.
    cache.update_pod(first, {**first, "metadata": {**first["metadata"], "labels": {"x": "y"}}})
    assert used(cache, "n1", CPU) == 2000
    cache.update_pod(first, bound(first, "n1", "Pending"))  # the bind landed
    assert cache.task("uid-first").status is TaskStatus.BOUND and "uid-first" not in cache.assumed()
    cache.forget("uid-second")  # its bind failed: pending again, room given back
    assert cache.task("uid-second").status is TaskStatus.PENDING and used(cache, "n1", CPU) == 1000


def test_an_assumed_bind_shows_the_annotations_the_binder_writes_first() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    pod = a_pod("p")
    cache.add_pod(pod)
    snapshot = cache.snapshot()
    task = next(iter(snapshot.jobs["default/p"].tasks.values()))
    task.node = "n1"
    wanted = {"volcano.sh/vgpu-ids-new": "GPU-a,NVIDIA,4096,25:"}
    cache.assume(BindBatch(snapshot.jobs["default/p"], [task]), {"uid-p": wanted})

    def shown() -> dict[str, str]:
        return dict(cache.task("uid-p").pod.meta.annotations)

    assert wanted.items() <= shown().items() and "volcano.sh/vgpu-ids-new" not in (
        pod["metadata"].get("annotations") or {}
    )
    # An update that shows neither the patch nor the bind yet keeps them.
    cache.update_pod(pod, {**pod, "metadata": {**pod["metadata"], "labels": {"x": "y"}}})
    assert wanted.items() <= shown().items()
    cache.update_pod(pod, bound(pod, "n1", "Pending"))  # the bind landed: the API's object has the last word
    assert "volcano.sh/vgpu-ids-new" not in shown() and "uid-p" not in cache.assumed()


def test_assumed_eviction_releases_until_the_pod_goes() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    victim = bound(a_pod("victim"), "n1")
    cache.add_pod(victim)
    cache.assume_evicted([cache.task("uid-victim")])
    snapshot = cache.snapshot()
    assert snapshot.nodes.releasing[0, 0] == 1000
    cache.forget("uid-victim")  # the eviction was refused (a disruption budget)
    assert cache.snapshot().nodes.releasing[0, 0] == 0 and cache.task("uid-victim").status is TaskStatus.RUNNING


def test_podgroup_versions_older_than_the_held_one_are_ignored() -> None:
    cache = Cache()
    cache.add_podgroup({**podgroup("g", 1, version="7"), "status": {"phase": "Inqueue"}})
    cache.update_podgroup(None, {**podgroup("g", 1, version="6"), "status": {"phase": "Pending"}})
    assert cache.snapshot().jobs["default/g"].phase.value == "Inqueue"


def test_priority_classes_set_podgroup_priority() -> None:
    cache = Cache()
    group = podgroup("g", 1)
    group["spec"]["priorityClassName"] = "high"
    cache.add_podgroup(group)
    cache.add_podgroup(podgroup("plain", 1))
    assert cache.snapshot().jobs["default/g"].priority == 0
    cache.add_priority_class({"metadata": {"name": "high"}, "value": 1000})
    cache.add_priority_class({"metadata": {"name": "base"}, "value": 10, "globalDefault": True})
    snapshot = cache.snapshot()
    assert snapshot.jobs["default/g"].priority == 1000 and snapshot.jobs["default/plain"].priority == 10
    assert snapshot.priority_classes == {"high": 1000, "base": 10}


def test_work_arrivals_wake_the_loop() -> None:
    woken = threading.Event()
    cache = Cache(on_work=woken.set)
    cache.add_pod(bound(a_pod("running"), "n1"))
    assert not woken.is_set()
    cache.add_pod(a_pod("pending"))
    assert woken.is_set()


def test_a_gang_short_of_its_minimum_wakes_the_loop_only_once_complete() -> None:
    """With the gang plugin holding such jobs back (`gangs_wait`), a PodGroup's members arriving
    one by one wake the loop once, when the last of its minMember arrives: a cycle before then
    would place nothing of it. Without it every pending arrival wakes the loop as before."""
    for gangs_wait, wakes in ((True, [False, False, True, True]), (False, [True, True, True, True])):
        woken = threading.Event()
        cache = Cache(on_work=woken.set)
        cache.gangs_wait = gangs_wait
        cache.add_podgroup(podgroup("g", 3))
        woken.clear()
        seen = []
        for i in range(4):
            changes = cache.changes
            cache.add_pod(a_pod(f"g-{i}", group="g"))
            seen.append(woken.is_set())
            woken.clear()
            assert cache.changes > changes  # the periodic cycle still sees it
        assert seen == wakes, gangs_wait
    # A lone pod and a pod whose PodGroup is not known yet wake it as before.
    woken = threading.Event()
    cache = Cache(on_work=woken.set)
    cache.gangs_wait = True
    cache.add_pod(a_pod("lone"))
    assert woken.is_set()
    woken.clear()
    cache.add_pod(a_pod("early", group="later"))
    assert woken.is_set()


def test_the_last_victim_gone_of_a_nominated_gang_wakes_the_loop() -> None:
    """A gang pipelined on room its victims are freeing (nominated on n1 and n2) is bound once
    they are all gone: the deletion of the last of them wakes the loop (`Cache._room_freed`),
    not the first (the gang cannot bind yet), nor a pod gone from a node nobody waits for.
    Before, no deletion woke it: the gang waited for the periodic cycle, up to a period."""
    woken = threading.Event()
    cache = Cache(on_work=woken.set)
    for name in ("n1", "n2", "n3"):
        cache.add_node(node(name))
    victims = {name: a_pod(f"low-{name}", cpu="4", node_name=name, phase="Running") for name in ("n1", "n2", "n3")}
    for obj in victims.values():
        cache.add_pod(obj)
    cache.add_podgroup(podgroup("g", 2))
    for i in range(2):
        cache.add_pod(a_pod(f"g-{i}", cpu="4", group="g"))
    cache.assume_evicted([cache.task(f"uid-low-{name}") for name in ("n1", "n2")])  # type: ignore[misc]
    pipelined = []
    for i, name in enumerate(("n1", "n2")):
        task = cache.task(f"uid-g-{i}")
        assert task is not None
        task = task.clone()
        task.node = name
        pipelined.append(task)
    cache.nominate(pipelined)
    woken.clear()
    seen = []
    for name in ("n3", "n1", "n2"):
        changes = cache.changes
        cache.delete_pod(victims[name])
        seen.append(woken.is_set())
        woken.clear()
        assert cache.changes > changes
    assert seen == [False, False, True]


def test_the_scheduler_tells_the_cache_whether_gangs_wait() -> None:
    """`Session.gangs_wait`: the gang plugin's job_valid is on in the default configuration."""
    cache = Cache()
    cache.add_node(node("n1"))
    assert run_cycle(cache.snapshot(), default_conf()).gangs_wait()


def test_cache_is_safe_across_threads() -> None:
    cache = Cache()
    for i in range(4):
        cache.add_node(node(f"n{i}"))

    def churn(worker: int) -> None:
        for i in range(200):
            obj = bound(a_pod(f"w{worker}-{i}"), f"n{i % 4}")
            cache.add_pod(obj)
            cache.delete_pod(obj)

    threads = [threading.Thread(target=churn, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(50):
        cache.snapshot()
    for thread in threads:
        thread.join()
    snapshot = cache.snapshot()
    assert not np.any(snapshot.nodes.used) and snapshot.jobs == {}


def test_changes_count_what_a_cycle_reads_and_confirmations_apart() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    cache.add_pod(a_pod("p"))
    job = cache.snapshot().jobs["default/p"]
    task = next(iter(job.tasks.values()))
    task.node = "n1"
    before = cache.changes
    cache.assume(BindBatch(job, [task]))
    assert cache.changes == before and not cache.pending_work()  # the session decided it: nothing new
    derived, lone_job = cache.task("uid-p"), cache.job("default/p")
    # The bind lands: the pod comes back with nodeName, still Pending (no kubelet yet).
    landed = {**a_pod("p"), "spec": {**a_pod("p")["spec"], "nodeName": "n1"}, "status": {"phase": "Pending"}}
    cache.update_pod(None, landed)
    assert cache.changes == before and cache.confirmations == 1
    confirmed = cache.task("uid-p")
    assert confirmed.status is TaskStatus.BOUND and confirmed.placement == derived.placement
    assert confirmed.request is derived.request  # derived once, not parsed again
    assert cache.job("default/p") is lone_job  # the gang of one is kept, not made anew
    cache.update_pod(None, {**landed, "metadata": {**landed["metadata"], "resourceVersion": "7"}})
    assert cache.changes == before  # nothing the cache keeps changed
    cache.update_pod(None, bound(a_pod("p"), "n1"))  # the kubelet runs it: PodGroup counts change
    assert cache.changes == before + 1
    cache.update_node(None, node("n1"))  # the same node again
    assert cache.changes == before + 1
    cache.update_node(None, node("n1", labels={"zone": "a"}))
    assert cache.changes == before + 2
    cache.forget("uid-p")  # a failed bind or eviction always counts
    assert cache.changes == before + 3


def test_the_status_writers_own_writes_come_back_without_counting_a_change() -> None:
    cache = Cache()
    cache.add_podgroup(podgroup("g", 1, version="1"))
    cache.add_queue({**queue("q"), "metadata": {"name": "q", "resourceVersion": "1"}})
    before = cache.changes
    group = {**podgroup("g", 1, version="2"), "status": {"phase": "Inqueue"}}
    cache.update_podgroup(None, group, written=True)  # the session that wrote it decided it
    cache.update_podgroup(None, group)  # the informer's echo of the same object
    cache.update_queue(
        None,
        {**queue("q"), "metadata": {"name": "q", "resourceVersion": "2"}, "status": {"allocated": {"cpu": "1"}}},
        written=True,
    )
    assert cache.changes == before
    assert cache.podgroup("default/g").status["phase"] == "Inqueue"
    # A write that comes back with someone else's change in it counts.
    cache.update_queue(
        None,
        {
            **queue("q", weight=3),
            "metadata": {"name": "q", "resourceVersion": "3"},
            "status": {"allocated": {"cpu": "1"}},
        },
        written=True,
    )
    assert cache.changes == before + 1
    cache.update_podgroup(
        None, {**group, "metadata": {**group["metadata"], "resourceVersion": "3"}, "status": {"phase": "Pending"}}
    )  # not ours: counts
    assert cache.changes == before + 2


def test_the_cache_copies_what_a_snapshot_shares_before_changing_it() -> None:
    cache = Cache()
    cache.add_node(node("n1"))
    cache.add_podgroup({**podgroup("g", 1), "status": {"phase": "Running"}})
    cache.add_pod(bound(a_pod("g-0", group="g"), "n1"))
    snapshot = cache.snapshot()
    job, row = snapshot.jobs["default/g"], snapshot.nodes.tasks[0]
    assert job is cache.job("default/g") and list(row) == ["uid-g-0"]
    cache.add_pod(bound(a_pod("g-1", group="g"), "n1"))  # while a session may be reading both
    cache.delete_pod(bound(a_pod("g-0", group="g"), "n1"))
    assert list(job.tasks) == ["uid-g-0"] and list(row) == ["uid-g-0"]  # the snapshot's view holds
    assert list(cache.job("default/g").tasks) == ["uid-g-1"]
    assert list(cache.snapshot().nodes.tasks[0]) == ["uid-g-1"]


def test_a_running_gang_with_per_task_minimums_is_shared_and_a_cycle_leaves_it_as_it_was() -> None:
    """Only jobs a session may change are cloned by the snapshot: a running gang with
    minTaskMember is not (it was cloned, with all its tasks, every cycle)."""
    cache = Cache()
    cache.add_node(node("n1"))
    group = podgroup("g", 2)
    cache.add_podgroup(
        {**group, "spec": {**group["spec"], "minTaskMember": {"worker": 2}}, "status": {"phase": "Running"}}
    )
    for index in range(2):
        running = bound(a_pod(f"g-{index}", group="g"), "n1")
        running["metadata"]["annotations"][TASK_SPEC_ANNOTATION] = "worker"
        cache.add_pod(running)
    cache.add_podgroup({**podgroup("p", 1), "status": {"phase": "Inqueue"}})
    cache.add_pod(a_pod("p-0", group="p"))
    gang = cache.job("default/g")
    assert gang is not None and gang.min_task_member == {"worker": 2}
    snapshot = cache.snapshot()
    assert snapshot.jobs["default/g"] is gang and snapshot.jobs["default/p"] is not cache.job("default/p")
    session = run_cycle(snapshot, default_conf())
    assert [task.name for batch in session.binds for task in batch.tasks] == ["p-0"]
    assert session.job_ready(gang)  # gang's per-task count read the shared job
    assert cache.job("default/g") is gang and gang.unschedulable_message == ""
    assert {task.status for task in gang.tasks.values()} == {TaskStatus.RUNNING}
