"""Long-running programs and their connection helpers: apiserver, up, kubeconfig, version."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import lahar
from lahar.apiserver import server
from lahar.client.kubeconfig import embedded_kubeconfig

DEFAULT_DATA_DIR = Path.home() / ".lahar"


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"where the embedded API keeps its SQLite file (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--port", type=int, default=server.DEFAULT_PORT,
                        help=f"embedded API port (default {server.DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--address", default=server.DEFAULT_HOST,
                        help="listening address (default 127.0.0.1; any other needs --token-file)")
    parser.add_argument("--token-file", type=Path, help="file holding the bearer token clients must send")
    parser.add_argument("--fsync", choices=("normal", "full"), default="normal",
                        help="normal: survive a process crash; full: survive power loss too (slower writes)")
    parser.add_argument("--watch-history", type=int, default=200_000,
                        help="changes kept for watches resuming from a resourceVersion (older ones get 410 Gone)")


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    apiserver = commands.add_parser("apiserver", help="run the embedded Kubernetes API server (SQLite)")
    add_server_flags(apiserver)
    apiserver.set_defaults(run=run_apiserver)

    up = commands.add_parser("up", help="run Lahar on this machine (for now: the embedded API server)")
    add_server_flags(up)
    up.set_defaults(run=run_apiserver)

    kubeconfig = commands.add_parser("kubeconfig", help="print a kubeconfig for the embedded API server")
    kubeconfig.add_argument("--server", default=f"http://{server.DEFAULT_HOST}:{server.DEFAULT_PORT}",
                            help="the embedded server's URL")
    kubeconfig.add_argument("--token-file", type=Path, help="include this bearer token")
    kubeconfig.set_defaults(run=run_kubeconfig)

    version = commands.add_parser("version", help="print Lahar's version")
    version.set_defaults(run=lambda _args: print(f"lahar {lahar.__version__}"))


def server_config(args: argparse.Namespace) -> server.ServerConfig:
    return server.ServerConfig(data_dir=args.data_dir, host=args.address, port=args.port,
                               token_file=args.token_file, fsync=args.fsync,
                               watch_history=args.watch_history)


def run_apiserver(args: argparse.Namespace) -> int:
    asyncio.run(server.serve(server_config(args)))
    return 0


def run_kubeconfig(args: argparse.Namespace) -> int:
    token = args.token_file.read_text().strip() if args.token_file else None
    print(embedded_kubeconfig(args.server, token), end="")
    return 0
