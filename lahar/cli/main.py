"""`lahar`: the command line. Each command module registers its subcommands here."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from lahar.cli import (
    agent_command,
    bench_command,
    controller_command,
    job_commands,
    logs_command,
    object_commands,
    scheduler_command,
    server_commands,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lahar", description="Lahar: batch scheduling and co-location QoS for Kubernetes."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    server_commands.register(commands)
    object_commands.register(commands)
    job_commands.register(commands)
    logs_command.register(commands)
    agent_command.register(commands)
    controller_command.register(commands)
    scheduler_command.register(commands)
    bench_command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.verbose:  # its retry warnings repeat what our error message says
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError) as exc:  # refused input or settings: a message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
