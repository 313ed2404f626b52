"""PutInput: the checks and the encoding of a put batch, before the put lock (store/put_input.py)."""
from __future__ import annotations

import dataclasses

from store import codec
from common.clock import ManualClock
from store.codec import Message
from store.config import StoreConfig
from store.codec.dispatch import SCHEDULE_TOPIC
from store.put_input import PutInput
from store.put_result import PutStatus


def make(**changes) -> tuple[PutInput, list[StoreConfig]]:
    config = [StoreConfig(store_path_root_dir="/nonexistent", **changes)]
    return PutInput(lambda: config[0], ManualClock(), config[0].delay_levels_ms()), config


def test_one_bad_message_refuses_the_whole_batch():
    put_input, _ = make()
    good = Message("T", b"body", properties={codec.PROPERTY_TAGS: "a"})
    bad = Message("T", b"body", properties={codec.PROPERTY_TAGS: "a|b"})
    records, refusal = put_input.encode([good, bad], False)
    assert records == [] and refusal.status is PutStatus.MESSAGE_ILLEGAL
    assert "a|b" in refusal.reason
    big = Message("T", b"body", properties={"p": "v" * 40_000})
    records, refusal = put_input.encode([good, big], False)
    assert records == [] and refusal.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert put_input.encode([], False)[1].status is PutStatus.MESSAGE_ILLEGAL


def test_records_are_encoded_stamped_rewritten_and_hinted():
    put_input, _ = make()
    delayed = Message("T", b"later", queue_id=2,
                      properties={codec.PROPERTY_DELAY_TIME_LEVEL: "3"})
    plain = Message("T", b"now", queue_id=1)
    records, refusal = put_input.encode([plain, delayed], False)
    assert refusal is None
    (first, topic1, qid1), (second, topic2, qid2) = records
    assert (topic1, qid1) == ("T", 1) and (topic2, qid2) == (SCHEDULE_TOPIC, 2)
    assert codec.decode(bytes(first.data)).born_timestamp == put_input.clock.now_ms()
    assert codec.decode(bytes(second.data)).properties[codec.PROPERTY_REAL_TOPIC] == "T"
    assert first.hint is not None and first.hint.topic == "T"
    records, _ = put_input.encode([plain], False, hinted=False)
    assert records[0][0].hint is None


def test_the_current_config_is_read_on_every_batch():
    put_input, config = make()
    msg = Message("T", b"x" * 100)
    assert put_input.encode([msg], False)[1] is None
    config[0] = dataclasses.replace(config[0], max_message_size=50)
    assert put_input.encode([msg], False)[1].status is PutStatus.MESSAGE_ILLEGAL


def test_system_topics_only_where_allowed():
    put_input, _ = make()
    own = Message("rmq_sys_CONSUMER_STATE", b"record")
    assert put_input.encode([own], False)[1].status is PutStatus.MESSAGE_ILLEGAL
    assert put_input.encode([own], True)[1] is None
    assert put_input.encode([own], False)[1].status is PutStatus.MESSAGE_ILLEGAL  # cache per kind
