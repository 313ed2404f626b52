"""RocketMQ 5 (apache.rocketmq.v2) messages and calls over our generated stubs, for the tests
of the messaging and consume packages: build messages, send, pull, receive, ack, routes and
offsets, and the transactional ones (half messages, EndTransaction, a producer's Telemetry
stream, the check-back service at a chosen time)."""
from __future__ import annotations

import gzip
import queue
import threading
import time
from typing import TYPE_CHECKING

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from cluster.v2.convert import SendLimits
from cluster.messaging.route import TopicDefaults, TopicRegistry
from cluster.metadata.topic_table import TopicTable
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from common.clock import ManualClock

from tests.support.nodes import settle
from tests.support.streams import Outbox

if TYPE_CHECKING:
    from tests.support.leader_store import LeaderStore

G = d.Resource(name="G")


def duration(seconds: float) -> Duration:
    return Duration(seconds=int(seconds), nanos=int(seconds % 1 * 1e9))


def msg(topic: str = "T", body: bytes = b"hello", **sp) -> d.Message:
    """A v2 message; `user` is its user properties, the other keywords SystemProperties
    fields (a fresh message_id unless given)."""
    user = sp.pop("user", {})
    sp.setdefault("message_id", f"01{time.monotonic_ns():032X}")
    return d.Message(topic=d.Resource(name=topic), body=body, user_properties=user,
                     system_properties=d.SystemProperties(**sp))


def mq(topic: str = "T", queue_id: int = 0) -> d.MessageQueue:
    return d.MessageQueue(topic=d.Resource(name=topic), id=queue_id)


def send(stub, topic: str, bodies, **sp) -> s.SendMessageResponse:
    """One SendMessage with a message per body; asserts OK."""
    r = stub.SendMessage(s.SendMessageRequest(messages=[msg(topic, b, **sp) for b in bodies]),
                         timeout=10)
    assert r.status.code == d.OK, r.status
    return r


def route(stub, topic: str = "T", **kw) -> s.QueryRouteResponse:
    return stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), timeout=5, **kw)


def pull(stub, topic: str, queue_id: int, offset: int, batch: int = 32, tags: str = "*",
         wait: float = 0.0, timeout: float = 10):
    """(status, messages, next_offset); next_offset is None for a refused request."""
    req = s.PullMessageRequest(group=G, offset=offset, batch_size=batch,
                               message_queue=mq(topic, queue_id),
                               filter_expression=d.FilterExpression(type=d.TAG, expression=tags))
    if wait:
        req.long_polling_timeout.CopyFrom(duration(wait))
    items = list(stub.PullMessage(req, timeout=timeout))
    assert items[0].WhichOneof("content") == "status"
    if len(items) == 1:  # a refused request: the status only
        assert items[0].status.code != d.OK
        return items[0].status, [], None
    assert items[-1].WhichOneof("content") == "next_offset"
    return items[0].status, [i.message for i in items[1:-1]], items[-1].next_offset


def query_offset(stub, topic: str, queue_id: int, policy: int, ts_ms: int | None = None) -> int:
    req = s.QueryOffsetRequest(message_queue=mq(topic, queue_id), query_offset_policy=policy)
    if ts_ms is not None:
        req.timestamp.CopyFrom(Timestamp(seconds=ts_ms // 1000, nanos=ts_ms % 1000 * 1_000_000))
    r = stub.QueryOffset(req, timeout=5)
    assert r.status.code == d.OK, r.status
    return r.offset


def receive_request(topic: str = "T", group: d.Resource = G, tags: str = "*", n: int = 32,
                    invisible: float = 1.0, wait: float = 0.0, qid: int = 0
                    ) -> s.ReceiveMessageRequest:
    return s.ReceiveMessageRequest(
        group=group, message_queue=mq(topic, qid), batch_size=n,
        filter_expression=d.FilterExpression(type=d.TAG, expression=tags),
        invisible_duration=duration(invisible), long_polling_timeout=duration(wait))


def receive(stub, topic: str = "T", group: d.Resource = G, tags: str = "*", n: int = 32,
            invisible: float = 1.0, wait: float = 0.0, qid: int = 0, timeout: float = 10):
    """(status, messages) of one ReceiveMessage. `wait` is the long-polling timeout: 0 asks
    what is there now (settle() after sends first); on a ManualClock node a longer wait on an
    empty queue ends only when the test advances the clock, or at the call's `timeout`."""
    req = receive_request(topic, group, tags, n, invisible, wait, qid)
    out = list(stub.ReceiveMessage(req, timeout=timeout))
    assert out[0].WhichOneof("content") == "status"
    kinds = [r.WhichOneof("content") for r in out[1:]]
    assert kinds[:1] == (["delivery_timestamp"] if out[0].status.code == d.OK else [])
    return out[0].status, [r.message for r in out[1:] if r.HasField("message")]


def ack(stub, messages, topic: str = "T", group: d.Resource = G) -> s.AckMessageResponse:
    return stub.AckMessage(s.AckMessageRequest(group=group, topic=d.Resource(name=topic), entries=[
        s.AckMessageEntry(message_id=m.system_properties.message_id,
                          receipt_handle=m.system_properties.receipt_handle) for m in messages]),
        timeout=10)


def bodies(messages) -> list[bytes]:
    return sorted(m.body for m in messages)


def topic_registry(leader: "LeaderStore", auto_create: bool = True,
                   queues: int = 4) -> TopicRegistry:
    """A TopicRegistry on the replicated topic table of a LeaderStore (the `leader` fixture)."""
    return TopicRegistry(TopicTable(leader.role, leader.store, leader.clock),
                         lambda: TopicDefaults(auto_create, queues))


# -- sends the messaging service refuses --------------------------------------------------------
NOW = 1_800_000_000_000  # the store's clock in the tests of convert.py and send.py
LIMITS = SendLimits(max_body=1024, max_delay_ms=3 * 86_400_000)
# (what, messages of one SendMessage, the code it is refused with) under LIMITS at NOW
ILLEGAL = [
    ("empty topic", [msg(topic="")], d.ILLEGAL_TOPIC),
    ("bad topic chars", [msg(topic="a b")], d.ILLEGAL_TOPIC),
    ("topic too long", [msg(topic="t" * 128)], d.ILLEGAL_TOPIC),
    ("system topic", [msg(topic="SCHEDULE_TOPIC_XXXX")], d.ILLEGAL_TOPIC),
    ("tag with |", [msg(tag="a|b")], d.ILLEGAL_MESSAGE_TAG),
    ("blank tag", [msg(tag="  ")], d.ILLEGAL_MESSAGE_TAG),
    ("tag control char", [msg(tag="a\x01")], d.ILLEGAL_MESSAGE_TAG),
    ("blank key", [msg(keys=["ok", " "])], d.ILLEGAL_MESSAGE_KEY),
    ("key control char", [msg(keys=["a\nb"])], d.ILLEGAL_MESSAGE_KEY),
    ("reserved property", [msg(user={"UNIQ_KEY": "x"})], d.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("reserved delay", [msg(user={"DELAY": "3"})], d.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("property separator", [msg(user={"a\x02": "x"})], d.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("property value separator", [msg(user={"a": "x\x01y"})], d.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("blank property name", [msg(user={" ": "x"})], d.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("body too large", [msg(body=b"x" * 1025)], d.MESSAGE_BODY_TOO_LARGE),
    ("gzip too large", [msg(body=gzip.compress(b"x" * 1025), body_encoding=d.GZIP)],
     d.MESSAGE_BODY_TOO_LARGE),
    ("body empty", [msg(body=b"")], d.MESSAGE_BODY_EMPTY),
    ("not gzip", [msg(body=b"plain", body_encoding=d.GZIP)], d.MESSAGE_CORRUPTED),
    ("too many properties", [msg(user={f"p{i}": "v" for i in range(129)})],
     d.MESSAGE_PROPERTIES_TOO_LARGE),
    ("properties too large", [msg(user={"p": "v" * 17000})], d.MESSAGE_PROPERTIES_TOO_LARGE),
    ("no message id", [msg(message_id="")], d.ILLEGAL_MESSAGE_ID),
    ("blank group", [msg(message_type=d.FIFO, message_group=" ")], d.ILLEGAL_MESSAGE_GROUP),
    ("long group", [msg(message_type=d.FIFO, message_group="g" * 64)], d.ILLEGAL_MESSAGE_GROUP),
    ("delivery too late", [msg(message_type=d.DELAY,
                              delivery_timestamp=Timestamp(seconds=NOW // 1000 + 4 * 86400))],
     d.ILLEGAL_DELIVERY_TIME),
    ("bad nanos", [msg(born_timestamp=Timestamp(seconds=1, nanos=-1))], d.BAD_REQUEST),
    ("unknown encoding", [msg(body_encoding=7)], d.BAD_REQUEST),
    ("no message", [], d.MESSAGE_CORRUPTED),
    ("mixed topics", [msg(topic="A"), msg(topic="B")], d.MESSAGE_CORRUPTED),
    ("lite", [msg(message_type=d.LITE)], d.NOT_IMPLEMENTED),
    ("one bad message of a batch", [msg(), msg(tag="a|b")], d.ILLEGAL_MESSAGE_TAG),
]


# -- transactions -------------------------------------------------------------------------------
TX_TOPIC = "Tx"
TX_TIMEOUT_MS = 60_000  # transactionTimeOut: never reached by the real clock during a test
# NodeConfig keys of the transaction tests: one queue, and a check-back service whose own
# thread never runs a round while a test looks (tests step it with checker_at).
TX_KEYS = dict(default_topic_queue_nums=1, transaction_timeout_ms=TX_TIMEOUT_MS,
               transaction_check_interval_ms=3600_000)


def tx_msg(body: bytes = b"order", topic: str = TX_TOPIC, **sp) -> d.Message:
    sp.setdefault("message_type", d.TRANSACTION)
    return msg(topic, body, **sp)


def send_half(stub, body: bytes = b"order", **sp) -> s.SendResultEntry:
    r = stub.SendMessage(s.SendMessageRequest(messages=[tx_msg(body, **sp)]), timeout=5)
    assert r.status.code == d.OK, r.status
    [entry] = r.entries
    return entry


def end(stub, entry, resolution=d.COMMIT, topic: str = TX_TOPIC, transaction_id=None,
        message_id=None, source=d.SOURCE_CLIENT) -> d.Status:
    return stub.EndTransaction(s.EndTransactionRequest(
        topic=d.Resource(name=topic),
        message_id=entry.message_id if message_id is None else message_id,
        transaction_id=entry.transaction_id if transaction_id is None else transaction_id,
        resolution=resolution, source=source), timeout=5).status


def pull_all(stub, topic: str = TX_TOPIC, queues: int = 1) -> list[d.Message]:
    """Every message of the topic's first `queues` queues from offset 0 (none when refused)."""
    return [m for queue_id in range(queues) for m in pull(stub, topic, queue_id, 0)[1]]


def queue_records(node, topic: str, queue_id: int = 0):
    """The stored records of one queue (after settling the node)."""
    settle(node)
    store = node.store
    return store.get_messages(topic, queue_id, store.min_offset_in_queue(topic, queue_id),
                              64).messages


class Producer:
    """A producer's Telemetry stream: settings sent, replies and pushed commands collected."""

    def __init__(self, stub, topics=(TX_TOPIC,), client_id: str = "producer-1") -> None:
        self.requests = Outbox()
        self.received: queue.Queue = queue.Queue()
        self.call = stub.Telemetry(iter(self.requests), timeout=60,
                                   metadata=[("x-mq-client-id", client_id)])
        self.thread = threading.Thread(target=self._collect, daemon=True)
        self.thread.start()
        settings = d.Settings(client_type=d.PRODUCER,
                              publishing=d.Publishing(topics=[d.Resource(name=t) for t in topics]))
        self.requests.put(s.TelemetryCommand(settings=settings))
        reply = self.received.get(timeout=5)
        assert reply.status.code == d.OK and reply.settings.publishing.max_body_size > 0

    def _collect(self) -> None:
        try:
            for item in self.call:
                self.received.put(item)
        except grpc.RpcError:
            pass

    def command(self, timeout: float = 5.0) -> s.RecoverOrphanedTransactionCommand:
        item = self.received.get(timeout=timeout)
        assert item.WhichOneof("command") == "recover_orphaned_transaction_command", item
        return item.recover_orphaned_transaction_command

    def close(self) -> None:
        self.requests.close()
        self.call.cancel()


def checker_at(node, clock_ms: int):
    """The node's transaction check-back service, its clock set to `clock_ms`."""
    checker = node.messaging.transaction_checker
    checker.clock = ManualClock(clock_ms)
    return checker


def later(seconds: float = TX_TIMEOUT_MS / 1000 + 1) -> int:
    """Wall-clock ms `seconds` from now (by default just past transactionTimeOut)."""
    return int(time.time() * 1000 + seconds * 1000)
