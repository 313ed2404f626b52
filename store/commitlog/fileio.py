"""The only module of the live store that touches mmap, msync, fsync, pwrite and friends
(store/readonly/ maps files read-only on its own, for a store it does not open).

Every store object receives a `FileIO` and goes through it for anything that can fail on a
disk, so tests inject EIO, ENOSPC and read-only failures with `FaultyFileIO` (tests/) by
overriding `_check`. Failures surface as OSError from here; callers turn them into typed
store errors. Nothing here retries a failed flush: after a failed fsync the kernel may already
have dropped the dirty pages ("fsyncgate"), so a retry could report success for lost data.

In a running process the failpoint `fileio.write` (common/failpoints.py, armed with e.g.
`RMQSTORE_FAILPOINTS=fileio.write=fail_while:/abs/trigger`) makes every write-side operation
fail with EROFS while its trigger file exists: the "disk remounted read-only" drill. The
failpoint `fileio.slow` (`delay_while:<ms>:/abs/trigger`) makes every write-side operation and
every write into a mapping (`mapped_write`) take that much longer: the "slow disk" drill.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
from typing import Sequence

from common import failpoints
from store.layout import tmp_path

PAGE_SIZE = mmap.PAGESIZE
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_ZERO_RANGE = 0x10
_ZERO_CHUNK = bytes(1 << 20)
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def _load_fallocate():  # pragma: no cover - depends on the libc at hand
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.fallocate
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
        fn.restype = ctypes.c_int
        return fn
    except (OSError, AttributeError):
        return None


_fallocate = _load_fallocate()


def _load_msync():  # pragma: no cover - depends on the libc at hand
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.msync
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    except (OSError, AttributeError):
        return None


def _load_madvise():  # pragma: no cover - depends on the libc at hand
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.madvise
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    except (OSError, AttributeError):
        return None


_madvise = _load_madvise()
_MADV_POPULATE_WRITE = 23  # Linux 5.14+; older kernels answer EINVAL


# CPython 3.11's mmap.flush() holds the GIL for the whole msync, so a flush of a few MiB stalls
# every other thread of the node (puts, replication, reput). ctypes releases the GIL around
# foreign calls, so msync through libc lets the other threads run while the disk works.
_msync = _load_msync()
_MS_SYNC = getattr(mmap, "MS_SYNC", 4)

WRITE_FAILPOINT = "fileio.write"
SLOW_FAILPOINT = "fileio.slow"
# The operations (the names `_check` sees) that a read-only file system refuses. `mmap` counts
# only for a writable mapping (FileIO.map says so); close, pread, open_ro and fstat read.
WRITE_OPS = frozenset({"open", "preallocate", "truncate", "mmap", "pwrite", "msync", "fdatasync",
                       "fsync", "zero_range", "makedirs", "fsync_dir", "unlink", "rename"})


def existing_parent(path: str) -> str:
    """`path` or its nearest existing parent (store directories appear with the first write)."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


class FileIO:
    """Thin wrappers over the OS calls the store uses. Subclass and override `_check` to inject
    faults: it is called with the operation name and path before the real call."""

    def _check(self, op: str, path: str) -> None:
        """Hook for fault injection; the real implementation does nothing."""

    def _enter(self, op: str, path: str, writes: bool | None = None) -> None:
        """Every operation starts here: the `fileio.write` failpoint for a write-side one
        (`writes` defaults to `op in WRITE_OPS`), then the `_check` hook. The failpoint is not
        in `_check`, so a subclass's own faults add to it instead of replacing it."""
        if writes is None:
            writes = op in WRITE_OPS
        if writes:
            failpoints.io_failure(WRITE_FAILPOINT, path)
            failpoints.io_delay(SLOW_FAILPOINT)
        self._check(op, path)

    def mapped_write(self, path: str) -> None:
        """A write into a mapping of `path` is about to happen: no system call, so nothing can
        fail here, but a slow disk slows it too (the kernel throttles writers of dirty pages),
        so the `fileio.slow` failpoint applies. Unarmed, one dict lookup."""
        failpoints.io_delay(SLOW_FAILPOINT)

    # -- files ---------------------------------------------------------------------------
    def open_rw(self, path: str, create: bool = True) -> int:
        self._enter("open", path)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        return os.open(path, flags, 0o644)

    def open_ro(self, path: str) -> int:
        self._enter("open_ro", path)
        return os.open(path, os.O_RDONLY)

    def close(self, fd: int) -> None:
        os.close(fd)

    def free_bytes(self, path: str) -> int:
        """Bytes an unprivileged writer may still take on the file system holding `path`
        (or its nearest existing parent)."""
        self._enter("statvfs", path, writes=False)
        st = os.statvfs(existing_parent(path))
        return st.f_bavail * st.f_frsize

    def file_size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def preallocate(self, fd: int, size: int, path: str) -> None:
        """Reserve `size` bytes of disk so that writing through an mmap can never hit an
        unbacked page (SIGBUS on a full disk). Raises OSError(ENOSPC) when space is short."""
        self._enter("preallocate", path)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.ftruncate(fd, size)  # file systems without fallocate (tmpfs on old kernels)

    def preallocate_range(self, fd: int, offset: int, length: int, path: str) -> None:
        """Reserve [offset, offset + length) of disk, growing the file (posix_fallocate: a
        file system without it fails here rather than getting a sparse tail that a write
        through the mapping could fault on). Raises OSError(ENOSPC) when space is short."""
        self._enter("preallocate", path)
        os.posix_fallocate(fd, offset, length)

    def truncate(self, fd: int, size: int, path: str) -> None:
        self._enter("truncate", path)
        os.ftruncate(fd, size)

    def map(self, fd: int, size: int, path: str, writable: bool = True) -> mmap.mmap:
        self._enter("mmap", path, writes=writable)
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        return mmap.mmap(fd, size, access=access)

    # -- writing and durability ---------------------------------------------------------------
    def pwrite(self, fd: int, data, offset: int, path: str) -> None:
        """Write all of `data` at `offset`; a short write is retried for the remainder only."""
        self._enter("pwrite", path)
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            if n <= 0:
                raise OSError(errno.EIO, "short write")
            view = view[n:]
            offset += n

    def pwritev(self, fd: int, buffers: Sequence, offset: int, path: str) -> int:
        """Write the buffers one after another from `offset`, in as few system calls as the
        kernel allows (IOV_MAX buffers each; a short write is retried for the remainder only).
        Returns the bytes written. The fault-injection name is "pwrite"."""
        self._enter("pwrite", path)
        views = [memoryview(b) for b in buffers if len(b)]
        first, total = 0, 0  # views[first:] are still to write
        while first < len(views):
            n = os.pwritev(fd, views[first:first + _IOV_MAX], offset)
            if n <= 0:
                raise OSError(errno.EIO, "short write")
            offset += n
            total += n
            while n:  # skip what went out; keep the rest of a view written in part
                if n >= len(views[first]):
                    n -= len(views[first])
                    first += 1
                else:
                    views[first] = views[first][n:]
                    n = 0
        return total

    def pread(self, fd: int, size: int, offset: int, path: str) -> bytes:
        self._enter("pread", path)
        return os.pread(fd, size, offset)

    def read_file(self, path: str) -> bytes:
        """The whole content of a small file (pread may return short reads)."""
        fd = self.open_ro(path)
        try:
            size = self.file_size(fd)
            chunks: list[bytes] = []
            offset = 0
            while offset < size:
                chunk = self.pread(fd, size - offset, offset, path)
                if not chunk:  # the file shrank under us; return what is there
                    break
                chunks.append(chunk)
                offset += len(chunk)
            return b"".join(chunks)
        finally:
            self.close(fd)

    def msync(self, mm: mmap.mmap, offset: int, length: int, path: str) -> None:
        """msync(MS_SYNC) of [offset, offset+length), widened to page boundaries."""
        self._enter("msync", path)
        start = offset - offset % PAGE_SIZE
        size = offset + length - start
        if _msync is None or size <= 0:
            mm.flush(start, size)
            return
        anchor = ctypes.c_char.from_buffer(mm, start)  # pins the mapping while we read its address
        address = ctypes.addressof(anchor)
        try:
            rc = _msync(address, size, _MS_SYNC)
        finally:
            del anchor
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def populate(self, mm: mmap.mmap, offset: int, length: int, path: str) -> bool:
        """Fault [offset, offset+length) of a shared writable mapping in, writable, ahead of
        the writes (madvise MADV_POPULATE_WRITE through libc, so without the GIL). The first
        write to a page of a fresh file costs a page fault, which `mm[a:b] = data` takes while
        holding the GIL: about 2 ms per MiB on a VM, the largest cost of a slave's append.
        The pages read as zeros, as the preallocated file does. False when the kernel or libc
        cannot (nothing is populated then: the writes fault as before)."""
        self._enter("populate", path, writes=False)
        start = offset - offset % PAGE_SIZE
        size = offset + length - start
        if _madvise is None or size <= 0:
            return False
        anchor = ctypes.c_char.from_buffer(mm, start)  # pins the mapping while we use its address
        try:
            rc = _madvise(ctypes.addressof(anchor), size, _MADV_POPULATE_WRITE)
        finally:
            del anchor
        if rc != 0:
            err = ctypes.get_errno()
            if err in (errno.EINVAL, errno.ENOSYS):
                return False
            raise OSError(err, os.strerror(err))
        return True

    def advise_access(self, mm: mmap.mmap, offset: int, random: bool, path: str) -> bool:
        """madvise [offset, end of the mapping) MADV_RANDOM (`random`) or MADV_NORMAL.

        Why: Linux 6.x page caches (ext4 among them) build large folios as sequential faults
        go on, and a folio is written back whole. A file written through its mapping then has
        every small msync write up to a whole folio (measured here, kernel 6.18: about 95 µs
        for an appended 1.2 KB record while under 16 MiB of the file was written, 0.5-1.0 ms
        past 32 MiB; pwrite + fdatasync stayed at 90 µs). MADV_RANDOM turns readahead off for
        the range, so pages faulted in by the writes (and by the prefault) stay one page each;
        MADV_NORMAL gives a file that is no longer written its readahead back for readers.
        Only a SYNC_FLUSH commitlog asks for it (MappedFile `small_flushes`): bulk appends lose
        to it (a slave's catch-up with 1 MiB chunks 357-373 -> 297-310 MB/s here), and an
        ASYNC_FLUSH round covers many pages anyway. Advice only: False when the kernel
        refuses it (nothing changed then)."""
        self._enter("madvise", path, writes=False)
        start = offset - offset % PAGE_SIZE
        if start >= len(mm):
            return False
        try:
            mm.madvise(mmap.MADV_RANDOM if random else mmap.MADV_NORMAL, start, len(mm) - start)
        except (OSError, ValueError):
            return False
        return True

    def fdatasync(self, fd: int, path: str) -> None:
        self._enter("fdatasync", path)
        os.fdatasync(fd)

    def fsync(self, fd: int, path: str) -> None:
        self._enter("fsync", path)
        os.fsync(fd)

    def zero_range(self, fd: int, offset: int, length: int, path: str) -> None:
        """Make [offset, offset+length) read as zeros while keeping the blocks allocated
        (FALLOC_FL_ZERO_RANGE; falls back to writing zeros). Used by crash-safe truncation."""
        self._enter("zero_range", path)
        if length <= 0:
            return
        if _fallocate is not None:
            rc = _fallocate(fd, _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE, offset, length)
            if rc == 0:
                return
            err = ctypes.get_errno()
            if err not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise OSError(err, os.strerror(err))
        end = offset + length
        while offset < end:
            n = min(len(_ZERO_CHUNK), end - offset)
            self.pwrite(fd, memoryview(_ZERO_CHUNK)[:n], offset, path)
            offset += n

    # -- directories ---------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        self._enter("makedirs", path)
        os.makedirs(path, exist_ok=True)

    def fsync_dir(self, path: str) -> None:
        self._enter("fsync_dir", path)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def unlink(self, path: str) -> None:
        self._enter("unlink", path)
        os.unlink(path)

    def rename(self, src: str, dst: str) -> None:
        self._enter("rename", dst)
        os.replace(src, dst)

    def write_file_atomic(self, path: str, data: bytes) -> None:
        """tmp file, write, fsync, rename over `path`, fsync the directory: after a crash the
        file holds either the old or the new content, never a mix or nothing."""
        directory = os.path.dirname(path) or "."
        tmp = tmp_path(path)
        fd = self.open_rw(tmp)
        try:
            self.truncate(fd, 0, tmp)
            self.pwrite(fd, data, 0, tmp)
            self.fsync(fd, tmp)
        finally:
            self.close(fd)
        self.rename(tmp, path)
        self.fsync_dir(directory)


DEFAULT_FILE_IO = FileIO()
