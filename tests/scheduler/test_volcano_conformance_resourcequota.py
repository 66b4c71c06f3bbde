"""Volcano's resourcequota plugin tests as conformance cases (issue 17; docs/scheduler-conformance.md
tallies them): `TestResourceQuotaPlugin` (admission against a namespace's quotas) and
`TestJobEnqueuedOnOtherPluginsReject` (a PodGroup another plugin refuses uses no quota), then
Lahar's own checks. Inputs and expectations are Volcano's, carried over as facts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lahar.scheduler.cache import Cache, SchedulerCache
from lahar.scheduler.framework.plugin import PLUGINS
from lahar.scheduler.framework.session import Session
from tests.scheduler.preempt_builders import cluster, conf, opened, run
from tests.scheduler.test_volcano_conformance_more import Rejecter
from tests.scheduler.volcano_cases import Obj, only, quantities, vc_node, vc_pod, vc_podgroup, vc_queue

R = quantities
PLUGIN = "resourcequota"
NORMAL, HUGE = R("2000m", "2G"), R("20000m", "20G")


def vc_quota(name: str, namespace: str, hard: dict[str, str], used: dict[str, str] | None = None) -> Obj:
    """util.BuildResourceQuota: the hard list in spec and status (and what the controller counted)."""
    status: dict[str, Any] = {"hard": dict(hard)}
    if used is not None:
        status["used"] = dict(used)
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": dict(hard)},
        "status": status,
    }


def with_min(podgroup: Obj, resources: dict[str, str] | None) -> Obj:
    podgroup = copy.deepcopy(podgroup)
    if resources is not None:
        podgroup["spec"]["minResources"] = dict(resources)
    return podgroup


def with_quotas(objects: list[Obj], quotas: list[Obj]) -> Cache:
    cache = cluster(*objects)
    for quota in quotas:
        cache.add_resource_quota(quota)
    return cache


def session_of(objects: list[Obj], quotas: list[Obj]) -> Session:
    return opened(with_quotas(objects, quotas), conf("enqueue", [PLUGIN]))


# -- resourcequota_test.go: TestResourceQuotaPlugin -------------------------------------------------------

RQ1 = vc_quota("test", "default", NORMAL)
QUOTA_CASES = [
    ("ResourceQuota capacity can match the needs of this pg", NORMAL, [RQ1], True),
    ("ResourceQuota capacity can't match the needs of this pg", HUGE, [RQ1], False),
    ("No ResourceQuota resource object", HUGE, [], True),
    ("MinResources field of pg is not set", None, [RQ1], True),
]


@pytest.mark.parametrize(("name", "minimum", "quotas", "expected"), QUOTA_CASES, ids=[c[0] for c in QUOTA_CASES])
def test_volcano_resourcequota_case(
    name: str, minimum: dict[str, str] | None, quotas: list[Obj], expected: bool
) -> None:
    group = with_min(vc_podgroup("pg", "default", "c1", 2, None, "Inqueue"), minimum)
    session = session_of([vc_queue("c1"), group], quotas)
    assert session.job_enqueueable(session.jobs["default/pg"]) is expected
    refusals = [e for e in session.events if e.reason == "Unschedulable"]
    assert len(refusals) == (0 if expected else 1)


def test_volcano_resourcequota_refusal_is_worded_as_volcano() -> None:
    group = with_min(vc_podgroup("pg", "default", "c1", 2, None, "Inqueue"), HUGE)
    session = session_of([vc_queue("c1"), group], [RQ1])
    session.job_enqueueable(session.jobs["default/pg"])
    [event] = session.events
    assert (event.kind, event.name, event.type) == ("PodGroup", "pg", "Normal")
    assert event.message == (
        "resource quota test insufficient, requested: cpu=20, memory=20G, used: cpu=0, memory=0, "
        "limited: cpu=2, memory=2G"
    )


# -- resourcequota_test.go: TestJobEnqueuedOnOtherPluginsReject -------------------------------------------


def test_volcano_resourcequota_a_rejected_job_uses_no_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PLUGINS, Rejecter.name, Rejecter)
    objects = [
        vc_node("n1", "4", "4G", 10),
        vc_pod("ns1", "podA", "", "Pending", R("1", "1G"), "pgA"),
        vc_pod("ns1", "podB", "", "Pending", R("1", "1G"), "pgB"),
        with_min(vc_podgroup("pgA", "ns1", "q1", 1, None, "Pending"), R("1", "1G")),
        with_min(vc_podgroup("pgB", "ns1", "q1", 1, None, "Pending"), R("1", "1G")),
        vc_queue("q1"),
    ]
    cache = with_quotas(objects, [vc_quota("rq1", "ns1", R("1", "1G"))])
    tiers = [only(PLUGIN, "job_enqueueable"), only(Rejecter.name, "job_enqueueable")]
    session = run(cache, conf("enqueue", tiers))
    assert session.jobs["ns1/pgB"].phase.value == "Inqueue"
    assert session.jobs["ns1/pgA"].phase.value == "Pending"


# -- Lahar's own checks ------------------------------------------------------------------------------------


def test_admissions_in_one_session_add_up_and_used_counts() -> None:
    # 3 CPUs hard, 1 counted as used by the quota controller: of three 1-CPU PodGroups two are admitted.
    groups = [with_min(vc_podgroup(f"pg{i}", "ns1", "q1", 1, None, "Pending"), R("1", None)) for i in range(3)]
    objects = [vc_node("n1", "8", "8G"), vc_queue("q1"), *groups]
    cache = with_quotas(objects, [vc_quota("rq", "ns1", {"cpu": "3"}, used={"cpu": "1"})])
    done = run(cache, conf("enqueue", [PLUGIN]))
    phases = sorted(job.phase.value for job in done.jobs.values())
    assert phases == ["Inqueue", "Inqueue", "Pending"]


def test_names_are_compared_exactly_and_spec_hard_stands_in_for_status() -> None:
    # requests.cpu is not cpu (Kubernetes' quota helpers mask by name): only memory is limited here.
    quota = vc_quota("rq", "default", {"requests.cpu": "1", "memory": "1G"})
    del quota["status"]  # no quota controller yet: spec.hard is read
    big_cpu = with_min(vc_podgroup("cpu", "default", "c1", 1, None, "Pending"), R("8", "1G"))
    big_memory = with_min(vc_podgroup("mem", "default", "c1", 1, None, "Pending"), R("1", "2G"))
    session = session_of([vc_queue("c1"), big_cpu, big_memory], [quota])
    assert session.job_enqueueable(session.jobs["default/cpu"]) is True
    assert session.job_enqueueable(session.jobs["default/mem"]) is False


def test_an_unreadable_quota_is_reported_and_left_out() -> None:
    group = with_min(vc_podgroup("pg", "default", "c1", 2, None, "Pending"), HUGE)
    session = session_of([vc_queue("c1"), group], [vc_quota("bad", "default", {"cpu": "lots"})])
    assert session.job_enqueueable(session.jobs["default/pg"]) is True
    assert [(e.kind, e.name, e.reason) for e in session.events] == [("ResourceQuota", "bad", "InvalidResourceQuota")]


def test_the_cache_keeps_quotas_for_the_snapshot() -> None:
    cache = Cache()
    quota = vc_quota("rq", "ns1", {"cpu": "1"})
    cache.add_resource_quota(quota)
    assert cache.snapshot().resource_quotas == (quota,)
    cache.delete_resource_quota(quota)
    assert cache.snapshot().resource_quotas == ()


def test_quotas_are_watched_only_while_the_configuration_names_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = SchedulerCache(api=None)
    started: list[str] = []
    for informer in cache.informers:
        monkeypatch.setattr(informer, "start", lambda kind=informer.kind.kind: started.append(kind))
    cache.start_informers(["priority", "gang"])
    assert "Pod" in started and "ResourceQuota" not in started
    started.clear()
    cache.start_informers(["priority", PLUGIN])
    assert "ResourceQuota" in started
