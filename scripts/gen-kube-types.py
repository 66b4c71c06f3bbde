#!/usr/bin/env python3
"""Generate apiserver/kube_types.json: the wire shape of the built-in Kubernetes kinds the
embedded API server serves, read from the pinned Kubernetes API modules (tools/k8s/go.sum).

For every message reachable from the served kinds it records each field's JSON name, protobuf
field number and type, and the two facts of the Go struct the JSON form depends on: whether the
field is a pointer (a zero value was set on purpose) and whether it is `omitempty` or `inline`.
No descriptions or code are copied; only the field table, which is the kinds' wire contract.

    scripts/gen-kube-types.py [--modcache DIR]   (default: `go env GOMODCACHE`)

The protobuf decoder (apiserver/protobuf.py), the OpenAPI documents (apiserver/openapi.py) and
strict field validation all read the generated file.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "apiserver" / "kube_types.json"

# (module, directory inside it, proto package)
PACKAGES = [
    ("k8s.io/apimachinery", "pkg/apis/meta/v1", "k8s.io.apimachinery.pkg.apis.meta.v1"),
    ("k8s.io/apimachinery", "pkg/runtime", "k8s.io.apimachinery.pkg.runtime"),
    ("k8s.io/apimachinery", "pkg/api/resource", "k8s.io.apimachinery.pkg.api.resource"),
    ("k8s.io/apimachinery", "pkg/util/intstr", "k8s.io.apimachinery.pkg.util.intstr"),
    ("k8s.io/api", "core/v1", "k8s.io.api.core.v1"),
    ("k8s.io/api", "apps/v1", "k8s.io.api.apps.v1"),
    ("k8s.io/api", "batch/v1", "k8s.io.api.batch.v1"),
    ("k8s.io/api", "coordination/v1", "k8s.io.api.coordination.v1"),
    ("k8s.io/api", "events/v1", "k8s.io.api.events.v1"),
    ("k8s.io/api", "policy/v1", "k8s.io.api.policy.v1"),
    ("k8s.io/api", "scheduling/v1", "k8s.io.api.scheduling.v1"),
    ("k8s.io/api", "authorization/v1", "k8s.io.api.authorization.v1"),
    ("k8s.io/api", "autoscaling/v1", "k8s.io.api.autoscaling.v1"),
    ("k8s.io/api", "scheduling/v1alpha3", "k8s.io.api.scheduling.v1alpha3"),  # batch/v1 reaches it
]
# The kinds (and request bodies) the server reads; everything they reach is generated.
ROOTS = [
    "k8s.io.api.core.v1." + name
    for name in (
        "Pod",
        "Node",
        "Namespace",
        "Event",
        "Service",
        "ConfigMap",
        "Secret",
        "ServiceAccount",
        "Binding",
        "PodList",
    )
] + [
    "k8s.io.api.apps.v1.Deployment",
    "k8s.io.api.apps.v1.ReplicaSet",
    "k8s.io.api.apps.v1.StatefulSet",
    "k8s.io.api.apps.v1.DaemonSet",
    "k8s.io.api.apps.v1.ControllerRevision",
    "k8s.io.api.batch.v1.Job",
    "k8s.io.api.batch.v1.CronJob",
    "k8s.io.api.coordination.v1.Lease",
    "k8s.io.api.events.v1.Event",
    "k8s.io.api.policy.v1.PodDisruptionBudget",
    "k8s.io.api.policy.v1.Eviction",
    "k8s.io.api.scheduling.v1.PriorityClass",
    "k8s.io.api.authorization.v1.SelfSubjectAccessReview",
    "k8s.io.api.authorization.v1.SelfSubjectRulesReview",
    "k8s.io.api.autoscaling.v1.Scale",
    "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Status",
]
# Types with their own JSON form; the decoder handles them by name and needs no field table.
SPECIAL = {
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration",
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "k8s.io.apimachinery.pkg.api.resource.Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
    "k8s.io.apimachinery.pkg.runtime.RawExtension",
}

_MESSAGE = re.compile(r"^message (\w+) \{$")
_FIELD = re.compile(r"^  (optional|repeated)? ?(map<\s*(\S+?),\s*(\S+?)>|[\w.]+) (\w+) = (\d+);")
_STRUCT = re.compile(r"^type (\w+) struct \{$")
_GO_FIELD = re.compile(r"^\t(?:(\w+)\s+)?(\S+)\s+`([^`]*)`")


def parse_proto(path: Path, package: str) -> dict[str, list[dict]]:
    messages: dict[str, list[dict]] = {}
    current: list[dict] | None = None
    for line in path.read_text().splitlines():
        if m := _MESSAGE.match(line):
            current = messages.setdefault(f"{package}.{m.group(1)}", [])
        elif line == "}":
            current = None
        elif current is not None and (m := _FIELD.match(line)):
            label, type_text, key, value, name, number = m.groups()
            field = {"name": name, "number": int(number)}
            if key:
                field["map"] = _resolve(key, package)
                field["type"] = _resolve(value, package)
            else:
                field["type"] = _resolve(type_text, package)
                if label == "repeated":
                    field["repeated"] = True
            current.append(field)
    return messages


def _resolve(type_name: str, package: str) -> str:
    if type_name.startswith("."):
        return type_name[1:]
    if "." in type_name or type_name[0].islower():
        return type_name  # a scalar (string, int32, bytes, ...)
    return f"{package}.{type_name}"


def parse_go(directory: Path, package: str) -> dict[str, dict[int, dict]]:
    """Per struct: field number -> the JSON facts of its Go field."""
    structs: dict[str, dict[int, dict]] = {}
    for path in sorted(directory.glob("*.go")):
        if path.name.endswith("_test.go"):
            continue
        current: dict[int, dict] | None = None
        for line in path.read_text().splitlines():
            if m := _STRUCT.match(line):
                current = structs.setdefault(f"{package}.{m.group(1)}", {})
            elif line == "}":
                current = None
            elif current is not None and (m := _GO_FIELD.match(line)):
                go_type, tags = m.group(2), m.group(3)
                number = re.search(r'protobuf:"\w+,(\d+),', tags)
                json_tag = re.search(r'json:"([^"]*)"', tags)
                if number is None or json_tag is None:
                    continue
                name, *options = json_tag.group(1).split(",")
                current[int(number.group(1))] = {
                    "json": name,
                    "pointer": go_type.startswith("*"),
                    "omitempty": "omitempty" in options,
                    # An embedded struct with no JSON name is promoted into its parent.
                    "inline": "inline" in options or not name,
                }
    return structs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modcache", type=Path)
    args = parser.parse_args()
    modcache = args.modcache or Path(
        subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    )
    versions = {}
    for line in (REPO / "tools" / "k8s" / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("k8s.io/api", "k8s.io/apimachinery"):
            versions[parts[0]] = parts[-1] if parts[1] == "=>" else parts[1]  # a replace wins
    messages: dict[str, list[dict]] = {}
    go_facts: dict[str, dict[int, dict]] = {}
    for module, directory, package in PACKAGES:
        root = modcache / f"{module}@{versions[module]}" / directory
        messages.update(parse_proto(root / "generated.proto", package))
        go_facts.update(parse_go(root, package))
    wanted: dict[str, list[list]] = {}
    pending = list(ROOTS)
    while pending:
        name = pending.pop()
        if name in wanted or name in SPECIAL:
            continue
        if name not in messages:
            print(f"error: no message {name}", file=sys.stderr)
            return 1
        table = []
        for field in messages[name]:
            facts = go_facts.get(name, {}).get(field["number"], {})
            flags = [flag for flag in ("pointer", "omitempty", "inline") if facts.get(flag)]
            if field.get("repeated"):
                flags.append("repeated")
            type_name = field["type"]
            if "map" in field:
                flags.append("map")
            table.append([field["number"], facts.get("json", field["name"]), type_name, flags])
            if type_name.startswith("k8s.io."):
                pending.append(type_name)
        wanted[name] = sorted(table)
    document = {
        "source": {module: versions[module] for module in ("k8s.io/api", "k8s.io/apimachinery")},
        "messages": dict(sorted(wanted.items())),
    }
    OUT.write_text(json.dumps(document, separators=(",", ":"), sort_keys=False) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}: {len(wanted)} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
