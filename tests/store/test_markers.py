"""AbortMarker lifecycle and StoreLock across processes."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from store.errors import DiskError, StoreLocked
from store.commitlog.fileio import FileIO
from store.layout import ABORT_FILE, LOCK_FILE
from store.markers import AbortMarker, StoreLock

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FaultyIO(FileIO):
    def __init__(self, ops: dict[str, int]) -> None:
        self.ops = ops
        self.calls: list[tuple[str, str]] = []

    def _check(self, op: str, path: str) -> None:
        self.calls.append((op, path))
        if op in self.ops:
            raise OSError(self.ops[op], os.strerror(self.ops[op]), path)


class RecordingIO(FaultyIO):
    def __init__(self) -> None:
        super().__init__({})


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _spawn_holder(code: str, path: str) -> subprocess.Popen:
    """A child running `code` with the lock path as argv[1]; it reports over stdout and waits
    for a line on stdin, so the test synchronises with it without sleeping."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), path], cwd=REPO_ROOT,
                            env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


TRY_LOCK = """
    import sys
    from store.errors import StoreLocked
    from store.markers import StoreLock
    lock = StoreLock(sys.argv[1])
    try:
        lock.acquire()
    except StoreLocked as e:
        print(e)
        sys.exit(3)
    print("acquired")
    lock.release()
"""


def _try_lock_in_child(path: str) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(TRY_LOCK), path], cwd=REPO_ROOT,
                       env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 3), r.stderr
    return r.returncode, r.stdout.strip()


# -- abort marker ------------------------------------------------------------------------------
def test_abort_marker_lifecycle(tmp_path):
    io = RecordingIO()
    marker = AbortMarker(str(tmp_path / ABORT_FILE), io)
    assert not marker.exists()
    marker.create()
    assert marker.exists() and (tmp_path / ABORT_FILE).is_file()
    assert ("fsync_dir", str(tmp_path)) in io.calls  # the new directory entry is made durable
    marker.create()  # idempotent
    assert marker.exists()

    io.calls.clear()
    marker.remove()
    assert not marker.exists()
    assert ("fsync_dir", str(tmp_path)) in io.calls
    marker.remove()  # missing is fine


def test_abort_marker_seen_by_a_new_instance(tmp_path):
    AbortMarker(str(tmp_path / ABORT_FILE)).create()
    assert AbortMarker(str(tmp_path / ABORT_FILE)).exists()
    assert AbortMarker(str(tmp_path)).path == str(tmp_path / ABORT_FILE)  # a directory works too


def test_abort_marker_errors_are_disk_errors(tmp_path):
    with pytest.raises(DiskError) as info:
        AbortMarker(str(tmp_path / ABORT_FILE), FaultyIO({"fsync_dir": errno.EIO})).create()
    assert info.value.cause.errno == errno.EIO
    (tmp_path / ABORT_FILE).touch()
    with pytest.raises(DiskError):
        AbortMarker(str(tmp_path / ABORT_FILE), FaultyIO({"unlink": errno.EROFS})).remove()
    assert (tmp_path / ABORT_FILE).exists()


# -- store lock ---------------------------------------------------------------------------------
def test_lock_writes_pid_and_context_manager(tmp_path):
    path = tmp_path / LOCK_FILE
    with StoreLock(str(path)) as lock:
        assert lock.held
        assert path.read_text().strip() == str(os.getpid())
    assert not lock.held
    lock.release()  # releasing twice is harmless
    assert path.exists()  # never deleted (see StoreLock docstring)


def test_second_lock_in_same_process_fails(tmp_path):
    with StoreLock(str(tmp_path / LOCK_FILE)):
        with pytest.raises(StoreLocked) as info:
            StoreLock(str(tmp_path / LOCK_FILE)).acquire()
        assert str(os.getpid()) in str(info.value)
        assert str(tmp_path) in str(info.value)
    with StoreLock(str(tmp_path)):  # directory form resolves to <dir>/lock
        pass


def test_acquire_twice_on_same_object_is_an_error(tmp_path):
    with StoreLock(str(tmp_path / LOCK_FILE)) as lock:
        with pytest.raises(RuntimeError):
            lock.acquire()


def test_other_process_refused_while_held_then_allowed(tmp_path):
    path = str(tmp_path / LOCK_FILE)
    lock = StoreLock(path)
    lock.acquire()
    try:
        rc, out = _try_lock_in_child(path)
        assert rc == 3
        assert f"pid {os.getpid()}" in out
        assert str(tmp_path) in out
    finally:
        lock.release()
    rc, out = _try_lock_in_child(path)
    assert (rc, out) == (0, "acquired")


def test_held_by_child_process_names_child_pid(tmp_path):
    path = str(tmp_path / LOCK_FILE)
    child = _spawn_holder("""
        import sys
        from store.markers import StoreLock
        lock = StoreLock(sys.argv[1])
        lock.acquire()
        print("locked", flush=True)
        sys.stdin.readline()   # hold until the parent says so
        lock.release()
        print("released", flush=True)
    """, path)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLocked) as info:
            StoreLock(path).acquire()
        assert f"pid {child.pid}" in str(info.value)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "released"
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()
    with StoreLock(path):
        pass


def test_lock_dies_with_killed_holder(tmp_path):
    path = str(tmp_path / LOCK_FILE)
    child = _spawn_holder("""
        import sys
        from store.markers import StoreLock
        StoreLock(sys.argv[1]).acquire()
        print("locked", flush=True)
        sys.stdin.readline()
    """, path)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLocked):
            StoreLock(path).acquire()
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()
    with StoreLock(path):  # no stale lock after a crash
        pass


def test_lock_open_failure_is_disk_error(tmp_path):
    with pytest.raises(DiskError) as info:
        StoreLock(str(tmp_path / LOCK_FILE), FaultyIO({"open": errno.EACCES})).acquire()
    assert info.value.cause.errno == errno.EACCES


def test_lock_write_failure_releases_lock(tmp_path):
    with pytest.raises(DiskError):
        StoreLock(str(tmp_path / LOCK_FILE), FaultyIO({"pwrite": errno.ENOSPC})).acquire()
    with StoreLock(str(tmp_path / LOCK_FILE)):  # the failed attempt did not keep the flock
        pass
