"""Files whose presence (not content) carries meaning: RocketMQ's `abort` marker and `lock` file.

* `abort` is created when the store starts and removed on a clean shutdown. Finding it at start
  means the previous run died, so recovery must take the abnormal path (re-check the tail of
  the commitlog against the checkpoint instead of trusting the last files).
* `lock` holds an exclusive flock for as long as a store process has the directory open, so
  two processes never write the same files. It contains the holder's pid as ASCII text plus a
  newline, only to name the holder in the error message of whoever is refused.

Both classes accept either the file path or the store directory (then the RocketMQ file names
`abort` / `lock` inside it are used).
"""
from __future__ import annotations

import errno
import fcntl
import os
import time
from types import TracebackType

from store.errors import DiskError, StoreLocked
from .commitlog.fileio import DEFAULT_FILE_IO, FileIO
from store.layout import ABORT_FILE, LOCK_FILE



def _resolve(path: str, default_name: str) -> str:
    return os.path.join(path, default_name) if os.path.isdir(path) else path


def _dir_of(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


# How long a store waits for the lock while the pid written in it is gone (see StoreLock._flock)
DEAD_HOLDER_WAIT_S = 5.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def holder_pid(raw: bytes) -> int | None:
    """The pid in the content of a `lock` file, None when there is none: the holder may be
    between truncate and write, so an empty or odd file is possible."""
    try:
        return int(raw.decode("ascii").strip())
    except (ValueError, UnicodeDecodeError):
        return None


class AbortMarker:
    """The `abort` file: present while a store runs, absent after a clean shutdown."""

    def __init__(self, path: str, io: FileIO = DEFAULT_FILE_IO) -> None:
        self.path = _resolve(path, ABORT_FILE)
        self.io = io

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def create(self) -> None:
        """Create the (empty) marker and make its directory entry durable: without the
        directory fsync a crash right after start could lose the entry, and the next start
        would wrongly take the normal-recovery path."""
        directory = _dir_of(self.path)
        try:
            fd = self.io.open_rw(self.path)
            self.io.close(fd)
            self.io.fsync_dir(directory)
        except OSError as e:
            raise DiskError("create abort marker", self.path, e) from e

    def remove(self) -> None:
        """Remove the marker (a missing one is fine) and make the removal durable, so a crash
        right after a clean shutdown is not mistaken for an abnormal one."""
        try:
            self.io.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise DiskError("remove abort marker", self.path, e) from e
        try:
            self.io.fsync_dir(_dir_of(self.path))
        except OSError as e:
            raise DiskError("remove abort marker", self.path, e) from e


class StoreLock:
    """Exclusive, non-blocking flock on the store's `lock` file.

    flock locks belong to the open file description, so a second StoreLock on the same path
    fails even inside the same process (it opens the file again), and the lock dies with the
    process, so a crashed holder never leaves a stale lock behind. The file itself is never
    deleted: unlinking it would let a third process lock a fresh inode while a second one still
    holds the old one."""

    def __init__(self, path: str, io: FileIO = DEFAULT_FILE_IO) -> None:
        self.path = _resolve(path, LOCK_FILE)
        self.store_dir = _dir_of(self.path)
        self.io = io
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    @property
    def fd(self) -> int | None:
        """The locked descriptor (None when not held). A child process that inherits it holds
        the lock with this process: the index process does, so no other store opens the
        directory while it still writes."""
        return self._fd

    def acquire(self) -> None:
        """Take the lock or raise StoreLocked naming the store directory and the holder's pid.
        Raises DiskError if the lock file cannot be opened or written."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this StoreLock")
        try:
            fd = self.io.open_rw(self.path)
        except OSError as e:
            raise DiskError("open lock file", self.path, e) from e
        try:
            self._flock(fd)
        except OSError as e:
            holder = self._read_pid(fd)
            self.io.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreLocked(
                    f"store directory {self.store_dir} is locked by another process "
                    f"(pid {holder if holder is not None else 'unknown'}, lock file {self.path})"
                ) from e
            raise DiskError("flock", self.path, e) from e
        try:
            # The pid is informational only, so it is not fsynced: after a crash the flock is
            # gone anyway and the next holder overwrites the pid.
            self.io.truncate(fd, 0, self.path)
            self.io.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0, self.path)
        except OSError as e:
            fcntl.flock(fd, fcntl.LOCK_UN)
            self.io.close(fd)
            raise DiskError("write lock file", self.path, e) from e
        self._fd = fd

    def _flock(self, fd: int) -> None:
        """flock, waiting up to DEAD_HOLDER_WAIT_S while the pid in the file is a process
        that no longer exists: its index process (store/index/index_process.py) shares the lock
        and exits as soon as it sees its parent gone, a few milliseconds later."""
        deadline = time.monotonic() + DEAD_HOLDER_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                holder = self._read_pid(fd)
                if holder is None or _alive(holder) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def _read_pid(self, fd: int) -> int | None:
        try:
            return holder_pid(self.io.pread(fd, 64, 0, self.path))
        except OSError:
            return None

    def release(self) -> None:
        """Drop the lock; a no-op if not held. The pid stays in the file (see acquire)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self.io.close(fd)  # closing alone would release it too; unlock explicitly anyway

    def __enter__(self) -> "StoreLock":
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
