"""Co-location: does the agent's QoS keep online services' tail latency while best-effort (BE)
work soaks up the CPU they leave idle?

    lahar bench colocation [--matrix] [--online builtin,redis,memcached,nginx] [--loads low,high]
                           [--be cpu,cpu-requests,stream,cache,pagecache,io] [--cells GLOB,...]
                           [--runs 3] [--seconds 4] [--settle 2] [--qos-config FILE]
                           [--reaction [--step-seconds 5] [--quiet-seconds 60]] [--out DIR] [--json]

Without --matrix: the built-in online service at its low load beside CPU hogs, as BestEffort pods
and as Burstable BE pods with CPU requests. --matrix: every online service, load and BE kind
(matrix.py says what each is). Each cell is measured in one run, interleaved, `--runs`
times: online alone, beside BE under kubelet's cgroups only, beside BE under the real agent's QoS;
the median is reported with the ratios and the issue's verdicts (p99 with Lahar <= 1.05 x
kubelet's; where kubelet's exceeds 1.10 x solo, Lahar's <= 1.10 x solo; harvest >= 0.9 in CPU
cells, >= 0.7 elsewhere). --cells keeps the cells whose name (ONLINE-LOAD-BE, e.g.
redis-high-cpu-requests) matches one of its shell patterns.

--reaction: instead of the cells, for each selected online service and BE kind beside running BE,
the online load steps from low to high under kubelet's cgroups only and under Lahar (how long
until the online pod's CPU wait is back at its pre-step level: the target is 200 ms), then the
online service runs at its low load under Lahar for --quiet-seconds, counting the BE cap changes
(the target, where kubelet's weights already protect it: none).

The package: kit.py (the pieces the matrix, the demo and `lahar workload` share: the built-in
server, the busy loop, the open-loop load generator, the kubelet-like cgroup tree; re-exported
here), matrix.py (the cells, the third-party services and BE kinds, the reaction measure, the
verdicts), svg.py (the plots). Runs as root; every cgroup it made is removed and every process it
started stopped, on failure and on Ctrl-C too."""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from lahar.bench.colocation.kit import (
    BENCH_PREFIX,
    CGROUP_ROOT,
    Bench,
    BenchPod,
    BenchTree,
    CpuMeter,
    Processes,
    Segment,
    burn,
    calibrate,
    cgroup_problem,
    hog,
    intended_times,
    load,
    percentiles,
    serve,
    sweep_stale,
)

__all__ = [
    "BENCH_PREFIX",
    "CGROUP_ROOT",
    "Bench",
    "BenchPod",
    "BenchTree",
    "CpuMeter",
    "Processes",
    "Segment",
    "burn",
    "calibrate",
    "cgroup_problem",
    "hog",
    "intended_times",
    "load",
    "main",
    "percentiles",
    "serve",
    "sweep_stale",
]


# --- the command --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from lahar.bench.colocation import matrix

    parser = argparse.ArgumentParser(
        prog="lahar bench colocation", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--matrix", action="store_true", help="every online service, load and BE kind")
    parser.add_argument("--online", help=f"online services, comma-separated (of {', '.join(matrix.ONLINE_KINDS)})")
    parser.add_argument("--loads", help="loads, comma-separated (low, high)")
    parser.add_argument("--be", help=f"BE kinds, comma-separated (of {', '.join(matrix.BE_KINDS)})")
    parser.add_argument("--runs", type=int, default=3, help="rounds of solo/kubelet/lahar per cell (default 3)")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per phase (default 4)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds the agent gets before measuring")
    parser.add_argument("--qos-config", type=Path, help="a YAML QoS config for the agent (default: its defaults)")
    parser.add_argument(
        "--without",
        help="QoS strategies (comma-separated): per strategy a further mode, Lahar with it off, in the same rounds",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=QOS_CONFIG",
        help="a further mode, lahar-NAME: the agent with this YAML QoS config, in the same rounds (repeatable)",
    )
    parser.add_argument(
        "--cells", help="keep the cells whose name matches one of these shell patterns (comma-separated)"
    )
    parser.add_argument("--reaction", action="store_true", help="the load step and quiet period instead of the cells")
    parser.add_argument("--step-seconds", type=float, default=5.0, help="seconds before and after the step (default 5)")
    parser.add_argument("--quiet-seconds", type=float, default=60.0, help="the quiet period (default 60; 0: none)")
    parser.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        metavar="MATRIX_JSON",
        help="measure nothing: pool the rounds of earlier runs (their matrix.json) and print one table",
    )
    parser.add_argument("--out", type=Path, help="write the figures (json, a markdown table) and a plot per cell here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.pool:
        return _pool(parser, args.pool, args.out, args.json)
    if args.seconds <= 0 or args.runs < 1 or args.settle < 0 or args.step_seconds < 2 or args.quiet_seconds < 0:
        parser.error("--seconds must be > 0, --runs >= 1, --settle >= 0, --step-seconds >= 2, --quiet-seconds >= 0")
    online = _choice(parser, "--online", args.online, matrix.ONLINE_KINDS, "builtin" if not args.matrix else None)
    loads = _choice(parser, "--loads", args.loads, ("low", "high"), "low" if not args.matrix else None)
    be = _choice(parser, "--be", args.be, matrix.BE_KINDS, "cpu,cpu-requests" if not args.matrix else None)
    selected = matrix.cells(online, loads, be)
    if args.cells is not None:
        patterns = [pattern.strip() for pattern in args.cells.split(",") if pattern.strip()]
        selected = [cell for cell in selected if any(fnmatch.fnmatchcase(cell.name, pat) for pat in patterns)]
        if not selected:
            parser.error(f"--cells {args.cells}: no cell of the selection matches")
    config = None if args.qos_config is None else _qos_config(parser, "--qos-config", args.qos_config)
    variants: dict[str, dict[str, Any]] = {}
    for given in args.variant:
        name, _, path = given.partition("=")
        if not name or not path or not name.replace("-", "").isalnum() or name.startswith("without-"):
            parser.error(f"--variant {given}: expected NAME=QOS_CONFIG, NAME letters, digits and '-'")
        if name in variants:
            parser.error(f"--variant {given}: {name} given twice")
        variants[name] = _qos_config(parser, f"--variant {given}", Path(path))
    strategies_off = [name.strip() for name in (args.without or "").split(",") if name.strip()]
    if (strategies_off or variants) and args.reaction:
        parser.error("--without and --variant measure cells, not --reaction")
    for variant in matrix.without(config, strategies_off).values():
        from lahar.agent.qos.config import QosConfig

        try:
            QosConfig.from_mapping(variant or {})
        except ValueError as exc:
            parser.error(f"--without {args.without}: {exc}")
    problem = cgroup_problem()
    if problem is not None:
        print(f"lahar bench colocation cannot run here: {problem}", file=sys.stderr)
        return 2
    missing = [matrix.SERVERS[cell.online] for cell in selected if cell.online in matrix.SERVERS]
    missing += ["stress-ng" for cell in selected if cell.be in ("stream", "cache", "pagecache")]
    missing += ["fio" for cell in selected if cell.be == "io"]
    missing = sorted(set(missing))
    missing = [tool for tool in missing if shutil.which(tool) is None]
    if missing:
        print(
            f"lahar bench colocation: install {', '.join(missing)} first (scripts/setup.sh does as root)",
            file=sys.stderr,
        )
        return 2
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up like Ctrl-C
    agent_log = logging.getLogger("lahar.agent")
    level = agent_log.level
    agent_log.setLevel(logging.WARNING)  # each cap change is an INFO line
    progress = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    try:
        if args.reaction:
            pairs = list(dict.fromkeys((cell.online, cell.be) for cell in selected))
            summary = matrix.run_reactions(
                pairs, args.step_seconds, args.quiet_seconds, args.settle, config, args.out, progress
            )
        else:
            summary = matrix.run_matrix(
                selected, args.runs, args.seconds, args.settle, config, args.out, progress, strategies_off, variants
            )
    except KeyboardInterrupt:
        print("lahar bench colocation: interrupted; its processes and cgroups are removed", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        agent_log.setLevel(level)
    text_table = matrix.reaction_table if args.reaction else matrix.table
    print(json.dumps(summary) if args.json else text_table(summary["cells"]))
    if not args.json and summary["missed"]:
        print("missed: " + "; ".join(summary["missed"]))
    return 1 if any("cgroups_left" in cell for cell in summary["cells"]) else 0


def _pool(parser: argparse.ArgumentParser, files: list[Path], out: Path | None, as_json: bool) -> int:
    from lahar.bench.colocation import matrix

    summaries = []
    for file in files:
        try:
            summary = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            parser.error(f"--pool {file}: {exc}")
        if not isinstance(summary, dict) or summary.get("benchmark") != "colocation-matrix" or "cells" not in summary:
            parser.error(f"--pool {file}: not a matrix.json of lahar bench colocation")
        summaries.append(summary)
    pooled = matrix.pool(summaries)
    if not pooled["cells"]:
        parser.error("--pool: no cell with solo, kubelet and Lahar rounds in these files")
    text = matrix.pooled_table(pooled["cells"])
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "pooled.json").write_text(json.dumps(pooled, indent=1) + "\n")
        (out / "pooled.md").write_text(text + "\n")
    print(json.dumps(pooled) if as_json else text)
    if not as_json and pooled["missed"]:
        print("missed: " + "; ".join(pooled["missed"]))
    return 0


def _qos_config(parser: argparse.ArgumentParser, flag: str, path: Path) -> dict[str, Any]:
    """A YAML QoS config file, checked as the agent would load it."""
    import yaml

    from lahar.agent.qos.config import QosConfig

    try:
        config = yaml.safe_load(path.read_text()) or {}
        if not isinstance(config, dict):
            raise ValueError("not a mapping of QoS settings")
        QosConfig.from_mapping(config)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        parser.error(f"{flag} {path}: {exc}")
    return config


def _choice(
    parser: argparse.ArgumentParser, flag: str, given: str | None, known: tuple[str, ...], default: str | None
) -> list[str]:
    """The comma-separated choices of a flag (all of them when neither given nor defaulted)."""
    text = given if given is not None else default
    if text is None:
        return list(known)
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in known]
    if unknown or not chosen:
        parser.error(f"{flag}: unknown {', '.join(unknown) or 'empty choice'} (known: {', '.join(known)})")
    return chosen


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
