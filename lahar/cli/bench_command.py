"""`lahar bench NAME`: run one of the benchmarks (bench/, installed as lahar.bench)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path


def bench_dirs() -> list[str]:
    """Where this `lahar` reads its benchmarks: the lahar.bench it was installed with."""
    import lahar.bench

    return list(lahar.bench.__path__)


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(bench_dirs()) if not m.name.startswith("_"))


def checkout_with(name: str, start: Path) -> Path | None:
    """The source checkout around `start` (the working directory) whose bench/ holds `name`."""
    for folder in (start, *start.parents):
        if (folder / "setup.py").is_file() and (folder / "bench" / f"{name}.py").is_file():
            return folder
    return None


def missing_message(name: str, dirs: list[str], known: list[str], cwd: Path, program: str) -> str:
    """Why `name` is not a benchmark here. Which `lahar` runs is whichever the PATH finds first,
    and an editable install reads the checkout it was installed from, not the working directory's:
    say which checkout this one reads and, when the working directory's has the benchmark, how to
    run that one."""
    message = f'no benchmark "{name}" in {", ".join(dirs)} (there are: {", ".join(known)})'
    local = checkout_with(name, cwd)
    if local is not None and not any(Path(d).resolve() == (local / "bench").resolve() for d in dirs):
        message += (
            f"; this lahar ({program}) is installed from another checkout than the one here ({local}): "
            f"run {local / '.venv' / 'bin' / 'lahar'} bench {name}, or `make bench BENCH={name}` there"
        )
    return message


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
    known = available()
    if args.name not in known:
        raise ValueError(missing_message(args.name, bench_dirs(), known, Path.cwd(), sys.argv[0]))
    module = importlib.import_module(f"lahar.bench.{args.name}")
    return int(module.main(args.options) or 0)
