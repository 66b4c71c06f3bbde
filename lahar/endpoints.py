"""Where the embedded API server listens unless told otherwise, and what counts as loopback:
shared by the servers and every client, in a module light enough for the agent to import."""

import ipaddress
import socket

EMBEDDED_HOST = "127.0.0.1"
EMBEDDED_PORT = 6443
EMBEDDED_URL = f"http://{EMBEDDED_HOST}:{EMBEDDED_PORT}"
# The agent's /metrics port: here so that `lahar`'s command line names it without importing the agent.
AGENT_METRICS_PORT = 9316


# The addresses a server may listen on without a token: the loopback address of each IP version.
# Another 127/8 address, a wildcard or a name is not an explicit choice of "this machine only".
EXPLICIT_LOOPBACK = frozenset({ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")})


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses a host stands for: itself when it is one, what `localhost` resolves to
    (/etc/hosts may point it anywhere), nothing for other names (no DNS lookup here)."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    if host.lower() != "localhost":
        return []
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return []
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def is_loopback(host: str) -> bool:
    """Whether a host name or address stays on this machine (where a token may travel without
    TLS): a loopback address, or `localhost` when every address it resolves to is loopback."""
    addresses = _addresses(host)
    return bool(addresses) and all(address.is_loopback for address in addresses)


def is_explicit_loopback(host: str) -> bool:
    """Whether a listening address is an explicit choice of this machine alone, where a server
    may run without a token: 127.0.0.1, ::1, or `localhost` resolving to nothing else."""
    addresses = _addresses(host)
    return bool(addresses) and all(address in EXPLICIT_LOOPBACK for address in addresses)


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for tests, benchmarks and local servers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
