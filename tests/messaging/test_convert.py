"""v2 message <-> store message mapping and its validation codes."""
from __future__ import annotations

import gzip
import zlib

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from cluster.v2 import convert
from cluster.v2.convert import to_store_messages
from cluster.v2.v2_status import V2Error
from proto.apache.rocketmq.v2 import definition_pb2 as d
from store import codec
from store.codec import MessageRecord, SysFlag
from store.put_result import AppendResult, PutResult, PutStatus
from tests.support.v2 import ILLEGAL, LIMITS, NOW, msg

def test_system_properties_map_onto_the_record():
    message = msg(tag="TagA", keys=["k1", "k2"], user={"color": "red"}, message_type=d.NORMAL,
                  born_timestamp=Timestamp(seconds=1_700_000_000, nanos=5_000_000),
                  born_host="10.0.0.7", trace_context="trace-1", message_id="01ABCDEF")
    topic, [m] = to_store_messages([message], LIMITS, NOW, peer_ip="127.0.0.1")
    assert topic == "T" and m.topic == "T" and m.body == b"hello"
    assert m.properties == {"color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01ABCDEF",
                            "TRACE_CONTEXT": "trace-1", "__BORNHOST": "10.0.0.7"}
    assert m.born_timestamp == 1_700_000_000_005 and m.born_host == "10.0.0.7:0"


def test_born_host_falls_back_to_the_peer_and_born_time_to_the_store():
    _, [m] = to_store_messages([msg(born_host="my-laptop")], LIMITS, NOW, peer_ip="10.1.2.3")
    assert m.born_host == "10.1.2.3:0" and m.properties["__BORNHOST"] == "my-laptop"
    assert m.born_timestamp == 0  # the store stamps "now"
    _, [m] = to_store_messages([msg()], LIMITS, NOW, peer_ip="10.1.2.3")
    assert m.properties["__BORNHOST"] == "10.1.2.3"


def test_fifo_group_and_delivery_time():
    _, [fifo] = to_store_messages([msg(message_type=d.FIFO, message_group="g1")], LIMITS, NOW)
    assert fifo.properties[convert.PROPERTY_SHARDING_KEY] == "g1"
    at = NOW + 5000
    proper = Timestamp(seconds=at // 1000, nanos=(at % 1000) * 1_000_000)
    _, [delay] = to_store_messages([msg(message_type=d.DELAY, delivery_timestamp=proper)], LIMITS, NOW)
    assert delay.properties[codec.PROPERTY_TIMER_DELIVER_MS] == str(at)


def test_client_bug_milliseconds_in_seconds_is_detected():
    at = NOW + 1234  # the official clients put this into `seconds`
    _, [m] = to_store_messages([msg(message_type=d.DELAY, delivery_timestamp=Timestamp(seconds=at))],
                               LIMITS, NOW)
    assert m.properties[codec.PROPERTY_TIMER_DELIVER_MS] == str(at)


def test_gzip_body_is_stored_decompressed():
    _, [m] = to_store_messages([msg(body=gzip.compress(b"x" * 900), body_encoding=d.GZIP)], LIMITS, NOW)
    assert m.body == b"x" * 900 and m.sys_flag == 0


def test_a_batch_is_one_topic():
    topic, msgs = to_store_messages([msg(message_id=f"id{i}") for i in range(3)], LIMITS, NOW)
    assert [m.properties["UNIQ_KEY"] for m in msgs] == ["id0", "id1", "id2"]


@pytest.mark.parametrize("what, msgs, code", ILLEGAL, ids=[i[0] for i in ILLEGAL])
def test_illegal_inputs_raise_their_code(what, msgs, code):
    with pytest.raises(V2Error) as e:
        to_store_messages(msgs, LIMITS, NOW)
    assert e.value.code == code, (d.Code.Name(e.value.code), e.value.message)


def test_namespaces_are_refused_as_not_implemented():
    message = msg()
    message.topic.resource_namespace = "ns"
    with pytest.raises(V2Error) as e:
        to_store_messages([message], LIMITS, NOW)
    assert e.value.code == d.NOT_IMPLEMENTED


# -- delivery side --------------------------------------------------------------------------------
def record(props, body=b"payload", sys_flag=0, reconsume=0) -> MessageRecord:
    return MessageRecord(total_size=0, magic=codec.MAGIC_V1, body_crc=0, queue_id=2, flag=0,
                         queue_offset=7, physical_offset=4096, sys_flag=sys_flag,
                         born_timestamp=1_700_000_000_123, born_host="10.0.0.7:0",
                         store_timestamp=1_700_000_000_456, store_host="127.0.0.1:10911",
                         reconsume_times=reconsume, prepared_transaction_offset=0, body=body,
                         topic="T", properties=props)


def test_record_to_v2_carries_what_clients_need():
    m = convert.record_to_v2(record({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01AB",
                                     "color": "red", "__SHARDINGKEY": "g1"}))
    sp = m.system_properties
    assert m.topic.name == "T" and m.body == b"payload" and dict(m.user_properties) == {"color": "red"}
    assert (sp.tag, list(sp.keys), sp.message_id) == ("TagA", ["k1", "k2"], "01AB")
    assert sp.body_encoding == d.IDENTITY and sp.message_type == d.FIFO and sp.message_group == "g1"
    assert sp.body_digest.type == d.CRC32
    assert sp.body_digest.checksum == f"{zlib.crc32(b'payload'):08X}" and len(sp.body_digest.checksum) == 8
    assert sp.born_timestamp.ToMilliseconds() == 1_700_000_000_123
    assert sp.store_timestamp.ToMilliseconds() == 1_700_000_000_456
    assert (sp.born_host, sp.store_host, sp.queue_id, sp.queue_offset) == ("10.0.0.7", "127.0.0.1:10911", 2, 7)
    assert sp.delivery_attempt == 1


def test_record_without_uniq_key_gets_the_offset_message_id():
    m = convert.record_to_v2(record({}, reconsume=2))
    assert m.system_properties.message_id == codec.offset_msg_id("127.0.0.1", 10911, 4096)
    assert m.system_properties.delivery_attempt == 3 and not m.system_properties.HasField("tag")


def test_compressed_record_is_delivered_inflated():
    m = convert.record_to_v2(record({}, body=zlib.compress(b"big" * 100), sys_flag=SysFlag.COMPRESSED))
    assert m.body == b"big" * 100 and m.system_properties.body_encoding == d.IDENTITY
    assert m.system_properties.body_digest.checksum == f"{zlib.crc32(b'big' * 100):08X}"


def built_apart(rec: MessageRecord, namespace: str) -> d.Message:
    """The oracle: the delivered message as record_to_v2 used to build it, every part with its
    own constructor and then copied into its parent."""
    props = rec.properties
    body = convert.delivered_body(rec)

    def ts(ms: int) -> Timestamp:
        return Timestamp(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)
    sp = d.SystemProperties(
        keys=rec.keys, message_id=rec.uniq_key or rec.msg_id,
        body_digest=d.Digest(type=d.CRC32, checksum=f"{zlib.crc32(body):08X}"),
        body_encoding=d.IDENTITY, message_type=convert.message_type_of(props, rec.sys_flag),
        born_timestamp=ts(rec.born_timestamp),
        born_host=props.get(convert.PROPERTY_BORN_HOST) or codec.parse_host(rec.born_host)[0],
        store_timestamp=ts(rec.store_timestamp), store_host=rec.store_host,
        queue_id=rec.queue_id, queue_offset=rec.queue_offset,
        delivery_attempt=rec.reconsume_times + 1)
    if rec.tags:
        sp.tag = rec.tags
    if props.get("__SHARDINGKEY"):
        sp.message_group = props["__SHARDINGKEY"]
    if props.get("TIMER_DELIVER_MS"):
        sp.delivery_timestamp.CopyFrom(ts(int(props["TIMER_DELIVER_MS"])))
    user = {k: v for k, v in props.items() if k not in convert.RESERVED_PROPERTY_NAMES}
    return d.Message(topic=d.Resource(name=rec.topic, resource_namespace=namespace),
                     user_properties=user, system_properties=sp, body=body)


@pytest.mark.parametrize("rec", [
    record({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01AB", "color": "red",
            "__SHARDINGKEY": "g1", "TIMER_DELIVER_MS": "1700000009000"}),
    record({"__BORNHOST": "10.1.1.1", "KEYS": "only"}, reconsume=2),
    record({}, body=zlib.compress(b"big" * 100), sys_flag=SysFlag.COMPRESSED)])
@pytest.mark.parametrize("namespace", ["", "ns"])
def test_a_delivery_is_the_message_built_apart_also_inside_its_response(rec, namespace):
    """record_to_v2 sets field by field, alone or inside a ReceiveMessageResponse (no copy of
    the body): the same message as one built from its parts' constructors."""
    from proto.apache.rocketmq.v2 import service_pb2 as s
    expected = built_apart(rec, namespace)
    assert convert.record_to_v2(rec, namespace) == expected
    response = s.ReceiveMessageResponse()
    assert convert.record_to_v2(rec, namespace, out=response.message) is response.message
    assert response.message == expected and response.WhichOneof("content") == "message"


def test_send_response_entries():
    from cluster.messaging.send import send_response
    _, msgs = to_store_messages([msg(message_id="a"), msg(message_id="b")], LIMITS, NOW)
    appends = (AppendResult(0, 100, 5, NOW, "X"), AppendResult(100, 100, 6, NOW, "X"))
    r = send_response(PutResult(PutStatus.FLUSH_SLAVE_TIMEOUT, appends, "late"), msgs)
    assert r.status.code == d.SLAVE_PERSISTENCE_TIMEOUT and "late" in r.status.message
    assert [(e.message_id, e.offset, e.status.code) for e in r.entries] == [
        ("a", 5, d.SLAVE_PERSISTENCE_TIMEOUT), ("b", 6, d.SLAVE_PERSISTENCE_TIMEOUT)]
    refused = send_response(PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, (), "1 in sync"), msgs)
    assert refused.status.code == d.HA_NOT_AVAILABLE and not refused.entries
