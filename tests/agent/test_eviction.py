"""The eviction manager: victim choice as a pure function of (report, pods, config), the N-sample
and cool-down rules with a recording evictor, and real evictions through the embedded API
server's policy/v1 Eviction API (PDB refusal, UID precondition, Events)."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest

from lahar.agent.qos.eviction import (
    DRY_RUN,
    EVICTED,
    GONE,
    REFUSED,
    UNAVAILABLE,
    CpuStarvation,
    EvictionConfig,
    EvictionManager,
    Evictor,
    Victim,
    choose_victims,
    over_watermark,
    release_targets,
)
from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import AlreadyExists, ApiUnavailable, KubeError, TooManyRequests
from lahar.rpc.report import CpuUsage, MemoryUsage, NodeReport, PodUsage

GiB = 1 << 30


# --- builders -------------------------------------------------------------------------------

# The memory figures below were worked out for a 0.70 memory watermark (the default is 0.85).
WATERMARK = 0.7


def api_pod(
    name: str,
    uid: str,
    qos: str = "BE",
    priority: int = 0,
    namespace: str = "team",
    labels: dict[str, str] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    """A pod dict whose Lahar QoS class is `qos` (through the lahar.dev/qos-class label)."""
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "labels": {"lahar.dev/qos-class": qos, **(labels or {})},
            **metadata,
        },
        "spec": {"priority": priority, "containers": [{"name": "main", "image": "busybox:1"}]},
        "status": {"phase": "Running"},
    }


def usage(uid: str, memory: float = 0.0, cpu: float = 0.0, qos: str = "BE") -> PodUsage:
    return PodUsage("team", uid, uid, qos, "BestEffort", f"kubepods/besteffort/pod{uid}", cpu, int(memory * GiB))


def report(
    memory_used: float = 4.0,
    cpu_used: float = 1.0,
    pods: list[PodUsage] | None = None,
    memory_total: float = 10.0,
    cores: int = 4,
) -> NodeReport:
    used = int(memory_used * GiB)
    return NodeReport(
        node="n1",
        sequence=1,
        timestamp=0.0,
        cpu=CpuUsage(cores, cpu_used, cpu_used / cores),
        memory=MemoryUsage(int(memory_total * GiB), used, int(memory_total * GiB) - used, 0),
        pods=pods or [],
    )


def names(victims: list[Victim]) -> list[str]:
    return [v.name for v in victims]


# --- configuration --------------------------------------------------------------------------


def test_config_defaults_and_mapping() -> None:
    assert EvictionConfig.from_mapping({}) == EvictionConfig()
    config = EvictionConfig.from_mapping(
        {
            "memory_threshold": 0.8,
            "samples": 5,
            "cooldown_seconds": 2,
            "grace_period_seconds": None,
            "cpu_eviction": False,
        }
    )
    assert (config.memory_threshold, config.samples, config.cooldown_seconds, config.cpu_eviction) == (
        0.8,
        5,
        2.0,
        False,
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"memory_treshold": 0.8}, "unknown key(s) memory_treshold"),
        ({"samples": "3"}, "samples: expected int, got str"),
        ({"samples": 0}, "samples: must be >= 1"),
        ({"enabled": "yes"}, "enabled: expected bool"),
        ({"cpu_threshold": 0.9}, "unknown key(s) cpu_threshold"),  # CPU eviction is by need, not use
        ({"cpu_satisfaction_ratio": 1.2}, "cpu_satisfaction_ratio: must be in (0, 1]"),
        ({"cpu_starvation_seconds": -1}, "cpu_starvation_seconds: must be >= 0"),
        ({"memory_threshold": 0.01}, "memory_threshold: must be above release_margin"),
        ({"cooldown_seconds": -1}, "cooldown_seconds: must be >= 0"),
        ({"samples": None}, "samples: a value is required"),
    ],
)
def test_config_refuses_bad_values_naming_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EvictionConfig.from_mapping(data)


# --- pure decisions -------------------------------------------------------------------------


def test_watermarks_and_targets() -> None:
    config = EvictionConfig(memory_threshold=0.7, release_margin=0.02)
    assert over_watermark(report(memory_used=7.0, cpu_used=3.6), config) == set()  # at, not past
    # A node whose CPU is all used is not short of anything: that is harvesting at work.
    assert over_watermark(report(memory_used=7.5, cpu_used=4.0), config) == {"memory"}
    assert over_watermark(report(memory_used=9.0), EvictionConfig(memory_eviction=False)) == set()
    starved = CpuStarvation(cap_cores=0.4, demand_cores=2.0, used_cores=0.4)
    targets = release_targets(report(memory_used=9.0, cpu_used=3.8), config, {"memory", "cpu"}, starved)
    assert targets["memory"] == pytest.approx((9.0 - 6.8) * GiB)
    assert targets["cpu"] == pytest.approx(1.6)  # what BE asks for beyond its cap


def test_cpu_starvation_needs_a_low_satisfaction_and_be_using_its_cap() -> None:
    config = EvictionConfig()
    assert CpuStarvation(0.4, 2.0, 0.39).starved(config)  # 20% of its demand, all of its cap used
    assert not CpuStarvation(0.4, 2.0, 0.1).starved(config)  # capped, but it does not want more
    assert not CpuStarvation(1.2, 2.0, 1.2).starved(config)  # 60%: above the 50% ratio
    assert not CpuStarvation(0.4, 0.0, 0.4).starved(config)  # asks for nothing


def test_lowest_priority_then_largest_usage_until_back_under_the_watermark() -> None:
    pods = [
        api_pod("low-small", "u1", priority=1),
        api_pod("low-big", "u2", priority=1),
        api_pod("high-huge", "u3", priority=100),
        api_pod("low-tiny", "u4", priority=1),
    ]
    usages = [usage("u1", 1.0), usage("u2", 1.5), usage("u3", 6.0), usage("u4", 0.1)]
    # need = 9.0 - 6.8 = 2.2 GiB: low-big (1.5) then low-small (1.0) cover it; high-huge is spared.
    victims = choose_victims(report(9.0, pods=usages), pods, EvictionConfig(memory_threshold=WATERMARK))
    assert names(victims) == ["low-big", "low-small"]
    assert victims[0] == Victim("u2", "team", "low-big", 1, 0.0, int(1.5 * GiB))
    # more to release: past the low-priority pods, on to the higher priority one
    assert names(choose_victims(report(9.9, pods=usages), pods, EvictionConfig(memory_threshold=WATERMARK))) == [
        "low-big",
        "low-small",
        "low-tiny",
        "high-huge",
    ]
    assert choose_victims(report(6.0, pods=usages), pods, EvictionConfig(memory_threshold=WATERMARK)) == []


def test_never_lc_ls_or_system_pods_whatever_they_use() -> None:
    pods = [
        api_pod("lc", "c1", "LC", priority=-5),
        api_pod("ls", "s1", "LS", priority=-5),
        api_pod("system", "y1", "SYSTEM", priority=-5),
        api_pod("batch", "b1", priority=10),
        {
            "metadata": {"name": "burstable", "namespace": "team", "uid": "k1"},  # Kubernetes Burstable: LS
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        },
    ]
    usages = [
        usage("c1", 3.0, 2.0),
        usage("s1", 3.0, 2.0),
        usage("y1", 3.0, 2.0),
        usage("k1", 3.0, 2.0),
        usage("b1", 0.5, 0.5),
    ]
    victims = choose_victims(report(9.9, cpu_used=3.9, pods=usages), pods, EvictionConfig(memory_threshold=WATERMARK))
    assert names(victims) == ["batch"]


def test_only_pods_both_measured_and_known_to_the_api() -> None:
    pods = [api_pod("known", "u1"), api_pod("no-cgroup", "u2")]
    usages = [usage("u1", 1.0), usage("unknown", 5.0, qos="BE")]
    assert names(choose_victims(report(9.0, pods=usages), pods, EvictionConfig(memory_threshold=WATERMARK))) == [
        "known"
    ]


def test_cpu_pressure_ranks_by_cpu_and_skips_pods_that_release_none_of_it() -> None:
    pods = [api_pod("idle-fat", "u1"), api_pod("busy", "u2"), api_pod("busier", "u3")]
    usages = [usage("u1", memory=4.0, cpu=0.0), usage("u2", 0.1, cpu=0.3), usage("u3", 0.1, cpu=0.5)]
    starved = CpuStarvation(cap_cores=0.2, demand_cores=0.88, used_cores=0.2)  # short of 0.68 cores
    chosen = choose_victims(report(4.0, cpu_used=3.8, pods=usages), pods, EvictionConfig(), starvation=starved)
    assert names(chosen) == ["busier", "busy"]


def test_pods_already_leaving_count_as_released() -> None:
    pods = [
        api_pod("leaving", "u1", deletionTimestamp="2025-01-01T00:00:00Z"),
        api_pod("evicted", "u2"),
        api_pod("next", "u3"),
    ]
    usages = [usage("u1", 1.0), usage("u2", 1.0), usage("u3", 2.0)]
    # need 2.2 GiB, 2 GiB already on its way out: one more pod, never the leaving ones
    assert names(
        choose_victims(report(9.0, pods=usages), pods, EvictionConfig(memory_threshold=WATERMARK), pending={"u2"})
    ) == ["next"]
    assert (
        choose_victims(report(8.5, pods=usages), pods, EvictionConfig(memory_threshold=WATERMARK), pending={"u2"}) == []
    )


# --- the manager, with a recording evictor -------------------------------------------------


class RecordingEvictor(Evictor):
    def __init__(self, refuse: dict[str, KubeError] | None = None) -> None:
        super().__init__(api=None, node="n1")  # type: ignore[arg-type]
        self.refuse = refuse or {}
        self.evicted: list[str] = []
        self.events: list[tuple[str, str]] = []

    def evict(self, victim: Victim, grace_period_seconds: int | None = None) -> None:
        if victim.name in self.refuse:
            raise self.refuse[victim.name]
        self.evicted.append(victim.name)

    def record_event(self, victim: Victim, message: str) -> None:
        self.events.append((victim.name, message))


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


PODS = [api_pod("a", "u1", priority=1), api_pod("b", "u2", priority=1), api_pod("c", "u3", priority=2)]
USAGES = [usage("u1", 2.5), usage("u2", 2.0), usage("u3", 1.0)]


def test_acts_only_after_n_consecutive_samples_then_cools_down() -> None:
    evictor, clock = RecordingEvictor(), FakeClock()
    manager = EvictionManager(
        EvictionConfig(memory_threshold=WATERMARK, samples=3, cooldown_seconds=10), evictor, clock
    )
    hot, calm = report(9.0, pods=USAGES), report(5.0, pods=USAGES)
    for now, sample in ((0, hot), (1, hot), (2, calm), (3, hot), (4, hot)):  # the calm sample resets the count
        clock.now = now
        assert manager.step(sample, PODS, now) == []
    clock.now = 5
    records = manager.step(hot, PODS, 5)
    assert [(r.name, r.outcome, r.reason) for r in records] == [("a", EVICTED, "memory_pressure")]
    assert manager.counts == {"memory_pressure": 1}
    assert evictor.events[0][0] == "a" and "memory use 90%" in evictor.events[0][1]
    # cooling down; the evicted pod, still on the node, is not chosen again afterwards
    for now in (6, 10, 14.9):
        clock.now = now
        assert manager.step(hot, PODS, now) == []
    clock.now = 15
    assert [r.name for r in manager.step(hot, PODS, 15)] == []  # a's 2.5 GiB pending covers the 2.2 GiB need
    hotter = report(9.5, pods=USAGES)
    assert [r.name for r in manager.step(hotter, PODS, 16)] == ["b"]
    assert manager.counts == {"memory_pressure": 2}


def test_refusals_move_on_to_the_next_victim_and_an_unreachable_api_ends_the_round() -> None:
    refused = TooManyRequests(
        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget"
    )
    evictor = RecordingEvictor({"a": refused})
    manager = EvictionManager(EvictionConfig(memory_threshold=WATERMARK, samples=1), evictor, FakeClock())
    records = manager.step(report(9.0, pods=USAGES), PODS, 0)
    assert [(r.name, r.outcome) for r in records] == [("a", REFUSED), ("b", EVICTED), ("c", EVICTED)]
    assert "disruption budget" in records[0].message
    assert manager.refusals == {"memory_pressure": 1} and manager.counts == {"memory_pressure": 2}

    down = RecordingEvictor({"a": ApiUnavailable("connection refused")})
    manager = EvictionManager(EvictionConfig(memory_threshold=WATERMARK, samples=1), down, FakeClock())
    assert [(r.name, r.outcome) for r in manager.step(report(9.0, pods=USAGES), PODS, 0)] == [("a", UNAVAILABLE)]
    assert [r.outcome for r in manager.step(report(9.0, pods=USAGES), PODS, 1)] == [UNAVAILABLE]  # no cool-down


def test_cpu_starvation_is_its_own_reason_after_its_period_and_disabled_means_nothing() -> None:
    pods = [api_pod("hog", "u1")]
    hot = report(2.0, cpu_used=3.9, pods=[usage("u1", 0.1, cpu=0.2)])
    starved = CpuStarvation(cap_cores=0.2, demand_cores=1.5, used_cores=0.2)
    evictor = RecordingEvictor()
    config = EvictionConfig(memory_threshold=WATERMARK, samples=1, cpu_starvation_seconds=60)
    manager = EvictionManager(config, evictor, FakeClock())
    assert manager.step(hot, pods, 0) == []  # a busy node alone evicts nobody
    assert manager.step(hot, pods, 10, starved) == []  # starvation starts
    assert manager.step(hot, pods, 40, starved) == []
    assert manager.step(hot, pods, 45) == []  # the cap was lifted: the clock starts over
    assert manager.step(hot, pods, 50, starved) == []
    assert [(r.name, r.reason) for r in manager.step(hot, pods, 110, starved)] == [("hog", "cpu_starvation")]
    off = EvictionManager(
        EvictionConfig(memory_threshold=WATERMARK, samples=1, enabled=False), RecordingEvictor(), FakeClock()
    )
    assert off.step(hot, pods, 0, starved) == [] and off.step(hot, pods, 100, starved) == []
    manager = EvictionManager(
        EvictionConfig(memory_threshold=WATERMARK, samples=1, enabled=False), RecordingEvictor(), FakeClock()
    )
    manager.step(hot, pods, 0, starved)
    manager.reconfigure(EvictionConfig(memory_threshold=WATERMARK, samples=1))  # time starved while disabled counts
    assert [r.name for r in manager.step(hot, pods, 61, starved)] == ["hog"]


def test_without_an_evictor_it_decides_and_logs_only() -> None:
    manager = EvictionManager(
        EvictionConfig(memory_threshold=WATERMARK, samples=1, cooldown_seconds=5), None, FakeClock()
    )
    records = manager.step(report(9.0, pods=USAGES), PODS, 0)
    assert [(r.name, r.outcome) for r in records] == [("a", DRY_RUN)]
    assert manager.counts == {}
    assert manager.step(report(9.0, pods=USAGES), PODS, 1) == []  # the cool-down holds dry runs too


# --- through the embedded API server --------------------------------------------------------

NODE = "node-evict"


@pytest.fixture(scope="module")
def api(module_k8s: Any) -> KubeApi:
    """Lahar's client over the module's embedded API server."""
    return KubeApi(module_k8s, timeout=10)


@pytest.fixture
def namespace(api: KubeApi) -> str:
    name = f"evict-{uuid.uuid4().hex[:8]}"
    api.create(kinds.NAMESPACE, {"metadata": {"name": name}})
    return name


def priority_class(api: KubeApi, value: int) -> str:
    """A PriorityClass of that value (the API computes spec.priority from its name)."""
    name = f"evict-test-{'minus-' if value < 0 else ''}{abs(value)}"
    with contextlib.suppress(AlreadyExists):
        api.create(kinds.PRIORITY_CLASS, {"metadata": {"name": name}, "value": value})
    return name


def running(api: KubeApi, pod: dict[str, Any]) -> dict[str, Any]:
    """Create a pod as the API would have it on this node: bound and Running."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    spec = {k: v for k, v in pod["spec"].items() if k != "priority"}
    spec["priorityClassName"] = priority_class(api, pod["spec"]["priority"])
    api.create(
        kinds.POD, {"metadata": {k: v for k, v in pod["metadata"].items() if k != "uid"}, "spec": spec}, namespace
    )
    api.bind(namespace, name, NODE)
    api.patch(kinds.POD, name, {"status": {"phase": "Running"}}, namespace, subresource="status")
    return api.get(kinds.POD, name, namespace)


def node_pods(api: KubeApi, namespace: str) -> list[dict[str, Any]]:
    return list(api.list(kinds.POD, namespace)["items"])


def evicted(api: KubeApi, namespace: str, name: str) -> bool:
    pods = {p["metadata"]["name"]: p for p in node_pods(api, namespace)}
    return name not in pods or bool(pods[name]["metadata"].get("deletionTimestamp"))


def test_real_evictions_honour_the_budget_and_record_events(api: KubeApi, namespace: str) -> None:
    guarded = running(api, api_pod("guarded", "", priority=1, namespace=namespace, labels={"app": "guarded"}))
    spare = running(api, api_pod("spare", "", priority=1, namespace=namespace))
    later = running(api, api_pod("later", "", priority=5, namespace=namespace))
    online = running(api, api_pod("online", "", "LS", priority=-1, namespace=namespace))
    api.create(
        kinds.PDB,
        {
            "metadata": {"name": "keep-guarded"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
        namespace,
    )
    uid = {p["metadata"]["name"]: p["metadata"]["uid"] for p in (guarded, spare, later, online)}
    usages = [
        usage(uid["guarded"], 3.0),
        usage(uid["spare"], 2.5),
        usage(uid["later"], 2.0),
        usage(uid["online"], 5.0, qos="LS"),
    ]
    manager = EvictionManager(
        EvictionConfig(memory_threshold=WATERMARK, samples=2, cooldown_seconds=30), Evictor(api, NODE)
    )
    pods = node_pods(api, namespace)

    assert manager.step(report(9.0, pods=usages), pods, 0) == []  # one sample is not pressure
    records = manager.step(report(9.0, pods=usages), pods, 1)
    assert [(r.name, r.outcome) for r in records] == [("guarded", REFUSED), ("spare", EVICTED)]
    assert "disruption budget" in records[0].message
    assert evicted(api, namespace, "spare")
    assert not evicted(api, namespace, "guarded") and not evicted(api, namespace, "later")
    assert not evicted(api, namespace, "online")
    assert manager.counts == {"memory_pressure": 1}

    events = api.list(kinds.EVENT, namespace, field_selector="involvedObject.name=spare")["items"]
    assert len(events) == 1
    event = events[0]
    assert (event["reason"], event["type"], event["source"]["component"]) == ("Evicted", "Warning", "lahar-agent")
    assert event["involvedObject"]["uid"] == uid["spare"] and event["involvedObject"]["kind"] == "Pod"
    assert "memory use 90%" in event["message"]

    # still pressured, but cooling down: nothing more, even with fresh pods from the API
    assert manager.step(report(9.5, pods=usages), node_pods(api, namespace), 2) == []


def test_real_eviction_uid_precondition_spares_a_recreated_pod(api: KubeApi, namespace: str) -> None:
    old = running(api, api_pod("reborn", "", namespace=namespace))
    stale_pods = node_pods(api, namespace)  # the agent's cache, before the pod was replaced
    api.delete(kinds.POD, "reborn", namespace, grace_period_seconds=0)
    new = running(api, api_pod("reborn", "", namespace=namespace))
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    manager = EvictionManager(EvictionConfig(memory_threshold=WATERMARK, samples=1), Evictor(api, NODE))
    records = manager.step(report(9.0, pods=[usage(old["metadata"]["uid"], 3.0)]), stale_pods, 0)
    assert [(r.name, r.outcome) for r in records] == [("reborn", GONE)]
    assert not evicted(api, namespace, "reborn")  # the new pod of that name is untouched
    assert manager.counts == {}
    assert api.list(kinds.EVENT, namespace, field_selector="involvedObject.name=reborn")["items"] == []


def test_real_eviction_never_touches_online_pods(api: KubeApi, namespace: str) -> None:
    pods = [
        running(api, api_pod(name, "", qos, priority=-10, namespace=namespace))
        for name, qos in (("lc", "LC"), ("ls", "LS"), ("sys", "SYSTEM"))
    ]
    usages = [usage(p["metadata"]["uid"], 3.0, cpu=1.3, qos="LS") for p in pods]
    manager = EvictionManager(EvictionConfig(memory_threshold=WATERMARK, samples=1), Evictor(api, NODE))
    for now in range(3):
        assert manager.step(report(9.9, cpu_used=3.99, pods=usages), node_pods(api, namespace), now) == []
    assert not any(evicted(api, namespace, name) for name in ("lc", "ls", "sys"))


def test_evictor_event_failure_is_not_raised() -> None:
    class Refusing:
        def create(self, *args: Any, **kwargs: Any) -> None:
            raise KubeError(403, "Forbidden", "events are forbidden")

    Evictor(Refusing(), NODE).record_event(Victim("u", "ns", "p", 0, 0.0, 0), "why")  # type: ignore[arg-type]
