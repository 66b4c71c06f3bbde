"""The differential kubectl battery: one kubectl session, run step by step against two API
servers (the embedded one and a real kube-apiserver), each step's exit status and output
normalised (uids, times, ages, resourceVersions, names made unique per run) and compared.

The battery is the oracle for the embedded server's fidelity: a difference is a finding (another
issue closes them), not a failure. What fails is the battery itself: a step that cannot run at
all (kubectl missing, a timeout, a server that went away).
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

STEP_TIMEOUT = 30.0
WATCH_SECONDS = 3.0


@dataclass(frozen=True)
class Step:
    name: str
    args: tuple[str, ...]
    stdin: str | None = None
    # For a watch: a step run while it watches, whose own output is not compared.
    during: tuple[str, ...] | None = None


@dataclass
class Outcome:
    step: Step
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """What is compared: the exit status and both streams, normalised."""
        return f"exit {self.returncode}\n{self.stdout}\n--- stderr\n{self.stderr}".rstrip() + "\n"


@dataclass
class Session:
    """Names unique to one run, so a real cluster shared with other tests is left as found."""

    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    @property
    def namespace(self) -> str:
        return f"kb-{self.suffix}"

    @property
    def queue(self) -> str:
        return f"kb-q-{self.suffix}"


def _yaml(*documents: dict) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False)


# Client-side validation needs the server's OpenAPI document; one step keeps it (a finding), the
# others skip it so the session goes on.
APPLY = ("apply", "--validate=false", "-f", "-")
SERVER_SIDE = ("apply", "--server-side", "-f", "-")


def _data(configuration: dict, **data: str) -> dict:
    """An applied configuration of the same object holding only the given data."""
    return {
        **configuration,
        "metadata": {k: v for k, v in configuration["metadata"].items() if k != "labels"},
        "data": data,
    }


def steps(session: Session) -> list[Step]:
    ns = session.namespace
    n = ("-n", ns)
    container = {"name": "main", "image": "busybox", "command": ["sleep", "3600"]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container]}},
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1", "namespace": ns, "labels": {"tier": "batch"}},
        "spec": {"containers": [container], "restartPolicy": "Never"},
    }
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": session.queue},
        "spec": {"weight": 2, "capability": {"cpu": "8"}},
    }
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": ns},
        "spec": {
            "minAvailable": 2,
            "queue": session.queue,
            "tasks": [{"name": "worker", "replicas": 2, "template": {"spec": {"containers": [container]}}}],
        },
    }
    # Server-side apply: one configuration, then other managers' over it. "editor" sorts before
    # "kubectl" and applies before it, so managedFields print in one order whether or not the two
    # applies fall in the same second (kube sorts entries by time, then by manager).
    applied = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm3", "namespace": ns, "labels": {"app": "x"}},
        "data": {"a": "1", "b": "1"},
    }
    web2 = {**deployment, "metadata": {"name": "web2", "namespace": ns}}
    new_image = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web2", "namespace": ns},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}},
    }
    new_event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "ev1", "namespace": ns},
        "eventTime": "2026-01-02T03:04:05.000000Z",
        "reportingController": "lahar.io/battery",
        "reportingInstance": "battery-1",
        "action": "Checking",
        "reason": "Checked",
        "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm2", "namespace": ns},
        "note": "written through events.k8s.io/v1",
        "type": "Normal",
    }
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "spark-pg", "namespace": ns},
        "spec": {"minMember": 3, "queue": session.queue, "minResources": {"cpu": "2"}},
    }
    return [
        Step("api-resources", ("api-resources", "--sort-by=name")),
        Step("api-resources volcano group", ("api-resources", "--api-group=scheduling.volcano.sh")),
        Step("create namespace", ("create", "namespace", ns)),
        Step(
            "apply namespace",
            APPLY,
            _yaml({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        ),
        Step("get namespace", ("get", "namespace", ns)),
        Step(
            "apply with client-side validation",
            ("apply", "-f", "-"),
            _yaml({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm0", "namespace": ns}}),
        ),
        Step("create configmap", ("create", "configmap", "cm1", "--from-literal=a=1", *n)),
        Step(
            "apply configmap",
            APPLY,
            _yaml(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "cm2", "namespace": ns},
                    "data": {"a": "1"},
                }
            ),
        ),
        Step("get configmap yaml", ("get", "configmap", "cm2", "-o", "yaml", *n)),
        Step("patch configmap merge", ("patch", "configmap", "cm2", "--type=merge", "-p", '{"data":{"b":"2"}}', *n)),
        Step(
            "patch configmap json",
            ("patch", "configmap", "cm2", "--type=json", "-p", '[{"op":"remove","path":"/data/a"}]', *n),
        ),
        Step("get configmap jsonpath", ("get", "configmap", "cm2", "-o", "jsonpath={.data}", *n)),
        Step("server-side apply create", SERVER_SIDE, _yaml(applied)),
        Step("server-side apply unchanged", SERVER_SIDE, _yaml(applied)),
        Step("server-side apply conflict", (*SERVER_SIDE, "--field-manager=editor"), _yaml(_data(applied, a="2"))),
        Step(
            "server-side apply force",
            (*SERVER_SIDE, "--field-manager=editor", "--force-conflicts"),
            _yaml(_data(applied, a="2")),
        ),
        Step("server-side apply shared", (*SERVER_SIDE, "--field-manager=other"), _yaml(_data(applied, b="1"))),
        Step(
            "server-side apply drops fields",
            SERVER_SIDE,
            _yaml(_data(applied, c="3")),
        ),
        Step("server-side applied data", ("get", "configmap", "cm3", "-o", "jsonpath={.data}", *n)),
        Step("managed fields", ("get", "configmap", "cm3", "-o", "yaml", "--show-managed-fields", *n)),
        Step("patch an applied field", ("patch", "configmap", "cm3", "--type=merge", "-p", '{"data":{"c":"4"}}', *n)),
        Step(
            "server-side apply after patch",
            SERVER_SIDE,
            _yaml(_data(applied, c="3")),
        ),
        Step(
            "server-side apply over create",
            SERVER_SIDE,
            _yaml(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "cm1", "namespace": ns},
                    "data": {"a": "2"},
                }
            ),
        ),
        Step("server-side apply deployment", SERVER_SIDE, _yaml(web2)),
        Step("server-side apply container conflict", (*SERVER_SIDE, "--field-manager=editor"), _yaml(new_image)),
        Step("create secret", ("create", "secret", "generic", "s1", "--from-literal=k=v", *n)),
        Step(
            "apply secret",
            APPLY,
            _yaml(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "s2", "namespace": ns},
                    "stringData": {"k": "v"},
                }
            ),
        ),
        Step("get secret data", ("get", "secret", "s2", "-o", "jsonpath={.data.k}", *n)),
        Step("describe secret", ("describe", "secret", "s2", *n)),
        Step("apply deployment", APPLY, _yaml(deployment)),
        Step("get deployment wide", ("get", "deployments", "-o", "wide", *n)),
        Step("scale deployment", ("scale", "deployment", "web", "--replicas=3", *n)),
        Step("get deployment replicas", ("get", "deployment", "web", "-o", "jsonpath={.spec.replicas}", *n)),
        Step("apply pod", APPLY, _yaml(pod)),
        Step("get pods wide", ("get", "pod", "p1", "-o", "wide", *n)),
        Step("get pods labels", ("get", "pods", "-l", "tier=batch", "--show-labels", *n)),
        Step("patch pod strategic", ("patch", "pod", "p1", "-p", '{"metadata":{"labels":{"x":"y"}}}', *n)),
        Step("describe pod", ("describe", "pod", "p1", *n)),
        Step("logs of an unscheduled pod", ("logs", "p1", *n)),
        Step(
            "watch configmaps",
            ("get", "configmaps", "--watch", "--output-watch-events", *n),
            during=("patch", "configmap", "cm2", "--type=merge", "-p", '{"data":{"c":"3"}}', *n),
        ),
        Step("apply queue", APPLY, _yaml(queue)),
        Step("get queue wide", ("get", "queue", session.queue, "-o", "wide")),
        Step("get queue yaml", ("get", "queues.scheduling.volcano.sh", session.queue, "-o", "yaml")),
        Step("apply vcjob", APPLY, _yaml(job)),
        Step("get vcjob wide", ("get", "vcjob", "-o", "wide", *n)),
        Step("describe vcjob", ("describe", "jobs.batch.volcano.sh", "train", *n)),
        Step("apply podgroup", APPLY, _yaml(podgroup)),
        Step("get podgroup wide", ("get", "pg", "-o", "wide", *n)),
        Step(
            "patch podgroup merge",
            ("patch", "podgroup", "spark-pg", "--type=merge", "-p", '{"spec":{"minMember":4}}', *n),
        ),
        Step("get podgroup minMember", ("get", "podgroup", "spark-pg", "-o", "jsonpath={.spec.minMember}", *n)),
        Step(
            "apply lease",
            APPLY,
            _yaml(
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": "leader", "namespace": ns},
                    "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 15},
                }
            ),
        ),
        Step("get lease", ("get", "lease", "leader", *n)),
        Step("create events.k8s.io event", ("create", "-f", "-"), _yaml(new_event)),
        Step("events.k8s.io event yaml", ("get", "events.events.k8s.io", "ev1", "-o", "yaml", *n)),
        Step(
            "events.k8s.io event as core",
            ("get", "events", "ev1", "-o", "jsonpath={.message}/{.involvedObject.name}/{.reportingComponent}", *n),
        ),
        Step("get all", ("get", "all", *n)),
        Step("explain pod field", ("explain", "pod.spec.nodeName")),
        Step("explain vcjob", ("explain", "jobs.spec.minAvailable", "--api-version=batch.volcano.sh/v1alpha1")),
        Step("auth can-i create pods", ("auth", "can-i", "create", "pods", *n)),
        Step(
            "auth can-i bind as scheduler",
            # `pods/binding` would ask about a pod named "binding": a subresource is a flag.
            (
                "auth",
                "can-i",
                "create",
                "pods",
                "--subresource=binding",
                "--as=system:serviceaccount:lahar-system:lahar-scheduler",
                *n,
            ),
        ),
        Step("delete pod", ("delete", "pod", "p1", "--grace-period=0", "--force", *n)),
        Step("delete vcjob", ("delete", "vcjob", "train", *n)),
        Step("delete podgroup", ("delete", "podgroup", "spark-pg", *n)),
        Step("delete queue", ("delete", "queue", session.queue)),
        Step("get deleted queue", ("get", "queue", session.queue)),
        Step("delete namespace", ("delete", "namespace", ns, "--wait=false")),
    ]


# Differences that are intended, by step, with the reason the report gives. A difference not
# listed here is a finding (a fidelity gap to close).
INTENDED: dict[str, str] = {
    "api-resources": "the embedded server serves the kinds Lahar uses, not all of Kubernetes' (no apiservices, "
    "RBAC, storage, networking, ...)",
    "explain pod field": "built-in fields carry no descriptions: the served schemas are generated from the "
    "wire contract (field names, numbers, types) of k8s.io/api, not its documentation",
    "describe pod": "no ServiceAccount admission: pods get no serviceAccountName default and no projected "
    "token volume (there are no tokens to mount in single-machine mode)",
    "get all": "`lahar apiserver` alone runs no controllers, so the Deployment makes no ReplicaSet or pods "
    "(under `lahar up` the workload controllers do); the real cluster runs kube-controller-manager",
    "get deployment wide": "no controllers behind `lahar apiserver` alone: the Deployment's status stays "
    "empty (kube-controller-manager fills it on the real cluster; lahar up's workload controllers do here)",
    "get queue wide": "Lahar's admission defaults a Queue's state (Open) and parent (root) as its scheduler "
    "reads them; deploy/'s CRD has no such defaults, so the real server leaves them empty",
    "get queue yaml": "the same defaults: the stored Queue has a status and spec.parent",
    "get podgroup wide": "Lahar's admission defaults a PodGroup's status (Pending, counts) at create",
}


def reason(step: str) -> str:
    return INTENDED.get(step, "")


# --- normalising ----------------------------------------------------------------------------------

_UID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?( [+-]\d{4} \w+)?")
_DESCRIBE_TIME = re.compile(r"\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}")
_RESOURCE_VERSION = re.compile(r'((?:resourceVersion|Resource Version):\s*)"?\d+"?')
# A kubectl age column: 5s, 3m2s, 2m, 4h5m, 2d3h, 10d, <unknown>.
_AGE = re.compile(r"(?<=\s)(<unknown>|\d+[smhd](\d+[smh])?)(?=\s|$)")
_HOST = re.compile(r"https?://(127\.0\.0\.1|localhost|\[::1\]):\d+")
_GENERATION = re.compile(r"((?:generation|Generation):\s*)\d+")
_HASH = re.compile(r"\b(web-)[0-9a-f]{8,10}(-[0-9a-z]{5})?\b")


def normalise(text: str, session: Session) -> str:
    text = text.replace(session.queue, "<queue>").replace(session.namespace, "<ns>")
    text = _UID.sub("<uid>", text)
    text = _DESCRIBE_TIME.sub("<time>", text)
    text = _TIME.sub("<time>", text)
    text = _RESOURCE_VERSION.sub(r"\1<rv>", text)
    text = _GENERATION.sub(r"\1<n>", text)
    text = _HOST.sub("<server>", text)
    text = _HASH.sub(r"\1<hash>", text)
    lines = [_AGE.sub("<age>", line.rstrip()) for line in text.splitlines()]
    # Column widths follow the longest cell, which the placeholders change: compare cells, not spaces.
    return "\n".join(re.sub(r"(?<=\S) {2,}", "  ", line) for line in lines)


# --- running ----------------------------------------------------------------------------------------


class BatteryBroken(RuntimeError):
    """The battery could not run a step at all (as opposed to the server answering differently)."""


def run_step(kubectl: str, kubeconfig: Path, step: Step, session: Session) -> Outcome:
    base = [kubectl, f"--kubeconfig={kubeconfig}", "--request-timeout=20s"]
    try:
        if step.during is None:
            done = subprocess.run(
                [*base, *step.args], input=step.stdin, capture_output=True, text=True, timeout=STEP_TIMEOUT
            )
            return Outcome(step, done.returncode, normalise(done.stdout, session), normalise(done.stderr, session))
        watch = subprocess.Popen(
            [*base, *step.args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        time.sleep(WATCH_SECONDS / 2)
        subprocess.run([*base, *step.during], capture_output=True, text=True, timeout=STEP_TIMEOUT)
        time.sleep(WATCH_SECONDS / 2)
        watch.send_signal(signal.SIGINT)
        try:
            stdout, stderr = watch.communicate(timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            watch.kill()
            stdout, stderr = watch.communicate()
        # Interrupted on purpose: its exit status says nothing about the server.
        return Outcome(step, 0, normalise(stdout, session), normalise(stderr, session))
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise BatteryBroken(f"step {step.name!r} ({' '.join(step.args)}): {exc}") from exc


def run_session(
    kubectl: str, kubeconfig: Path, session: Session, log: Callable[[str], None] = lambda _: None
) -> list[Outcome]:
    outcomes = []
    for step in steps(session):
        outcomes.append(run_step(kubectl, kubeconfig, step, session))
        log(f"{step.name}: exit {outcomes[-1].returncode}")
    return outcomes


# --- comparing ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    step: str
    command: str
    embedded: str
    real: str
    embedded_exit: int
    real_exit: int


def first_difference(left: str, right: str) -> tuple[str, str]:
    """The first line where two texts differ (with the line number), as shown in the table."""
    left_lines, right_lines = left.splitlines(), right.splitlines()
    for number in range(max(len(left_lines), len(right_lines))):
        a = left_lines[number] if number < len(left_lines) else "(nothing)"
        b = right_lines[number] if number < len(right_lines) else "(nothing)"
        if a != b:
            return a, b
    return "", ""


def compare(embedded: list[Outcome], real: list[Outcome]) -> tuple[list[str], list[Difference]]:
    """(steps that agree, steps that differ)."""
    same, different = [], []
    for left, right in zip(embedded, real, strict=True):
        if left.text == right.text:
            same.append(left.step.name)
            continue
        a, b = first_difference(left.text, right.text)
        different.append(
            Difference(left.step.name, "kubectl " + " ".join(left.step.args), a, b, left.returncode, right.returncode)
        )
    return same, different


def _cell(text: str, limit: int = 110) -> str:
    text = text.replace("|", "\\|").replace("`", "'").strip()
    return f"`{text[: limit - 3]}...`" if len(text) > limit else (f"`{text}`" if text else "")


def table(same: list[str], different: list[Difference]) -> str:
    lines = [
        "| step | command | exit (embedded / real) | first differing line: embedded | real | why (intended) |",
        "|---|---|---|---|---|---|",
    ]
    for d in different:
        command = d.command.replace("<", "&lt;")
        exits = f"{d.embedded_exit} / {d.real_exit}"
        why = reason(d.step) or "**unexplained: a fidelity gap**"
        lines.append(f"| {d.step} | {_cell(command, 80)} | {exits} | {_cell(d.embedded)} | {_cell(d.real)} | {why} |")
    return "\n".join(lines) + "\n"


def report(same: list[str], different: list[Difference], kubectl_version: str, real_version: str) -> str:
    return (
        "# kubectl on the embedded API server and on kube-apiserver\n\n"
        "Generated by `scripts/kubectl-battery.py` (also run by `tests/kubectl_battery`); do not edit by hand.\n"
        "The same kubectl session (`tests/kubectl_battery/battery.py`) runs against `lahar apiserver` and a real\n"
        f"kube-apiserver ({real_version}) with deploy/'s CRDs and admission policies, using {kubectl_version}.\n"
        "Outputs are normalised (uids, times, ages, resourceVersions, generations, the run's names) before they\n"
        "are compared. A row with a reason is an intended difference (`INTENDED` in battery.py says why);\n"
        "one without is a fidelity gap of the embedded server (or, rarely, of the normalisation).\n\n"
        f"**{len(same)} of {len(same) + len(different)} steps agree; {len(different)} differ "
        f"({sum(1 for d in different if not reason(d.step))} unexplained).**\n\n"
        f"Agreeing steps: {', '.join(same) or 'none'}.\n\n"
        "## Differences\n\n" + table(same, different)
    )
