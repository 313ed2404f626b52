"""How a process started by the CLI (node, controller, archive) logs: readable text by default,
one JSON object per line with `--log-format json` (or RMQSTORE_LOG_FORMAT=json), and on every
line which process said it: its id, epoch and role.

    text: 2026-11-24 03:22:18,599 INFO [broker-a:0 epoch 3 SYNC_MASTER] cluster.assembly.node: ...
    json: {"time": "2026-11-24T03:22:18.599Z", "level": "INFO", "node": "broker-a:0",
           "epoch": 3, "role": "SYNC_MASTER", "logger": "cluster.assembly.node", "message": "...",
           "exception": "Traceback ..." (only when there is one)}

The identity comes from a `Describe` callable the process installs once it exists (before
that: the process kind); it is read for every record, so a role change shows from the next
line on. Messages that repeat per request are throttled where they are logged
(cluster/security/refusal_log.py), not here.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Callable

FORMATS = ("text", "json")
ENV = "RMQSTORE_LOG_FORMAT"
Describe = Callable[[], tuple[str, int, str]]  # (node id, epoch, role)


class ProcessContext(logging.Filter):
    """Stamps every record with the process's identity (`describe`, replaceable)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.describe: Describe = lambda: (kind, 0, "")

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.node, record.epoch, record.role = self.describe()
        except Exception:  # noqa: BLE001 - a half-built process must not lose its log line
            record.node, record.epoch, record.role = "?", 0, ""
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s [%(node)s epoch %(epoch)s%(role_text)s] "
                         "%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.role_text = f" {record.role}" if getattr(record, "role", "") else ""
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object per line: UTC time, level, the node's id, epoch and
    role (set on the record by the node's filter), logger, message, exception."""

    def format(self, record: logging.LogRecord) -> str:
        ms = int(record.msecs)
        out = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
               + f".{ms:03d}Z", "level": record.levelname,
               "node": getattr(record, "node", "?"), "epoch": getattr(record, "epoch", 0),
               "role": getattr(record, "role", ""), "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def add_log_format_arg(p) -> None:
    p.add_argument("--log-format", choices=FORMATS, default=None,
                   help=f"text (default) or json: one object per line (also {ENV}=json)")


def setup_logging(kind: str, log_format: str | None) -> ProcessContext:
    """Configure the root logger on stderr; the returned context takes the process's
    `describe` once it exists."""
    chosen = log_format or os.environ.get(ENV, "text").strip().lower() or "text"
    if chosen not in FORMATS:
        raise SystemExit(f"{ENV}={chosen!r}: want one of {', '.join(FORMATS)}")
    context = ProcessContext(kind)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(context)
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return context
