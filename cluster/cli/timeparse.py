"""Times on the command line: epoch milliseconds, ISO 8601 (local time unless it names a zone),
`now`, or a duration ago: `10m`, `2h`, `1d`, `30s`, `500ms` (also written `-10m`, which argparse
takes only as `--begin=-10m`)."""
from __future__ import annotations

import argparse
import re
import time
from datetime import datetime

_RELATIVE = re.compile(r"-?(\d+)(ms|s|m|h|d)")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time_ms(text: str, now_ms: int | None = None) -> int:
    text = text.strip()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if text == "now":
        return now
    if text.isdigit():
        return int(text)
    m = _RELATIVE.fullmatch(text)
    if m:
        return now - int(m.group(1)) * _UNITS_MS[m.group(2)]
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: want epoch milliseconds, an ISO time (2024-05-01T10:00:00), now, or "
            f"a duration ago (10m, 2h, 1d)") from None
    return int(dt.timestamp() * 1000)  # a naive datetime is local time
