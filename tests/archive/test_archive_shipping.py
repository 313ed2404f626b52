"""Shipping to a real archive server on 127.0.0.1: retention waits for the archive, the shipped
files are rebuilt into queues and an index, and the archive answers by key, id and time over
gRPC and HTTP, with a registry entry naming its range."""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import grpc
import pytest

from proto import admin_pb2 as admin_pb
from proto import archive_pb2 as pb
from proto import archive_pb2_grpc as pb_grpc

from cluster.archive.archive_config import ArchiveConfig
from cluster.assembly.archive_process import ArchiveProcess
from cluster.archive.registry import read_registry
from cluster.archive.ship_plan import Verdict
from cluster.archive.shipper import ArchiveShipper, StoreFiles
from cluster.config.shipping_config import ShippingConfig
from cluster.security.member_gate import MemberCredentials
from tests.store.retention_env import NEXT_DAY_0405, NOON, Env

SECRET = "archive-test-secret-0123456789"


@pytest.fixture
def archive(tmp_path):
    config = ArchiveConfig(listen_address="127.0.0.1:0", http_listen_address="127.0.0.1:0",
                           store_path=str(tmp_path / "archive"), cluster_secret=SECRET,
                           registry_file=str(tmp_path / "registry.json"),
                           clean_resource_interval=3600_000)
    process = ArchiveProcess(config)
    process.start()
    yield process
    process.stop()


def shipper_for(env: Env, address: str, **changes) -> ArchiveShipper:
    shipping = ShippingConfig(address=address, ahead_hours=0, **changes)
    s = ArchiveShipper(StoreFiles(env.store), shipping, "g", "g:1", lambda: True,
                       MemberCredentials(SECRET.encode(), "g:1"))
    env.store.archived_up_to = s.released_up_to
    return s


def token_of(process: ArchiveProcess) -> list[tuple[str, str]]:
    with open(process.config.token_path, encoding="utf-8") as fh:
        return [("authorization", f"Bearer {fh.read().strip()}")]


def test_retention_waits_for_the_archive_and_the_archive_answers(tmp_path, archive):
    env = Env(tmp_path / "node")
    appends = env.fill_files(5)
    env.store.reput.catch_up()
    shipper = shipper_for(env, archive.address)
    assert shipper.step() is None  # nothing is due yet: the files are young

    env.clock.set_ms(NEXT_DAY_0405)  # the delete hour, every file expired
    env.ret.trigger_cleanup()
    rnd = env.ret.step()
    assert rnd.deleted == [] and rnd.awaiting_archive  # the archive has none of them
    shipped = []
    while (f := shipper.step()) is not None:
        shipped.append(f.offset)
    sealed = [f.file_from_offset for f in env.store.commitlog.queue.snapshot()][:-1]
    assert shipped == sealed and set(shipper.verdicts.values()) == {Verdict.HELD}
    assert shipper.stats.files == 4 and shipper.stats.ratio > 2  # commitlog bytes compress
    rnd = env.ret.step()
    assert len(rnd.deleted) == 4 and env.store.commitlog.min_offset() == sealed[-1] + 4 * 4096

    archive.archive.index_all()  # what the archive's indexer does after each file
    shipped_end = sealed[-1] + 4 * 4096
    archived = [a for a in appends if a.wrote_offset < shipped_end]
    with grpc.insecure_channel(archive.address) as channel:
        stub = pb_grpc.ArchiveStub(channel)
        meta = token_of(archive)
        held = stub.ListHoldings(pb.HoldingsRequest(), metadata=meta)
        files = held.groups[0].files
        assert [f.file_offset for f in files] == sealed
        assert sum(f.records for f in files) == len(archived)

        first = archived[0]
        r = stub.QueryMessages(pb.ArchiveQueryRequest(query=admin_pb.QueryMessagesRequest(
            topic="T", key="k0")), metadata=meta)
        assert [m.commit_log_offset for m in r.messages] == [first.wrote_offset]
        assert r.messages[0].body == b"x" * 500
        r = stub.QueryMessages(pb.ArchiveQueryRequest(query=admin_pb.QueryMessagesRequest(
            msg_id=first.msg_id)), metadata=meta)
        assert [m.msg_id for m in r.messages] == [first.msg_id]
        r = stub.QueryMessages(pb.ArchiveQueryRequest(broker_group="g",
                                                      query=admin_pb.QueryMessagesRequest(
                                                          topic="T", begin_timestamp_ms=1,
                                                          max_count=1024, omit_body=True)),
                               metadata=meta)
        assert [m.commit_log_offset for m in r.messages] == [a.wrote_offset for a in archived]

        with pytest.raises(grpc.RpcError) as e:  # the reads need the archive's token
            stub.ListHoldings(pb.HoldingsRequest())
        assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as e:  # shipping needs the cluster secret
            stub.FileStatus(pb.FileStatusRequest(broker_group="g", file_offset=0))
        assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED

    url = f"http://{archive.http_address}/api/messages?topic=T&key=k1"
    req = urllib.request.Request(url, headers=dict(token_of(archive)))
    with urllib.request.urlopen(req, timeout=5) as resp:
        body = json.load(resp)
    assert [int(m["commit_log_offset"]) for m in body["messages"]] == [archived[1].wrote_offset]
    base, auth = f"http://{archive.http_address}", dict(token_of(archive))

    def http_status(path: str, body: bytes | None = None, headers=auth) -> int:
        r = urllib.request.Request(base + path, data=body, headers=headers)
        try:
            with urllib.request.urlopen(r, timeout=5) as resp:
                return resp.status
        except urllib.error.HTTPError as e:
            return e.code
    assert http_status("/api/holdings", headers={}) == 401
    assert http_status("/api/holdings?group=../etc") == 400
    assert http_status("/api/messages?key=k1") == 400  # a key lookup needs the topic
    assert http_status("/api/messages?topic=T&begin=soon") == 400
    assert http_status("/api/reconsume", b'{"msg_ids": ["x"]}') == 400  # no cluster_address
    assert http_status("/api/reconsume", b"not json") == 400

    archive.announce()
    (entry,) = read_registry(archive.config.registry_file)
    first_ts, last_ts = entry.groups["g"]
    assert entry.address == archive.address and first_ts <= last_ts
    assert entry.may_hold("g", first_ts, first_ts) and not entry.may_hold("other", 0, 2 ** 62)
    env.store.shutdown()


def test_a_shipped_file_is_acknowledged_once_and_a_different_one_refused(tmp_path, archive):
    env = Env(tmp_path / "node")
    env.fill_files(3)
    shipper = shipper_for(env, archive.address, ship_all=True)
    assert shipper.step() is not None
    again = shipper_for(env, archive.address, ship_all=True)  # a restarted node: no verdicts
    f = again.step()
    assert f is not None and again.verdicts[f.offset] is Verdict.HELD
    assert again.stats.files == 0  # held already: nothing crossed the wire

    other = Env(tmp_path / "other", start_ms=NOON + 1000)  # another history, same group
    other.fill_files(2)
    stranger = shipper_for(other, archive.address, ship_all=True)
    f = stranger.step()
    assert stranger.verdicts[f.offset] is Verdict.REFUSED and stranger.stats.refused == 1
    g = archive.archive.group("g")
    assert [e.offset for e in g.entries] == [0]
    assert not os.path.exists(os.path.join(g.paths.commitlog_dir, "00000000000000000000.part"))
    env.store.shutdown()
    other.store.shutdown()
