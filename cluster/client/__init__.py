"""A small client of apache.rocketmq.v2.MessagingService for our nodes (the CLI, drills and
benchmarks use it; the official RocketMQ 5 clients work too, see README "RocketMQ 5 clients").

    connection   ClientConfig, Connection: channel, signed metadata, route cache
    message      Message / ReceivedMessage / SendReceipt, official-client message ids
    errors       ClientError(code, message), NotDurableError (stored), TransportError
    producer     Producer.send / send_batch, RetryPolicy (which answers are retried)
    batching     BatchingProducer.send_async: many threads, coalesced SendMessage requests
    pull         PullConsumer: QueryOffset, PullMessage, UpdateOffset / GetOffset
    simple       SimpleConsumer: ReceiveMessage, AckMessage, ChangeInvisibleDuration

    with Connection("127.0.0.1:10911") as conn:
        receipt = Producer(conn).send(Message("Demo", b"hello", tag="greeting", keys="k-1"))
"""
from .batching import BatchingConfig, BatchingProducer
from .connection import ClientConfig, Connection
from .errors import ClientError, NotDurableError, TransportError, code_name
from .message import Message, MessageIdGenerator, ReceivedMessage, SendReceipt, next_message_id
from .producer import RETRYABLE_CODES, Producer, RetryPolicy
from .pull import PullConsumer, PullResult
from .simple import SimpleConsumer

__all__ = ["BatchingConfig", "BatchingProducer", "ClientConfig", "ClientError", "Connection",
           "Message", "MessageIdGenerator", "NotDurableError", "Producer", "PullConsumer",
           "PullResult", "RETRYABLE_CODES", "ReceivedMessage", "RetryPolicy", "SendReceipt",
           "SimpleConsumer", "TransportError", "code_name", "next_message_id"]
