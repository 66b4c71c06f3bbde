"""Label and field selectors: every syntax form and operator both ways, and every error path."""

from __future__ import annotations

import pytest

from lahar.api.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    label_selector_from_dict,
    parse_field_selector,
    parse_label_selector,
)

WEB = {"app": "web", "tier": "frontend", "app.kubernetes.io/name": "shop", "empty": ""}


# --- label selector: string syntax -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("app=web", True),
        ("app=db", False),
        ("app==web", True),
        ("app==db", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=web", True),  # "!=" matches objects without the label
        ("app in (db,web)", True),
        ("app in (db,cache)", False),
        ("missing in (web)", False),
        ("app notin (db,cache)", True),
        ("app notin (db, web)", False),
        ("missing notin (web)", True),  # "notin" matches objects without the label
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("app.kubernetes.io/name=shop", True),
        ("app.kubernetes.io/name=other", False),
        ("empty=", True),
        ("app=", False),
        ("missing=", False),
        ("app=web,tier=frontend", True),
        ("app=web,tier=backend", False),
        ("app=web,tier in (frontend),!canary,empty", True),
        ("  app = web ,  tier   in(frontend , x)  ", True),
        ("app in (web,)", True),
        ("empty in (,x)", True),
    ],
)
def test_label_selector_string_forms(text: str, matches: bool) -> None:
    assert parse_label_selector(text).matches(WEB) is matches


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_label_selector_matches_everything(text: str) -> None:
    selector = parse_label_selector(text)
    assert selector.empty
    assert selector.matches(WEB)
    assert selector.matches(None)
    assert str(selector) == ""


def test_label_selector_on_object_without_labels() -> None:
    assert parse_label_selector("!app").matches(None)
    assert parse_label_selector("app!=web").matches(None)
    assert not parse_label_selector("app").matches(None)
    assert not parse_label_selector("app=web").matches({})


def test_label_selector_str_is_canonical_and_reparses() -> None:
    selector = parse_label_selector("tier notin (b, a),app==web, !canary , zone, x!=y, e=")
    assert str(selector) == "app=web,!canary,e=,tier notin (a,b),x!=y,zone"
    assert parse_label_selector(str(selector)) == selector
    assert not selector.empty


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("app in ()", "values set can't be empty"),
        ("app in (web", "found 'end of string', expected: ',' or ')'"),
        ("app in web", "found 'web', expected: '('"),
        ("app web", "found 'web', expected: '=', '!=', '==', 'in', 'notin', ',' or end of string"),
        ("app=web,", "found 'end of string', expected: label key"),
        (",app", "found ',', expected: label key"),
        ("=web", "found '=', expected: label key"),
        ("app=(web)", "found '(', expected: label value, ',' or end of string"),
        ("app=web tier", "found 'tier', expected: ',' or end of string"),
        ("!app=web", "found '=', expected: ',' or end of string"),
        ("Bad_Prefix/app=web", "invalid label key 'Bad_Prefix/app': prefix part must be a lowercase DNS"),
        ("/app", "invalid label key '/app': prefix part must be non-empty"),
        ("example.com/=x", "invalid label key 'example.com/': name part must be non-empty"),
        ("-app=web", "invalid label key '-app': name part must consist of alphanumeric characters"),
        ("a" * 64, "name part must be no more than 63 characters"),
        ("app=-web", "invalid label value '-web': must consist of alphanumeric characters"),
        ("app in (ok, bad value)", "found 'value', expected: ',' or ')'"),
        (f"app={'v' * 64}", "must be no more than 63 characters"),
    ],
)
def test_label_selector_syntax_errors(text: str, problem: str) -> None:
    with pytest.raises(SelectorError) as raised:
        parse_label_selector(text)
    message = str(raised.value)
    assert message.startswith(f"unable to parse label selector {text!r}: ")
    assert problem in message


def test_selector_error_is_a_value_error() -> None:
    assert issubclass(SelectorError, ValueError)


# --- label selector: structured metav1.LabelSelector -----------------------------------------


def test_structured_match_labels() -> None:
    selector = label_selector_from_dict({"matchLabels": {"app": "web", "tier": "frontend"}})
    assert selector.matches(WEB)
    assert not selector.matches({"app": "web"})
    assert str(selector) == "app=web,tier=frontend"


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ({"key": "app", "operator": "In", "values": ["web", "db"]}, True),
        ({"key": "app", "operator": "In", "values": ["db"]}, False),
        ({"key": "app", "operator": "NotIn", "values": ["db"]}, True),
        ({"key": "app", "operator": "NotIn", "values": ["web"]}, False),
        ({"key": "missing", "operator": "NotIn", "values": ["web"]}, True),
        ({"key": "app", "operator": "Exists"}, True),
        ({"key": "missing", "operator": "Exists"}, False),
        ({"key": "missing", "operator": "DoesNotExist"}, True),
        ({"key": "app", "operator": "DoesNotExist", "values": []}, False),
    ],
)
def test_structured_match_expressions(expression: dict[str, object], matches: bool) -> None:
    assert label_selector_from_dict({"matchExpressions": [expression]}).matches(WEB) is matches


def test_structured_labels_and_expressions_are_anded() -> None:
    selector = label_selector_from_dict(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}],
        }
    )
    assert not selector.matches(WEB)
    assert selector.matches({"app": "web", "tier": "db"})


def test_structured_empty_matches_everything_and_none_matches_nothing() -> None:
    everything = label_selector_from_dict({})
    assert everything.empty and everything.matches(WEB) and everything.matches(None)
    assert label_selector_from_dict({"matchLabels": None, "matchExpressions": []}).empty
    nothing = label_selector_from_dict(None)
    assert not nothing.empty
    assert not nothing.matches(WEB)
    assert not nothing.matches(None)
    assert str(nothing) == "<nothing>"
    assert nothing == LabelSelector.nothing()


@pytest.mark.parametrize(
    ("selector", "problem"),
    [
        (
            {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["web"]}]},
            "'Equals' is not a valid label selector operator (key 'app'); "
            "expected one of In, NotIn, Exists, DoesNotExist",
        ),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}, "values set can't be empty"),
        (
            {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]},
            "values must be empty for operator 'Exists'",
        ),
        ({"matchExpressions": [{"operator": "Exists"}]}, "has no key"),
        ({"matchExpressions": ["app"]}, "matchExpressions entry must be an object"),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": "web"}]}, "must be a list of strings"),
        ({"matchLabels": ["app"]}, "matchLabels must be an object"),
        ({"matchLabels": {"app": 1}}, "matchLabels['app'] must be a string"),
        ({"matchLabels": {"bad key": "x"}}, "invalid label key 'bad key'"),
        ({"matchLabels": {"app": "bad value"}}, "invalid label value 'bad value'"),
        ("app=web", "must be an object"),
    ],
)
def test_structured_errors(selector: object, problem: str) -> None:
    with pytest.raises(SelectorError) as raised:
        label_selector_from_dict(selector)  # type: ignore[arg-type]
    assert problem in str(raised.value)


# --- field selectors ----------------------------------------------------------------------------

POD = {
    "metadata": {"name": "web-0", "namespace": "shop"},
    "spec": {"nodeName": "node-1", "restartPolicy": "Always"},
    "status": {"phase": "Running"},
}
UNBOUND_POD = {"metadata": {"name": "web-1", "namespace": "shop"}, "spec": {}, "status": {"phase": "Pending"}}
POD_FIELDS = ("spec.nodeName", "status.phase", "spec.restartPolicy")


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("metadata.name=web-0", True),
        ("metadata.name=web-1", False),
        ("metadata.name==web-0", True),
        ("metadata.name==web-1", False),
        ("metadata.name!=web-1", True),
        ("metadata.name!=web-0", False),
        ("metadata.namespace=shop", True),
        ("spec.nodeName=node-1,status.phase=Running", True),
        ("spec.nodeName=node-1,status.phase!=Running", False),
        ("spec.nodeName=", False),
        ("spec.nodeName!=", True),
        (" status.phase = Running ", True),
        ("metadata.name=web-0,,status.phase=Running", True),
    ],
)
def test_field_selector_forms(text: str, matches: bool) -> None:
    assert parse_field_selector(text, POD_FIELDS).matches(POD) is matches


def test_missing_field_reads_as_empty_string() -> None:
    unbound = parse_field_selector("spec.nodeName=", POD_FIELDS)
    assert unbound.matches(UNBOUND_POD)
    assert not unbound.matches(POD)
    assert parse_field_selector("spec.nodeName!=node-1", POD_FIELDS).matches(UNBOUND_POD)


def test_field_selector_reads_nested_and_non_string_fields() -> None:
    event = {"involvedObject": {"name": "web-0", "kind": "Pod"}, "count": 3}
    assert parse_field_selector("involvedObject.name=web-0", ["involvedObject.name"]).matches(event)
    assert not parse_field_selector("involvedObject.kind=Node", ["involvedObject.kind"]).matches(event)
    node = {"spec": {"unschedulable": True}}
    assert parse_field_selector("spec.unschedulable=true", ["spec.unschedulable"]).matches(node)
    assert parse_field_selector("spec.unschedulable!=true", ["spec.unschedulable"]).matches({"spec": {}})
    assert parse_field_selector("count=3", ["count"]).matches(event)
    # A path through a non-object reads as missing.
    assert parse_field_selector("count.value=", ["count.value"]).matches(event)


def test_field_selector_escapes() -> None:
    selector = parse_field_selector(r"metadata.name=a\,b\=c\\d,status.phase=Running", POD_FIELDS)
    assert selector.requirements[0].value == "a,b=c\\d"
    assert selector.matches({"metadata": {"name": "a,b=c\\d"}, "status": {"phase": "Running"}})
    assert not selector.matches({"metadata": {"name": "a"}, "status": {"phase": "Running"}})
    assert str(selector) == r"metadata.name=a\,b\=c\\d,status.phase=Running"
    assert parse_field_selector(str(selector), POD_FIELDS) == selector


def test_empty_field_selector() -> None:
    selector = parse_field_selector("", POD_FIELDS)
    assert selector.empty
    assert selector.matches(POD)
    assert str(selector) == ""
    assert FieldSelector().empty
    assert not parse_field_selector("metadata.name=x", ()).empty


def test_field_selector_exact_match() -> None:
    selector = parse_field_selector("status.phase!=Failed,spec.nodeName==node-1", POD_FIELDS)
    assert selector.exact_match("spec.nodeName") == "node-1"
    assert selector.exact_match("status.phase") is None
    assert selector.exact_match("metadata.name") is None
    assert str(selector) == "status.phase!=Failed,spec.nodeName=node-1"


def test_always_allowed_fields_need_no_allow_list() -> None:
    assert parse_field_selector("metadata.name=web-0,metadata.namespace=shop", []).matches(POD)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("spec.schedulerName=lahar", "field label not supported: spec.schedulerName"),
        ("metadata.labels=x", "field label not supported: metadata.labels"),
        ("status.phase", "invalid field selector 'status.phase': can't understand 'status.phase'"),
        ("=Running", "invalid field selector '=Running': missing field name in '=Running'"),
        ("status.phase=a=b", "invalid field selector 'status.phase=a=b': unescaped character in value: ="),
        (r"status.phase=a\n", r"invalid field selector 'status.phase=a\\n': invalid escape sequence: \n"),
        ("status.phase=a\\", "invalid field selector 'status.phase=a\\\\': invalid escape sequence: \\"),
    ],
)
def test_field_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as raised:
        parse_field_selector(text, POD_FIELDS)
    assert str(raised.value) == message
