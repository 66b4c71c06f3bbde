"""Volcano's `vcctl jobflow` and `vcctl jobtemplate` verbs, with vcctl's flags and columns:
`lahar jobflow|jobtemplate create|list|get|delete|describe` (vcctl's cmd/cli/jobflow.go and
jobtemplate.go). They work against the embedded server or any cluster (`--kubeconfig`).

- `create -f FILE`: every document of the file (a JobFlow, or a JobTemplate) in its namespace
  (default `default`); each is checked as the server's admission would before anything is sent;
- `list [-n NS | --all-namespaces]`: `Name Namespace Phase Age` for flows, `Name Namespace` for
  templates, or `No resources found`;
- `get -N NAME [-n NS]`: the same columns for one;
- `delete -N NAME [-n NS]` or `delete -f FILE` (each document's object);
- `describe [-N NAME] [-n NS] [-o yaml|json]`: the object (every one of the namespace without
  -N), managedFields left out; YAML documents apart by `---`."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from lahar.api import kinds
from lahar.api.kinds import Kind
from lahar.api.printing import aligned, human_age
from lahar.cli.object_commands import CommandError, add_connection_flags, connect
from lahar.client.errors import KubeError, NotFound
from lahar.client.manifests import ManifestError, checked_manifest, manifest_files

if TYPE_CHECKING:
    from lahar.client.api import KubeApi

DEFAULT_NAMESPACE = "default"
FORMATS = ("yaml", "json")


@dataclass(frozen=True)
class FlowKind:
    """One of the two kinds and how vcctl words and prints it."""

    command: str  # jobflow, jobtemplate
    kind: Kind
    noun: str  # as vcctl's help and messages say it: "jobflow", "job template"
    columns: tuple[str, ...]

    def row(self, obj: dict[str, Any]) -> list[str]:
        meta = obj["metadata"]
        cells = [meta["name"], meta.get("namespace", "")]
        if "Phase" in self.columns:
            cells.append(str(((obj.get("status") or {}).get("state") or {}).get("phase") or ""))
        if "Age" in self.columns:
            cells.append(human_age(meta.get("creationTimestamp")))
        return cells


JOBFLOW = FlowKind("jobflow", kinds.JOBFLOW, "jobflow", ("Name", "Namespace", "Phase", "Age"))
JOBTEMPLATE = FlowKind("jobtemplate", kinds.JOBTEMPLATE, "job template", ("Name", "Namespace"))


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for flow_kind in (JOBFLOW, JOBTEMPLATE):
        _register_kind(commands, flow_kind)


def _register_kind(commands: argparse._SubParsersAction[argparse.ArgumentParser], flow_kind: FlowKind) -> None:
    noun = flow_kind.noun
    parser = commands.add_parser(
        flow_kind.command, help=f"create, list, get, delete and describe {noun}s (vcctl {flow_kind.command})"
    )
    verbs = parser.add_subparsers(dest=f"{flow_kind.command}_command", metavar="VERB", required=True)

    create = verbs.add_parser("create", help=f"create a {noun}")
    create.add_argument("-f", "--file", required=True, help=f"the path to the YAML file containing the {noun}")
    add_connection_flags(create)
    create.set_defaults(run=run_create, flow_kind=flow_kind)

    listing = verbs.add_parser("list", help=f"list {noun}s")
    listing.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help=f"the namespace of {noun}")
    if flow_kind is JOBFLOW:  # vcctl's jobtemplate list has no such flag
        listing.add_argument("--all-namespaces", action="store_true", help=f"list {noun}s in all namespaces")
    add_connection_flags(listing)
    listing.set_defaults(run=run_list, flow_kind=flow_kind)

    get = verbs.add_parser("get", help=f"get a {noun}")
    _add_name(get, noun)
    add_connection_flags(get)
    get.set_defaults(run=run_get, flow_kind=flow_kind)

    delete = verbs.add_parser("delete", help=f"delete a {noun}")
    _add_name(delete, noun)
    delete.add_argument("-f", "--file", help=f"the path to the YAML file containing the {noun}")
    add_connection_flags(delete)
    delete.set_defaults(run=run_delete, flow_kind=flow_kind)

    describe = verbs.add_parser("describe", help=f"describe a {noun} (every one of the namespace without -N)")
    _add_name(describe, noun)
    describe.add_argument("-o", "--format", default="yaml", help="the format of output: yaml or json")
    add_connection_flags(describe)
    describe.set_defaults(run=run_describe, flow_kind=flow_kind)


def _add_name(parser: argparse.ArgumentParser, noun: str) -> None:
    parser.add_argument("-N", "--name", default="", help=f"the name of {noun}")
    parser.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help=f"the namespace of {noun}")


def file_objects(path: str, flow_kind: FlowKind) -> list[dict[str, Any]]:
    """The file's documents, each of the command's kind and checked as admission would (a bad
    one stops the command before anything is written)."""
    objects = []
    try:
        for source, text in manifest_files([path]):
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
            for index, document in enumerate(documents):
                where = f"{source} (document {index + 1})"
                kind, obj = checked_manifest(document, DEFAULT_NAMESPACE, where)
                if kind != flow_kind.kind:
                    raise CommandError(f"{where}: expected a {flow_kind.kind.kind}, not a {kind.kind}")
                objects.append(obj)
    except yaml.YAMLError as exc:
        raise CommandError(f"{path}: not valid YAML: {exc}") from exc
    except ManifestError as exc:
        raise CommandError(str(exc)) from exc
    if not objects:
        raise CommandError(f"{path}: no {flow_kind.kind.kind} found")
    return objects


def _where(obj: dict[str, Any]) -> str:
    return f"{obj['metadata'].get('namespace', DEFAULT_NAMESPACE)}/{obj['metadata']['name']}"


def run_create(args: argparse.Namespace) -> int:
    """Each document in turn; a refused one is said and the rest still go, as vcctl does."""
    flow_kind: FlowKind = args.flow_kind
    objects = file_objects(args.file, flow_kind)
    api = connect(args)
    failed = 0
    for obj in objects:
        try:
            api.create(flow_kind.kind, obj, obj["metadata"]["namespace"])
            print(f"Created {flow_kind.kind.kind}: {_where(obj)}")
        except KubeError as exc:
            failed += 1
            print(f"Failed to create {flow_kind.kind.kind}: {exc.message}")
    return 1 if failed else 0


def run_list(args: argparse.Namespace) -> int:
    flow_kind: FlowKind = args.flow_kind
    namespace = None if getattr(args, "all_namespaces", False) else args.namespace
    try:
        items = connect(args).list_all(flow_kind.kind, namespace)["items"]
    except KubeError as exc:
        raise CommandError(exc.message) from exc
    if not items:
        print("No resources found")
        return 0
    print(aligned(flow_kind.columns, [flow_kind.row(obj) for obj in items]), end="")
    return 0


def _required_name(args: argparse.Namespace, message: str) -> str:
    if not args.name:
        raise CommandError(message)
    return str(args.name)


def _not_found(flow_kind: FlowKind, name: str) -> str:
    return f'{flow_kind.kind.plural}.{flow_kind.kind.group} "{name}" not found'


def _fetch(api: KubeApi, flow_kind: FlowKind, name: str, namespace: str) -> dict[str, Any]:
    try:
        return api.get(flow_kind.kind, name, namespace)
    except NotFound:
        raise CommandError(_not_found(flow_kind, name)) from None
    except KubeError as exc:
        raise CommandError(exc.message) from exc


def run_get(args: argparse.Namespace) -> int:
    flow_kind: FlowKind = args.flow_kind
    name = _required_name(args, f"name is mandatory to get the particular {flow_kind.noun} details")
    obj = _fetch(connect(args), flow_kind, name, args.namespace)
    print(aligned(flow_kind.columns, [flow_kind.row(obj)]), end="")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    flow_kind: FlowKind = args.flow_kind
    if args.file:
        targets = [
            (obj["metadata"]["name"], obj["metadata"]["namespace"]) for obj in file_objects(args.file, flow_kind)
        ]
    else:
        targets = [(_required_name(args, f"{flow_kind.noun} name must be specified"), args.namespace)]
    api = connect(args)
    failed = 0
    for name, namespace in targets:
        try:
            api.delete(flow_kind.kind, name, namespace)
            print(f"Deleted {flow_kind.kind.kind}: {namespace}/{name}")
        except NotFound:
            failed += 1
            print(f"Failed to delete {flow_kind.kind.kind}: {_not_found(flow_kind, name)}")
        except KubeError as exc:
            failed += 1
            print(f"Failed to delete {flow_kind.kind.kind}: {exc.message}")
    return 1 if failed else 0


def rendered(kind: Kind, obj: dict[str, Any], output: str) -> str:
    """The object as describe prints it: apiVersion and kind set (a list's items may lack them),
    managedFields left out, YAML or indented JSON."""
    shown = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        **obj,
        "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"},
    }
    if output == "json":
        return json.dumps(shown, indent=2) + "\n"
    return str(yaml.safe_dump(shown, sort_keys=False))


def run_describe(args: argparse.Namespace) -> int:
    flow_kind: FlowKind = args.flow_kind
    if args.format not in FORMATS:
        raise CommandError(f"unsupported format: {args.format} (yaml or json)")
    api = connect(args)
    if args.name:
        objects = [_fetch(api, flow_kind, args.name, args.namespace)]
    else:
        try:
            objects = api.list_all(flow_kind.kind, args.namespace)["items"]
        except KubeError as exc:
            raise CommandError(exc.message) from exc
    # YAML documents apart by `---` (one stream a YAML reader takes whole), JSON by a blank line,
    # where vcctl puts a blank line between either.
    separator = "\n---\n" if args.format == "yaml" else "\n\n"
    text = separator.join(rendered(flow_kind.kind, obj, args.format).rstrip("\n") for obj in objects)
    print(text + "\n" if objects else "", end="")
    return 0
