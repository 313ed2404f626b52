"""Admin.ShipToArchive through the CLI: young files ship at an operator's request; a node
without an archive, or one that does not ship in its role, refuses with the reason."""
from __future__ import annotations

import os
import subprocess
import sys

from proto import admin_pb2 as admin_pb

from tests.integration.harness import ROOT, TOKEN, ArchiveServerProcess

FILE = 1 << 20


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})


def fill(node, files: int) -> None:
    sent = 0
    while sent * 2100 < (files + 0.2) * FILE:
        batch = [admin_pb.Message(topic="T", keys=f"k{sent + i}", body=b"y" * 2000)
                 for i in range(50)]
        assert node.admin().send(batch).status == "PUT_OK"
        sent += 50


def test_an_operator_ships_young_files_now(group, tmp_path):
    token = tmp_path / "token"
    token.write_text(TOKEN)
    archive = group.add(ArchiveServerProcess(str(tmp_path), "archive", {}))
    archive.start()
    master = group.master("ASYNC_MASTER", archiveAddress=archive.address)  # ships as a slave
    slave = group.slave(master, 1, archiveAddress=archive.address)
    lone = group.master("ASYNC_MASTER", name="lone")  # no archive at all
    fill(master, 2)

    out = cli("history", "ship", "--address", master.address, "--token-file", str(token))
    assert out.returncode == 1 and "does not ship as ASYNC_MASTER" in out.stdout + out.stderr
    out = cli("history", "ship", "--address", lone.address, "--token-file", str(token))
    assert out.returncode == 1 and "has no archive" in out.stdout + out.stderr

    # the files are young (fileReservedTime 72 h): nothing ships until asked
    holdings = ["history", "holdings", "--archive", archive.address, "--token-file",
                os.path.join(archive.store_dir, "admin.token")]
    assert "broker-a" not in cli(*holdings).stdout
    out = cli("history", "ship", "--address", slave.address, "--token-file", str(token),
              "--wait-ms", "60000")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"archived up to {2 * FILE} of {2 * FILE}: done" in out.stdout
    assert "broker-a      2" in cli(*holdings).stdout
