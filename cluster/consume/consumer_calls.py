"""The v2 consumer calls on a master: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue, UpdateOffset, GetOffset. Validation first (a refusal changes
nothing), then one state change under the service's lock (service.py), then the wait for the
flush/replication policy outside it.

ReceiveMessage hands out up to batch_size messages across the topic's readable queues, starting
with the queue the client named: expired deliveries first, then new messages (planner.py). Each
carries a receipt handle (receipt.py), its delivery attempt and the invisible duration. When
nothing is there the call waits for new dispatches or the next expiry, at most the client's
long_polling_timeout and always within its deadline. A pop is not waited for (at-least-once:
losing it in a failover only redelivers), acks, invisibility changes and offsets are.

Push consumers receive with auto_renew and no invisible duration: they get 60 s (the proxy's
defaultInvisibleTimeMills). This server does not renew those deliveries while the client is
still consuming (the proxy does), so a consume that takes longer is redelivered.
ChangeInvisibleDuration accepts 0 (visible again now) and up: push consumers nack with it.

A delivery that already used the group's max attempts (retryMaxTimes + 1, RocketMQ's default
16 + 1) is copied into `%DLQ%<group>` (queue 0, created on first use) and counts as done.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.codec import Message, MessageRecord
from store.json_config import TopicConfig
from store.reader import TagFilter

from cluster.consume import receipt
from cluster.consume.consumer_service import ConsumerService
from cluster.consume.planner import plan_queue
from cluster.messaging.convert import check_group_resource, check_topic_resource, record_to_v2
from cluster.messaging.long_poll import (Attempt, DispatchWaiter, Interest, long_poll,
                                         long_poll_async)
from cluster.messaging.pull_reader import tag_expression
from cluster.messaging.v2_status import V2Error

if TYPE_CHECKING:
    from cluster.messaging.telemetry import StreamBudget
    from cluster.replicated.replicated_table import Pending
    from master.master_role import MasterRole

DLQ_PREFIX = "%DLQ%"
OK = d.Status(code=d.OK, message="OK")


@dataclass(frozen=True)
class ConsumeSettings:
    min_invisible_ms: int = 10_000  # RocketMQ 5 proxy's minInvisibleTimeMillsForRecv
    auto_renew_invisible_ms: int = 60_000  # proxy's defaultInvisibleTimeMills (auto_renew)
    max_invisible_ms: int = 12 * 3600_000
    max_long_polling_ms: int = 30_000
    max_batch_size: int = 1024

    def __post_init__(self) -> None:
        if not 0 < self.min_invisible_ms <= self.max_invisible_ms:
            raise ValueError(f"minInvisibleTimeMillsForRecv={self.min_invisible_ms} must be in "
                             f"(0, {self.max_invisible_ms}]")


def _duration_ms(value: Duration) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def _group(resource: d.Resource) -> str:
    name = check_group_resource(resource)
    if not name:
        raise V2Error(d.ILLEGAL_CONSUMER_GROUP, "the consumer group is required")
    return name


class ConsumerCalls:
    def __init__(self, consumers: ConsumerService, waiter: "DispatchWaiter",
                 budget: "StreamBudget | None", settings: ConsumeSettings = ConsumeSettings(),
                 *, receipt_key: bytes, async_budget: "StreamBudget | None" = None) -> None:
        self.consumers = consumers
        self.receipt_key = receipt_key  # the group's shared key: handles survive failover
        self.waiter = waiter
        self.budget = budget  # long polls holding a thread
        self.async_budget = async_budget  # long polls waiting on the event loop
        self.settings = settings

    @property
    def _clock(self):
        return self.consumers.clock

    def _topic(self, resource: d.Resource) -> tuple[str, TopicConfig]:
        topic = check_topic_resource(resource)
        topics = self.consumers.topics
        config = topics.get(topic)
        if config is None:
            cq_store = self.consumers.store.cq_store
            config = topics.learn(topic, (cq.queue_id for cq in cq_store.queues()
                                          if cq.topic == topic))
        if config is None:
            raise V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        return topic, config

    def _invisible_ms(self, value: Duration, what: str, minimum: int | None = None) -> int:
        ms = _duration_ms(value)
        st = self.settings
        low = st.min_invisible_ms if minimum is None else minimum
        if value.nanos < 0 or not low <= ms <= st.max_invisible_ms:
            raise V2Error(d.ILLEGAL_INVISIBLE_TIME,
                          f"{what} {ms} ms is not in [{low}, {st.max_invisible_ms}]")
        return ms

    # -- ReceiveMessage -----------------------------------------------------------------------
    def receive(self, request: s.ReceiveMessageRequest,
                time_remaining: Callable[[], float | None] = lambda: None
                ) -> list[s.ReceiveMessageResponse]:
        """ReceiveMessage waiting in the calling thread."""
        attempt, wait_s, _ = self._receive_plan(request)
        return self._received(long_poll(attempt, wait_s=wait_s, waiter=self.waiter,
                                        clock=self._clock, budget=self.budget,
                                        time_remaining=time_remaining))

    async def receive_async(self, request: s.ReceiveMessageRequest,
                            time_remaining: Callable[[], float | None] = lambda: None, *,
                            inline: bool = True, attempts_inline: bool | None = None
                            ) -> list[s.ReceiveMessageResponse]:
        """ReceiveMessage on the server's event loop: the waits hold no thread (long_poll.py);
        the checks run on the loop when `inline` (the master answers at append), else in the
        thread pool (a new group is recorded and waited for). The attempts run on the loop when
        `attempts_inline` (default: `inline`): they append the deliveries' records and never
        wait for them (a SYNC_MASTER with ASYNC_FLUSH runs them there too)."""
        if inline:
            attempt, wait_s, interest = self._receive_plan(request)
        else:
            attempt, wait_s, interest = await asyncio.to_thread(self._receive_plan, request)
        return self._received(await long_poll_async(
            attempt, interest, wait_s=wait_s, waiter=self.waiter, clock=self._clock,
            budget=self.async_budget,
            attempt_inline=inline if attempts_inline is None else attempts_inline,
            time_remaining=time_remaining))

    def _receive_plan(self, request: s.ReceiveMessageRequest
                      ) -> tuple[Callable[[], Attempt[list[d.Message]]], float, Interest]:
        """The request checked (V2Error when refused): one attempt, how long to poll, and what
        to wait for."""
        group = _group(request.group)
        topic, config = self._topic(request.message_queue.topic)
        filt = tag_expression(request.filter_expression)
        st = self.settings
        batch = request.batch_size
        if not 0 < batch <= st.max_batch_size:
            raise V2Error(d.BAD_REQUEST, f"batch_size {batch} is not in [1, {st.max_batch_size}]")
        if request.HasField("invisible_duration"):
            invisible = self._invisible_ms(request.invisible_duration, "invisible_duration")
        elif request.auto_renew:
            invisible = st.auto_renew_invisible_ms  # push consumers; see the module doc
        else:
            raise V2Error(d.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required "
                                                    "(or auto_renew)")
        poll_ms = _duration_ms(request.long_polling_timeout) \
            if request.HasField("long_polling_timeout") else 0
        if not 0 <= poll_ms <= st.max_long_polling_ms:
            raise V2Error(d.ILLEGAL_POLLING_TIME,
                          f"long_polling_timeout {poll_ms} ms is not in [0, {st.max_long_polling_ms}]")
        consumers = self.consumers
        consumers.ensure_loaded()
        info = consumers.group(group)
        if not info.consume_enable:
            raise V2Error(d.FORBIDDEN, f"consumer group {group} may not consume (consumeEnable=false)")
        count = config.read_queue_nums
        if count <= 0 or not config.readable:
            raise V2Error(d.FORBIDDEN, f"topic {topic} is not readable")
        first = request.message_queue.id if 0 <= request.message_queue.id < count else 0
        queues = [(first + i) % count for i in range(count)]
        clock = self._clock

        def attempt() -> Attempt[list[s.ReceiveMessageResponse]]:
            master = consumers.ensure_loaded()  # the role may change while the call waits
            deliveries, next_expiry = self._take(master, group, info, topic, queues, filt,
                                                 batch, invisible)
            wake = None if next_expiry is None else (next_expiry - clock.now_ms()) / 1000.0
            return Attempt(deliveries, bool(deliveries), wake)

        return attempt, poll_ms / 1000.0, Interest(topic, group, TagFilter.parse(filt).codes,
                                                   batch)

    def _received(self, deliveries: list[s.ReceiveMessageResponse]
                  ) -> list[s.ReceiveMessageResponse]:
        if not deliveries:
            return [s.ReceiveMessageResponse(status=d.Status(code=d.MESSAGE_NOT_FOUND,
                                                             message="no new message"))]
        # delivery_timestamp: the clients' consume-latency metrics need it (the official push
        # consumer fails on every batch without it)
        now = Timestamp()
        now.FromMilliseconds(self._clock.now_ms())
        return [s.ReceiveMessageResponse(status=OK),
                s.ReceiveMessageResponse(delivery_timestamp=now),
                *deliveries]

    def _take(self, master, group: str, info, topic: str, queues: list[int], filt: str | None,
              batch: int, invisible_ms: int
              ) -> tuple[list[s.ReceiveMessageResponse], int | None]:
        """Plans and records the deliveries of one attempt; returns their responses (each
        message built in place) and, for an empty attempt, when a delivery in flight on these
        queues becomes visible again."""
        consumers = self.consumers
        store = consumers.store
        out: list[s.ReceiveMessageResponse] = []
        with consumers.lock:
            state = consumers.state
            now = self._clock.now_ms()
            until = now + invisible_ms
            handles = iter(range(state.next_handle, 2 ** 62))
            events, dead_letters = [], []
            deliveries = []
            for qid in queues:
                want = batch - len(deliveries)
                if want <= 0:
                    break
                q = state.queue(group, topic, qid)
                base = store.min_offset_in_queue(topic, qid) if q is None else 0
                plan = plan_queue(
                    qid, q, base, now, want, fifo=info.fifo,
                    max_attempts=info.max_delivery_attempts, new_handle=lambda: next(handles),
                    read_at=lambda off, qid=qid: _record_at(store, topic, qid, off),
                    read_from=lambda off, n, qid=qid: store.get_messages(topic, qid, off, n, filt))
                if not plan.changes_state:
                    continue
                key = {"group": group, "topic": topic, "queue": qid}
                events.append({"kind": "pop", **key, "base": base, "until": until,
                               "skip_to": plan.skip_to,
                               "items": [[x.offset, x.attempt, x.handle, x.message_group]
                                         for x in plan.deliveries]})
                for offset, entry, record in plan.dead:
                    dead_letters.append(dead_letter(record, group, entry.attempt))
                    events.append({"kind": "ack", **key, "offset": offset, "handle": entry.handle})
                for offset, entry in plan.vanished:
                    events.append({"kind": "ack", **key, "offset": offset, "handle": entry.handle})
                deliveries += [(qid, x) for x in plan.deliveries]
            if dead_letters:
                consumers.topics.ensure(dlq_topic(group), 1)
            if events:
                consumers.commit(master, events, dead_letters)
            # When the long poll waits for a delivery to become visible again. Only an empty
            # attempt waits, and only these queues can deliver: scanning every in-flight entry
            # of the state on each receive cost O(deliveries in flight) per call.
            next_expiry = None if deliveries else min(
                (i.invisible_until for qid in queues
                 if (qs := state.queue(group, topic, qid)) is not None
                 for i in qs.inflight.values()), default=None)
        invisible = Duration(seconds=invisible_ms // 1000, nanos=invisible_ms % 1000 * 1_000_000)
        for qid, x in deliveries:
            response = s.ReceiveMessageResponse()
            sp = record_to_v2(x.record, out=response.message).system_properties
            sp.receipt_handle = receipt.encode(self.receipt_key, topic, group, qid, x.offset,
                                               x.handle)
            sp.delivery_attempt = x.attempt
            sp.invisible_duration.CopyFrom(invisible)
            out.append(response)
        return out, next_expiry

    # -- AckMessage ---------------------------------------------------------------------------
    def ack(self, request: s.AckMessageRequest) -> s.AckMessageResponse:
        master, results, pending = self._ack_commit(request)
        status = self.consumers.wait(master, pending) if pending is not None else OK
        return _ack_answer(results, status)

    async def ack_async(self, request: s.AckMessageRequest) -> s.AckMessageResponse:
        """ack() on the event loop, for a master whose wait is awaitable there
        (MasterRole.puts_on_loop): the commit runs on the loop, the wait is awaited."""
        master, results, pending = self._ack_commit(request)
        status = await self.consumers.wait_async(master, pending) if pending is not None else OK
        return _ack_answer(results, status)

    def _ack_commit(self, request: s.AckMessageRequest
                    ) -> tuple["MasterRole", list[tuple[s.AckMessageEntry, d.Status | None]],
                               Pending | None]:
        """The acks committed: (master, each entry with its refusal or None, what to wait for,
        None when no entry was valid)."""
        group = _group(request.group)
        topic, _ = self._topic(request.topic)
        if not request.entries:
            raise V2Error(d.BAD_REQUEST, "no entries to acknowledge")
        consumers = self.consumers
        master = consumers.ensure_loaded()
        results: list[tuple[s.AckMessageEntry, d.Status | None]] = []
        items = []
        with consumers.lock:
            for entry in request.entries:
                try:
                    r = self._current(group, topic, entry.receipt_handle)
                except V2Error as e:
                    results.append((entry, e.status()))
                    continue
                items.append([r.queue_id, r.offset, r.handle])
                results.append((entry, None))
            # one record for every valid entry: one append, one dispatch by reput and one
            # wait for the request, not one per entry
            pending = consumers.commit(master, [{"kind": "acks", "group": group, "topic": topic,
                                                 "items": items}]) if items else None
        return master, results, pending

    def _current(self, group: str, topic: str, text: str) -> receipt.Receipt:
        """The receipt of a delivery still in flight (call with the lock held)."""
        try:
            r = receipt.decode(self.receipt_key, text, topic, group)
        except receipt.BadReceiptHandle as e:
            raise V2Error(d.INVALID_RECEIPT_HANDLE, str(e)) from None
        q = self.consumers.state.queue(group, topic, r.queue_id)
        entry = q.inflight.get(r.offset) if q is not None else None
        if entry is None or entry.handle != r.handle:
            raise V2Error(d.INVALID_RECEIPT_HANDLE,
                          f"receipt handle {text} is expired: the message was acked, "
                          f"redelivered or its invisibility changed since")
        return r

    # -- ChangeInvisibleDuration --------------------------------------------------------------
    def change_invisible(self, request: s.ChangeInvisibleDurationRequest
                         ) -> s.ChangeInvisibleDurationResponse:
        group = _group(request.group)
        topic, _ = self._topic(request.topic)
        # 0 is allowed: push consumers nack with their backoff delay, often below the
        # receive minimum
        invisible = self._invisible_ms(request.invisible_duration, "invisible_duration", 0)
        consumers = self.consumers
        master = consumers.ensure_loaded()
        with consumers.lock:
            r = self._current(group, topic, request.receipt_handle)
            new = consumers.state.next_handle
            pending = consumers.commit(master, [{
                "kind": "change", "group": group, "topic": topic, "queue": r.queue_id,
                "offset": r.offset, "handle": r.handle, "new_handle": new,
                "until": self._clock.now_ms() + invisible}])
        # a waiting receive planned its wake-up from the old expiry: let one recompute it
        self.waiter.poke(topic, group)
        status = consumers.wait(master, pending)
        return s.ChangeInvisibleDurationResponse(
            status=status,
            receipt_handle=receipt.encode(self.receipt_key, topic, group, r.queue_id, r.offset, new))

    # -- ForwardMessageToDeadLetterQueue ------------------------------------------------------
    def forward_to_dlq(self, request: s.ForwardMessageToDeadLetterQueueRequest
                       ) -> s.ForwardMessageToDeadLetterQueueResponse:
        group = _group(request.group)
        topic, _ = self._topic(request.topic)
        consumers = self.consumers
        master = consumers.ensure_loaded()
        store = consumers.store
        with consumers.lock:
            r = self._current(group, topic, request.receipt_handle)
            record = _record_at(store, topic, r.queue_id, r.offset)
            events = [{"kind": "ack", "group": group, "topic": topic, "queue": r.queue_id,
                       "offset": r.offset, "handle": r.handle}]
            copies = []
            if record is not None:
                attempt = consumers.state.queue(group, topic, r.queue_id).inflight[r.offset].attempt
                copies.append(dead_letter(record, group, attempt))
                consumers.topics.ensure(dlq_topic(group), 1)
            pending = consumers.commit(master, events, copies)
        return s.ForwardMessageToDeadLetterQueueResponse(status=consumers.wait(master, pending))

    # -- offsets (pull consumers) -------------------------------------------------------------
    def _queue(self, mq: d.MessageQueue) -> tuple[str, int]:
        topic, config = self._topic(mq.topic)
        count = max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= mq.id < count:
            raise V2Error(d.BAD_REQUEST, f"queue {mq.id} of topic {topic} is not in [0, {count})")
        return topic, mq.id

    def update_offset(self, request: s.UpdateOffsetRequest) -> s.UpdateOffsetResponse:
        group = _group(request.group)
        topic, qid = self._queue(request.message_queue)
        if request.offset < 0:
            raise V2Error(d.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        high = self.consumers.store.max_offset_in_queue(topic, qid)
        if request.offset > high:
            raise V2Error(d.ILLEGAL_OFFSET, f"offset {request.offset} is beyond the end {high} "
                                            f"of {topic} queue {qid}")
        self.consumers.ensure_loaded()
        self.consumers.group(group)
        status = self.consumers.change([{"kind": "offset", "group": group, "topic": topic,
                                         "queue": qid, "offset": request.offset}])
        return s.UpdateOffsetResponse(status=status)

    def get_offset(self, request: s.GetOffsetRequest) -> s.GetOffsetResponse:
        group = _group(request.group)
        topic, qid = self._queue(request.message_queue)
        self.consumers.ensure_loaded()
        with self.consumers.lock:
            q = self.consumers.state.queue(group, topic, qid)
            offset = q.committed if q is not None else None
        if offset is None:
            raise V2Error(d.OFFSET_NOT_FOUND, f"group {group} has no offset for {topic} "
                                              f"queue {qid}")
        return s.GetOffsetResponse(status=OK, offset=offset)


def _record_at(store, topic: str, queue_id: int, offset: int) -> MessageRecord | None:
    result = store.get_messages(topic, queue_id, offset, 1)
    for record in result.messages:
        if record.queue_offset == offset:
            return record
    return None


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def dead_letter(record: MessageRecord, group: str, attempts: int) -> Message:
    """The DLQ copy of a message: same body, tag, keys and unique id, with RocketMQ's origin
    properties, in %DLQ%<group> queue 0. Not waited for (a lost copy is redelivered)."""
    props = dict(record.properties)
    props.update({"RETRY_TOPIC": record.topic, "DLQ_ORIGIN_TOPIC": record.topic,
                  "DLQ_ORIGIN_MESSAGE_ID": record.uniq_key or record.msg_id,
                  "ORIGIN_MESSAGE_ID": record.uniq_key or record.msg_id,
                  "RECONSUME_TIME": str(attempts), "WAIT": "false"})
    for transient in ("REAL_TOPIC", "REAL_QID", "DELAY", "TIMER_DELIVER_MS"):
        props.pop(transient, None)
    return Message(topic=dlq_topic(group), body=bytes(record.body), queue_id=0,
                   properties=props, flag=record.flag, born_timestamp=record.born_timestamp,
                   born_host=record.born_host, reconsume_times=attempts)


def _ack_answer(results: list[tuple[s.AckMessageEntry, d.Status | None]], status: d.Status
                ) -> s.AckMessageResponse:
    """Each entry with its refusal, or the commit's status; the call's status is theirs when
    they agree, MULTIPLE_RESULTS otherwise."""
    answer = s.AckMessageResponse()
    codes = set()
    for entry, refused in results:
        st = refused or status
        codes.add(st.code)
        answer.entries.append(s.AckMessageResultEntry(
            message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st))
    if len(codes) == 1:
        only = answer.entries[0].status
        answer.status.CopyFrom(only)
    else:
        answer.status.CopyFrom(d.Status(code=d.MULTIPLE_RESULTS,
                                        message="entries have different results"))
    return answer
