"""Clients of our nodes: Producer, consumers, AdminClient (gRPC).

    connection   ClientConfig, Connection: channel, signed metadata, route cache
    message      Message / ReceivedMessage / SendReceipt, official-client message ids
    client_errors  ClientError(code, message), NotDurableError (stored), TransportError,
                   ReceiveAfterAckError
    producer     Producer.send / send_batch, RetryPolicy (which answers are retried)
    batching     BatchingProducer.submit: many threads, coalesced SendMessage requests
    pull_consumer    PullConsumer: QueryOffset, PullMessage, UpdateOffset / GetOffset
    simple_consumer  SimpleConsumer: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
                     ack_and_receive (both in one round trip)
    receive_ahead    ReceiveAhead: a SimpleConsumer's AckAndReceive calls kept in flight
    admin_client     AdminClient: the operator's Admin API (status, topics, groups, export, ...)

    with Connection("127.0.0.1:10911") as conn:
        receipt = Producer(conn).send(Message("Demo", b"hello", tag="greeting", keys="k-1"))
"""
from .batching import BatchingConfig, BatchingProducer
from .client_errors import (ClientError, NotDurableError, ReceiveAfterAckError, TransportError,
                            code_name)
from .connection import ClientConfig, Connection
from .message import Message, MessageIdGenerator, ReceivedMessage, SendReceipt, next_message_id
from .producer import RETRYABLE_CODES, Producer, RetryPolicy
from .pull_consumer import PullConsumer, PullResult
from .receive_ahead import ReceiveAhead
from .simple_consumer import SimpleConsumer

__all__ = ["BatchingConfig", "BatchingProducer", "ClientConfig", "ClientError", "Connection",
           "Message", "MessageIdGenerator", "NotDurableError", "Producer", "PullConsumer",
           "PullResult", "RETRYABLE_CODES", "ReceiveAfterAckError", "ReceiveAhead", "ReceivedMessage",
           "RetryPolicy", "SendReceipt", "SimpleConsumer", "TransportError", "code_name", "next_message_id"]
