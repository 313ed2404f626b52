"""Archives announce their time ranges to the controllers: a real controller process lists an
archive process with the range of the files it received, and `history --controller` finds the
archive's messages through it; an announcement without the cluster secret is refused."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest

from proto import controller_pb2 as cpb
from proto import controller_pb2_grpc as cpb_grpc

from tests.integration.harness import CLUSTER_SECRET, ROOT, ArchiveServerProcess, wait_until
from tests.support.archive import ship_sealed_files


def test_an_archive_is_found_through_the_controller(group, tmp_path):
    controller = group.controller()
    archive = group.add(ArchiveServerProcess(str(tmp_path), "archive", {
        "controllerAddr": controller.address}))
    archive.start()
    ship_sealed_files(tmp_path / "node", archive.address, CLUSTER_SECRET)

    def announced():
        with controller.client() as c:
            listed = c.archives().archives
        return listed and listed[0].groups and listed[0].groups[0].last_store_timestamp > 0
    wait_until(announced, timeout=30)
    with controller.client() as c:
        (a,) = c.archives().archives
    assert a.address == archive.address and a.archive_id == archive.ready["archive_id"]
    assert [g.broker_group for g in a.groups] == ["g"]

    token = os.path.join(str(tmp_path), "admin.token")  # the controller's (harness)
    out = subprocess.run([sys.executable, "-m", "cluster", "history", "query", "--controller",
                          controller.address, "--token-file", token, "--topic", "T", "--key",
                          "k1", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [m["keys"] for m in json.loads(out.stdout)] == ["k1"]

    with grpc.insecure_channel(controller.address) as channel:  # not a member: refused
        with pytest.raises(grpc.RpcError) as e:
            cpb_grpc.ControllerStub(channel).AnnounceArchive(cpb.ArchiveAnnouncement(
                archive_id="x", address="127.0.0.1:1"))
        assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
