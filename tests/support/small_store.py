"""A MessageStore over tiny files under tmp_path: its config, the messages the store tests put,
a started store (on FaultyFileIO, so a test can inject disk faults), a loaded one whose services
the test steps itself, and a slave's replication of one store's log into another."""
from __future__ import annotations

from store import running_flags as rf
from store.codec import Message
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.faults import FaultyFileIO


def config(tmp_path, **kw) -> StoreConfig:
    base = dict(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=16 * 1024,
                mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=256)
    base.update(kw)
    return StoreConfig(**base)


def msg(i: int, topic="Orders", qid=None, body=None, tag=None) -> Message:
    return Message(topic, body if body is not None else b"m%05d" % i + b"." * 200,
                   i % 4 if qid is None else qid,
                   {"TAGS": tag or ("TagA" if i % 2 else "TagB"), "KEYS": f"order-{i} shared",
                    "UNIQ_KEY": f"UNIQ{i:028d}"})


def opened(tmp_path, clock, io=None, **kw) -> MessageStore:
    s = MessageStore(config(tmp_path, **kw), io=io or FaultyFileIO(), clock=clock)
    s.start()
    return s


def loaded(root, clock, **kw) -> MessageStore:
    """Loaded and writable without its service threads: the test steps reput and the services
    itself."""
    s = MessageStore(config(root, **kw), clock=clock)
    s.load()
    s.flags.clear(rf.NOT_STARTED)
    return s


def replicate(src: MessageStore, dst: MessageStore, end: int | None = None) -> None:
    """`dst` gets `src`'s commitlog bytes up to `end` (all of it by default), verbatim (a
    slave's replication), and dispatches them."""
    offset, end = dst.max_phy_offset(), src.max_phy_offset() if end is None else end
    while offset < end:
        chunk = src.commitlog.read_chunk(offset, 1 << 20, end)
        dst.append_raw(offset, chunk)
        offset += len(chunk)
    dst.reput.catch_up()
