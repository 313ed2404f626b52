"""A slave refuses a bad SendMessage itself, before forwarding it: the master is not asked
(here it is not even there), and the answer is the field's code, not a forwarding failure."""
from __future__ import annotations

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from tests.support.v2 import duration, msg, mq


def test_a_slave_refuses_bad_sends_without_its_master(nodes):
    master = nodes.start()
    slave = nodes.slave(master)
    stub = nodes.stub(slave)
    nodes.stop(master)
    end = slave.store.max_phy_offset()
    cases = [
        (msg("T", b""), d.MESSAGE_BODY_EMPTY),
        (msg("T", b"x" * (256 * 1024 + 1)), d.MESSAGE_BODY_TOO_LARGE),
        (msg("rmq_sys_X"), d.ILLEGAL_TOPIC),
        (msg("T", message_id=""), d.ILLEGAL_MESSAGE_ID),
        (msg("T", user={"k": "v"} | {f"p{i}": "v" for i in range(200)}),
         d.MESSAGE_PROPERTIES_TOO_LARGE),
    ]
    for message, code in cases:
        r = stub.SendMessage(s.SendMessageRequest(messages=[message]), timeout=10)
        assert r.status.code == code, r.status
    assert slave.store.max_phy_offset() == end
    # a valid send still goes to the master: it is gone, so the forward fails
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg("T")]), timeout=10)
    assert r.status.code in (d.INTERNAL_SERVER_ERROR, d.PROXY_TIMEOUT), r.status


def test_a_slave_refuses_bad_consumer_names_without_its_master(nodes):
    master = nodes.start()
    slave = nodes.slave(master)
    stub = nodes.stub(slave)
    nodes.stop(master)
    bad_group, bad_topic = d.Resource(name="CID_RMQ_SYS_x"), d.Resource(name="a b")
    receive = s.ReceiveMessageRequest(group=bad_group, message_queue=mq("T"), batch_size=1,
                                      invisible_duration=duration(30))
    [answer] = list(stub.ReceiveMessage(receive, timeout=10))
    assert answer.status.code == d.ILLEGAL_CONSUMER_GROUP, answer.status
    ack = stub.AckMessage(s.AckMessageRequest(group=d.Resource(name="G"), topic=bad_topic,
                                              entries=[s.AckMessageEntry(receipt_handle="x")]),
                          timeout=10)
    assert ack.status.code == d.ILLEGAL_TOPIC, ack.status
    offset = stub.GetOffset(s.GetOffsetRequest(group=d.Resource(name="G"),
                                               message_queue=mq("rmq_sys_X")), timeout=10)
    assert offset.status.code == d.ILLEGAL_TOPIC, offset.status
