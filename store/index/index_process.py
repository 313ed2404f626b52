"""The message index in a child process (messageIndexProcessEnable): the parent's end.

Reput's index dispatch (hashing every key and writing slots and entries) is CPU the serving
process does not have to spend under its GIL. `IndexProcess` stands where an IndexService
would (reput's dispatcher, the reader's key queries, retention, truncation, the logics flush)
and sends each call over a pipe to `python -m store.index.index_worker` (index_wire.py), which owns
the index files. The parent still turns records into entries (index_service.index_entries,
about a tenth of the cost); the child hashes and writes them.

Every call waits for its reply, so the rules of the index in one process hold unchanged: a
dispatch returns once the child holds the entries (reput's retry finds a failed record as
before), flush returns the endTimestamp the child msync'ed (the checkpoint's
indexMsgTimestamp), a store error in the child is raised here as the same type. The waiting
thread (reput's, under its lock) holds no GIL while the child works.

The child inherits the store's lock (the flock'ed file description), so no second process
can open the store while a child of the last one still writes the index.

If the child dies, the call that finds out raises IndexProcessError (for a dispatch, reput
reports DISPATCH_ERROR and retries), and the next call starts a new one. It loads the files
as after a crash (those past the checkpoint's indexMsgTimestamp may be torn and are deleted),
and the next dispatch first re-dispatches the commitlog from where the index then ends up to
its own first record (`replay`, reput's walk), so no key goes unindexed.

Locking: `_lock` guards the child and its pipe (one request and its reply at a time). Reput
calls in under its own lock; nothing here takes reput's lock.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import threading
from typing import Callable, Iterable, NamedTuple, NoReturn, Sequence

from common.clock import SYSTEM_CLOCK, Clock
from store.codec.dispatch import DispatchRequest
from .index_service import DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM, index_entries
from .index_wire import IndexProcessError, ok_value, read_frame, write_frame
from common.pipe_frames import PipeError

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 10.0

# (from_offset, to_offset) -> the records between, in batches (ReputService.requests_between)
Replay = Callable[[int, int], Iterable[Sequence[DispatchRequest]]]


class IndexFileInfo(NamedTuple):
    """What the store export needs of an index file (the child holds the file itself)."""

    path: str
    hash_slot_num: int
    index_num: int


class IndexProcess:
    """Stands in for an IndexService and forwards every call to the index child process
    (see the module docstring): owns the child (started on first use and again after it
    died), its pipe, the pending replay after a restart and the restart count.

    `_lock` guards the child and its pipe: one request and its reply at a time, from reput's
    thread (under reput's lock), the reader's queries, retention and the logics flush."""

    def __init__(self, index_dir: str, hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
                 index_num: int = DEFAULT_INDEX_NUM, clock: Clock = SYSTEM_CLOCK, *,
                 lock_fd: Callable[[], int | None] = lambda: None,
                 index_msg_timestamp: Callable[[], int] = lambda: 0) -> None:
        self.index_dir = index_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.clock = clock
        self.lock_fd = lock_fd  # the store's flock'ed fd, inherited by the child
        self.index_msg_timestamp = index_msg_timestamp  # the checkpoint's, for a restart
        self.replay: Replay | None = None  # set by the store once reput exists
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._replay_pending = False
        self._closed = False
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    # -- the child --------------------------------------------------------------------------
    def _spawn(self) -> subprocess.Popen:
        fd = self.lock_fd()
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "store.index.index_worker", self.index_dir,
                 str(self.hash_slot_num), str(self.index_num)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                pass_fds=() if fd is None else (fd,))
        except OSError as e:
            raise IndexProcessError(f"cannot start the index process: {e}") from e

    def _call(self, *request):
        """Send one request and return its reply's value (call with _lock held)."""
        proc = self._proc
        if proc is None:
            raise IndexProcessError("the index process is not running")
        try:
            write_frame(proc.stdin, request)
            reply = read_frame(proc.stdout)
        except (OSError, ValueError, PipeError) as e:  # broken pipe, torn frame
            self._lost(proc, e)
        if reply is None:
            self._lost(proc, None)
        return ok_value(reply)

    def _lost(self, proc: subprocess.Popen, cause: BaseException | None) -> NoReturn:
        code = self._reap(proc, kill=True)
        message = (f"the index process (pid {proc.pid}) ended with exit status {code}"
                   + (f": {cause}" if cause is not None else ""))
        log.error("%s; the next index call starts a new one", message)
        raise IndexProcessError(message)

    def _reap(self, proc: subprocess.Popen, *, kill: bool) -> int:
        """Forget `proc`, close its pipes and wait for it (killed first, or after
        CLOSE_WAIT_S when it does not exit on its own); returns its exit status."""
        if self._proc is proc:
            self._proc = None
        if kill:
            proc.kill()  # a no-op on one that already exited
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            return proc.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def _running(self) -> None:
        """Start a child if there is none (the first load starts it; a later start is a
        restart after the child died: load as after a crash, re-dispatch on the next put)."""
        if self._proc is not None:
            return
        if self._closed:
            raise IndexProcessError("the index is closed")
        proc = self._proc = self._spawn()
        self.restarts += 1
        try:
            notes = self._call("load", False, self.index_msg_timestamp())
        except BaseException:
            if self._proc is proc:  # refused to load: do not keep a child without its files
                self._reap(proc, kill=True)
            raise
        self._replay_pending = True
        log.warning("index process restarted (pid %d)%s", proc.pid,
                    "".join(f"; {n}" for n in notes))

    # -- the IndexService calls -------------------------------------------------------------
    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> list[str]:
        with self._lock:
            self._closed = False
            if self._proc is None:
                self._proc = self._spawn()
            return self._call("load", last_exit_ok, index_msg_timestamp)

    def dispatch(self, request: DispatchRequest) -> None:
        self.dispatch_many((request,))

    def dispatch_many(self, requests: Sequence[DispatchRequest]) -> None:
        """Reput's batch (called under reput's lock, which `replay` needs)."""
        entries = index_entries(requests)
        with self._lock:
            self._running()
            if self._replay_pending and requests:
                self._replay_to(requests[0].commit_log_offset)
            if entries:
                self._call("put", entries, self.clock.now_ms())

    def _replay_to(self, first: int) -> None:
        """After a restart: index what lies between the index's end and `first`."""
        end = self._call("end")
        if self.replay is not None and end < first:
            for batch in self.replay(end, first):
                entries = index_entries(batch)
                if entries:
                    self._call("put", entries, self.clock.now_ms())
        self._replay_pending = False

    def query(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int,
              max_phy_offset: int | None = None) -> list[int]:
        with self._lock:
            self._running()
            return self._call("query", topic, key, max_num, begin_ts, end_ts, max_phy_offset)

    def delete_expired(self, min_phy_offset: int) -> int:
        with self._lock:
            self._running()
            return self._call("delete_expired", min_phy_offset, self.clock.now_ms())

    def truncate_dirty(self, phy_offset: int) -> int:
        with self._lock:
            self._running()
            return self._call("truncate", phy_offset)

    def flush(self, sealed_only: bool = False) -> int:
        with self._lock:
            self._running()
            return self._call("flush", sealed_only)

    def files(self) -> list[IndexFileInfo]:
        with self._lock:
            self._running()
            return [IndexFileInfo(*f) for f in self._call("files")]

    def close(self) -> None:
        """Close the files in the child and wait for it to exit (kill it after CLOSE_WAIT_S)."""
        with self._lock:
            self._closed = True
            proc = self._proc
            if proc is None:
                return
            try:
                write_frame(proc.stdin, ("close",))
                reply = read_frame(proc.stdout)
                if reply is None:
                    raise IndexProcessError("the index process ended without answering close")
                ok_value(reply)
            except (OSError, ValueError, PipeError) as e:
                log.warning("closing the index process (pid %d): %s", proc.pid, e)
            finally:
                self._reap(proc, kill=False)
