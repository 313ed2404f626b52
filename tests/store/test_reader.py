"""MessageReader over real files: pull by queue offset (statuses, tag filter, limits, bound),
lookups by offset, message id and key, offsets by time, and the record walk."""
from __future__ import annotations

import pytest

from store import codec
from store.codec import MessageRecord
from store.get_result import GetStatus
from store.reader import TagFilter
from tests.store.store_parts import COMMITLOG_FILE, T0, Parts, message


@pytest.fixture
def parts(tmp_path):
    p = Parts(tmp_path)
    yield p
    p.close()


@pytest.fixture
def filled(parts):
    """40 messages in Orders-0, tags alternating TagB/TagA, dispatched."""
    parts.appends = parts.put_all(message(i) for i in range(40))
    parts.reput.catch_up()
    return parts


def test_tag_filter_parse():
    assert TagFilter.parse(None).tags is None and TagFilter.parse(" * ").tags is None
    assert TagFilter.parse("a || b").tags == frozenset({"a", "b"})
    assert TagFilter.parse("a").codes == frozenset({codec.java_string_hash("a")})
    with pytest.raises(ValueError):
        TagFilter.parse("||")


def test_get_messages_statuses(filled):
    r = filled.reader
    assert r.get_messages("Nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    got = r.get_messages("Orders", 0, 0, 10)
    assert got.status is GetStatus.FOUND and got.next_begin_offset == 10
    assert [m.queue_offset for m in got.messages] == list(range(10))
    assert (got.min_offset, got.max_offset) == (0, 40)
    assert got.buffer_total_size == sum(a.wrote_bytes for a in filled.appends[:10])
    assert r.get_messages("Orders", 0, 40).status is GetStatus.OFFSET_OVERFLOW_ONE
    over = r.get_messages("Orders", 0, 41)
    assert over.status is GetStatus.OFFSET_OVERFLOW_BADLY and over.next_begin_offset == 40
    filled.put(message(99, queue_id=3))
    filled.cq_store.get_or_create("Orders", 2)  # a queue without units
    filled.reput.catch_up()
    assert r.get_messages("Orders", 2, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE


def test_get_messages_tag_filter_count_and_bytes(filled):
    r = filled.reader
    got = r.get_messages("Orders", 0, 0, 5, TagFilter.parse("TagA"))
    assert [m.queue_offset for m in got.messages] == [1, 3, 5, 7, 9]
    assert got.next_begin_offset == 10 and all(m.tags == "TagA" for m in got.messages)
    none = r.get_messages("Orders", 0, 0, 5, TagFilter.parse("TagZ"))
    assert none.status is GetStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 40
    size = filled.appends[0].wrote_bytes
    got = r.get_messages("Orders", 0, 0, 32, max_bytes=3 * size)
    assert len(got.messages) == 3 and got.next_begin_offset == 3
    assert len(r.get_messages("Orders", 0, 0, 1000).messages) == 40  # max_count caps at 64
    small = type(r)(filled.commitlog, filled.cq_store, filled.index, max_bytes=1 << 20, max_count=7)
    assert len(small.get_messages("Orders", 0, 0, 1000).messages) == 7


def test_get_messages_never_past_the_bound(filled):
    bound = filled.appends[5].wrote_offset + 1  # record 5 ends past it
    got = filled.reader.get_messages("Orders", 0, 0, 32, max_physical_offset=bound)
    assert [m.queue_offset for m in got.messages] == [0, 1, 2, 3, 4]
    assert got.next_begin_offset == 5


def test_get_messages_of_a_removed_file_says_removing(filled):
    first = filled.commitlog.queue.first_file
    filled.commitlog.queue.delete_first_files(lambda f: f is first, 1, 0, 0)
    got = filled.reader.get_messages("Orders", 0, 0, 1)
    kept = [i for i, a in enumerate(filled.appends) if a.wrote_offset >= COMMITLOG_FILE]
    assert got.status is GetStatus.FOUND and got.messages[0].queue_offset == kept[0]
    only_removed = filled.reader.get_messages("Orders", 0, 0, 1, TagFilter.parse("TagA"),
                                              max_bytes=1)
    assert only_removed.messages[0].queue_offset >= kept[0]
    gone = filled.reader.get_messages("Orders", 0, 0, kept[0] - 1,
                                      max_physical_offset=COMMITLOG_FILE)
    assert gone.status is GetStatus.MESSAGE_WAS_REMOVING and not gone.messages


def test_lookups_by_offset_id_and_key(filled):
    r, a7 = filled.reader, filled.appends[7]
    rec = r.look_message_by_offset(a7.wrote_offset)
    assert rec.body.startswith(b"body-0007") and rec.physical_offset == a7.wrote_offset
    assert r.look_message_by_offset(a7.wrote_offset + 1) is None  # not a record start
    assert r.look_message_by_offset(10 * COMMITLOG_FILE) is None  # no such file
    assert r.look_message_by_id(a7.msg_id).physical_offset == a7.wrote_offset
    assert [m.physical_offset for m in r.query_by_key("Orders", "k7")] == [a7.wrote_offset]
    assert [m.uniq_key for m in r.query_by_key("Orders", f"UNIQ{7:028d}")] == [f"UNIQ{7:028d}"]
    assert r.query_by_key("Other", "k7") == []
    t7 = rec.store_timestamp
    assert r.query_by_key("Orders", "k7", begin_ms=t7 + 1) == []  # exact times filter
    assert len(r.query_by_key("Orders", "k7", begin_ms=t7, end_ms=t7)) == 1


def test_query_by_key_drops_hash_collisions(parts):
    # "Aa" and "BB" have the same String.hashCode, so the index cannot tell them apart.
    assert codec.java_string_hash("Orders#Aa") == codec.java_string_hash("Orders#BB")
    a = parts.put(message(1, keys="Aa"))
    b = parts.put(message(2, keys="BB"))
    parts.reput.catch_up()
    assert [m.physical_offset for m in parts.reader.query_by_key("Orders", "Aa")] == [a.wrote_offset]
    assert [m.physical_offset for m in parts.reader.query_by_key("Orders", "BB")] == [b.wrote_offset]


def test_query_without_an_index_finds_nothing(tmp_path):
    p = Parts(tmp_path, index=False)
    try:
        p.put(message(1))
        p.reput.catch_up()
        assert p.reader.query_by_key("Orders", "k1") == []
    finally:
        p.close()


def test_offset_for_timestamp(filled):
    times = [filled.reader.look_message_by_offset(a.wrote_offset).store_timestamp
             for a in filled.appends]
    assert filled.reader.offset_for_timestamp("Orders", 0, times[12]) == 12
    assert filled.reader.offset_for_timestamp("Orders", 0, times[12] - 1) == 12
    assert filled.reader.offset_for_timestamp("Orders", 0, T0) == 0
    assert filled.reader.offset_for_timestamp("Orders", 0, times[-1] + 1) == 40
    assert filled.reader.offset_for_timestamp("Nope", 0, T0) == 0


def test_iter_records_walks_every_file_and_ends_at_what_is_not_a_record(parts):
    appends = parts.put_all(message(i) for i in range(30))
    got = list(parts.reader.iter_records())
    assert [o for o, _ in got] == [a.wrote_offset for a in appends]
    assert all(isinstance(r, MessageRecord) for _, r in got)
    assert [o for o, _ in parts.reader.iter_records(appends[20].wrote_offset,
                                                     appends[25].wrote_offset)] == \
        [a.wrote_offset for a in appends[20:25]]
    # a corrupt record: the walk yields what lies there and stops
    f = parts.commitlog.queue.find_by_offset(appends[10].wrote_offset)
    f.write_at(appends[10].wrote_offset - f.file_from_offset + 4, b"\x00\x00\x00\x01")
    got = list(parts.reader.iter_records())
    assert [o for o, _ in got] == [a.wrote_offset for a in appends[:11]]
    assert isinstance(got[-1][1], codec.Corrupt)
    # a flipped body byte is a record without CRC checks, the end with them
    f.write_at(appends[10].wrote_offset - f.file_from_offset + 4, (0xDAA320A7).to_bytes(4, "big"))
    f.write_at(appends[10].wrote_offset - f.file_from_offset + 100, b"\xff")
    assert len(list(parts.reader.iter_records())) == 30
    crc = list(parts.reader.iter_records(check_crc=True))
    assert len(crc) == 11 and isinstance(crc[-1][1], codec.Corrupt)
