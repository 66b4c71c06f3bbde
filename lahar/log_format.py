"""How every `lahar` program writes its log lines (docs/agent.md, "Logs"): logfmt-like text by
default, one JSON object a line with `--log-format json`, for a log pipeline to parse.

    time=2026-11-26T08:00:00.123Z level=info logger=lahar.agent msg="collector gpu failed: ..."
    {"time": "2026-11-26T08:00:00.123Z", "level": "info", "logger": "lahar.agent", "msg": "..."}

An exception's traceback goes in `error` (quoted, newlines escaped, in text)."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator

FORMATS = ("text", "json")
BARE = re.compile(r"[^\s\"=\\]+")  # a logfmt value that needs no quotes


def timestamp(record: logging.LogRecord) -> str:
    """RFC 3339 in UTC with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def fields(record: logging.LogRecord, formatter: logging.Formatter) -> Iterator[tuple[str, str]]:
    yield "time", timestamp(record)
    yield "level", record.levelname.lower()
    yield "logger", record.name
    yield "msg", record.getMessage()
    if record.exc_info:
        yield "error", formatter.formatException(record.exc_info)
    elif record.exc_text:
        yield "error", record.exc_text


def logfmt_value(value: str) -> str:
    return value if value and BARE.fullmatch(value) else json.dumps(value, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`key=value` pairs, values quoted (JSON string rules) when they hold spaces, quotes or `=`."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={logfmt_value(value)}" for key, value in fields(record, self))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(dict(fields(record, self)), ensure_ascii=False)


def formatter(name: str) -> logging.Formatter:
    if name not in FORMATS:
        raise ValueError(f"--log-format: expected one of {', '.join(FORMATS)}, got {name!r}")
    return JsonFormatter() if name == "json" else TextFormatter()


def configure(verbose: bool, log_format: str) -> None:
    """The root logger: debug with `verbose`, else info, to standard error in `log_format`."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    if not verbose:  # its retry warnings repeat what our error message says
        logging.getLogger("urllib3").setLevel(logging.ERROR)
