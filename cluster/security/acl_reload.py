"""The ACL file in force, re-read without a restart when it changes on disk.

`AclSource.current()` looks at the file's (mtime, size, inode) at most once per
CHECK_INTERVAL_SECONDS of the injected clock (common.clock: tests move it by hand, nothing
sleeps), and re-reads the file when they changed. A new file that does not parse keeps the
previous ACL in force: the error is logged (ERROR, once per distinct error) and kept in
`problem` (MessagingService.access.problem) until a good file replaces it. The first read happens in
the constructor and raises: a node does not start with ACL on and no valid ACL.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from common.config_values import ConfigError

from cluster.security.acl import Acl
from cluster.security.acl_file import read_acl_file

if TYPE_CHECKING:
    from common.clock import Clock

log = logging.getLogger(__name__)
CHECK_INTERVAL_SECONDS = 1.0


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class AclSource:
    """Owns the ACL read from `path`, the file's last seen stamp and the last reload problem.
    `_lock` guards the stamp, the check time and `problem`; `_acl` is one reference to an
    immutable Acl, so readers take no lock."""

    def __init__(self, path: str, clock: "Clock") -> None:
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()
        self._stamp = _stamp(path)
        self._acl: Acl = read_acl_file(path)  # raises ConfigError: no ACL, no start
        self._checked_at = clock.monotonic()
        self.problem = ""  # why the file on disk is not the ACL in force ("" when it is)
        self.reloads = 0

    def current(self) -> Acl:
        now = self.clock.monotonic()
        if now - self._checked_at >= CHECK_INTERVAL_SECONDS:
            self._maybe_reload(now)
        return self._acl

    def _maybe_reload(self, now: float) -> None:
        with self._lock:
            if now - self._checked_at < CHECK_INTERVAL_SECONDS:
                return  # another thread just looked
            self._checked_at = now
            stamp = _stamp(self.path)
            if stamp == self._stamp:
                return
            try:
                acl = read_acl_file(self.path)
            except ConfigError as e:
                # The stamp is kept old on purpose: a fixed file (any change) is read again.
                # A missing file (stamp None) is an error too: deleting the ACL file must not
                # fall back to anything weaker than the ACL in force.
                if str(e) != self.problem:
                    log.error("ACL file not reloaded, the previous ACL stays in force: %s", e)
                self.problem = str(e)
                return
            self._stamp = stamp
            self._acl = acl
            self.reloads += 1
            if self.problem:
                log.warning("ACL file %s is valid again", self.path)
            self.problem = ""
            log.info("reloaded the ACL file %s: %d users", self.path, len(acl.accounts))
