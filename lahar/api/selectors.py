"""Kubernetes label and field selectors, as the embedded API server and the agent's QoS configuration evaluate them.

Two syntaxes arrive here:

* the string form of the ``labelSelector`` / ``fieldSelector`` query parameters
  (``app=web,tier in (a,b),!canary`` and ``spec.nodeName=node-1,status.phase!=Failed``);
* the structured ``metav1.LabelSelector`` held inside objects (``PodDisruptionBudget.spec.selector``).

Both parse into immutable selector objects with ``.matches(...)``, ``.empty`` and a canonical
``str()``.  Invalid input raises :class:`SelectorError`, which the server turns into a 400
BadRequest carrying the message, so every message quotes the selector and names the problem.

Semantics follow k8s.io/apimachinery: ``a!=b`` and ``a notin (...)`` also match objects that do
not carry label ``a`` at all, and a field that is missing from an object reads as ``""`` (so
``spec.nodeName=`` selects pods that are not bound yet).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from lahar.api.errors import Field


class SelectorError(ValueError):
    """A selector that cannot be parsed or is not allowed; the server answers 400 BadRequest."""


# --------------------------------------------------------------------------------------------
# Label keys and values (k8s.io/apimachinery/pkg/util/validation)
# --------------------------------------------------------------------------------------------

_NAME_MAX = 63
_PREFIX_MAX = 253
_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (``[prefix/]name``), or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"invalid label key {key!r}: prefix part must be non-empty"
    if slash and (len(prefix) > _PREFIX_MAX or not _DNS_SUBDOMAIN_RE.match(prefix)):
        return f"invalid label key {key!r}: prefix part must be a lowercase DNS subdomain"
    if not name:
        return f"invalid label key {key!r}: name part must be non-empty"
    if len(name) > _NAME_MAX:
        return f"invalid label key {key!r}: name part must be no more than {_NAME_MAX} characters"
    if not _NAME_RE.match(name):
        return (
            f"invalid label key {key!r}: name part must consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return None


def _label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value (empty is valid), or None when it is."""
    if value == "":
        return None
    if len(value) > _NAME_MAX:
        return f"invalid label value {value!r}: must be no more than {_NAME_MAX} characters"
    if not _NAME_RE.match(value):
        return (
            f"invalid label value {value!r}: must consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return None


# --------------------------------------------------------------------------------------------
# Label selectors
# --------------------------------------------------------------------------------------------


class LabelOperator(StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclass(frozen=True)
class LabelRequirement:
    """One ANDed term of a label selector; ``values`` is sorted and free of duplicates."""

    key: str
    operator: LabelOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has_key = self.key in labels
        match self.operator:
            case LabelOperator.EXISTS:
                return has_key
            case LabelOperator.DOES_NOT_EXIST:
                return not has_key
            case LabelOperator.EQUALS | LabelOperator.IN:
                return has_key and labels[self.key] in self.values
            case LabelOperator.NOT_EQUALS | LabelOperator.NOT_IN:
                # k8s semantics: an object without the label satisfies "!=" and "notin".
                return not has_key or labels[self.key] not in self.values
        raise AssertionError(self.operator)

    def __str__(self) -> str:
        match self.operator:
            case LabelOperator.EXISTS:
                return self.key
            case LabelOperator.DOES_NOT_EXIST:
                return f"!{self.key}"
            case LabelOperator.EQUALS | LabelOperator.NOT_EQUALS:
                return f"{self.key}{self.operator}{self.values[0]}"
            case _:
                return f"{self.key} {self.operator} ({','.join(self.values)})"


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of label requirements.

    ``matches_nothing`` marks the selector a ``None`` structured selector stands for: it selects
    no object at all and has no string form (``str()`` gives ``<nothing>``, which does not parse).
    """

    requirements: tuple[LabelRequirement, ...] = ()
    matches_nothing: bool = False

    @classmethod
    def everything(cls) -> LabelSelector:
        return cls()

    @classmethod
    def nothing(cls) -> LabelSelector:
        return cls(matches_nothing=True)

    @property
    def empty(self) -> bool:
        """True when the selector matches every object."""
        return not self.requirements and not self.matches_nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.matches_nothing:
            return False
        present = labels or {}
        return all(requirement.matches(present) for requirement in self.requirements)

    def __str__(self) -> str:
        if self.matches_nothing:
            return "<nothing>"
        return ",".join(str(requirement) for requirement in self.requirements)


def _make_requirement(key: str, operator: LabelOperator, values: Iterable[str]) -> LabelRequirement:
    """Build a requirement, or return the problem description through SelectorError."""
    problem = _label_key_problem(key)
    if problem:
        raise SelectorError(problem)
    unique_values = tuple(sorted(set(values)))
    for value in unique_values:
        problem = _label_value_problem(value)
        if problem:
            raise SelectorError(problem)
    if operator in (LabelOperator.IN, LabelOperator.NOT_IN) and not unique_values:
        raise SelectorError(f"for 'in', 'notin' operators, values set can't be empty (key {key!r})")
    return LabelRequirement(key, operator, unique_values)


def _sorted_selector(requirements: Iterable[LabelRequirement]) -> LabelSelector:
    # Sorted by key (stable), like apimachinery, so str() is canonical.
    return LabelSelector(tuple(sorted(requirements, key=lambda requirement: requirement.key)))


# --- string syntax ----------------------------------------------------------------------------


class _Token(StrEnum):
    IDENTIFIER = "identifier"
    NOT = "!"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    OPEN = "("
    CLOSE = ")"
    COMMA = ","
    END = "end of string"


# Longest first, so "!=" and "==" win over "!" and "=".
_SYMBOLS: tuple[tuple[str, _Token], ...] = (
    ("!=", _Token.NOT_EQUALS),
    ("==", _Token.DOUBLE_EQUALS),
    ("!", _Token.NOT),
    ("=", _Token.EQUALS),
    ("(", _Token.OPEN),
    (")", _Token.CLOSE),
    (",", _Token.COMMA),
)
_IDENTIFIER_RE = re.compile(r"[^\s!=(),]+")


def _tokenize(text: str) -> list[tuple[_Token, str]]:
    tokens: list[tuple[_Token, str]] = []
    position = 0
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        symbol = next(((s, t) for s, t in _SYMBOLS if text.startswith(s, position)), None)
        if symbol:
            tokens.append((symbol[1], symbol[0]))
            position += len(symbol[0])
            continue
        identifier = _IDENTIFIER_RE.match(text, position)
        assert identifier is not None  # every other character starts an identifier
        tokens.append((_Token.IDENTIFIER, identifier.group()))
        position = identifier.end()
    tokens.append((_Token.END, ""))
    return tokens


class _LabelSelectorParser:
    """Recursive descent over the token list; grammar of apimachinery's labels.Parse:

    selector    := <empty> | requirement ("," requirement)*
    requirement := "!" KEY | KEY | KEY ("=" | "==" | "!=") [VALUE]
                 | KEY ("in" | "notin") "(" [VALUE] ("," [VALUE])* ")"
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.position = 0

    def parse(self) -> LabelSelector:
        if self._peek()[0] is _Token.END:
            return LabelSelector.everything()
        requirements = [self._requirement()]
        while self._peek()[0] is _Token.COMMA:
            self._next()
            requirements.append(self._requirement())
        self._expect_end_of_requirement()
        return _sorted_selector(requirements)

    def _requirement(self) -> LabelRequirement:
        token, literal = self._peek()
        if token is _Token.NOT:
            self._next()
            return self._build(self._key(), LabelOperator.DOES_NOT_EXIST, ())
        key = self._key()
        token, literal = self._peek()
        if token in (_Token.COMMA, _Token.END):
            return self._build(key, LabelOperator.EXISTS, ())
        if token in (_Token.EQUALS, _Token.DOUBLE_EQUALS, _Token.NOT_EQUALS):
            self._next()
            operator = LabelOperator.NOT_EQUALS if token is _Token.NOT_EQUALS else LabelOperator.EQUALS
            return self._build(key, operator, (self._optional_value(),))
        if token is _Token.IDENTIFIER and literal in ("in", "notin"):
            self._next()
            operator = LabelOperator.IN if literal == "in" else LabelOperator.NOT_IN
            return self._build(key, operator, self._value_set())
        self._fail(f"found '{literal or token}', expected: '=', '!=', '==', 'in', 'notin', ',' or end of string")

    def _key(self) -> str:
        token, literal = self._next()
        if token is not _Token.IDENTIFIER:
            self._fail(f"found '{literal or token}', expected: label key")
        return literal

    def _optional_value(self) -> str:
        token, literal = self._peek()
        if token is _Token.IDENTIFIER:
            self._next()
            return literal
        if token in (_Token.COMMA, _Token.END):
            return ""  # "a=" selects an empty value
        self._fail(f"found '{literal}', expected: label value, ',' or end of string")

    def _value_set(self) -> list[str]:
        token, literal = self._next()
        if token is not _Token.OPEN:
            self._fail(f"found '{literal or token}', expected: '('")
        if self._peek()[0] is _Token.CLOSE:
            self._fail("values set can't be empty")
        values: list[str] = []
        while True:
            token, literal = self._peek()
            if token is _Token.IDENTIFIER:
                self._next()
                values.append(literal)
            else:
                values.append("")  # "(a,)" holds the empty value, as in apimachinery
            token, literal = self._next()
            if token is _Token.CLOSE:
                return values
            if token is not _Token.COMMA:
                self._fail(f"found '{literal or token}', expected: ',' or ')'")

    def _expect_end_of_requirement(self) -> None:
        token, literal = self._peek()
        if token is not _Token.END:
            self._fail(f"found '{literal}', expected: ',' or end of string")

    def _build(self, key: str, operator: LabelOperator, values: Iterable[str]) -> LabelRequirement:
        try:
            return _make_requirement(key, operator, values)
        except SelectorError as error:
            self._fail(str(error))

    def _peek(self) -> tuple[_Token, str]:
        return self.tokens[self.position]

    def _next(self) -> tuple[_Token, str]:
        token = self.tokens[self.position]
        self.position = min(self.position + 1, len(self.tokens) - 1)
        return token

    def _fail(self, problem: str) -> NoReturn:
        raise SelectorError(f"unable to parse label selector {self.text!r}: {problem}")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the ``labelSelector`` query-parameter syntax; an empty string matches everything."""
    return _LabelSelectorParser(text).parse()


# --- structured metav1.LabelSelector ---------------------------------------------------------

_EXPRESSION_OPERATORS: dict[str, LabelOperator] = {
    "In": LabelOperator.IN,
    "NotIn": LabelOperator.NOT_IN,
    "Exists": LabelOperator.EXISTS,
    "DoesNotExist": LabelOperator.DOES_NOT_EXIST,
}


def label_selector_from_dict(selector: Mapping[str, Any] | None) -> LabelSelector:
    """Convert a structured ``metav1.LabelSelector`` (``matchLabels`` + ``matchExpressions``).

    As in apimachinery's LabelSelectorAsSelector: ``{}`` (no requirements) matches everything,
    while ``None`` (no selector at all) matches nothing.
    """
    if selector is None:
        return LabelSelector.nothing()
    if not isinstance(selector, Mapping):
        raise SelectorError(f"invalid label selector {selector!r}: must be an object")
    requirements = [
        *_match_labels_requirements(selector.get("matchLabels") or {}),
        *(_expression_requirement(expression) for expression in selector.get("matchExpressions") or []),
    ]
    return _sorted_selector(requirements)


def _match_labels_requirements(match_labels: Any) -> list[LabelRequirement]:
    if not isinstance(match_labels, Mapping):
        raise SelectorError(f"invalid label selector: matchLabels must be an object, got {match_labels!r}")
    requirements = []
    for key, value in match_labels.items():
        if not isinstance(value, str):
            raise SelectorError(f"invalid label selector: matchLabels[{key!r}] must be a string, got {value!r}")
        requirements.append(_make_requirement(key, LabelOperator.EQUALS, (value,)))
    return requirements


def _expression_requirement(expression: Any) -> LabelRequirement:
    if not isinstance(expression, Mapping):
        raise SelectorError(f"invalid label selector: matchExpressions entry must be an object, got {expression!r}")
    key = expression.get("key")
    operator_name = expression.get("operator")
    values = expression.get("values") or []
    if not isinstance(key, str):
        raise SelectorError(f"invalid label selector: matchExpressions entry {dict(expression)!r} has no key")
    operator = _EXPRESSION_OPERATORS.get(operator_name) if isinstance(operator_name, str) else None
    if operator is None:
        raise SelectorError(
            f"invalid label selector: {operator_name!r} is not a valid label selector operator "
            f"(key {key!r}); expected one of {', '.join(_EXPRESSION_OPERATORS)}"
        )
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise SelectorError(f"invalid label selector: values of key {key!r} must be a list of strings")
    if operator in (LabelOperator.EXISTS, LabelOperator.DOES_NOT_EXIST) and values:
        raise SelectorError(
            f"invalid label selector: values must be empty for operator {operator_name!r} (key {key!r})"
        )
    return _make_requirement(key, operator, values)


# --------------------------------------------------------------------------------------------
# Field selectors
# --------------------------------------------------------------------------------------------

ALWAYS_SELECTABLE_FIELDS: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})

# Checked at every position in this order, as apimachinery's splitTerm does.
_FIELD_OPERATORS = ("!=", "==", "=")
_FIELD_ESCAPABLE = frozenset("\\,=")


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    operator: str  # "=" or "!="
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        equal = _field_value(obj, self.field) == self.value
        return equal if self.operator == "=" else not equal

    def __str__(self) -> str:
        return f"{self.field}{self.operator}{_escape_field_value(self.value)}"


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of ``field=value`` / ``field!=value`` terms over dotted object paths."""

    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the selector matches every object."""
        return not self.requirements

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(requirement.matches(obj) for requirement in self.requirements)

    def exact_match(self, field: str) -> str | None:
        """The value ``field`` must equal (``field=value`` term), for index lookups; else None."""
        for requirement in self.requirements:
            if requirement.field == field and requirement.operator == "=":
                return requirement.value
        return None

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


def parse_field_selector(text: str, allowed: Iterable[str] = ()) -> FieldSelector:
    """Parse the ``fieldSelector`` query parameter.

    ``metadata.name`` and ``metadata.namespace`` are always selectable; ``allowed`` adds the
    kind's own fields (``spec.nodeName``, ``status.phase``...). Values may escape ``\\,``,
    ``\\=`` and ``\\\\``. Whitespace around field names and values is ignored.
    """
    selectable = ALWAYS_SELECTABLE_FIELDS | frozenset(allowed)
    requirements = []
    for term in _split_unescaped_commas(text):
        if not term.strip():
            continue  # apimachinery skips empty terms ("a=b,,c=d")
        field, operator, raw_value = _split_field_term(text, term)
        if field not in selectable:
            raise SelectorError(f"field label not supported: {field}")
        requirements.append(FieldRequirement(field, operator, _unescape_field_value(text, raw_value)))
    return FieldSelector(tuple(requirements))


def _split_unescaped_commas(text: str) -> list[str]:
    terms: list[str] = []
    current: list[str] = []
    escaped = False
    for character in text:
        if escaped:
            escaped = False
        elif character == "\\":
            escaped = True
        elif character == ",":
            terms.append("".join(current))
            current = []
            continue
        current.append(character)
    terms.append("".join(current))
    return terms


def _split_field_term(text: str, term: str) -> tuple[str, str, str]:
    for index in range(len(term)):
        for operator in _FIELD_OPERATORS:
            if term.startswith(operator, index):
                field = term[:index].strip()
                if not field:
                    raise SelectorError(f"invalid field selector {text!r}: missing field name in {term!r}")
                # "==" is a synonym of "=".
                return field, "!=" if operator == "!=" else "=", term[index + len(operator) :].strip()
    raise SelectorError(f"invalid field selector {text!r}: can't understand {term!r}")


def _unescape_field_value(text: str, raw: str) -> str:
    value: list[str] = []
    escaped = False
    for character in raw:
        if escaped:
            if character not in _FIELD_ESCAPABLE:
                problem = f"invalid escape sequence: \\{character}"
                raise SelectorError(f"invalid field selector {text!r}: {problem}")
            value.append(character)
            escaped = False
        elif character == "\\":
            escaped = True
        elif character in ",=":
            raise SelectorError(f"invalid field selector {text!r}: unescaped character in value: {character}")
        else:
            value.append(character)
    if escaped:
        raise SelectorError(f"invalid field selector {text!r}: invalid escape sequence: \\")
    return "".join(value)


def _escape_field_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value at a dotted path; missing, null or non-scalar fields read as ""."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None or isinstance(current, (Mapping, list)):
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"  # Go's strconv.FormatBool, e.g. spec.unschedulable
    return str(current)


def validate_label_selector(field: Field) -> None:
    """A metav1.LabelSelector: matchLabels and matchExpressions as the API server checks them."""
    if field.present and field.as_mapping() is not None:
        try:
            label_selector_from_dict(field.value)
        except SelectorError as exc:
            field.report(str(exc))
