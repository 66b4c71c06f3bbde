"""`lahar bench NAME`: run one of the benchmarks (bench/, installed as lahar.bench)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil


def available() -> list[str]:
    import lahar.bench

    return sorted(m.name for m in pkgutil.iter_modules(lahar.bench.__path__) if not m.name.startswith("_"))


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
        raise ValueError(f'no benchmark "{args.name}" (there are: {", ".join(available())})')
    module = importlib.import_module(f"lahar.bench.{args.name}")
    return int(module.main(args.options) or 0)
