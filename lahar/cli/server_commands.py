"""Long-running programs and their connection helpers: apiserver, up, kubeconfig, version."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from typing import TYPE_CHECKING

import lahar
from lahar.client.kubeconfig import embedded_kubeconfig
from lahar.endpoints import EMBEDDED_HOST, EMBEDDED_PORT, EMBEDDED_URL

if TYPE_CHECKING:  # the server (aiohttp, cryptography) is imported only by the commands that run it
    from lahar.apiserver import server

DEFAULT_DATA_DIR = Path.home() / ".lahar"
EXAMPLES = Path(lahar.__file__).resolve().parent.parent / "examples"


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"where the embedded API keeps its SQLite file (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--port", type=int, default=EMBEDDED_PORT,
                        help=f"embedded API port (default {EMBEDDED_PORT}; 0 picks a free one)")
    parser.add_argument("--address", default=EMBEDDED_HOST,
                        help="listening address (default 127.0.0.1; any other needs --token-file)")
    parser.add_argument("--token-file", type=Path, help="file holding the bearer token clients must send")
    parser.add_argument("--fsync", choices=("normal", "full"), default="normal",
                        help="normal: survive a process crash; full: survive power loss too (slower writes)")
    parser.add_argument("--tls-cert-file", type=Path, help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-private-key-file", type=Path, help="the certificate's private key (PEM)")
    parser.add_argument("--watch-history", type=int, default=200_000,
                        help="changes kept for watches resuming from a resourceVersion (older ones get 410 Gone)")


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    apiserver = commands.add_parser("apiserver", help="run the embedded Kubernetes API server (SQLite)")
    add_server_flags(apiserver)
    apiserver.set_defaults(run=run_apiserver)

    up = commands.add_parser("up", help="run Lahar on this machine (for now: the embedded API server)")
    add_server_flags(up)
    up.add_argument("--demo", action="store_true", help="apply the examples/ manifests once the API is up")
    up.set_defaults(run=run_up)

    kubeconfig = commands.add_parser("kubeconfig", help="print a kubeconfig for the embedded API server")
    kubeconfig.add_argument("--server", default=EMBEDDED_URL,
                            help="the embedded server's URL")
    kubeconfig.add_argument("--token-file", type=Path, help="include this bearer token")
    kubeconfig.add_argument("--ca-file", type=Path,
                            help="the CA of an HTTPS server (a token-guarded server's is <data-dir>/tls/ca.crt)")
    kubeconfig.set_defaults(run=run_kubeconfig)

    version = commands.add_parser("version", help="print Lahar's version")
    version.set_defaults(run=lambda _args: print(f"lahar {lahar.__version__}"))


def server_config(args: argparse.Namespace) -> server.ServerConfig:
    from lahar.apiserver import server

    return server.ServerConfig(data_dir=args.data_dir, host=args.address, port=args.port,
                               token_file=args.token_file, fsync=args.fsync,
                               watch_history=args.watch_history, tls_cert_file=args.tls_cert_file,
                               tls_key_file=args.tls_private_key_file)


def run_apiserver(args: argparse.Namespace) -> int:
    from lahar.apiserver import server

    asyncio.run(server.serve(server_config(args)))
    return 0


def run_up(args: argparse.Namespace) -> int:
    from lahar.apiserver import server

    config = server_config(args)

    async def welcome(url: str) -> None:
        await asyncio.to_thread(print_welcome, config, url, args.demo)

    asyncio.run(server.serve(config, on_ready=welcome))
    return 0


def print_welcome(config: server.ServerConfig, url: str, demo: bool) -> None:
    kubeconfig = config.data_dir / "kubeconfig"
    kubeconfig.touch(mode=0o600)  # it may hold the token
    ca = config.data_dir / "tls" / "ca.crt"
    kubeconfig.write_text(embedded_kubeconfig(url.replace("://0.0.0.0:", "://127.0.0.1:"), config.token(),
                                              ca.read_bytes() if url.startswith("https") and ca.exists() else None))
    print(f"\nLahar is up. Point kubectl or lahar at it:\n  export KUBECONFIG={kubeconfig}\n"
          f"  kubectl get queues   |   lahar get jobs\nCtrl-C stops it; the data stays in {config.data_dir}.\n",
          flush=True)
    if demo:
        run_demo(kubeconfig)


def run_demo(kubeconfig: Path) -> None:
    """Apply the example manifests and show what the API now holds."""
    from lahar.cli.main import main as lahar_main

    if not EXAMPLES.is_dir():
        print(f"demo: no examples at {EXAMPLES}", flush=True)
        return
    for argv in (["apply", "-f", str(EXAMPLES)], ["get", "queues"], ["get", "jobs", "-o", "wide"]):
        print(f"$ lahar {' '.join(argv)}", flush=True)
        lahar_main([*argv, "--kubeconfig", str(kubeconfig)])
        print(flush=True)


def run_kubeconfig(args: argparse.Namespace) -> int:
    token = args.token_file.read_text().strip() if args.token_file else None
    ca = args.ca_file.read_bytes() if args.ca_file else None
    print(embedded_kubeconfig(args.server, token, ca), end="")
    return 0
