"""No RBAC rule in deploy/ is broader than what Lahar's code uses, proven on the real control plane
(issue 14): kube-apiserver audits every request of lahar-system's ServiceAccounts (Metadata level,
tests/kube/control_plane.py), a compact scenario runs the controller, the scheduler (both with
--leader-elect, as deployed) and an agent, each with its own ServiceAccount's token, and the
(apiGroup, resource[/subresource], verb) triples each used are compared with those deploy/'s
Roles and ClusterRoles grant it.

The scenario makes this test stand alone whatever ran before it; whatever else in the session ran
under those accounts (the e2e scenarios, leader failover) is in the same log and counts too. A
granted triple never used fails the test unless UNREACHED names it with the reason the scenario
cannot reach it; any request of a component that RBAC refused fails it (a rule missing)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from lahar.api import kinds
from lahar.client.api import KubeApi
from lahar.client.errors import KubeError
from lahar.node import node_object
from lahar.node.simulated import SIM_DURATION_ANNOTATION, SIM_EXIT_CODE_ANNOTATION, SimNodeSize, SimulatedNodes
from tests.kube.control_plane import ControlPlane
from tests.real_backend import DEPLOY, service_account_kubeconfig
from tests.support import stop_process, wait_for

Triple = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb); "" is the core group
NAMESPACE = "lahar-system"
ACCOUNTS = ("lahar-controller", "lahar-scheduler", "lahar-agent")
RBAC_FOLDERS = ("controller", "scheduler", "daemonset")
TIMEOUT = 90.0
# Shorter than kube's 15/10/2 (as tests/leader): a Lease left by an earlier test is taken over soon.
LEADER_TIMINGS = (
    "--leader-elect-lease-duration=8s",
    "--leader-elect-renew-deadline=6s",
    "--leader-elect-retry-period=1s",
)

# Granted, used by the code, but on paths this scenario does not reach. Each needs its reason;
# a triple that no code uses does not belong here: narrow deploy/ instead.
UNREACHED: dict[str, dict[Triple, str]] = {
    "lahar-controller": {
        ("", "services", "patch"): "only when the svc or ray plugin's Service no longer matches what the "
        "plugin wants (someone edited it): the plugins' Services never change with the job",
        ("networking.k8s.io", "networkpolicies", "patch"): "only when the svc plugin's NetworkPolicy was edited "
        "by someone else: it never changes with the job",
        ("batch.volcano.sh", "jobs/finalizers", "update"): "never a request: OwnerReferencesPermissionEnforcement "
        "admission checks it when the controller sets blockOwnerDeletion on a PodGroup's or pod's owner "
        "reference (the test control plane does not enable that plugin; such clusters do)",
        ("scheduling.volcano.sh", "podgroups", "get"): "a Job's PodGroup create answered AlreadyExists (a race with "
        "its own informer, controller/controller.py _ensure_podgroup)",
    },
    "lahar-scheduler": {
        ("", "pods", "get"): "a bind answered Conflict: is the pod already bound to our node "
        "(scheduler/binder.py already_bound_here)",
        ("", "pods/eviction", "create"): "preemption and reclaim evict victims a PodDisruptionBudget may "
        "cover (scheduler/binder.py); this scenario has no competing queues",
        ("", "pods", "delete"): "preemption and reclaim delete victims no PodDisruptionBudget covers, and a "
        "gang whose other binds failed has its bound members rolled back (scheduler/binder.py): this "
        "scenario neither preempts nor fails a bind",
        ("", "pods", "patch"): "the lahar.dev/gpu-index annotation before a GPU pod's bind (scheduler/binder.py): "
        "simulated nodes here have no GPUs",
        ("", "events", "patch"): "a repeat of one event within 10 minutes counts on the first (lahar/client/"
        "events.py): a pod that stays unschedulable; here every pod fits",
        ("", "resourcequotas", "list"): "the ResourceQuota informer starts only while the scheduler's "
        "configuration names the resourcequota plugin (scheduler/cache.py start_informers); this scenario "
        "runs the default configuration",
        ("", "resourcequotas", "watch"): "as list: only with the resourcequota plugin configured",
        ("shard.volcano.sh", "nodeshards", "list"): "the NodeShard informer starts only for a sharded scheduler "
        "(`--scheduler-sharding-mode hard|soft`, scheduler/cache.py start_informers); this scenario runs unsharded "
        "(tests/scheduler/test_scheduler_e2e.py runs a sharded one on kube-apiserver)",
        ("shard.volcano.sh", "nodeshards", "watch"): "as list: only for a sharded scheduler",
        ("shard.volcano.sh", "nodeshards/status", "patch"): "a sharded scheduler writes its NodeShard's status "
        "after a cycle (scheduler/status.py); as list, only when sharded",
    },
    "lahar-agent": {
        ("", "pods/eviction", "create"): "QoS's last resort under pressure (agent/qos/eviction.py); the agent "
        "runs in --dry-run here (no cgroup writes or evictions on a shared test machine)",
        ("", "events", "create"): "one event per eviction, which --dry-run does not make",
        ("", "events", "patch"): "a repeated eviction event counts on the first; --dry-run makes none",
        ("", "nodes/status", "patch"): "batch-cpu/batch-memory in the Node's allocatable "
        "(agent/qos/node_allocatable.py), which --dry-run leaves unwritten",
    },
}


# --- what deploy/ grants --------------------------------------------------------------------------


def rbac_documents() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for folder in RBAC_FOLDERS:
        for path in sorted((DEPLOY / folder).glob("*.yaml")):
            documents += [d for d in yaml.safe_load_all(path.read_text()) if d and "kind" in d]
    return documents


def granted_triples() -> dict[str, set[Triple]]:
    """Per ServiceAccount of lahar-system, every triple its bound Roles and ClusterRoles grant
    (resourceNames narrow a rule to some objects but grant the same triple)."""
    documents = rbac_documents()
    roles = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d.get("rules") or []
        for d in documents
        if d["kind"] in ("Role", "ClusterRole")
    }
    granted: dict[str, set[Triple]] = {account: set() for account in ACCOUNTS}
    for binding in (d for d in documents if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        rules = roles[(ref["kind"], namespace, ref["name"])]
        for subject in binding["subjects"]:
            if subject["kind"] != "ServiceAccount" or subject.get("namespace") != NAMESPACE:
                continue
            for rule in rules:
                assert not rule.get("nonResourceURLs"), f"{ref['name']}: nonResourceURLs are not checked here"
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            assert "*" not in (group, resource, verb), f"{ref['name']}: a wildcard grants everything"
                            granted.setdefault(subject["name"], set()).add((group, resource, verb))
    return granted


# --- what the components did --------------------------------------------------------------------


def audit_events(log: Path) -> Iterator[dict[str, Any]]:
    if not log.exists():
        return
    for line in log.read_text().splitlines():
        if line.strip():
            yield json.loads(line)


def account_of(event: dict[str, Any]) -> str | None:
    username = str((event.get("user") or {}).get("username", ""))
    prefix = f"system:serviceaccount:{NAMESPACE}:"
    return username[len(prefix) :] if username.startswith(prefix) else None


def used_triples(log: Path) -> tuple[dict[str, set[Triple]], list[str]]:
    """The triples each account was authorized for, and every request authorization refused.
    A 403 is not always RBAC's: admission's NamespaceLifecycle answers 403 to a create in a
    terminating namespace (the e2e scenarios delete theirs while the components still run), so
    the authorizer's own decision, which the audit event carries, is what counts."""
    used: dict[str, set[Triple]] = {}
    refused: list[str] = []
    for event in audit_events(log):
        account = account_of(event)
        if account is None:
            continue
        decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
        if decision == "forbid":
            refused.append(f"{account}: {event.get('verb')} {event.get('requestURI')} (RBAC refused it)")
            continue
        ref = event.get("objectRef")
        if ref is None or decision != "allow":  # discovery (no rule in deploy/); not authenticated
            continue
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        used.setdefault(account, set()).add((ref.get("apiGroup", ""), resource, event["verb"]))
    return used, refused


# --- the compact scenario -------------------------------------------------------------------------


class Process:
    """`python -m lahar <args>`, its output in a log file, stopped with SIGTERM."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lahar", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def stop(self) -> None:
        stop_process(self.proc, 20)


def job(name: str, namespace: str, selector: dict[str, str], **spec: Any) -> dict[str, Any]:
    annotations = {SIM_DURATION_ANNOTATION: "1"}
    if spec.pop("fail", False):
        annotations[SIM_EXIT_CODE_ANNOTATION] = "3"
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    template = {
        "metadata": {"annotations": annotations},
        "spec": {"restartPolicy": "Never", "nodeSelector": selector, "containers": [container]},
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "lahar",
            "queue": "default",
            "minAvailable": 2,
            "tasks": [{"name": "work", "replicas": 2, "template": template}],
            **spec,
        },
    }


def job_phase(api: KubeApi, namespace: str, name: str) -> str:
    try:
        obj = api.get(kinds.JOB, name, namespace)
    except KubeError:
        return "gone"
    return str(((obj.get("status") or {}).get("state") or {}).get("phase", ""))


def run_scenario(admin: KubeApi, admin_kubeconfig: Path, folder: Path) -> None:
    """A Volcano Job with the svc and ssh plugins to Completed and deleted by its TTL; a failing one
    restarted by its policy; a job suspended and resumed and a queue closed and opened through
    their command annotations; an agent reading its Node and watching its pods."""
    kubeconfigs = {
        account: service_account_kubeconfig(admin, admin_kubeconfig, account, folder / f"{account}.kubeconfig")
        for account in ACCOUNTS
    }
    suffix = uuid.uuid4().hex[:6]
    namespace = f"rbac-audit-{suffix}"
    selector = {"pool": namespace}
    admin.create(kinds.NAMESPACE, {"metadata": {"name": namespace}})
    nodes = SimulatedNodes(admin, 2, SimNodeSize(cpu="4", memory="64Gi", labels=selector), name_prefix=f"{namespace}-")
    nodes.start()
    agent_node = f"{namespace}-agent"
    processes: list[Process] = []
    queue = f"rbac-audit-{suffix}"
    try:
        for command, extra in (("scheduler", ["--period=0.2"]), ("controller", ["--resync=5"])):
            account = f"lahar-{command}"
            args = [command, f"--kubeconfig={kubeconfigs[account]}", "--metrics-port=0", "--leader-elect"]
            args += [f"--leader-elect-resource-name={account}", f"--leader-elect-resource-namespace={NAMESPACE}"]
            processes.append(Process([*args, *LEADER_TIMINGS, *extra], folder / f"{command}.log"))
        node_object.register(
            admin,
            node_object.node_object(
                agent_node,
                {},
                node_object.local_capacity(),
                [node_object.ready_condition(True, time.time())],
                "127.0.0.1",
            ),
        )
        agent = ["agent", f"--node={agent_node}", f"--kubeconfig={kubeconfigs['lahar-agent']}", "--interval=0.5"]
        processes.append(
            Process([*agent, "--dry-run", "--metrics-address=127.0.0.1", "--metrics-port=0"], folder / "agent.log")
        )

        plugins = {"svc": [], "ssh": []}
        admin.create(kinds.JOB, job("done", namespace, selector, plugins=plugins, ttlSecondsAfterFinished=0), namespace)
        policies = [{"event": "PodFailed", "action": "RestartJob"}]
        admin.create(kinds.JOB, job("flaky", namespace, selector, fail=True, maxRetry=1, policies=policies), namespace)
        wait_for(lambda: job_phase(admin, namespace, "done") == "gone", TIMEOUT, "the done job deleted by its TTL")
        wait_for(lambda: job_phase(admin, namespace, "flaky") == "Failed", TIMEOUT, "the flaky job Failed")

        # A long job suspended (AbortJob) then resumed: the controller consumes each annotation.
        long = job("long", namespace, selector)
        long["spec"]["tasks"][0]["template"]["metadata"]["annotations"][SIM_DURATION_ANNOTATION] = "600"
        admin.create(kinds.JOB, long, namespace)
        wait_for(lambda: job_phase(admin, namespace, "long") == "Running", TIMEOUT, "the long job Running")
        for command, phase in (("AbortJob", "Aborted"), ("ResumeJob", "Running")):
            admin.patch(kinds.JOB, "long", {"metadata": {"annotations": {"lahar.dev/command": command}}}, namespace)
            wait_for(lambda p=phase: job_phase(admin, namespace, "long") == p, TIMEOUT, f"the long job {phase}")

        # A gang no node can hold: the scheduler says so in an Event (its only events here, now
        # that finished jobs release their PodGroups instead of lingering unschedulable).
        too_big = job("too-big", namespace, selector)
        too_big["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "16"
        admin.create(kinds.JOB, too_big, namespace)
        wait_for(
            lambda: any(
                e.get("reason") == "Unschedulable"
                for e in admin.list(kinds.EVENT, namespace, field_selector="involvedObject.name=too-big")["items"]
            ),
            TIMEOUT,
            "the scheduler's Unschedulable event",
        )
        admin.delete(kinds.JOB, "too-big", namespace)

        # Scaled while running: the PodGroup, the hosts ConfigMap and the ssh config follow.
        scaled = job("scaled", namespace, selector, plugins={"svc": [], "ssh": []})
        scaled["spec"]["tasks"][0]["template"]["metadata"]["annotations"][SIM_DURATION_ANNOTATION] = "600"
        admin.create(kinds.JOB, scaled, namespace)
        wait_for(lambda: job_phase(admin, namespace, "scaled") == "Running", TIMEOUT, "the scaled job Running")
        tasks = admin.get(kinds.JOB, "scaled", namespace)["spec"]["tasks"]
        tasks[0]["replicas"] = tasks[0]["minAvailable"] = 3
        admin.patch(kinds.JOB, "scaled", {"spec": {"minAvailable": 3, "tasks": tasks}}, namespace)
        wait_for(
            lambda: admin.get(kinds.CONFIGMAP, "scaled-svc", namespace)["data"].get("VC_WORK_NUM") == "3",
            TIMEOUT,
            "the hosts ConfigMap of 3",
        )

        # A JobFlow of one flow makes its Job from a JobTemplate; a CronJob gets its status.
        template = job("step", namespace, selector)
        admin.create(
            kinds.JOBTEMPLATE,
            {
                "apiVersion": "flow.volcano.sh/v1alpha1",
                "kind": "JobTemplate",
                "metadata": template["metadata"],
                "spec": template["spec"],
            },
            namespace,
        )
        admin.create(
            kinds.JOBFLOW,
            {
                "apiVersion": "flow.volcano.sh/v1alpha1",
                "kind": "JobFlow",
                "metadata": {"name": "flow"},
                "spec": {"flows": [{"name": "step"}]},
            },
            namespace,
        )
        wait_for(lambda: job_phase(admin, namespace, "flow-step") not in ("gone", ""), TIMEOUT, "the flow's Job")
        wait_for(
            lambda: (admin.get(kinds.JOBTEMPLATE, "step", namespace).get("status") or {}).get("jobDependsOnList"),
            TIMEOUT,
            "the JobTemplate's status",
        )
        cron = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "CronJob", "metadata": {"name": "cron"}}
        cron["spec"] = {"schedule": "@yearly", "jobTemplate": {"spec": template["spec"]}}
        admin.create(kinds.CRONJOB, cron, namespace)
        wait_for(lambda: "status" in admin.get(kinds.CRONJOB, "cron", namespace), TIMEOUT, "the CronJob's status")

        admin.create(
            kinds.QUEUE,
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": queue},
                "spec": {"weight": 1},
            },
        )
        for command, state in (("close", "Closed"), ("open", "Open")):
            admin.patch(kinds.QUEUE, queue, {"metadata": {"annotations": {"lahar.dev/queue-command": command}}})
            wait_for(
                lambda s=state: (admin.get(kinds.QUEUE, queue).get("status") or {}).get("state") == s,
                TIMEOUT,
                f"the queue {state}",
            )
        for process in processes:
            assert process.proc.poll() is None, process.log.read_text()[-4000:]
    finally:
        for process in processes:
            process.stop()
        with contextlib.suppress(KubeError):
            admin.delete(kinds.NAMESPACE, namespace)
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not admin.list(kinds.POD, namespace)["items"], 30, "the pods to go", interval=0.3)
        nodes.stop()
        for name in [*nodes.node_names, agent_node]:
            with contextlib.suppress(KubeError):
                admin.delete(kinds.NODE, name)
        with contextlib.suppress(KubeError):
            admin.delete(kinds.QUEUE, queue)


def test_deploy_rbac_grants_what_the_components_use_and_no_more(
    real_cluster: ControlPlane, lahar_admin_kubeconfig: Path, lahar_installed_cluster: KubeApi, tmp_path: Path
) -> None:
    run_scenario(lahar_installed_cluster, lahar_admin_kubeconfig, tmp_path)
    time.sleep(1)  # the last requests of the stopped processes are in the log (blocking mode)
    used, refused = used_triples(real_cluster.audit_log)
    granted = granted_triples()
    problems = [f"refused: {line}" for line in refused]
    for account in ACCOUNTS:
        allowed = UNREACHED.get(account, {})
        for triple in sorted(granted[account] - used.get(account, set()) - allowed.keys()):
            problems.append(f"{account}: granted, never used: {triple}")
        for triple in sorted(allowed.keys() - granted[account]):
            problems.append(f"{account}: UNREACHED names {triple}, which deploy/ does not grant")
    assert not problems, "\n".join(problems)
