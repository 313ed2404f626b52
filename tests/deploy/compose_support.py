"""What the compose tests share: why they must skip here (no Docker, the daemon silent, the
cluster's host ports taken) and the image build they run first."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

from cluster.drills.compose_cluster import compose_command

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
# deploy/docker-compose.yml publishes these
HOST_PORTS = (9876, 9877, 9886, 9887, 10911, 10921, 10931, 10916, 10926, 10936, 11011, 11021,
              11031, 11016, 11026, 11036, 9880, 9881, 9885, 9090)


def _port_free(port: int) -> bool:
    """No listener on 127.0.0.1:port. SO_REUSEADDR: connections of an earlier test to the port
    linger in TIME_WAIT for a minute after its cluster went down, and would otherwise make a
    free port look taken (docker-proxy binds with it too)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def skip_reason() -> str | None:
    """Why a compose test cannot run on this machine, None when it can."""
    if compose_command() is None:
        return "needs Docker and docker compose (or docker-compose)"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "the Docker daemon does not answer (docker info failed)"
    busy = [p for p in HOST_PORTS if not _port_free(p)]
    if busy:
        return f"host ports {busy} are taken (a compose cluster or 'cluster local' running?)"
    return None


def build_images() -> None:
    """deploy/build: seconds with the base images cached (only the code layers), ~2.5 min
    cold (debootstrap)."""
    build = subprocess.run([os.path.join(DEPLOY, "build"), "--python", sys.executable],
                           cwd=REPO, capture_output=True, text=True, timeout=540)
    assert build.returncode == 0, f"deploy/build failed:\n{build.stdout}{build.stderr}"
