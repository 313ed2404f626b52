"""SendMessage: one request (one message or a batch, one topic) = one append on the master.

`Sender` is the master's side: convert and validate every message (cluster/v2/convert.py; a
refusal writes nothing), find or auto-create the topic, pick ONE queue for the whole request,
append the batch with the node's put path (replication wait included) and answer one
SendResultEntry per message:
status, message_id (the client's id, stored as UNIQ_KEY), offset (queue offset) and an empty
transaction_id. A transactional message (alone in its request, without a delivery time) is
validated and gets its queue the same way, then becomes a half message (transaction.py), whose
entry carries the transaction id. A batch shares one
status (the store appends it atomically). Stored-but-late outcomes (MASTER/SLAVE_PERSISTENCE_
TIMEOUT, HA_NOT_AVAILABLE for SLAVE_NOT_AVAILABLE) still carry ids and offsets; refusals carry
only the response status.

Queue choice (RocketMQ 5 proxy's): a request whose messages all have the same message_group goes
to queue hash(group) mod writeQueueNums (Java String.hashCode, so a group always maps to the same
queue); any other request takes the topic's next queue round-robin.

`MasterForwarder` is the slave's side: the request goes unchanged (born_host filled from the
client's address when empty) to the current master's MessagingService over one kept channel,
marked with FORWARDED_HEADER so it is never forwarded twice. It carries the client's own signed
headers when it serves a client's call (the master checks the real user), else the node's
accessKey/secretKey signature (cluster/security/signature.py).
"""
from __future__ import annotations

import itertools
import logging
import threading
from typing import Awaitable, Callable, Sequence

import grpc

from proto import batch_receive_pb2_grpc as br_grpc
from proto.batch_receive_methods import BATCH_RECEIVE_METHODS
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from proto.apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from slave.replication_client import GRPC_OPTIONS
from store import codec
from store.codec import Message
from store.json_config import TopicConfig
from store.put_result import PutResult

from cluster.v2.convert import PROPERTY_SHARDING_KEY, SendLimits, to_store_messages
from cluster.v2.v2_status import V2Error, put_status
from cluster.messaging.route import TopicRegistry
from cluster.security.refusal_log import RefusalLog
from cluster.messaging.transaction_records import check_transactional_send
from cluster.security import signature
from cluster.security.tls import TlsSettings, open_channel
from cluster.serving.execution import in_pool
from common import failpoints

log = logging.getLogger(__name__)
FORWARDED_HEADER = "x-rmqstore-forwarded"
# A drill's fault (RMQSTORE_FAILPOINTS="messaging.send.drop_answer=every:<n>"): the n-th stored
# send is answered PROXY_TIMEOUT, as when its answer is lost, so the client retries it.
DROP_ANSWER = "messaging.send.drop_answer"


class QueueSelector:
    """Picks a send's queue when the client left it to the server: by the hash of the one
    message group (sharding key) the request's messages share, else round robin per topic.
    `_lock` guards creating a topic's counter; `next()` on an itertools.count is atomic
    under the GIL, so taking a turn needs no lock."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count] = {}
        self._lock = threading.Lock()

    def select(self, topic: str, write_queue_nums: int, msgs: Sequence[Message]) -> int:
        groups = {m.properties.get(PROPERTY_SHARDING_KEY) for m in msgs}
        if len(groups) == 1:
            group = groups.pop()
            if group:
                return (codec.java_string_hash(group) & 0x7FFFFFFF) % write_queue_nums
        counter = self._counters.get(topic)
        if counter is None:
            with self._lock:
                counter = self._counters.setdefault(topic, itertools.count())
        return next(counter) % write_queue_nums


Prepare = Callable[[d.Message, Message], s.SendMessageResponse]


class Sender:
    """Turns a SendMessage request into a put and the put's result into the answer, on the
    server's event loop. `put` appends on the current master and returns what to await (the
    master's Appended); `prepare` stores a transactional message as a half message, in the
    thread pool (transaction.py waits in its thread). Its state: the queue selector and the
    refusal log, each with its own lock."""

    def __init__(self, put: Callable[[list[Message]], Awaitable[PutResult]], topics: TopicRegistry,
                 limits: Callable[[], SendLimits], now_ms: Callable[[], int],
                 prepare: Prepare | None = None) -> None:
        self.put = put
        self.topics = topics
        self.limits = limits
        self.now_ms = now_ms
        self.prepare = prepare  # stores a transactional message as a half message
        self.selector = QueueSelector()
        # a store that refuses writes (DISK_FULL, not enough replicas, a failed flush) refuses
        # every send: logged once per client host and reason every 10 s, with a count
        self.refusals = RefusalLog(log)
        # client messages stored since the node started (not repeats, not transactional
        # halves): the console's produce rate (cluster/console/trends.py). Only the server's
        # event loop adds to it; readers take the int as it is.
        self.stored = 0

    async def send(self, request: s.SendMessageRequest, peer_ip: str = ""
                   ) -> s.SendMessageResponse:
        prepared = self._to_put(request, peer_ip)
        if isinstance(prepared, s.SendMessageResponse):
            return prepared
        msgs, transactional = prepared
        if transactional:
            return await in_pool(self.prepare, request.messages[0], msgs[0])
        result = await self.put(msgs)
        if result.ok:
            self.stored += len(msgs) - result.repeated
        if result.ok and failpoints.should_fire(DROP_ANSWER):
            return s.SendMessageResponse(status=d.Status(
                code=d.PROXY_TIMEOUT, message=f"failpoint {DROP_ANSWER}: the answer of a stored "
                                              f"send was dropped; the outcome is unknown"))
        return self._answer(result, msgs, peer_ip)

    def _to_put(self, request: s.SendMessageRequest, peer_ip: str
                ) -> tuple[list[Message], bool] | s.SendMessageResponse:
        """The store messages with their queue chosen and whether the send is transactional,
        or the refusal to answer."""
        try:
            transactional = check_transactional_send(request.messages)
            if transactional and self.prepare is None:
                raise V2Error(d.NOT_IMPLEMENTED, "transactional messages are not enabled here")
            topic, msgs = to_store_messages(request.messages, self.limits(), self.now_ms(), peer_ip)
            config = self.topics.get_or_create(topic)
            self._check_writable(config)
            limit = self.limits().max_body
            total = sum(len(m.body) for m in msgs)
            if len(msgs) > 1 and total > limit:
                raise V2Error(d.PAYLOAD_TOO_LARGE, f"the batch's bodies take {total} bytes, at "
                                                   f"most maxMessageSize {limit} per request")
            queue_id = self.selector.select(topic, config.write_queue_nums, msgs)
            for m in msgs:
                m.queue_id = queue_id
        except V2Error as e:
            return s.SendMessageResponse(status=e.status())
        return msgs, transactional

    def _answer(self, result: PutResult, msgs: list[Message], peer_ip: str
                ) -> s.SendMessageResponse:
        if not result.ok:
            self.refusals.refused("SendMessage", peer_ip or "?",
                                  f"{result.status.name}: {result.reason}")
        return send_response(result, msgs)

    @staticmethod
    def _check_writable(config: TopicConfig) -> None:
        if not config.writable:
            raise V2Error(d.FORBIDDEN, f"topic {config.topic_name} is not writable "
                                       f"(perm {config.perm})")


def send_response(result: PutResult, msgs: Sequence[Message],
                  transaction_ids: Sequence[str] = ()) -> s.SendMessageResponse:
    st = put_status(result)
    response = s.SendMessageResponse(status=st)
    # Each entry is added in place and starts as a copy of one template holding the status:
    # a SendResultEntry built apart and appended costs a second copy (1.5 against 0.4 µs an
    # entry, and a batch answers hundreds).
    template = s.SendResultEntry(status=st)
    add = response.entries.add
    for i, (append, m) in enumerate(zip(result.appends, msgs)):
        entry = add()
        entry.CopyFrom(template)
        entry.message_id = m.properties[_UNIQ_KEY]
        entry.offset = append.queue_offset
        if i < len(transaction_ids):
            entry.transaction_id = transaction_ids[i]
    return response


_UNIQ_KEY = codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX


# gRPC's words when no connection could be made, so the request never left this node.
_NEVER_SENT = "failed to connect to all addresses"


def forward_error(e: grpc.RpcError, address: str, method: str) -> V2Error:
    """The status a slave answers when forwarding `method` to its master failed. Only a call
    that never reached the master is INTERNAL_SERVER_ERROR (nothing stored: the client may
    retry); a deadline or a connection lost mid-call is PROXY_TIMEOUT, "outcome unknown",
    because the master may have stored the write before it went away. Answering "failed" there
    would let a stored message look like a failed send (a phantom to the client)."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    if code is grpc.StatusCode.UNAVAILABLE and _NEVER_SENT in (details or ""):
        return V2Error(d.INTERNAL_SERVER_ERROR, f"cannot forward {method} to the master "
                                                f"{address}: {details}")
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return V2Error(d.PROXY_TIMEOUT, f"the master {address} did not answer {method} in time; "
                                        f"the outcome is unknown")
    return V2Error(d.PROXY_TIMEOUT, f"forwarding {method} to the master {address} failed "
                                    f"mid-call ({code.name if code else ''} {details}); the "
                                    f"outcome is unknown")


_RAISE = object()  # MasterForwarder.call: no stand-in for UNIMPLEMENTED, raise as for any error


class MasterForwarder:
    """A slave's one channel to its current master's MessagingService (and BatchReceive,
    proto/batch_receive.proto): `call` forwards a request from a coroutine (the blocking stub
    call in the pool); the telemetry relay opens its stream on `stub`. `_lock` guards the
    channel, its stubs and the address."""

    def __init__(self, access_key: str = "", secret_key: str = "",
                 tls: TlsSettings | None = None) -> None:
        self.access_key = access_key
        self.secret_key = secret_key
        self.tls = tls
        self._lock = threading.Lock()
        self._address = ""
        self._channel: grpc.Channel | None = None
        self._stub: s_grpc.MessagingServiceStub | None = None
        self._batch_stub: br_grpc.BatchReceiveStub | None = None

    def stub(self, address: str) -> s_grpc.MessagingServiceStub:
        return self._stubs(address)[0]

    def _stubs(self, address: str) -> tuple[s_grpc.MessagingServiceStub, br_grpc.BatchReceiveStub]:
        with self._lock:
            if address != self._address or self._stub is None or self._batch_stub is None:
                if self._channel is not None:
                    self._channel.close()
                self._channel = open_channel(address, self.tls, GRPC_OPTIONS)
                self._stub = s_grpc.MessagingServiceStub(self._channel)
                self._batch_stub = br_grpc.BatchReceiveStub(self._channel)
                self._address = address
            return self._stub, self._batch_stub

    def metadata(self, client_id: str = "") -> list[tuple[str, str]]:
        md = signature.sign(self.access_key, self.secret_key, client_id)
        caller = signature.caller_headers()
        if caller:  # the client's identity, not the node's
            md = [kv for kv in md if kv[0] not in dict(caller)] + list(caller)
        return [*md, (FORWARDED_HEADER, "1")]

    async def call(self, address: str, method: str, request, timeout: float,
                   client_id: str = "", *, unimplemented: object = _RAISE,
                   streaming: bool = False):
        """The master's answer to `method` (a gRPC method name of MessagingService or
        BatchReceive; a server-streaming one with `streaming`, answered as the list of its
        responses), or V2Error when it cannot be reached in time. `unimplemented`, when
        given, is returned instead when the master does not serve the method (an older
        version during an upgrade). The channel blocks: the call runs in the pool."""
        if not address:
            raise V2Error(d.INTERNAL_SERVER_ERROR, "this slave has no master to forward to")
        return await in_pool(self._call, address, method, request, timeout, client_id,
                             unimplemented, streaming)

    def _call(self, address: str, method: str, request, timeout: float, client_id: str,
              unimplemented: object, streaming: bool):
        messaging, batch = self._stubs(address)
        stub = batch if method in BATCH_RECEIVE_METHODS else messaging
        try:
            answer = getattr(stub, method)(request, timeout=max(timeout, 0.05),
                                           metadata=self.metadata(client_id))
            return list(answer) if streaming else answer
        except grpc.RpcError as e:
            if unimplemented is not _RAISE and e.code() is grpc.StatusCode.UNIMPLEMENTED:
                return unimplemented
            raise forward_error(e, address, method) from None

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = self._batch_stub = None
            self._address = ""
