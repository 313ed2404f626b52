"""Dispatch hints: what a master's put leaves for reput (store.codec.dispatch.dispatch_hint) must be
exactly what reput would decode from the bytes, for any message; and the hints must never
let reput pass the dispatch bound, survive a cut of the log, or skip a record without one."""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.commitlog import commitlog as commitlog_module
from store import reput as reput_module
from store import running_flags as rf
from common.clock import ManualClock
from store.codec import Message, SysFlag
from store.config import StoreConfig
from store.codec.dispatch import SCHEDULE_TOPIC, DispatchRequest
from store.message_store import MessageStore

T0 = 1_700_000_000_000


@contextmanager
def opened(root, **kw) -> Iterator[MessageStore]:
    """Loaded, not started: reput moves only when a test steps it. Shut down on leaving."""
    cfg = dict(store_path_root_dir=str(root), mapped_file_size_commit_log=16 * 1024,
               max_hash_slot_num=64, max_index_num=512)
    cfg.update(kw)
    s = MessageStore(StoreConfig(**cfg), clock=ManualClock(T0))
    s.load()
    try:
        s.flags.clear(rf.NOT_STARTED)
        yield s
    finally:
        s.shutdown()


def fields(requests: list[DispatchRequest]) -> list[tuple]:
    return [dataclasses.astuple(r) for r in requests]


def dispatched(store: MessageStore) -> list[DispatchRequest]:
    got: list[DispatchRequest] = []
    unsubscribe = store.on_dispatch(got.extend)
    store.reput.catch_up()
    unsubscribe()
    return got


def decoded(store: MessageStore, start: int = 0) -> list[DispatchRequest]:
    """The same records decoded from the bytes (reput's walk, no hints)."""
    return [r for batch in store.reput.requests_between(start, store.max_phy_offset())
            for r in batch]


def msg(i: int, **props: str) -> Message:
    return Message("Orders", b"m%05d" % i + b"." * 150, i % 3,
                   {"TAGS": "TagA", "KEYS": f"k{i} shared", "UNIQ_KEY": f"U{i:030d}", **props})


names = st.text(st.characters(codec="utf-8", exclude_characters="\x00\x01\x02|"),
                min_size=1, max_size=12)
messages = st.builds(
    lambda topic, qid, tag, keys, uniq, extra, tx, body, delay: Message(
        topic, body, qid,
        {**({"TAGS": tag} if tag is not None else {}),
         **({"KEYS": keys} if keys is not None else {}),
         **({"UNIQ_KEY": uniq} if uniq is not None else {}), **extra,
         **({"DELAY": "3"} if delay else {})},
        sys_flag=tx, prepared_transaction_offset=7 if tx == SysFlag.TRANSACTION_COMMIT_TYPE
        else 0),
    st.sampled_from(["Orders", "T" * 127, "%RETRY%g_1"]),  # 127: the longest legal
    st.integers(0, 7),
    st.none() | st.text("abcXYZ ", min_size=1, max_size=6).filter(lambda t: t.strip()),
    st.none() | st.just("") | st.lists(names, max_size=3).map(" ".join),
    st.none() | st.just("") | names,
    st.dictionaries(st.sampled_from(["a", "b", "KEYSX"]), names, max_size=2),
    st.sampled_from([0, SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE,
                     SysFlag.TRANSACTION_ROLLBACK_TYPE]),
    st.binary(max_size=300),
    st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(messages, min_size=1, max_size=5), min_size=1, max_size=12),
       prop_crc=st.booleans())
def test_what_the_hints_dispatch_is_what_decoding_the_bytes_gives(tmp_path_factory, batches,
                                                                  prop_crc):
    with opened(tmp_path_factory.mktemp("hints"), enabled_append_prop_crc=prop_crc) as s:
        for batch in batches:
            assert s.put_messages(batch).ok
        assert len(s.reput.hints) <= sum(map(len, batches))
        got = dispatched(s)
        assert not s.reput.hints
        assert fields(got) == fields(decoded(s))
        assert s.reput.reput_from_offset == s.max_phy_offset()


def test_a_put_leaves_a_hint_per_record_except_schedule_records(tmp_path):
    with opened(tmp_path, mapped_file_size_commit_log=4096) as s:
        results = [s.put_message(msg(i, **({"DELAY": "2"} if i % 4 == 0 else {})))
                   for i in range(40)]
        hinted = {r.appends[0].wrote_offset for i, r in enumerate(results) if i % 4}
        assert set(s.reput.hints) == hinted  # schedule-topic records are decoded
        got = dispatched(s)
        assert sum(r.topic == SCHEDULE_TOPIC for r in got) == 10
        assert fields(got) == fields(decoded(s))
        assert len(s.commitlog.queue) > 1  # BLANK fillers between the hinted runs


def test_hints_never_take_reput_past_the_bound(tmp_path):
    with opened(tmp_path) as s:
        appends = [s.put_message(msg(i)).appends[0] for i in range(10)]
        bound = [appends[3].wrote_offset + 10]  # inside record 3
        s.reput.bound = lambda: bound[0]
        first = dispatched(s)
        assert [r.commit_log_offset for r in first] == [a.wrote_offset for a in appends[:3]]
        assert s.reput.reput_from_offset == appends[3].wrote_offset
        assert appends[3].wrote_offset in s.reput.hints  # kept for when the bound moves
        bound[0] = appends[9].end_offset
        rest = dispatched(s)
        assert fields(first + rest) == fields(decoded(s))


def test_a_cut_drops_the_hints_of_what_it_removed(tmp_path):
    with opened(tmp_path) as s:
        appends = [s.put_message(msg(i)).appends[0] for i in range(6)]
        s.truncate(appends[2].wrote_offset)  # as a slave whose log diverged
        assert not s.reput.hints
        again = [s.put_message(msg(100 + i)).appends[0] for i in range(4)]
        assert again[0].wrote_offset == appends[2].wrote_offset
        got = dispatched(s)
        assert [r.keys.split()[0] for r in got] == ["k0", "k1", "k100", "k101", "k102", "k103"]
        assert fields(got) == fields(decoded(s))


@pytest.fixture
def capped(tmp_path, monkeypatch):
    """A store whose puts leave at most 5 hints."""
    monkeypatch.setattr(commitlog_module, "HINTS_MAX", 5)
    monkeypatch.setattr(reput_module, "HINTS_MAX", 5)
    with opened(tmp_path) as s:
        yield s


def test_past_the_most_hints_puts_leave_none_and_reput_decodes(capped):
    for i in range(12):
        assert capped.put_message(msg(i)).ok
    assert len(capped.reput.hints) == 5  # the first five; the rest carry none
    got = dispatched(capped)
    assert len(got) == 12 and fields(got) == fields(decoded(capped)) and not capped.reput.hints


def test_stale_hints_are_dropped_once_they_reach_the_most(capped):
    for i in range(3):
        assert capped.put_message(msg(i)).ok
    dispatched(capped)
    # hints reput can never take (below where it stands), as a failed write could leave
    capped.reput.hints.update({k: DispatchRequest("x", 0, k, 1, 0, 0, 0, "", None, 0, 0)
                               for k in range(5)})
    assert capped.put_message(msg(3)).ok  # full: no hint for it
    got = dispatched(capped)
    assert [r.keys.split()[0] for r in got] == ["k3"] and not capped.reput.hints
