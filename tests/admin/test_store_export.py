"""Admin.ExportStore and AdminClient.export_store / `python -m cluster pull`: a copy of a real
node's store directory that the store's own tools open, taken idle and under writes; the bearer
token, argument checks, destination checks, safe paths and no half files on a broken stream."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent import futures

import grpc
import pytest

from cluster.client.admin_client import AdminClient, ExportError, _check_manifest
from cluster.admin.admin_token import BearerTokenInterceptor
from cluster.admin.store_export import (MAX_CHUNK_BYTES, ExportPathError, check_relative_path,
                                  export_path, parse_chunk_bytes, parse_include)
from proto import admin_pb2 as pb
from proto import admin_pb2_grpc as pb_grpc
from store.layout import (ABORT_FILE, ADMIN_TOKEN_FILE, CHECKPOINT_FILE, COMMITLOG_DIR, CONFIG_DIR,
                          LOCK_FILE, TOPICS_FILE)
from tests.integration.harness import (ROOT, TOKEN, Group, Writer, commitlog_bytes, opened_store,
                                       read_queue)
from tests.support.admin import messages
from tests.support.waiting import wait_until

TOPIC = "ExportTopic"
COUNT = 3000
SIZE = 1000  # 3000 records of ~1.1 KB: several 1 MiB commitlog files


# ---------------------------------------------------------------------------------------------
# one real node for the module
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("export"))


@pytest.fixture(scope="module")
def node(workdir):
    group = Group(workdir)
    try:
        m = group.master("ASYNC_MASTER")
        client = m.admin()
        for start in range(0, COUNT, 100):
            r = client.send(messages(TOPIC, 100, start=start, size=SIZE))
            assert r.status == "PUT_OK", (r.status, r.reason)
        top = m.status().max_offset
        wait_until(lambda: m.status().dispatched_offset == top, 20, "dispatched")
        # config/*.json travel, the token never does (this node's token is inline in its config)
        config = os.path.join(m.store_dir, CONFIG_DIR)
        os.makedirs(config, exist_ok=True)
        with open(os.path.join(config, TOPICS_FILE), "w") as f:
            json.dump({"topicConfigTable": {TOPIC: {"topicName": TOPIC}}}, f)
        with open(os.path.join(config, ADMIN_TOKEN_FILE), "w") as f:
            f.write("secret\n")
        yield m
    finally:
        group.close()


def _verify(path: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "store", "verify", path, "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout)


def _all_messages(store, topic: str, queues: int = 4) -> list[tuple[int, int, bytes, str]]:
    get = lambda q, offset: store.get_messages(topic, q, offset, 500).messages  # noqa: E731
    return sorted((q, m.queue_offset, m.body, " ".join(m.keys))
                  for q in range(queues) for m in read_queue(get, q))


def _node_messages(client: AdminClient, topic: str, queues: int = 4) -> list:
    get = lambda q, offset: list(client.get(topic, q, offset, 500).messages)  # noqa: E731
    return sorted((q, m.queue_offset, m.body, m.keys) for q in range(queues)
                  for m in read_queue(get, q))


def _files_under(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                  for d, _, files in os.walk(root) for f in files)


# ---------------------------------------------------------------------------------------------
# export of an idle node
# ---------------------------------------------------------------------------------------------
def test_idle_export_is_a_store_with_the_same_messages(node, workdir):
    dest = os.path.join(workdir, "copy-idle")
    seen = []
    status = node.status()
    with AdminClient(node.address, TOKEN) as client:
        summary = client.export_store(dest, progress=seen.append)
    manifest = summary.manifest
    end = summary.commitlog_end_offset
    assert end == status.max_offset and summary.commitlog_min_offset == 0
    assert summary.bytes == manifest.total_bytes == sum(f.size for f in manifest.files)
    assert summary.files == len(manifest.files) == len(_files_under(dest))
    # progress: monotonic, ends at the total
    assert seen and seen[-1].bytes_done == manifest.total_bytes
    assert all(a.bytes_done <= b.bytes_done for a, b in zip(seen, seen[1:]))
    assert {f.kind for f in manifest.files} >= {"commitlog", "consumequeue", "index", "checkpoint",
                                                "epochFileCheckpoint", "config"}
    # preallocated files: only their written prefix travelled, the copy has the node's length
    cl = [f for f in manifest.files if f.kind == "commitlog"]
    assert len(cl) >= 3 and cl[-1].size == end - int(cl[-1].path.split("/")[1]) < cl[-1].file_length
    assert manifest.total_bytes < end + 25 * 1024 * 1024  # not the 400+ MB preallocated index
    for f in manifest.files:
        assert os.path.getsize(os.path.join(dest, f.path)) == f.file_length
        assert not f.path.startswith("/") and ".." not in f.path.split("/")
    names = _files_under(dest)
    assert f"{CONFIG_DIR}/{TOPICS_FILE}" in names
    assert not [n for n in names if n.endswith(".part") or n in (LOCK_FILE, ABORT_FILE)
                or n.endswith(ADMIN_TOKEN_FILE)]
    # the commitlog bytes are the node's up to the exported end
    assert commitlog_bytes(dest, end) == commitlog_bytes(node.store_dir, end)
    report = _verify(dest)
    # COUNT messages and the topic table's record of TOPIC (Admin SendMessages records it first)
    assert report["commitlog"]["valid_end"] == end and report["commitlog"]["records"] == COUNT + 1
    assert report["consume_queues"]["units_matching_records"] == COUNT + 1
    # the store opens the copy and serves the same messages and keys
    expected = _node_messages(node.admin(), TOPIC)
    assert len(expected) == COUNT
    with opened_store(dest) as store:
        assert store.max_phy_offset() == end
        assert _all_messages(store, TOPIC) == expected
        assert [m.keys for m in store.query_messages(TOPIC, "key-1234")] == [["key-1234"]]


def test_include_selects_parts(node, workdir):
    dest = os.path.join(workdir, "copy-some")
    with AdminClient(node.address, TOKEN) as client:
        summary = client.export_store(dest, include=["checkpoint", "commitlog"],
                                      chunk_bytes=MAX_CHUNK_BYTES)
    assert list(summary.manifest.include) == ["commitlog", "checkpoint"]
    assert {f.kind for f in summary.manifest.files} == {"commitlog", "checkpoint"}
    assert {n.split("/")[0] for n in _files_under(dest)} == {"commitlog", "checkpoint"}
    assert commitlog_bytes(dest, summary.commitlog_end_offset) == \
        commitlog_bytes(node.store_dir, summary.commitlog_end_offset)


# ---------------------------------------------------------------------------------------------
# export while writes go on
# ---------------------------------------------------------------------------------------------
def test_export_under_writes_verifies_up_to_its_end(node, workdir):
    dest = os.path.join(workdir, "copy-busy")
    writer = Writer(node.address, "BusyTopic", batch=20, size=600).start()
    try:
        wait_until(lambda: len(writer.sent) >= 5, 10, "writes going on")
        with AdminClient(node.address, TOKEN) as client:
            summary = client.export_store(dest, chunk_bytes=64 * 1024)
        wait_until(lambda: len(writer.sent) >= 10, 10, "writes after the export")
    finally:
        writer.stop()
    assert not writer.errors and writer.statuses() == {"PUT_OK"}
    end = summary.commitlog_end_offset
    assert node.status().max_offset > end  # the node went on writing during/after the export
    assert commitlog_bytes(dest, end) == commitlog_bytes(node.store_dir, end)
    report = _verify(dest)
    assert report["commitlog"]["valid_end"] == end
    with opened_store(dest) as store:
        assert store.max_phy_offset() == end
        busy = _all_messages(store, "BusyTopic")
        # every busy message in the copy is one the writer sent, in order per queue
        sent = {m.keys: m.body for batch, _ in writer.sent for m in batch}
        assert busy and all(sent[keys] == body for _, _, body, keys in busy)
        assert len(_all_messages(store, TOPIC)) == COUNT


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong"),)])
def test_bad_token_is_unauthenticated_before_any_data(node, metadata):
    with grpc.insecure_channel(node.address) as channel:
        call = pb_grpc.AdminStub(channel).ExportStore(pb.ExportStoreRequest(), metadata=metadata,
                                                      timeout=10)
        received = []
        with pytest.raises(grpc.RpcError) as e:
            for msg in call:
                received.append(msg)
    assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert received == []


def test_bad_token_through_the_client_writes_nothing(node, workdir):
    dest = os.path.join(workdir, "copy-denied")
    with AdminClient(node.address, "wrong-token") as client:
        with pytest.raises(grpc.RpcError) as e:
            client.export_store(dest)
    assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert os.listdir(dest) == []


@pytest.mark.parametrize("request_", [
    pb.ExportStoreRequest(chunk_bytes=-1),
    pb.ExportStoreRequest(chunk_bytes=MAX_CHUNK_BYTES + 1),
    pb.ExportStoreRequest(include=["commitlog", "lock"]),
])
def test_bad_arguments_are_invalid_argument(node, request_):
    with grpc.insecure_channel(node.address) as channel:
        call = pb_grpc.AdminStub(channel).ExportStore(
            request_, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10)
        with pytest.raises(grpc.RpcError) as e:
            list(call)
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_destination_must_be_empty(node, workdir):
    dest = os.path.join(workdir, "not-empty")
    os.makedirs(dest)
    with open(os.path.join(dest, "keep"), "w") as f:
        f.write("x")
    a_file = os.path.join(workdir, "a-file")
    with open(a_file, "w") as f:
        f.write("x")
    with AdminClient(node.address, TOKEN) as client:
        with pytest.raises(ExportError, match="not empty"):
            client.export_store(dest)
        with pytest.raises(ExportError, match="not a directory"):
            client.export_store(a_file)
    assert os.listdir(dest) == ["keep"]


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def test_pull_cli_with_a_cluster_dir(node, workdir):
    cdir = os.path.join(workdir, "cluster-dir")
    os.makedirs(cdir)
    token_file = os.path.join(cdir, ADMIN_TOKEN_FILE)
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    with open(os.path.join(cdir, "cluster.json"), "w") as f:
        json.dump({"token_file": token_file,
                   "nodes": [{"name": "master", "address": node.address}]}, f)
    out = os.path.join(workdir, "copy-cli")
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-m", "cluster", "pull", "--cluster-dir", cdir,
                        "--node", "master", "--out", out, "--include", "commitlog,checkpoint"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "100.0%" in r.stderr and "MB/s" in r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pulled ") and "commitlog [0, " in lines[0]
    assert os.path.isdir(os.path.join(out, COMMITLOG_DIR))
    again = subprocess.run([sys.executable, "-m", "cluster", "pull", "--address", node.address,
                            "--token-file", token_file, "--out", out], cwd=ROOT,
                           capture_output=True, text=True, timeout=60, env=env)
    assert again.returncode == 1 and "not empty" in again.stderr


# ---------------------------------------------------------------------------------------------
# paths, arguments (unit)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("parts", [(), ("",), ("..",), (".",), ("consumequeue", "..", "x"),
                                   ("a/b",), ("/etc",), ("a\\..\\b",), ("a\0",),
                                   ("consumequeue", "..", "..", "etc", "passwd")])
def test_export_path_never_produces_an_unsafe_path(parts):
    with pytest.raises(ExportPathError):
        export_path(*parts)


def test_export_path_of_store_files():
    assert export_path("commitlog", "00000000000001048576") == "commitlog/00000000000001048576"
    assert export_path("consumequeue", "T..x", "3", "00000000000000000000") == \
        "consumequeue/T..x/3/00000000000000000000"


@pytest.mark.parametrize("path", ["", "/abs", "../x", "a/../b", "a//b", "a/", "./a", "a\\b"])
def test_received_paths_are_checked(path):
    with pytest.raises(ExportPathError):
        check_relative_path(path)


def test_every_export_path_is_relative_and_inside(tmp_path):
    alphabet = ["a", ".", "..", "/", "\\", "x.y", "...", "0", "\0", ""]
    import itertools
    for n in (1, 2, 3):
        for parts in itertools.product(alphabet, repeat=n):
            try:
                p = export_path(*parts)
            except ExportPathError:
                continue
            assert not p.startswith("/") and ".." not in p.split("/") and "\\" not in p
            assert check_relative_path(p) == list(parts)
            full = os.path.realpath(os.path.join(tmp_path, *p.split("/")))
            assert full.startswith(str(tmp_path) + os.sep)


def test_client_rejects_a_manifest_with_unsafe_paths():
    for bad in ("../evil", "/etc/passwd", "commitlog/../../x"):
        with pytest.raises(ExportError, match="unsafe"):
            _check_manifest(pb.ExportManifest(files=[pb.ExportFile(path=bad, size=1,
                                                                   file_length=1)], total_bytes=1))


def test_argument_parsing():
    assert parse_chunk_bytes(0) == 1 << 20 and parse_chunk_bytes(MAX_CHUNK_BYTES) == MAX_CHUNK_BYTES
    for bad in (-1, 1, 4095, MAX_CHUNK_BYTES + 1):  # 1: found by the fuzz (a message per byte)
        with pytest.raises(ValueError):
            parse_chunk_bytes(bad)
    assert parse_include([]) == ("commitlog", "consumequeue", "index", "config", "checkpoint",
                                 "epochFileCheckpoint")
    assert parse_include(["index,commitlog"]) == ("commitlog", "index")
    with pytest.raises(ValueError, match="unknown include"):
        parse_include(["../x"])


# ---------------------------------------------------------------------------------------------
# a broken stream (in-process server) leaves no half file; the interceptor guards streams
# ---------------------------------------------------------------------------------------------
class _Broken(pb_grpc.AdminServicer):
    def ExportStore(self, request, context):
        files = [pb.ExportFile(path="checkpoint", size=4, kind="checkpoint", file_length=4),
                 pb.ExportFile(path="commitlog/00000000000000000000", size=8, kind="commitlog",
                               file_length=16)]
        yield pb.ExportChunk(manifest=pb.ExportManifest(files=files, total_bytes=12))
        yield pb.ExportChunk(chunk=pb.FileChunk(path="checkpoint", offset=0, data=b"abcd",
                                                file_done=True, bytes_sent_total=4))
        yield pb.ExportChunk(chunk=pb.FileChunk(path="commitlog/00000000000000000000", offset=0,
                                                data=b"1234", bytes_sent_total=8))
        context.abort(grpc.StatusCode.UNAVAILABLE, "node went away")


@pytest.fixture
def broken_server():
    srv = grpc.server(futures.ThreadPoolExecutor(4), interceptors=[BearerTokenInterceptor("t")])
    pb_grpc.add_AdminServicer_to_server(_Broken(), srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    yield f"127.0.0.1:{port}"
    srv.stop(0)


def test_broken_stream_leaves_no_half_file(broken_server, tmp_path):
    dest = str(tmp_path / "copy")
    with AdminClient(broken_server, "t") as client:
        with pytest.raises(grpc.RpcError) as e:
            client.export_store(dest)
    assert e.value.code() is grpc.StatusCode.UNAVAILABLE
    assert _files_under(dest) == ["checkpoint"]  # complete; the commitlog file is gone
    assert open(os.path.join(dest, CHECKPOINT_FILE), "rb").read() == b"abcd"


def test_interceptor_guards_the_stream_method(broken_server, tmp_path):
    with AdminClient(broken_server, "not-t") as client:
        with pytest.raises(grpc.RpcError) as e:
            client.export_store(str(tmp_path / "copy"))
    assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert os.listdir(tmp_path / "copy") == []


# ---------------------------------------------------------------------------------------------
# an index file exported while keys are added is the index as of its entry count (unit)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_index_file_is_exported_as_of_its_entry_count(tmp_path, chunk):
    from cluster.admin.store_export import _Index
    from store.index.index_file import IndexFile
    from store.layout import index_file_name

    ts = 1_700_000_000_000
    name = index_file_name(ts)
    live = IndexFile(str(tmp_path / name), hash_slot_num=5, index_num=200, create=True)
    keys = [f"T#k{i}" for i in range(13)]
    for i in range(40):
        assert live.put_key(keys[i % 13], 1000 + i * 10, ts + i)
    before = {k: live.select_phy_offsets(k, 100, 0, 2 ** 62) for k in keys}
    src = _Index(f"index/{name}", live.path, 5, 200)
    try:
        for i in range(40, 90):  # every slot gets newer entries while the export runs
            assert live.put_key(keys[i % 13], 1000 + i * 10, ts + i)
            if i == 60:
                head = src.read(0, min(chunk, src.size))
        data = head + b"".join(src.read(pos, min(chunk, src.size - pos))
                               for pos in range(len(head), src.size, chunk))
    finally:
        src.close()
    assert src.size == 40 + 5 * 4 + 41 * 20 and len(data) == src.size
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    with open(copy_dir / name, "wb") as f:
        f.write(data)
        f.truncate(src.file_length)
    copy = IndexFile(str(copy_dir / name), hash_slot_num=5, index_num=200)
    try:
        assert copy.index_count == 41
        assert {k: copy.select_phy_offsets(k, 100, 0, 2 ** 62) for k in keys} == before
    finally:
        copy.close()
        live.close()
