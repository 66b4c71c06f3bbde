"""`lahar bench federation`: level-one placement of many Jobs over three members, simulated in
simulated time with the federation's own planner (federation/planner.py) against round-robin.

The members are those of `lahar up --clusters 3` (up/fleet.py): 4 nodes of 8 CPUs; 2 of 32 CPUs;
2 of 16 CPUs with 4 GPUs. N Jobs (seeded: gangs of 1-4 pods of 1-8 CPUs, one in ten asking GPUs,
three team queues with a fleet-wide CPU capability each) arrive at once and run a random time
once placed (instant start: level two is not simulated). Each simulated second the federation's
`plan` runs on the hub's Jobs and the members' room, and its Dispatches are applied; round-robin
sends Job i to member i mod 3 (the next one that could ever hold it), where it waits in line.

Printed and written (--out): the planner's dispatch rate (Jobs placed per wall-clock second of
`plan`), simulated time until every Job finished, mean fleet CPU utilisation until then, and the
quota error (the most any team used over its capability, as a fraction of it); plus an SVG of CPU
utilisation over simulated time for both."""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lahar.api.job import JobPhase
from lahar.api.queue import Queue
from lahar.api.resources import ResourceList
from lahar.federation.placement import MemberView, pack
from lahar.federation.planner import Dispatch, HubJob, MemberCopy, hub_job, plan
from lahar.federation.policy import Policy

GI = 1024**3
MEMBERS = (("member-1", 4, 8, 0, 1.0), ("member-2", 2, 32, 0, 2.0), ("member-3", 2, 16, 4, 3.0))
TEAMS = ("team-a", "team-b", "team-c")
MAX_SIMULATED_SECONDS = 1e6  # a Job that never places must not keep the bench going


def node(cpu: int, gpus: int) -> ResourceList:
    amounts = {"cpu": cpu * 1000, "memory": cpu * 4 * GI}
    if gpus:
        amounts["nvidia.com/gpu"] = gpus
    return ResourceList(amounts)


def fleet_cpu() -> int:
    return sum(count * cpu for _, count, cpu, _, _ in MEMBERS)


@dataclass
class SimJob:
    obj: dict[str, Any]
    duration: float
    queue: str
    pods: tuple[ResourceList, ...]
    member: str = ""
    started: float | None = None
    finished: float | None = None
    nodes: tuple[int, ...] = ()  # the node index of each pod


def make_jobs(count: int, seed: int) -> list[SimJob]:
    rng = random.Random(seed)
    jobs = []
    for index in range(count):
        replicas, cpu = rng.randint(1, 4), rng.choice((1, 2, 4, 8))
        gpus = rng.choice((1, 2)) if rng.random() < 0.1 else 0
        queue = TEAMS[index % len(TEAMS)]
        requests = {"cpu": str(cpu), "memory": f"{cpu * 2}Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        obj = {
            "metadata": {
                "name": f"job-{index:04d}",
                "namespace": "bench",
                "uid": f"uid-{index}",
                "creationTimestamp": f"2026-01-01T00:{index // 60 % 60:02d}:{index % 60:02d}Z",
                "labels": {},
                "annotations": {},
            },
            "spec": {
                "queue": queue,
                "tasks": [
                    {
                        "name": "w",
                        "replicas": replicas,
                        "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}},
                    }
                ],
            },
        }
        pod = ResourceList.from_k8s(requests)
        jobs.append(SimJob(obj, rng.uniform(10, 60), queue, (pod,) * replicas))
    return jobs


class Fleet:
    """The members' nodes and what the running Jobs take of them."""

    def __init__(self) -> None:
        self.allocatable = {name: [node(cpu, gpus) for _ in range(count)] for name, count, cpu, gpus, _ in MEMBERS}
        self.free = {name: list(nodes) for name, nodes in self.allocatable.items()}

    def place(self, job: SimJob, member: str) -> bool:
        """Bind the gang on `member`'s nodes now (best fit, as level two would), or nothing."""
        free = list(self.free[member])
        chosen = []
        for pod in job.pods:
            fits = [i for i, room in enumerate(free) if pod.fits_in(room)]
            if not fits:
                return False
            best = min(fits, key=lambda i: (free[i] - pod).get("cpu"))
            free[best] = free[best] - pod
            chosen.append(best)
        self.free[member] = free
        job.member, job.nodes = member, tuple(chosen)
        return True

    def release(self, job: SimJob) -> None:
        for index, pod in zip(job.nodes, job.pods, strict=True):
            self.free[job.member][index] = self.free[job.member][index] + pod

    def used_cpu(self) -> int:
        return sum(
            sum(a.get("cpu") for a in self.allocatable[m]) - sum(f.get("cpu") for f in self.free[m]) for m in self.free
        )

    def views(self) -> dict[str, MemberView]:
        return {
            name: MemberView(
                name=name,
                cost=cost,
                reachable=True,
                known=True,
                node_allocatable=tuple(self.allocatable[name]),
                node_free=tuple(self.free[name]),
                last_heartbeat=1e12,
            )
            for name, _, _, _, cost in MEMBERS
        }


def team_capability(share: float) -> dict[str, Queue]:
    cpu = int(fleet_cpu() * share)
    return {t: Queue({"metadata": {"name": t}, "spec": {"weight": 1, "capability": {"cpu": str(cpu)}}}) for t in TEAMS}


@dataclass
class Outcome:
    name: str
    makespan: float
    utilisation: float
    quota_error: float
    plan_seconds: float = 0.0
    dispatched: int = 0
    curve: Sequence[tuple[float, float]] = ()


def _finish(jobs: list[SimJob], fleet: Fleet, now: float) -> None:
    for job in jobs:
        if job.started is not None and job.finished is None and job.started + job.duration <= now:
            job.finished = now
            fleet.release(job)


def _record(jobs: list[SimJob], fleet: Fleet, queues: dict[str, Queue], now: float, outcome: dict[str, Any]) -> None:
    outcome["curve"].append((now, fleet.used_cpu() / (fleet_cpu() * 1000)))
    for team, queue in queues.items():
        used = sum(
            p.get("cpu")
            for j in jobs
            if j.queue == team and j.started is not None and j.finished is None
            for p in j.pods
        )
        outcome["quota"] = max(outcome["quota"], used / queue.capability.get("cpu") - 1)


def _summary(name: str, jobs: list[SimJob], outcome: dict[str, Any], **extra: Any) -> Outcome:
    end = max(j.finished or 0.0 for j in jobs)
    curve = outcome["curve"]
    mean = sum(u for _, u in curve) / len(curve) if curve else 0.0
    return Outcome(name, end, mean, max(0.0, outcome["quota"]), curve=curve, **extra)


def run_federation(jobs: list[SimJob], queues: dict[str, Queue], step: float) -> Outcome:
    fleet, now, spent, dispatched = Fleet(), 0.0, 0.0, 0
    policy = Policy(redispatch_after=1e9, unreachable_after=1e9)
    outcome: dict[str, Any] = {"curve": [], "quota": 0.0}
    by_key = {("bench", j.obj["metadata"]["name"]): j for j in jobs}
    base = {id(j): hub_job(j.obj, {}) for j in jobs}  # parsed once; each cycle only the state moves
    while any(j.finished is None for j in jobs) and now < MAX_SIMULATED_SECONDS:
        _finish(jobs, fleet, now)
        views: list[HubJob] = []
        copies: dict[str, list[MemberCopy]] = {m: [] for m, *_ in MEMBERS}
        for job in jobs:
            view = base[id(job)]
            if job.member:
                phase = JobPhase.COMPLETED if job.finished is not None else JobPhase.RUNNING
                status = {"state": {"phase": phase.value}}
                view = replace(view, cluster=job.member, placement=1, dispatched=1, phase=phase, status=status)
                copies[job.member].append(
                    MemberCopy(job.member, view.key, "m-" + view.uid, view.uid, 1, status, view.generation)
                )
            views.append(view)
        began = time.perf_counter()
        actions = plan(views, fleet.views(), copies, queues, policy, now)
        spent += time.perf_counter() - began
        for action in actions:
            if isinstance(action, Dispatch):
                job = by_key[action.job]
                if fleet.place(job, action.member):  # level two binds it (it fits: level one packed it)
                    job.started = now
                    dispatched += 1
        _record(jobs, fleet, queues, now, outcome)
        now += step
    return _summary("federation", jobs, outcome, plan_seconds=spent, dispatched=dispatched)


def run_round_robin(jobs: list[SimJob], queues: dict[str, Queue], step: float) -> Outcome:
    fleet, now = Fleet(), 0.0
    outcome: dict[str, Any] = {"curve": [], "quota": 0.0}
    lines: dict[str, list[SimJob]] = {m: [] for m, *_ in MEMBERS}
    names_in_order = [m for m, *_ in MEMBERS]
    for index, job in enumerate(jobs):
        for offset in range(len(names_in_order)):
            member = names_in_order[(index + offset) % len(names_in_order)]
            if pack(fleet.allocatable[member], job.pods) is not None:
                lines[member].append(job)
                break
        else:
            job.finished = 0.0  # holds on no member: dropped (none of the seeded Jobs is such)
    while any(j.finished is None for j in jobs) and now < MAX_SIMULATED_SECONDS:
        _finish(jobs, fleet, now)
        for member, line in lines.items():
            while line and fleet.place(line[0], member):  # each member in its own order (FIFO)
                line.pop(0).started = now
        _record(jobs, fleet, queues, now, outcome)
        now += step
    return _summary("round-robin", jobs, outcome)


def write_svg(outcomes: Sequence[Outcome], path: Path, time_unit: str = "s (simulated)") -> None:
    width, height, pad = 640, 300, 45
    t_max = max(o.makespan for o in outcomes) or 1.0
    colours = {"federation": "#1f77b4", "round-robin": "#d62728"}
    plot_w, plot_h = width - 2 * pad, height - 2 * pad
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<rect x="{pad}" y="{pad}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
        f'<text x="{pad}" y="{height - 12}">0</text>',
        f'<text x="{width - pad}" y="{height - 12}" text-anchor="end">{t_max:.0f} {time_unit}</text>',
        f'<text x="{pad - 4}" y="{pad + 4}" text-anchor="end">100%</text>',
        f'<text x="{pad - 4}" y="{pad + plot_h}" text-anchor="end">0</text>',
        f'<text x="6" y="14" fill="#555">fleet CPU utilisation, 3 members, time in {time_unit}</text>',
    ]
    for line, outcome in enumerate(outcomes):
        points = " ".join(f"{pad + plot_w * t / t_max:.1f},{pad + plot_h * (1 - u):.1f}" for t, u in outcome.curve)
        colour = colours.get(outcome.name, "#000")
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        parts.append(f'<text x="{pad + 6}" y="{pad + 14 + 13 * line}" fill="{colour}">{outcome.name}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lahar bench federation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, help="Jobs submitted to the hub (default 1000; --live: 60)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--team-share", type=float, default=0.4, help="each team's fleet-wide CPU capability, as a share"
    )
    parser.add_argument("--step", type=float, default=1.0, help="simulated seconds between cycles (default 1)")
    parser.add_argument(
        "--out", type=Path, default=Path("bench-federation"), help="folder for federation.json and .svg"
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="real time on real processes: `lahar up --clusters 3`, the Jobs (default 60) running their simulated "
        "time / --time-scale (bench/_federation_live.py)",
    )
    parser.add_argument(
        "--method",
        choices=("both", "federation", "round-robin"),
        default="both",
        help="--live: the placement(s) to run, each on a fleet of its own (default both, one after the other)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=3.0,
        help="--live: a Job's real run time is its simulated 10-60 s divided by this (default 3: 3.3-20 s)",
    )
    parser.add_argument(
        "--heartbeat", type=float, help="--live: the federation's heartbeatPeriod in seconds (default its own, 2)"
    )
    parser.add_argument(
        "--ttl",
        type=int,
        help="--live: ttlSecondsAfterFinished of the Jobs: the members delete finished ones (default: kept)",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=900.0,
        help="--live: seconds a placement may run (default 900); one that does not finish by then reports what "
        "it reached: Jobs Running and finished every 60 s",
    )
    parser.add_argument(
        "--keep", type=Path, help="--live: keep the fleet's data and logs in this folder (default: removed)"
    )
    args = parser.parse_args(argv)
    if (args.jobs is not None and args.jobs < 1) or not 0 < args.team_share <= 1 or not args.step > 0:
        parser.error("--jobs must be positive, --team-share in (0, 1], --step positive")
    if not args.time_scale > 0 or not args.run_timeout > 0 or (args.heartbeat is not None and not args.heartbeat > 0):
        parser.error("--time-scale, --heartbeat and --run-timeout must be positive")
    if args.ttl is not None and args.ttl < 0:
        parser.error("--ttl must be 0 or more")
    if args.live:
        return main_live(args)
    queues = team_capability(args.team_share)
    args.jobs = args.jobs or 1000
    outcomes = [
        run_federation(make_jobs(args.jobs, args.seed), queues, args.step),
        run_round_robin(make_jobs(args.jobs, args.seed), queues, args.step),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"{args.jobs} jobs over 3 members ({fleet_cpu()} CPUs), teams capped at {args.team_share:.0%} of the fleet each"
    )
    print(f"{'placement':<12} {'all done (s)':>12} {'mean CPU use':>13} {'quota error':>12} {'dispatch rate':>16}")
    for o in outcomes:
        rate = f"{o.dispatched / o.plan_seconds:,.0f} jobs/s" if o.plan_seconds else "-"
        print(f"{o.name:<12} {o.makespan:>12.0f} {o.utilisation:>12.1%} {o.quota_error:>12.1%} {rate:>16}")
    results = {o.name: {k: v for k, v in vars(o).items() if k != "curve"} for o in outcomes}
    (args.out / "federation.json").write_text(json.dumps(results, indent=2) + "\n")
    write_svg(outcomes, args.out / "federation.svg")
    print(f"wrote {args.out / 'federation.json'} and {args.out / 'federation.svg'}")
    return 0


def main_live(args: argparse.Namespace) -> int:
    from lahar.bench import _federation_live as live

    jobs = make_jobs(args.jobs or 60, args.seed)
    capability = int(fleet_cpu() * args.team_share)
    shapes = [(name, tuple(node(cpu, gpus) for _ in range(count))) for name, count, cpu, gpus, _ in MEMBERS]
    setup = live.LiveSetup(
        [j.obj for j in jobs],
        [j.duration for j in jobs],
        TEAMS,
        capability,
        shapes,
        fleet_cpu(),
        time_scale=args.time_scale,
        ttl=args.ttl,
        run_timeout=args.run_timeout,
    )
    methods = live.METHODS if args.method == "both" else (args.method,)
    policy = "" if args.heartbeat is None else f"heartbeatPeriod: {args.heartbeat:g}s\n"
    outcomes = live.run_live(setup, methods, policy, args.keep)
    live.print_live(outcomes, capability, fleet_cpu())
    args.out.mkdir(parents=True, exist_ok=True)
    for outcome in outcomes:  # one file a placement: each may come from a run of its own
        path = args.out / f"federation-live-{outcome.name}.json"
        fields = {k: v for k, v in vars(outcome).items() if k != "curve"}
        run = {"time_scale": args.time_scale, "heartbeat": args.heartbeat, "ttl": args.ttl, "seed": args.seed}
        path.write_text(json.dumps({**fields, **run, "curve": outcome.curve}, indent=2) + "\n")
        print(f"wrote {path}")
    found = [args.out / f"federation-live-{name}.json" for name in live.METHODS]
    if all(path.exists() for path in found):
        curves = [json.loads(path.read_text()) for path in found]
        plotted = [
            Outcome(c["name"], c["all_done"] or c["stopped_at"], c["utilisation"], c["quota_error"], curve=c["curve"])
            for c in curves
        ]
        write_svg(plotted, args.out / "federation-live.svg", "s (real time)")
        print(f"wrote {args.out / 'federation-live.svg'} (both placements' files are there)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
