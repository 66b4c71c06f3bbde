#!/usr/bin/env python3
"""Write docs/metrics.md, the metrics reference, from the code's metric definitions
(lahar/metrics_catalog.py builds each program's registry over sample data and lists its families).

    .venv/bin/python scripts/gen-metrics-doc.py            # rewrite docs/metrics.md
    .venv/bin/python scripts/gen-metrics-doc.py --check    # exit 1, with a diff, if it is stale
    .venv/bin/python scripts/gen-metrics-doc.py -o FILE    # write elsewhere

tests/observability/test_metrics_catalog.py fails when the committed file differs from what this
writes: run it after adding, renaming or documenting a metric, and commit the result."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "metrics.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    parser.add_argument("-o", "--output", type=Path, default=DOC, help=f"the file (default {DOC.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    try:
        from lahar.metrics_catalog import render_markdown
    except ImportError as exc:
        print(
            f"gen-metrics-doc: cannot import Lahar ({exc}); run it with the project's environment, "
            f"e.g. .venv/bin/python {sys.argv[0]}",
            file=sys.stderr,
        )
        return 2
    text = render_markdown()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current == text:
            return 0
        sys.stdout.writelines(
            difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True), str(args.output), "generated"
            )
        )
        print(f"\n{args.output} is stale: run scripts/gen-metrics-doc.py and commit it", file=sys.stderr)
        return 1
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
