"""The agent <-> scheduler gRPC contract: generated modules per version (`lahar.rpc.v1`), the
conversion between the agent's report dataclasses and the wire messages (`lahar.rpc.convert`),
and what both ends of the stream share."""

from __future__ import annotations

from lahar.endpoints import is_loopback

# The initial metadata the scheduler sends once it has accepted a stream's token. A refused stream
# gets a status instead; the marker tells the two apart at once (gRPC may hand the client empty
# initial metadata for a refusal before the refusal's status arrives).
STREAM_ACCEPTED = ("lahar-stream", "accepted")


def address_host(address: str) -> str:
    """The host of a gRPC address: "host:port", "[v6]:port", or a bare host or IPv6 address."""
    if address.startswith("["):
        return address[1 : address.find("]")]
    return address.split(":", 1)[0] if address.count(":") == 1 else address


def is_loopback_address(address: str) -> bool:
    """Whether a gRPC address stays on this machine, where a bearer token may travel without TLS."""
    return address.startswith("unix:") or is_loopback(address_host(address))
