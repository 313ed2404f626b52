"""Recovery: torn and flipped tails, kill -9 of a writer, crashes during truncation, file
creation and checkpoint writes."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from common.clock import ManualClock
from store.codec import Message
from store.config import StoreConfig
from store.layout import ABORT_FILE, CHECKPOINT_FILE, COMMITLOG_DIR
from store.message_store import MessageStore
from tests.faults import EIO, FaultyFileIO

FILE = 8 * 1024


def config(root, **kw) -> StoreConfig:
    base = dict(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE,
                mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=256)
    base.update(kw)
    return StoreConfig(**base)


def msg(i: int, qid: int = 0) -> Message:
    return Message("Rec", b"body-%04d-" % i + bytes(range(256))[: 60 + i % 50], qid,
                   {"TAGS": "t", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i:031d}"})


def fill(root, n: int, **kw) -> list:
    s = MessageStore(config(root, **kw), clock=ManualClock())
    s.start()
    res = [s.put_message(msg(i, i % 2)) for i in range(n)]
    s.shutdown()
    return res


def reopen(root, **kw) -> MessageStore:
    s = MessageStore(config(root, **kw), clock=ManualClock())
    s.start()
    s.reput.catch_up()
    return s


def read_queue(s: MessageStore, topic: str, qid: int) -> list:
    """Every message of a queue, paging like a consumer."""
    out = []
    offset = s.min_offset_in_queue(topic, qid)
    while True:
        got = s.get_messages(topic, qid, offset, 64)
        if not got.messages:
            return out
        out.extend(got.messages)
        offset = got.next_begin_offset


def queue_bodies(s: MessageStore, qid: int) -> list[bytes]:
    return [m.body for m in read_queue(s, "Rec", qid)]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("template")
    results = fill(root, 120)
    return root, results


def last_file(root) -> str:
    d = os.path.join(root, COMMITLOG_DIR)
    return os.path.join(d, sorted(os.listdir(d))[-1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut_back=st.integers(1, 600), flip=st.booleans(), bit=st.integers(0, 7))
def test_damaged_tail_is_cut_at_the_last_valid_record(template, tmp_path_factory, cut_back, flip, bit):
    src, results = template
    root = tmp_path_factory.mktemp("case")
    shutil.copytree(src, root, dirs_exist_ok=True)
    open(os.path.join(root, ABORT_FILE), "w").close()  # as after a crash
    end = results[-1].append.end_offset
    target = end - cut_back
    path = last_file(root)
    base = int(os.path.basename(path))
    if target < base:
        target = base + 1
    with open(path, "r+b") as f:
        if flip:
            f.seek(target - base)
            b = f.read(1)
            f.seek(target - base)
            f.write(bytes([b[0] ^ (1 << bit)]))
        else:  # a torn write: the tail never reached the disk
            f.seek(target - base)
            f.write(bytes(end - target))
    s = reopen(root)
    try:
        assert s.recovery_report.abnormal
        damaged = next(i for i, r in enumerate(results) if r.append.end_offset > target)
        new_end = s.max_phy_offset()
        survivors = [r for r in results if r.append.end_offset <= new_end]
        if flip:  # a flip outside the CRC-covered body may go unnoticed, as in RocketMQ
            assert len(survivors) in (damaged, len(results))
        else:
            assert len(survivors) == damaged and new_end == results[damaged].append.wrote_offset
        for qid in (0, 1):
            bodies = queue_bodies(s, qid)
            expected = [msg(i, qid).body for i in range(damaged) if i % 2 == qid]
            assert bodies[:len(expected)] == expected
            if not flip:
                assert bodies == expected
        # writing goes on at the new end with contiguous queue offsets
        before = s.max_offset_in_queue("Rec", 0)
        r = s.put_message(msg(999, 0))
        assert r.ok and (r.append.wrote_offset == new_end or r.append.wrote_offset % FILE == 0)
        assert r.append.queue_offset == before
        s.reput.catch_up()
        assert s.get_messages("Rec", 0, r.append.queue_offset, 1).messages[0].body == msg(999).body
    finally:
        s.shutdown()


def test_crash_during_truncation_never_brings_back_the_tail(tmp_path):
    root = tmp_path / "s"
    results = fill(root, 120)
    cut = next(r.append.wrote_offset for r in results[30:] if r.append.wrote_offset % FILE)
    io = FaultyFileIO()
    s = MessageStore(config(root), io=io, clock=ManualClock())
    s.load()
    io.fail("unlink", EIO)  # "crash" after the zeroing, before later files are deleted
    with pytest.raises(Exception):
        s.truncate(cut)
    s.shutdown()
    open(os.path.join(root, ABORT_FILE), "w").close()
    s = reopen(root)
    try:
        assert s.max_phy_offset() == cut
        assert sorted(int(n) for n in os.listdir(root / COMMITLOG_DIR))[-1] <= cut
        kept = [r for r in results if r.append.end_offset <= cut]
        assert len(queue_bodies(s, 0)) + len(queue_bodies(s, 1)) == len(kept)
    finally:
        s.shutdown()


def test_crash_during_file_creation_is_removed_on_load(tmp_path):
    root = tmp_path / "s"
    results = fill(root, 40)
    last = last_file(root)
    nxt = os.path.join(os.path.dirname(last), f"{int(os.path.basename(last)) + FILE:020d}")
    with open(nxt, "wb") as f:
        f.write(b"\0" * 100)  # preallocation never finished
    s = reopen(root)
    try:
        assert not os.path.exists(nxt)
        assert s.max_phy_offset() == results[-1].append.end_offset
        assert any("interrupted file creation" in n for n in s.recovery_report.notes)
    finally:
        s.shutdown()


def test_crash_during_checkpoint_write(tmp_path):
    root = tmp_path / "s"
    results = fill(root, 40)
    with open(root / "checkpoint.tmp", "wb") as f:
        f.write(b"\x01" * 77)  # a torn temporary file from the interrupted write
    with open(root / CHECKPOINT_FILE, "r+b") as f:
        f.truncate(1000)  # and, worse, a damaged checkpoint
    s = reopen(root)
    try:
        assert s.recovery_report.abnormal  # no trustworthy checkpoint: scan everything
        assert s.max_phy_offset() == results[-1].append.end_offset
        assert len(queue_bodies(s, 0)) == 20 and len(queue_bodies(s, 1)) == 20
    finally:
        s.shutdown()


def test_consume_queues_and_index_lose_entries_past_the_end(tmp_path):
    root = tmp_path / "s"
    results = fill(root, 60)
    cut = results[40].append.wrote_offset
    path = last_file(root)
    base = int(os.path.basename(path))
    assert cut >= base
    with open(path, "r+b") as f:
        f.seek(cut - base)
        f.write(b"\xff" * 16)  # corrupt the header of record 40
    open(root / ABORT_FILE, "w").close()
    s = reopen(root)
    try:
        assert s.max_phy_offset() == cut
        assert s.max_offset_in_queue("Rec", 0) == 20 and s.max_offset_in_queue("Rec", 1) == 20
        assert s.query_messages("Rec", "k45") == []
        assert [m.body for m in s.query_messages("Rec", "k39")] == [msg(39).body]
    finally:
        s.shutdown()


WRITER = textwrap.dedent("""
    import sys
    from store.codec import Message
    from store.config import StoreConfig
    from store.message_store import MessageStore
    root = sys.argv[1]
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                      mapped_file_size_consume_queue=20 * 1024, flush_disk_type="SYNC_FLUSH",
                      max_hash_slot_num=64, max_index_num=4096)
    s = MessageStore(cfg)
    s.start()
    i = 0
    while True:
        r = s.put_message(Message("Crash", b"ack-%08d" % i + b"." * 300, i % 3,
                                  {"KEYS": "k%d" % i}))
        if r.ok:
            print(i, r.append.queue_offset, flush=True)
        i += 1
""")


def test_kill_9_of_a_sync_flush_writer_loses_no_acknowledged_put(tmp_path):
    root = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE,
                            text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    acked: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 1500 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked.append(int(line.split()[0]))
        os.kill(proc.pid, signal.SIGKILL)  # in the middle of the stream
    finally:
        proc.wait(10)
        proc.stdout.close()
    assert len(acked) >= 1500
    s = MessageStore(StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                                 mapped_file_size_consume_queue=20 * 1024, flush_disk_type="SYNC_FLUSH",
                                 max_hash_slot_num=64, max_index_num=4096))
    s.start()
    try:
        assert s.recovery_report.abnormal
        s.reput.catch_up()
        present = set()
        for q in range(3):
            got = read_queue(s, "Crash", q)
            offsets = [m.queue_offset for m in got]
            assert offsets == list(range(len(offsets)))  # contiguous after recovery
            present.update(int(m.body[4:12]) for m in got)
        missing = [i for i in acked if i not in present]
        assert missing == []
    finally:
        s.shutdown()


def test_normal_restart_does_not_rescan_everything(tmp_path):
    root = tmp_path / "s"
    fill(root, 200)
    s = reopen(root)
    try:
        rep = s.recovery_report
        assert not rep.abnormal and rep.start_offset > 0 and rep.cut_bytes >= 0
    finally:
        s.shutdown()


@pytest.mark.parametrize("index_safe", [True, False])
def test_a_crash_loses_no_index_entry_older_than_the_checkpoint_says(tmp_path, index_safe):
    """After a kill the index files newer than the checkpoint's indexMsgTimestamp are deleted
    (their unflushed pages may be torn) and recovery re-dispatches from that stamp when
    messageIndexSafe is on. So the stamp may only cover files that will survive: a sealed
    file, never the one still written (RocketMQ sets it when a file fills). Without
    messageIndexSafe the current file's entries are RocketMQ's known gap."""
    clock = ManualClock()
    root = tmp_path / "node"
    # 4 KiB commitlog files hold about 20 records; an index file 100 messages (two keys each)
    kw = dict(message_index_safe=index_safe, mapped_file_size_commit_log=4096,
              max_hash_slot_num=64, max_index_num=200)
    s = MessageStore(config(root, **kw), clock=clock)
    s.start()
    try:
        for i in range(150):  # the first index file seals at 100; the second is written
            assert s.put_message(msg(i)).ok
            clock.advance(1)
        s.reput.catch_up()
        s.logics_flush.step(thorough=True)  # the flush the service makes every second
        clock.advance(60)
        for i in range(150, 160):  # indexed after that flush, then the process dies
            assert s.put_message(msg(i)).ok
        s.reput.catch_up()
        crashed = tmp_path / "crashed"
        shutil.copytree(root, crashed)  # a kill leaves the page cache: the files as mapped
    finally:
        s.shutdown()
    assert os.path.exists(crashed / ABORT_FILE)
    s = reopen(crashed, **kw)
    try:
        assert s.recovery_report.abnormal
        found = {i for i in range(160) if s.query_messages("Rec", f"k{i}")}
        assert set(range(99)) <= found, sorted(set(range(99)) - found)  # the sealed file survives
        if index_safe:
            assert found == set(range(160)), sorted(set(range(160)) - found)
    finally:
        s.shutdown()
