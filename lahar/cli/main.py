"""`lahar`: the command line. Each command module registers its subcommands here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lahar import collector, log_format
from lahar.cli import (
    agent_command,
    bench_command,
    controller_command,
    federation_command,
    flow_commands,
    job_commands,
    logs_command,
    object_commands,
    scheduler_command,
    server_commands,
    sim_nodes_command,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lahar", description="Lahar: batch scheduling and co-location QoS for Kubernetes."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages (lahar up: its programs too)")
    parser.add_argument(
        "--log-format",
        choices=log_format.FORMATS,
        default="text",
        help="log lines as logfmt-like text (default) or one JSON object a line (lahar up: its programs too)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    server_commands.register(commands)
    object_commands.register(commands)
    job_commands.register(commands)
    flow_commands.register(commands)
    logs_command.register(commands)
    agent_command.register(commands)
    controller_command.register(commands)
    federation_command.register(commands)
    scheduler_command.register(commands)
    bench_command.register(commands)
    sim_nodes_command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "holds_collector", False):  # a command that ends its start-up itself
        collector.release()
    log_format.configure(args.verbose, args.log_format)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError) as exc:  # refused input or settings: a message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
