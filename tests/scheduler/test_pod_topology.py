"""Constraints between pods, honoured (issue 17, "nothing silently violated"): required pod affinity
and anti-affinity (an existing pod's anti-affinity included), topology spread constraints, host
ports, the preferred forms as scores, and what cannot be read refused with a message."""

from __future__ import annotations

from typing import Any

from lahar.scheduler.framework.session import Session
from tests.scheduler import cluster_fixtures as fx

Obj = dict[str, Any]
HOST = "kubernetes.io/hostname"
TIERS = (["priority", "gang"], ["predicates", "nodeorder"])


def labelled(obj: Obj, **labels: str) -> Obj:
    obj["metadata"]["labels"] = dict(labels)
    return obj


def zoned(name: str, zone: str, cpu: str = "8") -> Obj:
    return fx.node(name, cpu=cpu, labels={"zone": zone, HOST: name})


def term(key: str, **match: str) -> Obj:
    return {"labelSelector": {"matchLabels": dict(match)}, "topologyKey": key}


def anti(key: str, **match: str) -> Obj:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(key, **match)]}}


def near(key: str, **match: str) -> Obj:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(key, **match)]}}


def spread(obj: Obj, key: str = "zone", skew: int = 1, when: str = "DoNotSchedule", **extra: Any) -> Obj:
    obj["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": skew,
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": dict(obj["metadata"].get("labels") or {})},
            **extra,
        }
    ]
    return obj


def member(name: str, group: str, affinity: Obj | None = None, **labels: str) -> Obj:
    return labelled(fx.pod(name, group=group, affinity=affinity), **labels)


def placed_in(session: Session, zone_of: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in fx.placed(session).values():
        counts[zone_of[node]] = counts.get(zone_of[node], 0) + 1
    return counts


def cycle(objects: list[Any], actions: str = "allocate") -> Session:
    return fx.cycle(objects, actions, TIERS)


# -- pod anti-affinity ------------------------------------------------------------------------------


def test_a_gang_with_anti_affinity_takes_one_node_each_or_waits() -> None:
    nodes = [zoned(f"n{i}", "a") for i in range(3)]
    members = [member(f"db-{i}", "db", anti(HOST, app="db"), app="db") for i in range(3)]
    session = cycle([*nodes, fx.podgroup("db", 3), *members])
    assert sorted(fx.placed(session).values()) == ["n0", "n1", "n2"]
    # Two nodes for three members: not placed two on one node; the gang says why.
    session = cycle([*nodes[:2], fx.podgroup("db", 3), *members])
    assert fx.placed(session) == {}
    # The members placed first carry the term too: kube-scheduler's wording for their refusal.
    assert "didn't satisfy existing pods anti-affinity rules" in session.jobs["default/db"].unschedulable_message


def test_zone_anti_affinity_spreads_a_gang_over_zones_within_one_cycle() -> None:
    nodes = [zoned("a1", "a"), zoned("a2", "a"), zoned("b1", "b"), zoned("b2", "b")]
    members = [member(f"w-{i}", "w", anti("zone", app="w"), app="w") for i in range(2)]
    session = cycle([*nodes, fx.podgroup("w", 2), *members])
    assert placed_in(session, {"a1": "a", "a2": "a", "b1": "b", "b2": "b"}) == {"a": 1, "b": 1}
    third = [*members, member("w-2", "w", anti("zone", app="w"), app="w")]
    assert fx.placed(cycle([*nodes, fx.podgroup("w", 3), *third])) == {}


def test_an_existing_pods_anti_affinity_keeps_the_pods_it_selects_away() -> None:
    guard = labelled(fx.pod("guard", node_name="n1", phase="Running", affinity=anti(HOST, app="web")), app="guard")
    # The web pod goes first (older); the other pod has the same placement class but for its
    # labels, so answers cached for the class must not carry the guard's refusal over to it.
    web = labelled(fx.pod("web", created="2023-01-01T00:00:00Z"), app="web")
    other = labelled(fx.pod("other"), app="batch")
    nodes = [zoned("n1", "a", cpu="64"), *(zoned(f"n{i}", "a", cpu="2") for i in range(2, 7))]
    placed = fx.placed(cycle([*nodes, guard, web, other]))
    assert placed["web"] != "n1"  # n1 is emptiest, but the guard refuses web pods
    assert placed["other"] == "n1"


# -- pod affinity -----------------------------------------------------------------------------------


def test_required_affinity_keeps_to_the_zone_of_the_pods_it_selects() -> None:
    cache = labelled(fx.pod("cache", node_name="a1", phase="Running"), app="cache")
    client = fx.pod("client", affinity=near("zone", app="cache"))
    nodes = [zoned("a1", "a", cpu="2"), zoned("a2", "a", cpu="2"), zoned("b1", "b", cpu="64")]
    assert fx.placed(cycle([*nodes, cache, client])) in ({"client": "a1"}, {"client": "a2"})
    lonely = cycle([*nodes, client])  # nothing it wants to be near, and it is not such a pod itself
    assert fx.placed(lonely) == {}
    assert "didn't match pod affinity rules" in lonely.jobs["default/client"].unschedulable_message


def test_the_first_pod_of_a_group_that_wants_to_be_together_may_go_anywhere() -> None:
    nodes = [zoned("a1", "a"), zoned("b1", "b")]
    members = [member(f"t-{i}", "t", near("zone", app="t"), app="t") for i in range(3)]
    session = cycle([*nodes, fx.podgroup("t", 3), *members])
    assert len(fx.placed(session)) == 3 and len(set(fx.placed(session).values())) == 1


# -- topology spread --------------------------------------------------------------------------------


def test_spread_evens_out_zones_counting_existing_pods() -> None:
    nodes = [zoned("a1", "a"), zoned("b1", "b")]
    existing = [labelled(fx.pod(f"old-{i}", node_name="a1", phase="Running"), app="s") for i in range(2)]
    members = [spread(member(f"s-{i}", "s", app="s")) for i in range(4)]
    session = cycle([*nodes, *existing, fx.podgroup("s", 4), *members])
    assert placed_in(session, {"a1": "a", "b1": "b"}) == {"a": 1, "b": 3}  # 3 and 3 in the end


def test_spread_refuses_nodes_without_the_key_and_honours_min_domains() -> None:
    nodes = [zoned("a1", "a"), fx.node("bare")]
    one = spread(labelled(fx.pod("one"), app="m"))
    assert fx.placed(cycle([*nodes, one])) == {"one": "a1"}
    # minDomains 2 with one zone: the minimum counts as 0, so a zone holds at most maxSkew pods.
    members = [spread(member(f"m-{i}", "m", app="m"), minDomains=2) for i in range(2)]
    session = cycle([*nodes, fx.podgroup("m", 1), *members])
    assert len(fx.placed(session)) == 1


def test_schedule_anyway_spread_is_a_preference() -> None:
    nodes = [zoned("a1", "a"), zoned("b1", "b")]
    existing = labelled(fx.pod("old", node_name="a1", phase="Running"), app="p")
    soft = spread(labelled(fx.pod("soft"), app="p"), when="ScheduleAnyway")
    assert fx.placed(cycle([*nodes, existing, soft])) == {"soft": "b1"}
    crowded = [zoned("a1", "a"), zoned("b1", "b", cpu="500m")]  # b has no room: placed anyway
    assert fx.placed(cycle([*crowded, existing, soft])) == {"soft": "a1"}


# -- host ports -------------------------------------------------------------------------------------


def ported(name: str, port: int, ip: str = "") -> Obj:
    obj = fx.pod(name)
    spec_port: Obj = {"containerPort": 80, "hostPort": port}
    if ip:
        spec_port["hostIP"] = ip
    obj["spec"]["containers"][0]["ports"] = [spec_port]
    return obj


def test_a_host_port_is_taken_once_per_node() -> None:
    node = zoned("n1", "a")
    session = cycle([node, ported("p1", 8080), ported("p2", 8080), ported("p3", 9090)])
    assert sorted(fx.placed(session)) in (["p1", "p3"], ["p2", "p3"])
    held = ported("held", 8080, "10.0.0.1")
    held["spec"]["nodeName"], held["status"]["phase"] = "n1", "Running"
    assert fx.placed(cycle([node, held, ported("other-ip", 8080, "10.0.0.2")])) == {"other-ip": "n1"}
    assert fx.placed(cycle([node, held, ported("any-ip", 8080)])) == {}


# -- preferences ------------------------------------------------------------------------------------


def test_preferred_anti_affinity_scores_nodes_with_the_pods_it_avoids_lower() -> None:
    existing = labelled(fx.pod("noisy", node_name="n1", phase="Running"), app="noisy")
    preferred = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term(HOST, app="noisy")}
            ]
        }
    }
    quiet = fx.pod("quiet", affinity=preferred)
    nodes = [zoned("n1", "a", cpu="64"), zoned("n2", "a", cpu="8")]
    assert fx.placed(cycle([*nodes, existing, quiet])) == {"quiet": "n2"}


# -- what cannot be honoured -------------------------------------------------------------------------


def test_a_malformed_term_is_refused_with_a_message_and_the_rest_is_scheduled() -> None:
    bad = fx.pod(
        "bad",
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}, "topologyKey": "z"}
                ]
            }
        },
    )
    no_key = fx.pod("no-key", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}})
    session = cycle([zoned("n1", "a"), bad, no_key, fx.pod("fine")])
    assert fx.placed(session) == {"fine": "n1"}
    assert "'Near' is not a valid label selector operator" in session.jobs["default/bad"].unschedulable_message
    assert "topologyKey is required" in session.jobs["default/no-key"].unschedulable_message


def test_a_namespace_selector_is_refused_as_unsupported() -> None:
    selecting = term(HOST, app="x")
    selecting["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    pod = fx.pod("ns", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [selecting]}})
    session = cycle([zoned("n1", "a"), pod])
    assert fx.placed(session) == {}
    refused = [e for e in session.events if e.reason == "UnsupportedConstraint"]
    assert len(refused) == 1 and "namespaceSelector" in refused[0].message
