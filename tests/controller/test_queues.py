"""The Queue state machine (Volcano's open/closing/closed states) and its status counters."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lahar.api.podgroup import PodGroup
from lahar.controller.queues import (
    QUEUE_COMMAND_ANNOTATION,
    PodGroupCounts,
    count_podgroup,
    next_queue_state,
    queue_command,
    queue_status,
    status_from_counts,
)


def make_queue(name: str = "research", state: str | None = None, command: str | None = None) -> dict[str, Any]:
    queue: dict[str, Any] = {"metadata": {"name": name}, "spec": {"weight": 1}}
    if state is not None:
        queue["status"] = {"state": state}
    if command is not None:
        queue["metadata"]["annotations"] = {QUEUE_COMMAND_ANNOTATION: command}
    return queue


def make_podgroup(queue: str | None, phase: str | None, name: str = "pg") -> dict[str, Any]:
    group: dict[str, Any] = {"metadata": {"name": name, "namespace": "default"}, "spec": {"minMember": 1}}
    if queue is not None:
        group["spec"]["queue"] = queue
    if phase is not None:
        group["status"] = {"phase": phase}
    return group


@pytest.mark.parametrize(
    ("state", "command", "podgroups", "expected"),
    [
        # close: Closing while groups remain, Closed when none
        ("Open", "close", 2, "Closing"),
        ("Open", "close", 0, "Closed"),
        (None, "close", 0, "Closed"),
        ("Unknown", "close", 1, "Closing"),
        # Closing (an earlier close, or an operator's write) finishes once the queue is empty
        ("Closing", None, 3, None),
        ("Closing", None, 0, "Closed"),
        ("Closing", "close", 0, "Closed"),
        # Closed stays Closed, even if groups created before the close are still there
        ("Closed", None, 0, None),
        ("Closed", "close", 4, None),
        # open: from any state
        ("Closed", "open", 0, "Open"),
        ("Closing", "open", 5, "Open"),
        ("Open", "open", 0, None),
        (None, "open", 0, None),
        # no request: Open stays Open, absent reads as Open
        ("Open", None, 7, None),
        (None, None, 0, None),
        # an unrecognised command changes nothing
        ("Open", "pause", 0, None),
        # a state Lahar does not know is written back as Unknown
        ("Paused", None, 0, "Unknown"),
    ],
)
def test_next_queue_state(state: str | None, command: str | None, podgroups: int, expected: str | None) -> None:
    assert next_queue_state(make_queue(state=state, command=command), podgroups) == expected


def test_the_default_queue_is_never_closed() -> None:
    assert next_queue_state(make_queue("default", "Open", "close"), 0) is None
    assert next_queue_state(make_queue("default", "Closed", "open"), 0) == "Open"


def test_queue_command_reads_only_known_commands() -> None:
    assert queue_command(make_queue(command="close")) == "close"
    assert queue_command(make_queue(command="open")) == "open"
    assert queue_command(make_queue(command="CLOSE")) is None
    assert queue_command(make_queue()) is None


def test_queue_status_counts_own_podgroups_by_phase() -> None:
    groups = [
        make_podgroup("research", "Pending"),
        make_podgroup("research", None),  # no status yet: Pending
        make_podgroup("research", "Inqueue"),
        make_podgroup("research", "Running"),
        make_podgroup("research", "Running"),
        make_podgroup("research", "Completed"),
        make_podgroup("research", "Exploded"),  # unrecognised: Unknown
        make_podgroup("other", "Running"),  # another queue's: not counted
        make_podgroup(None, "Running"),  # no queue: the default queue's
    ]
    assert queue_status(make_queue(state="Open"), groups) == {
        "pending": 2,
        "inqueue": 1,
        "running": 2,
        "unknown": 1,
        "completed": 1,
        "state": "Open",
    }
    assert queue_status(make_queue("default"), groups)["running"] == 1


def test_queue_status_applies_the_close_request() -> None:
    running = [make_podgroup("research", "Running")]
    assert queue_status(make_queue(state="Open", command="close"), running)["state"] == "Closing"
    assert queue_status(make_queue(state="Closing"), [])["state"] == "Closed"
    # completed groups still hold the queue in Closing, as in Volcano
    done = [make_podgroup("research", "Completed")]
    assert queue_status(make_queue(state="Closing"), done)["state"] == "Closing"
    # groups of other queues do not
    assert queue_status(make_queue(state="Closing"), [make_podgroup("other", "Running")])["state"] == "Closed"
    assert queue_status(make_queue(), [])["state"] == "Open"


# A PodGroup event: (name, queue, phase) written, or (name, None, None) deleted.
podgroup_events = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(["research", "default", None, "gone"]),
        st.sampled_from(["Pending", "Inqueue", "Running", "Completed", "Unknown", "Exploded", None]),
        st.booleans(),  # deleted
    ),
    max_size=40,
)


@given(podgroup_events)
@settings(max_examples=300, deadline=None)
def test_kept_counts_equal_a_full_recount(events: list[tuple[str, str | None, str | None, bool]]) -> None:
    """Counts moved event by event (adds, updates that change queue or phase, deletes, deletes of
    groups never seen) equal counting the groups that are left, and give the same status."""
    counts, live = PodGroupCounts(), {}
    for name, queue, phase, deleted in events:
        key = ("default", name)
        if deleted:
            live.pop(key, None)
            count_podgroup(counts, key, None)
        else:
            live[key] = make_podgroup(queue, phase, name)
            count_podgroup(counts, key, live[key])
    recount: dict[str, Counter[Any]] = {}
    for group in map(PodGroup, live.values()):
        recount.setdefault(group.queue, Counter())[group.phase] += 1
    assert counts.by_queue == recount  # and no queue is left with an empty Counter
    for name in ("research", "default", "gone", "never"):
        for state, command in (("Open", None), ("Closing", None), ("Open", "close")):
            queue = make_queue(name, state, command)
            assert status_from_counts(queue, counts.by_queue.get(name, {})) == queue_status(queue, live.values())
