"""Volcano's cdp plugin tests as conformance cases (issue 17; docs/scheduler-conformance.md tallies
them): `Test_CooldownTimePlugin_podPreemptStableTime` (reading a pod's cooldown) and
`TestPreemptableFn` (which candidates the filter keeps), then Lahar's own checks of the same
plugin through a whole preempt and reclaim cycle. Inputs and expectations are Volcano's, carried
over as facts; the Go tests place pods relative to time.Now(), here relative to a fixed clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from lahar.scheduler.framework.plugin import ConfError
from lahar.scheduler.framework.session import Session, open_session, run_cycle
from lahar.scheduler.plugins.cdp import COOLDOWN_TIME, CooldownProtectionPlugin
from tests.scheduler.preempt_builders import cluster, conf
from tests.scheduler.volcano_cases import (
    PREEMPTABLE,
    Obj,
    quantities,
    vc_node,
    vc_pod,
    vc_podgroup,
    vc_priority_class,
    vc_queue,
)

NOW = datetime(2024, 1, 1, 12, 0, tzinfo=UTC).timestamp()
RUNNING = "Running"


def cdp_pod(
    name: str, *, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None, ago: float | None
) -> Obj:
    """makePod: Running with PodScheduled True since `ago` seconds before NOW, else Pending."""
    pod = vc_pod("default", name, "n1", RUNNING if ago is not None else "Pending", quantities("1", "1G"), "pg", labels)
    pod["metadata"]["annotations"].update(annotations or {})
    if ago is not None:
        since = datetime.fromtimestamp(NOW - ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": since}]
    return pod


def session_of(*objects: Obj, arguments: dict[str, Any] | None = None, actions: str = "preempt") -> Session:
    tier = [{"name": "cdp", "arguments": arguments or {}}]
    group = vc_podgroup("pg", "default", "default", 1, None, "Running")
    return open_session(cluster(vc_node("n1", "4", "4G"), group, *objects).snapshot(), conf(actions, tier), None, NOW)


def plugin_of(session: Session) -> CooldownProtectionPlugin:
    plugin = session.plugins["cdp"]
    assert isinstance(plugin, CooldownProtectionPlugin)
    return plugin


# -- cdp_test.go: Test_CooldownTimePlugin_podPreemptStableTime --------------------------------------------

STABLE_TIME = [
    # (name, annotation value, Volcano's cooldown in seconds or None where it is not enabled)
    ("normal", "600s", 600.0),
    ("not-enabled", "600abcde", None),
]


@pytest.mark.parametrize(("name", "value", "expected"), STABLE_TIME, ids=[c[0] for c in STABLE_TIME])
def test_volcano_cdp_pod_cooldown_time(name: str, value: str, expected: float | None) -> None:
    session = session_of(cdp_pod("test-pod", annotations={COOLDOWN_TIME: value}, ago=100))
    task = next(iter(session.jobs["default/pg"].tasks.values()))
    assert plugin_of(session).cooldown(task) == expected
    warnings = [e for e in session.events if e.reason == "InvalidCooldownTime"]
    assert [(e.kind, e.name) for e in warnings] == ([] if expected is not None else [("Pod", "test-pod")])


# -- cdp_test.go: TestPreemptableFn ----------------------------------------------------------------------


def test_volcano_cdp_preemptable_fn() -> None:
    preemptable = {PREEMPTABLE: "true"}
    session = session_of(
        cdp_pod("task1", labels=preemptable, annotations={COOLDOWN_TIME: "600s"}, ago=100),  # still cooling down
        cdp_pod("task2", labels=preemptable, annotations={COOLDOWN_TIME: "600abcde"}, ago=100),  # unreadable: none
        cdp_pod("task3", labels=preemptable, annotations={COOLDOWN_TIME: "600s"}, ago=800),  # cooled down
    )
    candidates = sorted(session.jobs["default/pg"].tasks.values(), key=lambda task: task.name)
    preemptor = candidates[0]
    assert [task.name for task in session.preemptable(preemptor, candidates)] == ["task2", "task3"]
    assert [task.name for task in session.reclaimable(preemptor, candidates)] == ["task2", "task3"]


# -- Lahar's own checks ----------------------------------------------------------------------------------


def test_the_label_is_read_before_the_annotation_and_the_argument_covers_the_rest() -> None:
    session = session_of(
        cdp_pod("labelled", labels={COOLDOWN_TIME: "1h"}, annotations={COOLDOWN_TIME: "1s"}, ago=100),
        cdp_pod("bare", ago=100),
        cdp_pod("pending", annotations={COOLDOWN_TIME: "1h"}, ago=None),
        cdp_pod("negative", annotations={COOLDOWN_TIME: "-1h"}, ago=100),
        arguments={"cooldown-time": "2m"},
    )
    cdp = plugin_of(session)
    tasks = {task.name: task for task in session.jobs["default/pg"].tasks.values()}
    assert cdp.cooldown(tasks["labelled"]) == 3600 and cdp.cooldown(tasks["bare"]) == 120
    # The pending pod is never protected (only running pods cool down), nor one whose cooldown is negative.
    assert {name: cdp.protected(task) for name, task in tasks.items()} == {
        "labelled": True,
        "bare": True,
        "pending": False,
        "negative": False,
    }


@pytest.mark.parametrize("value", ["-5m", "ten minutes", 600])
def test_a_bad_argument_refuses_the_configuration(value: Any) -> None:
    with pytest.raises(ConfError, match="cooldown-time"):
        conf("preempt", [{"name": "cdp", "arguments": {"cooldown-time": value}}])


def cycle_with(tiers: list[list[Any]], actions: str, *objects: Obj) -> Session:
    return run_cycle(cluster(*objects).snapshot(), conf(actions, *tiers), None, NOW)


@pytest.mark.parametrize("ago", [100, 800])
def test_preempt_skips_a_pod_still_cooling_down(ago: float) -> None:
    low = cdp_pod("low", annotations={COOLDOWN_TIME: "600s"}, ago=ago)
    low["spec"]["priority"] = 1
    high = vc_pod("default", "high", "", "Pending", quantities("4", "1G"), "pg-high", priority=100)
    objects = [
        vc_node("n1", "4", "4G"),
        vc_queue("default"),
        vc_priority_class("low", 1),
        vc_priority_class("high", 100),
        vc_podgroup("pg", "default", "default", 1, None, "Running", priority_class="low"),
        vc_podgroup("pg-high", "default", "default", 1, None, "Inqueue", priority_class="high"),
        low,
        high,
    ]
    session = cycle_with([["priority", "cdp"], ["predicates"]], "preempt", *objects)
    assert [e.task.name for e in session.evictions] == ([] if ago < 600 else ["low"])


@pytest.mark.parametrize("ago", [100, 800])
def test_reclaim_skips_a_pod_still_cooling_down(ago: float) -> None:
    # q1 runs a pod holding the whole node beyond its deserved half; q2's pod reclaims it.
    hog = cdp_pod("hog", annotations={COOLDOWN_TIME: "600s"}, ago=ago)
    hog["spec"]["containers"][0]["resources"]["requests"] = quantities("4", "1G")
    hog["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "pg1"
    hog["metadata"]["namespace"] = "ns1"
    reclaimer = vc_pod("ns2", "reclaimer", "", "Pending", quantities("2", "1G"), "pg2")
    objects = [
        vc_node("n1", "4", "4G"),
        vc_queue("q1"),
        vc_queue("q2"),
        vc_podgroup("pg1", "ns1", "q1", 1, None, "Running"),
        vc_podgroup("pg2", "ns2", "q2", 1, None, "Inqueue"),
        hog,
        reclaimer,
    ]
    # cdp votes in the tier that chooses the victims: an empty answer hands the choice to the next
    # tier (Volcano's rule for every victim filter), where proportion alone would take the pod.
    session = cycle_with([["priority"], ["predicates", "proportion", "cdp"]], "reclaim", *objects)
    assert [e.task.name for e in session.evictions] == ([] if ago < 600 else ["hog"])
