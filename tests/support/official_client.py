"""The official RocketMQ 5 Python client (rocketmq-python-client, a declared test dependency)
driven by a tool script in a subprocess: its generated modules register the v2 schema under
other file names than ours, so it never runs in the test process. Its HOME is a folder of the
test, because the client writes ~/logs."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from typing import Iterator

import pytest

VERSION = "5.1.2"


def run_tool(tool: str, request: dict, home: str, timeout: float = 120,
             env: dict[str, str] | None = None) -> dict:
    """Run `tool` with `request` as JSON on stdin; its JSON answer (its client_version checked).
    `env`: more environment variables (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH for a TLS node)."""
    env = {**os.environ, **(env or {}), "HOME": home}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, tool], input=json.dumps(request), capture_output=True,
                          text=True, env=env, timeout=timeout)
    if proc.returncode != 0 and "No module named 'rocketmq'" in proc.stderr:
        pytest.fail(f"rocketmq-python-client=={VERSION} is a declared test dependency "
                    f"(pip install -e '.[test]') but could not be imported:\n{proc.stderr}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    assert out["client_version"] == VERSION
    return out


@contextlib.contextmanager
def client_home(path: str) -> Iterator[str]:
    """Create `path` as the client's HOME; afterwards print the last ERROR lines of its log
    (shown when the test fails)."""
    os.makedirs(path)
    try:
        yield path
    finally:
        log = os.path.join(path, "logs", "rocketmq_python", "rocketmq_client.log")
        if os.path.exists(log):
            with open(log, encoding="utf-8", errors="replace") as f:
                errors = [line for line in f if "ERROR" in line]
            print("".join(errors[-20:]))
