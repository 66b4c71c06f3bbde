"""Volcano's `vcctl` verbs for jobs and queues: `lahar job run|list|view|suspend|resume` and
`lahar queue create|list|operate`. They work against the embedded server or any cluster
(`--kubeconfig`).

Suspend, resume and queue open/close only ask: they set an annotation (`lahar.dev/command`,
`lahar.dev/queue-command`) that the controller acts on and removes, where Volcano sends a
`bus.volcano.sh` Command object."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import yaml

from lahar.api import admission, kinds
from lahar.api.errors import ValidationError
from lahar.api.job import DEFAULT_SCHEDULER_NAME, POD_COUNTERS
from lahar.api.kinds import Kind
from lahar.api.printing import aligned, human_age, text_table
from lahar.api.queue import DEFAULT_QUEUE
from lahar.cli.object_commands import CommandError, add_connection_flags, connect
from lahar.client.errors import KubeError, NotFound
from lahar.client.manifests import display_name

if TYPE_CHECKING:
    from lahar.client.api import KubeApi

JOB_COMMAND_ANNOTATION = "lahar.dev/command"
QUEUE_COMMAND_ANNOTATION = "lahar.dev/queue-command"  # the key controller/queues.py consumes
# Volcano's pod label naming the job (controller/naming.py JOB_NAME_KEY).
JOB_NAME_LABEL = "volcano.sh/job-name"
QUEUE_ACTIONS = ("open", "close")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    job = commands.add_parser("job", help="run, list, view, suspend and resume Volcano jobs (vcctl job)")
    job_verbs = job.add_subparsers(dest="job_command", metavar="VERB", required=True)
    _register_job_run(job_verbs)
    _register_job_list(job_verbs)
    _register_job_view(job_verbs)
    for verb, action, summary in (
        ("suspend", "AbortJob", "abort a job's pods; resume brings it back"),
        ("resume", "ResumeJob", "restart a suspended (aborted) job"),
    ):
        parser = job_verbs.add_parser(verb, help=summary)
        parser.add_argument("name")
        parser.add_argument("-n", "--namespace", default="default")
        add_connection_flags(parser)
        parser.set_defaults(run=run_job_command, action=action)

    queue = commands.add_parser("queue", help="create, list, open and close queues (vcctl queue)")
    queue_verbs = queue.add_subparsers(dest="queue_command", metavar="VERB", required=True)
    _register_queue_verbs(queue_verbs)


def _register_job_run(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = verbs.add_parser(
        "run", help="create a one-task job", usage="%(prog)s --name N --image I [options] [-- command args...]"
    )
    run.add_argument("--name", required=True)
    run.add_argument("--image", required=True)
    run.add_argument("-n", "--namespace", default="default")
    run.add_argument("--replicas", type=int, default=1)
    run.add_argument("--min-available", type=int, help="pods that must run together (default: --replicas)")
    run.add_argument("--queue", default=DEFAULT_QUEUE)
    run.add_argument("--scheduler", default=DEFAULT_SCHEDULER_NAME)
    run.add_argument("--cpu", default="100m", help="CPU request and limit of each pod")
    run.add_argument("--memory", default="128Mi", help="memory request and limit of each pod")
    add_connection_flags(run)
    run.add_argument("command", nargs=argparse.REMAINDER, help="the container's command, after --")
    run.set_defaults(run=run_job_run)


def _register_job_list(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listing = verbs.add_parser("list", help="list jobs with their pod counts")
    listing.add_argument("-n", "--namespace", default="default")
    listing.add_argument("-A", "--all-namespaces", action="store_true")
    add_connection_flags(listing)
    listing.set_defaults(run=run_job_list)


def _register_job_view(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    view = verbs.add_parser("view", help="show a job: spec, status, conditions and pods")
    view.add_argument("name")
    view.add_argument("-n", "--namespace", default="default")
    add_connection_flags(view)
    view.set_defaults(run=run_job_view)


def _register_queue_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    create = verbs.add_parser("create", help="create a queue")
    create.add_argument("--name", required=True)
    create.add_argument("--weight", type=int, default=1)
    create.add_argument("--capability", default="", help="most the queue may use, e.g. cpu=8,memory=32Gi")
    create.add_argument(
        "--reclaimable",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether other queues may reclaim what it borrows (default: yes)",
    )
    add_connection_flags(create)
    create.set_defaults(run=run_queue_create)

    listing = verbs.add_parser("list", help="list queues with their PodGroup counts")
    add_connection_flags(listing)
    listing.set_defaults(run=run_queue_list)

    operate = verbs.add_parser("operate", help="open or close a queue")
    operate.add_argument("--name", required=True)
    operate.add_argument("--action", required=True, choices=QUEUE_ACTIONS)
    add_connection_flags(operate)
    operate.set_defaults(run=run_queue_operate)


# -- shared ------------------------------------------------------------------------------------


def _get(obj: dict[str, Any], path: str, default: Any = "") -> Any:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict) or value.get(part) is None:
            return default
        value = value[part]
    return value


def checked(kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
    """Defaulted and validated as the server's admission would, so bad flags fail before any call."""
    obj = admission.apply_defaults(kind, obj)
    try:
        admission.validate(kind, obj)
    except ValidationError as exc:
        raise CommandError(f'{kind.kind} "{obj["metadata"]["name"]}" is invalid: {exc}') from exc
    return obj


def create(api: KubeApi, kind: Kind, obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    try:
        api.create(kind, obj, obj["metadata"].get("namespace"))
    except KubeError as exc:
        raise CommandError(f"{display_name(kind, name)}: {exc.message}") from exc
    print(f"{display_name(kind, name)} created")


def annotate(api: KubeApi, kind: Kind, name: str, namespace: str | None, key: str, value: str) -> None:
    try:
        api.patch(kind, name, {"metadata": {"annotations": {key: value}}}, namespace)
    except NotFound:
        where = f' in namespace "{namespace}"' if namespace else ""
        raise CommandError(f'{kind.plural} "{name}" not found{where}') from None
    except KubeError as exc:
        raise CommandError(f"{display_name(kind, name)}: {exc.message}") from exc


# -- jobs --------------------------------------------------------------------------------------


def job_manifest(args: argparse.Namespace) -> dict[str, Any]:
    """The one-task Job `job run` asks for; task and container carry the job's name, as in vcctl."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    resources = {"cpu": args.cpu, "memory": args.memory}
    container: dict[str, Any] = {
        "name": args.name,
        "image": args.image,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
    }
    if command:
        container["command"] = list(command)
    spec: dict[str, Any] = {
        "schedulerName": args.scheduler,
        "queue": args.queue,
        "tasks": [
            {
                "name": args.name,
                "replicas": args.replicas,
                "template": {"spec": {"containers": [container], "restartPolicy": "Never"}},
            }
        ],
    }
    if args.min_available is not None:
        spec["minAvailable"] = args.min_available
    return {
        "apiVersion": kinds.JOB.api_version,
        "kind": kinds.JOB.kind,
        "metadata": {"name": args.name, "namespace": args.namespace},
        "spec": spec,
    }


def run_job_run(args: argparse.Namespace) -> int:
    job = checked(kinds.JOB, job_manifest(args))
    create(connect(args), kinds.JOB, job)
    return 0


JOB_COLUMNS = ("NAME", "PHASE", "MIN", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "RETRYCOUNT", "QUEUE", "AGE")


def job_row(job: dict[str, Any]) -> list[Any]:
    return [
        job["metadata"]["name"],
        _get(job, "status.state.phase", "Pending"),
        _get(job, "spec.minAvailable", 0),
        _get(job, "status.pending", 0),
        _get(job, "status.running", 0),
        _get(job, "status.succeeded", 0),
        _get(job, "status.failed", 0),
        _get(job, "status.retryCount", 0),
        _get(job, "spec.queue", DEFAULT_QUEUE),
        human_age(_get(job, "metadata.creationTimestamp", None)),
    ]


def run_job_list(args: argparse.Namespace) -> int:
    namespace = None if args.all_namespaces else args.namespace
    try:
        jobs = connect(args).list_all(kinds.JOB, namespace)["items"]
    except KubeError as exc:
        raise CommandError(exc.message) from exc
    if not jobs:
        print("No jobs found" + (f" in {namespace} namespace." if namespace else "."))
        return 0
    jobs.sort(key=lambda j: (j["metadata"].get("namespace", ""), j["metadata"]["name"]))
    if args.all_namespaces:
        print(
            aligned(("NAMESPACE", *JOB_COLUMNS), [[j["metadata"].get("namespace", ""), *job_row(j)] for j in jobs]),
            end="",
        )
    else:
        print(aligned(JOB_COLUMNS, [job_row(j) for j in jobs]), end="")
    return 0


def job_summary(job: dict[str, Any]) -> dict[str, Any]:
    meta, spec = job["metadata"], job.get("spec") or {}
    state = _get(job, "status.state", {})
    return {
        "Name": meta["name"],
        "Namespace": meta.get("namespace"),
        "Created": meta.get("creationTimestamp"),
        "Annotations": meta.get("annotations") or "<none>",
        "Queue": spec.get("queue"),
        "Scheduler": spec.get("schedulerName"),
        "Min Available": spec.get("minAvailable"),
        "Max Retry": spec.get("maxRetry"),
        "Tasks": [
            {
                "name": t.get("name"),
                "replicas": t.get("replicas"),
                "images": [c.get("image") for c in _get(t, "template.spec.containers", [])],
            }
            for t in spec.get("tasks") or []
        ],
        "Phase": state.get("phase", "Pending"),
        "Reason": state.get("reason"),
        "Message": state.get("message"),
        "Pod Counts": {counter: _get(job, f"status.{counter}", 0) for counter in POD_COUNTERS},
        "Retry Count": _get(job, "status.retryCount", 0),
    }


def run_job_view(args: argparse.Namespace) -> int:
    api = connect(args)
    try:
        job = api.get(kinds.JOB, args.name, args.namespace)
        pods = api.list_all(kinds.POD, args.namespace, label_selector=f"{JOB_NAME_LABEL}={args.name}")["items"]
    except NotFound:
        raise CommandError(f'jobs "{args.name}" not found in namespace "{args.namespace}"') from None
    except KubeError as exc:
        raise CommandError(exc.message) from exc
    summary = {k: v for k, v in job_summary(job).items() if v is not None}
    print(yaml.safe_dump(summary, sort_keys=False), end="")
    conditions = _get(job, "status.conditions", [])
    print("Conditions:" + ("" if conditions else " <none>"))
    if conditions:
        print(
            aligned(
                ("STATUS", "REASON", "LAST TRANSITION", "MESSAGE"),
                [
                    [c.get("status", ""), c.get("reason", ""), c.get("lastTransitionTime", ""), c.get("message", "")]
                    for c in conditions
                ],
            ),
            end="",
        )
    print("Pods:" + ("" if pods else " <none>"))
    if pods:
        print(text_table(kinds.POD, pods, wide=True), end="")
    return 0


def run_job_command(args: argparse.Namespace) -> int:
    annotate(connect(args), kinds.JOB, args.name, args.namespace, JOB_COMMAND_ANNOTATION, args.action)
    print(f"{display_name(kinds.JOB, args.name)}: {args.action} requested")
    return 0


# -- queues ------------------------------------------------------------------------------------


def parse_resource_list(text: str) -> dict[str, str]:
    """`cpu=8,memory=32Gi` as a resource list; the quantities are checked by admission."""
    resources: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, amount = item.partition("=")
        if not sep or not name.strip() or not amount.strip():
            raise CommandError(f'--capability: "{item}" is not NAME=QUANTITY (e.g. cpu=8,memory=32Gi)')
        resources[name.strip()] = amount.strip()
    return resources


def queue_manifest(args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": args.weight}
    if args.capability:
        spec["capability"] = parse_resource_list(args.capability)
    if args.reclaimable is not None:
        spec["reclaimable"] = args.reclaimable
    return {
        "apiVersion": kinds.QUEUE.api_version,
        "kind": kinds.QUEUE.kind,
        "metadata": {"name": args.name},
        "spec": spec,
    }


def run_queue_create(args: argparse.Namespace) -> int:
    queue = checked(kinds.QUEUE, queue_manifest(args))
    create(connect(args), kinds.QUEUE, queue)
    return 0


QUEUE_COLUMNS = ("NAME", "WEIGHT", "STATE", "INQUEUE", "PENDING", "RUNNING")


def run_queue_list(args: argparse.Namespace) -> int:
    try:
        queues = connect(args).list_all(kinds.QUEUE)["items"]
    except KubeError as exc:
        raise CommandError(exc.message) from exc
    rows = [
        [
            q["metadata"]["name"],
            _get(q, "spec.weight", 1),
            _get(q, "status.state", "Open"),
            _get(q, "status.inqueue", 0),
            _get(q, "status.pending", 0),
            _get(q, "status.running", 0),
        ]
        for q in sorted(queues, key=lambda q: q["metadata"]["name"])
    ]
    print(aligned(QUEUE_COLUMNS, rows), end="")
    return 0


def run_queue_operate(args: argparse.Namespace) -> int:
    if args.action == "close" and args.name == DEFAULT_QUEUE:
        # Jobs that name no queue land in it; Volcano refuses this too.
        raise CommandError(f'the "{DEFAULT_QUEUE}" queue cannot be closed')
    annotate(connect(args), kinds.QUEUE, args.name, None, QUEUE_COMMAND_ANNOTATION, args.action)
    print(f"{display_name(kinds.QUEUE, args.name)}: {args.action} requested")
    return 0
