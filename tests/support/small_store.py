"""A MessageStore over tiny files under tmp_path: its config, the messages the store tests put,
and a started store (on FaultyFileIO, so a test can inject disk faults)."""
from __future__ import annotations

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
