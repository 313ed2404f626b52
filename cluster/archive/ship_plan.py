"""Which commitlog file a node ships to the archive next, and how far retention may delete:
the rules without I/O (cluster/archive/shipper.py carries them out).

A file is a candidate once it is sealed (a later file exists, so no byte of it changes). It is
due when
- `ship_all` is on (every sealed file is shipped as soon as it is sealed), or
- its time (the store time of its last record) + fileReservedTime - archiveShipAheadHours is
  past: retention will delete it soon, or
- retention is under disk pressure (it may delete files early), or
- an operator asked for it (`requested_up_to`: every sealed file below that offset).
Files go oldest first, one at a time (the archive takes a group's files in offset order).

What the archive answered about a file is its `Verdict`: HELD (stored, or held already) or
REFUSED (it will never take it: older than its newest file, or a different file at the same
offset; the refusal is logged and the file is let go). `released_up_to` is the end of the run
of files from the oldest one on that are HELD or REFUSED: time-based retention waits for the
archive below that point only. `held_up_to` counts HELD files alone: only below it does the
archive keep a copy, so only there may disk pressure delete messages no consumer has read.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping

_HOUR_MS = 3600 * 1000


class Verdict(Enum):
    """What the archive answered for a file: HELD (it has a copy) or REFUSED (never will)."""

    HELD = "held"
    REFUSED = "refused"


@dataclass(frozen=True)
class LocalFile:
    offset: int
    size: int
    time_ms: int  # store time of its last record (or its mtime)
    sealed: bool


@dataclass(frozen=True)
class ShipRules:
    """When a sealed file is due for shipping: fileReservedTime, how many hours before
    expiry it ships, and whether every sealed file ships at once (`ship_all`)."""

    reserved_hours: int  # fileReservedTime
    ahead_hours: int  # archiveShipAheadHours
    ship_all: bool = False

    def __post_init__(self) -> None:
        if self.reserved_hours < 0 or self.ahead_hours < 0:
            raise ValueError("fileReservedTime and archiveShipAheadHours must be >= 0")


def released_up_to(files: Iterable[LocalFile], verdicts: Mapping[int, Verdict],
                   counted: frozenset[Verdict] = frozenset(Verdict)) -> int:
    """The end of the leading run of files whose verdict is in `counted` (default: any
    answer, HELD or REFUSED); the first file's offset when that one has none (0 without
    files)."""
    end = None
    for f in files:
        if verdicts.get(f.offset) not in counted:
            return f.offset if end is None else end
        end = f.offset + f.size
    return 0 if end is None else end


def held_up_to(files: Iterable[LocalFile], verdicts: Mapping[int, Verdict]) -> int:
    """The end of the leading run of files the archive holds (HELD only)."""
    return released_up_to(files, verdicts, frozenset({Verdict.HELD}))


def next_to_ship(files: Iterable[LocalFile], verdicts: Mapping[int, Verdict], now_ms: int,
                 rules: ShipRules, pressure: bool = False,
                 requested_up_to: int = 0) -> LocalFile | None:
    """The oldest sealed file without a verdict if it is due (module doc), else None. Only the
    oldest is considered: files go to the archive in order."""
    for f in files:
        if f.offset in verdicts:
            continue
        if not f.sealed:
            return None
        due_at = f.time_ms + (rules.reserved_hours - rules.ahead_hours) * _HOUR_MS
        if rules.ship_all or pressure or f.offset < requested_up_to or now_ms >= due_at:
            return f
        return None
    return None
