"""Each QoS strategy as a pure function, then through the executor against fake cgroup v1 and v2
trees of both drivers: the values written, nothing written when nothing changed, nothing outside
the pod hierarchy touched, and relax undoing it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from lahar.agent.cgroups.layout import CgroupDriver, CgroupVersion, KubeLayout
from lahar.agent.qos.cpu_manager import CpuManagerState
from lahar.agent.qos.executor import CgroupExecutor
from lahar.agent.qos.knobs import CpuMax, IoLimits, binding
from lahar.agent.qos.model import NodeState, Plan, QosContainer, QosPod, Strategy, be_groups, fair_split
from lahar.agent.qos.strategies import STRATEGIES, cpu_priority, cpu_suppress, io, lc_cores, ls_burst, memory
from lahar.agent.qos.strategies.cpu_suppress import CpuSuppressConfig
from lahar.api.qos import BEST_EFFORT, BURSTABLE, GUARANTEED, QoSClass
from tests.agent.conftest import QosTree

GiB, MiB = 1 << 30, 1 << 20
ALL_KNOBS = frozenset(
    {
        "cpu.idle",
        "cpu.weight",
        "cpu.max",
        "cpu.burst",
        "cpuset.cpus",
        "memory.cap",
        "memory.soft_limit",
        "memory.reclaim",
        "memory.min",
        "memory.low",
        "io.limits",
        "io.weight",
    }
)


def node_state(
    version: CgroupVersion = CgroupVersion.V1,
    driver: CgroupDriver = CgroupDriver.CGROUPFS,
    *,
    cores: int = 4,
    usage: float = 3.5,
    used: int = 14 * GiB,
    total: int = 16 * GiB,
    supported: frozenset[str] = ALL_KNOBS,
    cpu_manager: CpuManagerState | None = None,
) -> NodeState:
    return NodeState(
        version,
        KubeLayout(driver),
        frozenset(range(cores)),
        usage,
        total,
        used,
        supported,
        {"vda": "254:0"},
        cpu_manager,
    )


def container(
    layout: KubeLayout,
    pod_path: str,
    cid: str,
    name: str,
    limit: int | None = None,
    exclusive: frozenset[int] = frozenset(),
) -> QosContainer:
    scope = f"cri-containerd-{cid}.scope" if layout.driver is CgroupDriver.SYSTEMD else cid
    return QosContainer(cid, name, f"{pod_path}/{scope}", limit, exclusive)


def scenario(node: NodeState) -> list[QosPod]:
    """A BestEffort pod, a Burstable pod labelled BE, an LS pod and an LC pod pinned to CPU 3."""
    layout = node.layout
    pods = []
    for uid, qos, kube_qos, usage, ws, extra in (
        ("be-1", QoSClass.BE, BEST_EFFORT, 1.5, 1 * GiB, {}),
        (
            "beb-1",
            QoSClass.BE,
            BURSTABLE,
            0.3,
            512 * MiB,
            {"cpu_request_millicores": 500, "cpu_limit_millicores": 1000, "memory_limit_bytes": 2 * GiB},
        ),
        ("ls-1", QoSClass.LS, BURSTABLE, 1.0, 1 * GiB, {"cpu_limit_millicores": 2000, "memory_request_bytes": 1 * GiB}),
        (
            "lc-1",
            QoSClass.LC,
            GUARANTEED,
            0.5,
            256 * MiB,
            {"cpu_limit_millicores": 1000, "memory_request_bytes": 256 * MiB},
        ),
    ):
        path = layout.pod_dir(uid, kube_qos)
        limit = extra.get("cpu_limit_millicores")
        pinned = frozenset({3}) if qos is QoSClass.LC else frozenset()
        pods.append(
            QosPod(
                uid,
                "default",
                uid,
                qos,
                kube_qos,
                path,
                usage,
                ws,
                **extra,
                containers=(container(layout, path, f"c{uid}", "main", limit, pinned),),
            )
        )
    return pods


def configs(**overrides: Any) -> dict[str, Any]:
    sections = {s.name: s.config_type() for s in STRATEGIES}
    sections[io.NAME] = io.IoConfig(devices=(io.DeviceLimit("vda", write_bps=10 * MiB, read_iops=100),))
    # The idle-policy path and an SRE's ceiling, so that both strategies have something to write.
    sections[cpu_priority.NAME] = cpu_priority.CpuPriorityConfig(mechanism="idle")
    sections[cpu_suppress.NAME] = CpuSuppressConfig(ceiling_ratio=0.65)
    sections.update(overrides)
    return sections


def pod_path(pods: Sequence[QosPod], uid: str) -> str:
    return next(p.cgroup for p in pods if p.uid == uid)


def values(plan: Plan) -> dict[tuple[str, str], Any]:
    return {(d.cgroup, d.knob): d.value for d in plan.desired}


# --- pure decisions -------------------------------------------------------------------------


def test_fair_split_is_max_min_fair_and_adds_up() -> None:
    assert fair_split(1.0, [0.2, 5.0, 5.0]) == pytest.approx([0.2, 0.4, 0.4])
    assert fair_split(1.0, [0.1, 0.2]) == pytest.approx([0.45, 0.55])  # spare spread on top
    assert sum(fair_split(3.0, [4.0, 0.5, 1.0, 9.0])) == pytest.approx(3.0)
    assert fair_split(1.0, []) == []


def test_be_groups_are_the_besteffort_dir_and_be_pods_elsewhere() -> None:
    node = node_state()
    groups = be_groups(node, scenario(node))
    assert [(g.cgroup, g.shared) for g in groups] == [
        ("kubepods/besteffort", True),
        ("kubepods/burstable/podbeb-1", False),
    ]
    assert groups[0].cpu_usage_cores == 1.5 and groups[0].relaxed_cpu_millicores is None
    assert (groups[1].relaxed_cpu_millicores, groups[1].relaxed_memory_bytes, groups[1].relaxed_shares) == (
        1000,
        2 * GiB,
        512,
    )


def test_cpu_priority_gives_be_groups_the_minimal_weight_by_default() -> None:
    node = node_state()  # the kernel has cpu.idle but does not say it preempts at once
    plan = cpu_priority.plan(node, scenario(node), cpu_priority.CpuPriorityConfig(), None)
    # idle off first (the kernel refuses a weight while idle), then the weight; online pods untouched.
    assert [(d.cgroup, d.knob, d.value) for d in plan.desired] == [
        ("kubepods/besteffort", "cpu.idle", 0),
        ("kubepods/besteffort", "cpu.weight", 2),
        ("kubepods/burstable/podbeb-1", "cpu.idle", 0),
        ("kubepods/burstable/podbeb-1", "cpu.weight", 2),  # a BE pod with requests: kubelet gave it 512
    ]
    assert plan.figures["be_cpu_idle"] == 0.0
    without_idle = node_state(supported=ALL_KNOBS - {"cpu.idle"})
    plan = cpu_priority.plan(without_idle, scenario(without_idle), cpu_priority.CpuPriorityConfig(), None)
    assert values(plan) == {("kubepods/besteffort", "cpu.weight"): 2, ("kubepods/burstable/podbeb-1", "cpu.weight"): 2}


@pytest.mark.parametrize(
    ("mechanism", "preempt_mode", "idle"),
    [
        ("auto", "full", True),
        ("auto", "lazy", False),
        ("auto", "none", False),
        ("auto", "", False),
        ("idle", "", True),
        ("weight", "full", False),
    ],
)
def test_cpu_priority_mechanism(mechanism: str, preempt_mode: str, idle: bool) -> None:
    node = replace(node_state(), preempt_mode=preempt_mode)
    plan = cpu_priority.plan(node, scenario(node), cpu_priority.CpuPriorityConfig(mechanism=mechanism), None)
    assert (values(plan).get(("kubepods/besteffort", "cpu.idle")) == 1) is idle
    assert plan.figures["be_cpu_idle"] == float(idle)


def test_cpu_priority_refuses_an_unknown_mechanism() -> None:
    with pytest.raises(ValueError, match="mechanism: must be one of auto, weight, idle, got 'fast'"):
        cpu_priority.CpuPriorityConfig(mechanism="fast")


def test_cpu_priority_relax_leaves_idle_first_then_restores_kubelets_shares() -> None:
    node = node_state()
    pods = scenario(node)
    for config in (cpu_priority.CpuPriorityConfig(mechanism="idle"), cpu_priority.CpuPriorityConfig()):
        planned = cpu_priority.plan(node, pods, config, None)
        relaxed = [(d.cgroup, d.knob, d.value) for d in cpu_priority.relax(node, pods, config, planned)]
        # Leaving idle resets the weight to 1024: kubelet's shares are written after it, always.
        assert relaxed == [
            ("kubepods/besteffort", "cpu.idle", 0),
            ("kubepods/besteffort", "cpu.weight", 2),
            ("kubepods/burstable/podbeb-1", "cpu.idle", 0),
            ("kubepods/burstable/podbeb-1", "cpu.weight", 512),  # kubelet's shares for 500m
        ]


def test_cpu_suppress_without_interference_or_ceiling_leaves_kubelets_quota() -> None:
    node = node_state()
    plan = cpu_suppress.plan(node, scenario(node), CpuSuppressConfig(), None)
    assert values(plan) == {
        ("kubepods/besteffort", "cpu.max"): CpuMax(None),
        ("kubepods/burstable/podbeb-1", "cpu.max"): CpuMax(100000),  # its 1-core limit, as kubelet set it
    }
    assert plan.figures["be_cpu_quota_cores"] == 4.0 and plan.actions == ()


def test_cpu_suppress_ceiling_and_split() -> None:
    node = node_state()  # 4 cores, 3.5 used; pods use 3.3 (online: LS 1.0 + LC 0.5)
    plan = cpu_suppress.plan(node, scenario(node), CpuSuppressConfig(ceiling_ratio=0.65), None)
    # 4 × 0.65 − 1.5 online − 0.2 system = 0.9 cores, split max-min fairly by demand
    # (usage × 1.25 + 0.05): the Burstable BE pod wants 0.425, the BestEffort directory the rest.
    assert plan.figures["be_cpu_quota_cores"] == pytest.approx(0.9)
    assert values(plan) == {
        ("kubepods/besteffort", "cpu.max"): CpuMax(47500),
        ("kubepods/burstable/podbeb-1", "cpu.max"): CpuMax(42500),
    }
    busy = replace(node, cpu_usage_cores=4.0)
    online = [replace(p, cpu_usage_cores=3.0) if p.qos is QoSClass.LS else p for p in scenario(busy)]
    plan = cpu_suppress.plan(busy, online, CpuSuppressConfig(ceiling_ratio=0.65, floor_ratio=0.1), None)
    assert plan.figures["be_cpu_quota_cores"] == pytest.approx(0.4)  # the floor: 10% of 4 cores


def test_cpu_suppress_refuses_bad_settings() -> None:
    for bad, message in (
        ({"wait_threshold": 0}, "wait_threshold: must be in (0, 1]"),
        ({"backoff_ratio": 1.0}, "backoff_ratio: must be < 1"),
        ({"interval_seconds": 5}, "interval_seconds: must be <= 1"),
        ({"window_seconds": 0.01}, "window_seconds: must be >= 0.2"),
        ({"fast_window_seconds": 0.01}, "fast_window_seconds: must be >= 0.05"),
        ({"fast_wait_threshold": 0.2}, "fast_wait_threshold: must be >= wait_threshold (0.5)"),
        ({"ceiling_ratio": 0.03, "floor_ratio": 0.05}, "floor_ratio: must be <= ceiling_ratio"),
        ({"grow_step_ratio": -1}, "grow_step_ratio: must be in (0, 1]"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            CpuSuppressConfig(**bad)


# --- the control law, on recorded traces ------------------------------------------------------------

# Online wait shares as the interference loop read them on this machine (2 cores), beside BE held
# by the minimal weight (1 s windows; median 0.05-0.06, max 0.11) and on a quiet node with a busy
# neighbour's bursts.
TRACE_MINIMAL_WEIGHT = [0.07, 0.05, 0.09, 0.06, 0.08, 0.04, 0.07, 0.05]
TRACE_SOLO_NOISE = [0.03, 0.05, 0.12, 0.04, 0.06, 0.14, 0.02, 0.05]


# The control law's tests pin the limits they were written for (the defaults are tuned to this
# machine's measurements and may move).
LAW = CpuSuppressConfig(wait_threshold=0.3, fast_wait_threshold=0.6)


def run_trace(
    shares: Sequence[float | None],
    be_cores: float,
    state: cpu_suppress.ControlState | None = None,
    config: CpuSuppressConfig | None = None,
    start: float = 0.0,
    step: float = 0.05,
) -> tuple[cpu_suppress.ControlState, list[str]]:
    """Feed a trace, one signal per `step`, the same share over both windows."""
    config = config or LAW
    state = state or cpu_suppress.ControlState()
    actions = []
    for index, share in enumerate(shares):
        signal = cpu_suppress.Signal(start + step * (index + 1), share, be_cores, fast_wait_share=share)
        state, action = cpu_suppress.control(state, signal, config, cores=2)
        actions.append(action)
    return state, actions


def test_no_interference_means_no_cap_and_no_action() -> None:
    for trace in (TRACE_MINIMAL_WEIGHT, TRACE_SOLO_NOISE):
        state, actions = run_trace(trace * 10, be_cores=1.74)
        assert state.cap is None and set(actions) == {""}
    # 200 ms windows beside weights reach 0.38: under the fast limit, and the 1 s window stays low.
    control, signal = cpu_suppress.control, cpu_suppress.Signal
    state, action = control(cpu_suppress.ControlState(), signal(1.0, 0.08, 1.7, fast_wait_share=0.38), LAW, 2)
    assert action == "" and state.cap is None


def test_blatant_interference_is_cut_within_one_short_window() -> None:
    config, control, signal = LAW, cpu_suppress.control, cpu_suppress.Signal
    state, action = control(cpu_suppress.ControlState(), signal(0.05, 0.3, 1.75, fast_wait_share=0.7), config, 2)
    assert action == "cut" and state.cap == pytest.approx(0.875)  # the fast window alone is enough
    state, action = control(state, signal(0.1, 0.5, 1.75, fast_wait_share=0.7), config, 2)
    assert action == ""  # its effect is not in the fast window yet
    state, action = control(state, signal(0.3, 0.55, 0.87, fast_wait_share=0.45), config, 2)
    assert action == "" and state.cut_share is None  # it helped (0.45 < 9/10 of 0.7); no longer blatant
    state, action = control(state, signal(1.1, 0.4, 0.87, fast_wait_share=0.4), config, 2)
    assert action == "cut" and state.cap == pytest.approx(0.87 / 2)  # the 1 s window still says too much


def test_moderate_interference_is_cut_once_a_window_while_cuts_help() -> None:
    trace = [0.5] * 20 + [0.36] * 20 + [0.2] * 20 + [0.1] * 20  # each cut lowers the wait
    state, actions = run_trace(trace, be_cores=1.7)
    assert [i for i, action in enumerate(actions) if action == "cut"] == [0, 21]  # judged a window (+1 sample) later
    assert "revert" not in actions and actions[-1] == "grow"
    assert state.cap == pytest.approx(1.7 * 0.25 + 0.2)  # 1.7 -> 0.85 -> 0.425, then a second of growth


def test_a_cut_that_does_not_lower_the_wait_is_reverted_and_the_wait_becomes_the_baseline() -> None:
    # Other tenants keep online waiting 45%: BE is cut once; a window later the wait is the same,
    # so the wait is not BE's: the cut is undone at once and the limits rise above that wait.
    state, actions = run_trace([0.45] * 60, be_cores=1.7)
    assert actions.count("cut") == 1 and actions[21] == "revert" and actions.count("revert") == 1
    assert state.cap is None and state.demand is None
    assert state.baseline == pytest.approx(0.45, rel=0.02)  # decaying from the moment it was learned
    assert cpu_suppress.limits(LAW, state.baseline)[1] > 0.5


def test_a_wait_that_be_at_its_floor_cannot_explain_becomes_the_baseline() -> None:
    floor = cpu_suppress.ControlState(cap=0.1, updated=0.0)  # held at 5% of 2 cores
    state, actions = run_trace([0.45] * 20, be_cores=0.1, state=floor)
    assert "cut" not in actions and actions[0] == "baseline"
    assert state.baseline > 0.4 and state.cap is not None and state.cap > 0.1  # and the cap grows


def test_the_cap_grows_back_additively_and_is_lifted() -> None:
    capped = cpu_suppress.ControlState(cap=0.5, updated=0.0, demand=1.7)
    state, actions = run_trace([0.02] * 20, be_cores=0.5, state=capped)  # 1 s quiet
    assert set(actions) == {"grow"} and state.cap == pytest.approx(0.5 + 0.1 * 2 * 1.0)
    state, actions = run_trace([0.02] * 200, be_cores=1.0, state=state, start=1.0)
    assert state.cap is None and state.demand is None and actions.count("lift") == 1 and actions[-1] == ""


def test_idle_online_pods_give_no_signal_and_the_cap_grows() -> None:
    state = cpu_suppress.ControlState(cap=0.5, updated=0.0)
    state, action = cpu_suppress.control(state, cpu_suppress.Signal(1.0, None, 1.0), LAW, 2)
    assert action == "grow" and state.cap == pytest.approx(0.7)


def test_be_that_is_not_running_is_never_cut() -> None:
    state, actions = run_trace([0.58, 0.61, 0.55, 0.66, 0.52, 0.63], be_cores=0.01)
    assert state.cap is None and "cut" not in actions
    assert state.baseline > 0.3  # what online waits without BE is its own


def test_the_baseline_decays() -> None:
    assert cpu_suppress.decayed(0.4, 120.0, 120.0) == pytest.approx(0.2)
    assert cpu_suppress.decayed(0.4, 0.0, 120.0) == 0.4


def test_the_deadband_keeps_small_moves_out_of_the_files() -> None:
    config = CpuSuppressConfig()
    assert cpu_suppress.worth_writing(None, 1.0, 2, config) and cpu_suppress.worth_writing(1.0, None, 2, config)
    assert not cpu_suppress.worth_writing(1.0, 1.03, 2, config) and cpu_suppress.worth_writing(1.0, 1.05, 2, config)
    assert not cpu_suppress.worth_writing(None, None, 2, config)


def test_cpu_suppress_relax_returns_kubelets_quota() -> None:
    node = node_state()
    assert {(d.cgroup, d.value) for d in cpu_suppress.relax(node, scenario(node), CpuSuppressConfig(), None)} == {
        ("kubepods/besteffort", CpuMax(None)),
        ("kubepods/burstable/podbeb-1", CpuMax(100_000)),
    }


def test_lc_cores_keeps_be_off_pinned_cores() -> None:
    node = node_state()
    pods = scenario(node)
    plan = lc_cores.plan(node, pods, lc_cores.LcCoresConfig(), None)
    targets = {cgroup for cgroup, _ in values(plan)}
    assert set(values(plan).values()) == {frozenset({0, 1, 2})}
    assert targets == {
        "kubepods/besteffort",
        "kubepods/besteffort/podbe-1",
        "kubepods/besteffort/podbe-1/cbe-1",
        "kubepods/burstable/podbeb-1",
        "kubepods/burstable/podbeb-1/cbeb-1",
    }
    assert plan.figures == {"lc_exclusive_cpus": 1.0, "be_cpuset_cpus": 3.0}


def test_lc_cores_with_a_static_cpu_manager_writes_containers_within_the_shared_pool() -> None:
    node = node_state(cpu_manager=CpuManagerState("static", frozenset({0, 1, 3}), {"lc-1": {"main": frozenset({3})}}))
    plan = lc_cores.plan(node, scenario(node), lc_cores.LcCoresConfig(), None)
    assert values(plan) == {
        ("kubepods/besteffort/podbe-1/cbe-1", "cpuset.cpus"): frozenset({0, 1}),
        ("kubepods/burstable/podbeb-1/cbeb-1", "cpuset.cpus"): frozenset({0, 1}),
    }


def test_lc_cores_without_pinned_cores_writes_once_then_leaves_cpusets_alone() -> None:
    node = node_state()
    pods = [p for p in scenario(node) if p.qos is not QoSClass.LC]
    first = lc_cores.plan(node, pods, lc_cores.LcCoresConfig(), None)
    assert set(values(first).values()) == {frozenset(range(4))}  # undo what an earlier run may have left
    assert lc_cores.plan(node, pods, lc_cores.LcCoresConfig(), first).desired == ()
    assert lc_cores.relax(node, pods, lc_cores.LcCoresConfig(), first) == []
    everyone = scenario(node)
    narrowed = lc_cores.plan(node, everyone, lc_cores.LcCoresConfig(), first)
    assert set(values(lc_cores.plan(node, pods, lc_cores.LcCoresConfig(), narrowed)).values()) == {
        frozenset(range(4))
    }  # the LC pod left: BE gets its core back
    all_pinned = replace(node, cpus=frozenset({3}))
    assert lc_cores.plan(all_pinned, everyone, lc_cores.LcCoresConfig(), None).actions == ("no_cores_left",)


def test_ls_burst_gives_online_pods_with_limits_a_burst() -> None:
    node = node_state()
    plan = ls_burst.plan(node, scenario(node), ls_burst.LsBurstConfig(burst_ratio=0.5), None)
    assert values(plan) == {
        ("kubepods/burstable/podls-1", "cpu.burst"): 100_000,
        ("kubepods/burstable/podls-1/cls-1", "cpu.burst"): 100_000,
        ("kubepods/podlc-1", "cpu.burst"): 50_000,
        ("kubepods/podlc-1/clc-1", "cpu.burst"): 50_000,
    }
    only_ls = ls_burst.plan(node, scenario(node), ls_burst.LsBurstConfig(include_lc=False), None)
    assert {cgroup for cgroup, _ in values(only_ls)} == {
        "kubepods/burstable/podls-1",
        "kubepods/burstable/podls-1/cls-1",
    }
    assert (
        ls_burst.plan(replace(node, supported=frozenset()), scenario(node), ls_burst.LsBurstConfig(), None).desired
        == ()
    )
    with pytest.raises(ValueError, match="burst_ratio"):
        ls_burst.LsBurstConfig(burst_ratio=1.5)  # the kernel refuses a burst above the quota


def test_memory_caps_be_at_its_working_set_past_the_threshold_then_holds_then_releases() -> None:
    config = memory.MemoryConfig()
    node = node_state()  # 14 of 16 GiB used: past 80%
    pods = scenario(node)
    capped = memory.plan(node, pods, config, None)
    caps = {cgroup: value for (cgroup, knob), value in values(capped).items() if knob == "memory.cap"}
    assert caps == {"kubepods/besteffort": 1 * GiB + 32 * MiB, "kubepods/burstable/podbeb-1": 512 * MiB + 32 * MiB}
    assert values(capped)[("kubepods/besteffort", "memory.soft_limit")] == 0
    assert capped.actions == ("cap", "reclaim") and capped.figures["be_memory_capped_groups"] == 2
    # Below the threshold but within the release band (75-80%): the caps hold, even as BE shrinks.
    held = memory.plan(
        replace(node, memory_used_bytes=int(12.5 * GiB)),
        [replace(p, memory_working_set_bytes=1) for p in pods],
        config,
        capped,
    )
    assert values(held)[("kubepods/besteffort", "memory.cap")] == 1 * GiB + 32 * MiB and held.actions == ()
    released = memory.plan(replace(node, memory_used_bytes=10 * GiB), pods, config, held)
    assert values(released)[("kubepods/besteffort", "memory.cap")] is None
    assert values(released)[("kubepods/burstable/podbeb-1", "memory.cap")] == 2 * GiB  # kubelet's limit
    assert released.actions == ("release",)


def test_memory_v2_reclaims_and_protects_online_requests() -> None:
    node = node_state(CgroupVersion.V2, CgroupDriver.SYSTEMD)
    plan = memory.plan(node, scenario(node), memory.MemoryConfig(), None)
    wanted = values(plan)
    top, burstable = "kubepods.slice", "kubepods.slice/kubepods-burstable.slice"
    assert (wanted[(top, "memory.low")], wanted[(burstable, "memory.low")]) == (1 * GiB + 256 * MiB, 1 * GiB)
    assert wanted[(pod_path(scenario(node), "ls-1"), "memory.low")] == 1 * GiB
    reclaims = {cgroup: value for (cgroup, knob), value in wanted.items() if knob == "memory.reclaim"}
    assert sum(reclaims.values()) == pytest.approx(64 * MiB, abs=8192) and len(reclaims) == 2
    assert not any(knob == "memory.soft_limit" for _, knob in wanted)
    hard = values(memory.plan(node, scenario(node), memory.MemoryConfig(protect_with_min=True), None))
    assert hard[(top, "memory.min")] == 1 * GiB + 256 * MiB and (top, "memory.low") not in hard


def test_io_limits_be_pods_per_device() -> None:
    config = configs()[io.NAME]
    v1 = node_state()
    limits = {"254:0": IoLimits(write_bps=10 * MiB, read_iops=100)}
    assert values(io.plan(v1, scenario(v1), config, None)) == {
        (cgroup, "io.limits"): limits
        for cgroup in (
            "kubepods/besteffort/podbe-1",
            "kubepods/besteffort/podbe-1/cbe-1",
            "kubepods/burstable/podbeb-1",
            "kubepods/burstable/podbeb-1/cbeb-1",
        )
    }
    v2 = node_state(CgroupVersion.V2)
    weighted = io.plan(v2, scenario(v2), replace(config, be_weight=10), None)
    assert values(weighted) == {
        ("kubepods/besteffort/podbe-1", "io.limits"): limits,
        ("kubepods/burstable/podbeb-1", "io.limits"): limits,
        ("kubepods/besteffort", "io.weight"): 10,
        ("kubepods/burstable/podbeb-1", "io.weight"): 10,
    }
    # A device dropped from the config has its limits lifted once.
    dropped = io.plan(v2, scenario(v2), io.IoConfig(), weighted)
    assert values(dropped)[("kubepods/besteffort/podbe-1", "io.limits")] == {"254:0": IoLimits()}
    assert io.plan(v2, scenario(v2), io.IoConfig(), dropped).desired == ()


# --- through the executor, on fake trees ----------------------------------------------------


def tree_scenario(tree: QosTree) -> tuple[NodeState, list[QosPod], CgroupExecutor]:
    """The scenario's pods created in the tree, and the node state as the engine would see it."""
    executor = CgroupExecutor(tree.root)
    node = replace(node_state(tree.version, tree.layout.driver), supported=executor.supported(tree.layout.top))
    pods = scenario(node)
    for pod in pods:
        tree.add_pod(pod.uid, pod.kube_qos, containers={c.id: None for c in pod.containers})
    return node, pods, executor


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_strategy_on_a_fake_tree(qos_tree: QosTree, strategy: Strategy) -> None:
    node, pods, executor = tree_scenario(qos_tree)
    config = configs()[strategy.name]
    before = qos_tree.snapshot()
    plan = strategy.plan(node, pods, config, None)
    assert executor.apply(plan.desired) > 0
    changed = {path for path, state in qos_tree.snapshot().items() if before.get(path) != state}
    assert changed, "the strategy wrote nothing"
    top = qos_tree.layout.top
    assert all(f"/{top}/" in f"/{path}" for path in changed), f"outside the pod hierarchy: {changed}"
    # Unchanged inputs, a fresh executor (nothing remembered): every file already holds its value;
    # only write-only actions (v2 memory.reclaim while memory stays past its threshold) go again.
    settled = qos_tree.snapshot()
    again = CgroupExecutor(qos_tree.root)
    second = strategy.plan(node, pods, config, plan).desired
    actions = [d for d in second if binding(d.knob, node.version).action]  # type: ignore[union-attr]
    assert again.apply(second) == len(actions)
    rewritten = {path for path, state in qos_tree.snapshot().items() if settled[path] != state}
    assert rewritten == {f"{d.cgroup}/memory.reclaim" for d in actions}
    relaxed = strategy.relax(node, pods, config, plan)
    executor.apply(relaxed)
    assert again.apply(relaxed) == 0


def test_values_written_on_fake_trees(qos_tree: QosTree) -> None:
    """What each strategy's plan leaves in the kernel's files, per version and driver."""
    node, pods, executor = tree_scenario(qos_tree)
    sections = configs()
    previous: dict[str, Plan] = {}
    for strategy in STRATEGIES:
        previous[strategy.name] = strategy.plan(node, pods, sections[strategy.name], None)
        executor.apply(previous[strategy.name].desired)
    be_dir, be_pod, beb = node.be_dir, pod_path(pods, "be-1"), pod_path(pods, "beb-1")
    ls, be_container = pod_path(pods, "ls-1"), pods[0].containers[0].cgroup
    read = qos_tree.read
    if qos_tree.v2:
        assert (read(be_dir, "cpu.idle"), read(beb, "cpu.idle"), read(ls, "cpu.idle")) == ("1", "1", "0")
        assert (read(be_dir, "cpu.max"), read(beb, "cpu.max")) == ("47500 100000", "42500 100000")
        assert read(be_dir, "cpuset.cpus") == read(be_container, "cpuset.cpus") == "0-2"
        assert read(ls, "cpu.max.burst") == "200000"
        assert read(be_dir, "memory.high") == str(GiB + 32 * MiB)
        assert read(ls, "memory.low") == str(GiB)
        assert read(be_pod, "io.max") == "254:0 rbps=max wbps=10485760 riops=100 wiops=max"
        assert read(be_container, "io.max") == ""  # v2 limits are hierarchical: the pod's covers it
    else:
        assert (read(be_dir, "cpu.idle"), read(beb, "cpu.idle"), read(ls, "cpu.idle")) == ("1", "1", "0")
        assert (read(be_dir, "cpu.cfs_quota_us"), read(beb, "cpu.cfs_quota_us")) == ("47500", "42500")
        assert read(be_dir, "cpuset.cpus") == read(be_container, "cpuset.cpus") == "0-2"
        assert read(ls, "cpu.cfs_burst_us") == "200000"
        assert read(be_dir, "memory.limit_in_bytes") == str(GiB + 32 * MiB)
        assert read(be_dir, "memory.soft_limit_in_bytes") == "0"
        # v1 throttling is not hierarchical: the containers, where the processes are, get it too.
        for cgroup in (be_pod, be_container):
            assert read(cgroup, "blkio.throttle.write_bps_device") == "254:0 10485760"
            assert read(cgroup, "blkio.throttle.read_iops_device") == "254:0 100"
    # Relax: caps lifted, cpusets whole, idle off, IO unlimited.
    for strategy in STRATEGIES:
        executor.apply(strategy.relax(node, pods, sections[strategy.name], previous[strategy.name]))
    quota = "cpu.max" if qos_tree.v2 else "cpu.cfs_quota_us"
    assert read(be_dir, "cpu.idle") == "0"
    assert read(be_dir, quota) == ("max 100000" if qos_tree.v2 else "-1")
    assert read(beb, quota) == ("100000 100000" if qos_tree.v2 else "100000")  # its own limit, from kubelet
    assert read(be_dir, "cpuset.cpus") == "0-3"
    assert read(be_dir, "memory.high" if qos_tree.v2 else "memory.limit_in_bytes") == ("max" if qos_tree.v2 else "-1")
    io_file = "io.max" if qos_tree.v2 else "blkio.throttle.write_bps_device"
    assert read(be_pod, io_file) == ("254:0 rbps=max wbps=max riops=max wiops=max" if qos_tree.v2 else "254:0 0")
