"""The enqueue action with the overcommit plugin: admission against the overcommitted cluster,
inqueue accounting, PodGroups without minResources, and queues that are not Open."""

from __future__ import annotations

import pytest

from tests.scheduler.cluster_fixtures import Obj, cycle, node, pod, podgroup, queue

OVERCOMMIT = (["priority", "gang", "overcommit"],)


def _pending(name: str, cpu: str, second: int, queue_name: str = "default") -> Obj:
    return podgroup(
        name,
        1,
        queue=queue_name,
        phase="Pending",
        min_resources={"cpu": cpu},
        created=f"2024-01-01T00:00:{second:02d}Z",
    )


def _phases(objects: list[Obj], tiers: tuple = OVERCOMMIT) -> dict[str, str]:
    session = cycle(objects, "enqueue", tiers)
    return {job.name: str(job.phase) for job in session.jobs.values() if job.podgroup is not None}


def test_admission_stops_at_the_overcommitted_capacity() -> None:
    # 10 cpu x 1.2 = 12: two PodGroups of 5 fit, the third would make 15.
    objects = [node("n1", cpu="10")] + [_pending(f"g{i}", "5", i) for i in range(3)]
    assert _phases(objects) == {"g0": "Inqueue", "g1": "Inqueue", "g2": "Pending"}
    session = cycle(objects, "enqueue", OVERCOMMIT)
    assert [(e.name, e.reason, e.message) for e in session.events if e.message.startswith("resource")] == [
        ("g2", "Unschedulable", "resource in cluster is overused")
    ]


def test_the_factor_is_an_argument() -> None:
    objects = [node("n1", cpu="10")] + [_pending(f"g{i}", "5", i) for i in range(5)]
    tiers = (["gang", {"name": "overcommit", "arguments": {"overcommit-factor": 2.0}}],)
    assert list(_phases(objects, tiers).values()) == ["Inqueue"] * 4 + ["Pending"]


def test_requested_resources_and_admitted_podgroups_count_against_it() -> None:
    # 12 cpu overcommitted, 4 requested by a running pod, 5 held by an Inqueue PodGroup: 3 left.
    objects = [
        node("n1", cpu="10"),
        pod("busy", cpu="4", node_name="n1", phase="Running"),
        podgroup("held", 1, phase="Inqueue", min_resources={"cpu": "5"}),
        _pending("fits", "3", 1),
        _pending("late", "1", 2),
    ]
    assert _phases(objects) == {"held": "Inqueue", "fits": "Inqueue", "late": "Pending"}


def test_a_running_podgroup_holds_back_the_part_of_its_minimum_not_yet_allocated() -> None:
    objects = [
        node("n1", cpu="10"),
        podgroup("run", 1, phase="Running", min_resources={"cpu": "6"}),
        pod("run-0", cpu="2", group="run", node_name="n1", phase="Running"),
        _pending("next", "5", 1),
    ]
    # 12 - 2 requested - (6 - 2) held = 6: room for 5.
    assert _phases(objects)["next"] == "Inqueue"
    objects[-1] = _pending("next", "7", 1)
    assert _phases(objects)["next"] == "Pending"


def test_a_podgroup_without_min_resources_is_admitted_whatever_is_left() -> None:
    objects = [node("n1", cpu="1"), _pending("big", "100", 1), podgroup("plain", 5, phase="Pending")]
    assert _phases(objects) == {"big": "Pending", "plain": "Inqueue"}


@pytest.mark.parametrize("state", ["Closed", "Closing"])
def test_a_queue_that_is_not_open_admits_nothing(state: str) -> None:
    objects = [
        node("n1"),
        queue("q", state=state),
        _pending("g", "1", 1, "q"),
        podgroup("plain", 1, queue="q", phase="Pending"),
    ]
    assert _phases(objects) == {"g": "Pending", "plain": "Pending"}


def test_proportion_holds_each_queue_to_its_real_capability_while_overcommit_bounds_the_cluster() -> None:
    # 10 cpu, 12 overcommitted; PodGroups of 4. The queues take turns (x first by name at equal
    # shares): x0, y0, then x1 fills the 12 overcommit allows; y1 and x2 do not fit. Proportion
    # holds each queue to its real capability (10): x2 would make 12 even alone.
    objects = [node("n1", cpu="10"), queue("x"), queue("y")]
    objects += [_pending(f"x{i}", "4", i, "x") for i in range(3)]
    objects += [_pending(f"y{i}", "4", 10 + i, "y") for i in range(3)]
    phases = _phases(objects, (["priority", "gang"], ["proportion", "overcommit"]))
    assert sorted(name for name, phase in phases.items() if phase == "Inqueue") == ["x0", "x1", "y0"]
