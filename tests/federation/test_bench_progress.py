"""The live federation bench's progress marks: what compares two placements when one of them does
not finish within a benchmark's hold."""

from __future__ import annotations

from typing import Any

from lahar.bench._federation_live import CHECKPOINT_SECONDS, STALL_SECONDS, Watch, member_stall, progress


def test_progress_counts_jobs_running_and_done_at_each_mark_and_at_the_end() -> None:
    running = [5.0, 59.9, 60.0, 61.0, 130.0]
    done = [30.0, 125.0]
    marks = progress(running, done, 150.0)
    assert CHECKPOINT_SECONDS == 60.0
    assert marks == [(60.0, 3, 1), (120.0, 4, 1), (150.0, 5, 2)]


def test_a_run_ending_on_a_mark_is_not_counted_twice_and_a_short_one_has_its_end() -> None:
    assert progress([1.0], [2.0], 120.0) == [(60.0, 1, 1), (120.0, 1, 1)]
    assert progress([], [], 12.34) == [(12.3, 0, 0)]


def test_a_job_created_in_a_member_and_gone_from_its_list_ran_and_finished() -> None:
    """Round-robin's Jobs are created in the members, which delete them ttlSecondsAfterFinished
    after they finished: one that ran and was deleted between two samples still counts."""
    watch = Watch({}, "bench", 1000)
    a = {"metadata": {"name": "a"}, "status": {"state": {"phase": "Running"}}}
    b = {"metadata": {"name": "b"}, "status": {"state": {"phase": "Pending"}}}
    # c was created before this listing began and is not in it; d only after it began.
    watch.note_jobs([a, b], 5.0, lambda job: True, created_before={"a", "b", "c"})
    assert watch.running == {"a": 5.0, "c": 5.0} and watch.done == {"c": 5.0}
    watch.note_jobs([b], 9.0, lambda job: True, created_before={"a", "b", "c"})
    assert watch.done == {"c": 5.0, "a": 9.0} and "b" not in watch.running and "d" not in watch.done


def _node(name: str, cpu: int) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": str(cpu), "memory": f"{cpu * 4}Gi"}}}


def _job(name: str, phase: str, replicas: int = 1, cpu: int = 1) -> dict[str, Any]:
    requests = {"cpu": str(cpu), "memory": f"{cpu * 2}Gi"}
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}
    return {
        "metadata": {"name": name},
        "spec": {"tasks": [{"name": "w", "replicas": replicas, "template": template}]},
        "status": {"state": {"phase": phase}},
    }


def _pod(job: str, index: int, cpu: int, node: str = "", phase: str = "Pending") -> dict[str, Any]:
    requests = {"cpu": str(cpu), "memory": f"{cpu * 2}Gi"}
    return {
        "metadata": {"name": f"{job}-w-{index}", "labels": {"volcano.sh/job-name": job}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": requests}}]},
        "status": {"phase": phase},
    }


def _group(name: str, phase: str, reason: str = "") -> dict[str, Any]:
    conditions = [{"type": "Unschedulable", "reason": reason, "message": "3/3 tasks in gang unschedulable"}]
    return {"metadata": {"name": name}, "status": {"phase": phase, "conditions": conditions if reason else []}}


def test_a_member_with_room_and_a_waiting_gang_that_fits_it_is_stalled() -> None:
    nodes = [_node("n0", 8), _node("n1", 8)]
    pods = [
        _pod("busy", 0, 6, "n0", "Running"),  # 2 CPUs left on n0
        _pod("done", 0, 8, "n1", "Succeeded"),  # finished: holds nothing, n1 is free
        _pod("fits", 0, 4),
        _pod("fits", 1, 2),
        _pod("late", 0, 1, "n0"),  # bound, not started by its node yet
    ]
    jobs = [
        _job("busy", "Running", cpu=6),
        _job("fits", "Pending", 2, 4),
        _job("big", "Pending", 2, 8),  # no pods made yet: its spec's 2 x 8 CPUs fit nowhere now
        _job("late", "Pending"),
    ]
    groups = [_group("fits", "Inqueue", "NotEnoughResources"), _group("late", "Inqueue")]
    stall = member_stall("member-1", jobs, groups, pods, nodes)
    assert stall.waiting == 3 and stall.fits_now == ["fits"] and stall.stalled
    assert (stall.unbound, stall.not_started, stall.free_cpu, stall.cpu) == (2, 1, 9000, 16000)
    assert stall.podgroups == {"Inqueue": 2, "none": 1}
    assert stall.reasons == [
        "fits: PodGroup Inqueue, Unschedulable NotEnoughResources: 3/3 tasks in gang unschedulable"
    ]
    assert stall.line().startswith("member-1: 3 Jobs waiting (1 would fit the free room now: fits); PodGroups ")
    assert "pods 2 on no node, 1 on a node and not started; CPU free 9 of 16" in stall.line()


def test_waiting_gangs_bigger_than_the_free_room_are_no_stall() -> None:
    nodes = [_node("n0", 8)]
    pods = [_pod("busy", 0, 8, "n0", "Running"), _pod("next", 0, 1)]
    stall = member_stall("m", [_job("busy", "Running", cpu=8), _job("next", "Pending")], [], pods, nodes)
    assert stall.waiting == 1 and stall.fits_now == [] and not stall.stalled
    assert stall.podgroups == {"none": 1}


def test_a_stall_is_reported_once_nothing_moved_for_its_seconds_and_again_only_after_a_move() -> None:
    watch = Watch({}, "bench", 1000)  # no members: each report is empty
    running = {"metadata": {"name": "a"}, "status": {"state": {"phase": "Running"}}}
    watch.note_jobs([running], 1.0, lambda job: True)
    assert watch.check_stall(1.0, left=1) is None
    assert watch.check_stall(1.0 + STALL_SECONDS - 0.1, left=1) is None
    assert watch.check_stall(1.0 + STALL_SECONDS, left=1) == []
    assert watch.check_stall(100.0, left=1) is None  # reported once
    watch.note_jobs([], 101.0, lambda job: True, created_before={"a"})  # a finished: a move
    assert watch.check_stall(101.0, left=1) is None
    assert watch.check_stall(101.0 + STALL_SECONDS, left=0) is None  # nothing left: no stall
    assert [at for at, _ in watch.stalls] == [1.0 + STALL_SECONDS]
