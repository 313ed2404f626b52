"""Failpoints: the spec format, in-process configuration, and no side effect on import."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

import pytest

from store import failpoints
from store.errors import ConfigError


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
    code = ("from store.failpoints import failpoint\n"
            "failpoint('before')\nprint('reached', flush=True)\nfailpoint('p')\nprint('after')")
    done = run_python(code, "p=kill")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == "reached\n"


def test_importing_reads_nothing_and_the_first_use_reads_the_environment():
    code = ("from store import failpoints\n"
            "print('imported', flush=True)\n"
            "failpoints.should_corrupt('x')\n")
    done = run_python(code, "x=bogus")
    assert done.stdout == "imported\n"
    assert done.returncode != 0 and "ConfigError" in done.stderr
    done = run_python(code + "print(failpoints.should_corrupt('x'))", "x=corrupt_once")
    assert done.returncode == 0 and done.stdout == "imported\nFalse\n"  # the first call fired it


def test_configure_overrides_the_environment():
    code = ("from store import failpoints\n"
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
