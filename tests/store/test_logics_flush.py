from __future__ import annotations

from store.checkpoint import StoreCheckpoint
from common.clock import ManualClock
from store.queue.consume_queue_store import ConsumeQueueStore
from store.codec.dispatch import DispatchRequest
from store.commitlog.fileio import FileIO
from store.index.index_service import IndexService
from store.layout import CHECKPOINT_FILE
from store.flush.logics_flush import LogicsFlushService


def test_logics_timestamp_advances_only_on_a_thorough_flush(tmp_path):
    io = FileIO()
    cqs = ConsumeQueueStore(str(tmp_path / "cq"), 20 * 1024, io)
    cp = StoreCheckpoint(str(tmp_path / CHECKPOINT_FILE), io)
    clock = ManualClock()
    svc = LogicsFlushService(cqs, None, cp, clock, dispatched_stamp=lambda: 5000,
                             physic_stamp=lambda: 4000, on_failure=lambda e: None,
                             interval_ms=1000, least_pages=2, thorough_interval_ms=60_000)
    cqs.dispatch(DispatchRequest("T", 0, 0, 100, 0, 5000, 0, "", None, 0, 0, ""))
    svc.step()  # least-pages round: the unit may still be in memory only
    assert cp.logics_msg_timestamp == 0 and cp.physic_msg_timestamp == 4000
    clock.advance(60)
    svc.step()  # thorough round
    assert cp.logics_msg_timestamp == 5000
    assert StoreCheckpoint.load(cp.path, io).logics_msg_timestamp == 5000
    cqs.close()


def test_rounds_stamp_the_sealed_index_and_shutdown_flushes_the_file_being_written(tmp_path):
    io = FileIO()
    cqs = ConsumeQueueStore(str(tmp_path / "cq"), 20 * 1024, io)
    index = IndexService(str(tmp_path / "index"), 4, 4, io, ManualClock())
    cp = StoreCheckpoint(str(tmp_path / CHECKPOINT_FILE), io)
    svc = LogicsFlushService(cqs, index, cp, ManualClock(), dispatched_stamp=lambda: 5000,
                             physic_stamp=lambda: 4000, on_failure=lambda e: None,
                             interval_ms=1000, least_pages=2, thorough_interval_ms=60_000)
    for i in range(4):  # three entries fill a file, the fourth starts the next
        index.put_entries([(f"T#k{i}", i * 100, 1000 + i)])
    sealed, current = index.files()
    svc.step()
    assert cp.index_msg_timestamp == 1002 and not sealed.dirty and current.dirty
    svc.on_stop()
    assert not current.dirty and cp.index_msg_timestamp == 1002
    index.close()
    cqs.close()
