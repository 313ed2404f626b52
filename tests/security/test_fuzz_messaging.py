"""Fuzz of every MessagingService method (and BatchReceive's, ours) against a
real node: requests built from the schema
with malformed, oversized and out-of-range fields, sends that are valid but for one field, and
raw bytes that are not a valid request. Every call gets a clear answer (a v2 status with a
message that is not a server failure, or a gRPC refusal other than UNKNOWN/INTERNAL), a
refused call writes nothing (the commitlog end, which covers consume queues and replicated
tables, is unchanged), and the node keeps serving."""
from __future__ import annotations

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proto import batch_receive_pb2 as br
from proto.batch_receive_methods import BATCH_RECEIVE_METHODS
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from tests.security.fuzz_strategies import (GROUP, TOPIC, messages, method_paths,
                                            one_field_replaced, raw_bodies)
from tests.security.node_checks import Watch, assert_serving
from tests.support.nodes import settle
from tests.support.v2 import duration, msg, send

SERVICE = s.DESCRIPTOR.services_by_name["MessagingService"]
PATHS = method_paths(SERVICE) + method_paths(br.DESCRIPTOR.services_by_name["BatchReceive"])
METHODS = {m.name: m for _, m in PATHS}
CALL_TIMEOUT = 10.0
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])


@pytest.fixture(scope="module")
def node(module_nodes):
    node = module_nodes.start("fuzz")
    stub = module_nodes.stub(node)
    send(stub, TOPIC, [b"one", b"two", b"three"], tag="TagA")
    settle(node)
    return node


class Stubs:
    """The node's MessagingService stub, which also answers BatchReceive's methods (and is the
    stub assert_serving uses)."""

    def __init__(self, nodes, node) -> None:
        self.messaging, self.batch = nodes.stub(node), nodes.batch_stub(node)

    def __getattr__(self, method: str):
        return getattr(self.batch if method in BATCH_RECEIVE_METHODS else self.messaging, method)


@pytest.fixture(scope="module")
def stub(module_nodes, node):
    return Stubs(module_nodes, node)


@pytest.fixture(scope="module")
def channel(module_nodes, node):
    with grpc.insecure_channel(node.address) as ch:
        yield ch


def _call(node, stub, method: str, request) -> None:
    """One call, checked (see the module doc)."""
    watch = Watch(node)
    what = f"{method}({_short(request)})"
    try:
        if method == "Telemetry":
            stream = stub.Telemetry(iter([request]), timeout=2)
            try:
                first = next(stream, None)
            finally:
                stream.cancel()
            if first is not None and first.HasField("status"):
                watch.status(first.status, what)
            return
        answer = getattr(stub, method)(request, timeout=CALL_TIMEOUT)
        # ReceiveMessages answers ReceiveMessage's stream in one response: checked the same.
        # AckAndReceive answers an AckMessage and a receive: each a clear answer, and nothing
        # written unless one of them did its work
        if method == "AckAndReceive" and answer.HasField("ack"):
            if watch.clear(answer.ack.status, what) | watch.clear(answer.status, what):
                return
        if method in ("ReceiveMessage", "PullMessage"):
            answer = list(answer)
            assert answer and answer[0].WhichOneof("content") == "status", what
            answer = answer[0]
        watch.status(answer.status, what)
    except grpc.RpcError as e:
        if method == "Telemetry" and e.code() is grpc.StatusCode.CANCELLED:
            return  # we hung up after the first answer
        watch.error(e, what)


def _short(request) -> str:
    text = str(request).replace("\n", " ")
    return text if len(text) < 300 else text[:300] + "..."


@pytest.mark.parametrize("method", [m.name for _, m in PATHS])
def test_any_request_gets_a_clear_answer_and_refusals_write_nothing(node, stub, method):
    request_cls = METHODS[method].input_type._concrete_class

    @FUZZ
    @given(request=messages(request_cls))
    def run(request):
        _call(node, stub, method, request)

    run()
    assert_serving(node, stub)


# -- every method: a valid request but for one field ----------------------------------------------
_G, _T = d.Resource(name=GROUP), d.Resource(name=TOPIC)
_MQ = d.MessageQueue(topic=_T, id=0)
_TAGS = d.FilterExpression(type=d.TAG, expression="*")
_HANDLE = "R2:0:0:1:" + "0" * 32
VALID = {
    "QueryRoute": s.QueryRouteRequest(topic=_T),
    "Heartbeat": s.HeartbeatRequest(group=_G, client_type=d.SIMPLE_CONSUMER),
    "ReceiveMessage": s.ReceiveMessageRequest(group=_G, message_queue=_MQ, filter_expression=_TAGS,
                                              batch_size=32, invisible_duration=duration(30),
                                              long_polling_timeout=duration(0)),
    "AckMessage": s.AckMessageRequest(group=_G, topic=_T, entries=[
        s.AckMessageEntry(message_id="01AB", receipt_handle=_HANDLE)]),
    "ChangeInvisibleDuration": s.ChangeInvisibleDurationRequest(
        group=_G, topic=_T, receipt_handle=_HANDLE, invisible_duration=duration(30),
        message_id="01AB"),
    "ForwardMessageToDeadLetterQueue": s.ForwardMessageToDeadLetterQueueRequest(
        group=_G, topic=_T, receipt_handle=_HANDLE, message_id="01AB", delivery_attempt=1,
        max_delivery_attempts=16),
    "PullMessage": s.PullMessageRequest(group=_G, message_queue=_MQ, offset=0, batch_size=32,
                                        filter_expression=_TAGS,
                                        long_polling_timeout=duration(0)),
    "UpdateOffset": s.UpdateOffsetRequest(group=_G, message_queue=_MQ, offset=0),
    "GetOffset": s.GetOffsetRequest(group=_G, message_queue=_MQ),
    "QueryOffset": s.QueryOffsetRequest(message_queue=_MQ, query_offset_policy=d.BEGINNING),
    "QueryAssignment": s.QueryAssignmentRequest(topic=_T, group=_G),
    "EndTransaction": s.EndTransactionRequest(topic=_T, message_id="01AB",
                                              transaction_id="0" * 32 + "-" + "0" * 32,
                                              resolution=d.COMMIT),
    "NotifyClientTermination": s.NotifyClientTerminationRequest(group=_G),
}
VALID["ReceiveMessages"] = VALID["ReceiveMessage"]
VALID["AckAndReceive"] = br.AckAndReceiveRequest(receive=VALID["ReceiveMessage"],
                                                 ack=VALID["AckMessage"])


@pytest.mark.parametrize("method", sorted(VALID))
def test_valid_requests_but_for_one_field(node, stub, method):
    @FUZZ
    @given(request=one_field_replaced(VALID[method]))
    def run(request):
        _call(node, stub, method, request)

    _call(node, stub, method, VALID[method])  # the base itself gets a clear answer
    run()
    assert_serving(node, stub)


# -- SendMessage: valid messages but for one field ------------------------------------------------
def _valid() -> d.Message:
    return msg(TOPIC, b"fine", tag="TagA", keys=["k1"])


@st.composite
def one_bad_field(draw) -> d.Message:
    """A valid message with one field (of the message or its system properties) replaced by a
    fuzz value."""
    m = _valid()
    where = draw(st.sampled_from(["message", "system_properties"]))
    if where == "message":
        other = draw(messages(d.Message))
        target = m
    else:
        other = draw(messages(d.SystemProperties))
        target = m.system_properties
    fields = [f for f, _ in other.ListFields()] or [None]
    field = draw(st.sampled_from(fields))
    if field is not None:
        target.ClearField(field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            getattr(target, field.name).update(getattr(other, field.name))
        elif field.is_repeated:
            getattr(target, field.name).extend(getattr(other, field.name))
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(getattr(other, field.name))
        else:
            setattr(target, field.name, getattr(other, field.name))
    return m


def _big(n: int) -> s.SendMessageRequest:
    return s.SendMessageRequest(messages=[_valid() for _ in range(n)])


def _with(**sp) -> s.SendMessageRequest:
    m = _valid()
    for name, value in sp.items():
        getattr(m.system_properties, name).CopyFrom(value)
    return s.SendMessageRequest(messages=[m])


@settings(FUZZ, max_examples=150)
@given(request=st.one_of(st.lists(one_bad_field(), min_size=1, max_size=3).map(
    lambda ms: s.SendMessageRequest(messages=ms))))
@example(request=_big(1025))  # more than maxBatchMessageCount
# found by the fuzz: a born time past the Timestamp range overflowed the record (INTERNAL_ERROR)
@example(request=_with(born_timestamp=Timestamp(seconds=2 ** 63 - 1)))
@example(request=s.SendMessageRequest(messages=[msg(TOPIC, b"z" * 200_000) for _ in range(2)]))
@example(request=s.SendMessageRequest(messages=[msg(TOPIC, b"z" * 900_000)]))
def test_sends_valid_but_for_one_field(node, stub, request):
    _call(node, stub, "SendMessage", request)


def test_requests_over_the_request_size_limit_are_refused_by_grpc(node, stub):
    """grpcMaxInboundMessageSize (derived: 2 x maxMessageSize + 1 MiB = 1.5 MiB here) stops
    a request before any handler runs, instead of gRPC's former 64 MiB for every call."""
    watch = Watch(node)
    limit = node.config.limits.inbound_message_size(node.config.store.max_message_size)
    request = s.SendMessageRequest(messages=[msg(TOPIC, b"z" * limit)])
    with pytest.raises(grpc.RpcError) as e:
        stub.SendMessage(request, timeout=CALL_TIMEOUT)
    assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
    watch.error(e.value, "SendMessage over the request limit")
    assert_serving(node, stub)


# -- raw bytes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("path,method", PATHS, ids=[m.name for _, m in PATHS])
def test_bytes_that_are_not_a_request_get_a_clear_refusal(node, stub, channel, path, method):
    response_cls = method.output_type._concrete_class

    @FUZZ
    @given(body=raw_bodies)
    def run(body):
        watch = Watch(node)
        what = f"{method.name}(raw {body[:40]!r})"
        try:
            if method.client_streaming:
                call = channel.stream_stream(path)(iter([body]), timeout=2)
                try:
                    answers = [next(call, None)]
                finally:
                    call.cancel()
            elif method.server_streaming:
                answers = list(channel.unary_stream(path)(body, timeout=CALL_TIMEOUT))
            else:
                answers = [channel.unary_unary(path)(body, timeout=CALL_TIMEOUT)]
        except grpc.RpcError as e:
            if method.client_streaming and e.code() is grpc.StatusCode.CANCELLED:
                return
            watch.error(e, what)
            return
        first = answers[0]
        if first is not None:
            answer = response_cls.FromString(first)
            if answer.HasField("status"):
                watch.status(answer.status, what)

    run()
    assert_serving(node, stub)
