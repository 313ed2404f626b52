"""`python -m cluster local --archive`: an archive server beside the local cluster, with a short
retention demo.

The archive listens on base+40 (HTTP JSON on base+41, Prometheus metrics on base+45), keeps its files in <dir>/archive and
announces itself in <dir>/archives.json, which `python -m cluster history` reads by default.
The nodes get small commitlog files (8 MiB) and a retention of zero hours at every hour of the
day, so each file is expired as soon as it is sealed: the slaves ship it, their retention
deletes it once the archive has it, and the master (which does not ship) deletes it at once.
Messages then live on in the archive only: `history query` finds them and `history
reconsume` sends them back.
"""
from __future__ import annotations

import os
import subprocess
from typing import Any

ARCHIVE_PORT_OFFSET = 40
ARCHIVE_DIR = "archive"
REGISTRY_FILE = "archives.json"
DEMO_FILE_BYTES = 8 * 1024 * 1024
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


def archive_address(base_port: int) -> str:
    return f"127.0.0.1:{base_port + ARCHIVE_PORT_OFFSET}"


def node_archive_lines(base_port: int) -> list[str]:
    """What the nodes' configs get with --archive (later lines win over earlier ones)."""
    return [f"archiveAddress={archive_address(base_port)}", "archiveShipIntervalMillis=1000",
            "fileReservedTime=0", f"deleteWhen={EVERY_HOUR}", "cleanResourceInterval=2000",
            f"mappedFileSizeCommitLog={DEMO_FILE_BYTES}"]


def write_archive_config(root: str, base_port: int, secret_file: str,
                         tls_lines: list[str] = (), controller_address: str = "") -> str:
    path = os.path.join(root, "archive.conf")
    store = os.path.abspath(os.path.join(root, ARCHIVE_DIR))
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"listenAddress={archive_address(base_port)}\n"
                f"httpListenAddress=127.0.0.1:{base_port + ARCHIVE_PORT_OFFSET + 1}\n"
                f"archiveStorePath={store}\n"
                f"clusterSecretFile={secret_file}\n"
                f"registryFile={os.path.abspath(os.path.join(root, REGISTRY_FILE))}\n"
                f"cleanResourceInterval=2000\n"
                f"metricsListenAddress=127.0.0.1:{base_port + ARCHIVE_PORT_OFFSET + 5}\n")
        if controller_address:  # it announces its time ranges there too
            f.write(f"controllerAddr={controller_address}\n")
        f.write("".join(line + "\n" for line in tls_lines))
    return path


def start_archive(start: Any, config_path: str, log_path: str,
                  **popen: Any) -> tuple[subprocess.Popen, dict]:
    """`start` is local_cluster's process starter (it reads the ready line)."""
    return start(["archive", "--config", config_path], log_path,
                 f"archive with {config_path}", **popen)
