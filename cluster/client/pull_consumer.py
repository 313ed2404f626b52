"""PullConsumer: offset-based reads of one queue at a time (PullMessage, QueryOffset) and the
group's committed offsets (UpdateOffset, GetOffset).

The caller owns the position: `query_offset` gives a start (BEGINNING, END or the first offset
stored at or after a time), `pull` returns messages and `next_offset`, `commit` stores the
position for the group on the master (replicated with the data, so it survives a failover) and
`committed` reads it back. Reads are served by whichever node the connection reaches (slaves
serve reads); offset commits are forwarded to the master by a slave.

A pull's three ordinary outcomes are answers, not errors (`PullResult.code`): OK with messages,
MESSAGE_NOT_FOUND (nothing new, or nothing that matched the tags: `next_offset` skips what was
filtered out) and ILLEGAL_OFFSET (`next_offset` is the corrected position: the queue's min or
end). Anything else raises ClientError.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s

from cluster.client.connection import Connection
from cluster.client.client_errors import ClientError, check
from cluster.client.message import ReceivedMessage, from_v2

POLICIES = {"BEGINNING": d.BEGINNING, "END": d.END, "TIMESTAMP": d.TIMESTAMP}


@dataclass
class PullResult:
    """One pull's answer: OK, MESSAGE_NOT_FOUND or ILLEGAL_OFFSET, where the next pull
    starts, the messages, and the server's status message."""

    code: int  # d.OK, d.MESSAGE_NOT_FOUND or d.ILLEGAL_OFFSET
    next_offset: int
    messages: list[ReceivedMessage] = field(default_factory=list)
    message: str = ""

    @property
    def found(self) -> bool:
        return self.code == d.OK


def tag_filter(expression: str | None) -> d.FilterExpression:
    return d.FilterExpression(type=d.TAG, expression=expression or "*")


def duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=int(round((seconds - whole) * 1e9)))


class PullConsumer:
    """A consumer group's offset-based reads over one Connection (the module docstring). Owns
    nothing but the connection and the group name: the caller keeps the positions, so one
    consumer may be used from several threads without a lock."""

    def __init__(self, connection: Connection, group: str) -> None:
        if not group:
            raise ValueError("a pull consumer needs a consumer group")
        self.connection = connection
        self.group = group

    def _mq(self, topic: str, queue_id: int) -> d.MessageQueue:
        return d.MessageQueue(topic=self.connection.resource(topic), id=queue_id)

    def queues(self, topic: str) -> list[int]:
        """The readable queue ids of the topic (its route)."""
        return self.connection.readable_queues(topic)

    def query_offset(self, topic: str, queue_id: int, policy: str = "BEGINNING",
                     timestamp_ms: int | None = None) -> int:
        """BEGINNING: the queue's min offset; END: the next offset to be written; TIMESTAMP: the
        first offset stored at or after `timestamp_ms` (END when every message is older)."""
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}")
        request = s.QueryOffsetRequest(message_queue=self._mq(topic, queue_id),
                                       query_offset_policy=POLICIES[policy])
        if policy == "TIMESTAMP":
            if timestamp_ms is None:
                raise ValueError("policy TIMESTAMP needs timestamp_ms")
            request.timestamp.CopyFrom(Timestamp(seconds=timestamp_ms // 1000,
                                                 nanos=timestamp_ms % 1000 * 1_000_000))
        answer = self.connection.call("QueryOffset", request)
        check(answer.status, f"query offset of {topic} queue {queue_id}")
        return answer.offset

    def pull(self, topic: str, queue_id: int, offset: int, batch_size: int = 32,
             tag: str | None = "*", long_polling: float = 0.0,
             timeout: float | None = None) -> PullResult:
        """Up to batch_size messages from `offset`; with long_polling > 0 (seconds) an empty
        queue is waited on that long. The call's deadline is timeout + long_polling."""
        request = s.PullMessageRequest(group=self.connection.resource(self.group),
                                       message_queue=self._mq(topic, queue_id), offset=offset,
                                       batch_size=batch_size, filter_expression=tag_filter(tag))
        if long_polling > 0:
            request.long_polling_timeout.CopyFrom(duration(long_polling))
        deadline = self.connection.timeout(timeout) + max(long_polling, 0.0)
        responses = self.connection.stream("PullMessage", request, deadline)
        status: d.Status | None = None
        next_offset: int | None = None
        messages = []
        for r in responses:
            kind = r.WhichOneof("content")
            if kind == "status":
                status = r.status
            elif kind == "message":
                messages.append(from_v2(r.message))
            elif kind == "next_offset":
                next_offset = r.next_offset
        if status is None:
            raise ClientError(d.INTERNAL_ERROR, f"pull of {topic} queue {queue_id}: no status "
                                                f"in the answer")
        check(status, f"pull of {topic} queue {queue_id} at {offset}",
              ok=(d.OK, d.MESSAGE_NOT_FOUND, d.ILLEGAL_OFFSET))
        if next_offset is None:
            next_offset = messages[-1].queue_offset + 1 if messages else offset
        return PullResult(status.code, next_offset, messages, status.message)

    def commit(self, topic: str, queue_id: int, offset: int) -> None:
        """Store the group's position in the queue (UpdateOffset; waits for durability)."""
        answer = self.connection.call("UpdateOffset", s.UpdateOffsetRequest(
            group=self.connection.resource(self.group), message_queue=self._mq(topic, queue_id),
            offset=offset))
        check(answer.status, f"update offset of {topic} queue {queue_id} to {offset}")

    def committed(self, topic: str, queue_id: int) -> int | None:
        """The group's stored position (GetOffset), None when it has none."""
        answer = self.connection.call("GetOffset", s.GetOffsetRequest(
            group=self.connection.resource(self.group), message_queue=self._mq(topic, queue_id)))
        if answer.status.code == d.OFFSET_NOT_FOUND:
            return None
        check(answer.status, f"get offset of {topic} queue {queue_id}")
        return answer.offset
