"""The Job state machine (lahar.controller.lifecycle.next_state)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lahar.api.job import Job, JobPhase
from lahar.controller.desired import desired_podgroup_spec
from lahar.controller.lifecycle import Decision, format_time, next_state

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
INQUEUE = {"status": {"phase": "Inqueue"}}
PENDING_GROUP = {"status": {"phase": "Pending"}}


def _task(name: str, replicas: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        **extra,
    }


def _job(
    tasks: list[dict[str, Any]], phase: str | None = None, retry: int = 0, since: datetime = NOW, **spec: Any
) -> dict[str, Any]:
    job: dict[str, Any] = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": {"tasks": tasks, **spec}}
    if phase:
        job["status"] = {"state": {"phase": phase, "lastTransitionTime": format_time(since)}, "retryCount": retry}
    return job


def _pod(
    task: str,
    index: int,
    phase: str = "Running",
    created: datetime = NOW,
    exit_code: int | None = None,
    ready: bool = True,
    **status: Any,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"j-{task}-{index}",
            "creationTimestamp": format_time(created),
            "labels": {"volcano.sh/task-spec": task, "volcano.sh/task-index": str(index)},
        },
        "status": {"phase": phase, **status},
    }
    if exit_code is not None:
        pod["status"]["containerStatuses"] = [{"state": {"terminated": {"exitCode": exit_code}}}]
    elif phase == "Running" and "containerStatuses" not in status:
        pod["status"]["containerStatuses"] = [{"name": "c", "ready": ready, "state": {"running": {}}}]
    return pod


def _step(job: dict[str, Any], pods: list[dict[str, Any]], group: Any = INQUEUE, **kw: Any) -> Decision:
    return next_state(job, pods, group, kw.pop("now", NOW), **kw)


def _deleted(decision: Decision) -> set[str]:
    return {d.name for d in decision.pods_to_delete}


def test_three_replica_job_goes_pending_running_completed() -> None:
    job = _job([_task("w", 3)])
    first = _step(job, [])
    assert first.phase is JobPhase.PENDING
    assert [p["metadata"]["name"] for p in first.pods_to_create] == ["j-w-0", "j-w-1", "j-w-2"]
    job["status"] = first.status

    two_running = _step(job, [_pod("w", 0), _pod("w", 1), _pod("w", 2, "Pending")])
    assert two_running.phase is JobPhase.PENDING
    assert two_running.counters["running"] == 2 and two_running.counters["pending"] == 1

    running = _step(job, [_pod("w", i) for i in range(3)])
    assert running.phase is JobPhase.RUNNING
    assert running.new_conditions == [
        {
            "status": "Running",
            "lastTransitionTime": format_time(NOW),
            "reason": "MinAvailable",
            "message": "3 of minAvailable 3 pods started",
        }
    ]
    job["status"] = running.status

    partly = _step(job, [_pod("w", 0, "Succeeded"), _pod("w", 1), _pod("w", 2)])
    assert partly.phase is JobPhase.RUNNING and partly.new_conditions == []
    done = _step(job, [_pod("w", i, "Succeeded") for i in range(3)])
    assert done.phase is JobPhase.COMPLETED
    assert done.task_status_count == {"w": {"phase": {"Succeeded": 3}}}
    assert [c["status"] for c in done.status["conditions"]] == ["Pending", "Running", "Completed"]


def test_all_finished_below_min_available_fails() -> None:
    job = _job([_task("w", 2)], phase="Running")
    decision = _step(job, [_pod("w", 0, "Succeeded"), _pod("w", 1, "Failed", exit_code=1)])
    assert decision.phase is JobPhase.FAILED


def test_pods_are_created_only_once_the_podgroup_is_inqueue() -> None:
    job = _job([_task("w", 2)])
    assert _step(job, [], PENDING_GROUP).pods_to_create == []
    assert _step(job, [], None).pods_to_create == []
    assert len(_step(job, [], PENDING_GROUP, admission_required=False).pods_to_create) == 2
    assert len(_step(job, [], INQUEUE).pods_to_create) == 2


def test_pod_evicted_restarts_the_job() -> None:
    job = _job([_task("w", 2)], phase="Running", retry=1, policies=[{"event": "PodEvicted", "action": "RestartJob"}])
    decision = _step(job, [_pod("w", 0, "Failed", reason="Evicted"), _pod("w", 1)])
    assert decision.phase is JobPhase.RESTARTING
    assert _deleted(decision) == {"j-w-0", "j-w-1"}
    assert decision.retry_count == 2 and decision.retry_incremented
    assert decision.pods_to_create == []

    # Restarting goes back to Pending once the old pods are gone.
    job["status"] = decision.status
    terminating = _pod("w", 1)
    terminating["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert _step(job, [terminating]).phase is JobPhase.RESTARTING
    again = _step(job, [])
    assert again.phase is JobPhase.PENDING and again.retry_count == 2 and not again.retry_incremented


def test_a_pod_being_deleted_reads_as_evicted() -> None:
    job = _job([_task("w", 1)], phase="Running", policies=[{"event": "PodEvicted", "action": "RestartJob"}])
    pod = _pod("w", 0)
    pod["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert _step(job, [pod]).phase is JobPhase.RESTARTING


def test_restart_after_max_retry_fails_the_job() -> None:
    job = _job(
        [_task("w", 2)], phase="Running", retry=3, maxRetry=3, policies=[{"event": "PodFailed", "action": "RestartJob"}]
    )
    decision = _step(job, [_pod("w", 0, "Failed", exit_code=1), _pod("w", 1)])
    assert decision.phase is JobPhase.FAILED
    assert decision.retry_count == 3 and not decision.retry_incremented
    assert _deleted(decision) == {"j-w-1"}  # the failed pod is kept for its logs


def test_task_completed_completes_the_job() -> None:
    job = _job(
        [_task("master", 1, policies=[{"event": "TaskCompleted", "action": "CompleteJob"}]), _task("worker", 2)],
        phase="Running",
    )
    decision = _step(job, [_pod("master", 0, "Succeeded"), _pod("worker", 0), _pod("worker", 1)])
    assert decision.phase is JobPhase.COMPLETING
    assert _deleted(decision) == {"j-worker-0", "j-worker-1"}
    job["status"] = decision.status
    assert _step(job, [_pod("master", 0, "Succeeded")]).phase is JobPhase.COMPLETED


def test_min_success_completes_early() -> None:
    job = _job([_task("w", 4)], phase="Running", minSuccess=2, minAvailable=2)
    decision = _step(job, [_pod("w", 0, "Succeeded"), _pod("w", 1, "Succeeded"), _pod("w", 2), _pod("w", 3)])
    assert decision.phase is JobPhase.COMPLETED
    assert _deleted(decision) == set()
    job["status"] = decision.status
    assert _deleted(_step(job, [_pod("w", 2), _pod("w", 3, "Succeeded")])) == {"j-w-2"}


def test_ttl_after_finished_deletes_the_job() -> None:
    job = _job([_task("w", 1)], phase="Completed", since=NOW - timedelta(seconds=50), ttlSecondsAfterFinished=60)
    early = _step(job, [])
    assert not early.delete_job and early.requeue_after == 10
    assert _step(job, [], now=NOW + timedelta(seconds=10)).delete_job
    no_ttl = _job([_task("w", 1)], phase="Completed", since=NOW - timedelta(days=9))
    assert not _step(no_ttl, []).delete_job


def test_pod_pending_timeout_restarts_the_pod() -> None:
    policy = {"event": "PodPending", "timeout": "5m", "action": "RestartPod"}
    job = _job([_task("w", 2, policies=[policy])], phase="Pending")
    pods = [_pod("w", 0), _pod("w", 1, "Pending", created=NOW - timedelta(minutes=4))]
    waiting = _step(job, pods)
    assert waiting.phase is JobPhase.PENDING and _deleted(waiting) == set()
    assert waiting.requeue_after == 60
    late = _step(job, pods, now=NOW + timedelta(minutes=1))
    assert late.phase is JobPhase.RESTARTING
    assert _deleted(late) == {"j-w-1"} and late.retry_count == 1


def test_exit_code_policy_picks_the_action() -> None:
    job = _job(
        [_task("w", 2, policies=[{"exitCode": 3, "action": "AbortJob"}])],
        phase="Running",
        policies=[{"event": "PodFailed", "action": "RestartJob"}],
    )
    aborted = _step(job, [_pod("w", 0, "Failed", exit_code=3), _pod("w", 1)])
    assert aborted.phase is JobPhase.ABORTING and _deleted(aborted) == {"j-w-1"}
    restarted = _step(job, [_pod("w", 0, "Failed", exit_code=1), _pod("w", 1)])
    assert restarted.phase is JobPhase.RESTARTING


def test_depends_on_gates_pod_creation() -> None:
    job = _job([_task("ps", 1), _task("worker", 2, dependsOn={"name": ["ps"]})], minAvailable=1)
    first = _step(job, [])
    assert [p["metadata"]["name"] for p in first.pods_to_create] == ["j-ps-0"]
    assert _step(job, [_pod("ps", 0, "Pending")]).pods_to_create == []
    # Running is not enough: Volcano waits until every container of the dependency is ready.
    assert _step(job, [_pod("ps", 0, ready=False)]).pods_to_create == []
    later = _step(job, [_pod("ps", 0)])
    assert [p["metadata"]["name"] for p in later.pods_to_create] == ["j-worker-0", "j-worker-1"]


def test_the_gang_counts_only_the_tasks_that_can_run() -> None:
    """A task waiting on a dependency is not demanded by the PodGroup (the deadlock: a gang of
    every task's minAvailable could never be admitted, since the dependent pods do not exist)."""
    job = _job([_task("master", 1, dependsOn={"name": ["worker"]}), _task("worker", 2)])
    waiting = _step(job, [])
    assert waiting.runnable_tasks == {"worker"}
    spec = desired_podgroup_spec(Job.from_dict(job), waiting.runnable_tasks)
    assert spec["minMember"] == 2 and spec["minTaskMember"] == {"master": 0, "worker": 2}
    assert [p["metadata"]["name"] for p in waiting.pods_to_create] == ["j-worker-0", "j-worker-1"]
    met = _step(job, [_pod("worker", 0), _pod("worker", 1)])
    assert met.runnable_tasks == {"worker", "master"}
    spec = desired_podgroup_spec(Job.from_dict(job), met.runnable_tasks)
    assert spec["minMember"] == 3 and spec["minTaskMember"] == {"master": 1, "worker": 2}
    assert [p["metadata"]["name"] for p in met.pods_to_create] == ["j-master-0"]


def test_depends_on_any() -> None:
    job = _job([_task("a", 1), _task("b", 1), _task("c", 1, dependsOn={"name": ["a", "b"], "iteration": "any"})])
    assert [p["metadata"]["name"] for p in _step(job, [_pod("a", 0), _pod("b", 0, "Pending")]).pods_to_create] == [
        "j-c-0"
    ]


def test_suspend_and_resume_commands() -> None:
    job = _job([_task("w", 2)], phase="Running")
    abort = _step(job, [_pod("w", 0), _pod("w", 1, "Succeeded")], command="AbortJob")
    assert abort.phase is JobPhase.ABORTING and abort.command_consumed
    assert _deleted(abort) == {"j-w-0"}
    job["status"] = abort.status
    assert _step(job, [_pod("w", 1, "Succeeded")]).phase is JobPhase.ABORTED
    aborted = _job([_task("w", 2)], phase="Aborted")
    resumed = _step(aborted, [_pod("w", 1, "Succeeded")], command="ResumeJob")
    assert resumed.phase is JobPhase.RESTARTING and _deleted(resumed) == {"j-w-1"}
    assert not resumed.retry_incremented
    assert _step(aborted, []).phase is JobPhase.ABORTED  # no command: stays


def test_a_command_the_phase_cannot_use_is_dropped() -> None:
    # Once: a ResumeJob left on a finished job must not resume it after some later abort.
    done = _job([_task("w", 1)], phase="Completed")
    dropped = _step(done, [_pod("w", 0, "Succeeded")], command="ResumeJob")
    assert dropped.command_consumed and dropped.phase is JobPhase.COMPLETED and dropped.action is None
    restarting = _job([_task("w", 1)], phase="Restarting")
    assert _step(restarting, [], command="AbortJob").command_consumed


def test_finished_phase_stays_and_kills_leftover_pods() -> None:
    job = _job([_task("w", 2)], phase="Failed")
    decision = _step(job, [_pod("w", 0), _pod("w", 1, "Failed")])
    assert decision.phase is JobPhase.FAILED and decision.new_conditions == []
    assert _deleted(decision) == {"j-w-0"} and decision.pods_to_create == []


def test_restart_task_deletes_only_that_task() -> None:
    job = _job(
        [_task("ps", 1), _task("w", 2, policies=[{"event": "PodFailed", "action": "RestartTask"}])], phase="Running"
    )
    decision = _step(job, [_pod("ps", 0), _pod("w", 0, "Failed", exit_code=2), _pod("w", 1)])
    assert decision.phase is JobPhase.RESTARTING
    assert _deleted(decision) == {"j-w-0", "j-w-1"}


def test_a_failed_pod_deletion_is_issued_again_while_restarting() -> None:
    job = _job([_task("w", 2, policies=[{"event": "PodFailed", "action": "RestartPod"}])], phase="Running")
    failed = _pod("w", 0, "Failed", exit_code=1)
    restart = _step(job, [failed, _pod("w", 1)])
    assert restart.phase is JobPhase.RESTARTING and restart.action == "RestartPod"
    assert _deleted(restart) == {"j-w-0"} and restart.status["restartingPods"] == ["j-w-0"]

    # The delete call failed: the pod is still there, unchanged. The restart is not counted again.
    job["status"] = restart.status
    again = _step(job, [failed, _pod("w", 1)])
    assert again.phase is JobPhase.RESTARTING and _deleted(again) == {"j-w-0"}
    assert again.retry_count == 1 and not again.retry_incremented and again.action is None
    assert again.status == restart.status  # nothing new to write

    done = _step(job, [_pod("w", 1)])
    assert done.phase is JobPhase.PENDING and _deleted(done) == set()
    assert "restartingPods" not in done.status


def test_restart_task_remembers_its_pods_only() -> None:
    job = _job(
        [_task("ps", 1), _task("w", 2, policies=[{"event": "PodFailed", "action": "RestartTask"}])], phase="Running"
    )
    restart = _step(job, [_pod("ps", 0), _pod("w", 0, "Failed", exit_code=2), _pod("w", 1)])
    assert restart.status["restartingPods"] == ["j-w-0", "j-w-1"]
    job["status"] = restart.status
    terminating = _pod("w", 0)
    terminating["metadata"]["deletionTimestamp"] = format_time(NOW)
    # j-w-0 is going; j-w-1's delete failed and is issued again; ps is never touched.
    again = _step(job, [_pod("ps", 0), terminating, _pod("w", 1)])
    assert _deleted(again) == {"j-w-1"} and again.phase is JobPhase.RESTARTING


def _restarted(pod: dict[str, Any], restarts: int) -> dict[str, Any]:
    pod["status"]["containerStatuses"] = [{"name": "c", "restartCount": restarts, "state": {"running": {}}}]
    return pod


def test_task_max_retry_counts_container_restarts_as_task_failed() -> None:
    policy = {"event": "TaskFailed", "action": "AbortJob"}
    job = _job([_task("w", 2, maxRetry=3, policies=[policy])], phase="Running")
    assert _step(job, [_restarted(_pod("w", 0), 1), _restarted(_pod("w", 1), 1)]).phase is JobPhase.RUNNING
    aborted = _step(job, [_restarted(_pod("w", 0), 2), _restarted(_pod("w", 1), 1)])
    assert aborted.phase is JobPhase.ABORTING and aborted.message == "TaskFailed on task w"
    # Restarts of pods that finished are history, not retries of the live task.
    finished = _restarted(_pod("w", 0, "Succeeded"), 5)
    assert _step(job, [finished, _pod("w", 1)]).phase is JobPhase.RUNNING


def test_task_max_retry_zero_tolerates_no_restart() -> None:
    job = _job(
        [_task("w", 1, maxRetry=0, policies=[{"event": "TaskFailed", "action": "TerminateJob"}])], phase="Running"
    )
    assert _step(job, [_pod("w", 0)]).phase is JobPhase.RUNNING  # no restart yet: not failed
    assert _step(job, [_restarted(_pod("w", 0), 1)]).phase is JobPhase.TERMINATING


def test_a_job_waits_for_its_queue_to_exist_and_open() -> None:
    job = _job([_task("w", 2)], queue="team")
    missing = _step(job, [], queue_state=None)
    assert missing.phase is JobPhase.PENDING and missing.pods_to_create == []
    assert missing.reason == "QueueNotFound" and 'queue "team" does not exist' in missing.message
    assert missing.new_conditions[0]["reason"] == "QueueNotFound"
    job["status"] = missing.status
    assert _step(job, [], queue_state=None).new_conditions == []  # still held: nothing new

    closed = _step(job, [], queue_state="Closed", admission_required=False)
    assert closed.reason == "QueueNotOpen" and closed.message.startswith('queue "team" is Closed')
    assert closed.pods_to_create == []
    job["status"] = closed.status

    opened = _step(job, [], queue_state="Open")
    assert opened.phase is JobPhase.PENDING and opened.reason == "QueueOpen"
    assert len(opened.pods_to_create) == 2


def test_a_running_job_is_not_stopped_by_its_queue_closing() -> None:
    job = _job([_task("w", 2)], phase="Running", queue="team")
    decision = _step(job, [_pod("w", 0), _pod("w", 1)], queue_state="Closing")
    assert decision.phase is JobPhase.RUNNING and decision.new_conditions == []


# Every user event × every action Volcano lets a policy pair (its webhook's policyEventMap and
# policyActionMap), on a running 2-pod task: the pods that show the event, and what follows.
EVENT_PODS = {
    "PodFailed": lambda: [_pod("w", 0, "Failed", exit_code=1), _pod("w", 1)],
    "PodEvicted": lambda: [_pod("w", 0, reason="Evicted"), _pod("w", 1)],
    "Unknown": lambda: [_pod("w", 0, "Unknown"), _pod("w", 1)],
    "PodPending": lambda: [_pod("w", 0, "Pending", created=NOW - timedelta(minutes=5)), _pod("w", 1)],
    "TaskCompleted": lambda: [_pod("w", 0, "Succeeded"), _pod("w", 1, "Succeeded")],
    "TaskFailed": lambda: [_pod("w", 0, "Failed", exit_code=1), _pod("w", 1, "Failed", exit_code=1)],
}
ACTION_PHASES = {
    "RestartJob": JobPhase.RESTARTING,
    "RestartTask": JobPhase.RESTARTING,
    "RestartPod": JobPhase.RESTARTING,
    "AbortJob": JobPhase.ABORTING,
    "TerminateJob": JobPhase.TERMINATING,
    "CompleteJob": JobPhase.COMPLETING,
}


@pytest.mark.parametrize("action", sorted(ACTION_PHASES))
@pytest.mark.parametrize("event", sorted(EVENT_PODS))
@pytest.mark.parametrize("level", ["job", "task"])
def test_every_event_and_action_pair(event: str, action: str, level: str) -> None:
    policy = {"event": event, "action": action, **({"timeout": "1m"} if event == "PodPending" else {})}
    task_extra = {"policies": [policy]} if level == "task" else {}
    job_extra = {"policies": [policy]} if level == "job" else {}
    job = _job([_task("w", 2, minAvailable=1, **task_extra)], phase="Running", **job_extra)
    decision = _step(job, EVENT_PODS[event]())
    assert decision.phase is ACTION_PHASES[action], decision.message
    assert decision.action == action
    assert decision.message.startswith(event)
    if action in ("RestartJob", "RestartTask", "RestartPod"):
        assert decision.retry_count == 1
        expected = {"j-w-0"} if action == "RestartPod" and event not in ("TaskCompleted", "TaskFailed") else None
        if expected is not None:
            assert _deleted(decision) == expected
