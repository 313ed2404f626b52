"""Replication between real node processes on 127.0.0.1: durability of acknowledged writes,
catch-up of slaves (live, restarted and new), and reads served by slaves.

Every node is a `python -m cluster node` process; the `group` fixture reaps them by pid."""
from __future__ import annotations

import os
import re
import threading

from store.layout import ABORT_FILE

from .harness import (FAST_HA, Writer, commitlog_bytes, commitlog_files, cq_units, in_sync,
                      messages, opened_store, read_queue, wait_until)

TOPIC = "RepTopic"
QUEUES = 4
SLAVE_IDS = {"broker-a:1", "broker-a:2"}


def converged(master, *slaves):
    def check() -> bool:
        top = master.status().max_offset
        return all(s.status().max_offset == top for s in slaves)
    return check


def store_messages_by_queue(store, topic: str, queues: int = QUEUES) -> dict[tuple[int, int], object]:
    out = {}
    for q in range(queues):
        def get(queue_id, offset):
            return store.get_messages(topic, queue_id, offset, 64).messages
        for rec in read_queue(get, q):
            out[(rec.queue_id, rec.queue_offset)] = rec
    return out


def node_messages_by_queue(node, topic: str, queues: int = QUEUES) -> dict[tuple[int, int], object]:
    client = node.admin()
    out = {}
    for q in range(queues):
        def get(queue_id, offset):
            return list(client.get(topic, queue_id, offset, 64).messages)
        for m in read_queue(get, q):
            out[(m.queue_id, m.queue_offset)] = m
    return out


# -- 1 --------------------------------------------------------------------------------------------
def test_sync_master_acked_writes_survive_master_kill(group):
    """SYNC_MASTER + 2 slaves, allAckInSyncStateSet: every PUT_OK is on every in-sync slave,
    byte for byte, and in its rebuilt consume queues, even when the master is SIGKILLed
    right after the last acknowledgement."""
    m = group.master("SYNC_MASTER", allAckInSyncStateSet="true", **FAST_HA)
    slaves = [group.slave(m, 1, **FAST_HA), group.slave(m, 2, **FAST_HA)]
    wait_until(in_sync(m, 2), 20, "both slaves in sync")

    acked: dict[tuple[int, int], object] = {}
    client = m.admin()
    for b in range(100):
        batch = messages(TOPIC, 20, start=b * 20, queues=QUEUES)
        r = client.send(batch)
        assert r.status == "PUT_OK", (b, r.status, r.reason)
        assert len(r.results) == len(batch)
        for msg, res in zip(batch, r.results):
            assert res.queue_id == msg.queue_id
            acked[(res.queue_id, res.queue_offset)] = (msg, res.commit_log_offset)
    st = m.status()  # one writer: the max offset is the end of the last acknowledged batch
    m.kill()
    last_end = st.max_offset
    assert len(acked) == 2000
    assert set(st.in_sync_set) == SLAVE_IDS, st
    master_log = commitlog_bytes(m.store_dir, last_end)
    assert len(master_log) == last_end

    for s in slaves:
        assert s.stop() == 0
        assert not os.path.exists(os.path.join(s.store_dir, ABORT_FILE))
        assert commitlog_bytes(s.store_dir, last_end) == master_log, f"{s.name} commitlog differs"
        # Restart the slave's store (standalone: it dispatches everything it holds) and look
        # up every acknowledged message through its rebuilt consume queues and index.
        with opened_store(s.store_dir, copy=False) as store:
            assert store.max_phy_offset() >= last_end
            found = store_messages_by_queue(store, TOPIC)
            for (q, qo), (msg, phy) in acked.items():
                rec = found.get((q, qo))
                assert rec is not None, f"{s.name}: acked message {q}/{qo} missing"
                assert (rec.body, rec.keys, rec.physical_offset) == (msg.body, [msg.keys], phy)
            for i in range(0, 2000, 97):
                hits = store.query_messages(TOPIC, f"key-{i}")
                assert [h.body for h in hits] == [messages(TOPIC, 1, start=i)[0].body]
        # Consume queue files: the master's dispatched units are a prefix of the slave's.
        for q in range(QUEUES):
            master_units = cq_units(m.store_dir, TOPIC, q)
            slave_units = cq_units(s.store_dir, TOPIC, q)
            n_acked = sum(1 for (qq, _) in acked if qq == q)
            assert len(slave_units) == 20 * n_acked, (s.name, q, len(slave_units) // 20, n_acked)
            dispatched_on_master = sum(1 for (qq, _), (_, phy) in acked.items()
                                       if qq == q and phy < st.dispatched_offset)
            assert len(master_units) >= 20 * dispatched_on_master
            assert slave_units[:len(master_units)] == master_units, f"{s.name} queue {q} differs"


# -- 2 --------------------------------------------------------------------------------------------
def test_async_master_slaves_converge_after_load(group):
    # 5000-byte chunks cut ~1.1 KiB records in the middle: acks and confirm offsets fall
    # mid-record, and every node must still dispatch exactly the complete records.
    m = group.master("ASYNC_MASTER", haTransferBatchSize="5000", **FAST_HA)
    slaves = [group.slave(m, 1, **FAST_HA), group.slave(m, 2, **FAST_HA)]
    writer = Writer(m.address, TOPIC, size=1024).start()
    wait_until(lambda: m.status().max_offset > 2 * 1024 * 1024, 60, "2 MiB written")
    writer.stop()
    assert not writer.errors and writer.statuses() == {"PUT_OK"}, (writer.errors, writer.statuses())
    wait_until(converged(m, *slaves), 30, "slaves at the master's max offset")
    top = m.status().max_offset
    master_log = commitlog_bytes(m.store_dir, top)
    assert len(commitlog_files(m.store_dir)) >= 3
    for s in slaves:
        assert commitlog_files(s.store_dir) == commitlog_files(m.store_dir)
        assert commitlog_bytes(s.store_dir, top) == master_log, f"{s.name} differs"
    wait_until(lambda: all(sl.ack_offset == top and sl.in_sync for sl in m.status().slaves)
               and len(m.status().slaves) == 2, 10, "acks at the max, both in sync")
    wait_until(lambda: all(n.status().dispatched_offset == top for n in (m, *slaves)), 10,
               "everything dispatched")
    for n in (m, *slaves):
        st = n.status()
        assert st.writable and not st.not_writable_reason, (n.name, st.not_writable_reason)
        got = n.admin().get(TOPIC, 3, 0, 64).messages
        assert [x.keys for x in got[:3]] == ["key-3", "key-7", "key-11"], n.name


# -- 3 --------------------------------------------------------------------------------------------
def _following_offsets(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"following \S+ from offset (\d+)", text)]


def test_killed_slave_resumes_from_its_own_end(group):
    # 7000-byte chunks: the SIGKILL most likely leaves a torn record at the slave's end.
    m = group.master("SYNC_MASTER", haTransferBatchSize="7000", **FAST_HA)
    s1 = group.slave(m, 1, **FAST_HA)
    s2 = group.slave(m, 2, **FAST_HA)
    wait_until(in_sync(m, 2), 20, "both slaves in sync")
    writer = Writer(m.address, TOPIC, size=1024).start()
    try:
        wait_until(lambda: s1.status().max_offset > 512 * 1024, 60, "s1 has 512 KiB")
        before = s1.status().max_offset  # appended on s1: survives a SIGKILL (page cache)
        s1.kill()
        assert s1.returncode == -9
        kill_top = m.status().max_offset
        wait_until(lambda: m.status().max_offset > kill_top + 512 * 1024, 60, "writes go on")
        log_size = os.path.getsize(s1.log_path)
        s1.start()

        def new_log() -> str:
            with open(s1.log_path, encoding="utf-8", errors="replace") as f:
                f.seek(log_size)
                return f.read()
        wait_until(lambda: _following_offsets(new_log()), 20, "s1 following again")
        text = new_log()
        recovered = [int(x) for x in re.findall(r"commitlog recovery \(abnormal\).* end (\d+)", text)]
        assert recovered, text
        resumed = _following_offsets(text)
        assert resumed == [recovered[-1]], (resumed, recovered)
        record = 1024 + 200  # a generous bound on one record's size
        assert before - record < resumed[0] < m.status().max_offset, (before, resumed)
        wait_until(lambda: s1.status().max_offset > m.status().max_offset - 64 * 1024
                   and s1.status().max_offset > kill_top + 512 * 1024, 30, "s1 catching up under load")
    finally:
        writer.stop()
    assert not writer.errors and writer.statuses() == {"PUT_OK"}, (writer.errors, writer.statuses())
    wait_until(converged(m, s1, s2), 30, "slaves at the master's max offset")
    top = m.status().max_offset
    master_log = commitlog_bytes(m.store_dir, top)
    for s in (s1, s2):
        assert commitlog_bytes(s.store_dir, top) == master_log, f"{s.name} differs"
    assert f"resuming at {resumed[0]}" in m.log_text()


def test_empty_slave_added_late_copies_whole_log(group):
    m = group.master("ASYNC_MASTER", **FAST_HA)
    s1 = group.slave(m, 1, **FAST_HA)
    client = m.admin()
    i = 0
    while m.status().max_offset < int(3.5 * 1024 * 1024):
        r = client.send(messages(TOPIC, 20, start=i, size=4096))
        assert r.status == "PUT_OK"
        i += 20
    files = commitlog_files(m.store_dir)
    assert len(files) >= 4, files
    s3 = group.slave(m, 3, **FAST_HA)
    wait_until(converged(m, s1, s3), 30, "the late slave copied everything")
    assert _following_offsets(s3.log_text()) == [0]
    top = m.status().max_offset
    assert commitlog_files(s3.store_dir) == files
    assert commitlog_bytes(s3.store_dir, top) == commitlog_bytes(m.store_dir, top)
    wait_until(lambda: s3.status().dispatched_offset == top, 10, "s3 dispatched everything")
    # and it serves the first and the last message
    first = s3.admin().get(TOPIC, 0, 0, 1).messages
    assert [x.keys for x in first] == ["key-0"]
    last = s3.admin().query(TOPIC, f"key-{i - 1}").messages
    assert [x.keys for x in last] == [f"key-{i - 1}"]


# -- 7 --------------------------------------------------------------------------------------------
class _ConfirmBoundWatch:
    """Polls a slave's status: dispatched_offset <= confirm_offset <= max_offset, always."""

    def __init__(self, node) -> None:
        self.node = node
        self.samples = 0
        self.beyond = 0  # samples taken while the slave held bytes beyond its confirm offset
        self.violations: list[tuple[int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from cluster.client.admin_client import AdminClient
        from .harness import TOKEN
        client = None
        while not self._stop.wait(0.02):
            try:
                if client is None:
                    client = AdminClient(self.node.address, TOKEN, timeout=2)
                st = client.status()
            except Exception:  # restarting: try again
                if client is not None:
                    client.close()
                client = None
                continue
            self.samples += 1
            self.beyond += st.max_offset > st.confirm_offset
            if not st.dispatched_offset <= st.confirm_offset <= st.max_offset:
                self.violations.append((st.dispatched_offset, st.confirm_offset, st.max_offset))
        if client is not None:
            client.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _same_message(a, b) -> bool:
    fields = ("topic", "queue_id", "tags", "keys", "body", "msg_id", "queue_offset",
              "commit_log_offset", "store_timestamp", "born_timestamp")
    return all(getattr(a, f) == getattr(b, f) for f in fields) and dict(a.properties) == dict(b.properties)


def test_slaves_serve_reads_never_beyond_confirm(group):
    slow = {**FAST_HA, "haMaxTimeSlaveNotCatchup": "30000", "haHousekeepingInterval": "30000"}
    m = group.master("ASYNC_MASTER", **slow)
    s1 = group.slave(m, 1, **slow)
    s2 = group.slave(m, 2, **slow)
    wait_until(in_sync(m, 2), 20, "both slaves in sync")
    watch = _ConfirmBoundWatch(s1)
    try:
        client = m.admin()
        for b in range(10):
            assert client.send(messages(TOPIC, 20, start=b * 20)).status == "PUT_OK"
        top = m.status().max_offset
        wait_until(lambda: all(n.status().confirm_offset == top and n.status().dispatched_offset == top
                               for n in (m, s1, s2)), 20, "everything confirmed and dispatched")
        on_master = node_messages_by_queue(m, TOPIC)
        assert len(on_master) == 200
        for s in (s1, s2):
            on_slave = node_messages_by_queue(s, TOPIC)
            assert on_slave.keys() == on_master.keys()
            for k, msg in on_master.items():
                assert _same_message(on_slave[k], msg), (s.name, k)
            for i in range(0, 200, 13):
                a = m.admin().query(TOPIC, f"key-{i}").messages
                b = s.admin().query(TOPIC, f"key-{i}").messages
                assert len(a) == 1 and len(b) == 1 and _same_message(a[0], b[0])

        # s2 paused but still in sync: the confirm offset stays at its ack, so s1 holds bytes
        # it must not serve yet (nor may the master).
        s2.pause()
        for b in range(10, 15):
            assert client.send(messages(TOPIC, 20, start=b * 20)).status == "PUT_OK"
        new_top = m.status().max_offset
        wait_until(lambda: s1.status().max_offset == new_top, 20, "s1 has the new bytes")
        assert set(m.status().in_sync_set) == SLAVE_IDS
        for node in (m, s1):
            st = node.status()
            assert st.confirm_offset == top and st.dispatched_offset <= top, (node.name, st)
            assert node.admin().query(TOPIC, "key-250").messages == []
            assert node.admin().get(TOPIC, 0, 50, 8).messages == []
        # a restarted slave keeps the bound too
        assert s1.stop() == 0
        s1.start()
        wait_until(lambda: s1.status().master_connected, 20, "s1 reconnected")
        st = s1.status()
        assert st.max_offset == new_top and st.dispatched_offset <= st.confirm_offset <= top, st
        assert s1.admin().query(TOPIC, "key-250").messages == []
        assert s1.admin().get(TOPIC, 0, 50, 8).messages == []

        s2.resume()
        wait_until(lambda: all(s.status().dispatched_offset == new_top for s in (m, s1, s2)), 20,
                   "confirm moved on after the resume")
        for node in (m, s1, s2):
            got = node.admin().query(TOPIC, "key-250").messages
            assert [x.keys for x in got] == ["key-250"], node.name
    finally:
        watch.stop()
    assert watch.samples >= 5 and watch.beyond >= 1, (watch.samples, watch.beyond)
    assert watch.violations == [], watch.violations[:5]



# -- SYNC_FLUSH slaves ---------------------------------------------------------------------------
def test_sync_flush_slave_acks_only_what_is_on_its_disk(group):
    """A SYNC_FLUSH slave's ack never runs ahead of its flushed offset, so a SYNC_MASTER's
    acknowledgement means the bytes are on the slave's disk."""
    m = group.master("SYNC_MASTER", **FAST_HA)
    s = group.slave(m, 1, flushDiskType="SYNC_FLUSH", **FAST_HA)
    wait_until(in_sync(m, 1), 20, "slave in sync")
    client = m.admin()
    for b in range(20):
        r = client.send(messages(TOPIC, 10, start=b * 10, queues=QUEUES))
        assert r.status == "PUT_OK", r
        row = m.status().slaves[0]
        assert row.ack_offset <= row.flushed_offset, row
    assert s.status().flushed_offset >= r.results[-1].commit_log_offset
