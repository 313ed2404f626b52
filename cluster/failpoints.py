"""Failpoints: named places in the code where a test can make the process crash for real.

`RMQSTORE_FAILPOINTS="slave.after_truncate=kill,..."` in a node's environment makes
`failpoint("slave.after_truncate")` SIGKILL the process at that exact point, so drills can
prove that a crash between two steps leaves the store consistent (as TiKV's fail-rs and
FoundationDB's buggify do). Unset in production: a failpoint is then one dict lookup.
"""
from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)
_ENV = "RMQSTORE_FAILPOINTS"


def _parse(text: str) -> dict[str, str]:
    points = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, _, action = item.partition("=")
        if action not in ("kill",):
            raise ValueError(f"{_ENV}: unknown action {action!r} for {name!r} (want kill)")
        points[name] = action
    return points


_ACTIVE = _parse(os.environ.get(_ENV, ""))


def failpoint(name: str) -> None:
    if _ACTIVE.get(name) == "kill":
        log.warning("failpoint %s: killing this process", name)
        os.kill(os.getpid(), signal.SIGKILL)
