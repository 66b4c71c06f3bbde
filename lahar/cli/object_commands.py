"""kubectl-like verbs for Lahar's objects (apply, get, describe, delete)."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    return None
