"""kubectl-like verbs for Lahar's objects: apply, get, describe, delete. They work against the
embedded server or any cluster (`--kubeconfig`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

import yaml

from lahar.api import kinds
from lahar.api.kinds import Kind, UnknownKindError
from lahar.api.printing import text_table
from lahar.client.errors import KubeError, NotFound
from lahar.client.manifests import apply_object, display_name, load_manifests

if TYPE_CHECKING:
    from lahar.client.api import KubeApi


class CommandError(ValueError):
    """A refused command; main() prints it as `error: ...`."""


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, in-cluster, then the embedded server at 127.0.0.1:6443)",
    )


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    apply = commands.add_parser("apply", help="create or update objects from manifests")
    apply.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        help="a manifest file, a directory of them, or - for standard input (repeatable)",
    )
    apply.add_argument("-n", "--namespace", help="namespace for objects that name none (default: default)")
    add_connection_flags(apply)
    apply.set_defaults(run=run_apply)

    get = commands.add_parser("get", help="list objects (jobs, podgroups, queues, pods, nodes, ...)")
    get.add_argument("resource", help="kind: jobs, podgroups, queues, pods, nodes, or any short name")
    get.add_argument("names", nargs="*", help="object names (default: all)")
    get.add_argument("-n", "--namespace", default="default")
    get.add_argument("-A", "--all-namespaces", action="store_true")
    get.add_argument("-l", "--selector", default="", help="label selector, e.g. app=web,tier!=db")
    get.add_argument("-o", "--output", choices=("wide", "yaml", "json", "name"), help="output format")
    add_connection_flags(get)
    get.set_defaults(run=run_get)

    describe = commands.add_parser("describe", help="show one object in detail with its events")
    describe.add_argument("resource")
    describe.add_argument("name")
    describe.add_argument("-n", "--namespace", default="default")
    add_connection_flags(describe)
    describe.set_defaults(run=run_describe)

    delete = commands.add_parser("delete", help="delete objects by name or by manifest")
    delete.add_argument("resource", nargs="?", help="kind (omit with -f)")
    delete.add_argument("names", nargs="*")
    delete.add_argument("-f", "--filename", action="append", help="delete the objects these manifests name")
    delete.add_argument("-n", "--namespace", default="default")
    delete.add_argument("--grace-period", type=int, help="seconds a pod gets to stop (0: at once)")
    delete.add_argument("--ignore-not-found", action="store_true")
    add_connection_flags(delete)
    delete.set_defaults(run=run_delete)


# -- verbs -------------------------------------------------------------------------------------


def connect(args: argparse.Namespace) -> KubeApi:
    # Imported here: the kubernetes package is heavy, and most lahar commands never need it.
    from lahar.client.api import KubeApi
    from lahar.client.connect import new_api_client

    return KubeApi(new_api_client(args.kubeconfig))


def run_apply(args: argparse.Namespace) -> int:
    objects = load_manifests(args.filename, args.namespace)
    api = connect(args)
    for kind, obj in objects:
        try:
            outcome = apply_object(api, kind, obj)
        except KubeError as exc:
            raise CommandError(f"{display_name(kind, obj['metadata']['name'])}: {exc.message}") from exc
        print(f"{display_name(kind, obj['metadata']['name'])} {outcome}")
    return 0


def resolve_kind(name: str) -> Kind:
    try:
        return kinds.lookup(name)
    except UnknownKindError as exc:
        raise CommandError(str(exc)) from exc


def run_get(args: argparse.Namespace) -> int:
    kind = resolve_kind(args.resource)
    api = connect(args)
    namespace = None if args.all_namespaces or not kind.namespaced else args.namespace
    try:
        if args.names:
            objects = [api.get(kind, name, namespace) for name in args.names]
        else:
            objects = api.list_all(kind, namespace, label_selector=args.selector)["items"]
    except KubeError as exc:
        raise CommandError(exc.message) from exc
    if args.output == "json":
        print(
            json.dumps(
                objects[0] if len(args.names) == 1 else {"apiVersion": "v1", "kind": "List", "items": objects}, indent=2
            )
        )
    elif args.output == "yaml":
        print(
            yaml.safe_dump(
                objects[0] if len(args.names) == 1 else {"apiVersion": "v1", "kind": "List", "items": objects},
                sort_keys=False,
            ),
            end="",
        )
    elif args.output == "name":
        for obj in objects:
            print(display_name(kind, obj["metadata"]["name"]))
    elif not objects:
        where = f" in {namespace} namespace" if namespace else ""
        print(f"No resources found{where}.", file=sys.stderr)
    else:
        print(
            text_table(
                kind, objects, wide=args.output == "wide", with_namespace=args.all_namespaces and kind.namespaced
            ),
            end="",
        )
    return 0


def run_describe(args: argparse.Namespace) -> int:
    kind = resolve_kind(args.resource)
    api = connect(args)
    namespace = args.namespace if kind.namespaced else None
    try:
        obj = api.get(kind, args.name, namespace)
        events = api.list_all(
            kinds.EVENT,
            namespace or "default",
            field_selector=f"involvedObject.name={args.name},involvedObject.kind={kind.kind}",
        )["items"]
    except KubeError as exc:
        raise CommandError(exc.message) from exc
    meta = obj["metadata"]
    summary = {
        "Name": meta["name"],
        "Namespace": meta.get("namespace"),
        "Kind": f"{kind.kind} ({kind.api_version})",
        "Labels": meta.get("labels") or "<none>",
        "Annotations": meta.get("annotations") or "<none>",
        "Created": meta.get("creationTimestamp"),
        "UID": meta.get("uid"),
    }
    print(yaml.safe_dump({k: v for k, v in summary.items() if v is not None}, sort_keys=False), end="")
    for section in ("spec", "status"):
        if obj.get(section):
            print(f"{section.capitalize()}:")
            print("  " + yaml.safe_dump(obj[section], sort_keys=False).replace("\n", "\n  ").rstrip())
    print("Events:" + ("" if events else " <none>"))
    if events:
        print(text_table(kinds.EVENT, events), end="")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    if args.filename:
        targets = [
            (kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))
            for kind, obj in load_manifests(args.filename, args.namespace)
        ]
    elif args.resource and args.names:
        kind = resolve_kind(args.resource)
        targets = [(kind, name, args.namespace if kind.namespaced else None) for name in args.names]
    else:
        raise CommandError("name a kind and at least one object, or give -f FILE")
    api = connect(args)
    for kind, name, namespace in targets:
        try:
            api.delete(kind, name, namespace, grace_period_seconds=args.grace_period)
        except NotFound:
            if args.ignore_not_found:
                continue
            raise CommandError(f'{kind.plural} "{name}" not found') from None
        except KubeError as exc:
            raise CommandError(f"{display_name(kind, name)}: {exc.message}") from exc
        print(f"{display_name(kind, name)} deleted")
    return 0
