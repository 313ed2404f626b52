"""Text for people: sizes, times, aligned tables and a progress line. Shared by the store tool
(store.cli), the cluster CLI, the audit and drill reports and the benchmarks, so every table of
the project is laid out by `format_table`."""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable, Collection, Sequence, TextIO


def iso_ms(ms: int | None) -> str | None:
    """Local ISO-8601 time of epoch milliseconds; None for 0 / absurd values."""
    if not ms or ms <= 0:
        return None
    try:
        return (datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone()
                .isoformat(timespec="milliseconds"))
    except (OverflowError, OSError, ValueError):
        return None


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def parse_size(text: str) -> int:
    """'4194304', '4M', '4MiB', '512k', '1G' -> bytes (an argparse type)."""
    t = text.strip().lower().replace("_", "")
    for suffix in ("ib", "b"):
        if t.endswith(suffix) and t[:-len(suffix)][-1:].isalpha():
            t = t[:-len(suffix)]
            break
    mult = 1
    if t[-1:] in ("k", "m", "g", "t"):
        mult = 1024 ** ("kmgt".index(t[-1]) + 1)
        t = t[:-1]
    try:
        value = int(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4194304, 4M, 512K)")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def format_table(headers: Sequence[str] | None, rows: Sequence[Sequence[Any]],
                 right: Collection[int] = frozenset(), *, rule: bool = False,
                 indent: str = "") -> list[str]:
    """Lines of an aligned table: two spaces between columns, the columns numbered in `right`
    right-aligned, the others left-aligned, each line after `indent`, trailing blanks stripped.
    Cells are str()-ed, None shows as "-". `headers` None: rows only (a key/value listing);
    `rule`: a line of dashes under the headers, as wide as each column."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    lines = cells if headers is None else [list(headers), *cells]
    widths = [0] * max((len(line) for line in lines), default=0)
    for line in lines:
        for i, v in enumerate(line):
            widths[i] = max(widths[i], len(v))

    def fmt(row: Sequence[str]) -> str:
        return (indent + "  ".join(v.rjust(widths[i]) if i in right else v.ljust(widths[i])
                                   for i, v in enumerate(row))).rstrip()

    if headers is None:
        return [fmt(r) for r in cells]
    head = [fmt(headers)] + ([fmt(["-" * w for w in widths])] if rule else [])
    return head + [fmt(r) for r in cells]


def isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """Rate-limited progress on stderr (about once a second), only when enabled."""

    def __init__(self, enabled: bool, interval: float = 1.0) -> None:
        self.enabled = enabled
        self.interval = interval
        self._last = time.monotonic()
        self._shown = False
        self._tty = enabled and isatty(sys.stderr)

    def update(self, text: Callable[[], str]) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        self._shown = True
        if self._tty:
            sys.stderr.write("\r\x1b[K" + text())
        else:
            sys.stderr.write(text() + "\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self._shown and self._tty:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        self._shown = False
