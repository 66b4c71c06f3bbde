"""The scheduler end to end, with the default configuration, on both backends (the embedded API
server and the real control plane, where the scheduler runs with its own ServiceAccount's token):
a gang that fits is bound whole and its PodGroup runs; one that does not fit binds nothing and
says why; a bad configuration file keeps the last good one; a restarted scheduler binds nothing
twice. An API outage is ridden out (the embedded server, which the test stops and starts).

Each test keeps to its own nodes (a `pool` label its pods select) so the tests of the module can
share one server; the setup (nodes, pods, PodGroups) is the admin's, as users and nodes make them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.node.node_object import lift_not_ready_taint
from lahar.scheduler.conf import DEFAULT_CONF
from lahar.scheduler.scheduler import Scheduler
from lahar.scheduler.shards import HARD, NOT_SHARDED, Sharding
from tests.real_backend import ApiBackend
from tests.scheduler.test_cache import node, pod, podgroup
from tests.support import wait_for

Obj = dict[str, Any]
PERIOD = 0.2


@pytest.fixture(scope="module")
def api(api_backend: ApiBackend) -> KubeApi:
    """The admin's API: what the tests set up and look at."""
    return api_backend.admin


@pytest.fixture(scope="module")
def scheduler_api(api_backend: ApiBackend) -> KubeApi:
    """The scheduler's own API (on the real control plane, its ServiceAccount's rights only)."""
    return api_backend.api_for("scheduler")


@contextmanager
def running(api: KubeApi, conf: Path | None = None, sharding: Sharding = NOT_SHARDED) -> Iterator[Scheduler]:
    scheduler = Scheduler(api, conf, period=PERIOD, bind_workers=4, sharding=sharding)
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.stop()
    assert not scheduler.running


def pool(api: KubeApi, name: str, count: int, cpu: str) -> dict[str, str]:
    """`count` nodes labelled pool=<name>; the selector for pods meant to land there."""
    selector = {"pool": name}
    for i in range(count):
        lift_not_ready_taint(api, api.create(kinds.NODE, node(f"{name}-{i}", cpu=cpu, labels=selector)))
    return selector


def nodes_of(api: KubeApi, names: list[str]) -> dict[str, str]:
    return {name: api.get(kinds.POD, name, "default")["spec"].get("nodeName", "") for name in names}


def podgroup_status(api: KubeApi, name: str) -> Obj:
    return api.get(kinds.PODGROUP, name, "default").get("status") or {}


def test_a_gang_that_fits_is_bound_whole_and_runs(api: KubeApi, scheduler_api: KubeApi) -> None:
    selector = pool(api, "fits", 2, "4")
    api.create(kinds.PODGROUP, podgroup("trio", 3), "default")
    names = [f"trio-{i}" for i in range(3)]
    with running(scheduler_api) as scheduler:
        for name in names:
            api.create(kinds.POD, pod(name, "1", "1Gi", group="trio", selector=selector), "default")
        wait_for(lambda: all(nodes_of(api, names).values()), 10, "the gang to be bound")
        wait_for(lambda: podgroup_status(api, "trio").get("phase") == "Running", 10, "the PodGroup to run")
    assert set(nodes_of(api, names).values()) <= {"fits-0", "fits-1"}
    conditions = {c["type"]: c for c in podgroup_status(api, "trio")["conditions"]}
    assert conditions["Scheduled"]["status"] == "True"
    # A cycle may have seen only some of the pods (a gang not yet whole): then it was Unschedulable.
    assert conditions.get("Unschedulable", {"status": "False"})["status"] == "False"
    assert scheduler.metrics.pods_scheduled._value.get() == 3 and scheduler.metrics.bind_errors._value.get() == 0


def test_a_hard_sharded_scheduler_binds_in_its_shard_and_writes_the_shards_status(
    api: KubeApi, scheduler_api: KubeApi
) -> None:
    selector = pool(api, "sharded", 3, "4")
    shard = {"apiVersion": "shard.volcano.sh/v1alpha1", "kind": "NodeShard", "metadata": {"name": "batch-a"}}
    api.create(kinds.NODESHARD, {**shard, "spec": {"nodesDesired": ["sharded-1", "sharded-2"]}})
    # Another shard still uses sharded-2: batch-a may not take it yet.
    api.create(kinds.NODESHARD, {**shard, "metadata": {"name": "batch-b"}, "spec": {"nodesDesired": []}})
    api.patch(kinds.NODESHARD, "batch-b", {"status": {"nodesInUse": ["sharded-2"]}}, subresource="status")
    names = [f"sharded-pod-{i}" for i in range(3)]
    with running(scheduler_api, sharding=Sharding(HARD, "batch-a")):
        for name in names:
            api.create(kinds.POD, pod(name, "1", "1Gi", selector=selector), "default")
        wait_for(lambda: all(nodes_of(api, names).values()), 10, "the pods to be bound")
        assert set(nodes_of(api, names).values()) == {"sharded-1"}
        wait_for(
            lambda: (api.get(kinds.NODESHARD, "batch-a").get("status") or {}).get("nodesInUse") == ["sharded-1"],
            10,
            "the shard's status",
        )
        assert api.get(kinds.NODESHARD, "batch-a")["status"]["nodesToAdd"] == ["sharded-2"]


def test_a_gang_that_does_not_fit_binds_nothing_and_says_why(api: KubeApi, scheduler_api: KubeApi) -> None:
    selector = pool(api, "tight", 2, "2")  # room for two of the three 2-CPU pods
    api.create(kinds.PODGROUP, podgroup("toobig", 3), "default")
    names = [f"toobig-{i}" for i in range(3)]
    for name in names:
        api.create(kinds.POD, pod(name, "2", "1Gi", group="toobig", selector=selector), "default")
    with running(scheduler_api) as scheduler:
        condition = wait_for(
            lambda: next(
                (c for c in podgroup_status(api, "toobig").get("conditions") or () if c["type"] == "Unschedulable"),
                None,
            ),
            10,
            "the Unschedulable condition",
        )
        wait_for(lambda: scheduler.cycles >= 3, 10, "a few more cycles")
    assert condition["status"] == "True" and condition["reason"] == "NotEnoughResources"
    assert "tasks in gang unschedulable" in condition["message"]
    assert nodes_of(api, names) == dict.fromkeys(names, "")
    events = api.list(kinds.EVENT, "default", field_selector="involvedObject.name=toobig")["items"]
    assert [e["reason"] for e in events] == ["Unschedulable"]  # said once, however many cycles ran
    assert scheduler.metrics.pods_scheduled._value.get() == 0


def test_a_bad_configuration_file_keeps_the_last_good_one(api: KubeApi, scheduler_api: KubeApi, tmp_path: Path) -> None:
    selector = pool(api, "reload", 1, "4")
    conf = tmp_path / "scheduler.conf"
    conf.write_text(DEFAULT_CONF)
    with running(scheduler_api, conf) as scheduler:
        wait_for(lambda: scheduler.cycles >= 1, 10, "a first cycle")
        conf.write_text(DEFAULT_CONF.replace('actions: "', 'actions: "no-such-action, '))
        wait_for(lambda: scheduler.conf.failures == 1, 10, "the refused reload")
        assert "no-such-action" in (scheduler.conf.error or "")
        api.create(kinds.POD, pod("after-reload", "1", "1Gi", selector=selector), "default")
        wait_for(lambda: nodes_of(api, ["after-reload"])["after-reload"], 10, "the pod to be bound anyway")
    assert scheduler.conf.conf.plugin_names.count("binpack") == 1
    assert scheduler.metrics.conf_reload_failures._value.get() == 1


def test_a_restarted_scheduler_binds_nothing_twice(api: KubeApi, scheduler_api: KubeApi) -> None:
    selector = pool(api, "restart", 2, "8")
    api.create(kinds.PODGROUP, podgroup("pair", 2), "default")
    first_names = ["pair-0", "pair-1"]
    with running(scheduler_api):
        for name in first_names:
            api.create(kinds.POD, pod(name, "500m", "256Mi", group="pair", selector=selector), "default")
        wait_for(lambda: all(nodes_of(api, first_names).values()), 10, "the first gang to be bound")
    first = nodes_of(api, first_names)
    later_names = [f"later-{i}" for i in range(4)]
    for name in later_names:  # arriving while no scheduler runs
        api.create(kinds.POD, pod(name, "500m", "256Mi", selector=selector), "default")
    with running(scheduler_api) as again:
        wait_for(lambda: all(nodes_of(api, later_names).values()), 10, "the later pods to be bound")
        wait_for(lambda: again.binder.busy() == 0, 5, "the binder to be idle")
    assert nodes_of(api, first_names) == first
    assert again.metrics.pods_scheduled._value.get() == len(later_names)  # not one bind of the first gang again
    assert again.metrics.bind_errors._value.get() == 0
    assert podgroup_status(api, "pair")["phase"] == "Running"


def test_an_api_outage_is_ridden_out(module_k8s: Any, module_apiserver: Any) -> None:
    api = KubeApi(module_k8s, timeout=10)
    selector = pool(api, "outage", 1, "4")
    with running(api) as scheduler:
        wait_for(lambda: scheduler.cycles >= 1, 10, "a first cycle")
        module_apiserver.stop()
        # A quiet cluster's turns are skipped (nothing changed), so count the loop's turns.
        during = scheduler.cycles + scheduler.skipped
        wait_for(
            lambda: scheduler.cycles + scheduler.skipped >= during + 3,
            10,
            "the loop turning on the cached state while the API is away",
        )
        assert scheduler.healthy()[0]
        module_apiserver.start()  # the same data: informers re-list and carry on
        api.create(kinds.POD, pod("after-outage", "1", "1Gi", selector=selector), "default")
        wait_for(lambda: nodes_of(api, ["after-outage"])["after-outage"], 20, "a pod bound after the outage")
    assert scheduler.metrics.cycle_failures._value.get() == 0
