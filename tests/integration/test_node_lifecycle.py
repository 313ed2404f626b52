"""SIGTERM is the clean shutdown of a node: exit code 0, no `abort` marker, the store lock
released so the node can restart at once (and recovers the normal way)."""
from __future__ import annotations

import os

from store.layout import ABORT_FILE, LOCK_FILE
from store.markers import StoreLock

from .harness import FAST_HA, commitlog_bytes, in_sync, messages, wait_until

TOPIC = "LifeTopic"


def _assert_clean(node) -> None:
    assert not os.path.exists(os.path.join(node.store_dir, ABORT_FILE)), f"{node.name} left abort"
    lock = StoreLock(os.path.join(node.store_dir, LOCK_FILE))
    lock.acquire()  # raises StoreLocked if the process still held it
    lock.release()


def test_sigterm_is_a_clean_shutdown_and_restart_is_immediate(group):
    m = group.master("SYNC_MASTER", **FAST_HA)
    s = group.slave(m, 1, **FAST_HA)
    wait_until(in_sync(m, 1), 20, "slave in sync")
    for b in range(5):
        assert m.admin().send(messages(TOPIC, 20, start=b * 20)).status == "PUT_OK"
    top = m.status().max_offset
    wait_until(lambda: s.status().max_offset == top, 10, "slave caught up")
    assert os.path.exists(os.path.join(m.store_dir, ABORT_FILE))  # present while running

    for node in (s, m):
        assert node.stop() == 0, node.log_tail()
        _assert_clean(node)
        assert "stopped cleanly" in node.log_tail(5)

    for node in (m, s):
        size = os.path.getsize(node.log_path)
        node.start()
        text = node.log_text()[size:]
        assert "commitlog recovery (normal)" in text, text
        assert "abnormal" not in text, text
    wait_until(in_sync(m, 1), 20, "slave back in sync")
    assert m.status().max_offset == top
    assert m.admin().send(messages(TOPIC, 20, start=100)).status == "PUT_OK"
    top = m.status().max_offset
    wait_until(lambda: s.status().max_offset == top, 10, "slave caught up again")
    assert commitlog_bytes(s.store_dir, top) == commitlog_bytes(m.store_dir, top)
    wait_until(lambda: all(n.status().dispatched_offset == top for n in (m, s)), 10, "dispatched")
    for node in (m, s):
        assert [x.keys for x in node.admin().query(TOPIC, "key-100").messages] == ["key-100"]
