"""Failpoints: the spec format, in-process configuration, and no side effect on import."""
from __future__ import annotations

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
