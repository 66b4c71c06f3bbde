"""HyperNode (`topology.volcano.sh/v1alpha1`, cluster-scoped): a group of nodes (or of other
HyperNodes) that share a network tier, Volcano's description of the cluster's network topology.
A view and the validation the API server runs; the scheduler's network-topology-aware plugin
builds the tree.

```yaml
spec:
  tier: 1                     # 1 is the closest group (a switch); higher tiers hold lower ones
  tierName: leaf              # optional: names the tier for PodGroups' highestTierName
  members:
  - type: Node                # or HyperNode
    selector:
      exactMatch: {name: node-0}        # one of exactMatch, regexMatch, labelMatch
      regexMatch: {pattern: "node-[0-3]"}
      labelMatch: {matchLabels: {rack: r1}}
```

A HyperNode member is named (`exactMatch`); regex and label selection are for nodes, as Volcano
allows. A loop between HyperNodes spans several objects: `member_loop` finds the one a write would
close, and the embedded API server refuses that write; objects that loop anyway (written through
another API server) are reported by the scheduler (an `InvalidHyperNode` event) and left out."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from lahar.api.errors import Field, FieldError
from lahar.api.meta import ObjectView
from lahar.api.selectors import SelectorError, label_selector_from_dict

MEMBER_TYPES = ("Node", "HyperNode")
SELECTORS = ("exactMatch", "regexMatch", "labelMatch")


class HyperNode(ObjectView):
    """A read-only view over a HyperNode dict."""

    __slots__ = ()

    @property
    def tier(self) -> int:
        tier = self.spec.get("tier")
        return tier if isinstance(tier, int) and not isinstance(tier, bool) else 0

    @property
    def tier_name(self) -> str:
        """`spec.tierName`: a name for the tier (a PodGroup's `highestTierName` refers to it)."""
        name = self.spec.get("tierName")
        return name if isinstance(name, str) else ""

    @property
    def members(self) -> list[Mapping[str, Any]]:
        return [m for m in self.spec.get("members") or () if isinstance(m, Mapping)]


def member_hypernodes(obj: Mapping[str, Any]) -> list[str]:
    """The names of a HyperNode dict's HyperNode members (those named by exactMatch); malformed
    members are skipped (validation reports them)."""
    spec = obj.get("spec")
    members = spec.get("members") if isinstance(spec, Mapping) else None
    names = []
    for member in members if isinstance(members, list) else ():
        if not isinstance(member, Mapping):
            continue
        selector = member.get("selector")
        exact = selector.get("exactMatch") if isinstance(selector, Mapping) else None
        name = exact.get("name") if isinstance(exact, Mapping) else None
        if member.get("type") == "HyperNode" and isinstance(name, str):
            names.append(name)
    return names


def member_loop(name: str, members: Sequence[str], members_of: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The loop that giving HyperNode `name` the HyperNode members `members` closes, as the path
    from `name` back to itself (`[s0, s1, s0]`), or None. `members_of` maps the other HyperNodes to
    their HyperNode members. Depth first, each HyperNode visited once. Listing itself is left to
    `validate`, whose message says so plainly."""
    seen: set[str] = set()
    stack: list[tuple[str, list[str]]] = [(member, [name, member]) for member in reversed(members) if member != name]
    while stack:
        current, path = stack.pop()
        if current == name:
            return path
        if current in seen:
            continue
        seen.add(current)
        stack.extend((child, [*path, child]) for child in reversed(members_of.get(current, ())))
    return None


def _validate_member(member: Field, own_name: Any) -> None:
    if member.as_mapping() is None:
        return
    kind = (
        member.child("type").as_choice(MEMBER_TYPES, "member type") if member.child("type").require_present() else None
    )
    selector = member.child("selector")
    if not selector.require_present() or selector.as_mapping() is None:
        return
    given = [name for name in SELECTORS if selector.child(name).present]
    if len(given) != 1:
        selector.report(f"exactly one of {', '.join(SELECTORS)} is required, not {len(given)}")
        return
    which = selector.child(given[0])
    if which.as_mapping() is None:
        return
    if given[0] == "exactMatch":
        name = which.child("name").require_str()
        if name is not None and kind == "HyperNode" and name == own_name:
            which.child("name").report("a HyperNode cannot be its own member")
    elif kind == "HyperNode":
        which.report("HyperNode members are selected by exactMatch only")
    elif given[0] == "regexMatch":
        pattern = which.child("pattern")
        text = pattern.require_str()
        if text is not None:
            try:
                re.compile(text)
            except re.error as exc:
                pattern.report(f"not a regular expression: {exc}")
    else:
        try:
            label_selector_from_dict(which.value)
        except SelectorError as exc:
            which.report(str(exc))


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    spec = root.child("spec")
    if not spec.require_present():
        return root.errors
    tier = spec.child("tier")
    if tier.require_present():
        tier.as_int(minimum=0)
    spec.child("tierName").as_str()
    members = spec.child("members")
    if members.require_nonempty_list("at least one member is required") is not None:
        own = root.child("metadata").child("name").value
        for member in members.elements():
            _validate_member(member, own)
    return root.errors
