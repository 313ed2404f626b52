"""Role-aware routing of the consumer calls (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue, UpdateOffset, GetOffset, QueryAssignment, and ReceiveMessages
and AckAndReceive of proto/batch_receive.proto).

Consumer state lives on the master (cluster/consume/), so a master answers them itself and a
slave forwards them unchanged to its master over the forwarder's channel (marked so they are
never forwarded twice), like SendMessage. A slave forwards ReceiveMessages as it is (the
master bounds the answer's size); a master that does not serve it (UNIMPLEMENTED: an older
version during an upgrade) gets the v2 ReceiveMessage instead, whose stream the slave folds
into one response (`folded`). AckAndReceive is AckMessage, then ReceiveMessages, on this
node; a slave forwards it whole (one round trip to the master), and as those two calls to a
master that does not serve it. The official clients stay on whichever node of the
route answers, so a consumer connected to a slave keeps working, also across a failover.

QueryAssignment (push consumers) answers one assignment per readable queue of the topic, each
with the group's endpoints: every queue is consumed through ReceiveMessage on this broker group.
"""
from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Callable

import grpc

from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from cluster.consume.consumer_calls import ConsumerCalls
from cluster.consume.delivery_bytes import set_ack
from cluster.v2.convert import check_group_resource, check_topic_resource
from cluster.messaging.route import endpoints, message_queues
from cluster.messaging.send import forward_error
from cluster.v2.v2_status import V2Error, v2_route
from cluster.config.node_role import Forward

if TYPE_CHECKING:
    from cluster.messaging.messaging_service import MessagingService

# method -> (ConsumerCalls attribute, response class, server-streaming)
CALLS = {
    "ReceiveMessage": ("receive", s.ReceiveMessageResponse, True),
    "AckMessage": ("ack", s.AckMessageResponse, False),
    "ChangeInvisibleDuration": ("change_invisible", s.ChangeInvisibleDurationResponse, False),
    "ForwardMessageToDeadLetterQueue": ("forward_to_dlq",
                                        s.ForwardMessageToDeadLetterQueueResponse, False),
    "UpdateOffset": ("update_offset", s.UpdateOffsetResponse, False),
    "GetOffset": ("get_offset", s.GetOffsetResponse, False),
}
# The calls with a form of their own on the event loop, for a master whose waits can be awaited
# there (MasterRole.puts_on_loop): ConsumerCalls' coroutine of that name.
ON_LOOP = {"AckMessage": "ack_async", "ChangeInvisibleDuration": "change_invisible_async",
           "ForwardMessageToDeadLetterQueue": "forward_to_dlq_async"}


def check_names(request) -> None:
    """The group and topic names of a consumer call, checked on a slave before it forwards
    the call (a refusal then costs the master nothing; the master checks everything again)."""
    if not check_group_resource(request.group):
        raise V2Error(d.ILLEGAL_CONSUMER_GROUP, "the consumer group is required")
    by_queue = "message_queue" in request.DESCRIPTOR.fields_by_name
    check_topic_resource(request.message_queue.topic if by_queue else request.topic)


class ConsumerRouter:
    """Routes each consumer call by the node's role (the module docstring): a master answers it
    through ConsumerCalls, on the event loop or in the thread pool as the call's waits allow;
    a slave checks the names and forwards it to its master. Owns no state of its own: the
    consumer state is ConsumerCalls', the role and forwarder the MessagingService's, so it
    takes no lock and is called from the loop and pool threads alike."""

    def __init__(self, service: "MessagingService", calls: ConsumerCalls) -> None:
        self.service = service
        self.calls = calls

    def call(self, method: str, request, *, forwarded: bool = False, timeout: float | None = None,
             client_id: str = "", time_remaining: Callable[[], float | None] = lambda: None):
        """The answer (a list of responses for ReceiveMessage)."""
        attribute, response_cls, streaming = CALLS[method]
        try:
            target = v2_route(self.service.role, forwarded=forwarded)
            if not isinstance(target, Forward):
                fn = getattr(self.calls, attribute)
                return fn(request, time_remaining) if streaming else fn(request)
            check_names(request)
            return self._forward(target.address, method, request, streaming, timeout, client_id)
        except V2Error as e:
            answer = response_cls(status=e.status())
            return [answer] if streaming else answer

    async def call_async(self, method: str, request, *, forwarded: bool = False,
                         timeout: float | None = None, client_id: str = "",
                         time_remaining: Callable[[], float | None] = lambda: None):
        """`call` on the server's event loop: a master's ReceiveMessage waits there, a call
        the master answers at once runs there, and so do the ack, nack and forward to the DLQ
        of a master that waits for slaves or a flush (ON_LOOP: the waits awaited); the rest
        (forwards) in the thread pool."""
        attribute, response_cls, streaming = CALLS[method]
        master = self.service.role.master
        if streaming and master is not None:
            try:
                return await self._receive_on_master(master, self.calls.receive_async, request,
                                                     forwarded, time_remaining)
            except V2Error as e:
                return [response_cls(status=e.status())]
        if not streaming and self.service.answers_at_once(forwarded=forwarded):
            return self.call(method, request, forwarded=forwarded, timeout=timeout,
                             client_id=client_id)
        on_loop = ON_LOOP.get(method)
        if on_loop is not None and self.service.puts_on_loop(forwarded=forwarded):
            try:  # committed on the loop, the slaves' acks awaited there
                return await getattr(self.calls, on_loop)(request)
            except V2Error as e:
                return response_cls(status=e.status())
        return await asyncio.to_thread(self.call, method, request, forwarded=forwarded,
                                       timeout=timeout, client_id=client_id,
                                       time_remaining=time_remaining)

    async def receive_batch_async(self, request: s.ReceiveMessageRequest, *,
                                  forwarded: bool = False, timeout: float | None = None,
                                  client_id: str = "",
                                  time_remaining: Callable[[], float | None] = lambda: None
                                  ) -> br.ReceiveMessagesResponse:
        """ReceiveMessages: a master answers it on the loop like ReceiveMessage; a slave
        forwards it to its master (the module doc)."""
        master = self.service.role.master
        try:
            if master is not None:
                return await self._receive_on_master(master, self.calls.receive_batch_async,
                                                     request, forwarded, time_remaining)
            answer = await self._forward_as_is("ReceiveMessages", request, (request,),
                                               forwarded, timeout, client_id)
            if answer is not None:
                return answer
        except V2Error as e:
            return br.ReceiveMessagesResponse(status=e.status())
        return folded(await self.call_async("ReceiveMessage", request, forwarded=forwarded,
                                            timeout=timeout, client_id=client_id,
                                            time_remaining=time_remaining))

    async def ack_and_receive_async(self, request: br.AckAndReceiveRequest, *,
                                    forwarded: bool = False, timeout: float | None = None,
                                    client_id: str = "",
                                    time_remaining: Callable[[], float | None] = lambda: None
                                    ) -> br.ReceiveMessagesResponse:
        """AckAndReceive: the request's ack as AckMessage, then its receive as
        ReceiveMessages, each answered as that call would be (proto/batch_receive.proto); the
        receive sees the ack applied (a FIFO group's next message is free for it). A master
        appends the ack's record with the receive's deliveries
        (ConsumerCalls.ack_and_receive_batch_async); a slave forwards the call whole."""
        calls = dict(forwarded=forwarded, timeout=timeout, client_id=client_id)
        master = self.service.role.master
        if master is not None and request.HasField("ack"):
            try:
                ack, answer = await self._receive_on_master(
                    master, partial(self.calls.ack_and_receive_batch_async, request.ack),
                    request.receive, forwarded, time_remaining)
            except V2Error as e:  # not the master any more: nothing was applied
                ack = s.AckMessageResponse(status=e.status())
                answer = br.ReceiveMessagesResponse(status=e.status())
            set_ack(answer, ack)
            return answer
        if master is None:
            named = (request.receive,) + ((request.ack,) if request.HasField("ack") else ())
            try:
                answer = await self._forward_as_is("AckAndReceive", request, named, forwarded,
                                                   timeout, client_id)
            except V2Error as e:
                return br.ReceiveMessagesResponse(status=e.status())
            if answer is not None:
                return answer
        ack = None
        if request.HasField("ack"):
            ack = await self.call_async("AckMessage", request.ack, **calls)
            remaining = time_remaining()
            if remaining is not None:  # a forwarded receive gets what the ack left of it
                calls["timeout"] = remaining
        answer = await self.receive_batch_async(request.receive, time_remaining=time_remaining,
                                                **calls)
        if ack is not None:
            set_ack(answer, ack)
        return answer

    async def _receive_on_master(self, master, receive, request, forwarded: bool,
                                 time_remaining: Callable[[], float | None]):
        """`receive` (either answer form of ConsumerCalls) on the loop: the checks and attempts
        run there when the master answers at append, its waits are awaited there."""
        v2_route(self.service.role, forwarded=forwarded)
        return await receive(request, time_remaining, inline=master.answers_at_append,
                             attempts_inline=master.answers_at_append or master.puts_on_loop)

    def _forward(self, address: str, method: str, request, streaming: bool,
                 timeout: float | None, client_id: str):
        forwarder = self.service.forwarder
        limit = _limit(timeout)
        if not streaming:
            return forwarder.call(address, method, request, limit, client_id)
        try:
            stream = getattr(forwarder.stub(address), method)(
                request, timeout=max(0.05, limit),
                metadata=forwarder.metadata(client_id))
            return list(stream)
        except grpc.RpcError as e:
            raise forward_error(e, address, method) from None

    async def _forward_as_is(self, method: str, request, named: tuple, forwarded: bool,
                             timeout: float | None, client_id: str):
        """A BatchReceive call (`method`) on a node that is not master: the names in `named`
        checked here, then the master's answer to the call as it is. None when the route says
        this node answers itself, or when the master does not serve `method` (the caller
        then makes the v2 calls). V2Error when refused here or the master cannot be reached."""
        target = v2_route(self.service.role, forwarded=forwarded)
        if not isinstance(target, Forward):
            return None
        for part in named:
            check_names(part)
        return await asyncio.to_thread(self.service.forwarder.call, target.address, method,
                                       request, _limit(timeout), client_id, unimplemented=None)

    def query_assignment(self, request: s.QueryAssignmentRequest) -> s.QueryAssignmentResponse:
        try:
            topic = check_topic_resource(request.topic)
            if not check_group_resource(request.group):
                raise V2Error(d.ILLEGAL_CONSUMER_GROUP, "the consumer group is required")
            config = self.service.topics.get(topic)
            if config is None:
                raise V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        except V2Error as e:
            return s.QueryAssignmentResponse(status=e.status())
        svc = self.service
        queues = message_queues(request.topic, config, svc.config.broker_name,
                                endpoints(svc.group_addresses()))
        answer = s.QueryAssignmentResponse(status=d.Status(code=d.OK, message="OK"))
        for mq in queues:
            if mq.permission in (d.READ, d.READ_WRITE):
                answer.assignments.append(d.Assignment(message_queue=mq))
        return answer


def _limit(timeout: float | None) -> float:
    """A forwarded call's deadline from the client's: a call without a deadline reports an
    unusable time_remaining, so 60 s."""
    return 60.0 if timeout is None or not 0 < timeout < 3600 else timeout - 0.05


def folded(responses: list[s.ReceiveMessageResponse]) -> br.ReceiveMessagesResponse:
    """A v2 ReceiveMessage stream's responses as one ReceiveMessagesResponse: its status, its
    delivery timestamp, its messages in order."""
    out = br.ReceiveMessagesResponse()
    for r in responses:
        kind = r.WhichOneof("content")
        if kind == "message":
            out.messages.append(r.message)
        elif kind == "status":
            if not out.HasField("status"):
                out.status.CopyFrom(r.status)
        elif kind == "delivery_timestamp":
            out.delivery_timestamp.CopyFrom(r.delivery_timestamp)
    if not out.HasField("status"):
        out.status.CopyFrom(d.Status(code=d.INTERNAL_ERROR,
                                     message="the master's ReceiveMessage answer had no status"))
    return out
