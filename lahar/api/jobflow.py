"""Volcano's `flow.volcano.sh/v1alpha1` JobFlow and JobTemplate.

A JobTemplate holds a Volcano Job spec (validated as one, errors under `spec`). A JobFlow runs a
DAG of them: `spec.flows[*]` names a JobTemplate (`name`), optionally `dependsOn.targets` (flows
that must complete first) and `patch.spec` (merged over the template's spec for this flow);
`spec.jobRetainPolicy` (retain, the default, or delete) says whether its Jobs stay once the flow
succeeded. Admission refuses a flow without a name, a repeated name, a target that is not a flow
of the JobFlow, and a cycle (naming it)."""

from __future__ import annotations

from typing import Any

from lahar.api import job as job_api
from lahar.api.errors import DUPLICATE, Field, FieldError, child_dict, json_copy, set_default

RETAIN, DELETE = "retain", "delete"
RETAIN_POLICIES = (RETAIN, DELETE)


def template_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    result = json_copy(obj)
    if isinstance(result.get("spec"), dict):
        result["spec"] = job_api.defaults({"spec": result["spec"]})["spec"]
    return result


def validate_template(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    """A JobTemplate's spec is a Job spec: Job admission's errors, at the same paths."""
    name = (obj.get("metadata") or {}).get("name")
    job = {"metadata": {"name": name if isinstance(name, str) else ""}, "spec": obj.get("spec")}
    return [error for error in job_api.validate(job) if error.field.startswith("spec")]


def flow_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    result = json_copy(obj)
    spec = child_dict(result, "spec")
    if spec is not None:
        set_default(spec, "jobRetainPolicy", RETAIN)
    return result


def validate_flow(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    root = Field(obj)
    spec = root.child("spec")
    if not spec.require_present() or spec.as_mapping() is None:
        return root.errors
    spec.child("jobRetainPolicy").as_choice(RETAIN_POLICIES, "job retain policy")
    flows = spec.child("flows")
    flows.require_nonempty_list("at least one flow is required")
    names: list[str] = []
    targets: list[tuple[str, str, Field]] = []
    for flow in flows.elements():
        if flow.as_mapping() is None:
            continue
        flow_name = flow.child("name").require_str()
        if flow_name is not None:
            if flow_name in names:
                flow.child("name").report(f'duplicate flow "{flow_name}"', DUPLICATE)
            names.append(flow_name)
        depends = flow.child("dependsOn")
        if depends.as_mapping() is not None:
            for target in depends.child("targets").elements():
                value = target.as_str()
                if value is not None and flow_name is not None:
                    targets.append((flow_name, value, target))
        patch = flow.child("patch")
        if patch.as_mapping() is not None:
            patch.child("spec").as_mapping()
    graph: dict[str, list[str]] = {}
    for source, wanted, at in targets:
        if wanted == source:
            at.report("a flow cannot depend on itself")
        elif wanted not in names:
            at.report(f'unknown flow "{wanted}" (flows: {", ".join(names)})')
        else:
            graph.setdefault(source, []).append(wanted)
    cycle = job_api.find_cycle(graph)
    if cycle:
        flows.report(f"dependency cycle: {' -> '.join(cycle)}")
    return root.errors
