"""Helpers of test_v2_interop.py, usable with either copy of the RocketMQ 5 schema.

Our modules (proto.apache.rocketmq.v2.*) and the official client's (rocketmq.grpc_protocol.*)
declare the same symbols under different file names, so one process may load only one of them.
The test process loads ours; the official modules are loaded only when this file runs as a
script (`python v2_interop_tool.py describe|parse|build`), which talks JSON over stdin/stdout.
Everything below works on whichever set of modules it is given.
"""
from __future__ import annotations

import base64
import json
import os
import sys

from google.protobuf import descriptor_pb2, json_format
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

OFFICIAL_DIST = "rocketmq-python-client"
OFFICIAL_VERSION = "5.1.2"
FILES = ("definition", "service", "admin")
EXIT_NO_CLIENT = 3

_TYPES = {v: k for k, v in descriptor_pb2.FieldDescriptorProto.Type.items()}
_LABELS = {v: k for k, v in descriptor_pb2.FieldDescriptorProto.Label.items()}


class Schema:
    """definition/service/admin *_pb2 modules of one copy of the schema."""

    def __init__(self, definition, service, admin):
        self.modules = {"definition": definition, "service": service, "admin": admin}
        self.definition, self.service, self.admin = definition, service, admin

    def __getattr__(self, name):  # message classes and top-level enum values, from any file
        for mod in (self.definition, self.service, self.admin):
            if hasattr(mod, name):
                return getattr(mod, name)
        raise AttributeError(name)

    def message_class(self, full_name: str):
        for mod in self.modules.values():
            for name, desc in mod.DESCRIPTOR.message_types_by_name.items():
                if desc.full_name == full_name:
                    return getattr(mod, name)
        raise KeyError(full_name)


def ours() -> Schema:
    from proto.apache.rocketmq.v2 import admin_pb2, definition_pb2, service_pb2
    return Schema(definition_pb2, service_pb2, admin_pb2)


def official() -> Schema:
    from rocketmq.grpc_protocol import admin_pb2, definition_pb2, service_pb2
    return Schema(definition_pb2, service_pb2, admin_pb2)


# ---------------------------------------------------------------------------------------------
# Canonical description of the schema. File names and file options (java_package, ...) are left
# out on purpose: the official modules register as "definition.proto", ours under their repo path,
# and options do not reach the wire. Which file declares what and what each file imports are kept
# (by base name).

def _base(file_name: str) -> str:
    return file_name if file_name.startswith("google/") else os.path.basename(file_name)


def describe(schema: Schema) -> dict:
    out: dict = {"files": {}, "messages": {}, "enums": {}, "services": {}}

    def enum(e, scope, file):
        out["enums"][f"{scope}.{e.name}"] = {"file": file, "values": [[v.name, v.number] for v in e.value]}

    def message(m, scope, file):
        full = f"{scope}.{m.name}"
        oneofs = [o.name for o in m.oneof_decl]
        fields = []
        for f in m.field:
            fields.append({
                "name": f.name, "number": f.number, "type": _TYPES[f.type], "label": _LABELS[f.label],
                "type_name": f.type_name.lstrip("."),
                "oneof": oneofs[f.oneof_index] if f.HasField("oneof_index") else None,
                "proto3_optional": f.proto3_optional,
            })
        out["messages"][full] = {
            "file": file, "fields": fields, "oneofs": oneofs,
            "map_entry": m.options.map_entry,
            "nested_messages": [n.name for n in m.nested_type], "nested_enums": [e.name for e in m.enum_type],
        }
        for e in m.enum_type:
            enum(e, full, file)
        for n in m.nested_type:
            message(n, full, file)

    for key, mod in schema.modules.items():
        fdp = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(fdp)
        file = _base(fdp.name)
        out["files"][file] = {"package": fdp.package, "syntax": fdp.syntax or "proto2",
                              "dependencies": sorted(_base(d) for d in fdp.dependency)}
        for e in fdp.enum_type:
            enum(e, fdp.package, file)
        for m in fdp.message_type:
            message(m, fdp.package, file)
        for s in fdp.service:
            out["services"][f"{fdp.package}.{s.name}"] = {"file": file, "methods": [
                {"name": r.name, "input": r.input_type.lstrip("."), "output": r.output_type.lstrip("."),
                 "client_streaming": r.client_streaming, "server_streaming": r.server_streaming}
                for r in s.method]}
    return out


# ---------------------------------------------------------------------------------------------
# Rich sample messages, built with the same code from either copy of the schema.

def _ts(seconds: int, nanos: int = 0) -> Timestamp:
    return Timestamp(seconds=seconds, nanos=nanos)


def _dur(seconds: int, nanos: int = 0) -> Duration:
    return Duration(seconds=seconds, nanos=nanos)


def build_samples(pb: Schema) -> dict:
    """name -> message; covers every field kind: scalars of each type, enums, nested, repeated,
    repeated enums, maps, oneofs, proto3 optionals set to their default value, WKTs, bytes."""
    s = {}
    topic = pb.Resource(resource_namespace="ns1", name="TopicTest")
    group = pb.Resource(resource_namespace="ns1", name="GID_test")
    endpoints = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="10.0.0.1", port=18081),
                                                        pb.Address(host="10.0.0.2", port=18082)])

    def queue(qid: int, broker_id: int = 0):
        return pb.MessageQueue(
            topic=topic, id=qid, permission=pb.READ_WRITE,
            broker=pb.Broker(name="broker-a", id=broker_id, endpoints=endpoints),
            accept_message_types=[pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION])

    normal = pb.Message(
        topic=topic, user_properties={"order": "42", "region": "eu-west", "empty": "", "ünï": "çødé"},
        system_properties=pb.SystemProperties(
            tag="TagA", keys=["k1", "k2"], message_id="01A1B2C3D4E5F60718293A4B5C6D7E8F90",
            body_digest=pb.Digest(type=pb.CRC32, checksum="3610A686"), body_encoding=pb.IDENTITY,
            message_type=pb.NORMAL, born_timestamp=_ts(1_763_776_000, 123_000_000), born_host="10.1.2.3",
            queue_id=0, trace_context="00-abc-def-01"),
        body=b"hello \x00\xff\xfe world")
    delay = pb.Message(
        topic=topic,
        system_properties=pb.SystemProperties(
            tag="", message_id="01A1B2C3D4E5F60718293A4B5C6D7E8F91", body_encoding=pb.GZIP,
            message_type=pb.DELAY, born_timestamp=_ts(1_763_776_001), born_host="host-1",
            delivery_timestamp=_ts(1_763_776_061)),
        body=b"\x1f\x8b\x08\x00")
    fifo = pb.Message(
        topic=topic, user_properties={"a": "1"},
        system_properties=pb.SystemProperties(
            message_id="01A1B2C3D4E5F60718293A4B5C6D7E8F92", body_encoding=pb.IDENTITY,
            message_type=pb.FIFO, born_timestamp=_ts(1_763_776_002), message_group="order-7",
            priority=0, lite_topic="lite-1"),
        body=b"fifo")
    txn = pb.Message(
        topic=topic,
        system_properties=pb.SystemProperties(
            message_id="01A1B2C3D4E5F60718293A4B5C6D7E8F93", body_encoding=pb.IDENTITY,
            message_type=pb.TRANSACTION, born_timestamp=_ts(1_763_776_003),
            orphaned_transaction_recovery_duration=_dur(30)),
        body=b"txn")
    s["send_request"] = pb.SendMessageRequest(messages=[normal, delay, fifo, txn])
    s["send_response"] = pb.SendMessageResponse(
        status=pb.Status(code=pb.MULTIPLE_RESULTS, message="partial"),
        entries=[pb.SendResultEntry(status=pb.Status(code=pb.OK, message="OK"), message_id="01AA",
                                    transaction_id="tx-1", offset=9_007_199_254_740_993, recall_handle="rh"),
                 pb.SendResultEntry(status=pb.Status(code=pb.MESSAGE_BODY_TOO_LARGE, message="too big"),
                                    message_id="01AB", offset=-1)])

    s["receive_request"] = pb.ReceiveMessageRequest(
        group=group, message_queue=queue(3), filter_expression=pb.FilterExpression(type=pb.TAG, expression="TagA||TagB"),
        batch_size=16, invisible_duration=_dur(15), auto_renew=False, long_polling_timeout=_dur(20, 500_000_000),
        attempt_id="attempt-1")
    delivered = pb.Message()
    delivered.CopyFrom(normal)
    sp = delivered.system_properties
    sp.store_timestamp.CopyFrom(_ts(1_763_776_010))
    sp.store_host = "broker-a"
    sp.receipt_handle = "rh-abc"
    sp.queue_id = 3
    sp.queue_offset = 0  # optional: present although zero
    sp.invisible_duration.CopyFrom(_dur(15))
    sp.delivery_attempt = 2
    sp.dead_letter_queue.CopyFrom(pb.DeadLetterQueue(topic="TopicOrig", message_id="01AC"))
    s["receive_status"] = pb.ReceiveMessageResponse(status=pb.Status(code=pb.MESSAGE_NOT_FOUND, message="none"))
    s["receive_message"] = pb.ReceiveMessageResponse(message=delivered)
    s["receive_delivery_ts"] = pb.ReceiveMessageResponse(delivery_timestamp=_ts(1_763_776_011, 7))

    s["query_route_request"] = pb.QueryRouteRequest(topic=topic, endpoints=endpoints)
    s["query_route_response"] = pb.QueryRouteResponse(
        status=pb.Status(code=pb.OK, message="OK"),
        message_queues=[queue(0), queue(1), pb.MessageQueue(
            topic=topic, id=2, permission=pb.READ,
            broker=pb.Broker(name="broker-b", id=1, endpoints=pb.Endpoints(
                scheme=pb.DOMAIN_NAME, addresses=[pb.Address(host="broker-b.local", port=8081)])),
            accept_message_types=[pb.NORMAL])])

    ua = pb.UA(language=pb.PYTHON, version="5.1.2", platform="Linux x86_64", hostname="client-1")
    s["telemetry_publishing"] = pb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PRODUCER, access_point=endpoints,
        backoff_policy=pb.RetryPolicy(max_attempts=3, exponential_backoff=pb.ExponentialBackoff(
            initial=_dur(0, 10_000_000), max=_dur(1), multiplier=2.0)),
        request_timeout=_dur(3),
        publishing=pb.Publishing(topics=[topic, pb.Resource(name="Other")], max_body_size=4 * 1024 * 1024,
                                 validate_message_type=True),
        user_agent=ua, metric=pb.Metric(on=True, endpoints=endpoints)))
    s["telemetry_subscription"] = pb.TelemetryCommand(
        status=pb.Status(code=pb.OK, message="OK"),
        settings=pb.Settings(
            client_type=pb.SIMPLE_CONSUMER, access_point=endpoints,
            backoff_policy=pb.RetryPolicy(max_attempts=16, customized_backoff=pb.CustomizedBackoff(
                next=[_dur(1), _dur(5), _dur(10), _dur(30), _dur(60)])),
            request_timeout=_dur(3),
            subscription=pb.Subscription(
                group=group,
                subscriptions=[pb.SubscriptionEntry(topic=topic, expression=pb.FilterExpression(type=pb.TAG, expression="*")),
                               pb.SubscriptionEntry(topic=pb.Resource(name="T2"), expression=pb.FilterExpression(
                                   type=pb.SQL, expression="a > 1"))],
                fifo=False, receive_batch_size=32, long_polling_timeout=_dur(20),
                lite_subscription_quota=0, max_lite_topic_size=64),
            user_agent=ua, metric=pb.Metric(on=False)))
    s["telemetry_recover"] = pb.TelemetryCommand(recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
        message=txn, transaction_id="tx-9"))
    s["telemetry_verify"] = pb.TelemetryCommand(verify_message_command=pb.VerifyMessageCommand(nonce="n1", message=normal))
    s["telemetry_stack"] = pb.TelemetryCommand(thread_stack_trace=pb.ThreadStackTrace(nonce="n2", thread_stack_trace=""))
    s["telemetry_unsubscribe_lite"] = pb.TelemetryCommand(
        notify_unsubscribe_lite_command=pb.NotifyUnsubscribeLiteCommand(lite_topic="lite-1"))
    s["telemetry_reconnect"] = pb.TelemetryCommand(reconnect_endpoints_command=pb.ReconnectEndpointsCommand(nonce="n3"))

    s["ack_request"] = pb.AckMessageRequest(group=group, topic=topic, entries=[
        pb.AckMessageEntry(message_id="01AA", receipt_handle="rh-1"),
        pb.AckMessageEntry(message_id="01AB", receipt_handle="rh-2", lite_topic="lite-1")])
    s["ack_response"] = pb.AckMessageResponse(status=pb.Status(code=pb.OK), entries=[
        pb.AckMessageResultEntry(message_id="01AA", receipt_handle="rh-1",
                                 status=pb.Status(code=pb.INVALID_RECEIPT_HANDLE, message="expired"))])
    s["change_invisible_request"] = pb.ChangeInvisibleDurationRequest(
        group=group, topic=topic, receipt_handle="rh-1", invisible_duration=_dur(60), message_id="01AA",
        lite_topic="lite-1", suspend=False)
    s["change_invisible_response"] = pb.ChangeInvisibleDurationResponse(status=pb.Status(code=pb.OK),
                                                                         receipt_handle="rh-1b")
    s["heartbeat_request"] = pb.HeartbeatRequest(group=group, client_type=pb.PUSH_CONSUMER)
    s["end_transaction_request"] = pb.EndTransactionRequest(
        topic=topic, message_id="01AD", transaction_id="tx-1", resolution=pb.ROLLBACK,
        source=pb.SOURCE_SERVER_CHECK, trace_context="tc")
    s["forward_dlq_request"] = pb.ForwardMessageToDeadLetterQueueRequest(
        group=group, topic=topic, receipt_handle="rh-1", message_id="01AA", delivery_attempt=17,
        max_delivery_attempts=16, lite_topic="")
    s["notify_termination_request"] = pb.NotifyClientTerminationRequest(group=group)
    s["query_assignment_response"] = pb.QueryAssignmentResponse(
        status=pb.Status(code=pb.OK), assignments=[pb.Assignment(message_queue=queue(0)),
                                                   pb.Assignment(message_queue=queue(1))])
    s["pull_request"] = pb.PullMessageRequest(
        group=group, message_queue=queue(1), offset=1 << 40, batch_size=32,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), long_polling_timeout=_dur(30))
    s["pull_next_offset"] = pb.PullMessageResponse(next_offset=0)
    s["update_offset_request"] = pb.UpdateOffsetRequest(group=group, message_queue=queue(2), offset=77)
    s["get_offset_response"] = pb.GetOffsetResponse(status=pb.Status(code=pb.OFFSET_NOT_FOUND), offset=-1)
    s["query_offset_request"] = pb.QueryOffsetRequest(message_queue=queue(0), query_offset_policy=pb.TIMESTAMP,
                                                      timestamp=_ts(0))
    s["recall_request"] = pb.RecallMessageRequest(topic=topic, recall_handle="rh")
    s["sync_lite_request"] = pb.SyncLiteSubscriptionRequest(
        action=pb.COMPLETE_ADD, topic=topic, group=group, lite_topic_set=["l1", "l2"], version=0,
        offset_option=pb.OffsetOption(policy=pb.OffsetOption.MIN))
    s["sync_lite_request_tail"] = pb.SyncLiteSubscriptionRequest(
        action=pb.PARTIAL_REMOVE, offset_option=pb.OffsetOption(tail_n=10))
    s["change_log_level"] = pb.ChangeLogLevelRequest(level=pb.ChangeLogLevelRequest.WARN)
    return s


def to_json(msg) -> dict:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def encode(samples: dict) -> dict:
    """name -> {type, bytes (base64, deterministic serialization), json}."""
    return {name: {"type": m.DESCRIPTOR.full_name,
                   "bytes": base64.b64encode(m.SerializeToString(deterministic=True)).decode(),
                   "json": to_json(m)} for name, m in samples.items()}


def parse(schema: Schema, encoded: dict) -> dict:
    """Parse each payload with `schema`: name -> {json, bytes (deterministic re-serialization)}."""
    out = {}
    for name, item in encoded.items():
        msg = schema.message_class(item["type"])()
        msg.ParseFromString(base64.b64decode(item["bytes"]))
        out[name] = {"json": to_json(msg),
                     "bytes": base64.b64encode(msg.SerializeToString(deterministic=True)).decode()}
    return out


# ---------------------------------------------------------------------------------------------
# Subprocess side: only the official modules are loaded here.

def _main(argv: list[str]) -> int:
    try:
        from importlib.metadata import version
        schema = official()
        dist_version = version(OFFICIAL_DIST)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        print(f"cannot import the official client ({OFFICIAL_DIST}=={OFFICIAL_VERSION}): "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_NO_CLIENT
    if argv == ["describe"]:
        result = describe(schema)
    elif argv == ["build"]:
        result = encode(build_samples(schema))
    elif argv == ["parse"]:
        result = parse(schema, json.load(sys.stdin))
    else:
        print(f"usage: {sys.argv[0]} describe|build|parse", file=sys.stderr)
        return 2
    leaked = sorted(m for m in sys.modules if m.startswith("proto.apache"))
    if leaked:
        print(f"our modules were loaded next to the official ones: {leaked}", file=sys.stderr)
        return 4
    json.dump({"client_version": dist_version,
               "client_file": schema.definition.__file__, "result": result}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
