"""Offset-based reads: PullMessage and QueryOffset, served by every replica.

A replica serves only what its consume queues hold, and reput dispatches only up to the confirm
offset (the master: what the in-sync slaves acked; a slave: what its master confirmed), so no
read returns a message that a failover could take away.

PullMessage answers a stream, like RocketMQ 5's proxy: a status first, then the messages, then
next_offset (where the next pull starts):
    FOUND                                   -> OK, messages, next_offset
    nothing new / nothing matched the tags  -> MESSAGE_NOT_FOUND, next_offset (past what was
                                               filtered out)
    offset below the queue's min or beyond its end -> ILLEGAL_OFFSET, next_offset (the corrected
                                               offset: the min or the end)
    unknown topic                           -> TOPIC_NOT_FOUND
With long_polling_timeout > 0 a pull that finds nothing waits (at most that long, at most
MAX_LONG_POLL_SECONDS, and within the call's deadline) for the next dispatch, then reads again.
Tag filters: TAG expressions ("*", "a||b"); SQL92 answers NOT_IMPLEMENTED.

QueryOffset: BEGINNING -> the queue's min offset, END -> its max offset (the next to be written),
TIMESTAMP -> the first offset stored at or after the time (END when every message is older).
"""
from __future__ import annotations

import itertools
from typing import Callable

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.get_result import GetMessageResult, GetStatus
from common.clock import SYSTEM_CLOCK, Clock
from store.message_store import MessageStore
from store.reader import TagFilter

from cluster.v2.convert import (check_group_resource, check_topic_resource, records_to_v2,
                                tag_expression, timestamp_ms)
from cluster.v2.long_poll import Attempt, DispatchWaiter, Interest, long_poll
from cluster.messaging.route import TopicRegistry
from cluster.messaging.telemetry import StreamBudget
from cluster.v2.v2_status import V2Error

DEFAULT_BATCH = 32
MAX_LONG_POLL_SECONDS = 30.0
_AT_END = (GetStatus.NO_MATCHED_MESSAGE, GetStatus.NO_MESSAGE_IN_QUEUE,
           GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.MESSAGE_WAS_REMOVING,
           GetStatus.NO_MATCHED_LOGIC_QUEUE)
_SKIP_FILTERED = (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING)
_PULL_GROUP = "\0pull#"  # no consumer group has a NUL in its name (convert.check_group_resource)
_pulls = itertools.count()


class Reader:
    """PullMessage and QueryOffset of one node (any role). Owns the dispatch waiter its long
    polls wait on (attached to the store's reput while the node serves); reads go to the store,
    which locks what it reads. Its calls run on the server's event loop."""

    def __init__(self, store: MessageStore, topics: TopicRegistry,
                 budget: StreamBudget | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.store = store
        self.clock = clock
        self.topics = topics
        self.budget = budget
        self.waiter = DispatchWaiter()
        self._unsubscribe: Callable[[], None] | None = None  # while attached
        # messages PullMessage answered since the node started (the console's consume rate);
        # added to on the server's event loop only
        self.pulled = 0

    def attach(self) -> None:
        if self._unsubscribe is None:
            self._unsubscribe = self.store.on_dispatch(self.waiter.on_dispatched)

    def detach(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _queue(self, mq: d.MessageQueue) -> tuple[str, int]:
        topic = check_topic_resource(mq.topic)
        if mq.id < 0:
            raise V2Error(d.BAD_REQUEST, f"queue id {mq.id} is negative")
        return topic, mq.id

    def _known(self, topic: str, queue_id: int) -> bool:
        return (self.topics.get(topic) is not None
                or self.store.consume_queue(topic, queue_id) is not None)

    async def pull(self, request: s.PullMessageRequest,
                   time_remaining: Callable[[], float | None] = lambda: None
                   ) -> list[s.PullMessageResponse]:
        try:
            check_group_resource(request.group)
            topic, queue_id = self._queue(request.message_queue)
            if request.offset < 0:
                raise V2Error(d.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            filt = tag_expression(request.filter_expression)
            if not self._known(topic, queue_id):
                raise V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
            batch = request.batch_size if request.batch_size > 0 else DEFAULT_BATCH
            wait_s = 0.0
            if request.HasField("long_polling_timeout"):
                lp = request.long_polling_timeout
                wait_s = min(max(lp.seconds + lp.nanos / 1e9, 0.0), MAX_LONG_POLL_SECONDS)
        except V2Error as e:
            return [s.PullMessageResponse(status=e.status())]
        result = await self._read_waiting(topic, queue_id, request.offset, batch, filt, wait_s,
                                          time_remaining)
        if result.status is GetStatus.FOUND:
            self.pulled += len(result.messages)
        return pull_responses(result, request.message_queue.topic.resource_namespace)

    async def _read_waiting(self, topic: str, queue_id: int, offset: int, batch: int, filt: str | None,
                      wait_s: float, time_remaining) -> GetMessageResult:
        last: GetMessageResult | None = None

        def attempt() -> Attempt[GetMessageResult]:
            nonlocal last, offset
            if last is not None and last.status in _SKIP_FILTERED:
                offset = last.next_begin_offset  # skip what was filtered out already
            result = self.store.get_messages(topic, queue_id, offset, batch, filt)
            if last is not None and result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE:
                result = last  # the queue is not there yet: keep the answer we had
            last = result
            return Attempt(result, result.status not in _AT_END or wait_s <= 0)

        # A pull reads one queue: it is a waiter group of its own, so every dispatch of its
        # topic with its tags wakes it (a group's waiters share the messages of a round).
        interest = Interest(topic, f"{_PULL_GROUP}{next(_pulls)}", TagFilter.parse(filt).codes,
                            batch)
        return await long_poll(attempt, interest, wait_s=wait_s, waiter=self.waiter,
                               clock=self.clock, budget=self.budget,
                               time_remaining=time_remaining)

    def query_offset(self, request: s.QueryOffsetRequest) -> s.QueryOffsetResponse:
        try:
            topic, queue_id = self._queue(request.message_queue)
            if not self._known(topic, queue_id):
                raise V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
            policy = request.query_offset_policy
            store = self.store
            if policy == d.BEGINNING:
                offset = store.min_offset_in_queue(topic, queue_id)
            elif policy == d.END:
                offset = store.max_offset_in_queue(topic, queue_id)
            elif policy == d.TIMESTAMP:
                if not request.HasField("timestamp"):
                    raise V2Error(d.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
                ms = timestamp_ms(request.timestamp, d.BAD_REQUEST, "timestamp")
                offset = store.offset_for_timestamp(topic, queue_id, ms)
            else:
                raise V2Error(d.BAD_REQUEST, f"unknown query_offset_policy {policy}")
        except V2Error as e:
            return s.QueryOffsetResponse(status=e.status())
        return s.QueryOffsetResponse(status=d.Status(code=d.OK, message="OK"), offset=offset)


def pull_responses(result: GetMessageResult, namespace: str = "") -> list[s.PullMessageResponse]:
    st = result.status
    if st is GetStatus.FOUND:
        out = [s.PullMessageResponse(status=d.Status(code=d.OK, message="OK"))]
        out += [s.PullMessageResponse(message=m) for m in records_to_v2(result.messages, namespace)]
    elif st in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
        out = [s.PullMessageResponse(status=d.Status(
            code=d.ILLEGAL_OFFSET, message=f"{st.value}: the queue holds offsets "
                                           f"[{result.min_offset}, {result.max_offset})"))]
    else:
        out = [s.PullMessageResponse(status=d.Status(code=d.MESSAGE_NOT_FOUND,
                                                     message=f"no new message ({st.value})"))]
    out.append(s.PullMessageResponse(next_offset=result.next_begin_offset))
    return out
