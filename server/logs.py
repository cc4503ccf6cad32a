"""Structured logs: one JSON object per line on stderr, so log collectors need no parsing rules.

Extra fields ride on the standard ``extra=`` argument: ``log.info("rpc", extra={"method": "Select"})``.
"""

from __future__ import annotations

import json
import logging
import sys
import time

#: LogRecord attributes that are not user fields.
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str) -> None:
    """Route the ``tiledispatch`` loggers (and gRPC's) to JSON lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # third-party chatter stays at WARNING
    logging.getLogger("tiledispatch").setLevel(level.upper())
