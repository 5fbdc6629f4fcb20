"""Structured logs: key=value text by default, one JSON object per line with --log-json."""

from __future__ import annotations

import json
import logging
import sys
import time

_STD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class _Formatter(logging.Formatter):
    def __init__(self, json_lines: bool) -> None:
        super().__init__()
        self.json_lines = json_lines

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in _STD}
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        if self.json_lines:
            doc = {"ts": ts, "level": record.levelname, "logger": record.name, "msg": record.getMessage(), **fields}
            if record.exc_info:
                doc["exc"] = self.formatException(record.exc_info)
            return json.dumps(doc, default=str)
        extra = "".join(f" {k}={v}" for k, v in fields.items())
        line = f"{ts} {record.levelname:<7} {record.name}: {record.getMessage()}{extra}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str = "INFO", *, json_lines: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(json_lines))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
