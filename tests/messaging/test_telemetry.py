"""Telemetry without a server: the settings a client is answered with, the stream budget, and
a client stream's bounded outbox."""
from __future__ import annotations

from google.protobuf.duration_pb2 import Duration

from cluster.messaging import telemetry
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s


def test_publishing_settings_get_the_max_body_size():
    client = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(
        topics=[d.Resource(name="T")], validate_message_type=True),
        request_timeout=Duration(seconds=3))
    reply = telemetry.settings_reply(client, 4 * 1024 * 1024)
    assert reply.status.code == d.OK
    assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.settings.publishing.topics[0].name == "T" and reply.settings.publishing.validate_message_type
    assert reply.settings.client_type == d.PRODUCER and reply.settings.request_timeout.seconds == 3


def test_subscription_settings_get_defaults():
    client = d.Settings(client_type=d.SIMPLE_CONSUMER,
                        subscription=d.Subscription(group=d.Resource(name="G")))
    sub = telemetry.settings_reply(client, 1).settings.subscription
    assert (sub.group.name, sub.receive_batch_size, sub.long_polling_timeout.seconds, sub.fifo) == (
        "G", 32, 20, False)


def test_only_settings_are_answered():
    commands = [s.TelemetryCommand(thread_stack_trace=s.ThreadStackTrace(nonce="n")),
                s.TelemetryCommand(settings=d.Settings(client_type=d.PRODUCER, publishing=d.Publishing()))]
    out = list(telemetry.replies(iter(commands), 100))
    assert len(out) == 1 and out[0].settings.publishing.max_body_size == 100


def test_stream_budget():
    b = telemetry.StreamBudget(2)
    assert b.try_acquire() and b.try_acquire() and not b.try_acquire()
    b.release()
    assert b.try_acquire() and b.open == 2


def test_telemetry_outbox_is_bounded_and_closes():
    stream = telemetry.ClientStream("c1")
    command = s.TelemetryCommand(recover_orphaned_transaction_command=s.RecoverOrphanedTransactionCommand())
    assert all(stream.push(command) for _ in range(telemetry.OUTBOX_LIMIT))
    assert not stream.push(command)  # full: refused, not queued without end
    assert stream.next(0.01) is command and stream.push(command)
    stream.close()
    assert not stream.push(command) and stream.closed
