"""Where the embedded API server listens unless told otherwise, and what counts as loopback:
shared by the servers and every client, in a module light enough for the agent to import."""

import ipaddress
import socket

EMBEDDED_HOST = "127.0.0.1"
EMBEDDED_PORT = 6443
EMBEDDED_URL = f"http://{EMBEDDED_HOST}:{EMBEDDED_PORT}"


def is_loopback(host: str) -> bool:
    """Whether a host name or address stays on this machine (where no token or TLS is required)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for tests, benchmarks and local servers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
