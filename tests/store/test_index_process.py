"""The index in a child process (messageIndexProcessEnable): the worker's protocol in memory,
the pipe's frames and errors, and real child processes under a real store: the same index
files as in one process, a child killed by pid, truncation and retention through the pipe,
and a child that exits with its store process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from common.clock import ManualClock
from store.codec import Message
from store.config import StoreConfig
from store.errors import CorruptFile, CreateFileError, DiskError
from store.index.index_process import IndexProcess
from store.index.index_wire import IndexProcessError, error_reply, ok_value, raise_error
from store.index.index_worker import IndexWorker
from store.layout import INDEX_DIR, index_file_name
from store.message_store import MessageStore
from tests.support.waiting import wait_until

T0 = 1_700_000_000_000
ALL = (0, 2**62)


def config(root, **kw) -> StoreConfig:
    # small index files, so a few hundred messages roll over several of them
    base = dict(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                max_hash_slot_num=16, max_index_num=60, message_index_process_enable=True)
    base.update(kw)
    return StoreConfig(**base)


def msg(i: int) -> Message:
    return Message("Orders", b"m%05d" % i + b"." * 100, i % 4,
                   {"TAGS": "TagA", "KEYS": f"order-{i}", "UNIQ_KEY": f"UNIQ{i:028d}"})


def opened(root, clock, **kw) -> MessageStore:
    s = MessageStore(config(root, **kw), clock=clock)
    s.start()
    return s


def put_all(store: MessageStore, numbers) -> None:
    for i in numbers:
        assert store.put_message(msg(i)).ok
    store.reput.catch_up()


def found(store: MessageStore, i: int) -> list[int]:
    return store.index_service.query("Orders", f"order-{i}", 10, *ALL)


def index_files(root) -> dict[str, bytes]:
    d = os.path.join(str(root), INDEX_DIR)
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


# -- the protocol without I/O ------------------------------------------------------------------

def test_the_worker_answers_each_request_in_memory(tmp_path):
    w = IndexWorker(str(tmp_path / INDEX_DIR), 4, 5)
    assert w.handle(("load", True, 0)) == ("ok", [])
    assert w.handle(("end",)) == ("ok", 0)
    entries = [("T#a", 0, T0), ("T#b", 100, T0), ("T#a", 200, T0 + 1000)]
    assert w.handle(("put", entries, T0)) == ("ok", None)
    assert w.handle(("query", "T", "a", 10, *ALL, None)) == ("ok", [200, 0])
    assert w.handle(("query", "T", "a", 10, *ALL, 200)) == ("ok", [0])
    assert w.handle(("end",)) == ("ok", 200)
    # five entries per file (entry 0 unused): the fifth key rolls over to a second file
    assert w.handle(("put", [("T#c", 300, T0 + 2000), ("T#d", 400, T0 + 3000)], T0 + 5)) \
        == ("ok", None)
    kind, files = w.handle(("files",))
    assert kind == "ok" and [f[1:] for f in files] == [(4, 5), (4, 5)]
    assert w.handle(("flush", True)) == ("ok", T0 + 2000)  # the full file's end
    assert w.handle(("truncate", 300)) == ("ok", 2)  # one entry and one file
    assert w.handle(("query", "T", "c", 10, *ALL, None)) == ("ok", [])
    assert w.handle(("flush", False)) == ("ok", 0)  # no full file left
    assert w.handle(("delete_expired", 10**9, T0 + 10)) == ("ok", 0)  # never the last file
    reply = w.handle(("rename", "x"))
    assert reply[0] == "error" and "unknown index request 'rename'" in reply[2]
    assert w.handle(("close",)) == ("ok", None) and w.closed


def test_the_worker_names_files_by_the_time_each_request_brings(tmp_path):
    w = IndexWorker(str(tmp_path / INDEX_DIR), 4, 50)
    w.handle(("load", True, 0))
    w.handle(("put", [("T#a", 0, T0)], 1_700_000_123_456))
    assert [os.path.basename(f[0]) for f in w.handle(("files",))[1]] \
        == [index_file_name(1_700_000_123_456)]


def test_store_errors_cross_the_pipe_as_their_own_types():
    with pytest.raises(DiskError) as e:
        raise_error(error_reply(DiskError("msync", "/s/index/x", OSError(5, "I/O error"))))
    assert (e.value.operation, e.value.path, e.value.cause.errno) == ("msync", "/s/index/x", 5)
    with pytest.raises(CreateFileError) as c:
        raise_error(error_reply(CreateFileError("/s/index/y", OSError(28, "No space left"))))
    assert c.value.cause.errno == 28 and "/s/index/y" in str(c.value)
    with pytest.raises(CorruptFile, match="has 7 bytes"):
        raise_error(error_reply(CorruptFile("/s/index/z has 7 bytes")))
    with pytest.raises(IndexProcessError, match="ValueError: bad"):
        ok_value(error_reply(ValueError("bad")))
    with pytest.raises(IndexProcessError, match="answered"):
        ok_value(("maybe", 1))


# -- a real child under a real store -----------------------------------------------------------

def test_the_child_writes_the_same_index_files_as_one_process(tmp_path):
    stores = {}
    for name, in_child in (("child", True), ("inline", False)):
        clock = ManualClock(T0)
        s = opened(tmp_path / name, clock, message_index_process_enable=in_child)
        for i in range(300):
            assert s.put_message(msg(i)).ok
            if i % 50 == 49:
                s.reput.catch_up()
                clock.advance(1.0)
        s.reput.catch_up()
        assert all(len(found(s, i)) == 1 for i in (0, 150, 299))
        stores[name] = s
    try:
        child, inline = stores["child"], stores["inline"]
        assert isinstance(child.index_service, IndexProcess)
        assert psutil.Process(child.index_service.pid).ppid() == os.getpid()
        for i in range(300):
            assert found(child, i) == found(inline, i) != []
        assert child.index_service.flush() == inline.index_service.flush() > 0
        a, b = index_files(tmp_path / "child"), index_files(tmp_path / "inline")
        assert len(a) > 3 and a == b  # same names, same bytes
        assert [os.path.basename(f.path) for f in child.index_service.files()] == list(a)
    finally:
        for s in stores.values():
            s.shutdown()
    assert child.index_service.pid is None


def test_a_killed_child_is_restarted_and_replays_what_it_lost(tmp_path):
    s = opened(tmp_path, ManualClock(T0))
    try:
        put_all(s, range(100))
        first = s.index_service.pid
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: psutil.Process(first).status() == psutil.STATUS_ZOMBIE
                   if psutil.pid_exists(first) else True, timeout=10, what="the child to die")
        put_all(s, range(100, 200))  # the next dispatch finds the child gone
        assert s.index_service.restarts == 1 and s.index_service.pid not in (None, first)
        assert not psutil.pid_exists(first)  # reaped
        # The restart loaded the files as after a crash: nothing was flushed, so every file
        # went and the replay from the commitlog rebuilt the first 100 keys.
        assert [i for i in range(200) if len(found(s, i)) != 1] == []
        assert s.writable
    finally:
        s.shutdown()


def test_without_the_replay_a_restart_would_lose_keys(tmp_path):
    """The protection switched off: what the replay prevents does happen."""
    s = opened(tmp_path, ManualClock(T0))
    try:
        s.index_service.replay = None
        put_all(s, range(100))
        os.kill(s.index_service.pid, signal.SIGKILL)
        put_all(s, range(100, 200))
        assert s.index_service.restarts == 1
        assert len([i for i in range(100) if not found(s, i)]) > 50
    finally:
        s.shutdown()


def test_truncation_and_retention_go_through_the_child(tmp_path):
    s = opened(tmp_path, ManualClock(T0))
    try:
        put_all(s, range(200))
        cut = found(s, 150)[0]
        s.truncate(cut)  # what a slave does when its log diverged from the new master's
        assert found(s, 149) != [] and [i for i in range(150, 200) if found(s, i)] == []
        before = len(s.index_service.files())
        assert s.index_service.delete_expired(cut) > 0  # files wholly below the offset
        assert len(s.index_service.files()) < before and found(s, 149) != []
        assert found(s, 0) == []
    finally:
        s.shutdown()


def test_the_child_exits_with_its_store_process_and_the_store_opens_again(tmp_path):
    root = tmp_path / "s"
    script = textwrap.dedent(f"""
        import sys, time
        from store.message_store import MessageStore
        from store.config import StoreConfig
        s = MessageStore(StoreConfig(store_path_root_dir={str(root)!r},
                                     message_index_process_enable=True))
        s.start()
        print(s.index_service.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        assert psutil.Process(child).ppid() == parent.pid
        parent.kill()
        parent.wait()
        # The child sees its input end and exits (it is reparented meanwhile); the store's
        # lock, which the child shares, waits for that instead of refusing the next store.
        s = MessageStore(config(root), clock=ManualClock(T0))
        s.start()
        try:
            assert not psutil.pid_exists(child) or \
                psutil.Process(child).status() == psutil.STATUS_ZOMBIE
            assert s.recovery_report.abnormal
            put_all(s, range(10))
            assert found(s, 3) != []
        finally:
            s.shutdown()
    finally:
        for pid in (parent.pid, child):
            if pid is not None and psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)
        parent.stdout.close()
