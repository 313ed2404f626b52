"""The answers of a master's ReceiveMessage: a `Handout` (the deliveries one receive recorded
in the consumer state) put in the v2 stream's form (a status, the delivery timestamp, one
response per message: what the official clients read) or in one ReceiveMessagesResponse
(proto/batch_receive.proto, our client's).

Each delivered message is its record's v2 form (`convert.record_to_v2`) with the delivery's
receipt handle (`receipt`), attempt and invisible duration. With a conversion process
(conversion_process.py) the record's part comes from it and the answer is written as bytes
(delivery_bytes.py); without one, or for an answer of fewer than CHILD_MIN_DELIVERIES
messages, each message is built here in place.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from google.protobuf.timestamp_pb2 import Timestamp

from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from common.clock import Clock
from store.codec import MessageRecord
from store.errors import OffsetOutOfRange
from store.get_result import QueueRef

from cluster.consume.conversion_process import ConversionProcess
from cluster.consume.delivery_bytes import (DeliveryFields, EncodedAnswer,
                                            EncodedMessageResponse, MessageParts, message_parts)

__all__ = ["AnswerForms", "CHILD_MIN_DELIVERIES", "Handout", "NOT_FOUND"]
from cluster.consume.planner import Delivery
from cluster.consume.receipt import IssuedHandles
from cluster.consume.settle_calls import OK
from cluster.v2.convert import record_to_v2

NOT_FOUND = d.Status(code=d.MESSAGE_NOT_FOUND, message="no new message")
# Fewer deliveries are built here: a round trip to the conversion process costs the loop
# about what building one or two messages does (docs/performance/benchmarks.md, bench_long_poll).
CHILD_MIN_DELIVERIES = 4


@dataclass(frozen=True)
class Handout:
    """What one ReceiveMessage hands out, recorded in the consumer state, before it is put in
    either answer's form (the v2 stream or one ReceiveMessagesResponse): the deliveries as
    (queue id, delivery), none when the long poll ended empty."""
    topic: str
    group: str
    invisible_ms: int
    deliveries: list[tuple[int, Delivery]]


class AnswerForms:
    """Builds the answers of the receives of one master's ConsumerCalls. Owns nothing shared
    but the conversion process (whose use is confined to the server's event loop); `handles`
    issues the receipt handles (IssuedHandles: no lock needed)."""

    def __init__(self, store, handles: IssuedHandles, clock: Clock,
                 conversion: ConversionProcess | None = None) -> None:
        self.store = store
        self.handles = handles
        self._clock = clock
        self.conversion = conversion  # builds the messages in a child process (None: here)

    @property
    def reads_records(self) -> bool:
        """These forms read the handed-out records themselves (by the conversion process or
        here), so a receive may hand out QueueRefs (ConsumerCalls._receive_plan)."""
        return self.conversion is not None

    async def stream(self, handout: "Handout") -> list:
        """The v2 stream: a status, the delivery timestamp, one response per message (built by
        the conversion process when there is one, else here in place)."""
        messages = await self._messages(handout)
        if messages is None:
            return self._stream_here(self._with_records(handout))
        return [s.ReceiveMessageResponse(status=OK),
                s.ReceiveMessageResponse(delivery_timestamp=self._now()),
                *map(EncodedMessageResponse, messages)]

    async def batch(self, handout: "Handout") -> br.ReceiveMessagesResponse | EncodedAnswer:
        """The same answer in one response (proto/batch_receive.proto)."""
        messages = await self._messages(handout)
        if messages is None:
            return self._batch_here(self._with_records(handout))
        return EncodedAnswer(OK, self._clock.now_ms(), messages)

    def _stream_here(self, handout: "Handout") -> list[s.ReceiveMessageResponse]:
        if not handout.deliveries:
            return [s.ReceiveMessageResponse(status=NOT_FOUND)]
        out = [s.ReceiveMessageResponse(status=OK),
               s.ReceiveMessageResponse(delivery_timestamp=self._now())]
        for qid, x in handout.deliveries:
            response = s.ReceiveMessageResponse()
            self._fill(response.message, handout, qid, x)
            out.append(response)
        return out

    def _batch_here(self, handout: "Handout") -> br.ReceiveMessagesResponse:
        if not handout.deliveries:
            return br.ReceiveMessagesResponse(status=NOT_FOUND)
        out = br.ReceiveMessagesResponse(status=OK, delivery_timestamp=self._now())
        add = out.messages.add
        for qid, x in handout.deliveries:
            self._fill(add(), handout, qid, x)
        return out

    async def _messages(self, handout: "Handout") -> list[bytes] | None:
        """The delivered messages' bytes built by the conversion process, for
        CHILD_MIN_DELIVERIES or more; None when it does not build them (there is none, fewer
        deliveries, or it cannot serve now): the caller builds them in place. A record it
        could not read is built here. The process is also told which records the next
        receives of these queues will most likely hand out (`_next_refs`)."""
        conversion = self.conversion
        deliveries = handout.deliveries
        if conversion is None or len(deliveries) < CHILD_MIN_DELIVERIES:
            return None
        store = self.store
        parts = await conversion.parts(
            [(x.record.physical_offset, x.record.total_size) for _, x in deliveries],
            self._next_refs(handout), store.min_phy_offset(), store.commitlog_truncations)
        if parts is None:
            return None
        topic, group = handout.topic, handout.group
        encode = self.handles.encode
        fields = DeliveryFields(handout.invisible_ms)
        messages = []
        for p, (qid, x) in zip(parts, deliveries):
            if p is None:
                p = self._parts_here(store, x.record)
                if p is None:  # gone (retention): left out, its delivery expires (planner.py)
                    continue
            messages.append(fields.message(p, encode(topic, group, qid, x.offset, x.handle),
                                           x.attempt))
        return messages

    def _next_refs(self, handout: "Handout", most: int = 256) -> list[tuple[int, int]]:
        """(offset, size) of the messages after the new ones each queue handed out: as many
        as it handed out (the next receive of that queue most likely asks for those)."""
        last: dict[int, tuple[int, int]] = {}  # qid -> (last new offset, how many)
        for qid, x in handout.deliveries:
            if type(x.record) is QueueRef:
                offset, n = last.get(qid, (-1, 0))
                last[qid] = (max(offset, x.offset), n + 1)
        out: list[tuple[int, int]] = []
        for qid, (offset, n) in last.items():
            refs = self.store.queue_refs(handout.topic, qid, offset + 1, min(n, most - len(out)))
            out += [(r.physical_offset, r.total_size) for r in refs]
            if len(out) >= most:
                break
        return out

    def _with_records(self, handout: "Handout") -> "Handout":
        """`handout` with its QueueRefs read into records, for the forms built in place; a
        delivery whose record is gone (retention) is left out: it expires and is then
        dropped (planner.py)."""
        if not any(type(x.record) is QueueRef for _, x in handout.deliveries):
            return handout
        deliveries = []
        with self.store.commitlog_records() as records:
            for qid, x in handout.deliveries:
                if type(x.record) is QueueRef:
                    try:
                        record = records.get(x.record.physical_offset, x.record.total_size)
                    except OffsetOutOfRange:
                        continue
                    if not isinstance(record, MessageRecord):
                        continue
                    x = replace(x, record=record)
                deliveries.append((qid, x))
        return replace(handout, deliveries=deliveries)

    @staticmethod
    def _parts_here(store, record) -> MessageParts | None:
        """The record's parts built in this process (read first for a QueueRef); None when it
        is gone or not a record any more."""
        if type(record) is QueueRef:
            record = store.look_message_by_offset(record.physical_offset, record.total_size)
            if record is None:
                return None
        return message_parts(record)

    def _now(self) -> Timestamp:
        # delivery_timestamp: the clients' consume-latency metrics need it (the official push
        # consumer fails on every batch without it)
        now = Timestamp()
        now.FromMilliseconds(self._clock.now_ms())
        return now

    def _fill(self, message: d.Message, handout: "Handout", qid: int, x: Delivery) -> None:
        """One delivered message, written into `message`: the record, its receipt handle,
        delivery attempt and invisible duration."""
        sp = record_to_v2(x.record, out=message).system_properties
        sp.receipt_handle = self.handles.encode(handout.topic, handout.group, qid, x.offset,
                                                x.handle)
        sp.delivery_attempt = x.attempt
        ms = handout.invisible_ms
        sp.invisible_duration.seconds = ms // 1000
        sp.invisible_duration.nanos = ms % 1000 * 1_000_000
