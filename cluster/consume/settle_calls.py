"""The v2 calls that settle a delivery by its receipt handle, on a master: AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue (ReceiveMessage and the offsets are
ConsumerCalls', consumer_calls.py; what both need is a ConsumeContext). Each is a coroutine on
the server's event loop: it checks the request and the handle, commits one state change under
the consumer service's lock (no waiting), then awaits, outside it, the flush/replication policy
(MasterRole's Appended: the slaves' acks arrive on the same loop).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from google.protobuf.duration_pb2 import Duration

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.json_config import TopicConfig

from cluster.consume import receipt
from cluster.consume.consumer_service import ConsumerService, settled
from cluster.consume.dead_letter import dead_letter, dlq_topic, record_at
from cluster.v2.convert import check_group_resource, check_topic_resource
from cluster.v2.v2_status import V2Error

if TYPE_CHECKING:
    from cluster.v2.long_poll import DispatchWaiter
    from master.master_role import Appended

OK = d.Status(code=d.OK, message="OK")


@dataclass(frozen=True)
class ConsumeSettings:
    """What a consumer call may ask for (the receive's batch and long poll, invisible
    durations of a receive or a nack): the node's limits, shared by ConsumerCalls."""
    min_invisible_ms: int = 10_000  # RocketMQ 5 proxy's minInvisibleTimeMillsForRecv
    auto_renew_invisible_ms: int = 60_000  # proxy's defaultInvisibleTimeMills (auto_renew)
    max_invisible_ms: int = 12 * 3600_000
    max_long_polling_ms: int = 30_000
    max_batch_size: int = 1024
    # ReceiveMessages answers every delivery in one message: its records add up to at most
    # this (the first goes out whatever its size), a quarter of the 64 MiB both the node's
    # answers and the client's channel allow. The v2 stream sends one message per response.
    max_answer_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 0 < self.min_invisible_ms <= self.max_invisible_ms:
            raise ValueError(f"minInvisibleTimeMillsForRecv={self.min_invisible_ms} must be in "
                             f"(0, {self.max_invisible_ms}]")
        if self.max_answer_bytes <= 0:
            raise ValueError(f"max_answer_bytes {self.max_answer_bytes} must be > 0")


def duration_ms(value: Duration) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def group_name(resource: d.Resource) -> str:
    name = check_group_resource(resource)
    if not name:
        raise V2Error(d.ILLEGAL_CONSUMER_GROUP, "the consumer group is required")
    return name


class ConsumeContext:
    """What every consumer call of a master works with, and the lookups they share: the
    consumer service (whose lock guards the consumer state), the receipt handles issued with
    the group's shared key, the dispatch waiter (poked when a delivery becomes visible again)
    and the consume settings. Owns no state of its own; SettleCalls and ConsumerCalls hold
    one each (the same)."""

    def __init__(self, consumers: ConsumerService, waiter: "DispatchWaiter",
                 settings: ConsumeSettings, *, receipt_key: bytes) -> None:
        self.consumers = consumers
        self.receipt_key = receipt_key  # the group's shared key: handles survive failover
        self.handles = receipt.IssuedHandles(receipt_key)
        self.waiter = waiter
        self.settings = settings

    @property
    def clock(self):
        return self.consumers.clock

    def topic(self, resource: d.Resource) -> tuple[str, TopicConfig]:
        """A call's topic and its config (TOPIC_NOT_FOUND when there is none)."""
        topic = check_topic_resource(resource)
        topics = self.consumers.topics
        config = topics.get(topic)
        if config is None:
            queues = self.consumers.store.consume_queues()
            config = topics.learn(topic, (cq.queue_id for cq in queues if cq.topic == topic))
        if config is None:
            raise V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        return topic, config

    def invisible_ms(self, value: Duration, what: str, minimum: int | None = None) -> int:
        """An invisible duration within the settings' bounds (ILLEGAL_INVISIBLE_TIME)."""
        ms = duration_ms(value)
        st = self.settings
        low = st.min_invisible_ms if minimum is None else minimum
        if value.nanos < 0 or not low <= ms <= st.max_invisible_ms:
            raise V2Error(d.ILLEGAL_INVISIBLE_TIME,
                          f"{what} {ms} ms is not in [{low}, {st.max_invisible_ms}]")
        return ms

    def carried_ack(self, request: s.AckMessageRequest) -> "CarriedAck":
        """An AckMessage after the request's own checks (V2Error when refused); its entries
        are checked later, under the lock, by CarriedAck.check."""
        group = group_name(request.group)
        topic, _ = self.topic(request.topic)
        if not request.entries:
            raise V2Error(d.BAD_REQUEST, "no entries to acknowledge")
        return CarriedAck(self.current, request, group, topic)

    def current(self, group: str, topic: str, text: str) -> receipt.Receipt:
        """The receipt of a delivery still in flight (call with the lock held)."""
        try:
            r = self.handles.decode(text, topic, group)
        except receipt.BadReceiptHandle as e:
            raise V2Error(d.INVALID_RECEIPT_HANDLE, str(e)) from None
        q = self.consumers.state.queue(group, topic, r.queue_id)
        entry = q.inflight.get(r.offset) if q is not None else None
        if entry is None or entry.handle != r.handle:
            raise V2Error(d.INVALID_RECEIPT_HANDLE,
                          f"receipt handle {text} is expired: the message was acked, "
                          f"redelivered or its invisibility changed since")
        return r


class SettleCalls:
    """AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue of a master
    (the module doc), as coroutines. Holds its ConsumeContext; owns no state."""

    def __init__(self, context: ConsumeContext) -> None:
        self.context = context

    # -- AckMessage ---------------------------------------------------------------------------
    async def ack(self, request: s.AckMessageRequest) -> s.AckMessageResponse:
        """The acks of the valid entries in one record, committed, then awaited."""
        carried = self.context.carried_ack(request)
        consumers = self.context.consumers
        master = await consumers.loaded()
        with consumers.lock:
            event = carried.check()
            # one record for every valid entry: one append, one dispatch by reput and one
            # wait for the request, not one per entry
            appended = consumers.commit(master, [event]) if event is not None else None
        status = settled(await appended) if appended is not None else OK
        return ack_answer(carried.results, status)

    # -- ChangeInvisibleDuration --------------------------------------------------------------
    async def change_invisible(self, request: s.ChangeInvisibleDurationRequest
                               ) -> s.ChangeInvisibleDurationResponse:
        ctx = self.context
        group = group_name(request.group)
        topic, _ = ctx.topic(request.topic)
        # 0 is allowed: push consumers nack with their backoff delay, often below the
        # receive minimum
        invisible = ctx.invisible_ms(request.invisible_duration, "invisible_duration", 0)
        consumers = ctx.consumers
        master = await consumers.loaded()
        with consumers.lock:
            r = ctx.current(group, topic, request.receipt_handle)
            new = consumers.state.next_handle
            appended = consumers.commit(master, [{
                "kind": "change", "group": group, "topic": topic, "queue": r.queue_id,
                "offset": r.offset, "handle": r.handle, "new_handle": new,
                "until": ctx.clock.now_ms() + invisible}])
        # a waiting receive planned its wake-up from the old expiry: let one recompute it
        ctx.waiter.poke(topic, group)
        handle = ctx.handles.encode(topic, group, r.queue_id, r.offset, new)
        return s.ChangeInvisibleDurationResponse(status=settled(await appended),
                                                 receipt_handle=handle)

    # -- ForwardMessageToDeadLetterQueue ------------------------------------------------------
    async def forward_to_dlq(self, request: s.ForwardMessageToDeadLetterQueueRequest
                             ) -> s.ForwardMessageToDeadLetterQueueResponse:
        ctx = self.context
        group = group_name(request.group)
        topic, _ = ctx.topic(request.topic)
        consumers = ctx.consumers
        master = await consumers.loaded()
        store = consumers.store
        with consumers.lock:
            r = ctx.current(group, topic, request.receipt_handle)
            record = record_at(store, topic, r.queue_id, r.offset)
            events = [{"kind": "ack", "group": group, "topic": topic, "queue": r.queue_id,
                       "offset": r.offset, "handle": r.handle}]
            copies = []
            if record is not None:
                attempt = consumers.state.queue(group, topic, r.queue_id).inflight[r.offset].attempt
                copies.append(dead_letter(record, group, attempt))
                consumers.topics.ensure(dlq_topic(group), 1)
            appended = consumers.commit(master, events, copies)
        return s.ForwardMessageToDeadLetterQueueResponse(status=settled(await appended))


class CarriedAck:
    """An AckMessage whose request passed its own checks, on its way to a commit: AckMessage
    commits it alone, AckAndReceive in the same append as its receive's deliveries
    (ConsumerCalls). `check()`, with the consumer service's lock held, checks each entry's
    handle against the state and returns the one `acks` event of the valid ones (None when
    none is); `results` then holds each entry with its refusal or None. Used by one call."""

    def __init__(self, current: Callable[[str, str, str], receipt.Receipt],
                 request: s.AckMessageRequest, group: str, topic: str) -> None:
        self.current = current  # ConsumeContext.current: a handle's delivery still in flight
        self.request, self.group, self.topic = request, group, topic
        self.results: list[tuple[s.AckMessageEntry, d.Status | None]] = []
        self.acked: dict[int, set[int]] = {}  # queue id -> offsets of the valid entries
        self.checked = False  # check() ran (the entries were looked at under the lock)
        self.committed = False  # its event (if any) was appended and applied
        self.appended: "Appended | None" = None  # what to wait for; None: nothing appended

    def check(self) -> dict | None:
        self.checked = True
        items = []
        for entry in self.request.entries:
            try:
                r = self.current(self.group, self.topic, entry.receipt_handle)
            except V2Error as e:
                self.results.append((entry, e.status()))
                continue
            items.append([r.queue_id, r.offset, r.handle])
            self.acked.setdefault(r.queue_id, set()).add(r.offset)
            self.results.append((entry, None))
        if not items:
            return None
        return {"kind": "acks", "group": self.group, "topic": self.topic, "items": items}

    def commit(self, appended: "Appended | None") -> None:
        """Its event (if check() made one) was appended, as `appended`."""
        self.appended, self.committed = appended, True


def ack_answer(results: list[tuple[s.AckMessageEntry, d.Status | None]], status: d.Status
               ) -> s.AckMessageResponse:
    """Each entry with its refusal, or the commit's status; the call's status is theirs when
    they agree, MULTIPLE_RESULTS otherwise."""
    answer = s.AckMessageResponse()
    codes = set()
    add = answer.entries.add  # in place: an entry built apart is copied again when appended
    for entry, refused in results:
        st = refused or status
        codes.add(st.code)
        out = add()
        out.message_id = entry.message_id
        out.receipt_handle = entry.receipt_handle
        out.status.CopyFrom(st)
    if len(codes) == 1:
        only = answer.entries[0].status
        answer.status.CopyFrom(only)
    else:
        answer.status.CopyFrom(d.Status(code=d.MULTIPLE_RESULTS,
                                        message="entries have different results"))
    return answer
