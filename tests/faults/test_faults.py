"""The fault suite's short mode (issue 15; `lahar bench faults` is the long one): the programs as
separate processes, SIGKILLed in turn during a workload, the API stopped for 5 s, the report
streams cut, watches expired, the disk filled, 100 clients at once. Every promise must hold."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from lahar.bench import faults

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_every_promise_holds_under_the_short_fault_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = [name for name in faults.SCENARIOS if name != "fuzz"]  # tests/faults/test_fuzz.py runs on its own
    results = faults.run(faults.SHORT, names, seed=random.randrange(1000), work=tmp_path)
    with capsys.disabled():
        print("\n" + faults.table(results))
    broken = {r.scenario: r.broken for r in results if r.broken}
    assert not broken, broken
    crash = next(r for r in results if r.scenario == "crash")
    assert crash.figures["rounds survived"] == faults.SHORT.crash_rounds
    assert crash.figures["acknowledged writes"] > 0


def test_the_table_names_every_figure() -> None:
    result = faults.Result("crash", {"writes lost": 0, "rounds survived": 3})
    skipped = faults.Result("enospc", skipped="needs root")
    broken = faults.Result("load", {"5xx": 2}, ["2 answers were 5xx"])
    text = faults.table([result, skipped, broken])
    rows = [line.split(maxsplit=1) for line in text.splitlines()]
    assert ["crash", "writes lost      0"] in rows and ["crash", "promises         kept"] in rows
    assert ["enospc", "skipped          needs root"] in rows
    assert ["load", "promises         BROKEN: 2 answers were 5xx"] in rows
