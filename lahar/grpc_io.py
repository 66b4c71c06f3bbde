"""gRPC's I/O for Lahar's processes: grpcio's older polling I/O instead of its EventEngine.

grpcio (1.85) reads its sockets by default on EventEngine threads of its own, which hand each
message to the thread that polls the completion queue, which wakes the asyncio loop: two thread
hand-offs per message. At the scheduler's report ingest (5,000 agents reporting once a second)
that switching was most of what gRPC cost. With the EventEngine experiments for listeners,
endpoints and clients turned off, the polling thread reads the sockets itself. Measured with
`lahar bench ingest` at 5,000 agents (docs/performance.md, "Report ingest", medians of three in
one hold): the report server fell from 0.63 to 0.51 core, a bare grpc.aio server that only acks
from 0.41 to 0.32.

grpcio reads GRPC_EXPERIMENTS once, when it is first imported, so this must run before any module
imports grpc: `lahar/__init__.py` calls it, and every Lahar program imports the package first. An
operator's own GRPC_EXPERIMENTS (even an empty one) is left as it is."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from types import ModuleType

EXPERIMENTS_VARIABLE = "GRPC_EXPERIMENTS"
# The EventEngine experiments grpcio 1.85 still lets a process turn off (a name it does not know
# is logged as an error at start, so only these are named).
POLLING_IO = (
    "-event_engine_listener,-event_engine_for_all_other_endpoints,-event_engine_client,-event_engine_callback_cq"
)


def polling_io_setting(environ: Mapping[str, str], grpc_loaded: bool) -> str | None:
    """The GRPC_EXPERIMENTS value to set, or None to leave the environment alone: grpcio already
    loaded (too late, it has read the variable) or the variable set by the operator."""
    if grpc_loaded or EXPERIMENTS_VARIABLE in environ:
        return None
    return POLLING_IO


def use_polling_io(
    environ: MutableMapping[str, str] = os.environ, modules: Mapping[str, ModuleType] = sys.modules
) -> bool:
    """Set GRPC_EXPERIMENTS for the polling I/O unless polling_io_setting says not to; True if set."""
    setting = polling_io_setting(environ, "grpc" in modules)
    if setting is None:
        return False
    environ[EXPERIMENTS_VARIABLE] = setting
    return True
