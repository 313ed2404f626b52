"""Failpoints: named places in the code where a test can make the process crash for real.

`RMQSTORE_FAILPOINTS="slave.after_truncate=kill,..."` in a node's environment makes
`failpoint("slave.after_truncate")` SIGKILL the process at that exact point, so drills can
prove that a crash between two steps leaves the store consistent (as TiKV's fail-rs and
FoundationDB's buggify do). Unset in production: a failpoint is then one dict lookup.

Actions: `kill` (SIGKILL at `failpoint(name)`), `corrupt_once` (`should_corrupt(name)` is
true exactly once in the process's life, e.g. `master.corrupt_next_chunk=corrupt_once` flips a
byte of one replication chunk after its CRC was computed) and `fail_while:<absolute path>`
(`io_failure(name, path)` raises OSError(EROFS) for as long as that trigger file exists, e.g.
`fileio.write=fail_while:/tmp/drill/readonly` makes every write-side FileIO operation fail like
a file system remounted read-only once the drill creates the file, while the process runs; the
trigger path cannot contain a comma, the item separator), and `every:<n>` (`should_fire(name)`
is true on every n-th call, e.g. `messaging.send.drop_answer=every:40` makes the master answer
one stored send in forty as if the answer was lost, so a drill sees what clients' retries do),
and `delay_while:<ms>:<absolute path>` (`io_delay(name)` sleeps that many ms for as long as the
trigger file exists, e.g. `fileio.slow=delay_while:200:/tmp/drill/slowdisk` makes every
write-side FileIO operation and every write into a mapping take 200 ms more: a slow disk,
the gray-failure drill `slow-disk-slave`).

Importing this module has no side effect: the environment is read on the first
`failpoint`/`should_corrupt` call, unless `configure()` set the failpoints before (a process
entry that wants a bad value to fail at start-up, or a test that arms a failpoint in-process).
It lives in `store/`, the bottom layer, so every package may place failpoints.
"""
from __future__ import annotations

import errno
import logging
import os
import signal
import threading
import time

from .config_values import ConfigError

log = logging.getLogger(__name__)
ENV = "RMQSTORE_FAILPOINTS"
_ACTIONS = ("kill", "corrupt_once", "fail_while:<path>", "every:<n>", "delay_while:<ms>:<path>")
_FAIL_WHILE = "fail_while:"  # the action with an argument: the trigger file's absolute path
_DELAY_WHILE = "delay_while:"  # <ms>:<the trigger file's absolute path>
_EVERY = "every:"  # fires on every n-th call
_DONE = "done"  # a corrupt_once failpoint that has fired


def parse(spec: str) -> dict[str, str]:
    """`name=action,...` -> {name: action}; blanks around items are ignored. A `fail_while`
    action keeps its argument in the value (`fail_while:/abs/path`)."""
    points = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = item.partition("=")
        if action.startswith(_FAIL_WHILE):
            trigger = action[len(_FAIL_WHILE):]
            # Relative paths would depend on the process's cwd: the drill and the node must
            # agree on one file, so only an absolute path is accepted.
            if not trigger or not os.path.isabs(trigger):
                raise ConfigError(f"{ENV}: {item!r}: fail_while needs an absolute trigger path")
        elif action.startswith(_DELAY_WHILE):
            ms, _, trigger = action[len(_DELAY_WHILE):].partition(":")
            if not ms.isdigit() or not trigger or not os.path.isabs(trigger):
                raise ConfigError(f"{ENV}: {item!r}: delay_while needs <ms>:<absolute trigger "
                                  f"path>")
        elif action.startswith(_EVERY):
            n = action[len(_EVERY):]
            if not n.isdigit() or int(n) < 1:
                raise ConfigError(f"{ENV}: {item!r}: every needs a whole number >= 1")
        elif action not in _ACTIONS:
            raise ConfigError(f"{ENV}: unknown action {action!r} for {name!r} "
                              f"(want one of {', '.join(_ACTIONS)})")
        points[name] = action
    return points


# None until configured: the first use reads the environment. Replaced whole, never mutated,
# except a corrupt_once entry turning "done" under _LOCK.
_active: dict[str, str] | None = None
_LOCK = threading.Lock()
_calls: dict[str, int] = {}  # every:<n> failpoints' call counts, under _LOCK


def configure(spec: str | None = None) -> None:
    """Arm the failpoints of `spec` (the format of RMQSTORE_FAILPOINTS) and disarm all others;
    None reads RMQSTORE_FAILPOINTS. Raises ConfigError for an unknown action."""
    global _active
    points = parse(os.environ.get(ENV, "") if spec is None else spec)
    with _LOCK:
        _active = points
        _calls.clear()


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


def should_fire(name: str) -> bool:
    """True on every n-th call of an `every:<n>` failpoint; unarmed, one dict lookup."""
    action = _points().get(name)
    if action is None or not action.startswith(_EVERY):
        return False
    with _LOCK:
        count = _calls[name] = _calls.get(name, 0) + 1
    if count % int(action[len(_EVERY):]):
        return False
    log.warning("failpoint %s: firing (call %d)", name, count)
    return True


def io_failure(name: str, path: str) -> None:
    """Raise OSError(EROFS) for `path` while the `fail_while` failpoint `name` is armed and its
    trigger file exists: a drill turns a running process's disk read-only by creating the
    file, and back by removing it. Unarmed, this is one dict lookup; armed, one stat per call
    (the trigger is looked at on every call so that the switch takes effect at once)."""
    action = _points().get(name)
    if action is None or not action.startswith(_FAIL_WHILE):
        return
    if os.path.exists(action[len(_FAIL_WHILE):]):
        raise OSError(errno.EROFS, f"Read-only file system (failpoint {name})", path)


def io_delay(name: str) -> None:
    """Sleep for the `delay_while` failpoint `name`'s milliseconds while its trigger file
    exists (a drill slows a running process's disk by creating the file, and ends it by
    removing it). Unarmed, one dict lookup; armed, one stat per call."""
    action = _points().get(name)
    if action is None or not action.startswith(_DELAY_WHILE):
        return
    ms, _, trigger = action[len(_DELAY_WHILE):].partition(":")
    if os.path.exists(trigger):
        time.sleep(int(ms) / 1000.0)
