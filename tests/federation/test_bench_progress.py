"""The live federation bench's progress marks: what compares two placements when one of them does
not finish within a benchmark's hold."""

from __future__ import annotations

from lahar.bench._federation_live import CHECKPOINT_SECONDS, Watch, progress


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
