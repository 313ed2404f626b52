"""Failpoints: named places in the code where a test can make the process crash for real.

`RMQSTORE_FAILPOINTS="slave.after_truncate=kill,..."` in a node's environment makes
`failpoint("slave.after_truncate")` SIGKILL the process at that exact point, so drills can
prove that a crash between two steps leaves the store consistent (as TiKV's fail-rs and
FoundationDB's buggify do). Unset in production: a failpoint is then one dict lookup.

Actions: `kill` (SIGKILL at `failpoint(name)`) and `corrupt_once` (`should_corrupt(name)` is
true exactly once in the process's life, e.g. `master.corrupt_next_chunk=corrupt_once` flips a
byte of one replication chunk after its CRC was computed).

Importing this module has no side effect: the environment is read on the first
`failpoint`/`should_corrupt` call, unless `configure()` set the failpoints before (a process
entry that wants a bad value to fail at start-up, or a test that arms a failpoint in-process).
It lives in `store/`, the bottom layer, so every package may place failpoints.
"""
from __future__ import annotations

import logging
import os
import signal
import threading

from store.errors import ConfigError

log = logging.getLogger(__name__)
ENV = "RMQSTORE_FAILPOINTS"
_ACTIONS = ("kill", "corrupt_once")
_DONE = "done"  # a corrupt_once failpoint that has fired


def parse(spec: str) -> dict[str, str]:
    """`name=action,...` -> {name: action}; blanks around items are ignored."""
    points = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = item.partition("=")
        if action not in _ACTIONS:
            raise ConfigError(f"{ENV}: unknown action {action!r} for {name!r} "
                              f"(want one of {', '.join(_ACTIONS)})")
        points[name] = action
    return points


# None until configured: the first use reads the environment. Replaced whole, never mutated,
# except a corrupt_once entry turning "done" under _LOCK.
_active: dict[str, str] | None = None
_LOCK = threading.Lock()


def configure(spec: str | None = None) -> None:
    """Arm the failpoints of `spec` (the format of RMQSTORE_FAILPOINTS) and disarm all others;
    None reads RMQSTORE_FAILPOINTS. Raises ConfigError for an unknown action."""
    global _active
    points = parse(os.environ.get(ENV, "") if spec is None else spec)
    with _LOCK:
        _active = points


def _points() -> dict[str, str]:
    global _active
    points = _active
    if points is None:  # first use: the environment, unless another thread got there first
        loaded = parse(os.environ.get(ENV, ""))  # (then a fired corrupt_once stays fired)
        with _LOCK:
            if _active is None:
                _active = loaded
            points = _active
    return points


def failpoint(name: str) -> None:
    if _points().get(name) == "kill":
        log.warning("failpoint %s: killing this process", name)
        os.kill(os.getpid(), signal.SIGKILL)


def should_corrupt(name: str) -> bool:
    """True exactly once for a `corrupt_once` failpoint, then never again."""
    points = _points()
    if not points:  # the common case, on every replication chunk: no lock
        return False
    with _LOCK:
        if points.get(name) != "corrupt_once":
            return False
        points[name] = _DONE
    log.warning("failpoint %s: corrupting once", name)
    return True
