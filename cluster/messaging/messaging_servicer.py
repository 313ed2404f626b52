"""gRPC adapter of apache.rocketmq.v2.MessagingService. Every answer carries a v2 Status (errors
included: the official clients read the Status, not the gRPC code). Signatures and permissions
are checked before a call gets here (v2_access.py, a server interceptor); an unexpected exception
answers INTERNAL_ERROR and is logged.

Where each method runs (a coroutine on the server's event loop, or a plain function in its
thread pool) is cluster/serving/execution.py's table; the methods below follow it.
Consumer calls go through the role-aware router (consumer_router.py). BatchReceiveServicer
serves proto/batch_receive.proto's ReceiveMessages (ReceiveMessage answered in one response)
and AckAndReceive (an AckMessage, then a ReceiveMessages) the same way. Not implemented, answered
with NOT_IMPLEMENTED (50100), never a fake success: RecallMessage, SyncLiteSubscription.
"""
from __future__ import annotations

import logging
from typing import Awaitable

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass

from proto import batch_receive_pb2 as br
from proto import batch_receive_pb2_grpc as br_grpc
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from proto.apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from cluster.v2.v2_status import V2Error, not_implemented
from cluster.messaging.send import FORWARDED_HEADER
from cluster.messaging.messaging_service import MessagingService

log = logging.getLogger(__name__)


def peer_ip(context: grpc.ServicerContext) -> str:
    peer = context.peer() or ""  # "ipv4:127.0.0.1:5555" / "ipv6:[::1]:5555"
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6" and rest.startswith("["):
        return rest[1:].partition("]")[0]
    return ""


def _metadata(context: grpc.ServicerContext) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def _failure(response_cls, e: Exception):
    """The answer to a call that raised: its V2Error's status, or INTERNAL_ERROR (logged): the
    client must not hang or crash."""
    if isinstance(e, V2Error):
        return response_cls(status=e.status())
    log.exception("%s failed", response_cls.__name__)
    return response_cls(status=d.Status(code=d.INTERNAL_ERROR,
                                        message=f"{type(e).__name__}: {e}"))


async def _streamed(response_cls, answer: Awaitable[list]):
    """The responses of a server-streaming call, or one status when it raised (the client
    must not hang or crash)."""
    try:
        responses = await answer
    except Exception as e:
        responses = [_failure(response_cls, e)]
    for response in responses:
        yield response


class MessagingServicer(s_grpc.MessagingServiceServicer):
    """The gRPC adapter of one node's MessagingService: maps each call to the service, its
    router or its reader, and any exception to an answer with a status. Owns nothing."""
    SERVICE = s.DESCRIPTOR.services_by_name["MessagingService"]

    def __init__(self, service: MessagingService) -> None:
        self.service = service

    @staticmethod
    async def _answer(response_cls, answer: Awaitable):
        try:
            return await answer
        except Exception as e:
            return _failure(response_cls, e)

    @staticmethod
    def _call_info(context) -> dict:
        # one pass for the two keys wanted (every call comes here: no dict of all of them)
        forwarded, client_id = False, ""
        for key, value in context.invocation_metadata() or ():
            if key == FORWARDED_HEADER:
                forwarded = value == "1"
            elif key == "x-mq-client-id" and isinstance(value, str):
                client_id = value
        left = context.time_remaining()
        if left is not None and not 0 < left < 24 * 3600:
            left = None  # a call without a deadline: grpc reports a meaningless number
        return {"forwarded": forwarded, "timeout": left, "client_id": client_id}

    # -- routes and sends -----------------------------------------------------------------------
    async def QueryRoute(self, request, context):  # noqa: N802
        return await self._answer(s.QueryRouteResponse, self.service.query_route(
            request, **self._call_info(context)))

    async def Heartbeat(self, request, context):  # noqa: N802
        return s.HeartbeatResponse(status=d.Status(code=d.OK, message="OK"))

    async def NotifyClientTermination(self, request, context):  # noqa: N802
        return s.NotifyClientTerminationResponse(status=d.Status(code=d.OK, message="OK"))

    async def SendMessage(self, request, context):  # noqa: N802
        return await self._answer(s.SendMessageResponse, self.service.send(
            request, peer_ip=peer_ip(context), **self._call_info(context)))

    async def EndTransaction(self, request, context):  # noqa: N802
        return await self._answer(s.EndTransactionResponse, self.service.end_transaction(
            request, **self._call_info(context)))

    async def QueryAssignment(self, request, context):  # noqa: N802
        try:
            return self.service.query_assignment(request)
        except Exception as e:
            return _failure(s.QueryAssignmentResponse, e)

    # -- consumer calls (consumer_router.py) ----------------------------------------------------
    async def ReceiveMessage(self, request, context):  # noqa: N802
        async for response in _streamed(s.ReceiveMessageResponse,
                                        self.service.consumer_router.receive(
                                            request, time_remaining=context.time_remaining,
                                            **self._call_info(context))):
            yield response

    async def AckMessage(self, request, context):  # noqa: N802
        return await self._answer(s.AckMessageResponse, self.service.consumer_router.ack(
            request, **self._call_info(context)))

    async def ChangeInvisibleDuration(self, request, context):  # noqa: N802
        return await self._answer(
            s.ChangeInvisibleDurationResponse,
            self.service.consumer_router.change_invisible(request, **self._call_info(context)))

    async def ForwardMessageToDeadLetterQueue(self, request, context):  # noqa: N802
        return await self._answer(
            s.ForwardMessageToDeadLetterQueueResponse,
            self.service.consumer_router.forward_to_dlq(request, **self._call_info(context)))

    async def UpdateOffset(self, request, context):  # noqa: N802
        return await self._answer(s.UpdateOffsetResponse, self.service.consumer_router.
                                  update_offset(request, **self._call_info(context)))

    async def GetOffset(self, request, context):  # noqa: N802
        return await self._answer(s.GetOffsetResponse, self.service.consumer_router.get_offset(
            request, **self._call_info(context)))

    # -- reads of any replica (pull_reader.py) ----------------------------------------------------
    async def QueryOffset(self, request, context):  # noqa: N802
        try:
            return self.service.reader.query_offset(request)
        except Exception as e:
            return _failure(s.QueryOffsetResponse, e)

    async def PullMessage(self, request, context):  # noqa: N802
        async for response in _streamed(s.PullMessageResponse, self.service.reader.pull(
                request, context.time_remaining)):
            yield response

    # -- in the thread pool (execution.py: POOL) -------------------------------------------------
    def Telemetry(self, request_iterator, context):  # noqa: N802
        md = _metadata(context)
        yield from self.service.telemetry.serve(
            request_iterator, client_id=md.get("x-mq-client-id", ""), peer=context.peer() or "",
            relayed=md.get(FORWARDED_HEADER) == "1", is_active=context.is_active)

    # -- not implemented yet ------------------------------------------------------------------
    async def RecallMessage(self, request, context):  # noqa: N802
        return s.RecallMessageResponse(status=not_implemented("RecallMessage"))

    async def SyncLiteSubscription(self, request, context):  # noqa: N802
        return s.SyncLiteSubscriptionResponse(status=not_implemented("SyncLiteSubscription"))


class BatchReceiveServicer(br_grpc.BatchReceiveServicer):
    """gRPC adapter of rmqstore.messaging.v1.BatchReceive (proto/batch_receive.proto), on the
    event loop like ReceiveMessage. Checked by the same interceptors (v2_access.py)."""
    SERVICE = br.DESCRIPTOR.services_by_name["BatchReceive"]

    def __init__(self, service: MessagingService) -> None:
        self.service = service

    async def ReceiveMessages(self, request, context):  # noqa: N802
        return await self._answer(self.service.consumer_router.receive_batch, request,
                                  context)

    async def AckAndReceive(self, request, context):  # noqa: N802
        return await self._answer(self.service.consumer_router.ack_and_receive, request,
                                  context)

    @staticmethod
    async def _answer(route, request, context) -> br.ReceiveMessagesResponse:
        """The router's answer; a call that raised answers its status (the client must not
        hang or crash)."""
        try:
            return await route(request, time_remaining=context.time_remaining,
                               **MessagingServicer._call_info(context))
        except Exception as e:
            return _failure(br.ReceiveMessagesResponse, e)


_HANDLERS = {(False, False): grpc.unary_unary_rpc_method_handler,
             (False, True): grpc.unary_stream_rpc_method_handler,
             (True, False): grpc.stream_unary_rpc_method_handler,
             (True, True): grpc.stream_stream_rpc_method_handler}


def _serialized(response) -> bytes:
    """A response message, or one kept as its bytes (cluster/consume/delivery_bytes.py)."""
    return response.SerializeToString()


def add_to_server(servicer: "MessagingServicer | BatchReceiveServicer", server) -> None:
    """What generated add_XServicer_to_server code does for the servicer's SERVICE, with
    responses that may be built as bytes (the receives' answers): the generated code
    serializes with each response class's own method, which takes only an instance of it."""
    service: ServiceDescriptor = servicer.SERVICE
    handlers = {
        m.name: _HANDLERS[(m.client_streaming, m.server_streaming)](
            getattr(servicer, m.name),
            request_deserializer=GetMessageClass(m.input_type).FromString,
            response_serializer=_serialized)
        for m in service.methods}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name,
                                                                          handlers),))
