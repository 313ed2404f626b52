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

Every call is a coroutine on the server's event loop (cluster/serving/execution.py): the
master's answer awaits its waits there, a forward awaits the master's answer (its blocking
channel call runs in the pool, send.MasterForwarder).
"""
from __future__ import annotations

from typing import Awaitable, Callable

from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from cluster.config.node_role import Forward, Role
from cluster.consume.consumer_calls import ConsumerCalls
from cluster.consume.delivery_bytes import set_ack
from cluster.consume.settle_calls import SettleCalls
from cluster.messaging.send import MasterForwarder
from cluster.v2.convert import check_group_resource, check_topic_resource
from cluster.v2.v2_status import V2Error, v2_route

NO_DEADLINE: Callable[[], float | None] = lambda: None  # noqa: E731


def check_names(request) -> None:
    """The group and topic names of a consumer call, checked on a slave before it forwards
    the call (a refusal then costs the master nothing; the master checks everything again)."""
    if not check_group_resource(request.group):
        raise V2Error(d.ILLEGAL_CONSUMER_GROUP, "the consumer group is required")
    by_queue = "message_queue" in request.DESCRIPTOR.fields_by_name
    check_topic_resource(request.message_queue.topic if by_queue else request.topic)


class ConsumerRouter:
    """Routes the consumer calls by the node's Role: the master's ConsumerCalls and SettleCalls
    answer, a slave forwards through the MasterForwarder. Owns nothing; holds the role, the
    forwarder and the calls it routes to."""

    def __init__(self, role: Role, forwarder: MasterForwarder, calls: ConsumerCalls,
                 settle: SettleCalls) -> None:
        self.role = role
        self.forwarder = forwarder
        self.calls = calls
        self.settle = settle

    async def _unary(self, method: str, request, here: Callable[[], Awaitable], response_cls, *,
                     forwarded: bool, timeout: float | None, client_id: str):
        """`here()` on the master; on a slave the master's answer to `method`; a refusal
        answered as `response_cls`'s status."""
        try:
            target = v2_route(self.role, forwarded=forwarded)
            if not isinstance(target, Forward):
                return await here()
            check_names(request)
            return await self.forwarder.call(target.address, method, request, _limit(timeout),
                                             client_id)
        except V2Error as e:
            return response_cls(status=e.status())

    async def ack(self, request: s.AckMessageRequest, *, forwarded: bool = False,
                  timeout: float | None = None, client_id: str = "") -> s.AckMessageResponse:
        return await self._unary("AckMessage", request, lambda: self.settle.ack(request),
                                 s.AckMessageResponse, forwarded=forwarded, timeout=timeout,
                                 client_id=client_id)

    async def change_invisible(self, request: s.ChangeInvisibleDurationRequest, *,
                               forwarded: bool = False, timeout: float | None = None,
                               client_id: str = "") -> s.ChangeInvisibleDurationResponse:
        return await self._unary("ChangeInvisibleDuration", request,
                                 lambda: self.settle.change_invisible(request),
                                 s.ChangeInvisibleDurationResponse, forwarded=forwarded,
                                 timeout=timeout, client_id=client_id)

    async def forward_to_dlq(self, request: s.ForwardMessageToDeadLetterQueueRequest, *,
                             forwarded: bool = False, timeout: float | None = None,
                             client_id: str = "") -> s.ForwardMessageToDeadLetterQueueResponse:
        return await self._unary("ForwardMessageToDeadLetterQueue", request,
                                 lambda: self.settle.forward_to_dlq(request),
                                 s.ForwardMessageToDeadLetterQueueResponse, forwarded=forwarded,
                                 timeout=timeout, client_id=client_id)

    async def update_offset(self, request: s.UpdateOffsetRequest, *, forwarded: bool = False,
                            timeout: float | None = None, client_id: str = ""
                            ) -> s.UpdateOffsetResponse:
        return await self._unary("UpdateOffset", request,
                                 lambda: self.calls.update_offset(request),
                                 s.UpdateOffsetResponse, forwarded=forwarded, timeout=timeout,
                                 client_id=client_id)

    async def get_offset(self, request: s.GetOffsetRequest, *, forwarded: bool = False,
                         timeout: float | None = None, client_id: str = ""
                         ) -> s.GetOffsetResponse:
        return await self._unary("GetOffset", request, lambda: self.calls.get_offset(request),
                                 s.GetOffsetResponse, forwarded=forwarded, timeout=timeout,
                                 client_id=client_id)

    async def receive(self, request: s.ReceiveMessageRequest, *, forwarded: bool = False,
                      timeout: float | None = None, client_id: str = "",
                      time_remaining: Callable[[], float | None] = NO_DEADLINE
                      ) -> list[s.ReceiveMessageResponse]:
        """ReceiveMessage: the v2 stream's responses (the master's, or its master's)."""
        try:
            target = v2_route(self.role, forwarded=forwarded)
            if not isinstance(target, Forward):
                return await self.calls.receive(request, time_remaining)
            check_names(request)
            return await self.forwarder.call(target.address, "ReceiveMessage", request,
                                             _limit(timeout), client_id, streaming=True)
        except V2Error as e:
            return [s.ReceiveMessageResponse(status=e.status())]

    async def receive_batch(self, request: s.ReceiveMessageRequest, *,
                            forwarded: bool = False, timeout: float | None = None,
                            client_id: str = "",
                            time_remaining: Callable[[], float | None] = NO_DEADLINE
                            ) -> br.ReceiveMessagesResponse:
        """ReceiveMessages: a master answers it like ReceiveMessage, in one response; a slave
        forwards it to its master (the module doc)."""
        try:
            target = v2_route(self.role, forwarded=forwarded)
            if not isinstance(target, Forward):
                return await self.calls.receive_batch(request, time_remaining)
            answer = await self._forward_as_is(target, "ReceiveMessages", request, (request,),
                                               timeout, client_id)
            if answer is not None:
                return answer
        except V2Error as e:
            return br.ReceiveMessagesResponse(status=e.status())
        return folded(await self.receive(request, forwarded=forwarded, timeout=timeout,
                                         client_id=client_id, time_remaining=time_remaining))

    async def ack_and_receive(self, request: br.AckAndReceiveRequest, *,
                              forwarded: bool = False, timeout: float | None = None,
                              client_id: str = "",
                              time_remaining: Callable[[], float | None] = NO_DEADLINE
                              ) -> br.ReceiveMessagesResponse:
        """AckAndReceive: the request's ack as AckMessage, then its receive as
        ReceiveMessages, each answered as that call would be (proto/batch_receive.proto); the
        receive sees the ack applied (a FIFO group's next message is free for it). A master
        appends the ack's record with the receive's deliveries
        (ConsumerCalls.ack_and_receive_batch); a slave forwards the call whole."""
        calls = dict(forwarded=forwarded, timeout=timeout, client_id=client_id)
        try:
            target = v2_route(self.role, forwarded=forwarded)
        except V2Error as e:
            return br.ReceiveMessagesResponse(status=e.status())
        if not isinstance(target, Forward) and request.HasField("ack"):
            try:
                ack, answer = await self.calls.ack_and_receive_batch(
                    request.ack, request.receive, time_remaining)
            except V2Error as e:  # not the master any more: nothing was applied
                ack = s.AckMessageResponse(status=e.status())
                answer = br.ReceiveMessagesResponse(status=e.status())
            set_ack(answer, ack)
            return answer
        if isinstance(target, Forward):
            named = (request.receive,) + ((request.ack,) if request.HasField("ack") else ())
            try:
                answer = await self._forward_as_is(target, "AckAndReceive", request, named,
                                                   timeout, client_id)
            except V2Error as e:
                return br.ReceiveMessagesResponse(status=e.status())
            if answer is not None:
                return answer
        ack = None
        if request.HasField("ack"):
            ack = await self.ack(request.ack, **calls)
            remaining = time_remaining()
            if remaining is not None:  # a forwarded receive gets what the ack left of it
                calls["timeout"] = remaining
        answer = await self.receive_batch(request.receive, time_remaining=time_remaining,
                                          **calls)
        if ack is not None:
            set_ack(answer, ack)
        return answer

    async def _forward_as_is(self, target: Forward, method: str, request, named: tuple,
                             timeout: float | None, client_id: str):
        """A BatchReceive call (`method`) on a node that is not master: the names in `named`
        checked here, then the master's answer to the call as it is; None when the master does
        not serve `method` (the caller then makes the v2 calls). V2Error when refused here or
        the master cannot be reached."""
        for part in named:
            check_names(part)
        return await self.forwarder.call(target.address, method, request, _limit(timeout),
                                         client_id, unimplemented=None)


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
