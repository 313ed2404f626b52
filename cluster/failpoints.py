"""Failpoints: named places in the code where a test can make the process crash for real.

`RMQSTORE_FAILPOINTS="slave.after_truncate=kill,..."` in a node's environment makes
`failpoint("slave.after_truncate")` SIGKILL the process at that exact point, so drills can
prove that a crash between two steps leaves the store consistent (as TiKV's fail-rs and
FoundationDB's buggify do). Unset in production: a failpoint is then one dict lookup.

Actions: `kill` (SIGKILL at `failpoint(name)`) and `corrupt_once` (`should_corrupt(name)` is
true exactly once in the process's life, e.g. `master.corrupt_next_chunk=corrupt_once` flips a
byte of one replication chunk after its CRC was computed).
"""
from __future__ import annotations

import logging
import os
import signal
import threading

log = logging.getLogger(__name__)
_ENV = "RMQSTORE_FAILPOINTS"
_ACTIONS = ("kill", "corrupt_once")


def _parse(text: str) -> dict[str, str]:
    points = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, _, action = item.partition("=")
        if action not in _ACTIONS:
            raise ValueError(f"{_ENV}: unknown action {action!r} for {name!r} "
                             f"(want one of {', '.join(_ACTIONS)})")
        points[name] = action
    return points


_ACTIVE = _parse(os.environ.get(_ENV, ""))
_LOCK = threading.Lock()


def failpoint(name: str) -> None:
    if _ACTIVE.get(name) == "kill":
        log.warning("failpoint %s: killing this process", name)
        os.kill(os.getpid(), signal.SIGKILL)


def should_corrupt(name: str) -> bool:
    """True exactly once for a `corrupt_once` failpoint, then never again."""
    if not _ACTIVE:
        return False
    with _LOCK:
        if _ACTIVE.get(name) != "corrupt_once":
            return False
        _ACTIVE[name] = "done"
    log.warning("failpoint %s: corrupting once", name)
    return True
