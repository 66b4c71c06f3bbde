"""Volcano's extender plugin tests as conformance cases (issue 17; docs/scheduler-conformance.md
tallies them): `TestMaxBodySizeLimit2` (an answer over 10 MiB is refused), `TestIsInterested`,
`TestHasManagedResources`, `TestHasResourcesInList` (which pods the extender is asked about), then
Lahar's own checks of every verb through whole cycles against a real HTTP extender on loopback,
and of an extender that fails: unreachable, slow, wrong, ignorable or not."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from lahar.scheduler.framework.plugin import ConfError
from lahar.scheduler.framework.session import Session, run_cycle
from lahar.scheduler.metrics import SchedulerMetrics
from lahar.scheduler.plugins.extender import (
    MAX_BODY,
    ExtenderClient,
    ExtenderError,
    has_managed_resources,
    has_resources_in_list,
    is_interested,
)
from tests.scheduler.preempt_builders import cluster, conf
from tests.scheduler.volcano_cases import Obj, quantities, vc_node, vc_pod, vc_podgroup, vc_priority_class, vc_queue

Handler = Callable[[dict[str, Any]], Any]  # the request's JSON -> the answer's JSON (or (status, raw bytes))


class Extender:
    """A real HTTP extender on 127.0.0.1: `verbs` maps a path to what it answers; every request is
    kept in `asked` as (verb, JSON)."""

    def __init__(self) -> None:
        self.verbs: dict[str, Handler] = {}
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        extender = self

        class Handle(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the plugin's client uses it

            def do_POST(self) -> None:
                verb = self.path.strip("/")
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"null")
                with extender.lock:
                    extender.asked.append((verb, request))
                handler = extender.verbs.get(verb)
                answer = handler(request) if handler is not None else (404, b"no such verb")
                status, body = answer if isinstance(answer, tuple) else (200, json.dumps(answer).encode())
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handle)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def calls(self, verb: str) -> list[dict[str, Any]]:
        with self.lock:
            return [request for asked, request in self.asked if asked == verb]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def extender() -> Iterator[Extender]:
    server = Extender()
    try:
        yield server
    finally:
        server.close()


def closed_port() -> str:
    """A loopback URL nothing listens on (a port bound, then let go)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def extender_entry(url: str, **arguments: Any) -> dict[str, Any]:
    return {"name": "extender", "arguments": {"extender.urlPrefix": url, **arguments}}


def cycle(objects: list[Obj], actions: str, *tiers: list[Any]) -> Session:
    return run_cycle(cluster(*objects).snapshot(), conf(actions, *tiers))


def placed(session: Session) -> dict[str, str]:
    return {task.name: task.node for batch in session.binds for task in batch.tasks}


R = quantities
NODES = [vc_node("n1", "4", "8G"), vc_node("n2", "4", "8G"), vc_node("n3", "4", "8G")]


def one_pod(name: str = "p1", request: dict[str, str] | None = None) -> list[Obj]:
    return [
        vc_queue("default"),
        vc_podgroup(f"pg-{name}", "default", "default", 1, None, "Inqueue"),
        vc_pod("default", name, "", "Pending", request or R("1", "1G"), f"pg-{name}"),
    ]


# -- extender_test.go: TestMaxBodySizeLimit2 ---------------------------------------------------------


def test_volcano_max_body_size_limit(extender: Extender) -> None:
    """An answer one byte over the 10 MiB limit is refused ("request body too large"), as Go's
    MaxBytesReader does."""
    extender.verbs["test"] = lambda _: (200, b'{"padding":"' + b"a" * (MAX_BODY + 1) + b'"}')
    client = ExtenderClient(extender.url, timeout=10.0)
    with pytest.raises(ExtenderError, match="request body too large"):
        client.post("test", {"task": {}, "node": {}})
    # Not a sign of an unreachable extender: the next call is made.
    extender.verbs["test"] = lambda _: {"ok": True}
    assert client.post("test", {}) == {"ok": True}
    client.close()


# -- extender_test.go: TestIsInterested, TestHasManagedResources, TestHasResourcesInList ------------


def container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> Obj:
    resources: Obj = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources}


GPU, AMD, INTEL = "nvidia.com/gpu", "amd.com/gpu", "intel.com/gpu"

IS_INTERESTED = [
    ("empty managed resources - should return true", [], {"containers": [container({"cpu": "100m"})]}, True),
    (
        "container has managed resource in requests",
        [GPU],
        {"containers": [container({"cpu": "100m", GPU: "1"})]},
        True,
    ),
    ("container has managed resource in limits", [GPU], {"containers": [container(limits={GPU: "1"})]}, True),
    (
        "init container has managed resource",
        [GPU],
        {"containers": [container({"cpu": "100m"})], "initContainers": [container({GPU: "1"})]},
        True,
    ),
    (
        "no managed resources in containers",
        [GPU],
        {"containers": [container({"cpu": "100m", "memory": "128Mi"})]},
        False,
    ),
    (
        "multiple managed resources - one match",
        [GPU, AMD],
        {"containers": [container({"cpu": "100m", AMD: "1"})]},
        True,
    ),
]


@pytest.mark.parametrize(("name", "managed", "spec", "expected"), IS_INTERESTED, ids=[c[0] for c in IS_INTERESTED])
def test_volcano_is_interested(name: str, managed: list[str], spec: Obj, expected: bool) -> None:
    assert is_interested(spec, managed) is expected


HAS_MANAGED_RESOURCES = [
    ("no containers", [GPU], [], False),
    ("container with managed resource in requests", [GPU], [container({GPU: "1"})], True),
    ("container with managed resource in limits", [GPU], [container(limits={GPU: "1"})], True),
    (
        "container with managed resource in both requests and limits",
        [GPU],
        [container({GPU: "1"}, {GPU: "1"})],
        True,
    ),
    (
        "multiple containers - one has managed resource",
        [GPU],
        [container({"cpu": "100m"}), container({GPU: "1"})],
        True,
    ),
    ("container with no managed resources", [GPU], [container({"cpu": "100m", "memory": "128Mi"})], False),
    ("empty resource requirements", [GPU], [container()], False),
    ("multiple managed resources - partial match", [GPU, AMD], [container({GPU: "1", INTEL: "1"})], True),
]


@pytest.mark.parametrize(
    ("name", "managed", "containers", "expected"), HAS_MANAGED_RESOURCES, ids=[c[0] for c in HAS_MANAGED_RESOURCES]
)
def test_volcano_has_managed_resources(name: str, managed: list[str], containers: list[Obj], expected: bool) -> None:
    assert has_managed_resources(containers, managed) is expected


HAS_RESOURCES_IN_LIST: list[tuple[str, list[str], dict[str, str] | None, bool]] = [
    ("empty resource list", [GPU], {}, False),
    ("nil resource list", [GPU], None, False),
    ("resource list contains managed resource", [GPU], {"cpu": "100m", GPU: "1"}, True),
    ("resource list contains no managed resources", [GPU], {"cpu": "100m", "memory": "128Mi"}, False),
    ("resource list contains multiple managed resources", [GPU, AMD], {"cpu": "100m", GPU: "1", AMD: "1"}, True),
    ("resource list contains one of multiple managed resources", [GPU, AMD], {"cpu": "100m", AMD: "1"}, True),
    ("empty managed resources - should return false", [], {"cpu": "100m", GPU: "1"}, False),
]


@pytest.mark.parametrize(
    ("name", "managed", "resources", "expected"), HAS_RESOURCES_IN_LIST, ids=[c[0] for c in HAS_RESOURCES_IN_LIST]
)
def test_volcano_has_resources_in_list(
    name: str, managed: list[str], resources: dict[str, str] | None, expected: bool
) -> None:
    assert has_resources_in_list(resources, managed) is expected


# -- Lahar's own: every verb through a cycle against the loopback extender ---------------------------


def test_predicate_refuses_the_nodes_the_extender_refuses(extender: Extender) -> None:
    extender.verbs["predicate"] = lambda request: (
        {"status": "", "code": 0} if request["node"]["Name"] == "n3" else {"status": "no licence here"}
    )
    session = cycle(NODES + one_pod(), "allocate", ["predicates", extender_entry(extender.url, **PREDICATE)])
    assert placed(session) == {"p1": "n3"}
    asked = extender.calls("predicate")
    # Volcano's shapes: the task and the node as its TaskInfo and NodeInfo.
    assert {request["node"]["Name"] for request in asked} == {"n1", "n2", "n3"}
    task = asked[0]["task"]
    assert task["Name"] == "p1" and task["Namespace"] == "default" and task["Job"] == "default/pg-p1"
    assert task["Resreq"]["MilliCPU"] == 1000.0 and task["Resreq"]["Memory"] == 1e9
    assert task["Status"] == 1 and task["Pod"]["metadata"]["name"] == "p1"  # Pending is 1 << 0
    node = asked[0]["node"]
    assert node["Allocatable"]["MilliCPU"] == 4000.0 and node["State"]["Phase"] == 1
    assert node["Node"]["metadata"]["name"] == node["Name"]


PREDICATE = {"extender.predicateVerb": "predicate"}


def test_every_node_refused_says_why(extender: Extender) -> None:
    extender.verbs["predicate"] = lambda _: {"status": "no licence here", "code": 2}
    session = cycle(NODES + one_pod(), "allocate", ["predicates", extender_entry(extender.url, **PREDICATE)])
    assert placed(session) == {}
    task = next(iter(session.jobs["default/pg-p1"].tasks.values()))
    assert session.explain(task) == {"extender: no licence here (code 2)": 3}


def test_prioritize_scores_add_to_the_others(extender: Extender) -> None:
    extender.verbs["prioritize"] = lambda request: {
        "nodeScore": {node["Name"]: (500.0 if node["Name"] == "n2" else 1.0) for node in request["nodes"]}
    }
    entry = extender_entry(extender.url, **{"extender.prioritizeVerb": "prioritize"})
    session = cycle(NODES + one_pod(), "allocate", ["predicates", "nodeorder", entry])
    assert placed(session) == {"p1": "n2"}
    assert [node["Name"] for node in extender.calls("prioritize")[0]["nodes"]] == ["n1", "n2", "n3"]


def test_prioritize_error_message_leaves_the_task_unplaced(extender: Extender) -> None:
    extender.verbs["prioritize"] = lambda _: {"nodeScore": None, "errorMessage": "model not loaded"}
    entry = extender_entry(extender.url, **{"extender.prioritizeVerb": "prioritize", "extender.ignorable": True})
    assert placed(cycle(NODES + one_pod(), "allocate", ["predicates", entry])) == {}


def test_managed_resources_limit_who_is_asked(extender: Extender) -> None:
    extender.verbs["predicate"] = lambda _: {"status": "refused"}
    entry = extender_entry(extender.url, **PREDICATE, **{"extender.managedResources": ["example.com/licence"]})
    session = cycle(NODES + one_pod(), "allocate", ["predicates", entry])
    assert placed(session) == {"p1": "n1"} and extender.calls("predicate") == []


PREEMPT_OBJECTS = [
    vc_node("n1", "2", "4G"),
    vc_queue("default"),
    vc_priority_class("low", 1),
    vc_priority_class("high", 100),
    vc_podgroup("pg-low", "default", "default", 1, None, "Running", priority_class="low"),
    vc_pod("default", "keep", "n1", "Running", R("1", "1G"), "pg-low", priority=1),
    vc_pod("default", "take", "n1", "Running", R("1", "1G"), "pg-low", priority=1),
    vc_podgroup("pg-high", "default", "default", 1, None, "Inqueue", priority_class="high"),
    vc_pod("default", "high", "", "Pending", R("1", "1G"), "pg-high", priority=100),
]


@pytest.mark.parametrize(
    ("answer", "evicted"),
    [
        ({"status": 1, "victims": [{"UID": "default-take"}]}, {"take"}),  # the extender's choice
        ({"status": 0, "victims": []}, {"keep", "take"}),  # abstains: priority decides, one of the two
        ({"status": 1, "victims": []}, set()),  # permits none: its tier has no victims (no later tier votes)
    ],
)
def test_preemptable_votes_in_its_tier(extender: Extender, answer: dict[str, Any], evicted: set[str]) -> None:
    extender.verbs["preemptable"] = lambda _: answer
    entry = extender_entry(extender.url, **{"extender.preemptableVerb": "preemptable"})
    session = cycle(PREEMPT_OBJECTS, "preempt", [entry, "priority"], ["predicates"])
    names = {e.task.name for e in session.evictions}
    assert names <= evicted and len(names) == min(1, len(evicted))
    request = extender.calls("preemptable")[0]
    assert request["evictor"]["Name"] == "high"
    assert {evictee["Name"] for evictee in request["evictees"]} == {"keep", "take"}


def test_a_failed_preemptable_call_leaves_the_choice_to_a_later_tier() -> None:
    """Volcano answers Permit (ignorable) or Reject without victims: either ends the extender's
    tier with none, and the next tier's plugins choose."""
    entry = extender_entry(closed_port(), **{"extender.preemptableVerb": "preemptable", "extender.ignorable": True})
    session = cycle(PREEMPT_OBJECTS, "preempt", [entry], ["priority", "predicates"])
    assert len(session.evictions) == 1


@pytest.mark.parametrize(("status", "admitted"), [(1, True), (0, True), (-1, False)])
def test_job_enqueueable(extender: Extender, status: int, admitted: bool) -> None:
    extender.verbs["jobEnqueueable"] = lambda _: {"status": status}
    objects = [
        NODES[0],
        vc_queue("default"),
        vc_podgroup("pg", "default", "default", 1, None, "Pending"),
        vc_pod("default", "p", "", "Pending", R("1", "1G"), "pg"),
    ]
    objects[2]["spec"]["minResources"] = R("1", "1G")  # without it a PodGroup is admitted unasked
    entry = extender_entry(extender.url, **{"extender.jobEnqueueableVerb": "jobEnqueueable"})
    session = cycle(objects, "enqueue", [entry])
    assert (session.jobs["default/pg"].phase.value == "Inqueue") is admitted
    assert extender.calls("jobEnqueueable")[0]["job"]["UID"] == "default/pg"


def test_session_open_and_close_verbs(extender: Extender) -> None:
    extender.verbs["open"] = lambda _: {}
    extender.verbs["close"] = lambda _: {}
    entry = extender_entry(
        extender.url, **{"extender.onSessionOpenVerb": "open", "extender.onSessionCloseVerb": "close"}
    )
    revocable = vc_node("n4", "4", "8G", labels={"volcano.sh/revocable-zone": "rz1"})
    session = cycle([*NODES, revocable, *one_pod()], "allocate", ["predicates", entry])
    opened = extender.calls("open")[0]
    assert opened["NodeList"] == ["n1", "n2", "n3", "n4"] and set(opened["Jobs"]) == {"default/pg-p1"}
    assert list(opened["RevocableNodes"]) == ["n4"]
    assert opened["Queues"]["default"]["Name"] == "default"
    assert extender.calls("close") == [{}]
    assert session.read_reports  # asked outside: the loop does not skip the next cycle as idle


# -- an extender that fails -------------------------------------------------------------------------


@pytest.mark.parametrize(("ignorable", "placed_on"), [(True, {"p1": "n1"}), (False, {})])
def test_unreachable_extender(caplog: pytest.LogCaptureFixture, ignorable: bool, placed_on: dict[str, str]) -> None:
    url = closed_port()
    entry = extender_entry(url, **PREDICATE, **{"extender.ignorable": ignorable})
    with caplog.at_level(logging.WARNING, "lahar.scheduler.extender"):
        session = cycle(NODES + one_pod(), "allocate", ["predicates", entry])
    assert placed(session) == placed_on
    consequence = "ignorable, so nodes pass its predicate" if ignorable else "not ignorable, so nodes are refused"
    first = [r.getMessage() for r in caplog.records if r.getMessage().startswith("extender predicateVerb failed")]
    assert len(first) == 1 and url in first[0] and consequence in first[0]
    # Counted on every call; asked once only: the rest of the session does not try again.
    calls, failures = (
        session.outside_calls[("extender", "predicate")],
        session.outside_failures[("extender", "predicate")],
    )
    assert calls == failures >= 3
    metrics = SchedulerMetrics()
    metrics.observe_session(0.01, 0.0, session)
    failed = metrics.registry.get_sample_value(
        "lahar_scheduler_outside_calls_total", {"plugin": "extender", "call": "predicate", "result": "failed"}
    )
    assert failed == failures


def test_slow_extender_times_out(extender: Extender) -> None:
    release = threading.Event()

    def slow(_: dict[str, Any]) -> Any:
        release.wait(2.0)
        return {"status": ""}

    extender.verbs["predicate"] = slow
    entry = extender_entry(extender.url, **PREDICATE, **{"extender.httpTimeout": "100ms", "extender.ignorable": True})
    try:
        session = cycle(NODES + one_pod(), "allocate", ["predicates", entry])
    finally:
        release.set()
    assert placed(session) == {"p1": "n1"}
    # One call waited out the timeout; the others were not made.
    assert len(extender.calls("predicate")) == 1 and session.outside_failures[("extender", "predicate")] == 3


@pytest.mark.parametrize("reply", [(500, b"{}"), (200, b"not json")], ids=["http-500", "not-json"])
def test_a_bad_answer_fails_the_call_but_not_the_extender(extender: Extender, reply: tuple[int, bytes]) -> None:
    extender.verbs["predicate"] = lambda _: reply
    entry = extender_entry(extender.url, **PREDICATE)
    session = cycle(NODES + one_pod(), "allocate", ["predicates", entry])
    assert placed(session) == {}
    # Reachable: every node is asked (and asked again when the session explains the refusal).
    assert {request["node"]["Name"] for request in extender.calls("predicate")} == {"n1", "n2", "n3"}


def test_session_open_failure_of_a_strict_extender_registers_nothing(extender: Extender) -> None:
    extender.verbs["open"] = lambda _: (503, b"")
    extender.verbs["predicate"] = lambda _: {"status": "refused"}
    entry = extender_entry(extender.url, **PREDICATE, **{"extender.onSessionOpenVerb": "open"})
    assert placed(cycle(NODES + one_pod(), "allocate", ["predicates", entry])) == {"p1": "n1"}
    assert extender.calls("predicate") == []


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({}, "'extender.urlPrefix' is required"),
        ({"extender.urlPrefix": "127.0.0.1:80"}, "http:// or https:// URL"),
        ({"extender.urlPrefix": "http://127.0.0.1:notaport"}, "bad port"),
        ({"extender.urlPrefix": "http://x", "extender.httpTimeout": "soon"}, "duration"),
        ({"extender.urlPrefix": "http://x", "extender.httpTimeout": "0s"}, "positive"),
        ({"extender.urlPrefix": "http://x", "extender.ignorable": "perhaps"}, "true or false"),
        ({"extender.urlPrefix": "http://x", "extender.predicateVerb": ""}, "path segment"),
        ({"extender.urlPrefix": "http://x", "extender.managedResources": [1]}, "list of resource names"),
    ],
)
def test_bad_arguments_refuse_the_configuration(arguments: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ConfError, match="extender") as raised:
        conf("allocate", [{"name": "extender", "arguments": arguments}])
    assert complaint in str(raised.value)


@pytest.mark.parametrize(
    ("answer", "ignorable", "placed_on"),
    [
        ({"errorMessage": ""}, False, {"p1": "n1"}),
        ({"errorMessage": "quota of licences spent"}, True, {}),  # a message refuses, ignorable or not
        ((500, b""), True, {"p1": "n1"}),  # a failed call: kept when ignorable
        ((500, b""), False, {}),
    ],
    ids=["accepted", "refused", "failed-ignorable", "failed-strict"],
)
def test_allocate_func_may_undo_a_placement(
    extender: Extender, answer: Any, ignorable: bool, placed_on: dict[str, str]
) -> None:
    extender.verbs["allocate"] = lambda _: answer
    extender.verbs["deallocate"] = lambda _: {}
    verbs = {"extender.allocateFuncVerb": "allocate", "extender.deallocateFuncVerb": "deallocate"}
    entry = extender_entry(extender.url, **verbs, **{"extender.ignorable": ignorable})
    session = cycle(NODES + one_pod(), "allocate", ["gang"], ["predicates", entry])
    assert placed(session) == placed_on
    assert extender.calls("allocate")[0]["task"]["NodeName"] == "n1"
    # An undone placement is told to the extender too, as Volcano's rollback does.
    assert len(extender.calls("deallocate")) == (0 if placed_on else 1)
    if not placed_on:
        assert "refused at placement: extender:" in session.jobs["default/pg-p1"].unschedulable_message


def test_a_refused_task_leaves_the_others_placed(extender: Extender) -> None:
    extender.verbs["allocate"] = lambda request: (
        {"errorMessage": "not this one"} if request["task"]["Name"] == "p2" else {}
    )
    objects = NODES + one_pod("p1") + one_pod("p2") + one_pod("p3")
    entry = extender_entry(extender.url, **{"extender.allocateFuncVerb": "allocate"})
    session = cycle(objects, "allocate, backfill", ["predicates", entry])
    assert set(placed(session)) == {"p1", "p3"}


def test_a_refused_pipeline_evicts_nothing(extender: Extender) -> None:
    extender.verbs["allocate"] = lambda _: {"errorMessage": "no"}
    entry = extender_entry(extender.url, **{"extender.allocateFuncVerb": "allocate"})
    session = cycle(PREEMPT_OBJECTS, "preempt", ["priority", entry], ["predicates"])
    assert session.evictions == [] and session.pipelined == []
    # Told of the pipelined preemptor, then (as Volcano's unevict does) of the victim restored.
    told = [request["task"]["Name"] for request in extender.calls("allocate")]
    assert told[0] == "high" and len(told) == 2 and told[1] in ("keep", "take")
