"""A real etcd for tests: one member on free 127.0.0.1 ports, its data in a tmp folder, killed
by pid at the end. Tests that need it skip (with the reason) when no `etcd` is on PATH:
scripts/setup installs Debian's etcd-server when it can.

    with EtcdServer(root) as etcd:      # or the `etcd` fixture (tests/conftest.py)
        client = etcd.client()          # cluster.controller.etcd_client.EtcdClient
        etcd.url                        # http://127.0.0.1:<port>, for controllerEtcdEndpoints
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from cluster.controller.etcd_client import EtcdClient, EtcdError
from tests.support.waiting import free_port

ETCD = "etcd"
NO_ETCD = "no etcd on PATH (Debian: apt-get install etcd-server; scripts/setup does it as root)"


def require_etcd() -> str:
    """The etcd binary, or skip the test saying why."""
    path = shutil.which(ETCD)
    if path is None:
        pytest.skip(NO_ETCD)
    return path


class EtcdServer:
    """Owns one etcd process (by pid) and its data folder under `root`."""

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(root, "etcd.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def client(self, timeout_s: float = 2.0) -> EtcdClient:
        return EtcdClient([self.url], timeout_s)

    def start(self, timeout: float = 20.0) -> "EtcdServer":
        binary = require_etcd()
        peer = f"http://127.0.0.1:{self.peer_port}"
        data = os.path.join(self.root, "etcd-data")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [binary, "--name", "default", "--data-dir", data,
                 "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"default={peer}"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        probe = EtcdClient([self.url], 0.5)
        while True:
            try:
                probe.range(b"/health-probe")  # answers once the member has a leader
                return self
            except EtcdError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"etcd did not start; log:\n{self.log_tail()}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def __enter__(self) -> "EtcdServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
