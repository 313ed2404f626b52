"""Transaction record formats (half, commit and op records; transaction ids), without a node."""
from __future__ import annotations

import pytest

from cluster.messaging import transaction_records as tr
from proto.apache.rocketmq.v2 import definition_pb2 as d
from store import codec
from tests.support.v2 import TX_TOPIC as TOPIC
from tests.support.v2 import tx_msg


def _record(msg, queue_offset=5, phy=4096):
    enc = codec.encode(msg, store_host="10.0.0.7:10911")
    enc.patch(queue_offset, phy, 1_700_000_000_123)
    return codec.decode(bytes(enc.data))


def test_half_commit_and_op_records_round_trip():
    from store.codec import Message
    v2 = tx_msg()
    v2.system_properties.orphaned_transaction_recovery_duration.seconds = 30
    msg = Message(topic=TOPIC, body=b"b", queue_id=3, born_timestamp=1_700_000_000_000,
                  born_host="10.0.0.9:0",
                  properties={"UNIQ_KEY": "01AB", "TAGS": "t", "KEYS": "k1 k2", "color": "red"})
    half = _record(tr.half_message(msg, v2))
    assert (half.topic, half.queue_id) == (tr.HALF_TOPIC, 0)
    assert (tr.real_destination(half), tr.root_of(half), tr.check_times(half),
            tr.immunity_ms(half)) == ((TOPIC, 3), 5, 0, 30_000)
    copy = _record(tr.renewed_half(half, tr.root_of(half), 4), queue_offset=9, phy=8192)
    assert (tr.root_of(copy), tr.check_times(copy), copy.body, copy.born_host) == \
        (5, 4, b"b", "10.0.0.9:0")
    real = _record(tr.committed_message(copy), queue_offset=0, phy=9000)
    assert (real.topic, real.queue_id, real.prepared_transaction_offset) == (TOPIC, 3, 8192)
    assert real.sys_flag & codec.SysFlag.TRANSACTION_MASK == codec.SysFlag.TRANSACTION_COMMIT_TYPE
    assert not set(real.properties) & {"REAL_TOPIC", "REAL_QID", "TRAN_MSG",
                                       "TRAN_PREPARED_QUEUE_OFFSET"}
    assert real.properties["color"] == "red" and real.properties["PGROUP"] == TOPIC
    v2_check = tr.half_to_v2(copy)
    assert (v2_check.topic.name, v2_check.system_properties.queue_id,
            v2_check.system_properties.message_id) == (TOPIC, 3, "01AB")
    op = _record(tr.op_message(9))
    assert (op.topic, op.tags, op.body, tr.op_offsets(op)) == (tr.OP_TOPIC, "d", b"9", [9])
    batched = _record(codec.Message(topic=tr.OP_TOPIC, body=b"1,2, 7,x",
                                    properties={"TAGS": "d"}))
    assert tr.op_offsets(batched) == [1, 2, 7]  # RocketMQ 5 batches offsets; junk is skipped
    other_tag = _record(codec.Message(topic=tr.OP_TOPIC, body=b"1", properties={"TAGS": "x"}))
    assert tr.op_offsets(other_tag) == []
    key = b"test-key"
    issued = tr.transaction_id(key, half.msg_id, TOPIC, "01AB")
    assert tr.transaction_offset(key, issued, TOPIC, "01AB") == (4096, half.msg_id)
    forged = tr.transaction_id(b"other-key", half.msg_id, TOPIC, "01AB")
    for bad, topic, message_id in (("", TOPIC, "01AB"), ("zz", TOPIC, "01AB"),
                                   ("AB" * 10, TOPIC, "01AB"),
                                   (half.msg_id, TOPIC, "01AB"),  # the old format, unchecked
                                   (issued, "Other", "01AB"), (issued, TOPIC, "01AC"),
                                   (forged, TOPIC, "01AB"), (issued[:-1], TOPIC, "01AB")):
        with pytest.raises(Exception) as e:
            tr.transaction_offset(key, bad, topic, message_id)
        assert e.value.code == d.INVALID_TRANSACTION_ID, bad
