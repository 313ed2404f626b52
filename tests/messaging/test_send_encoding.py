"""A batch encoded ahead (send_encoding.py, what a node's encode process runs) gives the records
the master's own path gives for the same request and queue, byte for byte and hint for hint,
also after the trip through the pipe's form (pack / unpack); and the worker's protocol answers
refusals with Sender.send's status."""
from __future__ import annotations

import dataclasses
import gzip

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given, settings, strategies as st

from cluster.messaging.convert import RESERVED_PROPERTY_NAMES, to_store_messages
from cluster.messaging.encode_worker import EncodeWorker
from cluster.messaging.send import Sender
from cluster.messaging.send_encoding import encode_send, pack, unpack
from cluster.messaging.v2_status import V2Error
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.put_encoding import EncodeSettings, TopicCache, encode_messages
from store.put_result import PutStatus

from tests.support.v2 import ILLEGAL, LIMITS, NOW, msg, topic_registry

SETTINGS = EncodeSettings(max_message_size=4 * 1024 * 1024, v2_allowed=True,
                          append_prop_crc=False, max_properties_size=32767,
                          store_host="10.0.0.9:10911",
                          delay_levels_ms=(1000, 5000, 10000), timer_max_delay_sec=3 * 86400)


def inline(messages, queue_id, settings=SETTINGS):
    """What Sender.send and MessageStore.append do with the same request in one process."""
    _, msgs = to_store_messages(messages, LIMITS, NOW, "127.0.0.1")
    for m in msgs:
        m.queue_id = queue_id
    return encode_messages(msgs, settings, lambda: NOW, TopicCache())


def same_records(got, want) -> None:
    assert len(got) == len(want)
    for (record, topic, queue_id), (expected, etopic, equeue) in zip(got, want):
        assert (topic, queue_id) == (etopic, equeue)
        assert bytes(record.data) == bytes(expected.data)
        assert (record.store_timestamp_pos, record.prop_crc, record.transaction_type,
                record.sys_flag, record.properties_text) == (
            expected.store_timestamp_pos, expected.prop_crc, expected.transaction_type,
            expected.sys_flag, expected.properties_text)
        assert (dataclasses.asdict(record.hint) if record.hint else None) == (
            dataclasses.asdict(expected.hint) if expected.hint else None)


texts = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")),
                min_size=1, max_size=12).filter(lambda t: "|" not in t)


@st.composite
def v2_messages(draw):
    sp = {"message_id": draw(st.from_regex(r"[0-9A-F]{8,32}", fullmatch=True))}
    if draw(st.booleans()):
        sp["tag"] = draw(texts)
    if draw(st.booleans()):
        sp["keys"] = draw(st.lists(texts, min_size=1, max_size=3))
    if draw(st.booleans()):
        sp["born_timestamp"] = Timestamp(seconds=draw(st.integers(1, 2_000_000_000)),
                                         nanos=draw(st.integers(0, 999_999_999)))
    kind = draw(st.sampled_from(["normal", "fifo", "delay", "gzip"]))
    body = draw(st.binary(min_size=1, max_size=300))
    if kind == "fifo":
        sp.update(message_type=d.FIFO, message_group=draw(texts))
    elif kind == "delay":
        at = NOW + draw(st.integers(1, 86_400_000))
        sp.update(message_type=d.DELAY,
                  delivery_timestamp=Timestamp(seconds=at // 1000, nanos=at % 1000 * 1_000_000))
    elif kind == "gzip":
        sp["body_encoding"] = d.GZIP
        body = gzip.compress(body)
    user = draw(st.dictionaries(texts.filter(lambda t: t not in RESERVED_PROPERTY_NAMES), texts,
                                max_size=3))
    return msg(topic=draw(st.sampled_from(["T", "%RETRY%G_T", "t" * 127])), body=body,
               user=user, **sp)


@settings(max_examples=150, deadline=None)
@given(st.lists(v2_messages(), min_size=1, max_size=6), st.integers(0, 15), st.booleans())
def test_encoded_ahead_equals_the_masters_own_encoding(batch, queue_id, prop_crc):
    topic = batch[0].topic.name
    for m in batch:
        m.topic.name = topic
    settings_ = dataclasses.replace(SETTINGS, append_prop_crc=prop_crc)
    want, refusal = inline(batch, queue_id, settings_)
    assert refusal is None
    sent = encode_send(batch, queue_id, LIMITS, NOW, "127.0.0.1", settings_, TopicCache())
    same_records(sent.encoded, want)
    carried = unpack(pack(sent))
    same_records(carried.encoded, want)
    assert carried.message_ids == [m.system_properties.message_id for m in batch]
    assert carried.body_bytes == sent.body_bytes and carried.topic == topic
    if any(m.system_properties.message_type == d.DELAY for m in batch):
        assert any(t == "SCHEDULE_TOPIC_XXXX" and r.hint is None for r, t, _ in carried.encoded)


def test_the_stores_refusal_travels_with_the_batch():
    tight = dataclasses.replace(SETTINGS, max_properties_size=60)
    batch = [msg(tag="x" * 40), msg()]
    want, refusal = inline(batch, 0, tight)
    assert want == [] and refusal.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    carried = unpack(pack(encode_send(batch, 0, LIMITS, NOW, "127.0.0.1", tight, TopicCache())))
    assert carried.encoded == [] and carried.refusal == refusal


def test_a_torn_batch_is_refused_by_unpack():
    packed = list(pack(encode_send([msg(), msg()], 0, LIMITS, NOW, "", SETTINGS, TopicCache())))
    packed[3] = packed[3][:-1]
    with pytest.raises(ValueError, match="records take"):
        unpack(tuple(packed))


def worker_request(messages, queue_id=0):
    return ("encode", s.SendMessageRequest(messages=messages).SerializeToString(), queue_id,
            dataclasses.astuple(LIMITS), NOW, "127.0.0.1", SETTINGS.as_tuple())


@pytest.mark.parametrize("what, msgs, code", ILLEGAL, ids=[i[0] for i in ILLEGAL])
def test_the_worker_refuses_what_the_sender_refuses(leader, what, msgs, code):
    said = Sender(lambda _: pytest.fail("nothing is put"), topic_registry(leader),
                  lambda: LIMITS, lambda: NOW).send(s.SendMessageRequest(messages=msgs))
    assert said.status.code == code
    assert EncodeWorker().handle(worker_request(msgs)) == ("refused", code, said.status.message)


def test_the_worker_answers_a_batch_and_survives_a_bad_frame():
    worker = EncodeWorker()
    batch = [msg(tag="a"), msg(keys=["k"])]
    kind, packed = worker.handle(worker_request(batch, 3))
    assert kind == "ok"
    want, _ = inline(batch, 3)
    same_records(unpack(packed).encoded, want)
    assert worker.handle(("encode", b"\xff\xff", 0))[0] == "error"
    assert worker.handle(("resize", *worker_request(batch)[1:]))[:2] == ("error", "ValueError")
    assert worker.handle(worker_request(batch))[0] == "ok"


def test_a_transactional_message_is_never_encoded_ahead():
    with pytest.raises(V2Error):
        encode_send([msg(message_type=d.TRANSACTION)], 0, LIMITS, NOW, "", SETTINGS, TopicCache())
