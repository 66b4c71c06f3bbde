"""Arguments in Go's `flag` package syntax, as Volcano's job plugins read theirs (shared by the
controller's plugins and the Job admission rules that check plugin arguments)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

FlagValue = bool | int | str


def parse_go_flags(args: Iterable[str], defaults: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    """Arguments parsed as Go's `flag` package does for a plugin whose flags (and their types)
    are `defaults`: `-name` or `--name`, `=value` or (not for booleans) the next argument as
    the value; parsing stops at the first non-flag argument or `--`, and, as in Volcano (which
    logs the error and keeps what it parsed), at an unknown flag or a value that does not
    parse."""
    values: dict[str, FlagValue] = dict(defaults)
    pending = list(args)
    while pending:
        arg = pending.pop(0)
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        name, has_value, text = arg.lstrip("-").partition("=")
        if name not in defaults:
            break
        default = defaults[name]
        if isinstance(default, bool):
            parsed = _go_bool(text) if has_value else True
            if parsed is None:
                break
            values[name] = parsed
            continue
        if not has_value:
            if not pending:
                break
            text = pending.pop(0)
        if isinstance(default, int):
            try:
                values[name] = int(text, 0)
            except ValueError:
                break
        else:
            values[name] = text
    return values


def _go_bool(text: str) -> bool | None:
    """Go's strconv.ParseBool spellings; None for anything else."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return None


# Every Volcano job plugin's flags with their defaults (Volcano's names, types and values): the
# controller's plugins read their arguments with these, and admission checks them.
PLUGIN_FLAGS: dict[str, dict[str, FlagValue]] = {
    "env": {},
    "svc": {"publish-not-ready-addresses": False, "disable-network-policy": False, "inject-hosts-env": True},
    "ssh": {"ssh-key-file-path": "/root/.ssh", "ssh-private-key": "", "ssh-public-key": "", "ssh-port": 22},
    "pytorch": {
        "master": "master",
        "worker": "worker",
        "port": 23456,
        "wait-master-enabled": False,
        "wait-master-timeout": 300,
        "wait-master-image": "busybox:1.36.1",
    },
    "tensorflow": {"ps": "ps", "worker": "worker", "chief": "chief", "evaluator": "evaluator", "port": 2222},
    "mpi": {"master": "master", "worker": "worker", "port": 22},
    "ray": {
        "head": "head",
        "headContainer": "head",
        "worker": "worker",
        "workerContainer": "worker",
        "port": 6379,
        "dashboardPort": 8265,
        "clientPort": 10001,
    },
    "hcclrank": {"master": "master", "worker": "worker"},
}


def plugin_flags(plugin: str, args: Iterable[str]) -> dict[str, FlagValue]:
    """A plugin's flag values: its arguments over its defaults (PLUGIN_FLAGS)."""
    return parse_go_flags(args, PLUGIN_FLAGS.get(plugin, {}))
