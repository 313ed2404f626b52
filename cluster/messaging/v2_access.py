"""Access control of the MessagingService: the permissions each v2 method needs, and the server
interceptor that checks them (cluster/security/access.py) before the servicer sees the call.

Method -> needs. "RocketMQ" is what RocketMQ 5's proxy asks (auth module,
DefaultAuthorizationContextBuilder); we follow it where it has the method:

| method                         | needs                                  | RocketMQ 5            |
|--------------------------------|----------------------------------------|-----------------------|
| QueryRoute                     | PUB or SUB on the topic                | same                  |
| SendMessage                    | PUB on every message's topic           | first message's topic |
| EndTransaction, RecallMessage  | PUB on the topic                       | same                  |
| ReceiveMessage                 | SUB on the group and the queue's topic | same                  |
| ReceiveMessages (ours, proto/batch_receive.proto) | as ReceiveMessage | -              |
| AckAndReceive (ours, the same proto) | as ReceiveMessage, and as AckMessage | -        |
|                                | for its ack                            |                       |
| AckMessage                     | SUB on the group and the topic         | same                  |
| ForwardMessageToDeadLetterQueue| SUB on the group and the topic         | same                  |
| QueryAssignment                | SUB on the group and the topic         | same                  |
| ChangeInvisibleDuration        | SUB on the group                       | same (no topic)       |
| Heartbeat                      | SUB on the group for consumer types,   | same                  |
|                                | a known user otherwise                 |                       |
| NotifyClientTermination        | SUB on the group when one is given     | same                  |
| Telemetry                      | a known user to open; each Settings:   | same (per Settings)   |
|                                | PUB on publishing topics, SUB on the   |                       |
|                                | subscription's group and topics        |                       |
| PullMessage, UpdateOffset,     | SUB on the group and the queue's topic | not in RocketMQ 5's   |
| GetOffset                      |                                        | list: ours            |
| QueryOffset                    | SUB on the queue's topic (no group)    | ours                  |
| SyncLiteSubscription           | SUB on the group and the topic         | ours                  |
A retry or DLQ topic is checked as its group (cluster/security/acl.py). An empty topic or group
adds no need: the call's own validation refuses it with its code.

Refusals are answers, never exceptions: the method's response with Status UNAUTHORIZED (40100:
no valid signature, unknown user, stale date) or FORBIDDEN (40300: a missing permission, named
with the user and the resource). A refused Telemetry Settings ends the stream with a FORBIDDEN
command. Refusals are logged at INFO once per client host and reason every 10 s
(cluster/security/refusal_log.py), with the count held back. Every admitted call records its signed headers (signature.set_caller) so a slave
forwards the client's identity to its master, which checks the same ACL again.
"""
from __future__ import annotations

import functools
import inspect
import logging
from typing import TYPE_CHECKING, Callable, Iterator

import grpc

from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from cluster.security.acl import Need, Perm, Refusal
from cluster.security.refusal_log import RefusalLog
from cluster.security.signature import set_caller

if TYPE_CHECKING:
    from cluster.security.access import AccessControl

log = logging.getLogger(__name__)
SERVICE = "apache.rocketmq.v2.MessagingService"
PREFIX = f"/{SERVICE}/"
# the services checked here: method path prefix -> (module, service name)
CHECKED = {PREFIX: (s, "MessagingService"),
           "/rmqstore.messaging.v1.BatchReceive/": (br, "BatchReceive")}
CONSUMER_TYPES = frozenset({d.PUSH_CONSUMER, d.SIMPLE_CONSUMER, d.PULL_CONSUMER,
                            d.LITE_PUSH_CONSUMER, d.LITE_SIMPLE_CONSUMER})


def _topic(name: str, perm: Perm, either: bool = False) -> list[Need]:
    if not name:
        return []
    need = Need.topic(name, perm)
    return [Need(need.kind, need.name, need.perm, either=True)] if either else [need]


def _group(name: str) -> list[Need]:
    return [Need.group(name)] if name else []


def _sub(group: str, topic: str) -> list[Need]:
    return _group(group) + _topic(topic, Perm.SUB)


NEEDS: dict[str, Callable] = {
    "QueryRoute": lambda r: _topic(r.topic.name, Perm.PUB, either=True),
    "SendMessage": lambda r: [n for t in dict.fromkeys(m.topic.name for m in r.messages)
                              for n in _topic(t, Perm.PUB)],
    "EndTransaction": lambda r: _topic(r.topic.name, Perm.PUB),
    "RecallMessage": lambda r: _topic(r.topic.name, Perm.PUB),
    "ReceiveMessage": lambda r: _sub(r.group.name, r.message_queue.topic.name),
    "ReceiveMessages": lambda r: _sub(r.group.name, r.message_queue.topic.name),
    "AckAndReceive": lambda r: _sub(r.receive.group.name, r.receive.message_queue.topic.name) + (
        _sub(r.ack.group.name, r.ack.topic.name) if r.HasField("ack") else []),
    "AckMessage": lambda r: _sub(r.group.name, r.topic.name),
    "ForwardMessageToDeadLetterQueue": lambda r: _sub(r.group.name, r.topic.name),
    "QueryAssignment": lambda r: _sub(r.group.name, r.topic.name),
    "ChangeInvisibleDuration": lambda r: _group(r.group.name),
    "Heartbeat": lambda r: _group(r.group.name) if r.client_type in CONSUMER_TYPES else [],
    "NotifyClientTermination": lambda r: _group(r.group.name),
    "PullMessage": lambda r: _sub(r.group.name, r.message_queue.topic.name),
    "UpdateOffset": lambda r: _sub(r.group.name, r.message_queue.topic.name),
    "GetOffset": lambda r: _sub(r.group.name, r.message_queue.topic.name),
    "QueryOffset": lambda r: _topic(r.message_queue.topic.name, Perm.SUB),
    "SyncLiteSubscription": lambda r: _sub(r.group.name, r.topic.name),
}


def needs(method: str, request) -> list[Need]:
    """The permissions `method` called with `request` needs (a known user at least)."""
    fn = NEEDS.get(method)
    return [] if fn is None else fn(request)


def settings_needs(command: s.TelemetryCommand) -> list[Need]:
    if command.WhichOneof("command") != "settings":
        return []
    st = command.settings
    out = [n for t in st.publishing.topics for n in _topic(t.name, Perm.PUB)]
    if st.HasField("subscription"):
        out += _group(st.subscription.group.name)
        out += [n for e in st.subscription.subscriptions for n in _topic(e.topic.name, Perm.SUB)]
    return out


def status_of(refusal: Refusal) -> d.Status:
    return d.Status(code=d.UNAUTHORIZED if refusal.unauthorized else d.FORBIDDEN,
                    message=refusal.message)


@functools.lru_cache(maxsize=256)  # per call on the hot path; bounded: paths are the client's
def _checked(method_path: str) -> tuple[str, type] | None:
    """(method name, response class) of a call this interceptor checks, else None."""
    prefix, _, method = method_path.rpartition("/")
    found = CHECKED.get(prefix + "/")
    if found is None:
        return None
    module, service = found
    descriptor = module.DESCRIPTOR.services_by_name[service].methods_by_name.get(method)
    return None if descriptor is None else (method, getattr(module, descriptor.output_type.name))


class V2AccessInterceptor(grpc.ServerInterceptor):
    """Checks every MessagingService and BatchReceive call with `access` before the servicer
    runs it; other services pass untouched. Holds no state of its own."""

    def __init__(self, access: "AccessControl") -> None:
        self.access = access
        self.log = RefusalLog(log, logging.INFO)

    def intercept_service(self, continuation, handler_call_details):
        checked = _checked(handler_call_details.method) if self.access.active else None
        if checked is None:
            # nothing to check (decided per call: aclEnable may change at runtime); no
            # wrapping and no permission lists on the send path
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method, response_cls = checked
        metadata = handler_call_details.invocation_metadata
        access, refusals = self.access, self.log

        def refused(request, context) -> d.Status | None:
            refusal = access.check(metadata, needs(method, request))
            if refusal is None:
                return None
            refusals.refused(method, context.peer() or "?", refusal.message)
            return status_of(refusal)

        if handler.unary_unary:
            inner_uu = handler.unary_unary
            if inspect.iscoroutinefunction(inner_uu):  # on the event loop (serving/grpc_server.py)
                async def unary_unary_async(request, context):
                    status = refused(request, context)
                    if status is not None:
                        return response_cls(status=status)
                    set_caller(metadata)  # a context variable: this call's task only
                    return await inner_uu(request, context)
                behavior = unary_unary_async
            else:
                def unary_unary(request, context):
                    status = refused(request, context)
                    if status is not None:
                        return response_cls(status=status)
                    set_caller(metadata)
                    try:
                        return inner_uu(request, context)
                    finally:
                        set_caller(None)
                behavior = unary_unary
            return grpc.unary_unary_rpc_method_handler(
                behavior, handler.request_deserializer, handler.response_serializer)

        if handler.unary_stream:
            inner_us = handler.unary_stream
            if inspect.isasyncgenfunction(inner_us):
                async def unary_stream_async(request, context):
                    status = refused(request, context)
                    if status is not None:
                        yield response_cls(status=status)
                        return
                    set_caller(metadata)
                    async for response in inner_us(request, context):
                        yield response
                stream_behavior = unary_stream_async
            else:
                def unary_stream(request, context):
                    status = refused(request, context)
                    if status is not None:
                        yield response_cls(status=status)
                        return
                    set_caller(metadata)
                    try:
                        yield from inner_us(request, context)
                    finally:
                        set_caller(None)
                stream_behavior = unary_stream
            return grpc.unary_stream_rpc_method_handler(
                stream_behavior, handler.request_deserializer, handler.response_serializer)

        if handler.stream_stream:  # Telemetry
            inner_ss = handler.stream_stream

            def stream_stream(request_iterator, context):
                who = access.authenticate(metadata)
                if isinstance(who, Refusal):
                    refusals.refused(method, context.peer() or "?", who.message)
                    yield response_cls(status=status_of(who))
                    return
                refused: list[Refusal] = []
                checked = _checked_commands(request_iterator, access, who, refused)
                set_caller(metadata)
                try:
                    yield from inner_ss(checked, context)
                finally:
                    set_caller(None)
                if refused:
                    refusals.refused("Telemetry settings", context.peer() or "?",
                                     refused[0].message)
                    yield response_cls(status=status_of(refused[0]))
            return grpc.stream_stream_rpc_method_handler(
                stream_stream, handler.request_deserializer, handler.response_serializer)

        return handler  # no stream-unary method in this service


def _checked_commands(commands: Iterator, access: "AccessControl", access_key: str,
                      refused: list[Refusal]) -> Iterator:
    """The client's commands up to the first Settings its user may not have; that one ends the
    stream (recorded in `refused`). Decided with the key proven when the stream opened."""
    for command in commands:
        wanted = settings_needs(command)
        if wanted:
            refusal = access.permit(access_key, wanted)
            if refusal is not None:
                refused.append(refusal)
                return
        yield command
