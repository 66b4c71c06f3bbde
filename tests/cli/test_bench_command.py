"""`lahar bench NAME` when NAME is not there: which benchmarks this `lahar` reads, and, when the
`lahar` the PATH found was installed from another checkout than the working directory's (which
has the benchmark), how to run the right one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from lahar.cli.bench_command import available, bench_dirs, missing_message, run_bench


def checkout(root: Path, *benches: str) -> Path:
    (root / "bench").mkdir(parents=True)
    (root / "setup.py").write_text("")
    for name in benches:
        (root / "bench" / f"{name}.py").write_text("")
    return root


def test_the_installed_benchmarks_are_listed() -> None:
    assert {"federation", "scheduler", "controller"} <= set(available())
    assert not any(name.startswith("_") for name in available())


def test_a_lahar_from_another_checkout_says_so_and_how_to_run_this_one(tmp_path: Path) -> None:
    here = checkout(tmp_path / "new", "federation")
    old = checkout(tmp_path / "old", "scheduler")
    message = missing_message("federation", [str(old / "bench")], ["scheduler"], here / "docs", "lahar")
    assert message.startswith(f'no benchmark "federation" in {old / "bench"} (there are: scheduler)')
    assert f"installed from another checkout than the one here ({here})" in message
    assert f"run {here / '.venv' / 'bin' / 'lahar'} bench federation" in message


def test_no_hint_when_this_checkout_lacks_it_too(tmp_path: Path) -> None:
    here = checkout(tmp_path / "here", "scheduler")
    message = missing_message("nope", [str(here / "bench")], ["scheduler"], here, "lahar")
    assert message == f'no benchmark "nope" in {here / "bench"} (there are: scheduler)'


def test_an_unknown_benchmark_is_refused_with_the_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ValueError, match=f'no benchmark "no-such-bench" in {bench_dirs()[0]}'):
        run_bench(argparse.Namespace(name="no-such-bench", options=[]))
