"""`lahar bench NAME`: run one of the benchmarks in the repository's bench/ folder."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import lahar

BENCH_DIR = Path(lahar.__file__).resolve().parent.parent / "bench"


def available() -> list[str]:
    return sorted(p.stem for p in BENCH_DIR.glob("*.py") if not p.stem.startswith("_")) if BENCH_DIR.is_dir() else []


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser(
        "bench",
        help="run a benchmark: " + ", ".join(available()),
        description="Benchmarks print figures; each takes its own options (NAME --help).",
    )
    bench.add_argument("name", help="the benchmark: " + ", ".join(available()))
    bench.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's own options")
    bench.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    if args.name not in available():
        raise ValueError(f'no benchmark "{args.name}" in {BENCH_DIR} (there are: {", ".join(available())})')
    sys.path.insert(0, str(BENCH_DIR.parent))
    module = importlib.import_module(f"bench.{args.name}")
    return int(module.main(args.options) or 0)
