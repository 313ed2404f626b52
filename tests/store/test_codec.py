"""The codec against records written by RocketMQ's own encoder (tests/fixtures/rocketmq), plus
round trips and the typed results of damaged input."""
from __future__ import annotations

import os
import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from store import codec
from store.codec import Message, RecordKind, SysFlag
from store.errors import MessageIllegal, PropertiesSizeExceeded

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "rocketmq")
PROPS = {"UNIQ_KEY": "7F0000010001000000000000AAAA0000", "TAGS": "TagA", "KEYS": "k1 k2", "WAIT": "true"}
RAW_PROPS = b"UNIQ_KEY\x017F0000010001000000000000AAAA0000\x02TAGS\x01TagA\x02KEYS\x01k1 k2\x02WAIT\x01true\x02"
COMMON = dict(body_crc=1932557065, queue_id=3, flag=0, physical_offset=4096,
              born_timestamp=1700000000000, store_timestamp=1700000000123, reconsume_times=0,
              prepared_transaction_offset=0, body=b"hello rocketmq")

# fixture -> (total size, magic, sysFlag, queueOffset, topic, born host, store host, props, msg id)
EXPECTED = {
    "f1": (187, codec.MAGIC_V1, 0, 42, "TopicTest", "192.168.1.10:50001", "10.0.0.5:10911", PROPS,
           "0A00000500002A9F0000000000001000"),
    "f2": (379, codec.MAGIC_V2, 0, 42, "T" * 200, "192.168.1.10:50001", "10.0.0.5:10911", PROPS,
           "0A00000500002A9F0000000000001000"),
    "f3": (211, codec.MAGIC_V1, 0x30, 42, "TopicTest", "[2001:db8::1]:50002", "[2001:db8::2]:10911",
           PROPS, "20010DB800000000000000000000000200002A9F0000000000001000"),
    "f4": (124, codec.MAGIC_V1, 4, 0, "TopicTest", "192.168.1.10:50001", "10.0.0.5:10911",
           {"TAGS": "TagA"}, "0A00000500002A9F0000000000001000"),
    "f1_propcrc": (207, codec.MAGIC_V1, 0, 42, "TopicTest", "192.168.1.10:50001", "10.0.0.5:10911",
                   dict(PROPS, **{"__CRC32#": "6809009500"}), "0A00000500002A9F0000000000001000"),
}


def fixture(name: str) -> bytes:
    with open(os.path.join(FIXTURES, name + ".bin"), "rb") as f:
        return f.read()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_decodes_field_for_field(name):
    data = fixture(name)
    total, magic, sys_flag, qoff, topic, born, store, props, msg_id = EXPECTED[name]
    rec = codec.decode(data)
    assert isinstance(rec, codec.MessageRecord)
    assert (rec.total_size, rec.magic, rec.sys_flag, rec.queue_offset) == (total, magic, sys_flag, qoff)
    for k, v in COMMON.items():
        assert getattr(rec, k) == v, k
    assert (rec.topic, rec.born_host, rec.store_host) == (topic, born, store)
    assert rec.properties == props
    assert rec.msg_id == msg_id
    assert rec.tags == "TagA"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_reencodes_byte_identically(name):
    data = fixture(name)
    rec = codec.decode(data)
    props = {k: v for k, v in rec.properties.items() if k != codec.PROP_CRC_NAME}
    msg = Message(topic=rec.topic, body=rec.body, queue_id=rec.queue_id, properties=props,
                  flag=rec.flag, sys_flag=rec.sys_flag, born_timestamp=rec.born_timestamp,
                  born_host=rec.born_host, store_host=rec.store_host,
                  reconsume_times=rec.reconsume_times,
                  prepared_transaction_offset=rec.prepared_transaction_offset)
    enc = codec.encode(msg, append_prop_crc=(name == "f1_propcrc"))
    enc.patch(rec.queue_offset, rec.physical_offset, rec.store_timestamp)
    assert bytes(enc.data) == data


def test_fixture_raw_properties_and_fields_at_documented_offsets():
    data = fixture("f1")
    assert data[114:187] == RAW_PROPS
    assert struct.unpack_from(">q", data, 56)[0] == 1700000000123
    assert data[102] == 9 and data[103:112] == b"TopicTest"
    f2 = fixture("f2")
    assert struct.unpack_from(">h", f2, 102)[0] == 200


def test_prop_crc_tail_is_verified_when_asked():
    data = bytearray(fixture("f1_propcrc"))
    assert codec.check_record(data, 0, len(data), True, True) == (RecordKind.RECORD, 207)
    assert zlib.crc32(data[:187]) & 0x7FFFFFFF == 59009086
    data[40] ^= 1  # bornTimestamp: outside the body CRC, inside the property CRC
    assert codec.check_record(data, 0, len(data), True, False)[0] is RecordKind.RECORD
    assert codec.check_record(data, 0, len(data), True, True)[0] is RecordKind.CORRUPT


def test_java_string_hash_known_values():
    assert codec.java_string_hash("TagA") == 2598919
    assert codec.java_string_hash("") == 0
    assert codec.java_string_hash("hello") == 99162322
    assert codec.java_string_hash("polygenelubricants") == -2147483648
    assert codec.java_string_hash("\U0001F600") == 1772899  # surrogate pair: 0xD83D, 0xDE00
    long = "abc" * 300
    h = 0
    for ch in long:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    assert codec.java_string_hash(long) == (h - (1 << 32) if h >= 1 << 31 else h)


def _java_hash_reference(s: str) -> int:
    """The plain definition: Horner over the UTF-16 code units (a non-BMP character is a
    surrogate pair, two units), wrapped to a signed 32-bit int."""
    raw = s.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", raw):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@settings(max_examples=500, deadline=None)
@given(s=st.one_of(st.text(), st.text(alphabet=st.characters(max_codepoint=127)),
                   st.text(alphabet=st.characters(max_codepoint=127), min_size=600, max_size=2000),
                   st.text(min_size=200, max_size=400)))
def test_java_string_hash_matches_reference(s):
    assert codec.java_string_hash(s) == _java_hash_reference(s)


def test_java_string_hash_edges():
    for s in ["a", "\x00", "\x7f" * 700, "\x00" * 641, "z" * 640, "z" * 641, "z" * 1280,
              "z" * 1281, "BenchTopic#" + "F" * 32, "\uffff" * 300, "\U0010FFFF" * 130, "é"]:
        assert codec.java_string_hash(s) == _java_hash_reference(s), s


def test_offset_msg_id_round_trip():
    assert codec.offset_msg_id("10.0.0.5", 10911, 4096) == "0A00000500002A9F0000000000001000"
    assert codec.decode_offset_msg_id("0A00000500002A9F0000000000001000") == ("10.0.0.5", 10911, 4096)
    with pytest.raises(MessageIllegal):
        codec.decode_offset_msg_id("XYZ")


def test_typed_results_for_damaged_input():
    data = fixture("f1")
    assert isinstance(codec.decode(data[:100]), codec.NeedMore)
    assert isinstance(codec.decode(bytes(64)), codec.Empty)
    bad = bytearray(data)
    bad[90] ^= 0xFF  # body byte -> CRC mismatch
    res = codec.decode(bad)
    assert isinstance(res, codec.Corrupt) and "CRC" in res.reason
    assert isinstance(codec.decode(bad, check_crc=False), codec.MessageRecord)
    bad = bytearray(data)
    bad[4:8] = b"\x12\x34\x56\x78"
    assert isinstance(codec.decode(bad), codec.Corrupt)
    blank = codec.encode_blank(1000) + bytes(992)
    res = codec.decode(blank)
    assert isinstance(res, codec.Blank) and res.size == 1000


def test_encode_rejects_oversized_properties_and_bad_hosts():
    with pytest.raises(PropertiesSizeExceeded):
        codec.encode(Message("T", b"x", properties={"k": "v" * 40000}))
    with pytest.raises(MessageIllegal):
        codec.encode(Message("T", b"x", born_host="not-an-ip:1"))


def test_prepared_transaction_type_is_reported():
    enc = codec.encode(Message("T", b"x", sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE))
    assert enc.transaction_type == SysFlag.TRANSACTION_PREPARED_TYPE


_text = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02",
                                       blacklist_categories=("Cs",)), min_size=1, max_size=20)
_hosts = st.sampled_from(["127.0.0.1:1", "10.1.2.3:10911", "[::1]:80", "[2001:db8::7]:65535"])


@settings(max_examples=200, deadline=None)
@given(topic=st.from_regex(r"^[%|a-zA-Z0-9_-]{1,200}$", fullmatch=True),
       body=st.binary(max_size=2000), queue_id=st.integers(0, 2 ** 31 - 1),
       flag=st.integers(-2 ** 31, 2 ** 31 - 1), props=st.dictionaries(_text, _text, max_size=5),
       born=_hosts, store=_hosts, born_ts=st.integers(0, 2 ** 62), qoff=st.integers(0, 2 ** 62),
       phy=st.integers(0, 2 ** 62), store_ts=st.integers(0, 2 ** 62), prop_crc=st.booleans(),
       tx=st.sampled_from([0, 4, 8, 12]))
def test_round_trip(topic, body, queue_id, flag, props, born, store, born_ts, qoff, phy, store_ts,
                    prop_crc, tx):
    msg = Message(topic, body, queue_id, props, flag, tx, born_ts, born, store, 3, 77)
    enc = codec.encode(msg, append_prop_crc=prop_crc)
    enc.patch(qoff, phy, store_ts)
    data = bytes(enc.data)
    rec = codec.decode(data)
    assert isinstance(rec, codec.MessageRecord)
    assert rec.total_size == len(data)
    assert (rec.topic, rec.body, rec.queue_id, rec.flag) == (topic, body, queue_id, flag)
    assert (rec.queue_offset, rec.physical_offset, rec.store_timestamp) == (qoff, phy, store_ts)
    assert rec.born_timestamp == born_ts and rec.reconsume_times == 3
    assert rec.prepared_transaction_offset == 77 and rec.transaction_type == tx
    assert rec.magic == (codec.MAGIC_V2 if len(topic) > 127 else codec.MAGIC_V1)
    if prop_crc:
        got = {k: v for k, v in rec.properties.items() if k != codec.PROP_CRC_NAME}
        assert got == {k: v for k, v in props.items() if k != codec.PROP_CRC_NAME}
    else:
        assert rec.properties == props
    assert codec.check_record(data, 0, len(data), True, prop_crc) == (RecordKind.RECORD, len(data))
    fields = codec.decode_dispatch_fields(memoryview(data), 0, len(data))
    assert fields[:2] == (queue_id, qoff) and fields[3] == store_ts and fields[5] == topic


@settings(max_examples=200, deadline=None)
@given(topic=st.from_regex(r"^[%|a-zA-Z0-9_-]{1,200}$", fullmatch=True),
       body=st.binary(max_size=300), props=st.dictionaries(_text, _text, max_size=5),
       born=_hosts, store=_hosts, qoff=st.integers(0, 2 ** 62), store_ts=st.integers(0, 2 ** 62),
       tx=st.sampled_from([0, 4, 8, 12]), prop_crc=st.booleans(),
       damage=st.one_of(st.none(), st.tuples(st.integers(0, 400), st.integers(1, 255))),
       cut=st.one_of(st.none(), st.integers(0, 400)))
def test_dispatch_fields_agrees_with_check_record_and_decode(topic, body, props, born, store, qoff,
                                                            store_ts, tx, prop_crc, damage, cut):
    """Reput's one-pass decode: a tuple exactly when check_record (no CRC) says RECORD, with
    the fields decode_dispatch_fields gives, and the properties as text."""
    enc = codec.encode(Message(topic, body, 5, props, 0, tx, 1, born, store, 0, 99),
                       append_prop_crc=prop_crc)
    enc.patch(qoff, 4096, store_ts)
    data = bytearray(enc.data) + bytes(16)
    if damage is not None and damage[0] < len(data):
        data[damage[0]] ^= damage[1]
    limit = len(data) if cut is None else min(cut, len(data))
    kind, size = codec.check_record(data, 0, limit, False)
    got = codec.dispatch_fields(memoryview(data), 0, limit)
    if kind is not RecordKind.RECORD:
        assert got is None
        return
    assert got is not None and got[0] == size
    want = codec.decode_dispatch_fields(memoryview(data), 0, size)
    assert got[1:7] == want[:6]
    assert codec.string_to_properties(got[7]) == want[6]
    if damage is None:  # the header's bodyCRC, for the duplicate window
        assert got[8] == zlib.crc32(body) & 0x7FFFFFFF


_prop_text = st.lists(st.one_of(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "K", "TAGSX", "XTAGS", ""]),
                                st.text(max_size=6)), max_size=12).map(
    lambda parts: "".join(p + ("\x01", "\x02", "")[i % 3] for i, p in enumerate(parts)))


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(_prop_text, st.text(alphabet="TAGSKEY\x01\x02a", max_size=30)))
def test_property_value_matches_the_dict(text):
    props = codec.string_to_properties(text)
    for name in ("TAGS", "KEYS", "UNIQ_KEY", "K", "A"):
        assert codec.property_value(text, name) == props.get(name), (text, name)
