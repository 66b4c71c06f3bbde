"""`lahar bench federation --live`: the placement bench in real time, on real processes. It starts
`lahar up --clusters 3` (a hub running `lahar federation`, three members each with its own
embedded API server, scheduler, controller and simulated nodes), submits the seeded Jobs of the
simulated bench to the hub with the teams' fleet-wide capabilities on the hub's Queues, and watches
until every one completed. Then the same Jobs again, created straight in the members round-robin
(Job i in member i mod 3, or the next that could ever hold it; the members' queues have no
capability: round-robin knows no fleet quota). `--method` runs one of the two alone, on a fleet of
its own, so that each fits a benchmark's hold of the machine.

Time can be scaled (`--time-scale S`): a Job that runs d simulated seconds runs d / S real seconds
(simulated pods), the federation's heartbeat is the `--heartbeat` given, and finished Jobs are
deleted in the members `ttlSecondsAfterFinished` after they end (on the hub they stay), so that
1,000 real Jobs through real API servers run in minutes and the members' lists stay short.

Measured from outside, as a user would see it: the dispatch rate (Jobs placed on a member per
second, from the first submission to the last dispatch), the time until every Job had been
Running, the time until all completed, mean fleet CPU use (Running pods' CPU requests over the
fleet's CPUs, sampled every half second until all completed) and the quota error (the most any
team used over its capability, as a fraction of it)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lahar.api import kinds
from lahar.api.job import JobPhase, job_phase
from lahar.api.pod import TERMINAL_PHASES
from lahar.api.resources import ResourceList, pod_requests
from lahar.bench._cluster import Cluster
from lahar.client.api import KubeApi
from lahar.client.connect import new_api_client
from lahar.client.errors import AlreadyExists, KubeError
from lahar.federation import names
from lahar.federation.placement import pack

SIM_DURATION = "lahar.dev/sim-duration"
QUEUE_LABEL = "volcano.sh/queue-name"  # on the pods the members' controllers make
JOB_LABEL = "volcano.sh/job-name"  # likewise: the Job a pod belongs to
SAMPLE_SECONDS = 0.5
FLEET_START_TIMEOUT = 600.0  # seven programs start on a shared 2-core machine
RUN_TIMEOUT = 900.0  # a placement's run, from the first submission until all completed (--run-timeout)
CHECKPOINT_SECONDS = 60.0
# No Job newly Running or finished for this long, with Jobs left: the members are looked into and
# what waits there, and why, is printed (and kept in the outcome's `stalls`).
STALL_SECONDS = 30.0
WAITING_PHASES = frozenset({JobPhase.PENDING, JobPhase.RESTARTING})
STALL_EXAMPLES = 3  # Jobs named per member in a stall report


@dataclass
class LiveOutcome:
    name: str
    jobs: int
    dispatch_seconds: float | None  # first submission to last dispatch (federation only)
    # Jobs dispatched before the first one finished (while nothing waited for room to free), and
    # by when: the rate the federation places at when room is there.
    first_wave: int
    first_wave_seconds: float | None
    all_running: float | None  # first submission until every Job had been Running (None: not within the run)
    all_done: float | None  # until all had finished (None: the run stopped at --run-timeout first)
    utilisation: float  # over the run, until all done or stopped
    quota_error: float
    stopped_at: float  # seconds from the first submission to the end of the run
    samples: int  # how many times the Jobs and pods were listed (the figures' resolution)
    # (seconds, Jobs that had been Running by then, Jobs finished by then) every CHECKPOINT_SECONDS:
    # what compares placements that do not finish within a run
    progress: list[tuple[float, int, int]] = field(default_factory=list)
    # (seconds, report lines) for each time nothing moved for STALL_SECONDS with Jobs left
    stalls: list[tuple[float, list[str]]] = field(default_factory=list)
    curve: list[tuple[float, float]] = field(default_factory=list)

    @property
    def dispatch_rate(self) -> float | None:
        return self.jobs / self.dispatch_seconds if self.dispatch_seconds else None

    @property
    def first_wave_rate(self) -> float | None:
        return self.first_wave / self.first_wave_seconds if self.first_wave_seconds else None


def live_seconds(simulated: float, time_scale: float) -> float:
    """The simulated bench's 10-60 s run time of a Job, in real seconds (to the millisecond)."""
    return round(simulated / time_scale, 3)


def live_job(obj: dict[str, Any], namespace: str, seconds: float, ttl: int | None = None) -> dict[str, Any]:
    """A Volcano Job for a member's controller and scheduler, from the simulated bench's Job;
    with `ttl`, the member's controller deletes it that many seconds after it finished."""
    task = obj["spec"]["tasks"][0]
    requests = task["template"]["spec"]["containers"][0]["resources"]["requests"]
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": obj["metadata"]["name"], "namespace": namespace},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": task["replicas"],
            "queue": obj["spec"]["queue"],
            **({"ttlSecondsAfterFinished": ttl} if ttl is not None else {}),
            "tasks": [
                {
                    "name": "w",
                    "replicas": task["replicas"],
                    "template": {
                        "metadata": {"annotations": {SIM_DURATION: f"{seconds:g}"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": "c", "image": "sim", "resources": {"requests": requests, "limits": requests}}
                            ],
                        },
                    },
                }
            ],
        },
    }


class Watch:
    """When each Job was first dispatched, first Running (or already past it), and finished; and
    the fleet's CPU use and each team's, sampled from the members' pods."""

    def __init__(self, members: dict[str, KubeApi], namespace: str, fleet_cpu_milli: int) -> None:
        self.members = members
        self.namespace = namespace
        self.fleet_cpu = fleet_cpu_milli
        self.dispatched: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.curve: list[tuple[float, float]] = []
        self.team_peak: dict[str, int] = {}
        # Jobs created where they are listed (round-robin: in the members), as they are created.
        self.created: set[str] = set()
        self.stalls: list[tuple[float, list[str]]] = []
        self._moved = (0, 0.0, False)  # (Jobs Running or done, since when, stall reported)

    def note_jobs(
        self,
        jobs: Sequence[dict[str, Any]],
        now: float,
        dispatched: Callable[[dict[str, Any]], bool],
        created_before: Collection[str] = (),
    ) -> None:
        """`jobs` as listed at `now`; `created_before`: Jobs created before that listing began."""
        # A Job seen Running, or created before the listing, that is not in it was deleted by its
        # ttlSecondsAfterFinished (the members' controllers delete only finished Jobs): it had
        # been Running and was done, at the latest by now (a 0.25 s Job and its 10 s ttl pass
        # unseen when the Jobs are created faster than they are watched).
        listed = {job["metadata"]["name"] for job in jobs}
        for name in (set(self.running) | set(created_before)) - listed - set(self.done):
            self.running.setdefault(name, now)
            self.done[name] = now
        for job in jobs:
            name = job["metadata"]["name"]
            if dispatched(job):
                self.dispatched.setdefault(name, now)
            phase = job_phase(job).value
            if phase in ("Running", "Completing", "Completed"):
                self.running.setdefault(name, now)
            if phase in ("Completed", "Failed", "Terminated", "Aborted"):
                self.running.setdefault(name, now)
                self.done.setdefault(name, now)

    def sample_pods(self, now: float) -> None:
        used = 0
        teams: dict[str, int] = {}
        for api in self.members.values():
            for pod in api.list(kinds.POD, self.namespace)["items"]:
                if (pod.get("status") or {}).get("phase") != "Running" or not (pod.get("spec") or {}).get("nodeName"):
                    continue
                cpu = pod_requests(pod).get("cpu")
                used += cpu
                team = (pod["metadata"].get("labels") or {}).get(QUEUE_LABEL, "")
                teams[team] = teams.get(team, 0) + cpu
        self.curve.append((now, used / self.fleet_cpu))
        for team, cpu in teams.items():
            self.team_peak[team] = max(self.team_peak.get(team, 0), cpu)

    def check_stall(self, now: float, left: int) -> list[str] | None:
        """The members' stall report (stall_report) once nothing moved for STALL_SECONDS with
        `left` Jobs not finished; once a stall: the next report needs a Job to move first."""
        moved, since, reported = self._moved
        count = len(self.running) + len(self.done)
        if count != moved:
            self._moved = (count, now, False)
            return None
        if not left or reported or now - since < STALL_SECONDS:
            return None
        self._moved = (moved, since, True)
        lines = stall_report(self.members, self.namespace)
        self.stalls.append((round(now, 1), lines))
        return lines


def _member_apis(data_dir: Path, member_names: Sequence[str]) -> dict[str, KubeApi]:
    return {
        name: KubeApi(new_api_client(str(data_dir / "members" / name / "kubeconfig")), timeout=30)
        for name in member_names
    }


def _ensure(api: KubeApi, kind: Any, obj: dict[str, Any], namespace: str | None = None) -> None:
    with contextlib.suppress(AlreadyExists):
        api.create(kind, obj, namespace)


def _follow(
    watch: Watch,
    names_wanted: set[str],
    began: float,
    list_jobs: Callable[[], list[dict[str, Any]]],
    dispatched: Callable[[dict[str, Any]], bool],
    timeout: float,
) -> float:
    """Samples until every Job in `names_wanted` finished or `timeout` passed; the seconds it took."""
    deadline = began + timeout
    while set(watch.done) < names_wanted:
        now = time.monotonic() - began
        if time.monotonic() > deadline:
            print(
                f"  stopped after {timeout:.0f} s: {len(names_wanted - set(watch.done))} Jobs not finished", flush=True
            )
            return now
        try:
            created_before = set(watch.created)
            listed = [j for j in list_jobs() if j["metadata"]["name"] in names_wanted]
            watch.note_jobs(listed, now, dispatched, created_before)
            watch.sample_pods(now)
            left = len(names_wanted - set(watch.done))
            stalled = watch.check_stall(now, left)
            if stalled:
                print(f"  no Job started or finished for {STALL_SECONDS:.0f} s, {left} left ({now:.0f} s):", flush=True)
                for line in stalled:
                    print(f"    {line}", flush=True)
        except KubeError as exc:  # a slow answer on a loaded machine: the next sample
            print(f"  (sample skipped: {exc})", flush=True)
        time.sleep(SAMPLE_SECONDS)
    return time.monotonic() - began


def progress(running: Sequence[float], done: Sequence[float], until: float) -> list[tuple[float, int, int]]:
    """How many Jobs had been Running and how many had finished, every CHECKPOINT_SECONDS of a run
    that lasted `until` seconds (and at its end)."""
    marks = [CHECKPOINT_SECONDS * k for k in range(1, int(until // CHECKPOINT_SECONDS) + 1)]
    if not marks or marks[-1] < until:
        marks.append(round(until, 1))
    return [(t, sum(1 for r in running if r <= t), sum(1 for d in done if d <= t)) for t in marks]


@dataclass(frozen=True)
class MemberStall:
    """What waits in one member when the run stopped moving, and whether room is there for it."""

    member: str
    waiting: int  # Jobs Pending (or Restarting)
    fits_now: list[str]  # of those, the Jobs whose pods not yet on a node fit the nodes' free room now
    unbound: int  # pods of ours on no node
    not_started: int  # pods on a node that has not made them Running yet
    free_cpu: int  # millicores left on the nodes by the unfinished pods bound to them
    cpu: int  # millicores allocatable on the nodes
    podgroups: dict[str, int]  # the waiting Jobs' PodGroups, by phase ("none": not made yet)
    reasons: list[str]  # "<job>: <its PodGroup's latest condition>", for some of fits_now

    @property
    def stalled(self) -> bool:
        """Jobs wait that the room free now would hold: the member's own scheduling is not moving."""
        return bool(self.fits_now)

    def line(self) -> str:
        groups = ", ".join(f"{phase} {count}" for phase, count in sorted(self.podgroups.items())) or "-"
        fits = ""
        if self.fits_now:
            named = ", ".join(self.fits_now[:STALL_EXAMPLES])
            more = "" if len(self.fits_now) <= STALL_EXAMPLES else ", …"
            fits = f" ({len(self.fits_now)} would fit the free room now: {named}{more})"
        return (
            f"{self.member}: {self.waiting} Jobs waiting{fits}; PodGroups {groups}; pods {self.unbound} on no "
            f"node, {self.not_started} on a node and not started; CPU free {self.free_cpu / 1000:g} of "
            f"{self.cpu / 1000:g}"
        )


def member_stall(
    member: str,
    jobs: Sequence[dict[str, Any]],
    podgroups: Sequence[dict[str, Any]],
    pods: Sequence[dict[str, Any]],
    nodes: Sequence[dict[str, Any]],
) -> MemberStall:
    """One member's waiting Jobs against its nodes' free room, from its objects as listed."""
    free = {
        n["metadata"]["name"]: ResourceList.from_k8s((n.get("status") or {}).get("allocatable") or {}) for n in nodes
    }
    cpu = sum(room.get("cpu") for room in free.values())
    unplaced: dict[str, list[ResourceList]] = {}
    with_pods: set[str] = set()  # Jobs whose controller made pods
    unbound = not_started = 0
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        node = (pod.get("spec") or {}).get("nodeName")
        job = (pod["metadata"].get("labels") or {}).get(JOB_LABEL, "")
        with_pods.add(job)
        if phase in TERMINAL_PHASES:
            continue
        if node:
            if node in free:
                free[node] = free[node] - pod_requests(pod)
            not_started += phase != "Running"
        else:
            unbound += 1
            unplaced.setdefault(job, []).append(pod_requests(pod))
    groups = {pg["metadata"]["name"]: pg for pg in podgroups}
    waiting = [job for job in jobs if job_phase(job) in WAITING_PHASES]
    phases: dict[str, int] = {}
    fits_now: list[str] = []
    reasons: list[str] = []
    for job in waiting:
        name = job["metadata"]["name"]
        group = groups.get(name)
        status = (group or {}).get("status") or {}
        phase = status.get("phase", "Pending") if group else "none"
        phases[phase] = phases.get(phase, 0) + 1
        gang = unplaced.get(name, []) if name in with_pods else _spec_pods(job)
        if gang and pack(list(free.values()), gang) is not None:
            fits_now.append(name)
            if len(reasons) < STALL_EXAMPLES:
                conditions = status.get("conditions") or []
                last = conditions[-1] if conditions else {}
                said = f"{last.get('type', '')} {last.get('reason', '')}: {last.get('message', '')}".strip()
                reasons.append(f"{name}: PodGroup {phase}" + (f", {said}" if last else ""))
    return MemberStall(
        member,
        len(waiting),
        sorted(fits_now),
        unbound,
        not_started,
        sum(r.get("cpu") for r in free.values()),
        cpu,
        phases,
        reasons,
    )


def _spec_pods(job: dict[str, Any]) -> list[ResourceList]:
    """The pods a Job's tasks ask for (before its controller made any)."""
    return [
        pod_requests({"spec": task.get("template", {}).get("spec") or {}})
        for task in (job.get("spec") or {}).get("tasks") or []
        for _ in range(int(task.get("replicas", 1)))
    ]


def stall_report(members: dict[str, KubeApi], namespace: str) -> list[str]:
    """Each member's waiting Jobs and room (member_stall), as printable lines."""
    lines = []
    for name, api in members.items():
        stall = member_stall(
            name,
            api.list(kinds.JOB, namespace)["items"],
            api.list(kinds.PODGROUP, namespace)["items"],
            api.list(kinds.POD, namespace)["items"],
            api.list(kinds.NODE)["items"],
        )
        verdict = "STALLED: Jobs that fit wait" if stall.stalled else "waiting for room" if stall.waiting else "idle"
        lines.append(f"{stall.line()} [{verdict}]")
        lines.extend(f"    {reason}" for reason in stall.reasons)
    return lines


def _outcome(
    name: str, watch: Watch, count: int, capability_milli: int, with_dispatch: bool, stopped_at: float
) -> LiveOutcome:
    curve = watch.curve
    finished = len(watch.done) >= count
    first_done = min(watch.done.values(), default=stopped_at)
    wave = [t for t in watch.dispatched.values() if t <= first_done] if with_dispatch else []
    return LiveOutcome(
        name=name,
        jobs=count,
        dispatch_seconds=max(watch.dispatched.values()) if with_dispatch and watch.dispatched else None,
        first_wave=len(wave),
        first_wave_seconds=max(wave) if wave else None,
        all_running=max(watch.running.values()) if len(watch.running) >= count else None,
        all_done=max(watch.done.values()) if finished else None,
        utilisation=sum(u for _, u in curve) / len(curve) if curve else 0.0,
        quota_error=max(0.0, max((p / capability_milli - 1 for p in watch.team_peak.values()), default=0.0)),
        stopped_at=round(stopped_at, 1),
        samples=len(curve),
        progress=progress(list(watch.running.values()), list(watch.done.values()), stopped_at),
        stalls=watch.stalls,
        curve=curve,
    )


@dataclass(frozen=True)
class LiveSetup:
    """What both placements run: the seeded Jobs, the fleet and the time scale."""

    jobs: Sequence[dict[str, Any]]
    durations: Sequence[float]  # simulated seconds
    teams: Sequence[str]
    capability_cpu: int
    members: Sequence[tuple[str, tuple[ResourceList, ...]]]  # (name, node allocatables), in order
    fleet_cpu: int
    time_scale: float = 3.0
    ttl: int | None = None  # ttlSecondsAfterFinished of the Jobs (None: kept)
    run_timeout: float = RUN_TIMEOUT

    def job(self, index: int, namespace: str) -> dict[str, Any]:
        seconds = live_seconds(self.durations[index], self.time_scale)
        return live_job(self.jobs[index], namespace, seconds, self.ttl)

    @property
    def wanted(self) -> set[str]:
        return {job["metadata"]["name"] for job in self.jobs}


METHODS = ("federation", "round-robin")


def run_live(
    setup: LiveSetup, methods: Sequence[str] = METHODS, policy: str = "", keep: Path | None = None
) -> list[LiveOutcome]:
    """The placements `methods` one after the other on one `lahar up --clusters 3` (its hub with
    the federation policy `policy`, YAML, when given)."""
    data_dir = keep or Path(tempfile.mkdtemp(prefix="lahar-bench-federation-"))
    extra: list[str] = []
    if policy:
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "federation.yaml").write_text(policy)
        extra = ["--federation-policy", str(data_dir / "federation.yaml")]
    fleet = Cluster(data_dir / "fleet", 0, *extra, clusters=len(setup.members), start_timeout=FLEET_START_TIMEOUT)
    print(f"starting lahar up --clusters {len(setup.members)} (data: {data_dir})…", flush=True)
    hub = fleet.start()
    outcomes = []
    try:
        apis = _member_apis(data_dir / "fleet", [name for name, _ in setup.members])
        deadline = time.monotonic() + 120
        while not all((c.get("status") or {}).get("reachable") for c in hub.list(kinds.CLUSTER)["items"]):
            if time.monotonic() > deadline:
                raise RuntimeError("the members did not all become reachable from the hub")
            time.sleep(0.5)
        for method in methods:
            run = _run_federation if method == "federation" else _run_round_robin
            outcomes.append(run(setup, hub, apis))
    finally:
        fleet.stop()
        if keep is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    return outcomes


def _run_federation(setup: LiveSetup, hub: KubeApi, apis: dict[str, KubeApi]) -> LiveOutcome:
    """Every Job to the hub, the teams' capabilities on the hub's Queues."""
    namespace = "bench-fed"
    _ensure(hub, kinds.NAMESPACE, {"metadata": {"name": namespace}})
    capability = {"cpu": str(setup.capability_cpu)}
    for team in setup.teams:
        _ensure(hub, kinds.QUEUE, {"metadata": {"name": team}, "spec": {"weight": 1, "capability": capability}})
    watch = Watch(apis, namespace, setup.fleet_cpu * 1000)
    began = time.monotonic()
    for index in range(len(setup.jobs)):
        hub.create(kinds.JOB, setup.job(index, namespace), namespace)
    print(f"  federation: {len(setup.jobs)} Jobs submitted in {time.monotonic() - began:.1f} s", flush=True)
    stopped_at = _follow(
        watch,
        setup.wanted,
        began,
        lambda: hub.list(kinds.JOB, namespace)["items"],
        lambda job: names.DISPATCHED_ANNOTATION in (job["metadata"].get("annotations") or {}),
        setup.run_timeout,
    )
    return _outcome("federation", watch, len(setup.jobs), setup.capability_cpu * 1000, True, stopped_at)


def _run_round_robin(setup: LiveSetup, hub: KubeApi, apis: dict[str, KubeApi]) -> LiveOutcome:
    """The same Jobs straight into the members, no fleet-wide quota."""
    namespace = "bench-rr"
    order = [name for name, _ in setup.members]
    for name in order:
        _ensure(apis[name], kinds.NAMESPACE, {"metadata": {"name": namespace}})
        for team in setup.teams:
            _ensure(apis[name], kinds.QUEUE, {"metadata": {"name": team}, "spec": {"weight": 1}})
    allocatable = dict(setup.members)
    watch = Watch(apis, namespace, setup.fleet_cpu * 1000)
    failed: list[BaseException] = []

    def create_all() -> None:
        # Created while the run is watched: the members take a minute to accept 1,000 Jobs while
        # their controllers and schedulers work on the first ones, which run meanwhile.
        try:
            for index, job in enumerate(setup.jobs):
                pods = _pods(job)
                for offset in range(len(order)):
                    member = order[(index + offset) % len(order)]
                    if pack(allocatable[member], pods) is not None:
                        apis[member].create(kinds.JOB, setup.job(index, namespace), namespace)
                        watch.created.add(job["metadata"]["name"])
                        break
            print(f"  round-robin: {len(watch.created)} Jobs created in {time.monotonic() - began:.1f} s", flush=True)
        except BaseException as exc:  # reported after the run, which then cannot finish
            failed.append(exc)

    def member_jobs() -> list[dict[str, Any]]:
        return [j for api in apis.values() for j in api.list(kinds.JOB, namespace)["items"]]

    creator = threading.Thread(target=create_all, name="round-robin-create", daemon=True)
    began = time.monotonic()
    creator.start()
    stopped_at = _follow(watch, setup.wanted, began, member_jobs, lambda job: True, setup.run_timeout)
    creator.join()
    if failed:
        raise RuntimeError(f"creating the round-robin Jobs failed: {failed[0]}") from failed[0]
    return _outcome("round-robin", watch, len(setup.jobs), setup.capability_cpu * 1000, False, stopped_at)


def _pods(job: dict[str, Any]) -> list[ResourceList]:
    task = job["spec"]["tasks"][0]
    requests = task["template"]["spec"]["containers"][0]["resources"]["requests"]
    return [ResourceList.from_k8s(requests)] * task["replicas"]


def print_live(outcomes: Sequence[LiveOutcome], capability_cpu: int, fleet_cpu: int) -> None:
    print(
        f"{outcomes[0].jobs} jobs over 3 members ({fleet_cpu} CPUs), real time, teams capped at "
        f"{capability_cpu} CPUs each"
    )
    print(
        f"{'placement':<12} {'dispatch rate':>14} {'first wave':>22} {'all Running (s)':>16} {'all done (s)':>13} "
        f"{'mean CPU use':>13} {'quota error':>12}"
    )
    for o in outcomes:
        rate = f"{o.dispatch_rate:.1f} jobs/s" if o.dispatch_rate else "-"
        wave = f"{o.first_wave} in {o.first_wave_seconds:.1f} s" if o.first_wave_seconds else "-"
        running = f"{o.all_running:.1f}" if o.all_running is not None else f"not by {o.stopped_at:.0f}"
        done = f"{o.all_done:.1f}" if o.all_done is not None else f"not by {o.stopped_at:.0f}"
        print(
            f"{o.name:<12} {rate:>14} {wave:>22} {running:>16} {done:>13} {o.utilisation:>12.1%} {o.quota_error:>12.1%}"
        )
    for o in outcomes:
        print(f"  {o.name}: {o.samples} samples in {o.stopped_at:.0f} s")
    print("Jobs that had been Running / had finished, by time since the first submission:")
    for o in outcomes:
        marks = ", ".join(f"{t:g} s: {r}/{d}" for t, r, d in o.progress)
        print(f"  {o.name}: {marks}")
    for o in outcomes:
        for at, lines in o.stalls:
            print(f"  {o.name}: nothing moved for {STALL_SECONDS:.0f} s until {at:g} s; the members then:")
            for line in lines:
                print(f"    {line}")
