"""The live federation bench's progress marks: what compares two placements when one of them does
not finish within a benchmark's hold."""

from __future__ import annotations

from lahar.bench._federation_live import CHECKPOINT_SECONDS, progress


def test_progress_counts_jobs_running_and_done_at_each_mark_and_at_the_end() -> None:
    running = [5.0, 59.9, 60.0, 61.0, 130.0]
    done = [30.0, 125.0]
    marks = progress(running, done, 150.0)
    assert CHECKPOINT_SECONDS == 60.0
    assert marks == [(60.0, 3, 1), (120.0, 4, 1), (150.0, 5, 2)]


def test_a_run_ending_on_a_mark_is_not_counted_twice_and_a_short_one_has_its_end() -> None:
    assert progress([1.0], [2.0], 120.0) == [(60.0, 1, 1), (120.0, 1, 1)]
    assert progress([], [], 12.34) == [(12.3, 0, 0)]
