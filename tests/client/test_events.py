"""Event de-duplication (lahar/client/events.py), as client-go's EventCorrelator: the same event
said again is one Event whose count and lastTimestamp grow; a new message, an expired Event or a
repeat past the window is a new one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.events import DEDUP_WINDOW, EventRecorder, ObjectRef, QueuedEventRecorder


def test_repeats_count_up_on_one_event(api: KubeApi) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    recorder = EventRecorder(api, "tester", clock=lambda: now[0])
    pod = ObjectRef(kinds.POD, "default", "web-0", "uid-1")

    def events() -> list[dict]:
        items = api.list(kinds.EVENT, "default", field_selector="involvedObject.name=web-0")["items"]
        return sorted(items, key=lambda e: e["metadata"]["creationTimestamp"] + e["metadata"]["name"])

    for minute in range(3):
        now[0] = datetime(2026, 1, 1, 0, minute, tzinfo=UTC)
        recorder.record(pod, "Warning", "FailedScheduling", "0/2 nodes are available")
    (event,) = events()
    assert event["count"] == 3
    assert event["firstTimestamp"] == "2026-01-01T00:00:00Z" and event["lastTimestamp"] == "2026-01-01T00:02:00Z"

    recorder.record(pod, "Warning", "FailedScheduling", "0/3 nodes are available")  # another message
    assert sorted(e["count"] for e in events()) == [1, 3]

    api.delete(kinds.EVENT, event["metadata"]["name"], "default")  # expired: said anew
    recorder.record(pod, "Warning", "FailedScheduling", "0/2 nodes are available")
    assert sorted(e["count"] for e in events()) == [1, 1]

    now[0] += DEDUP_WINDOW + timedelta(seconds=1)  # past the window: a new Event too
    recorder.record(pod, "Warning", "FailedScheduling", "0/2 nodes are available")
    assert len(events()) == 3


def test_queued_recorder_sends_in_the_background_and_keeps_the_time_said(api: KubeApi) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    recorder = QueuedEventRecorder(api, "tester", clock=lambda: now[0], senders=1)
    pod = ObjectRef(kinds.POD, "default", "batch-0", "uid-2")
    try:
        for minute in range(3):
            now[0] = datetime(2026, 1, 1, 0, minute, tzinfo=UTC)
            recorder.record(pod, "Normal", "Scheduled", "Successfully assigned default/batch-0 to n1")
        now[0] = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)  # later than any event was said
        assert recorder.wait_idle(10)
        (event,) = api.list(kinds.EVENT, "default", field_selector="involvedObject.name=batch-0")["items"]
        # One Event counted up, stamped when each was said, not when a sender wrote it.
        assert event["count"] == 3
        assert event["firstTimestamp"] == "2026-01-01T00:00:00Z" and event["lastTimestamp"] == "2026-01-01T00:02:00Z"
    finally:
        recorder.close()

    # After close, an event is written on the caller's thread: nothing is left in a queue.
    recorder.record(pod, "Normal", "Scheduled", "Successfully assigned default/batch-0 to n2")
    items = api.list(kinds.EVENT, "default", field_selector="involvedObject.name=batch-0")["items"]
    assert sorted(e["message"][-2:] for e in items) == ["n1", "n2"]


def test_queued_recorder_close_sends_what_is_queued(api: KubeApi) -> None:
    recorder = QueuedEventRecorder(api, "tester", senders=2)
    for i in range(20):
        recorder.record(ObjectRef(kinds.POD, "default", f"drain-{i}", f"uid-{i}"), "Normal", "Scheduled", "assigned")
    recorder.close()
    names = {e["involvedObject"]["name"] for e in api.list(kinds.EVENT, "default")["items"]}
    assert {f"drain-{i}" for i in range(20)} <= names
