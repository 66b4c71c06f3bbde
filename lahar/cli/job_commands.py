"""Volcano's `vcctl` verbs for jobs and queues, with vcctl's flags and columns:
`lahar job run|list|view|suspend|resume|delete` and `lahar queue create|get|list|operate|delete`.
They work against the embedded server or any cluster (`--kubeconfig`).

Suspend, resume and queue open/close only ask: they set an annotation (`lahar.dev/command`,
`lahar.dev/queue-command`) that the controller acts on and removes, where Volcano sends a
`bus.volcano.sh` Command object."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import yaml

from lahar.api import admission, kinds
from lahar.api.errors import ValidationError
from lahar.api.job import COMMAND_ANNOTATION, DEFAULT_SCHEDULER_NAME, POD_COUNTERS
from lahar.api.kinds import Kind
from lahar.api.printing import aligned, text_table
from lahar.api.queue import DEFAULT_QUEUE
from lahar.cli.object_commands import CommandError, add_connection_flags, connect
from lahar.client.errors import KubeError, NotFound
from lahar.client.manifests import display_name

if TYPE_CHECKING:
    from lahar.client.api import KubeApi

QUEUE_COMMAND_ANNOTATION = "lahar.dev/queue-command"  # the key controller/queues.py consumes
# Volcano's pod label naming the job (controller/naming.py JOB_NAME_KEY).
JOB_NAME_LABEL = "volcano.sh/job-name"
VCCTL_JOB_LABEL = "job.volcano.sh"  # the label vcctl run puts on the pod template
QUEUE_ACTIONS = ("open", "close", "update")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    job = commands.add_parser("job", help="run, list, view, suspend, resume and delete Volcano jobs (vcctl job)")
    job_verbs = job.add_subparsers(dest="job_command", metavar="VERB", required=True)
    _register_job_run(job_verbs)
    _register_job_list(job_verbs)
    _register_job_view(job_verbs)
    for verb, action, summary in (
        ("suspend", "AbortJob", "abort a job's pods; resume brings it back"),
        ("resume", "ResumeJob", "restart a suspended (aborted) job"),
    ):
        parser = job_verbs.add_parser(verb, help=summary)
        _add_job_name(parser)
        add_connection_flags(parser)
        parser.set_defaults(run=run_job_command, action=action)
    delete = job_verbs.add_parser("delete", help="delete a job (its pods, PodGroup and plugin objects go with it)")
    _add_job_name(delete)
    add_connection_flags(delete)
    delete.set_defaults(run=run_job_delete)

    queue = commands.add_parser("queue", help="create, list, open and close queues (vcctl queue)")
    queue_verbs = queue.add_subparsers(dest="queue_command", metavar="VERB", required=True)
    _register_queue_verbs(queue_verbs)


def _add_job_name(parser: argparse.ArgumentParser) -> None:
    """The job, as vcctl names it (`-N/--name`) or positionally."""
    parser.add_argument("job", nargs="?", metavar="NAME")
    parser.add_argument("-N", "--name", dest="name_flag", metavar="NAME", help="the name of the job")
    parser.add_argument("-n", "--namespace", default="default")


def _job_name(args: argparse.Namespace) -> str:
    name = args.name_flag or args.job
    if not name:
        raise CommandError("job name must be specified (NAME or -N/--name)")
    return str(name)


def _register_job_run(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = verbs.add_parser(
        "run",
        help="create a one-task job, or one from a YAML file (-f)",
        usage="%(prog)s -N NAME [-i IMAGE] [options] [-- command args...] | -f FILE",
    )
    run.add_argument("-N", "--name")
    run.add_argument("-i", "--image", default="busybox", help="the container image (default busybox)")
    run.add_argument("-n", "--namespace", default="default")
    run.add_argument("-r", "--replicas", type=int, default=1)
    run.add_argument(
        "-m",
        "--min",
        "--min-available",
        dest="min_available",
        type=int,
        help="pods that must run together (default: --replicas)",
    )
    run.add_argument("--queue", default=DEFAULT_QUEUE)
    run.add_argument("-S", "--scheduler", default=DEFAULT_SCHEDULER_NAME)
    run.add_argument("-R", "--requests", default="", help="the task's requests, e.g. cpu=1000m,memory=100Mi")
    run.add_argument("-L", "--limits", default="", help="the task's limits (default: the requests)")
    run.add_argument("--cpu", default="100m", help="CPU request and limit of each pod, when -R/-L are not given")
    run.add_argument("--memory", default="128Mi", help="memory request and limit of each pod, when -R/-L are not given")
    run.add_argument("-f", "--filename", help="create the Job in this YAML file instead")
    add_connection_flags(run)
    run.add_argument("command", nargs=argparse.REMAINDER, help="the container's command, after --")
    run.set_defaults(run=run_job_run)


def _register_job_list(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listing = verbs.add_parser("list", help="list jobs with their pod counts (vcctl's columns)")
    listing.add_argument("-n", "--namespace", default="default")
    listing.add_argument("-A", "--all-namespaces", action="store_true")
    listing.add_argument("-q", "--queue", default="", help="only jobs of this queue")
    listing.add_argument("-S", "--scheduler", default="", help="only jobs of this scheduler")
    listing.add_argument("--selector", default="", help="only jobs whose name contains this")
    add_connection_flags(listing)
    listing.set_defaults(run=run_job_list)


def _register_job_view(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    view = verbs.add_parser("view", help="show a job: spec, status, conditions and pods")
    _add_job_name(view)
    add_connection_flags(view)
    view.set_defaults(run=run_job_view)


def _register_queue_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    create = verbs.add_parser("create", help="create a queue")
    create.add_argument("-n", "--name", required=True)
    create.add_argument("-w", "--weight", type=int, default=1)
    create.add_argument("-S", "--state", choices=("Open", "Closed"), default="Open", help="its state (default Open)")
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

    get = verbs.add_parser("get", help="show one queue with its PodGroup counts")
    get.add_argument("-n", "--name", required=True)
    add_connection_flags(get)
    get.set_defaults(run=run_queue_get)

    operate = verbs.add_parser("operate", help="open or close a queue, or update its weight")
    operate.add_argument("-n", "--name", required=True)
    operate.add_argument("-a", "--action", required=True, choices=QUEUE_ACTIONS)
    operate.add_argument("-w", "--weight", type=int, default=0, help="the new weight (update)")
    add_connection_flags(operate)
    operate.set_defaults(run=run_queue_operate)

    delete = verbs.add_parser("delete", help="delete a Closed queue")
    delete.add_argument("-n", "--name", required=True)
    add_connection_flags(delete)
    delete.set_defaults(run=run_queue_delete)


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
    """The one-task Job `job run` asks for; task and container carry the job's name, as in vcctl.
    Requests and limits: -R/-L when given (limits default to the requests), else --cpu and
    --memory for both."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.requests or args.limits:
        requests = parse_resource_list(args.requests or args.limits, "--requests")
        limits = parse_resource_list(args.limits, "--limits") if args.limits else dict(requests)
    else:
        requests = {"cpu": args.cpu, "memory": args.memory}
        limits = dict(requests)
    container: dict[str, Any] = {
        "name": args.name,
        "image": args.image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": requests, "limits": limits},
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
                "template": {
                    "metadata": {"name": args.name, "labels": {VCCTL_JOB_LABEL: args.name}},
                    "spec": {"containers": [container], "restartPolicy": "Never"},
                },
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


def job_from_file(path: str, namespace: str) -> dict[str, Any]:
    """The Job in a YAML file (vcctl's -f): one document, kind Job."""
    if not path.endswith((".yaml", ".yml")):
        raise CommandError(f"{path}: only YAML files (.yaml, .yml) are read")
    try:
        with open(path, encoding="utf-8") as stream:
            manifest = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError) as exc:
        raise CommandError(f"{path}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("kind") != kinds.JOB.kind:
        raise CommandError(f"{path}: expected one {kinds.JOB.kind} ({kinds.JOB.api_version})")
    manifest.setdefault("metadata", {}).setdefault("namespace", namespace)
    return manifest


def run_job_run(args: argparse.Namespace) -> int:
    if args.filename:
        manifest = job_from_file(args.filename, args.namespace)
    elif not args.name:
        raise CommandError("job name cannot be left blank (-N/--name), or give a file with -f")
    else:
        manifest = job_manifest(args)
    job = checked(kinds.JOB, manifest)
    create(connect(args), kinds.JOB, job)
    return 0


# vcctl's columns (pkg/cli/job/list.go); JobType is the job's volcano.sh/job-type label, else Batch.
JOB_COLUMNS = (
    "Name",
    "Creation",
    "Phase",
    "JobType",
    "Replicas",
    "Min",
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "Unknown",
    "RetryCount",
)
JOB_TYPE_LABEL = "volcano.sh/job-type"


def job_row(job: dict[str, Any]) -> list[Any]:
    created = str(_get(job, "metadata.creationTimestamp", ""))[:10]
    return [
        job["metadata"]["name"],
        created,
        _get(job, "status.state.phase", "Pending"),
        _get(job, f"metadata.labels.{JOB_TYPE_LABEL}", "") or "Batch",
        sum(int(t.get("replicas") or 0) for t in _get(job, "spec.tasks", [])),
        _get(job, "spec.minAvailable", 0),
        _get(job, "status.pending", 0),
        _get(job, "status.running", 0),
        _get(job, "status.succeeded", 0),
        _get(job, "status.failed", 0),
        _get(job, "status.unknown", 0),
        _get(job, "status.retryCount", 0),
    ]


def job_selected(job: dict[str, Any], args: argparse.Namespace) -> bool:
    """vcctl list's filters: queue, scheduler, and a substring of the name."""
    spec = job.get("spec") or {}
    return (
        (not args.queue or spec.get("queue", DEFAULT_QUEUE) == args.queue)
        and (not args.scheduler or spec.get("schedulerName") == args.scheduler)
        and args.selector in job["metadata"]["name"]
    )


def run_job_list(args: argparse.Namespace) -> int:
    namespace = None if args.all_namespaces else args.namespace
    try:
        jobs = connect(args).list_all(kinds.JOB, namespace)["items"]
    except KubeError as exc:
        raise CommandError(exc.message) from exc
    jobs = [job for job in jobs if job_selected(job, args)]
    if not jobs:
        print("No jobs found" + (f" in {namespace} namespace." if namespace else "."))
        return 0
    jobs.sort(key=lambda j: (j["metadata"].get("namespace", ""), j["metadata"]["name"]))
    if args.all_namespaces:
        print(
            aligned(("Namespace", *JOB_COLUMNS), [[j["metadata"].get("namespace", ""), *job_row(j)] for j in jobs]),
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
    name = _job_name(args)
    try:
        job = api.get(kinds.JOB, name, args.namespace)
        pods = api.list_all(kinds.POD, args.namespace, label_selector=f"{JOB_NAME_LABEL}={name}")["items"]
    except NotFound:
        raise CommandError(f'jobs "{name}" not found in namespace "{args.namespace}"') from None
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
    name = _job_name(args)
    annotate(connect(args), kinds.JOB, name, args.namespace, COMMAND_ANNOTATION, args.action)
    print(f"{display_name(kinds.JOB, name)}: {args.action} requested")
    return 0


def run_job_delete(args: argparse.Namespace) -> int:
    name = _job_name(args)
    try:
        connect(args).delete(kinds.JOB, name, args.namespace)
    except NotFound:
        raise CommandError(f'jobs "{name}" not found in namespace "{args.namespace}"') from None
    except KubeError as exc:
        raise CommandError(f"{display_name(kinds.JOB, name)}: {exc.message}") from exc
    print(f"delete job {name} successfully")
    return 0


# -- queues ------------------------------------------------------------------------------------


def parse_resource_list(text: str, flag: str = "--capability") -> dict[str, str]:
    """`cpu=8,memory=32Gi` as a resource list; the quantities are checked by admission."""
    resources: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, amount = item.partition("=")
        if not sep or not name.strip() or not amount.strip():
            raise CommandError(f'{flag}: "{item}" is not NAME=QUANTITY (e.g. cpu=8,memory=32Gi)')
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
    api = connect(args)
    create(api, kinds.QUEUE, queue)
    if args.state == "Closed":  # the controller owns status.state: ask it, as `operate -a close`
        annotate(api, kinds.QUEUE, args.name, None, QUEUE_COMMAND_ANNOTATION, "close")
    return 0


# vcctl's columns (pkg/cli/queue/list.go): the counts are of the queue's PodGroups by phase.
QUEUE_COLUMNS = ("Name", "Weight", "State", "Parent", "Inqueue", "Pending", "Running", "Unknown", "Completed")
PODGROUP_PHASE_COLUMNS = ("Inqueue", "Pending", "Running", "Unknown", "Completed")


def queue_rows(queues: list[dict[str, Any]], podgroups: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per queue, its PodGroups counted by phase as vcctl counts them."""
    counts: dict[str, dict[str, int]] = {}
    for group in podgroups:
        queue = _get(group, "spec.queue", DEFAULT_QUEUE) or DEFAULT_QUEUE
        phase = _get(group, "status.phase", "Pending") or "Pending"
        by_phase = counts.setdefault(queue, {})
        by_phase[phase] = by_phase.get(phase, 0) + 1
    return [
        [
            q["metadata"]["name"],
            _get(q, "spec.weight", 1),
            _get(q, "status.state", "Open"),
            _get(q, "spec.parent", ""),
            *(counts.get(q["metadata"]["name"], {}).get(phase, 0) for phase in PODGROUP_PHASE_COLUMNS),
        ]
        for q in sorted(queues, key=lambda q: q["metadata"]["name"])
    ]


def _queues_and_groups(args: argparse.Namespace, name: str | None = None) -> tuple[list[Any], list[Any]]:
    api = connect(args)
    try:
        queues = [api.get(kinds.QUEUE, name)] if name else api.list_all(kinds.QUEUE)["items"]
        return queues, api.list_all(kinds.PODGROUP, None)["items"]
    except NotFound:
        raise CommandError(f'queues "{name}" not found') from None
    except KubeError as exc:
        raise CommandError(exc.message) from exc


def run_queue_list(args: argparse.Namespace) -> int:
    print(aligned(QUEUE_COLUMNS, queue_rows(*_queues_and_groups(args))), end="")
    return 0


def run_queue_get(args: argparse.Namespace) -> int:
    print(aligned(QUEUE_COLUMNS, queue_rows(*_queues_and_groups(args, args.name))), end="")
    return 0


def run_queue_operate(args: argparse.Namespace) -> int:
    if args.action == "close" and args.name == DEFAULT_QUEUE:
        # Jobs that name no queue land in it; Volcano refuses this too.
        raise CommandError(f'the "{DEFAULT_QUEUE}" queue cannot be closed')
    api = connect(args)
    if args.action == "update":
        if args.weight <= 0:
            raise CommandError(
                f"when update queue {args.name}, weight must be specified, the value must be greater than 0"
            )
        try:
            api.patch(kinds.QUEUE, args.name, {"spec": {"weight": args.weight}})
        except NotFound:
            raise CommandError(f'queues "{args.name}" not found') from None
        except KubeError as exc:
            raise CommandError(f"{display_name(kinds.QUEUE, args.name)}: {exc.message}") from exc
        print(f"{display_name(kinds.QUEUE, args.name)}: weight {args.weight}")
        return 0
    annotate(api, kinds.QUEUE, args.name, None, QUEUE_COMMAND_ANNOTATION, args.action)
    print(f"{display_name(kinds.QUEUE, args.name)}: {args.action} requested")
    return 0


def run_queue_delete(args: argparse.Namespace) -> int:
    """Only a Closed queue may go (Volcano's webhook), and never `default`."""
    if args.name == DEFAULT_QUEUE:
        raise CommandError(f'the "{DEFAULT_QUEUE}" queue cannot be deleted')
    api = connect(args)
    try:
        queue = api.get(kinds.QUEUE, args.name)
        state = _get(queue, "status.state", "Open")
        if state != "Closed":
            raise CommandError(
                f'only a Closed queue can be deleted; queue "{args.name}" is {state} '
                f"(lahar queue operate -n {args.name} -a close)"
            )
        api.delete(kinds.QUEUE, args.name)
    except NotFound:
        raise CommandError(f'queues "{args.name}" not found') from None
    except KubeError as exc:
        raise CommandError(f"{display_name(kinds.QUEUE, args.name)}: {exc.message}") from exc
    print(f"delete queue {args.name} successfully")
    return 0
