"""A client put may create a commitlog file only while one more would still fit the volume:
that room is kept for the node's own table records (consumer acks and offsets), so consumers
can always catch up under disk pressure. The free space comes from the FileIO; the same rule
on a real full tmpfs volume: tests/integration/test_disk_pressure.py."""
from __future__ import annotations

from store.codec import Message
from store.config import StoreConfig
from store.commitlog.fileio import FileIO
from store.message_store import MessageStore
from store.put_result import PutStatus

FILE = 64 * 1024
BODY = b"x" * 1000


class VolumeOf(FileIO):
    """The store's real file I/O on a volume whose free space the test sets."""

    def __init__(self, free: int) -> None:
        self.free = free

    def free_bytes(self, path: str) -> int:
        self._enter("statvfs", path, writes=False)
        return self.free


def fill_last_file(store: MessageStore) -> None:
    while len(store.commitlog.files()) < 1 or store.commitlog.files()[-1].remaining > 2 * len(BODY):
        assert store.put_message(Message("T", BODY)).ok


def test_a_client_put_leaves_one_file_of_room_for_the_nodes_records(tmp_path):
    io = VolumeOf(free=10 * FILE)
    store = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path),
                                     mapped_file_size_commit_log=FILE), io=io)
    store.start()
    try:
        fill_last_file(store)
        io.free = FILE + FILE // 2  # the next file fits, but not one more after it
        small = store.put_message(Message("T", b"fits the current file"))
        assert small.ok
        end = store.max_phy_offset()
        r = store.put_messages([Message("T", BODY) for _ in range(4)])  # needs the next file
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "DISK_FULL" in r.reason and "room for one more" in r.reason
        assert store.max_phy_offset() == end and len(store.commitlog.files()) == 1
        # the node's own records may take that room
        own = store.put_messages([Message("rmq_sys_CONSUMER_STATE", BODY) for _ in range(4)],
                                 allow_system_topic=True)
        assert own.ok and len(store.commitlog.files()) == 2
        # a system topic that is not one of the node's tables is a client write here
        fill_last_file(store)
        half = store.put_messages([Message("RMQ_SYS_TRANS_HALF_TOPIC", BODY) for _ in range(70)],
                                  allow_system_topic=True)
        assert half.status is PutStatus.SERVICE_NOT_AVAILABLE
        io.free = 3 * FILE  # room again: client puts create files as before
        assert store.put_messages([Message("T", BODY) for _ in range(70)]).ok
    finally:
        store.shutdown()
