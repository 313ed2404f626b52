"""Failpoints: the spec format, in-process configuration, no side effect on import, and the
fileio.write failpoint that turns FileIO's write side read-only."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from typing import Callable

import pytest

from common import failpoints
from common.config_values import ConfigError
from store.commitlog.fileio import WRITE_FAILPOINT, FileIO
from tests.faults import FaultyFileIO


@pytest.fixture(autouse=True)
def disarmed():
    failpoints.configure("")
    yield
    failpoints.configure("")


def run_python(code: str, spec: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
    if spec is not None:
        env[failpoints.ENV] = spec
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)


def test_parse_reads_the_env_format():
    assert failpoints.parse(" a.b=kill , c=corrupt_once,,") == {"a.b": "kill", "c": "corrupt_once"}
    assert failpoints.parse("") == {}


@pytest.mark.parametrize("spec", ["a=explode", "a", "a=kill,b="])
def test_unknown_actions_are_config_errors(spec):
    with pytest.raises(ConfigError, match="RMQSTORE_FAILPOINTS: unknown action"):
        failpoints.configure(spec)


def test_corrupt_once_fires_exactly_once():
    failpoints.configure("x=corrupt_once,y=kill")
    assert not failpoints.should_corrupt("y") and not failpoints.should_corrupt("z")
    assert failpoints.should_corrupt("x")
    assert not failpoints.should_corrupt("x")
    failpoints.configure("x=corrupt_once")  # configuring again arms it again
    assert failpoints.should_corrupt("x")


def test_unarmed_failpoint_does_nothing():
    failpoints.configure("other=kill")
    failpoints.failpoint("here")  # still alive


def test_kill_sigkills_the_process_at_the_failpoint():
    code = ("from common.failpoints import failpoint\n"
            "failpoint('before')\nprint('reached', flush=True)\nfailpoint('p')\nprint('after')")
    done = run_python(code, "p=kill")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == "reached\n"


def test_importing_reads_nothing_and_the_first_use_reads_the_environment():
    code = ("from common import failpoints\n"
            "print('imported', flush=True)\n"
            "failpoints.should_corrupt('x')\n")
    done = run_python(code, "x=bogus")
    assert done.stdout == "imported\n"
    assert done.returncode != 0 and "ConfigError" in done.stderr
    done = run_python(code + "print(failpoints.should_corrupt('x'))", "x=corrupt_once")
    assert done.returncode == 0 and done.stdout == "imported\nFalse\n"  # the first call fired it


def test_configure_overrides_the_environment():
    code = ("from common import failpoints\n"
            "failpoints.configure('p=corrupt_once')\n"
            "failpoints.failpoint('p')\n"
            "print(failpoints.should_corrupt('p'))")
    done = run_python(code, "p=kill")
    assert done.returncode == 0 and done.stdout == "True\n"


# -- fail_while:<path> ----------------------------------------------------------------------------
def test_parse_keeps_the_fail_while_trigger_path():
    assert failpoints.parse("fileio.write=fail_while:/tmp/x/readonly,k=kill") == {
        "fileio.write": "fail_while:/tmp/x/readonly", "k": "kill"}


@pytest.mark.parametrize("item", ["w=fail_while:relative/readonly", "w=fail_while:"])
def test_fail_while_needs_an_absolute_path(item):
    with pytest.raises(ConfigError, match=f"RMQSTORE_FAILPOINTS: '{item}': fail_while needs an "
                                          "absolute trigger path"):
        failpoints.configure(f"k=kill,{item}")


def test_io_failure_raises_erofs_only_while_the_trigger_exists(tmp_path):
    trigger = tmp_path / "readonly"
    failpoints.configure(f"fileio.write=fail_while:{trigger}")
    failpoints.io_failure("fileio.write", "/store/commitlog/0")  # no trigger yet: nothing
    trigger.touch()
    with pytest.raises(OSError) as raised:
        failpoints.io_failure("fileio.write", "/store/commitlog/0")
    assert raised.value.errno == errno.EROFS
    assert raised.value.strerror == "Read-only file system (failpoint fileio.write)"
    assert raised.value.filename == "/store/commitlog/0"
    failpoints.io_failure("other", "/store/commitlog/0")  # another name is not armed
    trigger.unlink()
    failpoints.io_failure("fileio.write", "/store/commitlog/0")  # removed: writable again


def test_io_failure_ignores_failpoints_of_other_actions(tmp_path):
    failpoints.configure("fileio.write=corrupt_once")
    failpoints.io_failure("fileio.write", "/p")
    assert failpoints.should_corrupt("fileio.write")  # and did not fire it


# -- the fileio.write failpoint in FileIO ----------------------------------------------------------
def _write_ops(io: FileIO, d: str, fd: int, mm) -> dict[str, Callable[[], object]]:
    """One call of every write-side FileIO operation on the file `d`/f (open as `fd`, mapped
    as `mm`)."""
    f = os.path.join(d, "f")
    return {
        "open_rw": lambda: io.open_rw(os.path.join(d, "g")),
        "preallocate": lambda: io.preallocate(fd, 8192, f),
        "truncate": lambda: io.truncate(fd, 4096, f),
        "map": lambda: io.map(fd, 4096, f),
        "pwrite": lambda: io.pwrite(fd, b"x", 0, f),
        "msync": lambda: io.msync(mm, 0, 1, f),
        "fdatasync": lambda: io.fdatasync(fd, f),
        "fsync": lambda: io.fsync(fd, f),
        "zero_range": lambda: io.zero_range(fd, 0, 10, f),
        "makedirs": lambda: io.makedirs(os.path.join(d, "sub")),
        "fsync_dir": lambda: io.fsync_dir(d),
        "unlink": lambda: io.unlink(f),
        "rename": lambda: io.rename(f, os.path.join(d, "h")),  # checked on the destination
        "write_file_atomic": lambda: io.write_file_atomic(os.path.join(d, "a"), b"new"),
    }


@pytest.mark.parametrize("io_class", [FileIO, FaultyFileIO])
def test_every_write_side_fileio_operation_fails_with_erofs_while_triggered(tmp_path, io_class):
    """FaultyFileIO overrides `_check`: the failpoint must hold for such subclasses too."""
    trigger = tmp_path / "readonly"
    d = tmp_path / "store"
    d.mkdir()
    (d / "f").write_bytes(b"\0" * 4096)
    (d / "a").write_bytes(b"old")
    failpoints.configure(f"{WRITE_FAILPOINT}=fail_while:{trigger}")
    io = io_class()
    fd = io.open_rw(str(d / "f"))
    mm = io.map(fd, 4096, str(d / "f"))
    try:
        trigger.touch()
        for name, call in _write_ops(io, str(d), fd, mm).items():
            with pytest.raises(OSError) as raised:
                call()
            assert raised.value.errno == errno.EROFS, name
        # Reads go on: a read-only file system still serves the data.
        assert io.read_file(str(d / "a")) == b"old"
        assert io.pread(fd, 4, 0, str(d / "f")) == bytes(4)
        io.map(fd, 4096, str(d / "f"), writable=False).close()
        assert sorted(os.listdir(d)) == ["a", "f"]  # nothing was written
        trigger.unlink()  # the trigger is gone: writable again
        io.msync(mm, 0, 1, str(d / "f"))
        io.write_file_atomic(str(d / "a"), b"new")
        assert (d / "a").read_bytes() == b"new"
    finally:
        mm.close()
        io.close(fd)


def test_a_subclass_fault_still_fires_with_the_failpoint_armed(tmp_path):
    failpoints.configure(f"{WRITE_FAILPOINT}=fail_while:{tmp_path / 'absent'}")
    io = FaultyFileIO()
    io.fail("fsync", errno.EIO)
    fd = io.open_rw(str(tmp_path / "f"))
    try:
        with pytest.raises(OSError) as raised:
            io.fsync(fd, str(tmp_path / "f"))
        assert raised.value.errno == errno.EIO
    finally:
        io.close(fd)


def test_every_fires_on_each_nth_call():
    failpoints.configure("drop=every:3,x=kill")
    fired = [failpoints.should_fire("drop") for _ in range(7)]
    assert fired == [False, False, True, False, False, True, False]
    assert not failpoints.should_fire("x") and not failpoints.should_fire("unarmed")


@pytest.mark.parametrize("item", ["d=every:", "d=every:0", "d=every:-2", "d=every:x"])
def test_every_needs_a_positive_count(item):
    with pytest.raises(ConfigError, match="every needs a whole number"):
        failpoints.configure(item)
