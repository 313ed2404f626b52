"""The v2 calls that settle a delivery by its receipt handle, on a master: AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue (ConsumerCalls, consumer_calls.py,
adds ReceiveMessage and the offsets). Each checks the request and the handle, commits one state
change under the consumer service's lock, then waits outside it for the flush/replication
policy: in the calling thread, or awaited on the event loop (the `_async` forms, for a master
whose waits can be awaited there, MasterRole.puts_on_loop).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from google.protobuf.duration_pb2 import Duration

from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.json_config import TopicConfig

from cluster.consume import receipt
from cluster.consume.consumer_service import ConsumerService
from cluster.consume.dead_letter import dead_letter, dlq_topic, record_at
from cluster.v2.convert import check_group_resource, check_topic_resource
from cluster.v2.v2_status import V2Error

if TYPE_CHECKING:
    from cluster.v2.long_poll import DispatchWaiter
    from cluster.replicated.replicated_table import Pending
    from master.master_role import MasterRole

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


class SettleCalls:
    """Holds the consumer service (whose lock guards the consumer state these calls change),
    the receipt key, the dispatch waiter (poked when a delivery becomes visible again) and the
    consume settings; owns no state of its own."""

    def __init__(self, consumers: ConsumerService, waiter: "DispatchWaiter",
                 settings: ConsumeSettings, *, receipt_key: bytes) -> None:
        self.consumers = consumers
        self.receipt_key = receipt_key  # the group's shared key: handles survive failover
        self.handles = receipt.IssuedHandles(receipt_key)
        self.waiter = waiter
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
        ms = duration_ms(value)
        st = self.settings
        low = st.min_invisible_ms if minimum is None else minimum
        if value.nanos < 0 or not low <= ms <= st.max_invisible_ms:
            raise V2Error(d.ILLEGAL_INVISIBLE_TIME,
                          f"{what} {ms} ms is not in [{low}, {st.max_invisible_ms}]")
        return ms

    # -- AckMessage ---------------------------------------------------------------------------
    def ack(self, request: s.AckMessageRequest) -> s.AckMessageResponse:
        master, results, pending = self._ack_commit(request)
        status = self.consumers.wait(master, pending) if pending is not None else OK
        return ack_answer(results, status)

    async def ack_async(self, request: s.AckMessageRequest) -> s.AckMessageResponse:
        """ack() on the event loop, for a master whose wait is awaitable there
        (MasterRole.puts_on_loop): the commit runs on the loop, the wait is awaited."""
        master, results, pending = self._ack_commit(request)
        status = await self.consumers.wait_async(master, pending) if pending is not None else OK
        return ack_answer(results, status)

    def _ack_commit(self, request: s.AckMessageRequest
                    ) -> tuple["MasterRole", list[tuple[s.AckMessageEntry, d.Status | None]],
                               Pending | None]:
        """The acks committed: (master, each entry with its refusal or None, what to wait for,
        None when no entry was valid)."""
        carried = self._carried_ack(request)
        consumers = self.consumers
        master = consumers.ensure_loaded()
        with consumers.lock:
            event = carried.check()
            # one record for every valid entry: one append, one dispatch by reput and one
            # wait for the request, not one per entry
            pending = consumers.commit(master, [event]) if event is not None else None
        return master, carried.results, pending

    def _carried_ack(self, request: s.AckMessageRequest) -> "CarriedAck":
        """The request's own checks (V2Error when refused); its entries are checked later,
        under the lock, by CarriedAck.check."""
        group = group_name(request.group)
        topic, _ = self._topic(request.topic)
        if not request.entries:
            raise V2Error(d.BAD_REQUEST, "no entries to acknowledge")
        return CarriedAck(self._current, request, group, topic)

    def _current(self, group: str, topic: str, text: str) -> receipt.Receipt:
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

    # -- ChangeInvisibleDuration --------------------------------------------------------------
    def change_invisible(self, request: s.ChangeInvisibleDurationRequest
                         ) -> s.ChangeInvisibleDurationResponse:
        master, pending, handle = self._change_commit(request)
        return s.ChangeInvisibleDurationResponse(status=self.consumers.wait(master, pending),
                                                 receipt_handle=handle)

    async def change_invisible_async(self, request: s.ChangeInvisibleDurationRequest
                                     ) -> s.ChangeInvisibleDurationResponse:
        """change_invisible() on the event loop (see ack_async)."""
        master, pending, handle = self._change_commit(request)
        return s.ChangeInvisibleDurationResponse(
            status=await self.consumers.wait_async(master, pending), receipt_handle=handle)

    def _change_commit(self, request: s.ChangeInvisibleDurationRequest
                       ) -> tuple["MasterRole", "Pending", str]:
        """The change committed: (master, what to wait for, the delivery's new handle)."""
        group = group_name(request.group)
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
        return master, pending, self.handles.encode(topic, group, r.queue_id, r.offset, new)

    # -- ForwardMessageToDeadLetterQueue ------------------------------------------------------
    def forward_to_dlq(self, request: s.ForwardMessageToDeadLetterQueueRequest
                       ) -> s.ForwardMessageToDeadLetterQueueResponse:
        master, pending = self._dlq_commit(request)
        return s.ForwardMessageToDeadLetterQueueResponse(
            status=self.consumers.wait(master, pending))

    async def forward_to_dlq_async(self, request: s.ForwardMessageToDeadLetterQueueRequest
                                   ) -> s.ForwardMessageToDeadLetterQueueResponse:
        """forward_to_dlq() on the event loop (see ack_async)."""
        master, pending = self._dlq_commit(request)
        return s.ForwardMessageToDeadLetterQueueResponse(
            status=await self.consumers.wait_async(master, pending))

    def _dlq_commit(self, request: s.ForwardMessageToDeadLetterQueueRequest
                    ) -> tuple["MasterRole", "Pending"]:
        group = group_name(request.group)
        topic, _ = self._topic(request.topic)
        consumers = self.consumers
        master = consumers.ensure_loaded()
        store = consumers.store
        with consumers.lock:
            r = self._current(group, topic, request.receipt_handle)
            record = record_at(store, topic, r.queue_id, r.offset)
            events = [{"kind": "ack", "group": group, "topic": topic, "queue": r.queue_id,
                       "offset": r.offset, "handle": r.handle}]
            copies = []
            if record is not None:
                attempt = consumers.state.queue(group, topic, r.queue_id).inflight[r.offset].attempt
                copies.append(dead_letter(record, group, attempt))
                consumers.topics.ensure(dlq_topic(group), 1)
            pending = consumers.commit(master, events, copies)
        return master, pending


class CarriedAck:
    """An AckMessage whose request passed its own checks, on its way to a commit: AckMessage
    commits it alone, AckAndReceive in the same append as its receive's deliveries
    (ConsumerCalls). `check()`, with the consumer service's lock held, checks each entry's
    handle against the state and returns the one `acks` event of the valid ones (None when
    none is); `results` then holds each entry with its refusal or None. Used by one call."""

    def __init__(self, current: Callable[[str, str, str], receipt.Receipt],
                 request: s.AckMessageRequest, group: str, topic: str) -> None:
        self.current = current  # SettleCalls._current: a handle's delivery still in flight
        self.request, self.group, self.topic = request, group, topic
        self.results: list[tuple[s.AckMessageEntry, d.Status | None]] = []
        self.acked: dict[int, set[int]] = {}  # queue id -> offsets of the valid entries
        self.checked = False  # check() ran (the entries were looked at under the lock)
        self.committed = False  # its event (if any) was appended and applied
        self.master: "MasterRole | None" = None  # the master that appended it
        self.pending: "Pending | None" = None  # what to wait for; None: nothing appended

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

    def appended(self, master: "MasterRole", pending: "Pending | None") -> None:
        """Its event (if check() made one) was appended, by `master`, as `pending`."""
        self.master, self.pending, self.committed = master, pending, True


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
